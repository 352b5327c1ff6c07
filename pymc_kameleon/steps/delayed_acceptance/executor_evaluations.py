"""What :class:`~pymc_kameleon.GPDelayedAcceptanceMH` does with ``executor=``: the checks that the
likelihood can run on workers, the start search's runs on them, and, after tuning, the chain's likely next
proposals evaluated ahead there (speculation, with
:class:`~pymc_kameleon.core.delayed_acceptance.speculation.Prefetch`), given up when the executor closes,
and said once when most of those evaluations fail.

:class:`ExecutorEvaluations` is a mixin of ``GPDelayedAcceptanceMH``, apart from
:mod:`pymc_kameleon.steps.delayed_acceptance.mh` (the 500-line rule), which keeps the step's options, its
kernel and its statistics; the mixin reads the step's ``executor``, target, chain and warnings.
"""

from __future__ import annotations

from concurrent.futures import Future
from functools import partial

import numpy as np

from pymc_kameleon.core.delayed_acceptance.speculation import Prefetch
from pymc_kameleon.core.starts import powell_run
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.executors import ExecutorClosedError

__all__ = ["SPECULATION_JUDGED_AFTER", "ExecutorEvaluations"]

# Warn once this many guesses the chain needed failed on the workers, and more than it used.
_SPECULATION_FAILURES_TO_WARN = 10
# Judge whether evaluating ahead saves the chain time once it has made this many guesses.
SPECULATION_JUDGED_AFTER = 100
# The pm.sample runs (steps' warning sessions) told that their executor= does not evaluate ahead.
_TOLD_NOT_SPECULATING: set[str] = set()


