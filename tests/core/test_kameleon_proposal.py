"""The Kameleon proposal against closed forms and Monte Carlo (paper eq. (5), Propositions 1-2)."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from pymc_kameleon.core.kameleon.family import KameleonProposal, ProposalAtPoint
from pymc_kameleon.core.kameleon.kernels import GaussianKernel, LinearKernel, Matern32Kernel


@pytest.fixture
def setup():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(15, 3)) * np.array([2.0, 1.0, 0.5])
    y = np.array([0.3, -0.2, 0.1])
    return Z, y


def eq5_covariance(y, Z, sigma, gamma2, nu2):
    """Eq. (5) of the paper, written as its double sums (independent of the implementation)."""
    n, d = Z.shape
    k = np.array([np.exp(-np.sum((z - y) ** 2) / (2 * sigma**2)) for z in Z])
    R = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            R[i, j] = gamma2 * (i == j)
            R[i, j] += 4 * nu2 * (n - 1) / (sigma**4 * n) * sum(
                k[a] ** 2 * (Z[a, i] - y[i]) * (Z[a, j] - y[j]) for a in range(n)
            )
            R[i, j] -= 4 * nu2 / (sigma**4 * n) * sum(
                k[a] * k[b] * (Z[a, i] - y[i]) * (Z[b, j] - y[j])
                for a in range(n)
                for b in range(n)
                if a != b
            )
    return R


def test_gaussian_covariance_matches_eq5(setup):
    Z, y = setup
    sigma, gamma2, nu2 = 1.3, 0.04, 0.7
    prop = KameleonProposal(Z, GaussianKernel(sigma), gamma2, nu2)
    np.testing.assert_allclose(
        prop.covariance(y), eq5_covariance(y, Z, sigma, gamma2, nu2), rtol=1e-12, atol=1e-14
    )


def test_eq5_check_detects_missing_centring(setup):
    """Negative control: the uncentred M M^T (H dropped) does not pass the eq. (5) check."""
    Z, y = setup
    sigma, gamma2, nu2 = 1.3, 0.04, 0.7
    M = 2 * GaussianKernel(sigma).grad(y, Z).T
    wrong = gamma2 * np.eye(3) + nu2 * M @ M.T
    assert not np.allclose(wrong, eq5_covariance(y, Z, sigma, gamma2, nu2), rtol=1e-3)


def test_linear_kernel_reduces_to_adaptive_metropolis(setup):
    Z, y = setup
    gamma2, nu2 = 0.1, 0.3
    prop = KameleonProposal(Z, LinearKernel(), gamma2, nu2)
    centred = Z - Z.mean(axis=0)
    am = gamma2 * np.eye(3) + 4 * nu2 * centred.T @ centred  # gamma^2 I + 4 nu^2 Z^T H Z
    np.testing.assert_allclose(prop.covariance(y), am, rtol=1e-12)
    # ... and it does not depend on the current state.
    np.testing.assert_allclose(prop.covariance(y + 5.0), am, rtol=1e-12)


def _mc_covariance_check(y, Z, kernel, gamma2, nu2, closed_form, n_draws, rng):
    """Draw x = y + M H beta + xi as in the paper's generative story; compare with ``closed_form``.

    Returns the largest standardised deviation of an empirical covariance entry, using
    Var(S_ij) ~= (C_ii C_jj + C_ij^2) / N for Gaussian draws.
    """
    n, d = Z.shape
    M = 2 * kernel.grad(y, Z).T  # d x n
    MH = M - M.mean(axis=1, keepdims=True)  # M H without building H
    beta = rng.normal(scale=np.sqrt(nu2), size=(n_draws, n))
    xi = rng.normal(scale=np.sqrt(gamma2), size=(n_draws, d))
    x = y + beta @ MH.T + xi
    S = np.cov(x, rowvar=False)
    C = closed_form
    se = np.sqrt((np.outer(np.diag(C), np.diag(C)) + C**2) / n_draws)
    return np.max(np.abs(S - C) / se), np.abs(x.mean(axis=0) - y) / np.sqrt(np.diag(C) / n_draws)


@pytest.mark.parametrize("kernel", [GaussianKernel(1.1), Matern32Kernel(1.5), LinearKernel()])
def test_proposition2_monte_carlo(setup, kernel):
    Z, y = setup
    gamma2, nu2 = 0.05, 0.4
    prop = KameleonProposal(Z, kernel, gamma2, nu2)
    z_cov, z_mean = _mc_covariance_check(
        y, Z, kernel, gamma2, nu2, prop.covariance(y), 200_000, np.random.default_rng(1)
    )
    assert z_cov < 5.0
    assert np.all(z_mean < 5.0)


def test_proposition2_monte_carlo_negative_control(setup):
    """The same Monte Carlo check rejects a covariance that forgot the gamma^2 I term."""
    Z, y = setup
    kernel = GaussianKernel(1.1)
    prop = KameleonProposal(Z, kernel, 0.05, 0.4)
    wrong = prop.covariance(y) - 0.05 * np.eye(3)
    z_cov, _ = _mc_covariance_check(y, Z, kernel, 0.05, 0.4, wrong, 200_000, np.random.default_rng(1))
    assert z_cov > 5.0


def test_sampler_and_log_density_agree_with_scipy(setup):
    Z, y = setup
    prop = KameleonProposal(Z, GaussianKernel(1.0), 0.04, 0.5)
    at = prop.at(y)
    C = prop.covariance(y)
    rng = np.random.default_rng(3)
    draws = np.array([at.sample(rng) for _ in range(100_000)])
    S = np.cov(draws, rowvar=False)
    se = np.sqrt((np.outer(np.diag(C), np.diag(C)) + C**2) / draws.shape[0])
    assert np.max(np.abs(S - C) / se) < 5.0
    for x in draws[:5]:
        assert at.log_density(x) == pytest.approx(multivariate_normal(y, C).logpdf(x), rel=1e-12)


def test_batched_covariance_equals_single(setup):
    Z, y = setup
    prop = KameleonProposal(Z, GaussianKernel(0.9), 0.01, 2.0)
    Y = np.stack([y, y + 1.0, Z[0], Z[3] - 0.5])
    covs = prop.covariance_batch(Y)
    for yi, ci in zip(Y, covs):
        np.testing.assert_allclose(ci, prop.covariance(yi), rtol=1e-12, atol=1e-15)
    X = Y[::-1] + 0.1
    expected = [prop.at(yi).log_density(xi) for xi, yi in zip(X, Y)]
    np.testing.assert_allclose(prop.log_density_batch(X, Y), expected, rtol=1e-12)


def test_proposal_is_location_dependent_and_asymmetric(setup):
    """Kameleon is never symmetric: q(x|y) != q(y|x) in general, which is why MH needs both terms."""
    Z, y = setup
    prop = KameleonProposal(Z, GaussianKernel(0.8), 0.01, 1.0)
    x = y + np.array([0.5, -0.3, 0.2])
    assert abs(prop.at(y).log_density(x) - prop.at(x).log_density(y)) > 1e-3


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(gamma2=-1.0, nu2=1.0), "gamma2"),
        (dict(gamma2=0.1, nu2=0.0), "nu2"),
        (dict(gamma2=np.nan, nu2=1.0), "gamma2"),
    ],
)
def test_invalid_scales_raise(setup, kwargs, name):
    Z, _ = setup
    with pytest.raises(ValueError, match=name):
        KameleonProposal(Z, GaussianKernel(1.0), **kwargs)


def test_proposal_at_point_rejects_bad_shapes():
    with pytest.raises(ValueError, match="Z must have shape"):
        KameleonProposal(np.zeros(3), GaussianKernel(1.0), 0.1, 1.0)


def test_zero_rkhs_part_is_jittered_not_crashing():
    """A single-point subsample centres to M H = 0; with gamma = 0 the covariance is 0 and gets jitter."""
    Z = np.ones((1, 2))
    prop = KameleonProposal(Z, GaussianKernel(1.0), 0.0, 1.0)
    at = ProposalAtPoint.from_covariance(np.zeros(2), prop.covariance(np.zeros(2)))
    assert at.jitter > 0
    assert np.isfinite(at.log_density(np.zeros(2)))


@pytest.mark.parametrize("kernel", [GaussianKernel(1.1), Matern32Kernel(1.5)], ids=lambda k: type(k).__name__)
def test_fast_paths_match_generic_gradient_path(setup, kernel):
    """The compiled/expanded M H M^T equals (M H)(M H)^T built from kernel.grad, also far from Z."""
    Z, y = setup
    prop = KameleonProposal(Z + 100.0, kernel, 0.0, 1.0)  # offset data: checks conditioning too
    for point in (y + 100.0, y + 103.0, Z[2] + 100.0):
        A = prop.centred_gradients(point)
        reference = A.T @ A
        scale = np.abs(reference).max()
        np.testing.assert_allclose(prop.rkhs_covariance(point), reference, rtol=0, atol=1e-12 * scale)
        np.testing.assert_allclose(prop.rkhs_covariance_numpy(point), reference, rtol=0, atol=1e-10 * scale)
