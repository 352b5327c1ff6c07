r"""Speculative exact evaluations: while the main process evaluates the likelihood at one proposal,
idle workers evaluate it at the proposals the chain will most likely evaluate next.

After tuning, a GP delayed-acceptance chain is a deterministic function of its random stream and of
the exact values it sees. At a stage-2 evaluation at :math:`y_t` the only unknown is
:math:`\ell(y_t)`; the GP predicts it (its mean :math:`\mu(y_t)`). A *dry run* of the chain from
there, on a copy of the random stream, with :math:`\ell(y_t) := \mu(y_t)` and without adding
:math:`y_t` to the GP (which, at a value equal to its mean, would not move the GP's mean), on the
branch (accept :math:`y_t`, or stay) that the stage-2 uniform it will draw predicts, gives the point
of the chain's next stage-2 evaluation, the *guess*; :class:`Prefetch` evaluates it on a free worker
(or in the chain's process while it would only wait for a worker). When the chain reaches its next
stage-2 evaluation, a worker's value is used only if its point equals the chain's bit for bit, so
**the draws are those of the serial chain whatever the predictions**: a wrong guess costs a wasted
evaluation on an otherwise idle worker, never a different draw.

What makes the real chain differ from the dry run: :math:`\ell(y_t) \ne \mu(y_t)` moves the stage-2
decision (when the uniform falls between the two acceptance probabilities) or a later stage-1
decision, and the GP's new point changes its predictive variance near :math:`y_t`. Measured rates
are in ``benchmarks/speculative_da.py``.

This module is PyMC-free: the evaluations are submitted through a ``submit(theta) -> Future``
callable (:meth:`pymc_kameleon.executors.ExecutorOption.submit_row` in the PyMC step).
"""

from __future__ import annotations

import copy
import sys
import time
import weakref
from concurrent.futures import Future
from typing import NamedTuple

import numpy as np

from pymc_kameleon.core.mh import accept_probability

__all__ = [
    "DRY_RUN_STEPS",
    "FIRST_WAIT_LIMIT",
    "PredictedEvaluation",
    "Prefetch",
    "ReachedExactEvaluation",
    "SWITCH_INTERVAL",
    "Scout",
    "dry_run",
    "predicted_guess",
]

# A dry run gives up after this many stage-1 rejections in a row (the chain is then far from its next
# evaluation, and the random stream copy would be long stale anyway).
DRY_RUN_STEPS = 50
# How long the chain waits for a guess before any came back, in seconds (then ten times the slowest).
FIRST_WAIT_LIMIT = 60.0
# CPython's GIL switch interval while a chain speculates, in seconds (the default is 5 ms). An executor
# hands tasks and results over in threads of the chain's process (a process pool's feeder and result
# threads, Dask's event loop), which wait for the GIL while the chain computes: at the default a guess
# reaches its worker, and its value the chain, up to 5 ms late. On the gallery model (one worker, one
# seed) the draws phase's speed-up went from 1.07 to 1.23 at 3 ms per likelihood and from 1.38 to
# 1.61 at 11 ms. Lowering it only around each evaluation did not help (1.07).
SWITCH_INTERVAL = 2e-4


class PredictedEvaluation(NamedTuple):
    """What a dry run takes as the evaluation at an accepted proposal: the GP's mean for :math:`\\ell`."""

    logp: float
    loglik: float
    log_prior: float
    grad_exact_loglik: None = None


class ReachedExactEvaluation(Exception):  # noqa: N818 - control flow of a dry run, not an error
    """Raised by :class:`Scout` where the chain would evaluate the likelihood exactly."""

    def __init__(self, theta):
        super().__init__()
        self.theta = theta


class Scout:
    """The target of a dry run: the prior as the target's, and a stop at the first exact evaluation."""

    def __init__(self, density):
        self._density = density

    def prior(self, theta):
        return self._density.prior(theta)

    def evaluate(self, theta, prior=None):
        raise ReachedExactEvaluation(np.array(theta, dtype=float, copy=True))


# The interpreter's switch interval before the first live prefetch lowered it, and how many are alive.
_switching = {"saved": None, "live": 0}


