"""Regressions and GLMs with unstandardised predictors, as users bring them (real-posteriors catalogue).

- :func:`regression_income`: linear regression on income in dollars (sigma unknown, or known and
  the posterior exact);
- :func:`logistic_glm`: logistic regression on age in years and income in dollars;
- :func:`logistic_uncentred`, :func:`logistic_uncentred_far_start`: four uncentred predictors of
  scales 0.1 to 100, posterior correlations up to -0.985;
- :func:`regression_mixed_scales`: 15 correlated predictors of scales 1e-3 to 1e3 (17 parameters);
- :func:`unstandardised_regression`: the steps' robustness tests' regression on income (other data
  and priors than :func:`regression_income`), with its exact moments by quadrature
  (:func:`unstandardised_regression_reference`) and a far start.

The builders return ``(model, reference, initvals)`` (see :mod:`~pymc_kameleon.problems.reference`);
:func:`unstandardised_regression` returns the model alone, as its tests use it.
"""

from functools import partial

import numpy as np
import pymc as pm

from pymc_kameleon.problems.reference import NutsReference

__all__ = [
    "UNSTANDARDISED_REGRESSION_FAR_START",
    "logistic_glm",
    "logistic_uncentred",
    "logistic_uncentred_far_start",
    "regression_income",
    "regression_mixed_scales",
    "unstandardised_regression",
    "unstandardised_regression_reference",
]


def _income_data(n=200):
    rng = np.random.default_rng(20250101)
    income = np.round(rng.uniform(1e4, 1e5, n), 2)  # dollars
    y = 1.0 + 2e-5 * income + rng.normal(0.0, 0.5, n)
    return income, y


def regression_income(known_sigma: bool = False):
    """Linear regression on income in dollars (n = 200): intercept, slope and, optionally, sigma.

    The slope's posterior sd is about 1e-6 and the intercept's about 0.1, strongly correlated
    (income is not centred). With sigma known (= 0.5, issue 16's case) the posterior is Gaussian
    and the reference is exact.
    """
    income, y = _income_data()
    with pm.Model() as model:
        b0 = pm.Normal("b0", 0.0, 10.0)
        b1 = pm.Normal("b1", 0.0, 1.0)  # per dollar
        sigma = 0.5 if known_sigma else pm.HalfNormal("sigma", 5.0)
        pm.Normal("y", b0 + b1 * income, sigma, observed=y)
    if not known_sigma:
        return model, None, None
    # Conjugate Gaussian posterior, computed in rescaled coordinates (X'X spans 1e0..1e12).
    X = np.column_stack([np.ones_like(income), income])
    precision = X.T @ X / 0.5**2 + np.diag([1 / 10.0**2, 1.0])
    s = 1.0 / np.sqrt(np.diag(precision))
    cov = s[:, None] * np.linalg.inv(s[:, None] * precision * s[None, :]) * s[None, :]
    mean = cov @ (X.T @ y / 0.5**2)
    sd = np.sqrt(np.diag(cov))
    return model, {"b0": (mean[0], sd[0]), "b1": (mean[1], sd[1])}, None


def _logistic_data(n=300):
    rng = np.random.default_rng(20250102)
    age = rng.uniform(20.0, 70.0, n)  # years
    income = np.round(rng.lognormal(np.log(50_000.0), 0.5, n), 2)  # dollars
    logit = -4.0 + 0.05 * age + 3e-5 * income
    return age, income, rng.binomial(1, 1.0 / (1.0 + np.exp(-logit)))


def _logistic_model(rescaled: bool):
    """The GLM; ``rescaled=True`` samples the slopes in units of 10 years and $10 000 (the same posterior)."""
    age, income, y = _logistic_data()
    scale_age, scale_income = (10.0, 1e4) if rescaled else (1.0, 1.0)
    with pm.Model() as model:
        b0 = pm.Normal("b0", 0.0, 10.0)
        if rescaled:  # b = u / scale with u ~ N(0, scale) is b ~ N(0, 1)
            b_age = pm.Deterministic("b_age", pm.Normal("u_age", 0.0, scale_age) / scale_age)
            b_income = pm.Deterministic("b_income", pm.Normal("u_income", 0.0, scale_income) / scale_income)
        else:
            b_age = pm.Normal("b_age", 0.0, 1.0)
            b_income = pm.Normal("b_income", 0.0, 1.0)
        pm.Bernoulli("y", logit_p=b0 + b_age * age + b_income * income, observed=y)
    return model


