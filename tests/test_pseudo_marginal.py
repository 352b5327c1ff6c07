"""PseudoMarginalPotential: the Op, misuse errors, estimator failures, and the estimator helpers."""

import math
import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy.stats import norm

from pymc_kameleon import (
    KameleonMetropolis,
    PseudoMarginalEstimatorError,
    PseudoMarginalMisuseError,
    PseudoMarginalPotential,
    importance_sampling_estimator,
    log_estimate_spread,
    log_mean_exp,
)
from pymc_kameleon.pseudo_marginal import pseudo_marginal_terms

SAMPLE_KW = dict(progressbar=False, compute_convergence_checks=False)


def noisy_gaussian_estimator(sd=0.5):
    """log L(theta) = log N(0.3; theta, 1), times an unbiased log-normal noise factor."""

    def log_est(theta, rng):
        eps = rng.normal(0.0, sd)
        return float(norm.logpdf(0.3, theta, 1.0) + eps - 0.5 * sd**2)

    return log_est


def simple_model(log_estimator, **kwargs):
    with pm.Model() as model:
        theta = pm.Normal("theta", 0, 1)
        PseudoMarginalPotential("lik", log_estimator, inputs=[theta], **kwargs)
    return model


# ------------------------------------------------------------------ helpers
def test_log_mean_exp_matches_direct_formula_and_is_stable():
    a = np.array([-1.0, 0.5, 2.0, -3.0])
    assert log_mean_exp(a) == pytest.approx(np.log(np.mean(np.exp(a))), rel=1e-14)
    # Direct evaluation over- or underflows; log_mean_exp does not.
    assert log_mean_exp(a + 1000.0) == pytest.approx(np.log(np.mean(np.exp(a))) + 1000.0, rel=1e-14)
    assert log_mean_exp(a - 1000.0) == pytest.approx(np.log(np.mean(np.exp(a))) - 1000.0, rel=1e-14)
    assert log_mean_exp(np.full(3, -np.inf)) == -np.inf
    m = np.array([[0.0, 1.0], [2.0, 3.0]])
    np.testing.assert_allclose(log_mean_exp(m, axis=0), np.log(np.exp(m).mean(0)), rtol=1e-14)
    with pytest.raises(ValueError, match="at least one"):
        log_mean_exp([])


def _one_point_is_estimator(y=1.3, n=4):
    # y | z ~ N(z, 1), z ~ N(theta, 1): p(y | theta) = N(y; theta, 2). Proposal = prior of z.
    return importance_sampling_estimator(
        log_weight=lambda z, theta: norm.logpdf(y, z, 1.0),
        sample=lambda theta, n, rng: theta + rng.standard_normal(n),
        n_samples=n,
    )


@pytest.mark.slow
def test_importance_sampling_estimator_is_unbiased_and_jensen_control_fails():
    y, theta = 1.3, -0.4
    log_est = _one_point_is_estimator(y)
    exact = norm.pdf(y, theta, math.sqrt(2.0))
    rng = np.random.default_rng(0)
    logs = np.array([log_est(theta, rng) for _ in range(20000)])
    values = np.exp(logs)
    se = values.std(ddof=1) / math.sqrt(values.size)
    assert abs(values.mean() - exact) < 4 * se  # unbiased for L
    # Negative control: exp(E log L_hat) is biased low (Jensen), by far more than the tolerance.
    assert exact - math.exp(logs.mean()) > 10 * se


def test_importance_sampling_estimator_checks_its_inputs():
    with pytest.raises(ValueError, match="n_samples"):
        importance_sampling_estimator(lambda f, t: f, lambda t, n, rng: t, n_samples=0)
    with pytest.raises(TypeError, match="callables"):
        importance_sampling_estimator(None, lambda t, n, rng: t)
    bad = importance_sampling_estimator(lambda f, t: np.zeros(3), lambda t, n, rng: np.zeros(n), n_samples=5)
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        bad(0.0, np.random.default_rng(0))


