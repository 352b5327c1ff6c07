"""The search for a start before tuning (core/starts.py): it finds the higher basin, counts its
evaluations, survives non-finite densities, and never keeps a point outside the plausible box."""

import math
import warnings
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from pymc_kameleon.core.starts import PlausibleBox, powell_run, search_start

UNBOUNDED = PlausibleBox(np.full(2, -np.inf), np.full(2, np.inf))


def _two_basins(x):
    """A major mode at (5, 5) and a minor one at (-5, -5), 40 nats lower."""
    x = np.asarray(x, dtype=float)
    major = -0.5 * np.sum((x - 5.0) ** 2)
    minor = -40.0 - 0.5 * np.sum((x + 5.0) ** 2)
    return float(np.logaddexp(major, minor))


def test_the_candidate_in_the_higher_basin_wins_and_the_evaluations_are_counted():
    calls = []

    def log_density(x):
        calls.append(1)
        return _two_basins(x)

    start = np.array([-5.0, -5.0])
    candidates = np.array([[-4.0, -6.0], [3.0, 4.0]])
    found = search_start(log_density, start, _two_basins(start), candidates, UNBOUNDED, max_evals=100)
    assert found.moved and np.allclose(found.state, [5.0, 5.0], atol=0.1)
    assert math.isclose(found.log_density, _two_basins(found.state), abs_tol=1e-9)
    assert found.n_evals == len(calls) <= 2 * (100 + 20)  # Powell may finish its last line search


def test_a_start_better_than_every_candidate_is_kept():
    start = np.array([5.0, 5.0])
    found = search_start(_two_basins, start, _two_basins(start), np.array([[-5.0, -4.0]]), UNBOUNDED, 50)
    assert not found.moved and np.array_equal(found.state, start) and found.n_evals > 0


def test_non_finite_densities_are_no_obstacle():
    """-inf outside the positive quadrant and NaN on one line: the search still reaches the mode."""

    def log_density(x):
        if x[0] == 1.0:
            return math.nan
        return -0.5 * np.sum((x - 3.0) ** 2) if np.all(x > 0) else -math.inf

    start = np.array([10.0, 10.0])
    found = search_start(log_density, start, log_density(start), np.array([[0.5, 8.0]]), UNBOUNDED, 200)
    assert found.moved and np.allclose(found.state, [3.0, 3.0], atol=0.1)


def test_an_unbounded_density_never_lures_the_search_outside_the_box():
    """A funnel-like density that grows without bound as x[0] -> -inf: the runs head there, the box
    (from 'prior draws' in [-2, 2]) rejects where they end, and the chain keeps its start. Without the
    box (the control) the search does move far out."""

    def funnel(x):
        return -7.0 * x[0] - 0.5 * x[1] ** 2 if x[0] > -50 else -math.inf

    draws = np.random.default_rng(0).uniform(-2, 2, size=(100, 2))
    box = PlausibleBox.from_draws(draws)
    start = np.array([1.0, 0.0])
    found = search_start(funnel, start, funnel(start), np.array([[0.0, 1.0]]), box, 200)
    assert not found.moved and np.array_equal(found.state, start)
    control = search_start(funnel, start, funnel(start), np.array([[0.0, 1.0]]), UNBOUNDED, 200)
    assert control.moved and control.state[0] < -10


def test_the_box_is_the_draws_range_and_flat_coordinates_are_free():
    draws = np.array([[0.0, 10.0], [2.0, 20.0]])
    box = PlausibleBox.from_draws(draws, unbounded=np.array([False, True]))
    assert np.array_equal(box.lower, [0.0, -np.inf]) and np.array_equal(box.upper, [2.0, np.inf])
    assert box.contains([1.9, 1e9]) and not box.contains([2.1, 0.0]) and not box.contains([np.nan, 0.0])


def test_the_widened_box_keeps_its_centre_and_its_free_coordinates():
    """Centre 1, half-width 1 on x0 widened 4 times: [-3, 5]; the flat coordinate stays free, without
    NumPy's warning of -inf + inf (a new user's warnings filter turned it into an error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        box = PlausibleBox(np.array([0.0, -np.inf]), np.array([2.0, np.inf])).widened(4.0)
    assert np.array_equal(box.lower, [-3.0, -np.inf]) and np.array_equal(box.upper, [5.0, np.inf])
    assert box.contains([4.9, -1e9]) and not box.contains([5.1, 0.0])


def test_candidates_run_elsewhere_give_the_same_start_and_count():
    """With ``run_elsewhere`` (a real thread pool) every candidate but the first runs there; the result is
    the serial one, and a run lost elsewhere is run here instead."""
    start = np.array([-5.0, -5.0])
    candidates = np.array([[-4.0, -6.0], [3.0, 4.0], [6.0, 2.0]])
    serial = search_start(_two_basins, start, _two_basins(start), candidates, UNBOUNDED, max_evals=100)
    sent = []
    with ThreadPoolExecutor(2) as pool:

        def run_elsewhere(x0, max_evals):
            sent.append(x0)
            return pool.submit(powell_run, _two_basins, x0, max_evals)

        found = search_start(
            _two_basins, start, _two_basins(start), candidates, UNBOUNDED, 100, run_elsewhere
        )
    assert len(sent) == 2
    np.testing.assert_array_equal(found.state, serial.state)
    assert found.log_density == serial.log_density and found.moved == serial.moved
    assert found.n_evals == serial.n_evals

    lost = Future()
    lost.set_exception(RuntimeError("worker died"))
    again = search_start(
        _two_basins, start, _two_basins(start), candidates, UNBOUNDED, 100, lambda x0, n: lost
    )
    np.testing.assert_array_equal(again.state, serial.state)
    assert again.n_evals == serial.n_evals
