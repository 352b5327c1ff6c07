"""The upper bounds GP-DA MALA screens with after tuning (decision record 0055): the GP's joint covariance
given its first rows is at least the covariance given all of them, and Proposition 3.1's expectation with
that covariance (and without its determinant) is at least the expectation itself."""

import numpy as np
import pytest

from pymc_kameleon.core.adaptation.whitening import Whitening
from pymc_kameleon.core.delayed_acceptance.mala import log_expected_langevin_bound, log_expected_langevin_term
from pymc_kameleon.core.gp.surrogate import GPSurrogate


def _random_psd(rng, n, scale):
    A = rng.normal(size=(n, n)) * scale
    return A @ A.T


def _langevin_inputs(rng, d=3):
    L = np.linalg.cholesky(_random_psd(rng, d, 0.6) + 0.2 * np.eye(d))
    theta_star, theta_prime = rng.normal(size=d), rng.normal(size=d)
    return theta_star, theta_prime, rng.normal(size=d + 1) * 2.0, rng.normal(size=d), L


def test_the_bound_is_above_the_expectation_for_every_covariance_below_its_own():
    rng = np.random.default_rng(5)
    gaps = []
    for _ in range(400):
        theta_star, theta_prime, mean, grad_prior, L = _langevin_inputs(rng)
        K = _random_psd(rng, 4, rng.choice([1e-3, 0.3, 3.0]))
        K_S = K + _random_psd(rng, 4, rng.choice([0.0, 1e-3, 0.5]))  # K <= K_S in the Loewner order
        exact = log_expected_langevin_term(theta_star, theta_prime, mean, K, grad_prior, L)
        bound = log_expected_langevin_bound(theta_star, theta_prime, mean, K_S, grad_prior, L)
        gaps.append(bound - exact)
    assert min(gaps) >= 0.0
    assert np.median(gaps) < 5.0  # a bound that can decide, not a vacuous one


def test_negative_control_a_covariance_below_the_truth_is_no_bound():
    """The order matters: with K_S below K (a GP that knows more than it does) the 'bound' undercuts."""
    rng = np.random.default_rng(6)
    undercut = 0
    for _ in range(200):
        theta_star, theta_prime, mean, grad_prior, L = _langevin_inputs(rng)
        K_S = _random_psd(rng, 4, 0.01)
        K = K_S + _random_psd(rng, 4, 1.0)
        exact = log_expected_langevin_term(theta_star, theta_prime, mean, K, grad_prior, L)
        undercut += log_expected_langevin_bound(theta_star, theta_prime, mean, K_S, grad_prior, L) < exact
    assert undercut > 20


@pytest.mark.parametrize("gradients", [True, False])
def test_the_joint_covariance_bound_is_above_the_covariance_and_the_rest_is_bit_identical(gradients):
    rng = np.random.default_rng(7)
    d = 3
    gp = GPSurrogate(
        d, lengthscales=[0.9, 1.3, 0.7], signal_variance=2.0, gradients=gradients, max_points=200
    )
    X = rng.normal(size=(120, d))
    for x in X:  # a quadratic log-likelihood and its gradient
        gp.add(x, -0.5 * float(x @ x), -x if gradients else None)
    gp.set_input_whitening(Whitening.from_moments(np.zeros(d), np.diag([1.5, 0.5, 2.0])))
    rows = gp.n_points * (d + 1 if gradients else 1)
    assert rows > 64  # the bound uses a strict subset
    for theta in rng.normal(size=(20, d)):
        mean, cov = gp.predict_joint(theta)
        b_mean, cov_bound, parts = gp.predict_joint_with_bound(theta)
        np.testing.assert_array_equal(b_mean, mean)
        np.testing.assert_array_equal(gp.joint_cov_given(parts), cov)
        smallest = np.linalg.eigvalsh(cov_bound - cov).min()
        assert smallest >= -1e-9 * np.abs(cov).max(), smallest
        assert np.trace(cov_bound) > np.trace(cov)  # not the covariance itself