def test_log_estimate_spread_refuses_nan_and_inf_and_reports_zero_estimates():
    """A new user's estimator that returned +inf in 30% of the repeats got an sd of 1.33 from the others,
    and one that was 0 (log -inf) 35 times out of 100 was not told: NaN and +inf now raise, as sampling
    does, and the share of zero estimates is reported."""

    def sometimes(value, every):
        calls = [0]

        def estimator(theta, rng):
            calls[0] += 1
            return value if calls[0] % every == 0 else float(rng.normal(-3.0, 1.0))

        return estimator

    for value, kind in ((math.nan, "NaN"), (math.inf, r"\+inf")):
        with pytest.raises(ValueError, match=f"returned {kind} in 33 of 100 repeats"):
            log_estimate_spread(sometimes(value, 3), 0.0, n_repeats=100, rng=1)
    spread = log_estimate_spread(sometimes(-math.inf, 4), 0.0, n_repeats=100, rng=1)
    assert spread["zero_fraction"] == 0.25 and math.isfinite(spread["sd"])
    assert log_estimate_spread(sometimes(-math.inf, 1000), 0.0, n_repeats=100, rng=1)["zero_fraction"] == 0.0


def test_log_estimate_spread_reports_sd_and_shrinks_with_more_samples():
    small = log_estimate_spread(_one_point_is_estimator(n=2), 0.0, n_repeats=400, rng=1)
    large = log_estimate_spread(_one_point_is_estimator(n=200), 0.0, n_repeats=400, rng=1)
    assert small["log_values"].shape == (400,)
    assert large["sd"] < small["sd"] / 5  # sd ~ 1/sqrt(N)
    with pytest.raises(ValueError, match="n_repeats"):
        log_estimate_spread(_one_point_is_estimator(), 0.0, n_repeats=1)


def test_log_estimate_spread_of_a_correlated_estimator_and_its_log_ratio():
    """A correlated estimator (it takes u) gets fresh normals; its log-ratio one Crank-Nicolson move
    apart has sd s sqrt(2 (1 - rho)) for log L_hat = s z - s^2 / 2, z the scaled mean of u: 0.894 at
    s = 2, rho = 0.9, against s sqrt(2) = 2.83 at rho = 0 (the control); the package's own correlated
    estimators take their shape from their attribute (they raised a TypeError: an rng passed as u)."""

    def log_est(theta, u):
        z = u.mean() * math.sqrt(u.size)
        return 2.0 * z - 2.0

    log_est.auxiliary_shape = (3, 4)
    out = log_estimate_spread(log_est, 0.0, n_repeats=2000, rng=2, correlation=0.9)
    assert out["sd"] == pytest.approx(2.0, rel=0.06)
    assert out["log_ratio_sd"] == pytest.approx(2.0 * math.sqrt(0.2), rel=0.06)
    assert out["log_ratios"].shape == (2000,)
    control = log_estimate_spread(log_est, 0.0, n_repeats=2000, rng=2, correlation=0.0)
    assert control["log_ratio_sd"] == pytest.approx(2.0 * math.sqrt(2.0), rel=0.06)
    assert "log_ratio_sd" not in log_estimate_spread(log_est, 0.0, n_repeats=10, rng=2)

    from pymc_kameleon import correlated_importance_sampling_estimator

    y = np.array([0.2, -0.5, 1.1])
    cis = correlated_importance_sampling_estimator(
        lambda x, mu: norm.logpdf(y, x, 1.0), lambda u, mu: mu + u, n_samples=8, latent_shape=(3,)
    )
    spread = log_estimate_spread(cis, 0.1, n_repeats=50, rng=1, correlation=0.99)
    assert np.isfinite(spread["sd"]) and spread["log_ratio_sd"] < spread["sd"]
    with pytest.raises(ValueError, match="correlation needs a correlated estimator"):
        log_estimate_spread(_one_point_is_estimator(), 0.0, correlation=0.9)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        log_estimate_spread(log_est, 0.0, correlation=1.5)


