"""The README's 2-d banana: the tips KameleonMetropolis holds, with or without its Kameleon component.

x ~ N(0, 1), y ~ N(x^2, 0.5): exact sd(y) 1.498, P(y > 8) 0.0049 and P(|x| > 2.5) 0.0124. A new user
found the tips under-sampled once the Kameleon component proposes (after ``kameleon_after`` tuning
steps, or from the start with ``kameleon_after=0``) while R-hat and the bulk ESS looked fine. Per
seed, 4 chains x (``--tune`` + ``--draws``): those three figures, the bulk and tail ESS of y, and the
share of Kameleon and independence proposals.

    OPENBLAS_NUM_THREADS=1 python benchmarks/banana_tips.py                      # default (AM + independence)
    OPENBLAS_NUM_THREADS=1 python benchmarks/banana_tips.py --kameleon-after 0
    OPENBLAS_NUM_THREADS=1 python benchmarks/banana_tips.py --tune 20000        # the Kameleon component joins
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402

EXACT = {"sd(y)": 1.4981, "P(y>8)": 0.0048, "P(abs(x)>2.5)": 0.0124}


def run(seed: int, tune: int, draws: int, kameleon_after: int):
    import arviz as az
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis

    with pm.Model():
        x = pm.Normal("x", 0, 1)
        pm.Normal("y", x**2, 0.5)
        idata = pm.sample(step=KameleonMetropolis(kameleon_after=kameleon_after), tune=tune, draws=draws,
                          chains=4, cores=1, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--tune", type=int, default=3000)
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--kameleon-after", type=int, default=10000)
    parser.add_argument("--quick", action="store_true", help="one seed, 300 + 300 (smoke)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.tune, args.draws = args.seeds[:1], 300, 300
    warnings.filterwarnings("ignore")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    print(f"# {environment_line()}")
    exact = ", ".join(f"{k} {v}" for k, v in EXACT.items())
    budget = f"4 x ({args.tune} + {args.draws})"
    print(f"# KameleonMetropolis(kameleon_after={args.kameleon_after}), {budget}; exact: {exact}")
    names = ["sd(y)", "P(y>8)", "P(abs(x)>2.5)", "bulk ESS y", "tail ESS y", "kameleon", "independence"]
    print("| seed | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    rows = []
    for seed in args.seeds:
        row = run(seed, args.tune, args.draws, args.kameleon_after)
        rows.append(row)
        cells = [f"{row[k]:.3f}" if k == "sd(y)" else f"{row[k]:.4f}" if k.startswith("P") else
                 f"{row[k]:.0f}" if "ESS" in k else f"{row[k]:.2f}" for k in names]
        print(f"| {seed} | " + " | ".join(cells) + " |", flush=True)
    return rows


if __name__ == "__main__":
    main()
