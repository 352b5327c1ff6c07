"""MMD with a polynomial kernel: exact value on fixed inputs, unbiasedness, and power."""

import numpy as np
import pytest

from pymc_kameleon.metrics import mmd_squared, polynomial_kernel


def test_polynomial_kernel_and_mmd_on_fixed_inputs():
    X = np.array([[0.0], [1.0]])
    Y = np.array([[1.0], [2.0]])
    # k = (1 + xy)^3. Kxx offdiag: (1+0)^3 = 1; Kyy offdiag: (1+2)^3 = 27;
    # Kxy: (1+0)^3, (1+0)^3, (1+1)^3, (1+2)^3 = 1, 1, 8, 27 -> mean 37/4.
    np.testing.assert_allclose(polynomial_kernel(X, Y), [[1, 1], [8, 27]])
    assert mmd_squared(X, Y) == pytest.approx(1 + 27 - 2 * 37 / 4)


def test_mmd_is_unbiased_for_equal_distributions_and_detects_a_third_moment():
    rng = np.random.default_rng(0)
    same = [mmd_squared(rng.normal(size=(200, 2)), rng.normal(size=(200, 2))) for _ in range(200)]
    se = np.std(same, ddof=1) / np.sqrt(len(same))
    assert abs(np.mean(same)) < 4 * se
    # Same mean and variance, different skewness: degree 3 sees it.
    skewed = rng.exponential(size=(4000, 1)) - 1.0
    normal = rng.normal(size=(4000, 1))
    assert mmd_squared(skewed, normal) > 20 * se


def test_mmd_rejects_bad_shapes():
    with pytest.raises(ValueError, match="same dimension"):
        mmd_squared(np.zeros((3, 2)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="at least two"):
        mmd_squared(np.zeros((1, 2)), np.zeros((3, 2)))
