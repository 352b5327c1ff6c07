r"""Independent evaluations on a ``concurrent.futures`` executor: Dask, a process pool, MPI, ...

``executor=`` options (:class:`~pymc_kameleon.smc.KASS`, :class:`~pymc_kameleon.smc.ASMC`,
:func:`~pymc_kameleon.PseudoMarginalPotential`) take a :class:`concurrent.futures.Executor`, or a
zero-argument callable that returns one. :class:`ExecutorOption` holds either and does the work:

- **Chunks, not rows.** :meth:`ExecutorOption.map_rows` splits the rows (the argument tuples of
  independent calls ``function(*row)``) into one chunk per worker and submits one task per chunk. On
  Dask chunk ``i`` is submitted for the ``i``-th worker thread, loosely (Dask may still move it, to
  another worker if that one is gone or busy): the scheduler alone sometimes gave one worker two
  chunks of a round while the other idled.
- **What travels.** The function is pickled once (``cloudpickle``) into a payload with a token;
  each worker process unpickles it once and caches it by token, so a compiled PyTensor function
  is not rebuilt per task. On Dask the payload is scattered to every worker once
  (``broadcast=True``), so large data travels once per worker, not once per task.
- **Seeds.** Nothing random happens on a worker that the caller did not put into the row: callers
  spawn generators (or draw auxiliary normals) in the main process and pass them in, so results do
  not depend on the executor or the number of workers. Dask tasks are submitted with
  ``pure=False``, so Dask never serves a cached result for a repeated call.
- **Faults.** A row whose call raises comes back as a failure naming the row, and
  :class:`ParallelEvaluationError` (or the caller's own error) names the input values; a task that
  the executor itself loses (a killed worker after Dask's own retries, a broken process pool) raises
  :class:`ParallelEvaluationError` naming the rows. Nothing waits for ever on a failure. A Dask client
  closed while in use is replaced by a new one to the same scheduler; if none can connect (the cluster
  is gone too), :class:`ExecutorClosedError` says so, not Dask's internals.
- **Pickling.** PyMC pickles steps and SMC kernels into worker processes (``cores > 1``).
  :class:`ExecutorOption` pickles as its factory; a Dask ``ClientExecutor`` pickles as its
  scheduler's address (:class:`DaskExecutor`); any other executor *instance* refuses to pickle, with
  an error that says to pass a factory.
- **Warm-up.** :meth:`ExecutorOption.warm_up` has each worker load PyTensor's module cache while
  the owner compiles (a fresh worker's first unpickling of a compiled function, 1.7-3.3 s here).
- **Exit.** A worker process that ran our tasks freezes its objects at exit instead of collecting
  them (:mod:`pymc_kameleon._executor_worker`, where the worker side lives), so a Dask worker closes
  within the 4 s its nanny allows.

This module imports neither PyMC nor Dask (a Dask client only when :class:`DaskExecutor` needs one).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys
import time

from pymc_kameleon import _executor_worker as _worker_side
from pymc_kameleon._executor_worker import RowFailure, _Payload, _run_block, _run_chunk, _run_one

__all__ = [
    "DaskExecutor", "ExecutorClosedError", "ExecutorOption", "ParallelEvaluationError", "RowFailure",
    "as_executor_option",
]

# How long the number of workers of an executor is trusted before it is asked again.
_WORKER_COUNT_SECONDS = 10.0
# A failed round on Dask is retried this many times, each after a worker is up again (workers that die
# one after the other can each cancel a round; under load the second death can fall in the retry).
_DASK_RETRIES = 3
_WORKER_WAIT_SECONDS = 60.0


# What to do when an executor cannot reach PyMC's worker processes (``cores > 1``).
_WORKER_PROCESS_ADVICE = (
    "PyMC's worker processes (cores > 1) cannot use an executor instance made in this process, nor "
    "start process pools of their own. Use a Dask executor (client.get_executor(), or "
    "pymc_kameleon.distributed.DaskExecutor(client)), which travels as the scheduler's address, or "
    "sample with cores=1."
)


class ParallelEvaluationError(RuntimeError):
    """An evaluation on an executor failed: the executor lost the task, or the function raised."""


class ExecutorClosedError(ParallelEvaluationError):
    """The executor was shut down while in use (a Dask client and its cluster closed during sampling)."""


def _is_dask_executor(executor) -> bool:
    module = sys.modules.get("distributed.cfexecutor")
    return module is not None and isinstance(executor, module.ClientExecutor)


def _dask_status(executor) -> str:
    """A Dask executor's client status ("running" for any other executor)."""
    return getattr(executor._client, "status", "running") if _is_dask_executor(executor) else "running"


