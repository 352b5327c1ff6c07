"""The GP's training schedule of GP delayed acceptance, without PyMC (core/gp_training.py)."""

import numpy as np
import pytest

from pymc_kameleon.core.gp.options import GPTrainingOptions
from pymc_kameleon.core.gp.training import (
    GP_FLOOR_NATS,
    MIN_STAGE1_ACCEPT,
    SCREENING_CHECK_STEPS,
    GPTrainingSchedule,
)


def options(d=1, gradients=False, **kw):
    return GPTrainingOptions.from_user(d, gradients=gradients, noisy_likelihood=False, **kw)


def quadratic_points(n, d=1, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x, -0.5 * np.sum(x**2, axis=1)


def test_defaults_follow_the_rows_per_point():
    o = options(d=3)
    assert (o.initial_points, o.max_points, o.fit_max_points) == (10, 1000, 300)
    g = options(d=3, gradients=True)  # each point adds d + 1 = 4 rows
    assert (g.initial_points, g.max_points, g.fit_max_points) == (10, 250, 75)
    noisy = dict(gradients=False, noisy_likelihood=True)
    assert GPTrainingOptions.from_user(1, **noisy).fit_noise
    assert not GPTrainingOptions.from_user(1, **noisy, noise_variance=0.1).fit_noise


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(initial_points=20, max_points=10), r"max_points \(10\) must be at least initial_points \(20\)"),
        (dict(noise_variance="learn"), "noise_variance must be"),
        (dict(gp_after_tuning="forever"), "gp_after_tuning must be one of"),
        (dict(fit_hyperparameters=1), "fit_hyperparameters must be True or False"),
        (dict(hyperparameters={"length": 1.0}), "hyperparameters must be a dict with keys among"),
        (dict(hyperparameters={"lengthscales": [1.0, 2.0, 3.0]}), r"must be a number or have length 2"),
        (dict(hyperparameters={"lengthscales": -1.0}), "must be positive"),
        (dict(jitter=-1.0), "jitter must be"),
    ],
)
def test_bad_options_name_themselves(kw, match):
    with pytest.raises(ValueError, match=match):
        options(d=2, **kw)


def test_a_fixed_mean_is_the_gps_prior_mean_and_not_a_hyperparameter():
    o = options(hyperparameters={"mean": -3.0, "signal_variance": 2.0})
    assert o.gp_mean == -3.0 and o.fixed_hyperparameters == {"signal_variance": 2.0}
    assert o.new_gp().signal_variance == 2.0


@pytest.mark.parametrize("d", [1, 4])
def test_values_far_below_the_best_are_clipped_to_the_floor_with_zero_gradient(d):
    s = GPTrainingSchedule(options(d=d, gradients=True))
    s.add(np.zeros(d), -5.0, np.ones(d), tune=True)
    s.add(np.full(d, 3.0), -1e300, np.full(d, -1e300), tune=True)
    floor = -5.0 - (GP_FLOOR_NATS + 5.0 * d)
    np.testing.assert_allclose(s.gp.values, [-5.0, floor])
    np.testing.assert_array_equal(s.gp.G[1], np.zeros(d))
    # Control: a value above the floor keeps its gradient.
    np.testing.assert_array_equal(s.gp.G[0], np.ones(d))


def test_a_new_best_raises_the_stored_values_to_its_floor():
    s = GPTrainingSchedule(options())
    s.add(np.array([5.0]), -1e7, tune=True)
    s.add(np.array([0.0]), 0.0, tune=True)
    np.testing.assert_allclose(s.gp.values, [-(GP_FLOOR_NATS + 5.0), 0.0])


def test_non_finite_values_and_missing_gradients_are_not_added():
    s = GPTrainingSchedule(options(gradients=True))
    assert not s.add(np.zeros(1), np.nan, np.zeros(1), tune=True)
    assert not s.add(np.zeros(1), -1.0, np.array([np.inf]), tune=True)
    assert not s.add(np.zeros(1), -1.0, None, tune=True)
    assert s.add(np.zeros(1), -1.0, np.zeros(1), tune=True) and s.gp.n_points == 1


