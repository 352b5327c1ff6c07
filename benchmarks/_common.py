"""What every benchmark script shares: the BLAS set-up, the call counter and the version header.

Each script starts with::

    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
    from _common import CountedCall, environment_line, one_blas_thread

    one_blas_thread()  # before NumPy is imported

This module imports neither NumPy nor PyMC at import time, so :func:`one_blas_thread` still takes
effect. Likelihood evaluations inside compiled PyTensor graphs are counted by the package's
:class:`pymc_kameleon.problems.table1.CountingIdentity` / ``CallCounter`` (Table 1);
:class:`CountedCall` counts calls of a Python callable (an estimator, a compiled function).
"""

from __future__ import annotations

import os
import platform
import time
from contextlib import contextmanager

__all__ = [
    "BLAS_THREAD_VARIABLES", "CountedCall", "environment_line", "one_blas_thread", "start_chain",
    "tuning_reports",
]

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread() -> None:
    """Default every BLAS to one thread (a value already in the environment wins).

    The samplers' linear algebra is small and dense (GP surrogates, the 214 x 214 Glass
    estimator, proposal factors): multi-threaded BLAS is many times slower than one thread on a
    loaded 2-core machine, and chains run in separate processes anyway. It only takes effect
    before NumPy is imported.
    """
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


def environment_line() -> str:
    """Versions, machine and BLAS threads, for the header of a benchmark's output."""
    import arviz as az
    import pymc as pm
    import pytensor

    return (
        f"pymc {pm.__version__}, pytensor {pytensor.__version__}, arviz {az.__version__}, "
        f"python {platform.python_version()}, {platform.machine()}, "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}"
    )


def start_chain(step, rng, tune: int, draws: int) -> None:
    """Prepare a step for one chain driven by hand (``step.step(point)`` in a loop), as pm.sample does.

    PyMC 6 calls ``setup_chain(rng, tune, draws)``; PyMC 5's steps have ``set_rng`` and, if they
    keep per-chain state, ``reset_tuning``.
    """
    step.tune = True
    if hasattr(step, "setup_chain") and not hasattr(step, "set_rng"):  # PyMC 6
        step.setup_chain(rng, tune, draws)
        return
    step.set_rng(rng)
    if hasattr(step, "reset_tuning"):
        step.reset_tuning()


class CountedCall:
    """Wraps a callable: counts its calls and adds up their wall time (per process)."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0
        self.seconds = 0.0

    def reset(self) -> None:
        self.calls, self.seconds = 0, 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


def fine_and_coarse_evaluations(idata, sampler: str, iterations: int, gp_levels=()) -> tuple[float, float]:
    """The fine (expensive) and coarse log-density evaluations of a ``pm.sample`` run, tuning included.

    ``pm.DEMetropolisZ`` makes two per iteration; our steps count theirs in ``cumulative_logp_evals``, and
    MLDA its coarse levels' in ``level{k}_logp_evals`` (summed over every coarse level but the GP levels
    ``gp_levels``, whose evaluations are GP means, not model solves). Needs ``discard_tuned_samples=False``.
    """
    if sampler == "DEMetropolisZ":
        return 2.0 * iterations, 0.0  # two evaluations per iteration, as PyMC's step makes them
    stats, warm = idata.sample_stats, idata.warmup_sample_stats
    fine = float(stats["cumulative_logp_evals"].values[:, -1].sum())
    coarse, k = 0.0, 0
    while f"level{k}_logp_evals" in stats:
        name = f"level{k}_logp_evals"
        if k not in gp_levels:
            coarse += float(stats[name].values.sum() + warm[name].values.sum())
        k += 1
    return fine, coarse


def timed_sample(model, step, *, tune: int, draws: int, chains: int, seed: int):
    """``pm.sample`` in one process with the tuning draws kept; returns ``(idata, seconds)``."""
    import time

    import pymc as pm

    with model:
        start = time.perf_counter()
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=1, step=step, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False, discard_tuned_samples=False)
    return idata, time.perf_counter() - start


@contextmanager
def tuning_reports():
    """Every chain's end-of-tuning report (``ScaleFreeAdaptation.report``, which the tuning warnings read),
    kept in the list this yields while the context lasts (``cores=1``: each chain's is made here)."""
    from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation

    kept, report = [], ScaleFreeAdaptation.report

    def recorded(self):
        kept.append(report(self))
        return kept[-1]

    ScaleFreeAdaptation.report = recorded
    try:
        yield kept
    finally:
        ScaleFreeAdaptation.report = report
