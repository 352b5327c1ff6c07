"""Time series (real-posteriors catalogue): an AR(2) series and a GARCH(1,1) volatility model.

The builders return ``(model, reference, initvals)`` (see :mod:`~pymc_kameleon.problems.reference`).
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.tensor.signal import convolve1d

from pymc_kameleon.problems.reference import NutsReference

__all__ = ["ar2", "garch11"]


def ar2():
    """AR(2) series (n = 200, mean level 10) with intercept, two lags and noise sd unknown."""
    rng = np.random.default_rng(20250103)
    n, c, phi, sigma = 200, 2.0, (1.2, -0.4), 1.0
    y = np.empty(n + 100)
    y[:2] = c / (1 - sum(phi))
    for t in range(2, y.size):
        y[t] = c + phi[0] * y[t - 1] + phi[1] * y[t - 2] + rng.normal(0.0, sigma)
    y = y[100:]
    with pm.Model() as model:
        c_ = pm.Normal("c", 0.0, 10.0)
        phi_ = pm.Normal("phi", 0.0, 1.0, shape=2)
        sigma_ = pm.HalfNormal("sigma", 2.0)
        pm.Normal("y", c_ + phi_[0] * y[1:-1] + phi_[1] * y[:-2], sigma_, observed=y[2:])
    return model, None, None


def _garch11_model():
    """GARCH(1,1) returns (n = 200): mu, omega, alpha, beta; the variance starts at the sample variance.

    The recursion sigma2_t = omega + alpha e_{t-1}^2 + beta sigma2_{t-1} is unrolled in closed form,
    sigma2_t = omega sum_{j<t} beta^j + alpha sum_{s<t} beta^(t-1-s) e_s^2 + beta^t sigma2_0, with a
    convolution by the powers of beta (differentiable, no scan). alpha and beta are Uniform(0, 1);
    stationarity (alpha + beta < 1) is not imposed.
    """
    rng = np.random.default_rng(20250104)
    n, mu, omega, alpha, beta = 200, 0.05, 0.1, 0.15, 0.8
    r = np.empty(n)
    s2 = omega / (1 - alpha - beta)
    for t in range(n):
        r[t] = mu + np.sqrt(s2) * rng.normal()
        s2 = omega + alpha * (r[t] - mu) ** 2 + beta * s2
    s2_0 = float(np.var(r))
    with pm.Model() as model:
        mu_ = pm.Normal("mu", 0.0, 1.0)
        omega_ = pm.HalfNormal("omega", 1.0)
        alpha_ = pm.Uniform("alpha", 0.0, 1.0)
        beta_ = pm.Uniform("beta", 0.0, 1.0)
        powers = beta_ ** pt.arange(n)  # beta^0 .. beta^(n-1)
        lagged = convolve1d((r - mu_) ** 2, powers, mode="full")[: n - 1]  # sum_{s<=t} beta^(t-s) e_s^2
        geometric = pt.cumsum(powers)[: n - 1]  # sum_{j<=t} beta^j
        zero = pt.zeros(1)
        sigma2 = omega_ * pt.concatenate([zero, geometric]) + alpha_ * pt.concatenate([zero, lagged])
        sigma2 = sigma2 + powers * s2_0
        pm.Normal("r", mu_, pt.sqrt(sigma2), observed=r)
    return model


def garch11():
    """GARCH(1,1) on 200 simulated returns (see ``_garch11_model``); a skewed, boundary-hugging posterior."""
    reference = NutsReference("garch11", _garch11_model, target_accept=0.95)
    return _garch11_model(), reference, None
