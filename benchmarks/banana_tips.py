"""The README's 2-d banana: the tips KameleonMetropolis holds, with or without its Kameleon component.

x ~ N(0, 1), y ~ N(x^2, 0.5): exact sd(y) 1.498, P(y > 8) 0.0049 and P(|x| > 2.5) 0.0124. A new user
found the tips under-sampled once the Kameleon component proposes (after ``kameleon_after`` tuning
steps, or from the start with ``kameleon_after=0``) while R-hat and the bulk ESS looked fine. Per
seed, 4 chains x (``--tune`` + ``--draws``): those three figures, the bulk and tail ESS of y, and the
share of Kameleon and independence proposals.

    OPENBLAS_NUM_THREADS=1 python benchmarks/banana_tips.py                      # default (AM + independence)
    OPENBLAS_NUM_THREADS=1 python benchmarks/banana_tips.py --kameleon-after 0
    OPENBLAS_NUM_THREADS=1 python benchmarks/banana_tips.py --tune 20000        # the Kameleon component joins

``--frozen-chain N``: per seed, one chain tuned alone (``tuning="per_chain"``) for ``--tune`` steps, then N
steps of the frozen proposal; reported: P(|x| > 2.5), the relative standard error ArviZ's ESS of that
indicator claims and the z-score of the error against it, and the occupancy of each tip (x < -2.8,
x > 2.8) over its exact mass. ``--stationary COPIES``: instead, COPIES copies of the tuned chain started
at exact draws, 30 steps each: whatever the mixing, an exact kernel keeps the law (P(|x| > 2.5) within
its binomial error).

    OPENBLAS_NUM_THREADS=1 python benchmarks/banana_tips.py --kameleon-after 0 --frozen-chain 200000
    OPENBLAS_NUM_THREADS=1 python benchmarks/banana_tips.py --kameleon-after 0 --stationary 20000
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402

EXACT = {"sd(y)": 1.4981, "P(y>8)": 0.0048, "P(abs(x)>2.5)": 0.0124}


def run(seed: int, tune: int, draws: int, kameleon_after: int, am_weight: float = 0.1):
    import arviz as az
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis

    with pm.Model():
        x = pm.Normal("x", 0, 1)
        pm.Normal("y", x**2, 0.5)
        step = KameleonMetropolis(kameleon_after=kameleon_after, am_weight=am_weight)
        idata = pm.sample(step=step, tune=tune, draws=draws, chains=4, cores=1, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
    xs, ys, stats = idata.posterior["x"].values, idata.posterior["y"].values, idata.sample_stats
    return {
        "sd(y)": float(ys.std()),
        "P(y>8)": float((ys > 8).mean()),
        "P(abs(x)>2.5)": float((np.abs(xs) > 2.5).mean()),
        "bulk ESS y": float(az.ess(idata, var_names=["y"])["y"]),
        "tail ESS y": float(az.ess(idata, var_names=["y"], method="tail")["y"]),
        "kameleon": float(stats["kameleon"].mean()),
        "independence": float(stats["independence"].mean()),
    }


def _tuned_chain(seed: int, tune: int, kameleon_after: int, am_weight: float):
    """A KameleonMetropolis chain tuned alone for ``tune`` steps, tuning stopped, and its last point."""
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis
    from pymc_kameleon.testing import run_steps, start_chain

    with pm.Model():
        x = pm.Normal("x", 0, 1)
        pm.Normal("y", x**2, 0.5)
        step = KameleonMetropolis(kameleon_after=kameleon_after, am_weight=am_weight, tuning="per_chain")
    start_chain(step, seed, tune=tune)
    point, _ = run_steps(step, {"x": np.array(0.0), "y": np.array(1.0)}, tune, stop_tuning_at=None)
    step.stop_tuning()
    return step, point


def frozen_chain(seed: int, tune: int, steps: int, kameleon_after: int, am_weight: float) -> dict:
    """One long chain of the frozen proposal: tip occupancy against the error its ESS claims."""
    import arviz as az
    from scipy import stats

    step, point = _tuned_chain(seed, tune, kameleon_after, am_weight)
    xs = np.empty(steps)
    for i in range(steps):
        point, _ = step.step(point)
        xs[i] = point["x"]
    tip = (np.abs(xs) > 2.5).astype(float)
    exact = EXACT["P(abs(x)>2.5)"]
    rel_se = math.sqrt(exact * (1 - exact) / float(az.ess(tip[None, :]))) / exact
    tip_mass = stats.norm.sf(2.8)
    return {
        "P(abs(x)>2.5)": float(tip.mean()),
        "claimed rel. SE": rel_se,
        "z": math.log(tip.mean() / exact) / rel_se if tip.mean() > 0 else -math.inf,
        "x<-2.8 / exact": float((xs < -2.8).mean() / tip_mass),
        "x>2.8 / exact": float((xs > 2.8).mean() / tip_mass),
    }


def stationary_copies(seed: int, tune: int, copies: int, kameleon_after: int, am_weight: float) -> dict:
    """Copies of the tuned chain started at exact draws, 30 steps each: P(|x| > 2.5) at their ends."""
    step, _ = _tuned_chain(seed, tune, kameleon_after, am_weight)
    rng = np.random.default_rng(seed + 100)
    starts, ends = np.empty(copies), np.empty(copies)
    for r in range(copies):
        starts[r] = x = rng.standard_normal()
        point = {"x": np.array(x), "y": np.array(x**2 + 0.5 * rng.standard_normal())}
        for _ in range(30):
            point, _ = step.step(point)
        ends[r] = point["x"]
    exact = EXACT["P(abs(x)>2.5)"]
    se = math.sqrt(exact * (1 - exact) / copies)
    p, p_start = float((np.abs(ends) > 2.5).mean()), float((np.abs(starts) > 2.5).mean())
    # The ends follow the starts' own sampling error (30 steps move few copies in or out of the tips).
    return {"P(abs(x)>2.5)": p, "binomial SE": se, "z": (p - exact) / se, "at the starts": p_start,
            "moved copies": float(np.mean(ends != starts))}


def _table(title: str, names, rows_by_seed) -> None:
    print(title)
    print("| seed | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for seed, row in rows_by_seed:
        print(f"| {seed} | " + " | ".join(f"{row[k]:.4g}" for k in names) + " |", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--tune", type=int, default=3000)
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--kameleon-after", type=int, default=10000)
    parser.add_argument("--am-weight", type=float, default=0.1)
    parser.add_argument("--frozen-chain", type=int, default=0, metavar="STEPS")
    parser.add_argument("--stationary", type=int, default=0, metavar="COPIES")
    parser.add_argument("--quick", action="store_true", help="one seed, 300 + 300 (smoke)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.tune, args.draws = args.seeds[:1], 300, 300
    warnings.filterwarnings("ignore")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    print(f"# {environment_line()}")
    options = f"kameleon_after={args.kameleon_after}, am_weight={args.am_weight}"
    if args.frozen_chain or args.stationary:
        how = (f"{args.frozen_chain} steps of one frozen chain" if args.frozen_chain
               else f"{args.stationary} copies from exact draws, 30 steps each")
        title = f"# KameleonMetropolis({options}), tuned alone for {args.tune} steps; {how}"
        if args.frozen_chain:
            names = ["P(abs(x)>2.5)", "claimed rel. SE", "z", "x<-2.8 / exact", "x>2.8 / exact"]
            rows = [(s, frozen_chain(s, args.tune, args.frozen_chain, args.kameleon_after, args.am_weight))
                    for s in args.seeds]
        else:
            names = ["P(abs(x)>2.5)", "binomial SE", "z", "at the starts", "moved copies"]
            rows = [(s, stationary_copies(s, args.tune, args.stationary, args.kameleon_after, args.am_weight))
                    for s in args.seeds]
        _table(title + f"; exact P(abs(x)>2.5) {EXACT['P(abs(x)>2.5)']}", names, rows)
        return rows
    exact = ", ".join(f"{k} {v}" for k, v in EXACT.items())
    budget = f"4 x ({args.tune} + {args.draws})"
    print(f"# KameleonMetropolis({options}), {budget}; exact: {exact}")
    names = ["sd(y)", "P(y>8)", "P(abs(x)>2.5)", "bulk ESS y", "tail ESS y", "kameleon", "independence"]
    print("| seed | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    rows = []
    for seed in args.seeds:
        row = run(seed, args.tune, args.draws, args.kameleon_after, args.am_weight)
        rows.append(row)
        cells = [f"{row[k]:.3f}" if k == "sd(y)" else f"{row[k]:.4f}" if k.startswith("P") else
                 f"{row[k]:.0f}" if "ESS" in k else f"{row[k]:.2f}" for k in names]
        print(f"| {seed} | " + " | ".join(cells) + " |", flush=True)
    return rows


if __name__ == "__main__":
    main()
