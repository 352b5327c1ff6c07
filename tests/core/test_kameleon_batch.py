"""Vectorised, chunked Kameleon proposals for many points at once (used by KASS)."""

import time

import numpy as np
import pytest

from pymc_kameleon.core.kameleon.family import KameleonProposal
from pymc_kameleon.core.kameleon.kernels import (
    GaussianKernel,
    Kernel,
    LinearKernel,
    Matern32Kernel,
    Matern52Kernel,
)
from pymc_kameleon.core.linalg import SingularCovarianceError

KERNELS = {
    "gaussian": lambda: GaussianKernel(1.3),
    "matern32": lambda: Matern32Kernel(1.1),
    "matern52": lambda: Matern52Kernel(0.9),
    "linear": lambda: LinearKernel(),
}


class UserGaussian(Kernel):
    """A user kernel with only value/grad: takes the generic (non-radial) path."""

    def __init__(self, bandwidth):
        self.inner = GaussianKernel(bandwidth)

    def value(self, X, Z):
        return self.inner.value(X, Z)

    def grad(self, X, Z):
        return self.inner.grad(X, Z)


@pytest.fixture
def data():
    rng = np.random.default_rng(42)
    d = 4
    Z = rng.normal(size=(40, d)) * np.array([2.0, 1.0, 0.5, 0.3]) + 3.0
    Y = np.concatenate([Z[:5] + 0.1, rng.normal(size=(12, d)) * 1.5 + 3.0, Z[7:8]])
    X = Y + rng.normal(size=Y.shape) * 0.4
    return Z, X, Y


def _rel_close(a, b, rtol=1e-10):
    scale = max(np.max(np.abs(b)), 1e-300)
    assert np.max(np.abs(a - b)) <= rtol * scale, np.max(np.abs(a - b)) / scale


@pytest.mark.parametrize("name", sorted(KERNELS) + ["user"])
def test_covariance_batch_matches_single_point(data, name):
    Z, _, Y = data
    kernel = UserGaussian(1.2) if name == "user" else KERNELS[name]()
    prop = KameleonProposal(Z, kernel, 0.02, 0.7)
    covs = prop.covariance_batch(Y)
    assert covs.shape == (Y.shape[0], 4, 4)
    for y, c in zip(Y, covs):
        single = prop.covariance(y)
        _rel_close(c, single)
        _rel_close(c, prop.rkhs_covariance_numpy(y) * 0.7 + 0.02 * np.eye(4))
        np.testing.assert_array_equal(c, c.T)


@pytest.mark.parametrize("name", sorted(KERNELS) + ["user"])
def test_log_density_batch_matches_single_point(data, name):
    Z, X, Y = data
    kernel = UserGaussian(1.2) if name == "user" else KERNELS[name]()
    prop = KameleonProposal(Z, kernel, 0.02, 0.7)
    got = prop.log_density_batch(X, Y)
    expected = np.array([prop.at(y).log_density(x) for x, y in zip(X, Y)])
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chunk_size", [1, 2, 5, 17, 18, 1000, None])
def test_chunking_does_not_change_results(data, chunk_size):
    Z, X, Y = data
    prop = KameleonProposal(Z, GaussianKernel(1.0), 0.03, 1.5)
    ref_cov = prop.covariance_batch(Y, chunk_size=len(Y))
    ref_lq = prop.log_density_batch(X, Y, chunk_size=len(Y))
    ref_x, ref_lqs = prop.sample_batch(Y, np.random.default_rng(5), chunk_size=len(Y))
    covs = prop.covariance_batch(Y, chunk_size=chunk_size)
    np.testing.assert_allclose(covs, ref_cov, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(prop.log_density_batch(X, Y, chunk_size=chunk_size), ref_lq, rtol=1e-13)
    x, lqs = prop.sample_batch(Y, np.random.default_rng(5), chunk_size=chunk_size)
    np.testing.assert_allclose(x, ref_x, rtol=1e-13)
    np.testing.assert_allclose(lqs, ref_lqs, rtol=1e-13)


@pytest.mark.parametrize("name", ["gaussian", "matern52", "linear"])
def test_sample_batch_is_consistent(data, name):
    Z, _, Y = data
    prop = KameleonProposal(Z, KERNELS[name](), 0.02, 0.7)
    X, log_q = prop.sample_batch(Y, np.random.default_rng(1))
    assert X.shape == Y.shape and log_q.shape == (Y.shape[0],)
    np.testing.assert_allclose(log_q, prop.log_density_batch(X, Y), rtol=1e-10)
    # Same normals, one point at a time, give the same draws.
    eps = np.random.default_rng(1).standard_normal(Y.shape)
    for i, y in enumerate(Y):
        at = prop.at(y)
        np.testing.assert_allclose(X[i], y + at.chol @ eps[i], rtol=1e-10, atol=1e-12)


def test_sample_batch_has_the_right_covariance():
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(30, 2)) * np.array([2.0, 0.5])
    prop = KameleonProposal(Z, GaussianKernel(1.0), 0.05, 1.0)
    y = np.array([0.5, -0.2])
    X, _ = prop.sample_batch(np.tile(y, (200_000, 1)), rng)
    C = prop.covariance(y)
    S = np.cov(X, rowvar=False)
    se = np.sqrt((np.outer(np.diag(C), np.diag(C)) + C**2) / X.shape[0])
    assert np.max(np.abs(S - C) / se) < 5.0
    assert np.max(np.abs(X.mean(axis=0) - y) / np.sqrt(np.diag(C) / X.shape[0])) < 5.0


