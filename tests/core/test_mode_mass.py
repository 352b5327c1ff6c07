"""The half log-volumes of chains' recent states (pooled tuning's rescue rule, decision record 0057)."""

import math

import numpy as np

from pymc_kameleon.core.adaptation.mode_mass import MIN_MOVED, half_log_volumes


def test_a_mode_k_times_wider_in_d_coordinates_is_d_log_k_nats_more_volume():
    """Chains of i.i.d. draws from N(0, I) and N(5, 10^2 I) in 3-d: the difference of their half log-volumes
    is 3 log 10 = 6.91 (the sample covariance's log-determinant has sd about sqrt(2 d / n) = 0.04 here),
    whatever the units of each coordinate."""
    rng = np.random.default_rng(0)
    n, d = 4000, 3
    states = np.stack([rng.normal(size=(n, d)), 5.0 + 10.0 * rng.normal(size=(n, d))], axis=1)
    volumes = half_log_volumes(states, min_steps=100)
    assert abs((volumes[1] - volumes[0]) - d * math.log(10.0)) < 0.1, volumes
    units = np.array([1e-4, 1.0, 1e4])
    np.testing.assert_allclose(np.diff(half_log_volumes(states * units, 100)), np.diff(volumes), rtol=1e-9)


def test_a_chain_that_barely_moved_has_no_width_and_few_steps_give_none():
    rng = np.random.default_rng(1)
    states = rng.normal(size=(200, 2, 2))
    states[:, 1, :] = 7.0  # stuck,
    states[::40, 1, :] += rng.normal(size=(5, 2))  # but for 5 excursions: 9 of 199 steps moved (4.5%)
    assert 9 / 199 < MIN_MOVED
    volumes = half_log_volumes(states, min_steps=100)
    assert math.isfinite(volumes[0]) and math.isnan(volumes[1])
    assert half_log_volumes(states[:99], min_steps=100) is None


def test_modes_far_apart_keep_their_width_difference():
    """A new user's equal-mass modes N(0, I) and N(20, 0.01^2 I) in 10-d: the narrow chain's variance is
    2.5e-7 of the population's (dominated by the 20 sds between the modes), and a floor in the
    population's units gave the wide chain 22 nats where its mass hides 46 (10 log 100), so it was
    rescued; in the chains' own units the difference stands."""
    rng = np.random.default_rng(2)
    n, d = 3000, 10
    states = np.stack([rng.normal(size=(n, d)), 20.0 + 0.01 * rng.normal(size=(n, d))], axis=1)
    volumes = half_log_volumes(states, min_steps=100)
    assert abs((volumes[0] - volumes[1]) - d * math.log(100.0)) < 0.3, volumes
