"""pytest hooks and fixtures: one BLAS thread, the slow tests shared between the two stacks
(``--slow-share``), and the ``z_scores`` fixture. The helpers the tests import are in
:mod:`pymc_kameleon.testing`."""

import os

# One BLAS thread (the Makefile sets this too; here for a bare `pytest`, where it only helps if
# NumPy is not imported yet): small dense linear algebra is much slower multi-threaded.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

# ------------------------------------------------------------------ slow tests shared between stacks
# `make test` runs the two stacks side by side on a 2-core machine, and running every slow statistical
# test on both took CI past 30 minutes. There each slow test runs on one stack: these modules' on
# PyMC 5 (the stack `make demo` and the benchmarks use), every other module's on PyMC 6. Every test not
# marked slow (contracts, exact ratios, proposal densities, notebooks, Dask) runs on both, and
# `make test-pymc5` / `make test-pymc6` alone (or a bare `pytest`) run everything.
SLOW_ON_PYMC5 = (
    "tests/steps/test_robustness.py",  # the models people bring
    "tests/test_benchmarks.py",  # the benchmark scripts' quick modes
    "tests/test_kass_benchmark.py",
    "tests/smc/test_kass.py",  # 95 s: moved when the PyMC 6 share took CI past 25 minutes (1682 s)
    # Its Dask runs that compare draws with serial ones (230 s) became slow tests, shared to balance
    # the stacks; the cluster's contract tests (chunks, retries, errors, shutdown) still run on both.
    "tests/test_distributed.py",
)
# The notebooks' smoke runs (not marked slow, 2 minutes a stack) are shared too: these on PyMC 5, the
# others on PyMC 6, except NOTEBOOKS_ON_BOTH, whose ArviZ plots differ between ArviZ 0.x and 1.
NOTEBOOKS = "tests/test_notebooks.py"
NOTEBOOKS_ON_PYMC5 = ("02_pseudo_marginal_gp_classification.ipynb", "06_scaling_out.ipynb")
NOTEBOOKS_ON_BOTH = ("01_kameleon_nonlinear_targets.ipynb",)


def pytest_addoption(parser):
    parser.addoption(
        "--slow-share",
        choices=("all", "pymc5", "pymc6"),
        default="all",
        help="run all slow tests (default), or only this stack's share of them (see SLOW_ON_PYMC5)",
    )


def _share_of(nodeid):
    return "pymc5" if nodeid.split("::")[0] in SLOW_ON_PYMC5 else "pymc6"


def _notebook_share(nodeid):
    """The stack a notebook's smoke run is on under ``--slow-share`` ("both", "pymc5" or "pymc6")."""
    name = nodeid.rsplit("[", 1)[-1].rstrip("]")
    if "[" not in nodeid or name in NOTEBOOKS_ON_BOTH:
        return "both"
    return "pymc5" if name in NOTEBOOKS_ON_PYMC5 else "pymc6"


def _elsewhere(item, share) -> bool:
    """Whether ``item`` runs on the other stack only under ``--slow-share={share}``."""
    if item.nodeid.split("::")[0] == NOTEBOOKS:
        return _notebook_share(item.nodeid) not in (share, "both")
    return item.get_closest_marker("slow") is not None and _share_of(item.nodeid) != share


def pytest_configure(config):
    share = config.getoption("--slow-share")
    if share != "all":
        from importlib.metadata import version

        major = version("pymc").split(".")[0]
        if share != f"pymc{major}":
            raise pytest.UsageError(f"--slow-share={share} on PyMC {version('pymc')}: use pymc{major}.")


def pytest_collection_modifyitems(config, items):
    share = config.getoption("--slow-share")
    if share == "all":
        return
    theirs = [_elsewhere(it, share) for it in items]
    if any(theirs):
        config.hook.pytest_deselected(items=[it for it, t in zip(items, theirs) if t])
        items[:] = [it for it, t in zip(items, theirs) if not t]


def pytest_report_header(config):
    share = config.getoption("--slow-share")
    if share != "all":
        return (
            f"slow tests and notebooks: this stack's share only (--slow-share={share}); the other stack runs "
            "the rest"
        )


@pytest.fixture
def z_scores():
    """:func:`pymc_kameleon.testing.invariance_z_scores`."""
    from pymc_kameleon.testing import invariance_z_scores

    return invariance_z_scores
