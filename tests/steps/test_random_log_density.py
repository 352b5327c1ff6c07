"""A log density that draws random numbers (a pm.Simulator's ABC likelihood, a Potential that simulates) is
refused by the MCMC steps with the remedy: a new user's KameleonMetropolis chains on a pm.Simulator model
gave posterior means of 0.75 and 0.99 in two runs with the same seed. KASS, a pm.sample_smc kernel like
PyMC's own for a Simulator, still samples it, reproducibly."""

import logging
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import (
    KASS,
    MLDA,
    GPDelayedAcceptanceMALA,
    GPDelayedAcceptanceMH,
    KameleonMetropolis,
)

DATA = np.random.default_rng(0).normal(1.0, 2.0, 50)


def _simulator(rng, mu, sigma, size=None):
    return rng.normal(mu, sigma, size=size)


def simulator_model():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        sigma = pm.HalfNormal("sigma", 5)
        pm.Simulator("s", _simulator, params=(mu, sigma), distance="gaussian", sum_stat="sort", epsilon=1,
                     observed=DATA)
    return model


def normal_model():
    """The control: the same parameters with an exact likelihood."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        sigma = pm.HalfNormal("sigma", 5)
        pm.Normal("y", mu, sigma, observed=DATA)
    return model


def random_potential_model():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        pm.Normal("y", mu, 1, observed=DATA)
        pm.Potential("noisy", -0.5 * (mu - pm.Normal.dist(0, 1)) ** 2)
    return model


STEPS = [KameleonMetropolis, GPDelayedAcceptanceMH, GPDelayedAcceptanceMALA]


@pytest.mark.parametrize("cls", STEPS)
def test_a_simulator_is_refused_with_pm_sample_smc_as_the_remedy(cls):
    with simulator_model():
        with pytest.raises(ValueError, match=r"pm\.Simulator 's'.*random_seed does not seed.*pm\.sample_smc"):
            cls()
    with normal_model():
        cls()  # the control


def test_a_potential_that_draws_is_refused_with_the_pseudo_marginal_remedy():
    with random_potential_model():
        with pytest.raises(ValueError, match="random variable inside a pm.Potential.*PseudoMarginal"):
            KameleonMetropolis()


def test_mlda_refuses_a_simulator_at_either_level():
    exact_coarse, simulated_coarse = normal_model(), simulator_model()
    with simulator_model():
        with pytest.raises(ValueError, match=r"^MLDA: .*pm\.Simulator 's'"):
            MLDA(coarse_models=[exact_coarse])
    with normal_model():
        with pytest.raises(ValueError, match=r"^MLDA: coarse_models\[0\].*pm\.Simulator 's'"):
            MLDA(coarse_models=[simulated_coarse])
        MLDA(coarse_models=[exact_coarse])  # the control


def test_kass_samples_a_simulator_reproducibly():
    means = []
    for _ in range(2):
        with simulator_model():
            idata = pm.sample_smc(kernel=KASS, draws=100, chains=1, progressbar=False, random_seed=3)
        means.append(float(idata.posterior["mu"].mean()))
    assert means[0] == means[1]
    assert abs(means[0] - DATA.mean()) < 1.0


def test_kass_evaluates_a_simulator_one_by_one_without_a_disagreement_warning(caplog):
    with simulator_model():
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # KASS's "disagrees" was a KameleonRuntimeWarning
            with caplog.at_level(logging.INFO, logger="pymc_kameleon"):
                idata = pm.sample_smc(kernel=KASS, draws=100, chains=1, progressbar=False, random_seed=3)
        assert idata.sample_stats.attrs["batch_logp"] == 0
        assert "draws random numbers; evaluating particles one by one" in caplog.text
        with pytest.raises(ValueError, match="batch_logp=True, but the model's log density draws random"):
            pm.sample_smc(kernel=KASS, draws=100, chains=1, progressbar=False, batch_logp=True)
        with ThreadPoolExecutor(1) as executor:
            with pytest.raises(ValueError, match="an executor cannot evaluate a model whose log density"):
                pm.sample_smc(kernel=KASS, draws=100, chains=1, progressbar=False, executor=executor)



def minibatch_model(total_size: bool):
    """A regression on pm.Minibatch slices (a new user's: KASS ran 12 stages and then failed with "the
    particles do not vary ... after resampling", the steps named a Potential or a CustomDist)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=500)
    y = 1.0 + 2.0 * x + rng.normal(size=500)
    x_batch, y_batch = pm.Minibatch(x, y, batch_size=50)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 10)
        b = pm.Normal("b", 0, 10)
        pm.Normal("y", a + b * x_batch, 1.0, observed=y_batch, total_size=500 if total_size else None)
    return model


MINIBATCH_ERROR = r"the data of 'y' come from pm\.Minibatch.*pass the full data"


@pytest.mark.parametrize("total_size", [True, False], ids=["total_size", "plain"])
@pytest.mark.parametrize("cls", STEPS)
def test_minibatch_data_are_named_with_the_full_data_as_the_remedy(cls, total_size):
    with minibatch_model(total_size):
        with pytest.raises(ValueError, match=MINIBATCH_ERROR):
            cls()


@pytest.mark.parametrize("total_size", [True, False], ids=["total_size", "plain"])
def test_kass_refuses_minibatch_data_before_the_first_stage(total_size):
    with minibatch_model(total_size):
        with pytest.raises(ValueError, match=r"^KASS: " + MINIBATCH_ERROR):
            pm.sample_smc(kernel=KASS, draws=100, chains=1, progressbar=False, random_seed=3)
    with normal_model():  # the control: full data
        pm.sample_smc(kernel=KASS, draws=100, chains=1, progressbar=False, random_seed=3)
