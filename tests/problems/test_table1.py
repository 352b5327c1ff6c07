"""The Table-1 targets of the GP delayed-acceptance paper (pymc_kameleon.problems.table1)."""

import math

import numpy as np
import pymc as pm
import pytensor
import pytest
from scipy.integrate import odeint

from pymc_kameleon import GPDelayedAcceptanceMH
from pymc_kameleon.problems.gp_classification import GPClassificationLikelihood
from pymc_kameleon.problems.table1 import (
    PAPER_TABLE1,
    TARGETS,
    _ScaledGPClassification,
    build,
    logistic_features,
    sir_solution,
)

NAMES = sorted(TARGETS)


def _true_point(target):
    """A model point (value variables, transformed) at the true parameter values."""
    t = dict(zip(target.labels, target.true_values))
    values = {
        "T1": lambda: {"a": t["a"], "b": t["b"]},
        "T2": lambda: {"a": t["a"], "b": t["b"], "log_sigma": math.log(t["sigma"])},
        "T3": lambda: {"log_ell1": math.log(t["ell1"]), "log_ell2": math.log(t["ell2"]),
                       "log_sigma2": math.log(t["sigma2"])},
        "T4": lambda: {"R0": t["beta"] / t["gamma"], "lambda": t["gamma"],
                       "sigma": np.array([t["sigma1"], t["sigma2"]])},
        "T5": lambda: {"beta": target.true_values},
    }[target.name]()
    model = target.model
    point = {}
    for rv in model.free_RVs:
        value_var = model.rvs_to_values[rv]
        transform = model.rvs_to_transforms.get(rv)
        v = np.asarray(values[rv.name], dtype=float)
        point[value_var.name] = transform.forward(v, *rv.owner.inputs).eval() if transform is not None else v
    return point


@pytest.mark.parametrize("name", NAMES)
def test_model_compiles_and_logp_finite_at_truth(name):
    target = build(name, seed=3)
    assert target.name == name and len(target.params) == len(target.true_values)
    assert target.paper is PAPER_TABLE1[name]
    logp = target.model.compile_logp()
    point = _true_point(target)
    calls = target.counter.calls
    value = float(logp(point))
    assert np.isfinite(value)
    assert target.counter.calls == calls + 1  # one compiled evaluation = one counted likelihood call
    # The reported parameters at that point are the true values (checks params and the point).
    model = target.model
    outs = model.replace_rvs_by_values([model[v] for _, v, _ in target.params])
    fn = pytensor.function(model.value_vars, outs, on_unused_input="ignore")
    outs = fn(**point)
    got = [np.asarray(o)[i] if i is not None else float(o) for o, (_, _, i) in zip(outs, target.params)]
    np.testing.assert_allclose(got, target.true_values, rtol=1e-10)
    assert np.isfinite(float(logp(target.model.initial_point())))


@pytest.mark.parametrize("name", NAMES)
def test_data_reproducible_from_seed(name):
    a, b, c = build(name, seed=11), build(name, seed=11), build(name, seed=12)
    for key in a.data:
        np.testing.assert_array_equal(a.data[key], b.data[key])
    np.testing.assert_array_equal(a.true_values, b.true_values)
    observed = {"T1": "z2", "T2": "y", "T3": "y", "T4": "y", "T5": "y"}[name]
    assert not np.array_equal(a.data[observed], c.data[observed])


def test_t5_features_and_truth():
    target = build("T5", seed=0)
    X = target.data["X"]
    np.testing.assert_allclose(target.data["features"], logistic_features(X))
    np.testing.assert_allclose(logistic_features(np.array([[2.0, 3.0]])), [[1.0, 2.0, 3.0, 6.0, 4.0]])
    assert X.shape == (1000, 2) and target.true_values.shape == (5,)


