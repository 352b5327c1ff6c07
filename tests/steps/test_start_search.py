"""start="search" (the default): before tuning each chain searches from prior draws and starts in the
best plausible basin it reached; the evaluations are counted; flat priors, priors that cannot be
drawn, pseudo-marginal models and funnels keep a sensible start."""

import warnings

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import GPDelayedAcceptanceMH, KameleonMetropolis
from pymc_kameleon.core.starts import SEARCH_EVALS_PER_DIM
from pymc_kameleon.steps.starts import SEARCH_CANDIDATES
from pymc_kameleon.testing import SAMPLE_KW, gaussian_data_model, latent_gaussian_model


def _minor_mode_start():
    """N(0, 10^2) priors; the likelihood has its major mode at (5, 5) and a narrow minor one at
    (-5, -5), 60 nats lower; every chain starts in the minor one."""
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 10.0, shape=2, initval=np.array([-5.0, -5.0]))
        major = -0.5 * pm.math.sum((x - 5.0) ** 2)
        minor = -60.0 - 0.5 * pm.math.sum(((x + 5.0) / 0.2) ** 2)
        pm.Potential("lik", pm.math.logaddexp(major, minor))
    return model


def _sample(model, step, *, tune=400, draws=200, chains=2, seed=3, **kwargs):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(step=step(), tune=tune, draws=draws, chains=chains, cores=1, random_seed=seed,
                         discard_tuned_samples=False, **SAMPLE_KW, **kwargs)


@pytest.mark.parametrize("cls", [KameleonMetropolis, GPDelayedAcceptanceMH])
def test_chains_started_in_a_minor_mode_find_the_posterior(cls):
    """Per-chain tuning, so no rescue can help: the search alone moves each chain to the major mode.
    The control (start="initial_point") stays in the minor mode, 60 nats down."""
    idata = _sample(_minor_mode_start(), lambda: cls(tuning="per_chain"))
    assert np.abs(idata.posterior["x"].values - 5.0).max() < 5.0
    control = _sample(_minor_mode_start(), lambda: cls(tuning="per_chain", start="initial_point"))
    assert np.abs(control.posterior["x"].values + 5.0).max() < 1.0


def test_the_search_evaluations_are_counted_at_the_first_step():
    idata = _sample(_minor_mode_start(), KameleonMetropolis)
    first = idata.warmup_sample_stats["logp_evals"].values[:, 0]
    budget = SEARCH_CANDIDATES * SEARCH_EVALS_PER_DIM * 2
    assert ((first > 20) & (first <= budget + SEARCH_CANDIDATES * 20 + 2)).all(), first
    plain = _sample(_minor_mode_start(), lambda: KameleonMetropolis(start="initial_point"))
    assert (plain.warmup_sample_stats["logp_evals"].values[:, 0] <= 2).all()


def _centred_funnel():
    """Eight-schools-like centred hierarchy: the joint density is unbounded as tau -> 0."""
    y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    s = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, shape=8)
        pm.Normal("y", theta, s, observed=y)
    return model


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_search_never_starts_a_chain_in_a_funnels_neck(seed):
    """Powell runs into the neck (log tau -> -inf, the density growing without bound); the plausible box
    (the range of 100 prior draws, widened) keeps every chain's start out of it."""
    idata = _sample(_centred_funnel(), KameleonMetropolis, tune=50, draws=10, chains=4, seed=seed)
    first_tau = idata.warmup_posterior["tau"].values[:, 0]
    assert (first_tau > 1e-3).all(), first_tau


def test_flat_priors_and_priors_without_a_generator_are_handled():
    """A flat prior's candidates are the start jittered (its coordinates unbounded); a prior PyMC cannot
    draw from (a CustomDist with a logp only) leaves the chain at its start, without an error."""
    with pm.Model() as flat:
        x = pm.Flat("x", shape=2)
        pm.Potential("lik", -0.5 * pm.math.sum((x - 3.0) ** 2))
    idata = _sample(flat, KameleonMetropolis)
    assert np.abs(idata.warmup_posterior["x"].values[:, 0] - 3.0).max() < 0.5
    with pm.Model() as custom:
        pm.CustomDist("x", logp=lambda value: -0.5 * (value - 3.0) ** 2, initval=0.0)
    idata = _sample(custom, KameleonMetropolis)
    assert (idata.warmup_sample_stats["logp_evals"].values[:, 0] <= 2).all()


def test_pseudo_marginal_models_keep_their_start():
    """A noisy estimate is no objective for a search."""
    idata = _sample(latent_gaussian_model(), KameleonMetropolis, tune=20, draws=10)
    assert (idata.warmup_sample_stats["logp_evals"].values[:, 0] <= 2).all()


def test_a_nonsensical_start_option_is_refused():
    with gaussian_data_model(), pytest.raises(ValueError, match="start must be one of"):
        KameleonMetropolis(start="optimise")
    with gaussian_data_model(), pytest.raises(ValueError, match="start must be one of"):
        GPDelayedAcceptanceMH(start=None)


def test_a_prior_draw_that_raises_leaves_the_chain_at_its_start(monkeypatch):
    """Whatever a model's prior draw raises, sampling goes on from the given start (the control: the
    same model searches when drawing works)."""
    from pymc_kameleon.steps import starts

    def broken(**kwargs):
        def draw(seed):
            raise RuntimeError("a simulator that cannot run at this prior draw")
        return draw

    searched = _sample(_minor_mode_start(), KameleonMetropolis, tune=20, draws=5)
    assert (searched.warmup_sample_stats["logp_evals"].values[:, 0] > 20).all()
    monkeypatch.setattr(starts, "make_initial_point_fn", broken)
    idata = _sample(_minor_mode_start(), KameleonMetropolis, tune=20, draws=5)
    assert (idata.warmup_sample_stats["logp_evals"].values[:, 0] <= 2).all()
