"""Fork safety of LLVM's lock, so that PyMC's forked chains cannot deadlock before they start.

PyMC starts its chains (``cores > 1``) by forking on Linux. A fork copies every lock in the state it is
in, but only the thread that forks. llvmlite guards the LLVM C API with one process-wide lock
(``llvmlite.binding.ffi.lib._lock``) and does not release it across a fork. When another thread of
the parent holds it at that instant (a Dask client's event loop, or any thread whose garbage
collection frees a numba object), every forked chain blocks for ever at its first numba call: PyMC 6
compiles the model with numba there, so ``pm.sample_smc(..., cores=2)`` with a Dask client in the
same process hung for an hour about once in thirty runs (``multiprocessing.TimeoutError: No message
from samplers``), stuck in ``_LLVMLock.__enter__``.

:func:`install` registers ``os.register_at_fork`` hooks that take the lock before a fork (waiting for
the thread that holds it, as :mod:`logging` does for its own locks) and release it on both sides.
llvmlite is not imported here: the hooks look it up at fork time and do nothing when it is not
loaded.
"""

from __future__ import annotations

import os
import sys

_installed = False


def _llvm_lock():
    """llvmlite's LLVM lock (a ``threading.RLock``), or None when llvmlite is not loaded or has changed."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    lock = getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_lock", None)
    return lock if hasattr(lock, "acquire") and hasattr(lock, "release") else None


_held = None  # the lock taken before the fork under way, released on both sides after it


def _before_fork() -> None:
    global _held
    lock = _llvm_lock()
    if lock is not None:
        lock.acquire()
    _held = lock


def _after_fork() -> None:
    global _held
    lock, _held = _held, None
    if lock is not None:
        lock.release()  # the forking thread owns it on both sides (the child keeps its thread id)


def install() -> None:
    """Register the fork hooks once per process (no effect where ``os.register_at_fork`` is missing)."""
    global _installed
    if _installed or not hasattr(os, "register_at_fork"):
        return
    _installed = True
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)