def logistic_glm():
    """Logistic regression (n = 300) on age in years and income in dollars, both unstandardised.

    The reference is NUTS on the same posterior with the slopes rescaled: on the model as written,
    NUTS from PyMC's default (jittered) start diverged on every draw (R-hat 6.7).
    """
    reference = NutsReference(
        "logistic-glm",
        partial(_logistic_model, rescaled=True),
        "the same posterior with the slopes sampled in units of 10 years and $10 000 "
        "(b = u / scale, u ~ N(0, scale)); b_age and b_income are Deterministics",
    )
    return _logistic_model(rescaled=False), reference, None


# Predictors N(0, 1), N(50, 10), N(0, 100), N(3, 0.1): uncentred, so the intercept is correlated
# with the slopes (-0.985 with b[3]); the smallest eigenvalue of the posterior correlation is ~1e-3.
_UNCENTRED_LOCATION = np.array([0.0, 50.0, 0.0, 3.0])
_UNCENTRED_SCALE = np.array([1.0, 10.0, 100.0, 0.1])
_UNCENTRED_FAR_START = {"a": 8.0, "b": np.array([-5.0, 3.0, 2.0, -8.0])}


def _uncentred_logistic_data(n=300):
    rng = np.random.default_rng(20261126)
    X = _UNCENTRED_LOCATION + _UNCENTRED_SCALE * rng.normal(size=(n, 4))
    logit = 0.5 + X @ np.array([1.0, 0.04, 0.01, -1.0])
    return X, rng.binomial(1, 1.0 / (1.0 + np.exp(-logit)))


def _uncentred_logistic_model(standardised: bool):
    """``standardised=True`` is the same posterior on centred, scaled predictors, for NUTS: the slopes
    are b = u / scale with u ~ N(0, 10 scale), and the intercept a = c - sum(b location) has its
    N(0, 10) prior as a Potential (c is flat; (c, u) -> (a, b) has a constant Jacobian)."""
    X, y = _uncentred_logistic_data()
    with pm.Model() as model:
        if standardised:
            u = pm.Normal("u", 0.0, 10.0 * _UNCENTRED_SCALE, shape=4)
            b = pm.Deterministic("b", u / _UNCENTRED_SCALE)
            c = pm.Flat("c")
            a = pm.Deterministic("a", c - pm.math.dot(b, _UNCENTRED_LOCATION))
            pm.Potential("a_prior", pm.logp(pm.Normal.dist(0.0, 10.0), a))
            logit = c + pm.math.dot((X - _UNCENTRED_LOCATION) / _UNCENTRED_SCALE, u)
        else:
            a = pm.Normal("a", 0.0, 10.0)
            b = pm.Normal("b", 0.0, 10.0, shape=4)
            logit = a + pm.math.dot(X, b)
        pm.Bernoulli("y", logit_p=logit, observed=y)
    return model


_UNCENTRED_REFERENCE = NutsReference(
    "logistic-uncentred",
    partial(_uncentred_logistic_model, standardised=True),
    "the same posterior on centred, scaled predictors (a and b are Deterministics)",
)


def logistic_uncentred():
    """Logistic regression (n = 300) on four uncentred predictors of scales 0.1 to 100, priors N(0, 10):
    posterior correlations up to -0.985, which shrinking a window's covariance toward its diagonal
    misses (docs/decisions/0010-persistent-strong-correlation-shrinkage.md)."""
    return _uncentred_logistic_model(standardised=False), _UNCENTRED_REFERENCE, None


def logistic_uncentred_far_start():
    """The same posterior started at a = 8, b = (-5, 3, 2, -8): logits in the hundreds."""
    return _uncentred_logistic_model(standardised=False), _UNCENTRED_REFERENCE, _UNCENTRED_FAR_START