# ------------------------------------------------------------------ the potential
def test_potential_is_found_and_point_logps_gives_a_one_off_estimate():
    model = simple_model(noisy_gaussian_estimator())
    [term] = pseudo_marginal_terms(model)
    assert term.name == "lik" and term.op.input_names == ("theta",)
    logps = model.point_logps()
    assert set(logps) == {"theta", "lik"} and np.isfinite(logps["lik"])


def test_bad_arguments_are_clear_errors():
    with pm.Model():
        theta = pm.Normal("theta")
        with pytest.raises(TypeError, match="callable"):
            PseudoMarginalPotential("lik", 3.0, inputs=[theta])
        with pytest.raises(ValueError, match="on_misuse"):
            PseudoMarginalPotential("lik", noisy_gaussian_estimator(), inputs=[theta], on_misuse="ignore")
        with pytest.raises(ValueError, match="at least one"):
            PseudoMarginalPotential("lik", noisy_gaussian_estimator(), inputs=[])


def test_estimate_inside_a_larger_expression_is_refused():
    with pm.Model() as model:
        theta = pm.Normal("theta")
        lik = PseudoMarginalPotential("lik", noisy_gaussian_estimator(), inputs=[theta])
        model.potentials.remove(lik)
        pm.Potential("twice", 2 * lik)
    with pytest.raises(ValueError, match="inside a larger expression"):
        pseudo_marginal_terms(model)


# ------------------------------------------------------------------ misuse
def test_automatic_step_assignment_and_nuts_name_kameleon():
    model = simple_model(noisy_gaussian_estimator())
    with model:
        with pytest.raises(PseudoMarginalMisuseError, match="KameleonMetropolis"):
            pm.sample(draws=10, tune=10, chains=1, **SAMPLE_KW)
        with pytest.raises(PseudoMarginalMisuseError, match="no gradient"):
            pm.NUTS()


@pytest.mark.parametrize("step_cls", [pm.Metropolis, pm.Slice, pm.DEMetropolisZ])
def test_stock_steps_that_would_re_estimate_are_refused(step_cls):
    model = simple_model(noisy_gaussian_estimator())
    with model:
        with pytest.raises(
            PseudoMarginalMisuseError, match=rf"{step_cls.__name__} evaluated .*KameleonMetropolis"
        ) as raised:
            pm.sample(step=step_cls(), draws=10, tune=10, chains=1, **SAMPLE_KW)
    # The message ends with its remedy, not with PyTensor's print of the node that raised it.
    assert str(raised.value).endswith("to run it anyway.")
    assert "Apply node" not in str(raised.value)


def test_on_misuse_warn_lets_stock_metropolis_run():
    model = simple_model(noisy_gaussian_estimator(), on_misuse="warn")
    with model:
        with pytest.warns(UserWarning, match="Monte-Carlo-within-Metropolis") as record:
            idata = pm.sample(step=pm.Metropolis(), draws=20, tune=10, chains=1, **SAMPLE_KW)
    assert idata.posterior["theta"].shape == (1, 20)
    # It does not advise the option the user already passed (a new user was told to).
    assert not any("Pass on_misuse='warn'" in str(w.message) for w in record)


# ------------------------------------------------------------------ estimator failures
def _sample(model, **kwargs):
    with model:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pm.sample(
                step=KameleonMetropolis(), draws=kwargs.pop("draws", 100), tune=kwargs.pop("tune", 100),
                chains=1, random_seed=kwargs.pop("random_seed", 1), **SAMPLE_KW, **kwargs,
            )


def test_estimator_that_raises_names_the_parameter_values():
    def fails_above_half(theta, rng):
        if theta > 0.5:
            raise FloatingPointError("solver diverged")
        return float(norm.logpdf(0.3, theta, 1.0))

    with pytest.raises(
        PseudoMarginalEstimatorError,
        match=r"raised FloatingPointError: solver diverged \(at theta=\d+\.\d+\)",
    ):
        _sample(simple_model(fails_above_half), draws=2000, tune=200)


