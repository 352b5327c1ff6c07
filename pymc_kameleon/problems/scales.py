"""Gaussians whose coordinates differ in scale by many orders of magnitude (real-posteriors catalogue).

- :func:`two_normals`: two independent normals with sd 1e-3 and 1e3, prior only;
- :func:`normals_5d_scales`: five normals with posterior sds 1e-4 to 1e4;
- :func:`gaussian_50d`: a 50-d correlated Gaussian with sds 0.1 to 10;
- :func:`two_normals_observed`: the steps' robustness tests' two normals (priors 1e-2 and 1e4
  wide, one observation each), exact sds :data:`TWO_NORMALS_OBSERVED_A_SD` and
  :data:`TWO_NORMALS_OBSERVED_B_SD`;
- :func:`flat_ridge`: a 3-d ridge with sds about 1000:4.5 (the end-of-tuning drift's test and
  benchmark), exact sd of each coordinate :data:`FLAT_RIDGE_SD`.

All references are exact. The catalogue's builders return ``(model, reference, initvals)`` (see
:mod:`~pymc_kameleon.problems.reference`); :func:`two_normals_observed` returns the model alone,
as its tests use it.
"""

import math

import numpy as np
import pymc as pm

__all__ = [
    "FLAT_RIDGE_SD",
    "TWO_NORMALS_OBSERVED_A_SD",
    "TWO_NORMALS_OBSERVED_B_SD",
    "flat_ridge",
    "gaussian_50d",
    "normals_5d_scales",
    "two_normals",
    "two_normals_observed",
]


def two_normals():
    """Two independent normals with sd 1e-3 and 1e3 (prior only, no likelihood term)."""
    with pm.Model() as model:
        pm.Normal("a", 0.0, 1e-3)
        pm.Normal("b", 0.0, 1e3)
    return model, {"a": (0.0, 1e-3), "b": (0.0, 1e3)}, None


def normals_5d_scales():
    """Five independent normals with posterior sds 1e-4..1e4, one observation each (vague prior)."""
    sd = np.logspace(-4.0, 4.0, 5)
    observed = 1.0 + 3.0 * sd * np.linspace(-1.0, 1.0, 5)
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 1e6, shape=5)
        pm.Normal("y", x, sd, observed=observed)
    post_var = 1.0 / (1.0 / 1e12 + 1.0 / sd**2)
    post_mean = post_var * observed / sd**2
    return model, {f"x[{i}]": (post_mean[i], math.sqrt(post_var[i])) for i in range(5)}, None


def gaussian_50d():
    """50-d Gaussian, AR(1) correlation 0.9^|i-j| and sds log-spaced from 0.1 to 10 (prior only)."""
    d = 50
    sd = np.logspace(-1.0, 1.0, d)
    corr = 0.9 ** np.abs(np.subtract.outer(np.arange(d), np.arange(d)))
    with pm.Model() as model:
        pm.MvNormal("x", mu=np.zeros(d), cov=corr * np.outer(sd, sd))
    return model, {f"x[{i}]": (0.0, sd[i]) for i in range(d)}, None


# ------------------------------------------------------------- the robustness tests' two normals
# a ~ N(0, 1e-2), b ~ N(0, 1e4) a priori; one observation of each at 0 with sd 1e-3 and 1e3.
# Posterior: independent normals, mean 0, sd 1/sqrt(1/prior_var + 1/lik_var).
TWO_NORMALS_OBSERVED_A_SD = 1.0 / np.sqrt(1e4 + 1e6)
TWO_NORMALS_OBSERVED_B_SD = 1.0 / np.sqrt(1e-8 + 1e-6)


def two_normals_observed():
    """Two independent normals on scales 1e-3 and 1e3, each with one observation at 0.

    Returns
    -------
    pymc.Model
        Free variables ``a`` and ``b``; their posteriors are N(0, :data:`TWO_NORMALS_OBSERVED_A_SD`)
        and N(0, :data:`TWO_NORMALS_OBSERVED_B_SD`).
    """
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1e-2)
        b = pm.Normal("b", 0, 1e4)
        pm.Normal("ya", a, 1e-3, observed=0.0)
        pm.Normal("yb", b, 1e3, observed=0.0)
    return model


#: The posterior sd of each coordinate of :func:`flat_ridge`: the square root of the diagonal of
#: :math:`(I / 1000^2 + 5 \cdot \mathbf{1}\mathbf{1}^\top / 10^2)^{-1}`.
FLAT_RIDGE_SD = 816.5


def flat_ridge(start=None):
    """mu ~ N(0, 1000) in 3-d and five observations of sum(mu) with noise sd 10: a flat ridge, posterior
    sds about 816 along it and 4.5 across it.

    Parameters
    ----------
    start : array of shape (3,), optional
        mu's initial value (PyMC's default, the prior mean, if None).

    Returns
    -------
    pymc.Model
        Free variable ``mu``; each coordinate's posterior sd is :data:`FLAT_RIDGE_SD`.
    """
    y = np.random.default_rng(1).normal(50.0, 10.0, 5)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1000.0, shape=3, initval=None if start is None else np.asarray(start))
        pm.Normal("y", mu.sum(), 10.0, observed=y)
    return model
