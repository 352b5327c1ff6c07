"""Hierarchical and latent-variable models (real-posteriors catalogue).

- eight schools, centred (a funnel) and non-centred, the latter also from a user's bad start;
- :func:`mixture`: a two-component Gaussian mixture, marginalised, with ordered means;
- :func:`gp_hyperparameters`: the hyperparameters of a 1-d GP regression (the GP marginalised);
- :func:`gp_poisson_latent`: a latent GP under Poisson counts (posteriordb's ``gp_pois_regr``), centred.

The builders return ``(model, reference, initvals)`` (see :mod:`~pymc_kameleon.problems.reference`).
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from pymc_kameleon.problems.reference import NutsReference

__all__ = [
    "eight_schools_centred",
    "eight_schools_noncentred",
    "eight_schools_noncentred_far_start",
    "gp_hyperparameters",
    "gp_poisson_latent",
    "mixture",
]

_SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
_SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def _eight_schools_noncentred_model():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        eta = pm.Normal("eta", 0.0, 1.0, shape=8)
        theta = pm.Deterministic("theta", mu + tau * eta)
        pm.Normal("y", theta, _SCHOOLS_SIGMA, observed=_SCHOOLS_Y)
    return model


_SCHOOLS_REFERENCE = NutsReference(
    "eight-schools",
    _eight_schools_noncentred_model,
    "the non-centred model (theta = mu + tau * eta as a Deterministic)",
    target_accept=0.95,
)


def eight_schools_centred():
    """Eight schools, centred: theta ~ N(mu, tau) (a funnel; NUTS diverges here)."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, shape=8)
        pm.Normal("y", theta, _SCHOOLS_SIGMA, observed=_SCHOOLS_Y)
    return model, _SCHOOLS_REFERENCE, None


def eight_schools_noncentred():
    """Eight schools, non-centred: theta = mu + tau * eta, eta ~ N(0, 1)."""
    return _eight_schools_noncentred_model(), _SCHOOLS_REFERENCE, None


def eight_schools_noncentred_far_start():
    """The non-centred model started at mu = 200, tau = 1000, eta = +-10 (a user's bad guess)."""
    initvals = {"mu": 200.0, "tau": 1000.0, "eta": 10.0 * (-1.0) ** np.arange(8)}
    return _eight_schools_noncentred_model(), _SCHOOLS_REFERENCE, initvals


def mixture():
    """Two-component Gaussian mixture (n = 200), marginalised, with ordered means."""
    rng = np.random.default_rng(20250105)
    n = 200
    z = rng.random(n) < 0.35
    y = np.where(z, rng.normal(-1.0, 0.8, n), rng.normal(2.0, 1.0, n))
    with pm.Model() as model:
        w = pm.Dirichlet("w", np.array([2.0, 2.0]))
        mu = pm.Normal(
            "mu", 0.0, 5.0, shape=2, transform=pm.distributions.transforms.ordered, initval=[-1.0, 1.0]
        )
        sigma = pm.HalfNormal("sigma", 2.0, shape=2)
        pm.NormalMixture("y", w=w, mu=mu, sigma=sigma, observed=y)
    return model, None, None