def test_an_rng_estimator_given_auxiliary_shape_is_told_it_receives_u():
    """A new user passed auxiliary_shape to an estimator written for rng and read only "'numpy.ndarray'
    object has no attribute 'standard_normal'" (helper-70). The error now says what the argument is."""
    def rng_estimator(theta, rng):
        return float(norm.logpdf(0.3, theta, 1.0) + 0.1 * rng.standard_normal())

    with pytest.raises(PseudoMarginalEstimatorError, match=r"(?s)standard_normal.*with auxiliary_shape the "
                       r"estimator's last argument is u, standard normals of shape \(4,\), not a Generator"):
        _sample(simple_model(rng_estimator, auxiliary_shape=4))
    # Without auxiliary_shape the same estimator samples.
    assert _sample(simple_model(rng_estimator), draws=20, tune=20).posterior["theta"].shape == (1, 20)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_plus_inf_estimate_is_an_error(bad):
    def returns_bad_above_half(theta, rng):
        return bad if theta > 0.5 else float(norm.logpdf(0.3, theta, 1.0))

    with pytest.raises(PseudoMarginalEstimatorError, match=rf"returned {bad} \(at theta="):
        _sample(simple_model(returns_bad_above_half), draws=2000, tune=200)


def test_estimator_error_at_a_round_value_has_one_full_stop():
    """NumPy prints 0.0 as '0.': the message read 'returned nan at theta=0.. It must ...'."""
    with pytest.raises(PseudoMarginalEstimatorError) as err:
        _sample(simple_model(lambda theta, rng: np.nan), initvals={"theta": 0.0})
    assert "theta=0." in str(err.value) and ".." not in str(err.value)


def test_non_scalar_estimate_is_an_error():
    with pytest.raises(PseudoMarginalEstimatorError, match="scalar"):
        _sample(simple_model(lambda theta, rng: np.zeros(2)))


@pytest.mark.parametrize(
    ("bad", "what"), [(None, "a NoneType"), ("failed", "could not convert"), (1j, "a complex")]
)
def test_non_number_estimate_is_an_error_that_says_what_came_back(bad, what):
    with pytest.raises(PseudoMarginalEstimatorError, match=rf"returned {bad!r} \({what}.*at theta="):
        _sample(simple_model(lambda theta, rng: bad))


def test_minus_inf_estimate_is_a_rejection():
    def zero_above_half(theta, rng):
        return -np.inf if theta > 0.5 else float(norm.logpdf(0.3, theta, 1.0))

    idata = _sample(simple_model(zero_above_half), draws=1000, tune=300)
    theta = idata.posterior["theta"].values
    assert theta.max() <= 0.5 and theta.min() < 0.0
    assert np.isfinite(idata.sample_stats["loglik_estimate"].values).all()


def test_minus_inf_estimate_at_the_start_is_a_clear_error():
    model = simple_model(lambda theta, rng: -np.inf)
    with model:
        step = KameleonMetropolis()
        with pytest.raises(ValueError, match="log-estimates .*-inf"):
            step.step(model.initial_point())


# ------------------------------------------------------------------ correlated particle filter
def _linear_gaussian_ssm(n_steps=50, seed=0):
    """x_t = a x_{t-1} + sx e_t, y_t = x_t + sy n_t: data and the Kalman filter's exact log-likelihood."""
    a, sx, sy = 0.8, 1.0, 0.5
    rng = np.random.default_rng(seed)
    x = np.zeros(n_steps)
    x[0] = rng.normal() * sx / math.sqrt(1 - a * a)
    for t in range(1, n_steps):
        x[t] = a * x[t - 1] + sx * rng.normal()
    y = x + sy * rng.normal(size=n_steps)

    def kalman(a, sx, sy):
        m, p, ll = 0.0, sx**2 / (1 - a * a), 0.0
        for t in range(n_steps):
            if t:
                m, p = a * m, a * a * p + sx**2
            s = p + sy**2
            ll += -0.5 * (math.log(2 * math.pi * s) + (y[t] - m) ** 2 / s)
            gain = p / s
            m, p = m + gain * (y[t] - m), (1 - gain) * p
        return ll

    return y, (a, sx, sy), kalman


