"""Speculative delayed acceptance: ``GPDelayedAcceptanceMH(executor=...)`` against the same step serial.

PyMC's gallery Lotka-Volterra model (``odeint`` in an ``as_op`` Op, about 1.1 ms per solve here;
``pymc_kameleon.problems.gallery``), made dearer by ``--extra-ms`` of CPU work per likelihood
evaluation (a potential that spins, adding nothing to the log density): the likelihood costs of
issue 44 (1 and 10 ms). 2 chains x (2000 + 2000), ``cores=1`` (the chains one after the other in one
process: the other core is idle). The speculative runs use a ``ProcessPoolExecutor`` of
``--workers`` processes, made before ``pm.sample`` and warmed up with one call; the draws must equal
the serial run's bit for bit (checked). The step speculates only where a likelihood evaluation took
at least 2 ms during tuning (``ms per likelihood``, its measurement); the start search runs its second
candidate on a worker whatever the cost. Reported per setting (median over seeds, worst in brackets):
seconds of ``pm.sample``, of its draws phase (from the end of tuning), the speed-ups over serial, the
share of the draws' exact evaluations that a worker had made ahead (``prefetched``), and the
speculative evaluations that were not used per exact evaluation (wasted work on the workers).

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/speculative_da.py [--extra-ms 0 2 10]
        [--workers 1 2] [--seeds 1 2 3] [--tune 2000] [--draws 2000] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402
from _references import scalar_draws  # noqa: E402

one_blas_thread()  # before NumPy is imported

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from pytensor.graph.basic import Apply  # noqa: E402
from pytensor.graph.op import Op  # noqa: E402

from pymc_kameleon import GPDelayedAcceptanceMH  # noqa: E402
from pymc_kameleon.problems.gallery import gallery_lotka_volterra  # noqa: E402


class BusyOp(Op):
    """A scalar 0 that costs ``ms`` milliseconds of CPU (a spin loop: it holds the GIL, as a solver does)."""

    __props__ = ("ms",)

    def __init__(self, ms: float):
        self.ms = float(ms)

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        end = time.perf_counter() + self.ms / 1000.0
        while time.perf_counter() < end:
            pass
        outputs[0][0] = np.asarray(0.0)


def model_with_cost(extra_ms: float):
    """The gallery model, plus ``extra_ms`` of work per likelihood evaluation."""
    model, _, initvals = gallery_lotka_volterra()
    if extra_ms > 0:
        with model:
            theta = pt.stack([model[name] for name in ("alpha", "beta", "gamma", "delta")])
            pm.Potential("extra_cost", BusyOp(extra_ms)(theta))
    return model, initvals


_END_OF_TUNING: list[float] = []


@contextmanager
def timing_the_end_of_tuning():
    """Record when each chain's copy of the step stops tuning (the draws begin), within this block."""
    original = GPDelayedAcceptanceMH.stop_tuning

    def timed(self):
        _END_OF_TUNING.append(time.perf_counter())
        return original(self)

    GPDelayedAcceptanceMH.stop_tuning = timed
    try:
        yield
    finally:
        GPDelayedAcceptanceMH.stop_tuning = original


def _warm(executor) -> None:
    """Start the pool's processes (a user's pool is running before sampling)."""
    list(executor.map(abs, range(8)))