def test_warm_up_ends_at_initial_points_only_when_allowed_then_fits_as_the_set_doubles():
    s = GPTrainingSchedule(options(initial_points=5))
    x, y = quadratic_points(40)
    fits = []
    for i in range(40):
        s.add(x[i], y[i], tune=True)
        allowed = i >= 7  # e.g. the coordinate scan ends after the 8th point
        fits.append(s.after_exact_evaluation(tune=True, scanning=not allowed, window=0,
                                             typical_step=1.0))
        assert s.warm == (i < 7)
    assert np.flatnonzero(fits).tolist() == [7, 15, 31]  # 8 points, then 16, then 32
    assert s.n_fits == 3 and s.next_fit == 64
    # After tuning the hyperparameters are frozen: no fit however much the set grows.
    for i in range(40):
        s.add(x[i] + 10.0, y[i], tune=False)
        assert not s.after_exact_evaluation(tune=False, scanning=False, window=0, typical_step=1.0)


def test_the_warm_up_fit_runs_from_the_data_scales_only(monkeypatch):
    """The warm-up's fit is one L-BFGS-B run from the data's scales: random restarts cost twice the rest
    of the fit and reached the same optimum in every warm-up fit probed (decision 0071). The schedule
    takes no random stream, so the step's stays untouched. The control: the same fit asked for two
    restarts makes three runs."""
    from pymc_kameleon.core.gp import fit as gp_fit
    from pymc_kameleon.core.gp.surrogate import GPSurrogate

    x, y = quadratic_points(30, d=2)

    def warm_up_end(n_restarts=None):
        s = GPTrainingSchedule(options(d=2, initial_points=30))
        for xi, yi in zip(x, y):
            s.add(xi, yi, tune=True)
        if n_restarts is not None:
            fit = GPSurrogate.fit_hyperparameters
            monkeypatch.setattr(GPSurrogate, "fit_hyperparameters",
                                lambda self, **k: fit(self, **k, n_restarts=n_restarts, rng=5))
        runs, minimize = [], gp_fit.minimize
        monkeypatch.setattr(gp_fit, "minimize", lambda *a, **k: runs.append(1) or minimize(*a, **k))
        assert s.end_warm_up(tune=True, typical_step=1.0)
        monkeypatch.undo()
        return len(runs)

    assert warm_up_end() == 1
    assert warm_up_end(n_restarts=2) == 3


def test_warm_up_heuristics_set_the_lengthscales_to_the_points_spread():
    s = GPTrainingSchedule(options(d=2, initial_points=3, fit_hyperparameters=False))
    pts = np.array([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0]])
    for p, v in zip(pts, [-1.0, -2.0, -4.0]):
        s.add(p, v, tune=True)
    assert not s.end_warm_up(tune=True, typical_step=0.7)
    np.testing.assert_allclose(s.gp.lengthscales, [np.std(pts[:, 0]), 0.7])  # no spread: the step size
    np.testing.assert_allclose(s.gp.signal_variance, np.var([-1.0, -2.0, -4.0]))


def test_a_full_gp_forgets_its_older_half_during_tuning_and_is_capped_after():
    s = GPTrainingSchedule(options(initial_points=2, max_points=10))
    x, y = quadratic_points(30)
    for i in range(11):
        s.add(x[i], y[i], tune=True)
    # The 11th point found the GP full: the oldest 5 went, the newest 6 stay.
    np.testing.assert_allclose(s.gp.values, y[5:11])
    for i in range(11, 30):
        s.add(x[i], y[i], tune=False)
    assert s.gp.n_points == 10  # after tuning the cap holds
    np.testing.assert_allclose(s.gp.values, y[5:15])


def test_a_frozen_gp_takes_no_points_after_tuning():
    s = GPTrainingSchedule(options(initial_points=1, gp_after_tuning="freeze"))
    s.add(np.zeros(1), -1.0, tune=True)
    s.end_warm_up(tune=False, typical_step=1.0)
    assert not s.add(np.ones(1), -2.0, tune=False) and s.gp.n_points == 1
    assert s.add(np.ones(1), -2.0, tune=True)  # control: during tuning it grows


def test_a_window_end_forgets_the_points_from_before_the_previous_window():
    s = GPTrainingSchedule(options(initial_points=2, fit_hyperparameters=False))
    x, y = quadratic_points(30)
    for w in range(3):
        for i in range(10 * w, 10 * w + 10):
            s.add(x[i], y[i], tune=True)
        assert not s.window_ended(None)
    # Three windows of 10 points: the first window's points are gone, the last two windows' stay.
    np.testing.assert_allclose(s.gp.values, y[10:30])
    assert s.window_start_points == [10, 20]


def test_screening_pauses_after_a_run_of_stage1_rejections_until_the_next_window():
    s = GPTrainingSchedule(options())
    s.warm = False
    for _ in range(SCREENING_CHECK_STEPS - 1):
        assert not s.record_stage1(0.0, window=3)
    assert s.record_stage1(0.0, window=3)
    assert s.paused and s.n_pauses == 1 and s.resume_window == 4
    assert not s.warm_up_may_end(scanning=False, window=3, tune=True)
    assert s.warm_up_may_end(scanning=False, window=4, tune=True)
    assert not s.warm_up_may_end(scanning=True, window=4, tune=True)  # never during the coordinate scan


