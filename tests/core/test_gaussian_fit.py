"""The Gaussian fitted to evaluated log densities (core/adaptation/gaussian_fit.py): exact on a Gaussian,
the whitening's where a direction has no curvature, and the buffer it is fitted from."""

import math

import numpy as np
import pytest
from scipy.stats import multivariate_normal, multivariate_t

from pymc_kameleon.core.adaptation.gaussian_fit import (
    FIT_MAX_DIM,
    EvaluatedPoints,
    fit_gaussian,
    quadratic_terms,
)
from pymc_kameleon.core.kameleon.scale_free import INDEPENDENCE_DF
from pymc_kameleon.core.proposals import IndependenceProposal

MEAN = np.array([0.7, -1.2, 0.3])
COV = np.array([[2.0, 0.9, -0.4], [0.9, 1.0, 0.2], [-0.4, 0.2, 0.5]])


def test_the_fit_of_a_gaussians_log_density_is_that_gaussian():
    """Points that are not draws of it (a uniform box), values log N(z; MEAN, COV) + 5: the fit
    returns MEAN and chol(COV) to rounding."""
    z = np.random.default_rng(0).uniform(-2, 2, size=(200, 3))
    fit = fit_gaussian(z, multivariate_normal(MEAN, COV).logpdf(z) + 5.0, INDEPENDENCE_DF)
    np.testing.assert_allclose(fit.mean, MEAN, atol=1e-9)
    np.testing.assert_allclose(fit.chol @ fit.chol.T, COV, atol=1e-9)
    assert fit.log_det == pytest.approx(0.5 * np.linalg.slogdet(COV)[1], abs=1e-9)


def test_a_direction_without_curvature_keeps_the_whitening():
    """log pi = -z1^2 / (2 * 0.25) + 0.3 z2 (flat in z2, only a slope): z1 gets variance 0.25 about 0,
    z2 the whitening's variance 1 about 0 (not the slope's unbounded mode)."""
    z = np.random.default_rng(1).normal(size=(30, 2))
    fit = fit_gaussian(z, -2.0 * z[:, 0] ** 2 + 0.3 * z[:, 1], INDEPENDENCE_DF)
    np.testing.assert_allclose(fit.chol @ fit.chol.T, np.diag([0.25, 1.0]), atol=1e-9)
    np.testing.assert_allclose(fit.mean, [0.0, 0.0], atol=1e-9)


def test_no_fit_without_a_clear_curvature_or_enough_points_near_the_top():
    z = np.random.default_rng(2).normal(size=(30, 2))
    # a bowl upside down: no curvature
    assert fit_gaussian(z, 0.5 * (z**2).sum(axis=1), INDEPENDENCE_DF) is None
    # 7 points for 6 unknowns (1.2 per unknown needed); 8 are enough
    assert fit_gaussian(z[:7], -0.5 * (z[:7] ** 2).sum(axis=1), INDEPENDENCE_DF) is None
    assert fit_gaussian(z[:8], -0.5 * (z[:8] ** 2).sum(axis=1), INDEPENDENCE_DF) is not None
    # far below the top the points are left out: too few remain
    values = -0.5 * (z**2).sum(axis=1)
    values[5:] -= 1000.0
    assert fit_gaussian(z, values, INDEPENDENCE_DF) is None


def test_the_fitted_shape_draws_what_its_density_states():
    """The shape (an IndependenceProposal) draws z = b + A u, u ~ t_10: mean b, covariance A A' 10 / 8
    within Monte Carlo error; point_log_density is the t density of A^-1 (z - b) with the Jacobian."""
    fit = IndependenceProposal(MEAN, np.linalg.cholesky(COV), INDEPENDENCE_DF)
    rng = np.random.default_rng(3)
    draws = np.array([fit.draw(rng) for _ in range(40_000)])
    se = np.sqrt(np.diag(COV) * 10 / 8 / draws.shape[0])
    assert np.all(np.abs(draws.mean(axis=0) - MEAN) < 4 * se)
    np.testing.assert_allclose(np.cov(draws, rowvar=False), COV * 10 / 8, atol=0.06)
    z = np.array([1.0, 0.5, -0.2])
    assert fit.point_log_density(z) == pytest.approx(
        multivariate_t(MEAN, COV, df=INDEPENDENCE_DF).logpdf(z), rel=1e-12
    )


def test_the_buffer_keeps_the_last_finite_evaluations():
    buffer = EvaluatedPoints(2)
    assert buffer.capacity == 1000  # max(1000, 4 * 6)
    for k in range(1005):
        buffer.add(np.array([k, -k]), -float(k))
    buffer.add(np.array([1.0, 1.0]), -math.inf)
    buffer.add(np.array([1.0, 1.0]), math.nan)
    assert len(buffer) == 1000 and buffer.enough
    assert sorted(-buffer.values)[:2] == [5.0, 6.0] and buffer.points[:, 0].max() == 1004
    assert not EvaluatedPoints(3).enough
    few = EvaluatedPoints(2)  # 6 unknowns: enough from 1.2 x 6 = 7.2 points
    for k in range(8):
        few.add(np.array([k, 1.0]), 0.0)
        assert few.enough == (k + 1 >= 8)
    big = EvaluatedPoints(FIT_MAX_DIM + 1)
    big.add(np.zeros(FIT_MAX_DIM + 1), 0.0)
    assert big.capacity == 0 and len(big) == 0 and not big.enough
    assert quadratic_terms(17) == 171
