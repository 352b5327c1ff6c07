"""The one problem abstraction (problems.base.Problem)."""

import numpy as np
import pytest

from pymc_kameleon.problems import Problem, banana, correlated_gaussian, flower, ring, sensor_network_data
from pymc_kameleon.problems.table1 import build


@pytest.mark.parametrize("make", [banana, flower, ring, correlated_gaussian], ids=lambda f: f.__name__)
def test_targets_are_problems_with_matching_model(make):
    target = make()
    assert isinstance(target, Problem)
    x = target.sample(3, rng=0)
    np.testing.assert_array_equal(target.log_density(x), target.logp(x))
    model = target.pymc_model()
    logp = model.compile_logp()
    for xi in x:
        assert logp({"x": xi}) == pytest.approx(target.logp(xi), rel=1e-12, abs=1e-12)
    assert target.exact_mean.shape == (target.dim,)


def test_sensor_network_is_a_problem():
    data = sensor_network_data()
    assert isinstance(data, Problem) and data.name == "sensor_network"
    np.testing.assert_array_equal(data.true_values, data.true_locations.ravel())
    x = data.true_values[None, :] + 0.01 * np.arange(data.dim)
    logp = data.pymc_model().compile_logp()
    assert logp({"x": x[0].reshape(data.n_sensors, 2)}) == pytest.approx(
        float(data.log_density(x)[0]), rel=1e-10
    )
    assert data.exact_mean is None and data.exact_cov is None


def test_table1_target_is_a_problem():
    target = build("T2", seed=0)
    assert isinstance(target, Problem)
    assert target.pymc_model() is target.model  # the model that holds the data and the counter
    assert target.dim == 3
    assert target.exact_mean is None
    with pytest.raises(NotImplementedError, match="Table1Target"):
        target.log_density(np.zeros(3))
