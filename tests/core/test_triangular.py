"""GrowingCholesky: a factor extended in place, solving bit-for-bit as scipy's solve_triangular."""

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from pymc_kameleon.core.gp import triangular
from pymc_kameleon.core.gp.surrogate import GPSurrogate
from pymc_kameleon.core.gp.triangular import GrowingCholesky
from pymc_kameleon.core.linalg import cholesky_lower


def spd(n, seed=0):
    A = np.random.default_rng(seed).normal(size=(n, n))
    return A @ A.T / n + 0.05 * np.eye(n)


def reference(L, rhs, trans):
    return solve_triangular(L, rhs, lower=True, trans="T" if trans else "N", check_finite=False)


@pytest.mark.parametrize("order", ["C", "F"])
def test_solves_equal_solve_triangular_bit_for_bit_through_appends(order):
    """From a C- or Fortran-ordered start (LAPACK's Cholesky is Fortran), appends of 1 and several
    rows across capacity doublings; every solve, 1 or several right-hand sides, either transpose."""
    N = 300
    L_full = np.linalg.cholesky(spd(N))
    n0 = 40
    start = np.asfortranarray(L_full[:n0, :n0]) if order == "F" else np.ascontiguousarray(L_full[:n0, :n0])
    factor = GrowingCholesky(start)
    rng = np.random.default_rng(1)
    n = n0
    for b in [1, 1, 3, 1, 6] * 12:
        if n + b > N:
            break
        for shape in [(n,), (n, 1), (n, 4)]:
            rhs = rng.normal(size=shape)
            for trans in (False, True):
                # The layout scipy would see: the start as given, then C-ordered bordered copies.
                L = start if n == n0 else np.ascontiguousarray(L_full[:n, :n])
                assert np.array_equal(factor.solve(rhs, trans), reference(L, rhs, trans))
        factor.append(L_full[n : n + b, :n], L_full[n : n + b, n : n + b])
        n += b
    assert factor.n == n and np.array_equal(factor.L, L_full[:n, :n])
    assert np.array_equal(factor.rows(n - 6), L_full[n - 6 : n, :n])


def test_appends_reuse_the_buffer_and_never_read_beyond_the_corner():
    L_full = np.linalg.cholesky(spd(100, seed=2))
    factor = GrowingCholesky(L_full[:10, :10], max_rows=100)
    buffer = factor._buf
    factor._buf[10:, :] = np.nan  # whatever lies outside the corner must not matter
    factor._buf[:, 10:] = np.nan
    for n in range(10, 60):
        factor.append(L_full[n : n + 1, :n], L_full[n : n + 1, n : n + 1])
    assert factor._buf is buffer  # capacity 64 from the start: no copy
    rhs = np.random.default_rng(3).normal(size=(60, 2))
    assert np.all(np.isfinite(factor.solve(rhs)))
    assert np.allclose(L_full[:60, :60] @ factor.solve(rhs), rhs)
    for n in range(60, 100):
        factor.append(L_full[n : n + 1, :n], L_full[n : n + 1, n : n + 1])
    assert factor._buf.shape == (100, 100)  # grown, within max_rows


def test_control_a_wrong_leading_dimension_gives_wrong_solves():
    """Negative control: the buffer's leading dimension is what makes the corner solve right."""
    L_full = np.linalg.cholesky(spd(80, seed=4))
    factor = GrowingCholesky(np.ascontiguousarray(L_full[:50, :50]), max_rows=80)
    assert factor._buf.shape[0] == 80
    rhs = np.random.default_rng(5).normal(size=50)
    good = factor.solve(rhs)
    factor._use_buffer(factor._buf.reshape(-1)[: 50 * 50].reshape(50, 50).copy())  # rows of 50, not 80
    with np.errstate(all="ignore"):
        bad = factor.solve(rhs)
        assert np.allclose(L_full[:50, :50] @ good, rhs) and not np.allclose(L_full[:50, :50] @ bad, rhs)


def test_without_the_blas_symbols_it_falls_back_to_solve_triangular(monkeypatch):
    L = cholesky_lower(spd(30, seed=6))
    rhs = np.random.default_rng(7).normal(size=(30, 3))
    monkeypatch.setattr(triangular, "_BLAS", None)
    factor = GrowingCholesky(L)
    assert np.array_equal(factor.solve(rhs, True), reference(L, rhs, True))


def test_bad_right_hand_side_is_a_clear_error():
    factor = GrowingCholesky(np.eye(3))
    with pytest.raises(ValueError, match="3"):
        factor.solve(np.ones(4))
    assert GrowingCholesky().solve(np.empty(0)).shape == (0,)


def test_gp_appends_write_into_one_buffer():
    """The GP's factor grows in place (no O(n^2) copy per point) and equals a full factorisation."""
    rng = np.random.default_rng(8)
    gp = GPSurrogate(3, lengthscales=0.8, max_points=200)
    X = rng.normal(size=(150, 3))
    for x in X[:70]:
        gp.add(x, -0.5 * x @ x)
    buffer = gp._factor._buf
    for x in X[70:128]:
        gp.add(x, -0.5 * x @ x)
    assert gp._factor._buf is buffer  # capacity 140 after 70 points
    K = gp.covariance_matrix()
    assert np.allclose(gp.cholesky_factor, np.linalg.cholesky(K), atol=1e-10)


def test_a_copy_or_an_unpickled_factor_solves_with_its_own_buffer():
    """The BLAS calls use the buffer's address, kept at each new buffer: a pickled factor (PyMC sends
    steps to worker processes) or a deep copy must solve with its own memory, not the original's."""
    import copy
    import pickle

    L_full = np.linalg.cholesky(spd(40, seed=9))
    factor = GrowingCholesky(L_full[:30, :30])
    rhs = np.random.default_rng(10).normal(size=30)
    expected = factor.solve(rhs)
    for other in (pickle.loads(pickle.dumps(factor)), copy.deepcopy(factor)):
        assert other._address != factor._address
        factor._buf[:] = np.nan  # the original's memory no longer holds L
        assert np.array_equal(other.solve(rhs), expected)
        factor._buf[:30, :30] = L_full[:30, :30]
        factor._buf[30:] = 0.0
        factor._buf[:, 30:] = 0.0
