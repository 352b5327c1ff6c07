"""The wide Gaussian reference around the mode (start="smc" where the prior cannot be drawn from): the
curvature's sds are exact for a Gaussian on any scale, coordinates without a curvature are named NaN and
get a fallback, every evaluation is counted, and a density without a finite point is an error."""

import math

import numpy as np
import pytest

from pymc_kameleon.core.smc.reference import REFERENCE_WIDTH, NoModeError, curvature_sds, mode_reference


def _gaussian(mean, cov):
    precision = np.linalg.inv(cov)

    def log_density(x):
        r = np.asarray(x) - mean
        return -0.5 * float(r @ precision @ r)

    return log_density


class _Counted:
    def __init__(self, f):
        self.f, self.calls = f, 0

    def __call__(self, x):
        self.calls += 1
        return self.f(x)


@pytest.mark.parametrize("scale", [1e-4, 1.0, 1e4])
def test_curvature_sds_are_exact_for_a_gaussian_on_any_scale(scale):
    """sigma_i = h / sqrt(2 drop) holds exactly for a quadratic; the step is found in decades, so sds
    from 1e-4 to 1e4 times the scale (and the scale itself from 1e-4 to 1e4) come out right."""
    sds = scale * np.array([1e-4, 1.0, 3.0, 1e4])
    mean = np.array([0.0, 5.0, -2.0, 1e3]) * scale
    f = _Counted(_gaussian(mean, np.diag(sds**2)))
    found = curvature_sds(f, mean, f(mean))
    np.testing.assert_allclose(found.sds, sds, rtol=1e-6)
    assert found.n_evals == f.calls - 1 and found.higher is None and found.rising == []


def test_a_coordinate_without_curvature_is_nan_and_gets_the_largest_other_sd():
    """The density does not depend on x[1] (flat) and rises along x[2] away from the point given as the
    mode (a saddle): neither has a curvature. The reference gives them the largest of the other sds."""

    def log_density(x):
        return -0.5 * (x[0] / 2.0) ** 2 + 0.5 * x[2] ** 2 - 0.5 * (x[3] / 0.5) ** 2

    found = curvature_sds(log_density, np.zeros(4), 0.0)
    sds = found.sds
    assert sds[0] == pytest.approx(2.0) and sds[3] == pytest.approx(0.5)
    assert math.isnan(sds[1]) and math.isnan(sds[2])
    assert found.rising == [2] and found.higher[1] > 1.0  # the saddle: points above the given one


def test_mode_reference_finds_the_mode_from_a_far_start_and_widens_the_curvature():
    """A correlated Gaussian from 50 sds away: the mode to 1e-4 sd, the sd 30 times the conditional sd
    1/sqrt(P_ii) that the curvature along coordinate i gives, and every evaluation counted."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=(3, 3))
    cov = a @ a.T + 0.5 * np.eye(3)
    mean = np.array([1.0, -2.0, 0.5])
    f = _Counted(_gaussian(mean, cov))
    found = mode_reference(f, mean + 50 * np.sqrt(np.diag(cov)))
    np.testing.assert_allclose(found.mean, mean, atol=1e-4 * np.sqrt(np.diag(cov)).min())
    conditional = 1.0 / np.sqrt(np.diag(np.linalg.inv(cov)))
    np.testing.assert_allclose(found.sd, REFERENCE_WIDTH * conditional, rtol=1e-4)
    assert found.n_evals == f.calls
    assert found.log_density == pytest.approx(0.0, abs=1e-8)


def test_a_density_without_a_finite_point_is_an_error():
    with pytest.raises(ValueError, match="no point of finite log density"):
        mode_reference(lambda x: -math.inf, np.zeros(2))


def test_a_flat_coordinate_gets_the_largest_other_width():
    def log_density(x):
        return -0.5 * (x[0] / 2.0) ** 2 - 0.5 * (x[2] / 0.5) ** 2

    found = mode_reference(log_density, np.array([3.0, 7.0, -1.0]))
    np.testing.assert_allclose(found.sd, REFERENCE_WIDTH * np.array([2.0, 2.0, 0.5]), rtol=1e-4)


def test_a_density_without_a_mode_is_named():
    """A funnel's neck: with theta = mu the centred hierarchy's density grows as tau^-(J-1) when log tau
    falls (here J = 6, a HalfNormal(5) tau). The search runs down the neck until the effects differ from
    mu in their last digits (log tau about -38, curvature sds about 1e-15): NoModeError names mu's and the
    effects' coordinates, where a reference would have collapsed onto the neck."""

    def log_density(x):
        mu, log_tau, theta = x[0], x[1], x[2:]
        tau = math.exp(log_tau)
        return float(
            -0.5 * (mu / 5) ** 2 - 0.5 * (tau / 5) ** 2 + log_tau
            - np.sum(0.5 * ((theta - mu) / tau) ** 2) - theta.size * log_tau
            - 0.5 * np.sum((np.array([28.0, 8, -3, 7, -1, 1]) - theta) ** 2 / 15.0**2)
        )

    with pytest.raises(NoModeError, match="no usable mode") as raised:
        mode_reference(log_density, np.zeros(8))
    assert raised.value.coordinates == [0, 2, 3, 4, 5, 6, 7]


def test_a_search_stopped_short_goes_on_from_a_higher_point():
    """Powell limited to 200 d evaluations on a long narrow valley (a 6-d Gaussian with correlation
    0.999) can stop short; a curvature step that finds a point 1 nat higher restarts it there, and the
    reference's mean ends at the mode."""
    d = 6
    cov = 0.999 * np.ones((d, d)) + 0.001 * np.eye(d)
    cov *= 100.0
    mean = np.linspace(-3, 3, d)
    found = mode_reference(_gaussian(mean, cov), mean + 40.0 * np.array([1, -1, 1, -1, 1, -1]))
    assert found.log_density > -1.0, found