def _fast_switching(prefetch) -> None:
    """:data:`SWITCH_INTERVAL` while any prefetch exists; the interpreter's own again once none does."""
    if _switching["live"] == 0:
        _switching["saved"] = sys.getswitchinterval()
        sys.setswitchinterval(min(SWITCH_INTERVAL, _switching["saved"]))
    _switching["live"] += 1
    weakref.finalize(prefetch, _prefetch_gone)


def _prefetch_gone() -> None:
    _switching["live"] -= 1
    if _switching["live"] == 0:
        sys.setswitchinterval(_switching["saved"])


def _key(theta) -> bytes:
    return np.ascontiguousarray(theta, dtype=float).tobytes()


class Prefetch:
    """Exact evaluations made ahead of need, keyed by the exact bytes of their points.

    One round per stage-2 evaluation of the chain (:meth:`begin_round`, then :meth:`add` for the guess
    of the next one): the round keeps the guess of the point about to be evaluated, drops the older
    ones, and evaluates the new guess where it costs the chain least: on a free worker; else in the
    chain's own process, at once, if the chain would otherwise only wait for a worker's value of the
    point at hand; else nowhere (the chain's process is needed for that point itself).

    Parameters
    ----------
    submit : callable
        ``submit(theta)`` starts the evaluation at ``theta`` on a worker and returns a
        ``concurrent.futures.Future`` whose result is :meth:`take`'s value (None, or an exception
        instance that says why, if it failed).
    evaluate_here : callable
        ``evaluate_here(theta)``: the same value, computed in the chain's process.
    slots : int
        Evaluations at most in flight on workers: a guess goes only to a free worker, so a stale
        guess never makes a good one queue behind it.
    on_failure : callable, optional
        Called when a guess fails or is given up (the executor may have lost what it had shipped).
    in_flight : list, optional
        The futures running on the workers, shared by every prefetch that uses them (the chains of
        one population in one process: a chain's guess must not queue behind another's).

    Attributes
    ----------
    submitted, used, given_up : int
        Guesses evaluated (on workers or here), those whose value the chain used, and those it needed
        but had to evaluate again itself.
    last_failure : str or None
        Why the last guess given up failed (the worker's error, or that it was lost or late).
    seconds_spent, seconds_waited : float
        The chain's time on speculating (the dry runs, submitting, guesses evaluated here; added by the
        caller, which times its rounds) and waiting in :meth:`take` for a worker's value.
    """

    def __init__(self, submit, evaluate_here, slots: int = 1, on_failure=None, in_flight=None):
        self._submit = submit
        self._evaluate_here = evaluate_here
        self.slots = max(int(slots), 1)
        self.on_failure = on_failure
        self._guesses: dict[bytes, Future] = {}  # the current round's guesses
        # Workers' futures not yet done (stale ones still occupy a worker).
        self._in_flight: list[Future] = [] if in_flight is None else in_flight
        self.slowest = 0.0  # the longest a guess took on a worker, from submission to its value, in s
        self.submitted = 0
        self.used = 0
        self.given_up = 0
        self.last_failure = None
        self.seconds_spent = 0.0
        self.seconds_waited = 0.0
        _fast_switching(self)

    def seconds_saved(self, seconds_per_evaluation: float) -> float:
        r"""The chain's time saved so far: :math:`n_\text{used}\, t_\text{eval} - t_\text{spent} -
        t_\text{waited}`, negative where speculating cost more than the evaluations it spared (a
        lower bound on the cost: the executor's threads also take the chain's GIL)."""
        return self.used * seconds_per_evaluation - self.seconds_spent - self.seconds_waited

    def wait_limit(self) -> float:
        """How long :meth:`take` waits for a guess: ten times the slowest guess so far, at least a second
        (:data:`FIRST_WAIT_LIMIT` before any came back). A guess the executor lost without saying so
        (a task whose worker died while its input was being moved) must not stop the chain."""
        return max(1.0, 10.0 * self.slowest) if self.slowest > 0 else FIRST_WAIT_LIMIT

    def _timed(self, future):
        start = time.perf_counter()

        def record(done):
            if not done.cancelled() and done.exception() is None:
                self.slowest = max(self.slowest, time.perf_counter() - start)

        future.add_done_callback(record)
        return future

    def free_slots(self) -> int:
        self._in_flight[:] = [f for f in self._in_flight if not f.done()]  # in place: it may be shared
        return self.slots - len(self._in_flight)

    def begin_round(self, current) -> str | None:
        """The chain is about to evaluate ``current``: keep its guess, drop the rest, and say where a
        guess of the next evaluation would be evaluated: ``"worker"``, ``"here"`` or None."""
        key = _key(current)
        kept = self._guesses.pop(key, None)
        for future in self._guesses.values():
            future.cancel()  # a guess still queued; one running finishes and is dropped
        self._guesses = {} if kept is None else {key: kept}
        if self.free_slots() > 0:
            return "worker"
        if kept is not None and not kept.done():
            return "here"  # the chain would wait for the worker anyway
        return None

    def add(self, theta, where: str) -> None:
        """Evaluate the guess ``theta`` on a worker or here (``where``, from :meth:`begin_round`)."""
        theta = np.array(theta, dtype=float, copy=True)
        if where == "worker":
            future = self._timed(self._submit(theta))
            self._in_flight.append(future)
        else:
            future = Future()
            try:
                future.set_result(self._evaluate_here(theta))
            except Exception:  # noqa: BLE001 - the chain evaluates it again if it needs it, and raises
                future.set_result(None)
        self._guesses[_key(theta)] = future
        self.submitted += 1

    def take(self, theta):
        """The guess's value at ``theta`` if it was guessed (waiting for it if needed), else None.

        A guess whose evaluation failed (the executor lost it, or the function raised), or that is not
        back within :meth:`wait_limit`, returns None (and calls ``on_failure``): the caller evaluates
        in its own process, where an error is raised as usual.
        """
        future = self._guesses.pop(_key(theta), None)
        if future is None:
            return None
        start = time.perf_counter()
        try:
            value = future.result(timeout=self.wait_limit())
        except Exception as err:  # noqa: BLE001 - lost, cancelled or late: evaluated again in the main process
            future.cancel()
            value = RuntimeError(f"lost or late ({type(err).__name__})")
        self.seconds_waited += time.perf_counter() - start
        if value is None or isinstance(value, BaseException):  # lost, or the function raised there
            self.given_up += 1
            self.last_failure = None if value is None else str(value)
            if self.on_failure is not None:
                self.on_failure()
            return None
        self.used += 1
        return value


