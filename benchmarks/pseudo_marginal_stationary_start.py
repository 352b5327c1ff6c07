"""Is a pseudo-marginal chain exact, or only sticky? Copies of a tuned chain started at its stationary law.

Long pseudo-marginal runs at a large log-estimate noise cannot tell a bias from stickiness: a chain
stuck for thousands of steps makes the MCSE meaningless. Here one chain of the latent Gaussian model
(``pymc_kameleon.testing.latent_gaussian_model``, exact posterior known) is tuned, and then
``--copies`` independent copies of it (each with the GP and proposal it had at the end of tuning) start
at the pseudo-marginal chain's stationary law: theta from the exact posterior and the kept estimate
from its size-biased law (``latent_gaussian_size_biased_log_estimate``). After ``--steps`` steps theta
must still follow the posterior exactly; the copies are independent, so the z-scores of its means and
variances are plain. ``--refresh`` (Monte Carlo within Metropolis: a fresh estimate at the current
state before every step, which is not exact) is the negative control.

    OPENBLAS_NUM_THREADS=1 python benchmarks/pseudo_marginal_stationary_start.py --step GP-DA-MH
    OPENBLAS_NUM_THREADS=1 python benchmarks/pseudo_marginal_stationary_start.py --step KAMH --refresh
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread, start_chain  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402

STEPS = ("GP-DA-MH", "GP-DA-MH-freeze", "KAMH")


def tuned_step(name: str, n_importance: int, seed: int, tune: int):
    """A step tuned on one chain of the latent Gaussian model (driven by hand, as pm.sample would)."""
    from pymc_kameleon import GPDelayedAcceptanceMH, KameleonMetropolis
    from pymc_kameleon.testing import latent_gaussian_model

    model = latent_gaussian_model(n_importance=n_importance)
    with model:
        if name == "KAMH":
            step = KameleonMetropolis(rng=seed)
        else:
            after_tuning = "freeze" if name.endswith("freeze") else "grow"
            step = GPDelayedAcceptanceMH(gp_after_tuning=after_tuning, rng=seed)
    start_chain(step, np.random.default_rng(seed), tune, 0)
    point = model.initial_point()
    for _ in range(tune):
        point, _ = step.step(point)
    step.stop_tuning()
    step.tune = False
    return step


def run(name: str, n_importance: int, copies: int, steps: int, seed: int, tune: int, refresh: bool):
    from pymc_kameleon.testing import LATENT_POST_MEAN, LATENT_POST_VAR, latent_gaussian_from_stationary_law

    step = tuned_step(name, n_importance, seed, tune)
    ends, moves = latent_gaussian_from_stationary_law(
        step, n_importance, copies, steps, np.random.default_rng(seed + 1000), refresh=refresh
    )
    d = ends - LATENT_POST_MEAN
    out = {"moves per copy": moves / copies}
    for j in range(2):
        sq = d[:, j] ** 2
        out[f"mean z {j}"] = d[:, j].mean() / (d[:, j].std(ddof=1) / math.sqrt(copies))
        out[f"var ratio {j}"] = sq.mean() / LATENT_POST_VAR
        out[f"var z {j}"] = (sq.mean() - LATENT_POST_VAR) / (sq.std(ddof=1) / math.sqrt(copies))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", choices=STEPS, default="GP-DA-MH")
    parser.add_argument("--samples", type=int, default=8, help="importance samples per group")
    parser.add_argument("--copies", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--refresh", action="store_true", help="negative control: fresh estimates")
    parser.add_argument("--quick", action="store_true", help="one seed, 20 copies of 20 steps (smoke)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.copies, args.steps, args.tune = args.seeds[:1], 20, 20, 500
    warnings.filterwarnings("ignore")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    print(f"# {environment_line()}")
    control = " with a fresh estimate every step" if args.refresh else ""
    print(f"# {args.step}{control}, {args.samples} importance samples per group, tune {args.tune}, "
          f"{args.copies} copies x {args.steps} steps")
    print("| seed | moves per copy | mean z 0 | mean z 1 | var ratio 0 | var ratio 1 | var z 0 | var z 1 "
          "| seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for seed in args.seeds:
        t0 = time.perf_counter()
        r = run(args.step, args.samples, args.copies, args.steps, seed, args.tune, args.refresh)
        rows.append(r)
        cells = [f"{r['moves per copy']:.1f}", f"{r['mean z 0']:+.2f}", f"{r['mean z 1']:+.2f}",
                 f"{r['var ratio 0']:.3f}", f"{r['var ratio 1']:.3f}", f"{r['var z 0']:+.2f}",
                 f"{r['var z 1']:+.2f}", f"{time.perf_counter() - t0:.0f}"]
        print(f"| {seed} | " + " | ".join(cells) + " |", flush=True)
    worst = max(abs(r[k]) for r in rows for k in r if " z " in k)
    print(f"\nlargest |z| {worst:.2f} over {4 * len(rows)} statistics")
    return rows


if __name__ == "__main__":
    main()
