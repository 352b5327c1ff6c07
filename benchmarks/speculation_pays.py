"""Does ``GPDelayedAcceptanceMH(executor=...)`` say when evaluating ahead costs more time than it saves?

PyMC's gallery Lotka-Volterra model made dearer by ``--extra-ms`` of CPU work per likelihood evaluation
(``speculative_da.model_with_cost``), 2 chains x (1600 + 2000), ``cores=1``, one seed, run serially, with
a ``ProcessPoolExecutor(1)`` and with a Dask ``LocalCluster`` of 2 single-threaded worker processes
(``client.get_executor()``): the setting in which a new user's 7.5 ms likelihood took 51 s on Dask
against 43 s serially, without a word. Reported per executor: seconds of ``pm.sample``, the ratio to the
serial run, whether the draws equal the serial ones, and the step's warning that evaluating ahead does
not pay (the figures it names), if any.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/speculation_pays.py [--extra-ms 6.5] [--seed 1]
        [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
from speculative_da import model_with_cost  # noqa: E402

from pymc_kameleon import GPDelayedAcceptanceMH  # noqa: E402

NOT_PAYING = "evaluating ahead on the executor costs more time than it saves"


def run(model, initvals, executor, seed: int, tune: int, draws: int):
    """Seconds of ``pm.sample``, the draws, and the step's not-paying warnings (first sentence each)."""
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        step = GPDelayedAcceptanceMH(executor=executor)
        idata = pm.sample(tune=tune, draws=draws, chains=2, cores=1, step=step, initvals=initvals,
                          random_seed=seed, progressbar=False, compute_convergence_checks=False)
        seconds = time.perf_counter() - start
    said = [str(w.message).split(" so the draws")[0] for w in caught if NOT_PAYING in str(w.message)]
    return seconds, idata.posterior["alpha"].values, said


def main(argv=None) -> list[str]:
    """Prints the table; returns its rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--extra-ms", type=float, default=6.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tune", type=int, default=1600)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="a smoke test: 2 ms, 400 + 200")
    args = parser.parse_args(argv)
    if args.quick:
        args.extra_ms, args.tune, args.draws = 2.0, 400, 200
    print(environment_line())
    print(f"# gallery Lotka-Volterra + {args.extra_ms} ms per likelihood, 2 chains x ({args.tune} + "
          f"{args.draws}), cores=1, seed {args.seed}")
    model, initvals = model_with_cost(args.extra_ms)
    serial_seconds, serial_draws, said = run(model, initvals, None, args.seed, args.tune, args.draws)
    rows = [f"| none | {serial_seconds:.1f} | 1 | | {'; '.join(said) or '-'} |"]
    from dask.distributed import Client, LocalCluster

    with ProcessPoolExecutor(1) as pool:
        pool.submit(int).result()  # the worker started
        seconds, draws, said = run(model, initvals, pool, args.seed, args.tune, args.draws)
    rows.append(f"| ProcessPoolExecutor(1) | {seconds:.1f} | {seconds / serial_seconds:.2f} | "
                f"{np.array_equal(draws, serial_draws)} | {'; '.join(said) or '-'} |")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        seconds, draws, said = run(model, initvals, client.get_executor(), args.seed, args.tune, args.draws)
    rows.append(f"| Dask LocalCluster, 2 workers | {seconds:.1f} | {seconds / serial_seconds:.2f} | "
                f"{np.array_equal(draws, serial_draws)} | {'; '.join(said) or '-'} |")
    print("| executor | seconds | / serial | same draws | warning that evaluating ahead does not pay |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    return rows


if __name__ == "__main__":
    main()
