"""MLDA whose fine model has a PseudoMarginalPotential (the likelihood only estimated) and an exact coarse
model: the fine level is then a pseudo-marginal MH step whose proposal is the coarse subchain's end
(reversible for the coarse density, independent of the estimates), so keeping the current state's
estimate makes the chain exact. Invariance on the latent Gaussian model with a coarse posterior 1 sd off,
the Monte-Carlo-within-Metropolis negative control, the statistics and what is refused."""

import math
import warnings

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import MLDA, GPLevel, PseudoMarginalPotential
from pymc_kameleon.steps.estimate_noise import NOISE_ESTIMATES
from pymc_kameleon.testing import (
    LATENT_D,
    LATENT_POST_VAR,
    LATENT_Y,
    SAMPLE_KW,
    assert_same_records,
    latent_gaussian_model,
    latent_gaussian_z_scores,
    recorded,
)

Z_MAX = 4.0


def coarse_latent_model(offset_sds: float = 1.0):
    """The latent Gaussian model's exact marginal likelihood (y_j ~ N(theta, 2 I)), its mean moved so
    that its posterior is ``offset_sds`` posterior sds off in theta[0]."""
    shift = np.zeros(LATENT_D)
    shift[0] = offset_sds * math.sqrt(LATENT_POST_VAR)
    with pm.Model() as coarse:
        theta = pm.Normal("theta", 0, 1, shape=LATENT_D)
        pm.Normal("y", theta + shift, math.sqrt(2.0), observed=LATENT_Y)
    return coarse


def sample_latent(step_class=MLDA, *, seed=5, tune=1000, draws=2500, chains=4, cores=1, correlated=False):
    model, coarse = latent_gaussian_model(), coarse_latent_model()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = step_class(coarse_models=[coarse], subsampling_rates=3)
        return pm.sample(draws=draws, tune=tune, chains=chains, cores=cores, step=step, random_seed=seed,
                         **SAMPLE_KW)


def test_statistics_count_the_estimates_and_each_level():
    idata = sample_latent(tune=100, draws=100, chains=1, cores=1)
    stats = idata.sample_stats
    calls = stats["estimator_calls"].values
    fine = stats["logp_evals"].values
    # One estimate per fine evaluation, none at the kept state, but for the end-of-tuning noise check's,
    # counted in the first draw's calls.
    np.testing.assert_array_equal(calls[:, 1:], fine[:, 1:])
    np.testing.assert_array_equal(calls[:, 0], fine[:, 0] + NOISE_ESTIMATES)
    assert np.all(np.isfinite(stats["loglik_estimate"].values))
    assert np.all(stats["level0_subchain_length"].values == 3)
    moved = stats["accepted"].values.astype(bool)
    kept = stats["loglik_estimate"].values[0]
    # The kept estimate changes only when the state moves.
    assert np.all(kept[1:][~moved[0, 1:]] == kept[:-1][~moved[0, 1:]])


def test_same_seed_same_draws_and_estimates():
    a = recorded(sample_latent(tune=100, draws=100, chains=2, cores=1))
    assert_same_records(a, recorded(sample_latent(tune=100, draws=100, chains=2, cores=1)))
    assert_same_records(a, recorded(sample_latent(tune=100, draws=100, chains=2, cores=2)))


@pytest.mark.slow
def test_exact_posterior_with_a_noisy_fine_estimator_and_a_biased_coarse_model():
    scores = latent_gaussian_z_scores(sample_latent().posterior["theta"].values)
    assert max(scores.values()) < Z_MAX, scores


class MonteCarloWithinMetropolis(MLDA):
    """Negative control: a fresh estimate at the current state at every step (the kept one forgotten)."""

    def astep(self, q0):
        self._chain.current = None
        self._target._cur = None
        for term in self._target.terms:
            term.op.current.clear()
        return super().astep(q0)


@pytest.mark.slow
def test_negative_control_monte_carlo_within_metropolis_is_wrong():
    """The check the exact chain passes rejects it (measured, seed 5: the mean of theta[0] 17.6 MCSE
    off, towards the coarse posterior; the variances 1.0 and 2.8)."""
    scores = latent_gaussian_z_scores(sample_latent(MonteCarloWithinMetropolis).posterior["theta"].values)
    assert max(scores.values()) > 2 * Z_MAX, scores


def test_a_gp_level_over_a_pseudo_marginal_model_is_refused():
    model, coarse = latent_gaussian_model(), coarse_latent_model()
    with model, pytest.raises(ValueError, match="GPLevel learns from exact values"):
        MLDA(coarse_models=[coarse, GPLevel()])


def test_the_error_model_needs_a_normal_likelihood_in_the_pseudo_marginal_model_too():
    model, coarse = latent_gaussian_model(), coarse_latent_model()
    with model, pytest.raises(ValueError, match="adaptive_error_model=True"):
        MLDA(coarse_models=[coarse], adaptive_error_model=True)


def test_a_pseudo_marginal_fine_model_with_an_observed_normal_too():
    """Exact observed terms beside the estimated one: the estimate is kept, the exact part recomputed."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1, observed=[0.3, 0.5])
        PseudoMarginalPotential("lik", lambda m, rng: float(-0.5 * (m - 0.2) ** 2 + 0.1 * rng.normal()),
                                inputs=[mu])
    with pm.Model() as coarse:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1, observed=[0.3, 0.5, 0.2])
    with model:
        idata = pm.sample(draws=200, tune=200, chains=1, step=MLDA(coarse_models=[coarse]), random_seed=3,
                          **SAMPLE_KW)
    assert 0.05 < idata.sample_stats["accepted"].values.mean() < 1.0


def test_a_tuning_refresh_is_the_state_the_next_step_starts_from():
    """In tuning, 5 rejections in a row redraw the kept estimate (decision 0051): the step's log density
    (``lp``) is then the prior plus the refreshed estimate, at that step and every later one, as at every
    other step. Refreshes happen (an estimator call beyond the fine evaluations) only in tuning."""
    from scipy.stats import norm

    model, coarse = latent_gaussian_model(), coarse_latent_model()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = MLDA(coarse_models=[coarse], subsampling_rates=3)
        idata = pm.sample(draws=200, tune=400, chains=1, cores=1, step=step, random_seed=3,
                          discard_tuned_samples=False, **SAMPLE_KW)
    for posterior, stats, tuning in ((idata.warmup_posterior, idata.warmup_sample_stats, True),
                                     (idata.posterior, idata.sample_stats, False)):
        theta = posterior["theta"].values[0]
        prior = norm.logpdf(theta, 0, 1).sum(axis=1)
        np.testing.assert_allclose(stats["lp"].values[0], prior + stats["loglik_estimate"].values[0],
                                   rtol=1e-10, atol=1e-8)
        extra = stats["estimator_calls"].values[0] - stats["logp_evals"].values[0]
        if not tuning:  # the end-of-tuning noise check's estimates, in the first draw's calls
            assert extra[0] == NOISE_ESTIMATES
            extra = extra[1:]
        assert (extra.max() > 0) == tuning and extra.min() >= 0