def test_control_screening_that_passes_enough_proposals_never_pauses():
    s = GPTrainingSchedule(options())
    s.warm = False
    for _ in range(3 * SCREENING_CHECK_STEPS):
        assert not s.record_stage1(1.01 * MIN_STAGE1_ACCEPT, window=0)
    assert not s.paused and s.n_pauses == 0


def test_predictions_at_the_current_state_are_cached_per_gp_version():
    s = GPTrainingSchedule(options())
    key, calls = object(), []

    def make():
        calls.append(1)
        return len(calls)

    x = np.zeros(1)
    assert s.cached(x, key, make) == 1 and s.cached(x.copy(), key, make) == 1
    s.add(x, -1.0, tune=True)  # the GP changed
    assert s.cached(x, key, make) == 2
    assert s.cached(x + 1.0, key, make) == 3 and s.cached(x + 1.0, object(), make) == 4


def test_pause_while_walking_takes_exact_steps_until_the_next_window_ends():
    schedule = GPTrainingSchedule(GPTrainingOptions.from_user(2, gradients=False, noisy_likelihood=False))
    schedule.warm = False  # screening
    schedule.pause_while_walking(window=3, max_steps=5)
    assert schedule.warm and schedule.paused and schedule.pause_reason == "walking"
    assert schedule.n_walking_pauses == 1 and schedule.n_pauses == 0
    assert not schedule.warm_up_may_end(scanning=False, window=3, tune=True)
    assert schedule.warm_up_may_end(scanning=False, window=4, tune=True)  # the next window ended
    schedule.pause_steps_left = 0  # or max_steps exact evaluations were made
    assert schedule.warm_up_may_end(scanning=False, window=3, tune=True)
    assert not schedule.warm_up_may_end(scanning=True, window=3, tune=True)  # never in the scan


def test_a_walking_pause_ends_after_max_steps_exact_evaluations():
    options = GPTrainingOptions.from_user(1, gradients=False, noisy_likelihood=False, initial_points=2)
    schedule = GPTrainingSchedule(options)
    for x in (0.0, 1.0, 2.0):
        schedule.add(np.array([x]), -0.5 * x**2, tune=True)
    schedule.warm = False
    schedule.pause_while_walking(window=1, max_steps=3)
    ended = []
    for x in (3.0, 4.0, 5.0):
        schedule.add(np.array([x]), -0.5 * x**2, tune=True)
        schedule.after_exact_evaluation(tune=True, scanning=False, window=1, typical_step=1.0)
        ended.append(not schedule.warm)
    assert ended == [False, False, True]
    assert schedule.pause_reason is None


def test_a_fit_that_predicts_worse_leave_one_out_is_not_applied(monkeypatch):
    """A refit's hyperparameters replace the current ones only if they predict the fit's points at
    least as well (leave-one-out); the control, a fit that predicts better, is applied."""
    from pymc_kameleon.core.gp.surrogate import GPSurrogate

    s = GPTrainingSchedule(options(d=2, initial_points=5))
    x, y = quadratic_points(40, d=2, seed=3)
    for xi, yi in zip(x, y):
        s.add(xi, yi, tune=True)
    s.gp.set_hyperparameters(lengthscales=[1.5, 1.5], signal_variance=4.0)
    good = s.gp.loo_log_predictive_density()

    def fit_to(lengthscales):
        def fake_fit(self, **kwargs):
            self.set_hyperparameters(lengthscales=lengthscales)
        return fake_fit

    monkeypatch.setattr(GPSurrogate, "fit_hyperparameters", fit_to([0.02, 0.02]))  # fits noise
    s.fit()
    np.testing.assert_allclose(s.gp.lengthscales, [1.5, 1.5])
    assert s.last_fit_refused and s.n_fits_refused == 1 and s.n_fits == 1
    assert s.gp.loo_log_predictive_density() == pytest.approx(good)

    s.gp.set_hyperparameters(lengthscales=[0.05, 0.05])
    monkeypatch.setattr(GPSurrogate, "fit_hyperparameters", fit_to([1.5, 1.5]))
    s.fit()
    np.testing.assert_allclose(s.gp.lengthscales, [1.5, 1.5])
    assert not s.last_fit_refused and s.n_fits_refused == 1 and s.n_fits == 2