def regression_mixed_scales():
    """Linear regression (n = 200) on 15 correlated predictors of scales 1e-3 to 1e3: 17 parameters.

    The predictors share three latent factors (pairwise correlations -0.87 to 0.88); each slope's
    prior is N(0, 10 / scale) in its predictor's units, so the posterior sds span about 1e-4 to 1e3
    and the slopes are strongly correlated. A new user's model (found 2026-11-26): with 3000 tuning
    steps every gradient-free step mixed too slowly here, and not every seed warned.
    """
    rng = np.random.default_rng(3)
    n, p = 200, 15
    loadings = rng.normal(size=(p, 3))
    z = rng.normal(size=(n, 3)) @ loadings.T + 0.5 * rng.normal(size=(n, p))
    scales = np.array([1e-3, 1e-3, 1e-2, 0.1, 1, 1, 1, 10, 100, 1e3, 1e3, 1e-3, 1, 1e2, 1e3])
    X = z * scales
    y = 3.0 + X @ (rng.normal(0.0, 0.5, p) / scales) + rng.normal(0.0, 1.0, n)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 10.0)
        b = pm.Normal("b", 0.0, 10.0 / scales, shape=p)
        s = pm.HalfNormal("s", 5.0)
        pm.Normal("y", a + pm.math.dot(X, b), s, observed=y)
    return model, None, None


# ------------------------------------------------------------ the robustness tests' regression
def _unstandardised_regression_data():
    rng = np.random.default_rng(0)
    income = rng.uniform(2e4, 1.5e5, 200)  # dollars
    return income, 0.96 + 2e-5 * income + rng.normal(0, 0.5, 200)


UNSTANDARDISED_REGRESSION_FAR_START = {"b0": 50.0, "b1": -0.01, "sigma": 20.0}


def unstandardised_regression():
    """Linear regression (n = 200) on income in dollars (2e4 to 1.5e5), b1 ~ N(0, 1e-2): a ridge of
    correlation -0.99 between intercept and slope (``tests/steps/test_robustness.py``).

    Returns
    -------
    pymc.Model
        Free variables ``b0``, ``b1`` and ``sigma``; start it at
        :data:`UNSTANDARDISED_REGRESSION_FAR_START` for a start far from the posterior.
    """
    income, y = _unstandardised_regression_data()
    with pm.Model() as model:
        b0 = pm.Normal("b0", 0, 100)
        b1 = pm.Normal("b1", 0, 1e-2)
        sigma = pm.HalfNormal("sigma", 5)
        pm.Normal("y", b0 + b1 * income, sigma, observed=y)
    return model


def unstandardised_regression_reference() -> dict:
    """Exact posterior means and sds of :func:`unstandardised_regression`, by quadrature over sigma.

    Given sigma the model is conjugate: with X = [1, income / 1e5] (b1 rescaled to c = 1e5 b1 so
    the 2 x 2 algebra is well conditioned) and prior precision P, the conditional posterior of
    (b0, c) is N(m, A^-1), A = P + X'X / sigma^2, m = A^-1 X'y / sigma^2, and
    log p(y | sigma) = -n log sigma - (log|A| + y'y / sigma^2 - m'Am) / 2 + const. The marginal
    of sigma (HalfNormal(5) prior) is tabulated on a fine grid; (b0, c) is then a mixture of normals.

    Returns
    -------
    dict
        ``{"b0": (mean, sd), "b1": (mean, sd), "sigma": (mean, sd)}``.
    """
    income, y = _unstandardised_regression_data()
    X = np.column_stack([np.ones_like(income), income / 1e5])
    prior_precision = np.diag([1.0 / 100.0**2, 1.0 / (1e-2 * 1e5) ** 2])
    sigma = np.linspace(0.3, 0.8, 4001)
    log_w, means, covs = [], [], []
    for s in sigma:
        A = prior_precision + X.T @ X / s**2
        m = np.linalg.solve(A, X.T @ y / s**2)
        log_w.append(
            -len(y) * np.log(s) - 0.5 * (np.linalg.slogdet(A)[1] + y @ y / s**2 - m @ A @ m) - s**2 / 50.0
        )
        means.append(m)
        covs.append(np.linalg.inv(A))
    w = np.exp(np.array(log_w) - max(log_w))
    w /= w.sum()
    if not (w[0] < 1e-12 and w[-1] < 1e-12):
        raise RuntimeError("the grid does not cover the posterior of sigma")
    means, covs = np.array(means), np.array(covs)
    mean = w @ means
    cov = np.einsum("i,ijk->jk", w, covs + means[:, :, None] * means[:, None, :]) - np.outer(mean, mean)
    sd = np.sqrt(np.diag(cov))
    sigma_mean = float(w @ sigma)
    return {
        "b0": (float(mean[0]), float(sd[0])),
        "b1": (float(mean[1]) / 1e5, float(sd[1]) / 1e5),
        "sigma": (sigma_mean, float(np.sqrt(w @ (sigma - sigma_mean) ** 2))),
    }
