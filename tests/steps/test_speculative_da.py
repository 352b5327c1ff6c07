"""``GPDelayedAcceptanceMH(executor=...)``: speculative exact evaluations on a real process pool give the
serial chain's draws bit for bit, the stats count what the workers did, and misuse gets clear errors.
(On a Dask cluster, with ``cores=2`` too: tests/test_distributed.py.)"""

import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.graph.op import Op

from pymc_kameleon import GPDelayedAcceptanceMH, KameleonWarning, PseudoMarginalPotential
from pymc_kameleon.steps.delayed_acceptance.executor_evaluations import SPECULATION_JUDGED_AFTER
from pymc_kameleon.steps.delayed_acceptance.mh import SPECULATION_MIN_MS
from pymc_kameleon.testing import SAMPLE_KW, gaussian_data_model


def sample(executor=None, tuning="pooled", seed=7, min_ms=0.0, draws=400):
    """``min_ms=0``: speculate at this model's microsecond likelihood (the step's rule is 2 ms)."""
    with gaussian_data_model():
        step = GPDelayedAcceptanceMH(executor=executor, tuning=tuning)
        step._speculation_min_ms = min_ms
        return pm.sample(tune=800, draws=draws, chains=2, cores=1, step=step, random_seed=seed, **SAMPLE_KW)


@pytest.fixture(scope="module")
def pool():
    with ProcessPoolExecutor(1) as pool:
        yield pool


@pytest.mark.parametrize("tuning", ["pooled", "per_chain"])
def test_draws_with_a_process_pool_equal_the_serial_draws(pool, tuning):
    serial = sample(tuning=tuning)
    speculative = sample(pool, tuning=tuning)
    np.testing.assert_array_equal(speculative.posterior["mu"].values, serial.posterior["mu"].values)
    stats, serial_stats = speculative.sample_stats, serial.sample_stats
    np.testing.assert_array_equal(stats["exact_eval"].values, serial_stats["exact_eval"].values)
    # The same count: the start search's runs on the worker and the workers' values count as the
    # chain's own evaluations.
    np.testing.assert_array_equal(stats["logp_evals"].values, serial_stats["logp_evals"].values)
    exact = int(stats["exact_eval"].values.sum())
    prefetched = int(stats["prefetched"].values.sum())
    # One worker: the predicted branch only; most of the draws' exact evaluations were made ahead.
    assert 0.4 * exact < prefetched <= exact
    assert prefetched <= int(stats["speculative_evals"].values.sum()) <= 2 * exact
    assert not serial_stats["prefetched"].values.any() and not serial_stats["speculative_evals"].values.any()
    # Negative control: another seed differs, so the comparison can fail.
    other = sample(seed=8, tuning=tuning)
    assert not np.array_equal(other.posterior["mu"].values, serial.posterior["mu"].values)


def test_a_cheap_likelihood_is_not_speculated(pool):
    """Below SPECULATION_MIN_MS per evaluation (measured during tuning) the draws are not speculated:
    the dry runs and round trips would cost more than they save."""
    assert SPECULATION_MIN_MS == 2.0
    idata = sample(pool, min_ms=SPECULATION_MIN_MS)
    assert not idata.sample_stats["speculative_evals"].values.any()
    np.testing.assert_array_equal(idata.posterior["mu"].values, sample().posterior["mu"].values)


def test_a_factory_of_executors_is_accepted(pool):
    serial = sample()
    np.testing.assert_array_equal(sample(lambda: pool).posterior["mu"].values, serial.posterior["mu"].values)


def test_misuse_gets_clear_errors():
    with gaussian_data_model():
        with pytest.raises(TypeError, match=r"GPDelayedAcceptanceMH: executor must be a concurrent.futures"):
            GPDelayedAcceptanceMH(executor="processes")
    with pm.Model():
        x = pm.Normal("x", 0, 3)
        PseudoMarginalPotential("lik", lambda t, rng: -0.5 * t**2, inputs=[x])
        with pytest.raises(ValueError, match=r"executor=.*PseudoMarginalPotential's estimates are random"):
            GPDelayedAcceptanceMH(executor=lambda: None)
    with pm.Model() as model:
        x = pm.Normal("x", 0, 3)
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", x, s, observed=[0.1, 0.5])
        with pytest.raises(ValueError, match=r"other steps sample.*stale values"):
            GPDelayedAcceptanceMH([x], executor=lambda: None)
    assert model  # the step for all variables is fine
    with model:
        GPDelayedAcceptanceMH(executor=lambda: None)


class _SleepingLikelihood(Op):
    """A normal likelihood of ``mu`` that takes ``ms`` milliseconds (asleep: a worker runs beside it)."""

    itypes, otypes = [pt.dscalar], [pt.dscalar]

    def __init__(self, ms: float):
        self.ms = ms

    def perform(self, node, inputs, outputs):
        time.sleep(1e-3 * self.ms)
        outputs[0][0] = np.asarray(-0.5 * np.sum((OBSERVED - inputs[0]) ** 2))


OBSERVED = np.array([0.3, -0.1, 0.8, 0.4])


def test_speculation_that_costs_more_time_than_it_saves_says_so(pool):
    """At a microsecond likelihood (speculation forced on) the chain's time on its guesses exceeds the
    evaluations they spare: one warning naming the figures and the remedy. The control: at 6 ms per
    likelihood on the same pool it pays, and nothing is said."""
    with pytest.warns(KameleonWarning, match=r"costs more time than it saves: over its first 1\d\d guesses.*"
                      r"ProcessPoolExecutor\(1\), or drop executor=") as said:
        sample(pool)
    assert sum("costs more time than it saves" in str(w.message) for w in said) == 2  # one per chain
    assert sum("Another chain said the same above" in str(w.message) for w in said) == 1
    with pm.Model():
        mu = pm.Normal("mu", 0, 3)
        pm.Potential("lik", _SleepingLikelihood(6.0)(mu))
        step = GPDelayedAcceptanceMH(executor=pool, tuning="per_chain")
        with warnings.catch_warnings():
            warnings.simplefilter("error", KameleonWarning)
            idata = pm.sample(tune=800, draws=1200, chains=1, cores=1, step=step, random_seed=3, **SAMPLE_KW)
    assert idata.sample_stats["speculative_evals"].values.sum() >= SPECULATION_JUDGED_AFTER