class ExecutorEvaluations:
    """The evaluations of :class:`~pymc_kameleon.GPDelayedAcceptanceMH` on its ``executor=`` (a mixin)."""

    def _check_speculation(self) -> None:
        """``executor=`` evaluates the likelihood on workers from a copy of the compiled function: only
        where that copy is the likelihood of this step's variables alone, and deterministic."""
        target, name = self._target, type(self).__name__
        if target.has_estimates:
            raise ValueError(
                f"{name}: executor= evaluates likely next proposals ahead on workers and uses a value only "
                "where the chain would compute the same one; a PseudoMarginalPotential's estimates are "
                "random, so nothing could be reused. Drop executor=, or give the estimator its own "
                "(PseudoMarginalPotential(..., executor=...))."
            )
        if target.shared:
            others = sorted(v.name for v in target.shared)
            raise ValueError(
                f"{name}: executor= evaluates the likelihood on workers as a function of this step's "
                f"variables, but the model also has {others}, which other steps sample: the workers' copy "
                "would use stale values. Sample every continuous variable with this step, or drop "
                "executor=."
            )

    def _search_elsewhere(self):
        """With ``executor=``, the start search's candidates after the first run on workers (the same
        runs, so the same start); their evaluations join the step's count when they come back."""
        if self.executor is None:
            return None
        target, executor = self._target, self.executor
        search = _SearchOnWorker(target)

        def run_elsewhere(x0, max_evals):
            try:
                future = executor.submit_row(search, (np.array(x0, dtype=float), int(max_evals)))
            except ExecutorClosedError:
                return None  # made here (the same run); the draws' speculation says it stopped
            return _CountedRun(future, target, executor)

        return run_elsewhere

    def _start_speculating(self) -> None:
        """At the end of tuning, with ``executor=`` and a likelihood that took at least
        ``_speculation_min_ms`` (:data:`~pymc_kameleon.steps.delayed_acceptance.mh.SPECULATION_MIN_MS`) on
        average during tuning: evaluate the chain's likely next proposals ahead on the workers for the
        draws."""
        target = self._target
        if self.executor is None:
            return
        if target.n_timed_evals:
            self.likelihood_ms = 1e3 * target.loglik_seconds / target.n_timed_evals
        if self.likelihood_ms is None or self.likelihood_ms < self._speculation_min_ms:
            self._say_not_speculating()
            return

        # The draws: a fixed kernel, so the chain can be run ahead.
        def as_input(theta):
            return np.asarray(theta, dtype=target.dtype)

        def submit(theta):
            try:
                return self.executor.submit_row(target._fn, (as_input(theta),))
            except ExecutorClosedError as err:
                self._stop_speculating(err)
                lost = Future()
                lost.set_result(err)  # a failed guess: the chain evaluates it here if it needs it
                return lost

        try:
            slots = self.executor.n_workers()
        except ExecutorClosedError as err:
            self._stop_speculating(err)
            return
        prefetch = Prefetch(
            submit, lambda theta: target._fn(as_input(theta)), slots=slots, in_flight=self.executor.in_flight
        )
        prefetch.on_failure = partial(self._speculation_failed, prefetch)
        target.prefetch = self._chain.kernel.prefetch = prefetch

    def _say_not_speculating(self) -> None:
        """Once per ``pm.sample``: ``executor=`` was given but the draws will not evaluate ahead, the
        likelihood being cheaper than ``_speculation_min_ms``; the executor then only ran the start search,
        and its workers' start-up can cost more than that saved (a new user's SIR ODE at 1.8 ms: 13.9-14.0 s
        against 12.0-12.4 s without it, the same draws, and no word)."""
        if self.likelihood_ms is None or self._warning_session in _TOLD_NOT_SPECULATING:
            return
        _TOLD_NOT_SPECULATING.add(self._warning_session)
        self._warnings.warn(
            f"{type(self).__name__}: executor= does not evaluate the draws' likelihoods ahead: they took "
            f"{self.likelihood_ms:.2g} ms each during tuning, below the {self._speculation_min_ms:g} ms "
            "from which that pays (on PyMC's gallery Lotka-Volterra model the draws were 0.8 times as fast "
            "at 1.1 ms). The executor only ran the start search, and its workers' start-up can cost more "
            "than that saves; the draws are the same without it. Drop executor= for this model.",
            KameleonWarning,
        )

    def _stop_speculating(self, err: ExecutorClosedError) -> None:
        """The executor was closed under the chain: go on without evaluations made ahead (the draws are
        the same), and say so once."""
        self._target.prefetch = self._chain.kernel.prefetch = None
        if not self._speculation_warned:
            self._speculation_warned = True
            said = str(err).removeprefix(f"{self.executor.owner}: ")
            self._warnings.warn(
                f"{type(self).__name__}: no more evaluations made ahead: {said} The draws are the same "
                "without them.",
                KameleonWarning,
            )

    def _speculation_failed(self, prefetch: Prefetch) -> None:
        """A guess made ahead failed on its worker, or was lost: ship the function afresh (the executor
        may have lost its copy) and, once most guesses the chain needed have failed, say so once:
        the draws are right (each is evaluated again here), but the executor only costs time."""
        self.executor.forget_shipped()
        if self._speculation_warned:
            return
        if prefetch.given_up >= _SPECULATION_FAILURES_TO_WARN and prefetch.given_up > prefetch.used:
            self._speculation_warned = True
            why = prefetch.last_failure or "lost, or not back in time"
            self._warnings.warn(
                f"{type(self).__name__}: {prefetch.given_up} of the {prefetch.given_up + prefetch.used} "
                f"evaluations made ahead on the executor and needed failed there (the last: {why}), and "
                "were made again in this process: the draws are right, but the executor saves no time. "
                "Make the likelihood run on the workers (evaluate it there once to see the error, e.g. "
                "client.submit(...)), or drop executor=.",
                KameleonWarning,
            )


    def _check_speculation_pays(self, prefetch: Prefetch) -> None:
        """Once, after :data:`SPECULATION_JUDGED_AFTER` guesses: say so if making them and waiting for
        them cost the chain more time than the evaluations they spared (a Dask scheduler's round trip of
        10-20 ms against a likelihood of a few ms; a new user's 7.5 ms likelihood took 51 s on a 2-worker
        LocalCluster and 43 s serially). The draws are the same either way."""
        if self._speculation_judged or prefetch.submitted < SPECULATION_JUDGED_AFTER:
            return
        self._speculation_judged = True
        if self._speculation_warned or self.likelihood_ms is None:
            return
        if prefetch.seconds_saved(1e-3 * self.likelihood_ms) >= 0.0:
            return
        self._speculation_warned = True
        spent = 1e3 * prefetch.seconds_spent / prefetch.submitted
        waited = 1e3 * prefetch.seconds_waited / max(prefetch.used, 1)
        here = self.likelihood_ms
        if self.executor is not None and self.executor.distributed:
            remedy = (
                "A distributed executor's round trip (Dask's: 10-20 ms) pays only for a dearer likelihood; "
                "on one machine pass concurrent.futures.ProcessPoolExecutor(1), or drop executor=."
            )
        else:  # a new user's ProcessPoolExecutor(2) on a busy 2-core machine, told to pass (1)
            remedy = (
                "A local pool's workers need idle cores of their own, beside the chains: drop executor= "
                "here, or keep it where the machine has a free core per worker."
            )
        self._warnings.warn(
            f"{type(self).__name__}: evaluating ahead on the executor costs more time than it saves: over "
            f"its first {prefetch.submitted} guesses the chain spent {spent:.2g} ms per guess making them "
            f"and waited {waited:.2g} ms per guess it used for the workers' values, against {here:.2g} ms "
            f"per likelihood evaluation here ({prefetch.used} used), so the draws (the same either way) "
            f"take longer than without executor=. {remedy}",
            KameleonWarning,
        )


class _SearchOnWorker:
    """One start-search run (:func:`~pymc_kameleon.core.starts.powell_run`) on a worker, on a copy of
    the chain's target."""

    def __init__(self, target):
        self.target = target

    def __call__(self, x0, max_evals):
        return powell_run(lambda x: self.target.evaluate(x).logp, x0, max_evals)


class _CountedRun:
    """A worker's start-search run whose evaluations join the target's count when it is collected."""

    def __init__(self, future, target, executor):
        self.future, self.target, self.executor = future, target, executor

    def result(self):
        """The run, or None (run it here instead: the same run) if it failed there or the executor is
        gone (:meth:`~pymc_kameleon.executors.ExecutorOption.result_of`)."""
        try:
            run = self.executor.result_of(self.future)
        except ExecutorClosedError:
            return None
        if isinstance(run, BaseException):  # it raised on the worker: run again here, which raises
            return None
        if run is not None:
            self.target.n_evals += run[2]
        return run
