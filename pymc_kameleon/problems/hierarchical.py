"""Hierarchical and latent-variable models (real-posteriors catalogue).

- eight schools, centred (a funnel) and non-centred, the latter also from a user's bad start;
- :func:`mixture`: a two-component Gaussian mixture, marginalised, with ordered means;
- :func:`gp_hyperparameters`: the hyperparameters of a 1-d GP regression (the GP marginalised).

The builders return ``(model, reference, initvals)`` (see :mod:`~pymc_kameleon.problems.reference`).
"""

import numpy as np
import pymc as pm

from pymc_kameleon.problems.reference import NutsReference

__all__ = [
    "eight_schools_centred",
    "eight_schools_noncentred",
    "eight_schools_noncentred_far_start",
    "gp_hyperparameters",
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