def dry_run(kernel, current, current_eval, scout: Scout, rng, steps: int = DRY_RUN_STEPS):
    """The point of the chain's next exact evaluation from ``current``, by running ``kernel``'s screened
    step on ``rng`` (a copy) until the :class:`Scout` is asked for one; None after ``steps`` stage-1
    rejections. A stage-1 rejection leaves the state where it was, and nothing else changes between
    screened steps after tuning."""
    for _ in range(steps):
        try:
            kernel.screened_step_without_speculation(current, current_eval, scout, rng)
        except ReachedExactEvaluation as reached:
            return reached.theta
    return None


def predicted_guess(kernel, current, current_eval, proposed, lp_proposed, mu_proposed, log_ratio_stage2,
                    scout: Scout, rng):
    r"""The next exact evaluation's point on the predicted branch of the pending stage-2 decision (accept
    ``proposed``, or stay at ``current``), or None (:func:`dry_run`).

    ``rng`` is the chain's generator just before the stage-2 uniform (it is copied, not used).
    ``log_ratio_stage2`` is the stage-2 log ratio with :math:`\ell(y_t) = \mu(y_t)`: with the same
    uniform as the chain will draw, it predicts the decision. Only that branch is run: guessing the
    other one too kept a worker busy when the next guess was due (decision record 0041).
    """
    ahead = copy.deepcopy(rng)
    if ahead.random() < accept_probability(log_ratio_stage2):
        state, evaluation = proposed, PredictedEvaluation(lp_proposed + mu_proposed, mu_proposed, lp_proposed)
    else:
        state, evaluation = current, current_eval
    return dry_run(kernel, state, evaluation, scout, ahead)