def test_sir_solution_against_invariant_and_odeint():
    # Along SIR trajectories, S + I - (gamma / beta) log S is conserved (dH/dt = 0 by the ODE).
    beta, gamma = 4.0, 1.0
    curves = sir_solution(beta, gamma)
    S, I = curves[:, 0], curves[:, 1]  # noqa: E741 (the model's names)
    H = S + I - gamma / beta * np.log(S)
    np.testing.assert_allclose(H, H[0], atol=1e-7)
    np.testing.assert_allclose(curves[0], [0.99, 0.01])
    # Early times: I grows at rate beta S0 - gamma, I(t) ~ I0 exp((beta S0 - gamma) t).
    short = sir_solution(beta, gamma, times=np.array([0.0, 1e-3]))
    np.testing.assert_allclose(short[1, 1], 0.01 * math.exp((beta * 0.99 - gamma) * 1e-3), rtol=1e-6)
    # An independent solver agrees.
    ref = odeint(lambda y, t: [-beta * y[0] * y[1], beta * y[0] * y[1] - gamma * y[1]], [0.99, 0.01],
                 np.arange(0.0, 5.0, 0.25), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(curves, ref, atol=1e-7)


def test_sir_data_follow_the_lognormal_model():
    # log(y / x(t)) are the noise draws: unit-scale residuals with sd sigma_c.
    target = build("T4", seed=0)
    truth = sir_solution(4.0, 1.0)[1:]
    z = np.log(target.data["y"] / truth) / np.array([0.2, 0.3])
    assert z.shape == (19, 2) and abs(z.mean()) < 0.6 and 0.6 < z.std() < 1.5


@pytest.mark.parametrize("name", ["T3", "T4"])
def test_black_box_ops_have_no_gradient(name):
    target = build(name, seed=0)
    assert not target.has_gradient
    with target.model:
        with pytest.raises(Exception):  # noqa: B017 (PyMC cannot differentiate the Op; its error type varies)
            pm.NUTS()
        # Automatic assignment falls back to a gradient-free step for every variable.
        step = pm.sampling.mcmc.assign_step_methods(target.model, None)
    methods = step.methods if hasattr(step, "methods") else [step]
    assert not any(isinstance(m, pm.NUTS) for m in methods)


@pytest.mark.parametrize("name", ["T1", "T2", "T5"])
def test_counted_likelihood_keeps_the_gradient(name):
    target = build(name, seed=0)
    assert target.has_gradient
    dlogp = target.model.compile_dlogp()
    grad = dlogp(target.model.initial_point())
    assert np.all(np.isfinite(grad)) and np.any(grad != 0)
    # Counting does not change the gradient: finite differences of the counted logp agree.
    logp = target.model.compile_logp()
    point = target.model.initial_point()
    name0 = target.model.value_vars[0].name
    h = 1e-6
    e0 = np.zeros(np.shape(point[name0]))
    e0.flat[0] = h  # the first coordinate of the raveled value vector, as dlogp orders them
    up, down = dict(point), dict(point)
    up[name0] = np.asarray(point[name0]) + e0
    down[name0] = np.asarray(point[name0]) - e0
    fd = (float(logp(up)) - float(logp(down))) / (2 * h)
    assert fd == pytest.approx(float(np.ravel(grad)[0]), rel=1e-5, abs=1e-6)


def test_gp_classifier_likelihood_scales_with_signal_variance():
    # The Op's kernel is sigma^2 times the unit-variance kernel: at sigma^2 = 1 it is the base class's.
    target = build("T3", seed=0)
    X, y = target.data["X"], target.data["y"]
    theta = np.array([2 * math.log(0.5), 2 * math.log(0.8)])
    base = GPClassificationLikelihood(X, y).laplace_log_marginal(theta)
    scaled = _ScaledGPClassification(X, y)
    assert scaled.laplace_log_marginal(np.append(theta, 0.0)) == pytest.approx(base, rel=1e-10)
    K5 = scaled.kernel_matrix(np.append(theta, math.log(5.0)))
    K1 = GPClassificationLikelihood(X, y).kernel_matrix(theta)
    off = ~np.eye(len(y), dtype=bool)
    np.testing.assert_allclose(K5[off], 5.0 * K1[off])


def test_counter_matches_gp_da_exact_evaluations():
    # The counter, the step's running count and its n_exact_evals see the same likelihood calls.
    target = build("T4", seed=0)
    with target.model:
        # start="initial_point": at most one evaluation per step (the search's are counted alike).
        step = GPDelayedAcceptanceMH(rng=np.random.default_rng(0), start="initial_point")
        target.counter.calls = 0
        point = target.model.initial_point()
        for _ in range(60):
            point, stats = step.step(point)
    assert target.counter.calls == stats[0]["cumulative_logp_evals"] == step.n_exact_evals
    assert 0 < target.counter.calls <= 60 + 1
