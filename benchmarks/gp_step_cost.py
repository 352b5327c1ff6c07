"""What a GP delayed-acceptance step costs beyond its exact evaluations, against the GP's size.

GP-DA pays for each step with its own bookkeeping (the GP's prediction at the proposal, the
Cholesky append of each new exact evaluation, the proposal and its adaptation) and saves exact
likelihood evaluations. This script measures the first part on T5 (Table 1's logistic
regression, d = 5), one chain driven by hand in one process: after tuning, the GP grows by
every exact evaluation (``gp_after_tuning="grow"``) until ``max_points``, and then stays fixed.
Each step's wall time minus the time spent in the step's exact density evaluations (the
compiled prior and likelihood, timed around the calls) is the bookkeeping. Reported per band
of GP points: the mean bookkeeping per step, its part in steps that added a point and steps
that did not, and the fraction of steps that made an exact evaluation (at ``max_points``
these no longer add a point).

    OPENBLAS_NUM_THREADS=1 python benchmarks/gp_step_cost.py [--max-points 1000] [--steps 6000]

Run it on an otherwise idle machine: it is a wall-time measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread, start_chain  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402


def timed_density(step):
    """Wrap the step's exact density calls with a timer; returns the accumulator (seconds)."""
    target = step._target
    spent = [0.0]
    for name in ("prior", "evaluate", "current"):
        original = getattr(target, name)

        def wrapper(*args, _original=original, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        setattr(target, name, wrapper)
    return spent


def measure(step_class, max_points, tune, steps, seed, **options):
    from pymc_kameleon.problems import table1

    target = table1.build("T5", seed=1)
    with target.model:
        step = step_class(max_points=max_points, **options)
    start_chain(step, np.random.default_rng(seed), tune, steps)
    point = target.model.initial_point()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(tune):
            point, _ = step.step(point)
        step.stop_tuning()
    spent = timed_density(step)
    rows = []
    for _ in range(steps):
        before_density = spent[0]
        start = time.perf_counter()
        point, stats = step.step(point)
        elapsed = time.perf_counter() - start
        s = stats[0]
        rows.append((s["gp_points"], elapsed - (spent[0] - before_density), bool(s["exact_eval"])))
    return np.array(rows), step.max_points, step.gp._p


def report(name, rows, bands):
    print(f"\n## {name}\n")
    print("| GP points | steps | bookkeeping µs/step | µs/step, steps with an exact evaluation "
          "| µs/step, the others | fraction of steps evaluating |")
    print("|---|---|---|---|---|---|")
    points, cost, added = rows[:, 0], rows[:, 1] * 1e6, rows[:, 2].astype(bool)
    for lo, hi in bands:
        sel = (points >= lo) & (points <= hi)
        if sel.sum() < 20:
            continue
        a, o = sel & added, sel & ~added
        fmt = lambda m: f"{np.mean(cost[m]):.0f}" if m.any() else "–"  # noqa: E731
        print(f"| {lo}–{hi} | {sel.sum()} | {np.mean(cost[sel]):.0f} | {fmt(a)} | {fmt(o)} | "
              f"{a.sum() / sel.sum():.2f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-points", type=int, default=None,
                        help="the steps' max_points (default theirs: 1000 GP rows, so 1000 // (d + 1) "
                             "points with MALA's gradient observations)")
    parser.add_argument("--tune", type=int, default=1000, help="tuning steps before the timed ones")
    parser.add_argument("--steps", type=int, default=6000, help="timed steps after tuning")
    parser.add_argument("--seed", type=int, default=1, help="the chain's seed")
    parser.add_argument("--samplers", nargs="+", default=["GP-DA-MH", "GP-DA-MALA"],
                        choices=["GP-DA-MH", "GP-DA-MALA"])
    args = parser.parse_args(argv)
    import pymc_kameleon as pk

    print(f"# {environment_line()}")
    cap = "the steps' default" if args.max_points is None else args.max_points
    print(f"# T5 (d = 5), tune {args.tune}, then {args.steps} timed steps, max_points {cap}, "
          f"seed {args.seed}")
    classes = {"GP-DA-MH": pk.GPDelayedAcceptanceMH, "GP-DA-MALA": pk.GPDelayedAcceptanceMALA}
    out = {}
    for name in args.samplers:
        rows, cap, p = measure(classes[name], args.max_points, args.tune, args.steps, args.seed)
        edges = np.unique(np.round(np.array([0, 0.25, 0.5, 0.75, 0.9, 1.0]) * cap).astype(int))
        bands = [(lo, hi - 1) for lo, hi in zip(edges[:-1], edges[1:])] + [(cap, cap)]
        report(f"{name} (max_points {cap}, {p} GP row(s) per point)", rows, bands)
        out[name] = rows
    return out  # per sampler: (GP points, bookkeeping seconds, exact evaluation) per timed step


if __name__ == "__main__":
    main()
