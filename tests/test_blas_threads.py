"""Our steps and KASS run their own work, and the model's log density they call, with BLAS limited to one
thread (core.linalg.one_blas_thread): without OPENBLAS_NUM_THREADS=1, a newcomer's
KameleonMetropolis(start="smc") on the 8-d banana took 170 s against 16 s on this project's 2-core
machine under load, the same draws."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.compile.ops import as_op
from threadpoolctl import threadpool_info, threadpool_limits

from pymc_kameleon import KASS, KameleonMetropolis
from pymc_kameleon import GPDelayedAcceptanceMH as GPDA
from pymc_kameleon.testing import SAMPLE_KW

SEEN = []


def _blas_threads() -> int:
    return max(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")


@as_op(itypes=[pt.dscalar], otypes=[pt.dscalar])
def _logp_seeing_threads(mu):
    SEEN.append(_blas_threads())
    return np.asarray(-0.5 * float(mu) ** 2)


def _model():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Potential("lik", _logp_seeing_threads(mu))
    return model


@pytest.mark.parametrize("sampler", ["KameleonMetropolis", "GPDelayedAcceptanceMH", "KASS"])
def test_blas_has_one_thread_inside_our_samplers_and_its_count_after(sampler):
    SEEN.clear()
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        with _model(), pytest.warns(Warning):
            if sampler == "KASS":
                pm.sample_smc(kernel=KASS, draws=100, chains=1, progressbar=False, random_seed=1)
            else:
                step = {"KameleonMetropolis": KameleonMetropolis, "GPDelayedAcceptanceMH": GPDA}
                pm.sample(step=step[sampler](), tune=200, draws=50, chains=1, random_seed=1, **SAMPLE_KW)
        after = _blas_threads()
    if before == 1:
        pytest.skip("this machine's BLAS has one thread at most: nothing to limit")
    assert after == before  # restored
    assert set(SEEN) == {1}, (sampler, sorted(set(SEEN)))  # every evaluation our samplers made
    # The control: the probe sees the session's threads where nothing limits them.
    SEEN.clear()
    with threadpool_limits(limits=2, user_api="blas"):
        _model().compile_logp()({"mu": np.array(0.5)})
    assert SEEN == [before]