# Seconds between two looks at whether the executor is gone, while waiting for a task's result.
_GONE_POLL_SECONDS = 1.0
# A Dask client's statuses once it can no longer deliver results: closed, or (its cluster closed while it
# was running) trying to reconnect.
_CUT_OFF = ("closing", "closed", "connecting")


def _dask_client_closed(executor) -> bool:
    """Whether ``executor`` is a Dask executor whose client was closed (Dask then fails with its internals:
    ``'NoneType' object has no attribute 'scatter'``, ``IOLoop is closed``)."""
    return _dask_status(executor) in ("closing", "closed")


class DaskExecutor:
    """A picklable factory of Dask executors: ``DaskExecutor(client)()`` is
    ``client.get_executor(pure=False)``.

    In another process (PyMC's chains with ``cores > 1``) it connects a new client to the same
    scheduler address, once per process.

    Parameters
    ----------
    client : dask.distributed.Client or str
        A client, or a scheduler address such as ``"tcp://127.0.0.1:8786"``.
    **kwargs
        Options of ``Client.get_executor`` (``retries``, ``workers``, ``resources``, ...); ``pure``
        is always False.
    """

    # (process id, scheduler address) -> Client. Keyed by process too: a forked child (PyMC's chains)
    # inherits the parent's client, whose event-loop thread did not survive the fork.
    _clients: dict = {}

    def __init__(self, client, **kwargs):
        if "pure" in kwargs and kwargs["pure"]:
            raise ValueError(
                "DaskExecutor submits with pure=False: a cached result would reuse a random estimate."
            )
        kwargs.pop("pure", None)
        if not isinstance(client, str) and (
            getattr(client, "status", "running") not in ("running", "connecting", "newly-created")
            or getattr(client, "scheduler", None) is None
        ):
            raise ValueError(
                f"The Dask client is not connected (status {getattr(client, 'status', '?')!r}): connect a "
                "new Client to the scheduler and pass client.get_executor()."
            )
        self.address = client if isinstance(client, str) else client.scheduler.address
        if not isinstance(client, str):
            DaskExecutor._clients.setdefault((os.getpid(), self.address), client)
        self.kwargs = kwargs

    def client(self):
        """This process's client of the scheduler (connected on first use)."""
        key = (os.getpid(), self.address)
        client = DaskExecutor._clients.get(key)
        if client is None or client.status not in ("running", "connecting", "newly-created"):
            from distributed import Client

            client = Client(self.address, set_as_default=False)
            DaskExecutor._clients[key] = client
        return client

    def __call__(self):
        return self.client().get_executor(pure=False, **self.kwargs)

    def __getstate__(self):
        return {"address": self.address, "kwargs": self.kwargs}

    def __setstate__(self, state):
        self.address = state["address"]
        self.kwargs = state["kwargs"]

    def __repr__(self):
        return f"DaskExecutor({self.address!r})"


