"""core/linalg.py: jittered Cholesky, appending to a factor, triangular solves, Gaussian log densities."""

import math
import warnings

import numpy as np
import pytest
from scipy import stats
from scipy.linalg import solve_triangular

from pymc_kameleon.core.linalg import (
    SingularCovarianceError,
    cholesky_append,
    cholesky_lower,
    gaussian_log_norm,
    gaussian_logpdf_chol,
    jittered_cholesky,
    one_blas_thread,
    same_array,
    solve_lower,
    solve_lower_as_scipy,
)


def _spd(d, seed=0, cond=10.0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (Q * np.geomspace(1.0, cond, d)) @ Q.T


# ------------------------------------------------------------------ cholesky_lower / jittered_cholesky
def test_cholesky_lower_matches_numpy_and_flags_indefinite():
    C = _spd(5)
    L = cholesky_lower(C)
    np.testing.assert_allclose(L, np.linalg.cholesky(C), rtol=1e-12, atol=1e-14)
    assert np.all(np.triu(L, 1) == 0.0)  # clean=1: the upper triangle is zeroed
    assert cholesky_lower(np.diag([1.0, -1.0])) is None


def test_jittered_cholesky_adds_no_jitter_to_a_positive_definite_matrix():
    C = _spd(4, seed=1)
    L, jitter = jittered_cholesky(C)
    assert jitter == 0.0
    np.testing.assert_allclose(L @ L.T, C, rtol=1e-12, atol=1e-12)


def test_jittered_cholesky_of_a_singular_matrix_returns_the_smallest_working_jitter():
    v = np.array([1.0, 2.0, 3.0])
    C = np.outer(v, v)  # rank one, mean |diagonal| = 14/3
    L, jitter = jittered_cholesky(C)
    scale = np.mean(np.abs(np.diag(C)))
    ratio = jitter / (1e-10 * scale)
    assert jitter > 0.0
    assert ratio == pytest.approx(10.0 ** round(math.log10(ratio)))  # one of the jitter ladder's steps
    np.testing.assert_allclose(L @ L.T, C + jitter * np.eye(3), rtol=1e-10, atol=1e-12)
    # the step below it fails, so the jitter is the smallest one that works
    if ratio > 1.5:
        with pytest.raises(np.linalg.LinAlgError):
            np.linalg.cholesky(C + 0.1 * jitter * np.eye(3))


def test_jittered_cholesky_raises_a_clear_error_when_no_jitter_helps():
    C = np.diag([1.0, -5.0])  # indefinite: the jitter ladder (up to 1e-5 * scale) cannot fix it
    with pytest.raises(SingularCovarianceError, match="proposal covariance matrix is not positive definite"):
        jittered_cholesky(C, what="proposal covariance")
    # the error is both a LinAlgError and a ValueError, so callers of either kind catch it
    assert issubclass(SingularCovarianceError, np.linalg.LinAlgError)
    assert issubclass(SingularCovarianceError, ValueError)


def test_jittered_cholesky_max_tries_bounds_the_jitter():
    C = np.diag([1.0, -1e-7])  # scale 0.5: jitters 5e-11, 5e-10, ...; 5e-7 (k = 4) is the first > 1e-7
    with pytest.raises(SingularCovarianceError, match="jitter 5e-10 on the diagonal"):
        jittered_cholesky(C, max_tries=2)  # the message names the largest jitter tried
    L, jitter = jittered_cholesky(C, max_tries=6)
    assert jitter == pytest.approx(1e-10 * 10.0**4 * np.mean([1.0, 1e-7]))
    np.testing.assert_allclose(L @ L.T, C + jitter * np.eye(2), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_jittered_cholesky_rejects_non_finite_input(bad):
    C = np.eye(3)
    C[1, 2] = C[2, 1] = bad
    with pytest.raises(SingularCovarianceError, match="non-finite"):
        jittered_cholesky(C)


# ------------------------------------------------------------------ cholesky_append
@pytest.mark.parametrize("n, b", [(0, 1), (0, 3), (1, 1), (5, 1), (5, 3)])
def test_cholesky_append_matches_the_full_factorisation(n, b):
    K = _spd(n + b, seed=n + 10 * b)
    L0 = np.linalg.cholesky(K[:n, :n]) if n else np.zeros((0, 0))
    k_new = K[:n, n:]
    k_self = K[n:, n:]
    if b == 1:  # the single-row form takes a vector and a scalar
        k_new, k_self = k_new[:, 0], float(k_self[0, 0])
    L, added = cholesky_append(L0, k_new, k_self)
    assert added == 0.0
    np.testing.assert_allclose(L, np.linalg.cholesky(K), rtol=1e-10, atol=1e-12)


def test_cholesky_append_jitters_only_the_new_block_for_a_duplicated_point():
    K = _spd(3, seed=4)
    L0 = np.linalg.cholesky(K)
    L, added = cholesky_append(L0, K[:, 0], K[0, 0])  # a copy of variable 0: Schur complement 0
    assert added > 0.0
    bordered = np.block([[K, K[:, :1]], [K[:1, :], K[:1, :1] + added]])
    np.testing.assert_allclose(L @ L.T, bordered, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(L[:3, :3], L0)  # the old factor is kept as it was


def test_cholesky_append_raises_when_the_new_pivot_stays_negative():
    L0 = np.linalg.cholesky(np.eye(2))
    with pytest.raises(SingularCovarianceError, match="Cannot append 1 row"):
        cholesky_append(L0, np.array([1.0, 1.0]), 1.0)  # Schur complement 1 - 2 = -1


def test_cholesky_append_rejects_nan_and_bad_shapes():
    L0 = np.eye(2)
    with pytest.raises(SingularCovarianceError, match="not finite"):
        cholesky_append(L0, np.array([0.1, np.nan]), 1.0)
    with pytest.raises(SingularCovarianceError, match="not finite"):
        cholesky_append(L0, np.array([0.1, 0.2]), np.nan)
    with pytest.raises(ValueError, match="expected"):
        cholesky_append(L0, np.zeros(3), 1.0)


# ------------------------------------------------------------------ solves and Gaussian densities
def test_solve_lower_solves_the_triangular_system():
    L = np.linalg.cholesky(_spd(6, seed=2))
    b = np.random.default_rng(3).standard_normal(6)
    x = solve_lower(L, b)
    np.testing.assert_allclose(L @ x, b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x, np.linalg.solve(L, b), rtol=1e-10)


@pytest.mark.parametrize("d", [1, 2, 7, 50])
@pytest.mark.parametrize("order", ["C", "F"])
def test_solve_lower_as_scipy_gives_scipys_bits(d, order):
    """Whitening's hot path must round as scipy.linalg.solve_triangular does (fixed seeds keep their
    draws). Negative control: dtrsv (solve_lower) on a C-ordered factor, which SciPy solves as the
    transposed upper-triangular system, rounds differently on some systems."""
    rng = np.random.default_rng(d)
    L = np.asarray(np.linalg.cholesky(_spd(d, seed=d, cond=1e4)), order=order)
    differs = False
    for _ in range(50):
        b = rng.standard_normal(d) * 10.0 ** rng.uniform(-3, 3)
        expected = solve_triangular(L, b, lower=True, check_finite=False)
        assert np.array_equal(solve_lower_as_scipy(L, b), expected)
        differs |= not np.array_equal(solve_lower(L, b), expected)
    assert differs or d <= 2 or order == "F"


def test_solve_lower_as_scipy_refuses_a_singular_factor():
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        solve_lower_as_scipy(np.array([[1.0, 0.0], [1.0, 0.0]]), np.ones(2))


def test_one_blas_thread_limits_blas_during_the_call_and_restores_it():
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    seen = []

    @one_blas_thread
    def work():
        seen.append(blas_threads())
        return "done"

    with threadpool_limits(limits=2, user_api="blas"):
        if set(blas_threads()) != {2}:
            pytest.skip("this BLAS cannot run two threads here")
        assert work() == "done"
        assert set(seen[-1]) == {1}  # the negative control: outside the call, 2
        assert set(blas_threads()) == {2}
    with threadpool_limits(limits=1, user_api="blas"):
        assert work() == "done" and set(seen[-1]) == {1} and set(blas_threads()) == {1}


def test_solve_lower_propagates_nan():
    L = np.linalg.cholesky(_spd(3))
    assert np.isnan(solve_lower(L, np.array([np.nan, 0.0, 0.0]))).all()


def test_gaussian_log_norm_is_the_normalising_constant():
    C = _spd(4, seed=5, cond=100.0)
    L = np.linalg.cholesky(C)
    expected = -0.5 * 4 * math.log(2 * math.pi) - 0.5 * np.linalg.slogdet(C)[1]
    assert gaussian_log_norm(L) == pytest.approx(expected, rel=1e-12)


def test_gaussian_logpdf_chol_matches_scipy():
    C = _spd(3, seed=6)
    mean = np.array([0.5, -1.0, 2.0])
    L = np.linalg.cholesky(C)
    for x in np.random.default_rng(7).standard_normal((5, 3)):
        assert gaussian_logpdf_chol(x, mean, L) == pytest.approx(
            stats.multivariate_normal(mean, C).logpdf(x), rel=1e-12
        )


def test_gaussian_logpdf_chol_of_nan_is_nan():
    L = np.eye(2)
    assert math.isnan(gaussian_logpdf_chol(np.array([np.nan, 0.0]), np.zeros(2), L))


# ------------------------------------------------------------------ same_array
def test_same_array():
    a = np.array([1.0, 2.0])
    assert same_array(a, a.copy())
    assert not same_array(None, a)
    assert not same_array(a, np.array([1.0, 2.0, 3.0]))
    assert not same_array(a, np.array([1.0, 2.5]))
    assert same_array(np.array([np.nan]), np.array([np.nan]))  # the same bytes give the same results
    assert not same_array(np.array([0.0, 1.0]), np.array([-0.0, 1.0]))  # other bytes: another state
    assert same_array(np.array([1.0, 2.0]), np.array([1, 2]))  # other dtypes: by value
    assert not same_array(np.array([0.0, 1.0]), np.array([0.0, 1.0 + 1e-16 * 2]))


def test_gaussian_logpdf_far_out_is_minus_inf_without_a_warning():
    """A point so far out that the squared Mahalanobis distance overflows has log density -inf (a
    Langevin reverse move from a far start did this), and no RuntimeWarning reaches the user."""
    from pymc_kameleon.core.linalg import gaussian_logpdf_chol

    L = np.diag([1e-100, 1.0])  # u = L^-1 x = 1e200, and u @ u overflows
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gaussian_logpdf_chol(np.array([1e100, 0.0]), np.zeros(2), L) == -np.inf
    assert np.isfinite(gaussian_logpdf_chol(np.array([1.0, 0.0]), np.zeros(2), np.eye(2)))