def _filter(y, n_particles=20, sort_particles=True):
    from pymc_kameleon import correlated_particle_filter

    return correlated_particle_filter(
        lambda v, a, sx, sy: v * sx / math.sqrt(1 - a * a),
        lambda x, v, t, a, sx, sy: a * x + sx * v,
        lambda x, t, a, sx, sy: -0.5 * (math.log(2 * math.pi * sy * sy) + (y[t] - x) ** 2 / sy**2),
        n_particles,
        y.size,
        sort_particles=sort_particles,
    )


@pytest.mark.slow
def test_particle_filter_is_unbiased_against_the_kalman_filter():
    """E[L_hat / L] = 1 over u ~ N(0, I) (Monte Carlo, 4 SE), with L from the Kalman filter."""
    y, params, kalman = _linear_gaussian_ssm()
    pf = _filter(y)
    assert pf.auxiliary_shape == (50, 21)
    rng = np.random.default_rng(1)
    log_l = kalman(*params)
    ratio = np.exp([pf(*params, rng.standard_normal(pf.auxiliary_shape)) - log_l for _ in range(3000)])
    assert abs(ratio.mean() - 1) < 4 * ratio.std() / math.sqrt(ratio.size)


def test_sorted_particle_filter_keeps_estimates_correlated():
    """After a Crank-Nicolson move (rho = 0.99) and a small change of a, the sorted filter's log-estimates
    stay strongly correlated (measured 0.92); the unsorted filter, the negative control, much less so
    (measured 0.73): the variance of its log-ratio, 2 (1 - corr) sd^2, is 3.4 times larger."""
    from pymc_kameleon.core.proposals import crank_nicolson_move

    y, (a, sx, sy), _ = _linear_gaussian_ssm()
    rng = np.random.default_rng(2)
    corr = {}
    for sort in (True, False):
        pf, pairs = _filter(y, sort_particles=sort), []
        for _ in range(300):
            u = rng.standard_normal(pf.auxiliary_shape)
            pairs.append((pf(a, sx, sy, u), pf(a + 0.01, sx, sy, crank_nicolson_move(u, 0.99, rng))))
        corr[sort] = np.corrcoef(np.array(pairs).T)[0, 1]
    assert corr[True] > 0.85 and (1 - corr[False]) > 2 * (1 - corr[True]), corr


def test_particle_filter_options_are_checked():
    from pymc_kameleon import correlated_particle_filter

    f = lambda *args: None  # noqa: E731
    with pytest.raises(ValueError, match="n_particles must be a positive integer"):
        correlated_particle_filter(f, f, f, 0, 10)
    with pytest.raises(TypeError, match="must be callables"):
        correlated_particle_filter(f, None, f, 10, 10)
    y, params, _ = _linear_gaussian_ssm(5)
    bad = correlated_particle_filter(lambda v, *p: np.zeros((v.size, 2)), f, f, 4, 5)
    with pytest.raises(ValueError, match="scalar states"):
        bad(*params, np.zeros((5, 5)))