class ExecutorOption:
    """An ``executor=`` option: an executor instance or a zero-argument factory of one.

    Parameters
    ----------
    executor : concurrent.futures.Executor or callable
    owner : str
        Who takes the option, for error messages (e.g. ``"KASS"``).
    """

    def __init__(self, executor, owner: str):
        self.owner = owner
        self._executor = None
        self._factory = None
        if isinstance(executor, cf.Executor):
            self._executor = executor
            if _is_dask_executor(executor):  # picklable as its address; never pure
                kwargs = {k: v for k, v in executor._kwargs.items() if k != "pure"}
                self._factory = DaskExecutor(executor._client, **kwargs)
                self._executor = None
        elif callable(executor):
            self._factory = executor
        else:
            is_client = hasattr(executor, "get_executor")
            hint = " Pass client.get_executor(), not the client itself." if is_client else ""
            raise TypeError(
                f"{owner}: executor must be a concurrent.futures.Executor (for example "
                "dask.distributed.Client(...).get_executor() or ProcessPoolExecutor()) or a zero-argument "
                f"callable that returns one, got {type(executor).__name__}.{hint}"
            )
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        """Forget what belongs to one process: the pickled function, its scattered copy, the worker count."""
        self._payload: _Payload | None = None
        self._scattered = None  # the Dask future of self._payload's data, once scattered
        self._n_workers = None  # (count, time asked)
        self._worker_slots: list = []  # Dask: one worker address per thread, with the count
        self._pid = os.getpid()  # the process the executor instance belongs to
        # Speculative evaluations running on the workers, shared by the chains of this process.
        self.in_flight: list = []
        self._warming: list = []  # the warm-up's futures, held so that Dask does not release them
        self._closed: ExecutorClosedError | None = None  # once no new client could connect

    def _closed_error(self, cause, what: str) -> ExecutorClosedError:
        said = f"{type(cause).__name__}: {str(cause).strip() or 'no message'}"
        return ExecutorClosedError(
            f"{self.owner}: {what} ({said}). Keep a Dask client and its cluster open until pm.sample (or "
            "pm.sample_smc) returns: close them after it, e.g. with the call inside `with Client(...):`."
        )

    def _dask_call(self, executor, call, *args, **kwargs):
        """``call(*args, **kwargs)``, a request to the executor; an :class:`ExecutorClosedError` instead of
        Dask's own error if its client was closed meanwhile."""
        try:
            return call(*args, **kwargs)
        except Exception as err:
            status = _dask_status(executor)
            # Closed: the next get() connects a new client, if it can. "connecting": the scheduler went
            # away under a client that was running (its cluster closed), and it is trying to reconnect.
            if status in _CUT_OFF:
                what = "closed" if status != "connecting" else "cut off from its scheduler"
                error = self._closed_error(err, f"the executor's Dask client was {what} while in use")
                if status == "connecting":  # kept: another call would wait for the reconnection again
                    self._closed = error
                raise error from err
            raise

    # ------------------------------------------------------------ the executor
    def get(self) -> cf.Executor:
        """The executor (made by the factory on first use in this process).

        In a forked child (PyMC's chains with ``cores > 1`` on Linux) an instance from the parent is
        not used: a forked process pool or client can hang. A factory makes a new executor there; a
        plain instance raises a TypeError that says what to pass instead.
        """
        if os.getpid() != self._pid:
            self._reset_process_state()
            if self._factory is None:
                raise TypeError(
                    f"{self.owner}: executor={type(self._executor).__name__}(...) was made in another "
                    f"process. {_WORKER_PROCESS_ADVICE}"
                )
            self._executor = None
        if self._closed is not None:
            raise self._closed
        if self._executor is not None and _dask_client_closed(self._executor):
            # Closed under us: a new client to the same scheduler, if it is still up.
            self._executor = None
            self.forget_shipped()
            self._worker_slots = []
        if self._executor is None:
            try:
                executor = self._factory()
            except OSError as err:  # Dask's connection failures (timeouts included) are OSErrors
                if not isinstance(self._factory, DaskExecutor):
                    raise
                # Kept: later calls raise it at once instead of waiting for a connection again.
                self._closed = self._closed_error(
                    err, f"the executor's Dask scheduler at {self._factory.address} could not be reached"
                )
                raise self._closed from err
            if not isinstance(executor, cf.Executor):
                raise TypeError(
                    f"{self.owner}: the executor factory returned a {type(executor).__name__}, "
                    "not a concurrent.futures.Executor."
                )
            if isinstance(executor, cf.ProcessPoolExecutor) and multiprocessing.current_process().daemon:
                executor.shutdown(wait=False)
                raise TypeError(
                    f"{self.owner}: a ProcessPoolExecutor cannot run here. {_WORKER_PROCESS_ADVICE}"
                )
            self._executor = executor
        return self._executor

    def n_workers(self) -> int:
        """How many tasks can run at once: Dask's total threads, a pool's ``max_workers``, else the CPUs.

        Asking Dask's scheduler costs a round trip, so its answer is kept for ``_WORKER_COUNT_SECONDS``
        (a cluster that scales is followed with that delay; the results never depend on it).
        """
        now = time.monotonic()
        if self._n_workers is not None and now - self._n_workers[1] < _WORKER_COUNT_SECONDS:
            return self._n_workers[0]
        executor = self.get()
        if _is_dask_executor(executor):
            nthreads = self._dask_call(executor, executor._client.nthreads)
            self._worker_slots = [address for address in sorted(nthreads) for _ in range(nthreads[address])]
            n = len(self._worker_slots)
        else:
            n = getattr(executor, "_max_workers", None) or os.cpu_count() or 1
        self._n_workers = (max(int(n), 1), now)
        return self._n_workers[0]

    @property
    def distributed(self) -> bool:
        """Whether the option is a Dask executor (a scheduler's round trip per task), not a local pool."""
        return isinstance(self._factory, DaskExecutor)

    def gone(self) -> bool:
        """Whether the executor can no longer deliver the results of tasks already submitted: its Dask
        client closed or cut off from its scheduler (a future of such a task may then never complete)."""
        if self._closed is not None:
            return True
        return self._executor is not None and _dask_status(self._executor) in _CUT_OFF

    def result_of(self, future):
        """``future.result()`` of a task submitted here, or an :class:`ExecutorClosedError` once the
        executor is :meth:`gone` before it completed: CI once waited 40 minutes for a task of a Dask
        cluster closed meanwhile, whose future never completed."""
        while True:
            try:
                return future.result(timeout=_GONE_POLL_SECONDS)
            except TimeoutError:
                if future.done():  # done as the wait ran out, or the task's own TimeoutError
                    return future.result()
                if self.gone():
                    future.cancel()
                    raise self._closed or self._closed_error(
                        TimeoutError("a task's result did not come back"),
                        "the executor's Dask client was closed while in use",
                    ) from None

    # ------------------------------------------------------------ evaluation
    def warm_up(self) -> None:
        """Have every worker unpickle a small compiled PyTensor function now, without waiting for it.

        A worker's first unpickling of a compiled PyTensor function loads PyTensor's module cache (1.7-3.3
        s for each fresh worker of a 2-worker ``LocalCluster`` on 2 cores, then 0.02 s per function): an
        owner calls this where it is made, so that the workers do it while the owner compiles. Nothing
        computed depends on it; it raises nothing (the first real call reports a broken executor). A
        user's factory is not called for it: with ``cores > 1`` only PyMC's chain processes use its pool.
        """
        if self._executor is None and not isinstance(self._factory, DaskExecutor):
            return
        try:
            executor = self.get()
            payload, run = _worker_side._warm_up_payload(), _worker_side._unpickle
            self._warming = [  # n_workers() first: Dask's placement needs its slots
                self._dask_call(executor, executor.submit, run, payload.token, payload.data, i, **placement)
                for i in range(self.n_workers())
                for placement in [self._placement(executor, i)]
            ]
        except Exception:  # noqa: BLE001 - an optimisation: the first real call reports the cause
            self._warming = []

    def payload(self, function) -> _Payload:
        """``function`` pickled once (one function at a time per option: a new one replaces it)."""
        if self._payload is None or self._payload.function is not function:
            self._payload = _Payload(function)
            self._scattered = None
        return self._payload

    def _shipped(self, executor, payload: _Payload):
        """The payload's data as a task argument: on Dask, scattered to every worker once."""
        if not _is_dask_executor(executor):
            return payload.data
        if self._scattered is None:
            self._scattered = self._dask_call(
                executor, executor._client.scatter, payload.data, broadcast=True, hash=False
            )
        return self._scattered

    def _submit_chunks(self, runner, function, items, describe) -> list:
        """Split ``items`` into one chunk per worker, run ``runner`` on each, and gather in order.

        On Dask a failed round is run again (up to ``_DASK_RETRIES`` times, each once a worker is up)
        with the payload scattered afresh: a worker that dies takes its copy of the scattered payload
        with it, and the scheduler then cancels every task that needs it, although a restarted worker
        could run them. A likelihood that raises fails every round, and its error is raised.
        """
        for attempt in range(_DASK_RETRIES + 1):
            try:
                return self._submit_chunks_once(runner, function, items, describe)
            except ExecutorClosedError:
                if attempt == _DASK_RETRIES or self._closed is not None:
                    raise
                continue  # get() connects a new client to the scheduler, or says it cannot
            except ParallelEvaluationError as err:
                executor = self.get()
                if not _is_dask_executor(executor) or attempt == _DASK_RETRIES:
                    raise
                self._scattered = None
                self._n_workers = None
                try:
                    wait = executor._client.wait_for_workers
                    self._dask_call(executor, wait, 1, timeout=_WORKER_WAIT_SECONDS)
                except TimeoutError:
                    raise err from None  # no worker came back: the round's own error says what failed

    def _submit_chunks_once(self, runner, function, items, describe) -> list:
        executor = self.get()
        payload = self.payload(function)
        data = self._shipped(executor, payload)
        n_chunks = min(self.n_workers(), len(items))
        bounds = [round(i * len(items) / n_chunks) for i in range(n_chunks + 1)]
        futures = []
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            placement = self._placement(executor, i)
            future = self._dask_call(executor, executor.submit, runner, payload.token, data, a, items[a:b],
                                     **placement)
            futures.append((a, b, future))
        results = []
        try:
            for a, b, future in futures:
                try:
                    chunk = self.result_of(future)
                except ExecutorClosedError:
                    raise
                except Exception as err:
                    where = f" (first row: {describe(items[a])})" if describe is not None else ""
                    said = str(err).strip() or "no message"
                    said = said[:-1] if said.endswith(".") and not said.endswith("...") else said
                    raise ParallelEvaluationError(
                        f"{self.owner}: the executor failed to evaluate rows {a}..{b - 1} of {len(items)}"
                        f"{where}: {type(err).__name__}: {said} (a worker may have "
                        "died or the executor been shut down: Dask's scheduler log says which)."
                    ) from err
                results.append(chunk)
        finally:
            for *_, future in futures:
                future.cancel()
        return results

    def _placement(self, executor, chunk: int) -> dict:
        """On Dask, chunk ``i`` is submitted for the ``i``-th worker thread, as a loose restriction (Dask
        may move it to another worker, one that is free while that one is busy or gone): left to itself
        the scheduler put both chunks of a round on one of two workers in 2-5 of 26 rounds, which then
        took twice as long. Not where the user restricted the workers."""
        if not (_is_dask_executor(executor) and self._worker_slots) or "workers" in executor._kwargs:
            return {}
        return {"workers": [self._worker_slots[chunk % len(self._worker_slots)]], "allow_other_workers": True}

    def submit_row(self, function, row: tuple) -> cf.Future:
        """Start ``function(*row)`` on one worker, without waiting: its future's result is the value,
        or a RuntimeError naming the error if the call raised there (speculative calls:
        :mod:`~pymc_kameleon.core.delayed_acceptance.speculation`). ``function`` is pickled once, as for
        :meth:`map_rows`."""
        executor = self.get()
        payload = self.payload(function)
        data = self._shipped(executor, payload)
        return self._dask_call(executor, executor.submit, _run_one, payload.token, data, row)

    def forget_shipped(self) -> None:
        """Ship the function again with the next task (after a lost one: on Dask, a worker that died may
        have taken the scattered copy with it, and every task that needs it is then cancelled)."""
        self._scattered = None
        self._n_workers = None

    def map_blocks(self, function, array, describe=None) -> list:
        """``function`` applied to consecutive blocks of rows of ``array``, one block per worker.

        For vectorised functions; returns the per-block results in order, or a list holding one
        :class:`RowFailure` (the first row of the failed block) that :meth:`raise_failure` turns into
        an error.
        """
        if len(array) == 0:
            return []
        blocks = [block[0] for block in self._submit_chunks(_run_block, function, array, describe)]
        failure = self.first_failure(blocks)
        return blocks if failure is None else [failure]

    def map_rows(self, function, rows: list, describe=None) -> list:
        """``[function(*row) for row in rows]``, evaluated on the executor in one task per worker.

        Parameters
        ----------
        function : callable
            Pickled once (``cloudpickle``); must not depend on state of the main process that it
            does not carry.
        rows : list of tuples
            The arguments of each call.
        describe : callable, optional
            ``describe(row) -> str`` names a row's inputs in error messages.

        Returns
        -------
        list
            The results in row order; a row whose call raised is a :class:`RowFailure` (the rows
            after it in the same chunk are then missing, so callers must check with :meth:`raise_failure`).

        Raises
        ------
        ParallelEvaluationError
            When the executor loses a task (a killed worker beyond Dask's retries, a broken pool).
        """
        if not rows:
            return []
        chunks = self._submit_chunks(_run_chunk, function, rows, describe)
        return [result for chunk in chunks for result in chunk]

    @staticmethod
    def first_failure(results) -> RowFailure | None:
        """The first :class:`RowFailure` among ``results``, if any."""
        return next((r for r in results if isinstance(r, RowFailure)), None)

    def raise_failure(self, results, rows, describe=None) -> None:
        """Raise a :class:`ParallelEvaluationError` naming the inputs of the first failed row, if any."""
        failure = self.first_failure(results)
        if failure is None:
            return
        where = describe(rows[failure.index]) if describe is not None else f"row {failure.index}"
        raise ParallelEvaluationError(
            f"{self.owner}: {failure.error} (at {where}). Worker traceback:\n{failure.traceback}"
        )

    # ------------------------------------------------------------ pickling
    def __getstate__(self):
        if self._factory is None:
            raise TypeError(
                f"{self.owner}: executor={type(self._executor).__name__}(...) cannot be sent to another "
                f"process. {_WORKER_PROCESS_ADVICE} Other executors can be given as a zero-argument "
                "callable that makes one in the worker process (one that can run there)."
            )
        return {"owner": self.owner, "factory": self._factory}

    def __setstate__(self, state):
        self.owner = state["owner"]
        self._factory = state["factory"]
        self._executor = None
        self._reset_process_state()

    def __repr__(self):
        return f"ExecutorOption({self._factory or self._executor!r})"


def as_executor_option(executor, owner: str) -> ExecutorOption | None:
    """``None`` for ``None``; otherwise an :class:`ExecutorOption` (a TypeError for anything else)."""
    if executor is None or isinstance(executor, ExecutorOption):
        return executor
    return ExecutorOption(executor, owner)
