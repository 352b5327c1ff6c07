"""Speculative delayed acceptance without PyMC (core/delayed_acceptance/speculation.py): the prefetch's
bookkeeping, and a chain whose exact evaluations come from workers ahead of need equals the serial
chain bit for bit, with a negative control (a worker value that is slightly off changes the draws, so
the comparison can fail).

The workers are a real ``ThreadPoolExecutor`` (the PyMC step's process and Dask pools are tested in
tests/steps/test_speculative_da.py and tests/test_distributed.py)."""

import gc
import math
import sys
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest
from test_delayed_acceptance_kernel import N_OBS, Y_BAR, GaussianDensity, new_kernel

from pymc_kameleon.core.delayed_acceptance.kernel import DelayedAcceptanceMH
from pymc_kameleon.core.delayed_acceptance.speculation import SWITCH_INTERVAL, Prefetch


def _done(value):
    future = Future()
    future.set_result(value)
    return future


def _worker(log):
    def submit(theta):
        log.append(theta.copy())
        return _done(float(theta.sum()))

    return submit


def _here(theta):
    return float(theta.sum())


def test_a_round_keeps_the_guess_about_to_be_used_and_drops_the_rest():
    submitted = []
    prefetch = Prefetch(_worker(submitted), _here, slots=1)
    a, b, c = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0])
    assert prefetch.begin_round(a) == "worker"
    prefetch.add(b, "worker")
    assert prefetch.take(a) is None  # never guessed: the caller evaluates itself
    assert prefetch.begin_round(b) == "worker"  # b's guess is kept (and done: the worker is free)
    prefetch.add(c, "worker")
    assert prefetch.take(b) == 7.0
    assert prefetch.begin_round(np.array([9.0, 9.0])) == "worker"  # c was not evaluated next: dropped
    assert prefetch.take(c) is None
    assert (prefetch.submitted, prefetch.used, len(submitted)) == (2, 1, 2)
    # Only bitwise-equal points match: a guess one ulp away is not used.
    prefetch.begin_round(a)
    prefetch.add(a, "worker")
    assert prefetch.take(np.nextafter(a, 10.0)) is None


def test_a_guess_goes_to_a_free_worker_else_here_while_the_chain_waits_else_nowhere():
    running = []

    def submit(theta):
        running.append(Future())
        running[-1].set_running_or_notify_cancel()  # started on a worker: it cannot be cancelled
        return running[-1]

    evaluated_here = []
    prefetch = Prefetch(submit, lambda theta: evaluated_here.append(theta) or 1.5, slots=1)
    a, b, c = np.zeros(1), np.ones(1), np.full(1, 2.0)
    assert prefetch.begin_round(a) == "worker"
    prefetch.add(b, "worker")
    # The chain is at b, whose value the busy worker is making: the next guess is evaluated here.
    assert prefetch.begin_round(b) == "here"
    prefetch.add(c, "here")
    assert len(evaluated_here) == 1
    running[0].set_result(4.0)
    assert prefetch.take(b) == 4.0
    assert prefetch.begin_round(c) == "worker"
    assert prefetch.take(c) == 1.5
    # The chain is at a point nobody guessed while a stale guess occupies the worker: no guess (the
    # chain's process evaluates the point itself).
    prefetch.add(a, "worker")
    assert prefetch.begin_round(b) is None
    # A guess still queued (not started) is cancelled when it goes stale, and frees its worker.
    queued = Prefetch(lambda theta: Future(), _here, slots=1)
    queued.begin_round(a)
    queued.add(b, "worker")
    assert queued.begin_round(c) == "worker"


def test_the_switch_interval_is_lowered_while_a_prefetch_lives():
    """Executors hand work over in threads of the chain's process: while a chain speculates, CPython's
    GIL switch interval is SWITCH_INTERVAL, and the interpreter's own again once no prefetch is left."""
    gc.collect()  # the prefetches of earlier tests
    before = sys.getswitchinterval()
    assert before > SWITCH_INTERVAL
    first, second = Prefetch(_worker([]), _here), Prefetch(_worker([]), _here)
    assert math.isclose(sys.getswitchinterval(), SWITCH_INTERVAL)
    del first
    gc.collect()
    assert math.isclose(sys.getswitchinterval(), SWITCH_INTERVAL)  # the second still speculates
    del second
    gc.collect()
    assert math.isclose(sys.getswitchinterval(), before)