def gp_hyperparameters():
    """Hyperparameters of a 1-d GP regression (n = 30): length scale, amplitude, noise sd."""
    rng = np.random.default_rng(20250106)
    x = np.sort(rng.uniform(0.0, 10.0, 30))
    y = np.sin(x) + 0.5 * np.sin(2.5 * x) + rng.normal(0.0, 0.3, x.size)
    with pm.Model() as model:
        ell = pm.Gamma("ell", alpha=2.0, beta=1.0)
        eta = pm.HalfNormal("eta", 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        gp = pm.gp.Marginal(cov_func=eta**2 * pm.gp.cov.ExpQuad(1, ls=ell))
        gp.marginal_likelihood("y", X=x[:, None], y=y, sigma=sigma)
    return model, None, None


# posteriordb's data "gp_pois_regr" (simulated; stan-dev/stat_comp_benchmarks, gp_pois_regr.data.R).
_GP_POIS_X = np.arange(-10.0, 11.0, 2.0)
_GP_POIS_K = np.array([40, 37, 29, 12, 4, 3, 9, 19, 77, 82, 33])


def _gp_pois_cov(alpha, rho):
    """Stan's gp_exp_quad_cov(x, alpha, rho) + 1e-10 I on the 11 inputs."""
    d2 = (_GP_POIS_X[:, None] - _GP_POIS_X[None, :]) ** 2
    return alpha**2 * pt.exp(-0.5 * d2 / rho**2) + 1e-10 * np.eye(_GP_POIS_X.size)


def _gp_pois_hyperpriors():
    rho = pm.Gamma("rho", alpha=25.0, beta=4.0)
    alpha = pm.HalfNormal("alpha", 2.0)  # Stan's real<lower=0> alpha ~ normal(0, 2)
    return rho, alpha


def _gp_poisson_noncentred_model():
    """posteriordb's gp_pois_regr.stan as it is: f = L f_tilde, f_tilde ~ N(0, I), f a Deterministic."""
    with pm.Model() as model:
        rho, alpha = _gp_pois_hyperpriors()
        f_tilde = pm.Normal("f_tilde", 0.0, 1.0, shape=_GP_POIS_X.size)
        f = pm.Deterministic("f", pt.linalg.cholesky(_gp_pois_cov(alpha, rho)) @ f_tilde)
        pm.Poisson("k", pt.exp(f), observed=_GP_POIS_K)
    return model


_GP_POIS_REFERENCE = NutsReference(
    "gp-poisson-latent",
    _gp_poisson_noncentred_model,
    "the non-centred model of posteriordb's gp_pois_regr.stan (f = cholesky(K) f_tilde as a Deterministic)",
    target_accept=0.95,
)


def gp_poisson_latent():
    """A latent GP under Poisson counts, centred: posteriordb's ``gp_pois_regr`` as f ~ MVN(0, K).

    N = 11 inputs x = -10, -8, ..., 10 with counts k (posteriordb's data ``gp_pois_regr``, simulated,
    from stan-dev/stat_comp_benchmarks; checked against ``gp_pois_regr.data.R``); rho ~ Gamma(25, 4)
    (rate 4), alpha ~ N(0, 2) truncated at 0, f ~ MVN(0, K) with K = alpha^2 exp(-(x_i - x_j)^2 /
    (2 rho^2)) + 1e-10 I, k ~ Poisson(exp(f)). posteriordb's Stan file is non-centred (f = L f_tilde);
    here f is sampled directly, so its prior couples it to (alpha, rho) and, K being near singular,
    confines it to thin ridges: NUTS diverges here too (R-hat 1.6 at 4 x (3000 + 6000),
    ``benchmarks/results/frontier_before.md``). The NUTS reference samples the non-centred model.

    Returns
    -------
    model : pymc.Model
        Free variables ``rho``, ``alpha`` and ``f`` (11), started at PyMC's initial point (f = 0).
    reference : NutsReference
    initvals : None
    """
    with pm.Model() as model:
        rho, alpha = _gp_pois_hyperpriors()
        f = pm.MvNormal("f", mu=np.zeros(_GP_POIS_X.size), cov=_gp_pois_cov(alpha, rho))
        pm.Poisson("k", pt.exp(f), observed=_GP_POIS_K)
    return model, _GP_POIS_REFERENCE, None


def gp_poisson_latent_noncentred():
    """posteriordb's ``gp_pois_regr`` as its Stan file has it: f = L(alpha, rho) f_tilde, f_tilde ~ N(0, I).

    The same posterior as :func:`gp_poisson_latent` (data, priors and jitter alike), sampled in
    (rho, alpha, f_tilde): 13 parameters whose coupling runs through the likelihood (the first
    f_tilde are pinned by the counts, the last ones, multiplied by K's vanishing Cholesky columns, are
    nearly their prior). NUTS converges here (the reference is this very model); no gradient-free
    sampler did at 4 x (3000 + 6000) before pooled tuning.

    Returns
    -------
    model : pymc.Model
        Free variables ``rho``, ``alpha`` and ``f_tilde`` (11); ``f`` is a Deterministic.
    reference : NutsReference
    initvals : None
    """
    return _gp_poisson_noncentred_model(), _GP_POIS_REFERENCE, None
