"""The worker side of :mod:`pymc_kameleon.executors`: what a worker process runs for a task (a chunk of
rows, a block, one speculative row), the cache of unpickled functions by token, and the exit without
garbage collection that lets a Dask worker close in time. The main process builds a :class:`_Payload`
and submits :func:`_run_chunk`, :func:`_run_block` or :func:`_run_one` with it.

This module imports neither PyMC nor Dask (PyTensor only to compile the warm-up's function).
"""

from __future__ import annotations

import atexit
import functools
import gc
import multiprocessing
import uuid
from collections import OrderedDict
from dataclasses import dataclass

import cloudpickle
import numpy as np

# Functions a worker process keeps unpickled, by token (a long-lived worker serves many runs).
_WORKER_CACHE_SIZE = 16
_worker_functions: OrderedDict[str, object] = OrderedDict()


@dataclass(frozen=True)
class RowFailure:
    """What a worker sends back for a row whose call raised (re-raised in the main process)."""

    index: int  # the row's position in the whole batch
    error: str  # "TypeName: first line of the message"
    traceback: str


def _exit_without_collecting() -> None:
    """In a worker process (not the main one), freeze the garbage collector's objects at exit.

    A process ends by collecting garbage over everything it holds; after PyMC and the model's compiled
    functions that took a Dask worker 1.5-4 s on a loaded 2-core machine, and Dask's nanny kills a
    worker still alive after 4 s of closing ("Worker process still alive after 4.0 seconds, killing").
    Objects frozen at exit (``gc.freeze``) are not collected: the process ends at once, and the
    operating system takes its memory back. Registered once per process.
    """
    global _exit_registered
    if _exit_registered or multiprocessing.parent_process() is None:
        return
    _exit_registered = True
    atexit.register(gc.freeze)


_exit_registered = False


def _worker_function(token: str, payload: bytes):
    """The function of ``payload``, unpickled once per worker process and cached by ``token``."""
    _exit_without_collecting()
    function = _worker_functions.get(token)
    if function is None:
        function = cloudpickle.loads(payload)
        _worker_functions[token] = function
        while len(_worker_functions) > _WORKER_CACHE_SIZE:
            _worker_functions.popitem(last=False)
    else:
        _worker_functions.move_to_end(token)
    return function


def _headline(err: Exception) -> str:
    """``"TypeName: first line of the message"`` (PyTensor appends pages of graph details)."""
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"


def _failure(index: int, err: Exception) -> RowFailure:
    import traceback

    return RowFailure(index, _headline(err), traceback.format_exc())


def _aligned(value):
    """Arrays as aligned, C-contiguous copies: Dask's zero-copy transport can deliver unaligned buffers,
    which PyTensor functions compiled with ``trust_input`` reject."""
    if isinstance(value, np.ndarray) and not (value.flags.aligned and value.flags.c_contiguous):
        return np.require(value, requirements=["A", "C", "O"])
    return value


def _run_chunk(token: str, payload: bytes, start: int, rows: list) -> list:
    """Worker side: ``function(*row)`` for each row, in order; a raising row returns a :class:`RowFailure`
    (and the rest of the chunk is not evaluated)."""
    function = _worker_function(token, payload)
    results = []
    for offset, row in enumerate(rows):
        try:
            results.append(function(*(_aligned(value) for value in row)))
        except Exception as err:  # sent back, so the main process can name the inputs
            results.append(_failure(start + offset, err))
            break
    return results


def _run_block(token: str, payload: bytes, start: int, block) -> list:
    """Worker side: ``[function(block)]``, or ``[RowFailure]`` naming the block's first row."""
    function = _worker_function(token, payload)
    try:
        return [function(_aligned(block))]
    except Exception as err:
        return [_failure(start, err)]


def _unpickle(token: str, payload: bytes, index: int) -> int:
    """Worker side: unpickle (and cache) the payload's function, call nothing; returns ``index`` (a warm-up
    task, one per worker: :meth:`pymc_kameleon.executors.ExecutorOption.warm_up`)."""
    _worker_function(token, payload)
    return index


def _run_one(token: str, payload: bytes, row: tuple):
    """Worker side: ``function(*row)``, or a RuntimeError naming the error if it raised (a speculative
    call: the caller, which may not need the value, evaluates again itself and raises the error there
    if it does; the worker's error says why the workers could not help)."""
    function = _worker_function(token, payload)
    try:
        return function(*(_aligned(value) for value in row))
    except Exception as err:  # noqa: BLE001
        return RuntimeError(_headline(err))  # its traceback stays here: the caller reruns the call


class _Payload:
    """A function pickled once, with the token workers cache it by."""

    def __init__(self, function):
        self.function = function
        self.token = uuid.uuid4().hex
        self.data = cloudpickle.dumps(function)


@functools.cache
def _warm_up_payload() -> _Payload:
    """The warm-up's function (:meth:`pymc_kameleon.executors.ExecutorOption.warm_up`), compiled and
    pickled once per process: one token, so a worker that has unpickled it answers at once later."""
    import pytensor
    import pytensor.tensor as pt

    x = pt.dscalar("x")
    return _Payload(pytensor.function([x], x + 1.0))
