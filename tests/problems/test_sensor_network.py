"""The sensor-network localisation example: likelihood by hand, reproducible data, the PyMC model."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from pymc_kameleon.problems.sensor_network import (
    DEFAULT_SEED,
    SensorNetworkData,
    sensor_network_data,
    sensor_network_model,
    side_of_base_line,
    simulate_sensor_network,
)


def tiny_data():
    """One unknown sensor, two bases: pair (0, 1) observed at 0.25, pair (0, 2) not observed."""
    return SensorNetworkData(
        true_locations=np.array([[0.0, 0.0]]),
        base_locations=np.array([[0.3, 0.0], [0.0, 0.4]]),
        pairs=np.array([[0, 1], [0, 2]]),
        observed=np.array([True, False]),
        distances=np.array([0.25, 0.0]),
        R=0.3,
        sigma2=0.02,
    )


def test_log_likelihood_matches_hand_calculation():
    data = tiny_data()
    x = np.array([0.1, 0.1])
    d1, d2 = math.hypot(0.2, 0.1), math.hypot(0.1, 0.3)
    seen = -(d1**2) / (2 * 0.09) + norm.logpdf(0.25, d1, math.sqrt(0.02))
    unseen = math.log(1 - math.exp(-(d2**2) / (2 * 0.09)))
    assert data.log_likelihood(x) == pytest.approx(seen + unseen, rel=1e-12)
    prior = norm.logpdf(x, 0.5, 1.0).sum()
    assert data.log_posterior(x) == pytest.approx(prior + seen + unseen, rel=1e-12)


def test_log_likelihood_batches_and_accepts_both_shapes():
    data = sensor_network_data()
    rng = np.random.default_rng(0)
    X = rng.normal(0.5, 0.3, size=(4, 5, data.dim))
    batched = data.log_likelihood(X)
    assert batched.shape == (4, 5)
    assert batched[2, 3] == pytest.approx(data.log_likelihood(X[2, 3]), rel=1e-12)
    assert data.log_likelihood(X[2, 3].reshape(data.n_sensors, 2)) == pytest.approx(batched[2, 3], rel=1e-12)
    with pytest.raises(ValueError, match="coordinates per point"):
        data.log_likelihood(np.zeros(5))


def test_unobserved_coincident_pair_has_zero_likelihood():
    data = tiny_data()
    assert data.log_likelihood(np.array([0.0, 0.4])) == -np.inf  # sits on base 1, which it did not see


def test_data_reproducible_and_documented():
    a, b = simulate_sensor_network(DEFAULT_SEED), sensor_network_data()
    for field in ("true_locations", "base_locations", "pairs", "observed", "distances"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(simulate_sensor_network(DEFAULT_SEED + 1).true_locations, a.true_locations)
    # The values in the module docstring.
    np.testing.assert_allclose(a.true_locations, [[0.489, 0.300], [0.676, 0.608], [0.846, 0.132]], atol=5e-4)
    np.testing.assert_allclose(a.base_locations, [[0.768, 0.497], [0.451, 0.488]], atol=5e-4)
    assert a.pairs.shape == (9, 2) and not np.any(a.pairs[:, 0] >= a.n_sensors)  # bases never pair with bases
    assert a.observed.sum() == 6 and np.all(a.distances[~a.observed] == 0)
    assert (a.R, a.sigma2, a.prior_mean, a.prior_sd) == (0.3, 0.02, 0.5, 1.0)


def reflect_across_base_line(data: SensorNetworkData, x) -> np.ndarray:
    """Reflect every unknown sensor across the base line (the likelihood is invariant under it)."""
    b0, b1 = data.base_locations[0], data.base_locations[1]
    u = (b1 - b0) / np.linalg.norm(b1 - b0)
    xs = np.asarray(x, dtype=float).reshape(*np.shape(x)[:-1], data.n_sensors, 2) - b0
    along = np.sum(xs * u, axis=-1, keepdims=True) * u
    return (b0 + 2.0 * along - xs).reshape(np.shape(x))


def test_likelihood_is_invariant_under_reflection_across_base_line():
    data = sensor_network_data()
    x = data.true_locations.ravel()
    mirrored = reflect_across_base_line(data, x)
    assert data.log_likelihood(mirrored) == pytest.approx(data.log_likelihood(x), rel=1e-12)
    np.testing.assert_array_equal(side_of_base_line(data, mirrored), ~side_of_base_line(data, x))
    # ...but a reflection of one sensor only changes it (negative control).
    partial = x.copy()
    partial[4:] = mirrored[4:]
    assert abs(data.log_likelihood(partial) - data.log_likelihood(x)) > 0.1


def test_pymc_model_matches_numpy_log_density():
    data = sensor_network_data()
    model = sensor_network_model(data)
    logp = model.compile_logp()
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = rng.normal(0.5, 0.3, size=(data.n_sensors, 2))
        assert logp({"x": x}) == pytest.approx(data.log_posterior(x.ravel()), rel=1e-10)


def test_invalid_simulation_options():
    with pytest.raises(ValueError, match="positive"):
        simulate_sensor_network(R=0.0)
    with pytest.raises(ValueError, match="n_sensors"):
        simulate_sensor_network(n_sensors=0)
