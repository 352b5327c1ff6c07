"""KASS evaluates the particles one by one where vectorising the model would make PyTensor loop in Python
over every particle's linear algebra (``smc._batched.looped_core_calls``): a multivariate normal
likelihood of many rows whose Cholesky factor is a parameter (68.6 s vectorised, 9.2 s one by one, on an
LKJ model of 100 rows with PyTensor's C backend), and where it would run an inner graph (``pytensor.scan``)
once per particle in that loop (``smc._batched.looped_inner_graphs``)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.slinalg import solve_triangular

from pymc_kameleon import KASS
from pymc_kameleon.smc._batched import (
    _LOOPED_CALLS_PER_PARTICLE,
    looped_core_calls,
    looped_inner_graphs,
    loops_added_per_particle,
)

CVM = {"mode": "CVM"}  # PyTensor's C/Python virtual machine: PyMC 5's default, available on PyMC 6 too


def blockwise_solve(mode):
    """One triangular solve per (particle, row): a Blockwise of batch shape (particles, 100)."""
    L = pt.tensor("L", shape=(None, 1, 3, 3))
    b = pt.tensor("b", shape=(None, 100, 3))
    return pytensor.function([L, b], solve_triangular(L, b, lower=True, b_ndim=1), mode=mode)


def test_looped_core_calls_counts_the_python_loop_of_a_blockwise():
    fn = blockwise_solve("CVM")
    assert looped_core_calls(fn, particle_axis=True) == 100  # per particle: its 100 rows
    assert looped_core_calls(fn) == 100  # the particle axis is of unknown length: counted once
    L = np.tile(np.eye(3), (5, 1, 1, 1))
    np.testing.assert_allclose(fn(L, np.ones((5, 100, 3))), 1.0)  # the function is what it claims
    x = pt.vector("x")
    plain = pytensor.function([x], (x**2).sum(), mode="CVM")
    assert looped_core_calls(plain) == 0
    assert looped_core_calls(lambda x: x) == 0  # not a PyTensor function


def test_a_compiled_loop_is_not_counted():
    pytest.importorskip("numba")
    assert looped_core_calls(blockwise_solve("NUMBA"), particle_axis=True) == 0


def mvnormal_model(rows: int, in_data: bool = False):
    """A 3-d normal likelihood of ``rows`` rows with an LKJ Cholesky factor (a new user's model); the
    observations in ``pm.Data`` (of no static shape) with ``in_data``."""
    data = np.random.default_rng(0).normal(size=(rows, 3)) * [1.0, 2.0, 0.5]
    with pm.Model() as model:
        if in_data:
            data = pm.Data("observations", data)
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=3, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=True
        )
        mu = pm.Normal("mu", 0.0, 5.0, shape=3)
        pm.MvNormal("y", mu=mu, chol=chol, observed=data)
    return model


def kernel(model, **options):
    k = KASS(draws=40, model=model, random_seed=1, compile_kwargs=CVM, **options)
    k.initialize(None, np.random.default_rng(2))
    return k


@pytest.mark.parametrize("in_data", [False, True], ids=["numpy", "pm.Data"])
def test_auto_evaluates_one_by_one_where_vectorising_loops_in_python(in_data):
    model = mvnormal_model(rows=100, in_data=in_data)
    auto, insisted = kernel(model), kernel(model, batch_logp=True)
    # pm.Data's rows have no static length: the count sees one solve, the model with constants 100.
    assert looped_core_calls(insisted._batch_logp_func, particle_axis=True) == (2 if in_data else 101)
    added = loops_added_per_particle(
        insisted._batch_logp_func, (insisted.prior_logp_func, insisted.likelihood_logp_func), model,
        insisted.variables, CVM,
    )
    assert added == 101 > _LOOPED_CALLS_PER_PARTICLE
    assert not auto._use_batch and auto._batch_logp_func is None
    assert auto.sample_settings()["batch_logp"] == 0 and auto.sample_settings()["batch_check_evals"] == 0
    assert insisted._use_batch  # batch_logp=True still insists
    points = np.random.default_rng(3).normal(size=(30, 9)) * 0.3
    prior_a, lik_a = auto._evaluate(points)
    prior_i, lik_i = insisted._evaluate(points)
    np.testing.assert_allclose(prior_a, prior_i, rtol=1e-10)
    np.testing.assert_allclose(lik_a, lik_i, rtol=1e-10)


def test_auto_keeps_vectorising_a_loop_of_a_few_calls_per_particle():
    """The control: one row is one solve per particle, cheaper vectorised."""
    auto = kernel(mvnormal_model(rows=1))
    assert 0 < looped_core_calls(auto._batch_logp_func, particle_axis=True) <= _LOOPED_CALLS_PER_PARTICLE
    assert auto._use_batch


def ar1_scan_model():
    """An AR(1) likelihood written with ``pytensor.scan`` (a user's time series): vectorised, one Scan per
    particle in the Blockwise's Python loop (21.2 s against 2.6 s one by one at 1000 particles, PyMC 5)."""
    y = np.cumsum(np.random.default_rng(1).normal(size=30)) * 0.3
    with pm.Model() as model:
        phi = pm.Uniform("phi", -1, 1)
        s = pm.HalfNormal("s", 1.0)
        means, _ = pytensor.scan(lambda y_prev, phi: phi * y_prev, sequences=[pt.as_tensor(y[:-1])],
                                 non_sequences=[phi])
        pm.Potential("likelihood", pm.logp(pm.Normal.dist(means, s), y[1:]).sum())
    return model


def test_auto_evaluates_one_by_one_where_a_scan_would_loop_in_python():
    model = ar1_scan_model()
    auto, insisted = kernel(model), kernel(model, batch_logp=True)
    # One looped call per particle, under the count's threshold: the Scan's inner graph decides.
    assert looped_core_calls(insisted._batch_logp_func, particle_axis=True) == 1
    assert looped_inner_graphs(insisted._batch_logp_func) == ["Scan"]
    assert auto._batch_logp_func is None and not auto._use_batch
    assert insisted._use_batch
    points = np.random.default_rng(3).normal(size=(20, 2)) * 0.3
    for a, b in zip(auto._evaluate(points), insisted._evaluate(points)):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    # The control: the LKJ model of one row loops no inner graph.
    assert looped_inner_graphs(kernel(mvnormal_model(rows=1))._batch_logp_func) == []
