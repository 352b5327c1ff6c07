"""Execute every notebook in ``notebooks/`` with a small budget and check that no cell fails.

The notebooks read ``KAMELEON_NOTEBOOK_FAST=1`` and then sample with a smoke-test budget.
They run in a fresh ``python3`` kernel of the running interpreter, with ``notebooks/`` as
working directory. The executed notebooks are never written back: the saved ones keep
their full-budget outputs.
"""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.kernelspec import NATIVE_KERNEL_NAME, KernelSpecManager  # noqa: E402
from jupyter_client.manager import AsyncKernelManager  # noqa: E402

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 600  # seconds per cell


class _RunningInterpreterKernelSpecs(KernelSpecManager):
    """Resolve the kernel "python3" to ipykernel in the interpreter running the tests.

    An installed kernel spec of the same name (e.g. a user-level one pointing at another
    Python) could otherwise run the notebook in an environment without this package.
    """

    def get_kernel_spec(self, kernel_name):
        if kernel_name != NATIVE_KERNEL_NAME:
            return super().get_kernel_spec(kernel_name)
        from ipykernel.kernelspec import RESOURCES, get_kernel_dict

        spec = get_kernel_dict()  # argv[0] is sys.executable
        return self.kernel_spec_class(
            resource_dir=RESOURCES,
            argv=spec["argv"],
            display_name=spec["display_name"],
            language=spec["language"],
            metadata=spec.get("metadata", {}),
        )


def _errors(nb):
    return [
        f"cell {i}: {out.get('ename')}: {out.get('evalue')}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]


def test_notebooks_found():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
    # The kernel inherits the environment when it starts, so set it before creating the client.
    monkeypatch.setenv("KAMELEON_NOTEBOOK_FAST", "1")
    nb = nbformat.read(path, as_version=4)
    km = AsyncKernelManager(
        kernel_name=NATIVE_KERNEL_NAME, kernel_spec_manager=_RunningInterpreterKernelSpecs()
    )
    client = nbclient.NotebookClient(
        nb,
        km=km,
        kernel_name=NATIVE_KERNEL_NAME,
        timeout=CELL_TIMEOUT,
        allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{path.name} failed in fast mode:\n{err}")
    assert not _errors(nb), _errors(nb)
