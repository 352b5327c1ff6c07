"""``GPDelayedAcceptanceMH(executor=...)``: speculative exact evaluations on a real process pool give the
serial chain's draws bit for bit, the stats count what the workers did, and misuse gets clear errors.
(On a Dask cluster, with ``cores=2`` too: tests/test_distributed.py.)"""

import types
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import GPDelayedAcceptanceMH, KameleonWarning, PseudoMarginalPotential
from pymc_kameleon.steps.delayed_acceptance.executor_evaluations import SPECULATION_JUDGED_AFTER
from pymc_kameleon.steps.delayed_acceptance.mh import SPECULATION_MIN_MS
from pymc_kameleon.testing import SAMPLE_KW, gaussian_data_model

NOT_AHEAD = "does not evaluate the draws' likelihoods ahead"


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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = sample(pool, min_ms=SPECULATION_MIN_MS)
    assert not idata.sample_stats["speculative_evals"].values.any()
    np.testing.assert_array_equal(idata.posterior["mu"].values, sample().posterior["mu"].values)
    # Said once for the two chains, with the figure and the remedy (a new user's pool cost 1.7 s, silently).
    said = [str(w.message) for w in caught if NOT_AHEAD in str(w.message)]
    assert len(said) == 1 and "below the 2 ms" in said[0] and "Drop executor=" in said[0]
    # Negative control: where the draws are speculated, nothing of the kind is said.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sample(pool)
    assert not [w for w in caught if NOT_AHEAD in str(w.message)]


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


def test_speculation_that_costs_more_time_than_it_saves_says_so(pool):
    """At a microsecond likelihood (speculation forced on) the chain's time on its guesses exceeds the
    evaluations they spare, on a real process pool: one warning per chain naming the figures and the
    remedy, the second in short. A local pool is not told to become one (a new user's
    ProcessPoolExecutor(2) had been told to pass ProcessPoolExecutor(1))."""
    with pytest.warns(KameleonWarning, match=r"costs more time than it saves: over its first 1\d\d guesses.*"
                      r"A local pool's workers need idle cores of their own.*drop executor=") as said:
        sample(pool, draws=800)
    assert sum("costs more time than it saves" in str(w.message) for w in said) == 2  # one per chain
    assert sum("Another chain said the same above" in str(w.message) for w in said) == 1


@pytest.mark.parametrize("spent, warned", [(0.30, False), (0.70, True)])
def test_whether_speculation_pays_by_hand(spent, warned):
    """The rule, on fixed figures (whether a run pays depends on the machine's load, so the control is
    here): 98 guesses used of 100 at 7 ms per evaluation spare 0.686 s; 0.30 s spent making them and 0.1 s
    waiting for them pay (nothing said), 0.70 s do not (said once, with the figures: 7 ms per guess made,
    1 ms waited per guess used)."""
    from pymc_kameleon.core.delayed_acceptance.speculation import Prefetch

    with gaussian_data_model():
        step = GPDelayedAcceptanceMH()
    prefetch = Prefetch(submit=None, evaluate_here=None)
    prefetch.submitted, prefetch.used = SPECULATION_JUDGED_AFTER, 98
    prefetch.seconds_spent, prefetch.seconds_waited = spent, 0.098
    assert prefetch.seconds_saved(7e-3) == pytest.approx(0.686 - spent - 0.098)
    step.likelihood_ms = 7.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step._check_speculation_pays(prefetch)
        step._check_speculation_pays(prefetch)  # judged once
    said = [str(w.message) for w in caught if "costs more time than it saves" in str(w.message)]
    assert len(said) == int(warned)
    if warned:
        assert "spent 7 ms per guess making them and waited 1 ms per guess it used" in said[0]
        assert "A local pool's workers" in said[0]  # no executor given here: not a distributed one
        # A Dask executor is told of its round trip and of a local pool instead.
        step._speculation_judged = step._speculation_warned = False
        step.executor = types.SimpleNamespace(distributed=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step._check_speculation_pays(prefetch)
        (dask,) = [str(w.message) for w in caught if "costs more time than it saves" in str(w.message)]
        assert "Dask's: 10-20 ms" in dask and "ProcessPoolExecutor(1)" in dask
