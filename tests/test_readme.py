"""The README is a landing page whose example samples well as written, and whose links resolve."""

import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LINKS = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)


def test_the_readme_is_a_short_landing_page():
    assert len(README.splitlines()) <= 220


def test_the_readme_links_only_to_files_in_the_repository():
    local = [link for link in LINKS if not link.startswith(("http://", "https://"))]
    assert local, "the README should link to the guide"
    for link in local:
        assert not link.startswith(("/", "..")), link
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"
    for path in ("../", "shared/", "papers/"):
        assert path not in README, f"README mentions {path!r}, a path outside the repository"


def _example() -> str:
    section = README.split("\n## Example\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the Example section should hold one Python block"
    return blocks[0]


def test_the_example_is_about_ten_lines():
    code = [line for line in _example().splitlines() if line.strip()]
    assert len(code) <= 10


@pytest.mark.slow
def test_the_example_samples_well_as_written(capsys):
    """What the README says of its example: R-hat 1.00 and a bulk ESS above 1000, without a warning
    from the step (the example fixes its seed, so this is one run, not a distribution)."""
    import arviz as az

    namespace = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(_example(), "README.md", "exec"), namespace)
    summary = az.summary(namespace["idata"])
    assert summary["r_hat"].max() <= 1.005, summary
    assert summary["ess_bulk"].min() > 1000, summary
    ours = [str(w.message) for w in caught if str(w.message).startswith("KameleonMetropolis")]
    assert not ours, ours
    assert "ess_bulk" in capsys.readouterr().out  # it printed the summary