def run(extra_ms: float, seed: int, workers: int, tune: int, draws: int) -> dict:
    model, initvals = model_with_cost(extra_ms)
    executor = None
    if workers:
        executor = ProcessPoolExecutor(workers)
        _warm(executor)
    try:
        with model, warnings.catch_warnings(), timing_the_end_of_tuning():
            warnings.simplefilter("ignore")
            step = GPDelayedAcceptanceMH(executor=executor)
            _END_OF_TUNING.clear()
            start = time.perf_counter()
            idata = pm.sample(tune=tune, draws=draws, chains=2, cores=1, step=step, initvals=initvals,
                              random_seed=seed, progressbar=False, compute_convergence_checks=False)
            end = time.perf_counter()
    finally:
        if executor is not None:
            executor.shutdown(cancel_futures=True)
    stats = idata.sample_stats
    exact = int(stats["exact_eval"].values.sum())
    used = int(stats["prefetched"].values.sum())
    submitted = int(stats["speculative_evals"].values.sum())
    # cores=1 runs the chains one after the other unless tuning is pooled: the draws began at the first
    # chain's end of tuning (pooled) or at each chain's (sequential).
    draws_seconds = end - min(_END_OF_TUNING) if len(_END_OF_TUNING) else float("nan")
    return {
        "seconds": end - start,
        "draws_seconds": draws_seconds,
        "draws": np.concatenate([idata.posterior[v].values.ravel() for v in idata.posterior.data_vars]),
        # Per scalar on (chain, draw) arrays: ArviZ 1's az.ess of a whole InferenceData is a DataTree.
        "min_ess": min(float(az.ess(x, method="bulk"))
                       for x in scalar_draws(idata.posterior, list(idata.posterior.data_vars)).values()),
        "prefetched": used / exact if exact else float("nan"),
        "wasted_per_eval": (submitted - used) / exact if exact else float("nan"),
        # PyMC copies a pooled step for each chain: the last chain's copy has the measurement.
        "likelihood_ms": getattr(step._last_run(), "likelihood_ms", None) or float("nan"),
    }


def _cell(values, fmt, worst_is_max) -> str:
    values = np.asarray(values, dtype=float)
    worst = values.max() if worst_is_max else values.min()
    return f"{fmt.format(np.median(values))} ({fmt.format(worst)})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra-ms", type=float, nargs="+", default=[0.0, 2.0, 10.0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 3 extra ms, 2 x (300 + 300), 1 seed, 1 worker")
    args = parser.parse_args(argv)
    if args.quick:
        args.extra_ms, args.workers, args.seeds, args.tune, args.draws = [3.0], [1], [1], 300, 300
    logging.getLogger("pymc").setLevel(logging.WARNING)
    print(f"# {environment_line()}")
    print(f"# 2 chains x ({args.tune} + {args.draws}), cores=1, seeds {args.seeds}; ProcessPoolExecutor")
    print("| likelihood | workers | ms per likelihood | seconds | draws phase (s) | speed-up | "
          "draws speed-up | prefetched | wasted / eval | min ESS | ESS/s | identical draws |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for extra_ms in args.extra_ms:
        serial = [run(extra_ms, seed, 0, args.tune, args.draws) for seed in args.seeds]
        label = "gallery LV" + (f" + {extra_ms:g} ms" if extra_ms else "")
        rows = [(0, serial)]
        for workers in args.workers:
            results = [run(extra_ms, seed, workers, args.tune, args.draws) for seed in args.seeds]
            rows.append((workers, results))
        for workers, results in rows:
            speed = [s["seconds"] / r["seconds"] for s, r in zip(serial, results)]
            draws_speed = [s["draws_seconds"] / r["draws_seconds"] for s, r in zip(serial, results)]
            same = all(np.array_equal(s["draws"], r["draws"]) for s, r in zip(serial, results))
            print(" | ".join([
                f"| {label}", "serial" if workers == 0 else str(workers),
                "" if workers == 0 else _cell([r["likelihood_ms"] for r in results], "{:.1f}", True),
                _cell([r["seconds"] for r in results], "{:.1f}", True),
                _cell([r["draws_seconds"] for r in results], "{:.1f}", True),
                _cell(speed, "{:.2f}", False), _cell(draws_speed, "{:.2f}", False),
                "" if workers == 0 else _cell([r["prefetched"] for r in results], "{:.2f}", False),
                "" if workers == 0 else _cell([r["wasted_per_eval"] for r in results], "{:.2f}", True),
                _cell([r["min_ess"] for r in results], "{:.0f}", False),
                _cell([r["min_ess"] / r["seconds"] for r in results], "{:.1f}", False),
                "" if workers == 0 else ("yes" if same else "**no**"),
            ]) + " |", flush=True)


if __name__ == "__main__":
    main()