def test_single_point_and_empty_inputs(data):
    Z, X, Y = data
    prop = KameleonProposal(Z, GaussianKernel(1.0), 0.03, 1.5)
    assert prop.covariance_batch(Y[0]).shape == (1, 4, 4)
    assert prop.log_density_batch(X[0], Y[0]).shape == (1,)
    assert prop.covariance_batch(np.empty((0, 4))).shape == (0, 4, 4)
    assert prop.log_density_batch(np.empty((0, 4)), np.empty((0, 4))).shape == (0,)


def test_bad_shapes_and_chunk_sizes_raise(data):
    Z, X, Y = data
    prop = KameleonProposal(Z, GaussianKernel(1.0), 0.03, 1.5)
    with pytest.raises(ValueError):
        prop.covariance_batch(Y[:, :3])
    with pytest.raises(ValueError):
        prop.covariance_batch(Y[None])
    with pytest.raises(ValueError):
        prop.log_density_batch(X[:-1], Y)
    with pytest.raises(ValueError):
        prop.log_density_batch(X[:, :2], Y[:, :2])
    with pytest.raises(ValueError):
        prop.sample_batch(Y[:, :3], np.random.default_rng(0))
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError):
            prop.covariance_batch(Y, chunk_size=bad)


def test_jitter_fallback_only_for_failing_rows(data):
    """With gamma = 0 the linear-kernel covariance of a rank-deficient Z is singular: jitter is used."""
    Z, X, Y = data
    Zs = np.concatenate([Z[:, :2], Z[:, :1] + Z[:, 1:2]], axis=1)  # rank 2 in d = 3
    prop = KameleonProposal(Zs, LinearKernel(), 0.0, 1.0)
    Y3, X3 = Y[:, :3], X[:, :3]
    got = prop.log_density_batch(X3, Y3)
    expected = [prop.at(y).log_density(x) for x, y in zip(X3, Y3)]
    assert prop.at(Y3[0]).jitter > 0
    np.testing.assert_allclose(got, expected, rtol=1e-8)
    # Non-finite covariances raise, as for one point.
    bad = KameleonProposal(Z, GaussianKernel(1.0), 0.03, 1.5)
    Ybad = Y.copy()
    Ybad[3, 0] = np.nan
    with pytest.raises(SingularCovarianceError):
        bad.log_density_batch(X, Ybad)


def test_large_batch_memory_and_time():
    """N = 10,000 particles in d = 10 with n = 200: bounded chunks and a few seconds at most."""
    rng = np.random.default_rng(7)
    N, d, n = 10_000, 10, 200
    Z = rng.normal(size=(n, d))
    Y = rng.normal(size=(N, d))
    prop = KameleonProposal(Z, GaussianKernel(3.0), 0.01, 1.0)
    step = prop._chunk_size(None)
    per_row = 8 * (4 * n + 6 * d * d + 8 * d)
    assert 1 <= step and step * per_row <= 64 * 2**20
    t0 = time.perf_counter()
    X, log_q = prop.sample_batch(Y, rng)
    lq = prop.log_density_batch(X, Y, chunk_size=1000)
    elapsed = time.perf_counter() - t0
    assert X.shape == (N, d) and np.all(np.isfinite(log_q))
    np.testing.assert_allclose(lq, log_q, rtol=1e-9)
    idx = rng.choice(N, size=5, replace=False)
    np.testing.assert_allclose(lq[idx], [prop.at(Y[i]).log_density(X[i]) for i in idx], rtol=1e-10)
    assert elapsed < 10.0
