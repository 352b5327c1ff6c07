"""What ``cores`` costs a population of chains: ``pm.sample``'s wall time, ``cores=1`` against ``cores=2``.

Pooled tuning makes our steps PyMC population steps, and with ``cores > 1`` PyMC runs a population
in worker processes that it synchronises at *every* iteration, draws included
(``pymc/sampling/population.py``: each worker is sent the population and returns its new state). With
a cheap likelihood that traffic, not the likelihood, sets the time. Per-chain tuning
(``tuning="per_chain"``) runs ordinary independent chains, which PyMC parallelises without it.

KameleonMetropolis (or ``--step GPDelayedAcceptanceMH``) on ``x ~ N(0, I_d)`` through a black-box
likelihood that busy-waits ``--costs`` ms a call; ``--chains`` chains x (``--tune`` + ``--draws``), each
configuration timed as a whole ``pm.sample`` (worker start-up and tuning included; an untimed short run
first compiles the model), ``--repeats`` times (the median is reported). The draws of ``cores=1`` and
``cores=2`` are checked to be identical for each tuning. Run on an otherwise idle machine: wall time is
the measurement.

    OPENBLAS_NUM_THREADS=1 python benchmarks/population_cores.py [--costs 0 0.3 1 3] [--dim 5]
        [--chains 4] [--tune 1000] [--draws 1000] [--repeats 3] [--step KameleonMetropolis] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402

TUNINGS = ("pooled", "per_chain")
CORES = (1, 2)


def busy_gaussian_model(dim: int, cost_ms: float):
    """``x ~ Flat`` with the black-box log likelihood ``-|x|^2 / 2`` that busy-waits ``cost_ms``
    (``step_cost.py``'s Op)."""
    import pymc as pm
    from step_cost import make_op

    with pm.Model() as model:
        x = pm.Flat("x", shape=dim, initval=np.zeros(dim))
        pm.Potential("lik", make_op(cost_ms)(x))
    return model


def timed_sample(model, tuning: str, cores: int, chains: int, tune: int, draws: int,
                 step: str = "KameleonMetropolis"):
    """One whole `pm.sample` of ``step`` (a class of the package, by name): its wall time (s) and the draws
    of `x`."""
    import pymc as pm

    import pymc_kameleon

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        idata = pm.sample(
            step=getattr(pymc_kameleon, step)(tuning=tuning), chains=chains, cores=cores, tune=tune,
            draws=draws, random_seed=1, progressbar=False, compute_convergence_checks=False,
        )
        seconds = time.perf_counter() - start
    return seconds, idata.posterior["x"].values


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--costs", type=float, nargs="+", default=[0.0, 0.3, 1.0, 3.0], metavar="MS")
    parser.add_argument("--dim", type=int, default=5)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step", default="KameleonMetropolis",
                        choices=["KameleonMetropolis", "GPDelayedAcceptanceMH"])
    parser.add_argument("--quick", action="store_true", help="cost 0, 300 + 100 steps, 1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.costs, args.tune, args.draws, args.repeats = [0.0], 300, 100, 1
    print(environment_line())
    print(f"{args.step}, d = {args.dim}, {args.chains} chains x ({args.tune} + {args.draws}), "
          f"median of {args.repeats} runs; wall time of the whole pm.sample")
    print("| likelihood (ms) | tuning | cores=1 (s) | cores=2 (s) | cores=2 / cores=1 | same draws |")
    print("|---|---|---|---|---|---|")
    rows = []
    for cost in args.costs:
        model = busy_gaussian_model(args.dim, cost)
        for cores in CORES:  # untimed: the first run of a model compiles it
            timed_sample(model, "pooled", cores, args.chains, tune=20, draws=10, step=args.step)
        for tuning in TUNINGS:
            seconds = {c: [] for c in CORES}
            draws = {}
            for _ in range(args.repeats):
                for cores in CORES:
                    t, draws[cores] = timed_sample(model, tuning, cores, args.chains, args.tune, args.draws,
                                                   args.step)
                    seconds[cores].append(t)
            one, two = (float(np.median(seconds[c])) for c in CORES)
            same = bool(np.array_equal(draws[1], draws[2]))
            rows.append((cost, tuning, one, two, same))
            same_text = "yes" if same else "no"
            ratio = two / one
            print(f"| {cost:g} | {tuning} | {one:.1f} | {two:.1f} | {ratio:.2f} | {same_text} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
