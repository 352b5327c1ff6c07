import numpy as np
import pytest

from pymc_kameleon.core.kameleon.kernels import (
    GaussianKernel,
    Kernel,
    LinearKernel,
    Matern32Kernel,
    Matern52Kernel,
    make_kernel,
    median_heuristic_bandwidth,
)

KERNELS = [GaussianKernel(0.7), Matern32Kernel(1.3), Matern52Kernel(0.9), LinearKernel()]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: type(k).__name__)
def test_gradient_matches_finite_differences(kernel):
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(7, 3))
    x = rng.normal(size=3)
    grad = kernel.grad(x, Z)
    h = 1e-6
    fd = np.empty_like(grad)
    for j in range(3):
        e = np.zeros(3)
        e[j] = h
        fd[:, j] = (kernel.value(x + e, Z) - kernel.value(x - e, Z)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: type(k).__name__)
def test_batched_shapes_match_single_point(kernel):
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(5, 2))
    X = rng.normal(size=(4, 2))
    assert kernel.value(X, Z).shape == (4, 5)
    assert kernel.grad(X, Z).shape == (4, 5, 2)
    for i in range(4):
        np.testing.assert_allclose(kernel.value(X, Z)[i], kernel.value(X[i], Z))
        np.testing.assert_allclose(kernel.grad(X, Z)[i], kernel.grad(X[i], Z))


@pytest.mark.parametrize("kernel", KERNELS[:3], ids=lambda k: type(k).__name__)
def test_proposition1_a_y_vanishes(kernel):
    """a_y = grad k(x,x) - 2 grad_x k(x, y) at x = y is zero (stationary kernels: both terms are 0)."""
    y = np.array([[0.4, -1.2]])
    assert np.allclose(kernel.grad(y[0], y), 0.0)
    assert kernel.value(y[0], y)[0] == pytest.approx(1.0)


def test_gaussian_values():
    k = GaussianKernel(2.0)
    assert k.value(np.zeros(2), np.array([[2.0, 0.0]]))[0] == pytest.approx(np.exp(-0.5))


def test_median_heuristic_known_value():
    # Distances^2 between 0, 1, 3 on a line: 1, 9, 4 -> median 4 -> sigma = sqrt(2)
    Z = np.array([[0.0], [1.0], [3.0]])
    assert median_heuristic_bandwidth(Z) == pytest.approx(np.sqrt(2.0))
    # Repeated points (rejections) are ignored.
    assert median_heuristic_bandwidth(np.vstack([Z, Z])) == pytest.approx(np.sqrt(2.0))


def test_median_heuristic_needs_two_distinct_points():
    with pytest.raises(ValueError, match="two distinct"):
        median_heuristic_bandwidth(np.ones((5, 2)))


def test_make_kernel_names_and_objects():
    assert isinstance(make_kernel("rbf"), GaussianKernel)
    assert isinstance(make_kernel("Matern-3/2"), Matern32Kernel)
    assert isinstance(make_kernel("matern52"), Matern52Kernel)
    assert isinstance(make_kernel("linear"), LinearKernel)

    class Custom(Kernel):
        def value(self, X, Z):
            return GaussianKernel(1.0).value(X, Z)

        def grad(self, X, Z):
            return GaussianKernel(1.0).grad(X, Z)

    custom = Custom()
    assert make_kernel(custom) is custom
    with pytest.raises(ValueError, match="kernel='poly'"):
        make_kernel("poly")
    with pytest.raises(ValueError, match="value"):
        make_kernel(object())


@pytest.mark.parametrize("bad", [0.0, -1.0, np.inf, np.nan])
def test_bad_bandwidth(bad):
    with pytest.raises(ValueError, match="bandwidth"):
        GaussianKernel(bad)