@pytest.mark.parametrize("fault", ["nan", "+inf", "-inf", "infinite states"])
def test_a_faulty_log_observation_is_an_error_not_a_zero_estimate(fault):
    """A NaN (or +inf) from log_observation for a few particles made the estimate 0 (-inf) without a
    word, and the chain rejected every proposal there; now it is an error naming the step and the count.
    The controls: -inf for a few particles is a zero weight (a finite estimate), -inf everywhere a zero
    estimate; and states that are not finite (the stochastic volatility model's sd sigma / sqrt(1 - phi^2)
    at phi = 1 exactly) have weight zero, whatever log_observation makes of them."""
    from pymc_kameleon import correlated_particle_filter

    y, params, _ = _linear_gaussian_ssm(5)
    value = {"nan": np.nan, "+inf": np.inf, "-inf": -np.inf, "infinite states": 0.0}[fault]
    first_three = np.arange(8) < 3

    def log_observation(x, t, a, sx, sy):
        out = -0.5 * (y[t] - x) ** 2  # NaN at an infinite state: inf - inf
        return np.where(first_three, value, out) if t == 2 and fault != "infinite states" else out - x + x

    def transition(x, v, t, a, sx, sy):
        blown_up = t == 2 and fault == "infinite states"
        return np.where(first_three, np.inf, a * x + v) if blown_up else a * x + v

    pf = correlated_particle_filter(lambda v, a, sx, sy: v, transition, log_observation, 8, 5)
    u = np.random.default_rng(0).standard_normal(pf.auxiliary_shape)
    if fault in ("-inf", "infinite states"):
        assert np.isfinite(pf(*params, u))  # three zero weights of eight: a finite estimate
        zero = lambda x, t, *p: np.full(x.size, -np.inf)  # noqa: E731
        everywhere = correlated_particle_filter(lambda v, *p: v, lambda x, v, t, *p: x, zero, 8, 5)
        assert everywhere(*params, u) == -np.inf
        return
    said = {"nan": "NaN", "+inf": r"\+inf"}[fault]
    with pytest.raises(ValueError, match=rf"returned {said} for 3 of 8 particles at step t=2, at finite"):
        pf(*params, u)


def test_inputs_must_depend_on_a_free_variable():
    with pm.Model():
        theta = pm.Normal("theta")
        with pytest.raises(ValueError, match="None of the inputs depends on a free variable"):
            PseudoMarginalPotential("lik", lambda c, rng: 0.0, inputs=[1.0])
        with pytest.raises(ValueError, match="None of the inputs depends on a free variable"):
            PseudoMarginalPotential("lik2", lambda c, rng: 0.0, inputs=[pt.as_tensor_variable(np.ones(3))])
        # an expression of a variable, next to a constant, is fine
        PseudoMarginalPotential("lik3", lambda a, c, rng: 0.0, inputs=[2 * theta, 1.0])


def test_a_variable_given_by_its_name_is_named():
    """inputs="theta" failed inside PyTensor: "Cannot convert 'theta' to a tensor variable"."""
    with pm.Model():
        pm.Normal("theta")
        message = r"inputs\[0\] is the string 'theta': pass the model variable itself \(inputs=\[theta\]\)"
        with pytest.raises(TypeError, match=message):
            PseudoMarginalPotential("lik", lambda th, rng: 0.0, inputs="theta")
        with pytest.raises(TypeError, match=r"inputs\[0\] is not a model variable"):  # not a string
            PseudoMarginalPotential("lik", lambda th, rng: 0.0, inputs=[object()])


def test_a_zero_estimate_at_the_start_is_named_as_an_estimate_not_a_zero_density():
    """A new user's estimator returned 0 at its first call and was told the chain cannot start from a point
    of zero density: the exact part is finite there, so the error says an estimate of 0 made it -inf."""
    from pymc_kameleon import KameleonMetropolis, PseudoMarginalPotential

    calls = [0]

    def first_zero(theta, rng):
        calls[0] += 1
        return -math.inf if calls[0] <= 2 else float(-0.5 * theta**2)  # 2: the randomness check's call too

    with pm.Model():
        theta = pm.Normal("theta", 0, 1)
        PseudoMarginalPotential("lik", first_zero, inputs=[theta])
        with pytest.raises(ValueError, match="an estimate of 0 made it -inf"):
            pm.sample(step=KameleonMetropolis(), tune=10, draws=10, chains=1, random_seed=1, **SAMPLE_KW)
