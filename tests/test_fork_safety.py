"""PyMC forks its chains: a fork while another thread holds LLVM's lock must not deadlock the child.

The parent below holds llvmlite's lock in a second thread (as a Dask client's event loop does when
its garbage collection frees a numba object) and forks a child that needs the lock (as PyMC 6's
chains do at their first numba call). Seen in CI: ``pm.sample_smc(cores=2)`` with a Dask client in
the process hung for an hour.
"""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("llvmlite")

SCRIPT = textwrap.dedent(
    """
    import multiprocessing, sys, threading, time
    if sys.argv[1] == "with-package":
        import pymc_kameleon  # noqa: F401  (installs the fork hooks)
    from llvmlite.binding import ffi

    def child():
        with ffi.lib._lock:  # what every LLVM call does first
            pass

    held = threading.Event()

    def holder():
        with ffi.lib._lock:
            held.set()
            time.sleep(1.0)

    threading.Thread(target=holder).start()
    held.wait()
    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(5)
    print("exitcode", process.exitcode)
    if process.exitcode is None:
        process.kill()
    """
)


def run(mode: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def test_a_fork_while_another_thread_holds_llvms_lock_does_not_deadlock_the_child():
    assert run("with-package") == "0"


def test_negative_control_without_the_hooks_the_child_deadlocks():
    assert run("without") == "None"
