"""``make demo`` (examples/demo.py) shows our steps' warnings, readably, and hides other libraries'."""

import importlib.util
import warnings
from pathlib import Path

import pytest

from pymc_kameleon import KameleonMetropolis, KameleonWarning
from pymc_kameleon.problems.targets import banana

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.py"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_shows_the_steps_warnings(demo):
    """The demo ignored every UserWarning while sampling, ours included: a step that said its tuning was
    too short (or its chains disagreed) went unheard. Two chains in two processes: the warnings come
    back from the workers."""
    with pytest.warns(UserWarning, match=r"^KameleonMetropolis: tuning took 100 steps, fewer than"):
        idata = demo.run(
            banana(dim=8, b=0.1, v=100.0), KameleonMetropolis, "short", chains=2, tune=100, draws=20
        )
    # The demo's count of our evaluations: every tuning step and draw of both chains, one each at least.
    evaluations = demo.log_density_evaluations("KameleonMetropolis", idata, 8)
    assert evaluations == idata.sample_stats["cumulative_logp_evals"].values[:, -1].sum() >= 2 * (100 + 20)
    metropolis = demo.log_density_evaluations("pm.Metropolis", idata, 8)
    assert metropolis == 2 * 8 * demo.CHAINS * (demo.TUNE + demo.DRAWS)


def test_demo_hides_other_libraries_user_warnings_and_prints_ours_without_a_file(demo):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with demo.our_warnings_only():
            warnings.warn("PyTensor could not link to a BLAS installation.", UserWarning, stacklevel=1)
            warnings.warn("KASS: the moves barely mixed.", KameleonWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["KASS: the moves barely mixed."]
    text = demo.short_warning(caught[0].message, KameleonWarning, "/some/multiprocessing/connection.py", 251)
    assert text == "KameleonWarning: KASS: the moves barely mixed.\n"