def test_a_guess_that_failed_is_evaluated_again_by_the_caller():
    failed = Future()
    failed.set_exception(RuntimeError("worker lost"))
    lost = []
    for future in (failed, _done(None)):  # lost by the executor; raised in the function (None)
        prefetch = Prefetch(lambda theta, f=future: f, _here, on_failure=lambda: lost.append(1))
        prefetch.begin_round(np.ones(2))
        prefetch.add(np.zeros(2), "worker")
        assert prefetch.take(np.zeros(2)) is None
        assert (prefetch.used, prefetch.given_up) == (0, 1)
    assert len(lost) == 2
    # A guess evaluated here whose function raised: also evaluated again by the caller.
    prefetch = Prefetch(_worker([]), lambda theta: 1 / 0)
    prefetch.add(np.zeros(2), "here")
    assert prefetch.take(np.zeros(2)) is None


class PrefetchingDensity(GaussianDensity):
    """GaussianDensity whose likelihood values may come from a prefetch (as SplitTargetDensity's do)."""

    def __init__(self, prefetch=None, offset=0.0):
        super().__init__()
        self.prefetch = prefetch
        self.offset = offset  # what a worker adds (the negative control)

    @staticmethod
    def loglik(theta):
        return float(-0.5 * N_OBS * (theta - Y_BAR) @ (theta - Y_BAR))

    def on_worker(self, theta):
        return self.loglik(theta) + self.offset

    def evaluate(self, theta, prior=None):
        value = None if self.prefetch is None else self.prefetch.take(theta)
        evaluation = super().evaluate(theta, prior)
        if value is None:
            return evaluation
        return evaluation._replace(loglik=value, logp=evaluation.log_prior + value)


def run(n_steps=1600, n_tune=800, seed=5, workers=0, slots=2, offset=0.0):
    """A chain driven as the PyMC step drives it; with ``workers``, speculative after tuning."""
    kernel = new_kernel(DelayedAcceptanceMH, poor_gp=False)
    rng = np.random.default_rng(seed)
    pool = ThreadPoolExecutor(workers) if workers else None
    density = PrefetchingDensity(offset=offset)
    state = np.array([1.5, 1.5])
    evaluation = density.evaluate(state)
    draws, exact = [], 0
    try:
        for t in range(n_steps):
            tune = t < n_tune
            if t == n_tune:
                kernel.schedule.end_tuning()
                kernel.freeze(rng)
                if pool is not None:
                    density.prefetch = kernel.prefetch = Prefetch(
                        lambda theta: pool.submit(density.on_worker, theta), density.on_worker, slots=slots
                    )
            current = state
            result = kernel.step(current, evaluation, density, rng, tune=tune)
            if result.accepted:
                state, evaluation = result.state, result.evaluation
            kernel.learn(current, result, rng, tune=tune, log_density=evaluation.logp,
                         gradient=evaluation.grad_logp)
            if not tune:
                draws.append(state)
                exact += result.evaluation is not None
    finally:
        if pool is not None:
            pool.shutdown()
    return np.array(draws), exact, kernel.prefetch


@pytest.mark.parametrize("slots", [1, 2])
def test_the_speculative_chain_is_the_serial_chain(slots):
    serial, exact, _ = run()
    speculative, exact_spec, prefetch = run(workers=slots, slots=slots)
    np.testing.assert_array_equal(speculative, serial)
    assert exact_spec == exact
    # Nearly every exact evaluation was guessed (the predicted branch's: the stage-2 uniform is known),
    # and at most one guess was evaluated per evaluation.
    assert prefetch.used / exact > 0.8
    assert prefetch.submitted <= exact


def test_negative_control_a_slightly_wrong_worker_value_changes_the_draws():
    serial, _, _ = run()
    speculative, _, prefetch = run(workers=2, offset=0.05)
    assert prefetch.used > 0
    assert not np.array_equal(speculative, serial)
