"""Every Python block of the guides, the README and the docs' front page can be copied and run as it
stands: it defines or imports every name it uses, unless its first line says it continues the block
before it (a newcomer's walkthrough found blocks that needed imports or a model from elsewhere).

Running the blocks would take minutes each (they sample), so this checks names with ruff's pyflakes
rule F821 (undefined name) and the syntax; what the blocks print is checked by hand, in the guides'
figures."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "docs" / "index.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
# A block that goes on from the one before it says so in its first line, for the reader as for this test.
CONTINUES = re.compile(r"#.*\bcontinues\b")


def code_blocks(text: str) -> list[tuple[int, str]]:
    """The page's Python blocks, as (line of the opening fence, the code a reader runs), where the code
    of a block that continues the one before it starts with that one's."""
    blocks, previous = [], ""
    for match in BLOCK.finditer(text):
        code = match.group(1)
        if CONTINUES.match(code.lstrip().splitlines()[0] if code.strip() else ""):
            code = previous + code
        blocks.append((text[: match.start()].count("\n") + 1, code))
        previous = code
    return blocks


def problems(code: str) -> list[str]:
    """Ruff's syntax errors and undefined names in ``code`` (no project configuration)."""
    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821", "--output-format", "json",
         "--stdin-filename", "block.py", "-"],
        input=code, capture_output=True, text=True, check=False,
    )
    if found.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed: {found.stderr}")
    return sorted({diagnostic["message"] for diagnostic in json.loads(found.stdout)})


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_python_block_runs_as_it_stands(page):
    blocks = code_blocks(page.read_text(encoding="utf-8"))
    failures = {line: found for line, code in blocks if (found := problems(code))}
    assert not failures, (
        f"{page.relative_to(ROOT)}: blocks (by the line of their opening fence) that a reader cannot run "
        f"as they stand; import or define the names, or start the block with a comment saying it continues "
        f"the one before: {failures}"
    )


def test_the_pages_have_python_blocks():
    assert sum(len(code_blocks(page.read_text(encoding="utf-8"))) for page in PAGES) >= 15


def test_a_block_missing_a_name_or_a_colon_is_caught_and_a_continuation_is_not():
    # Negative controls: the check fails where it should, and the continuation marker is what lets a block
    # use the names of the one before.
    page = (
        "```python\nimport pymc as pm\nwith pm.Model() as model:\n    pass\n```\n\ntext\n\n"
        "```python\n# continues the example above\nwith model:\n    idata = pm.sample()\n```\n\n"
        "```python\nwith model:\n    idata = pm.sample()\n```\n"
    )
    (_, first), (_, continued), (_, alone) = code_blocks(page)
    assert problems(first) == []
    assert problems(continued) == []
    assert problems(alone) == ["Undefined name `model`", "Undefined name `pm`"]
    assert problems("with model\n    pass\n") != []
