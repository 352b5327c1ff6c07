"""Heavy tails: two independent standard Cauchy coordinates, where the reported ESS overstates the tails.

The exact 99% quantile of |x| is tan(0.495 pi) = 63.66 and the 90% one tan(0.45 pi) = 6.31. Per sampler and
seed: the largest R-hat, the smallest bulk and tail ESS (ArviZ), and the 90% and 99% quantiles of |x| over
both coordinates and all chains, against the exact ones. Evaluations are not counted here: the point is
what the diagnostics say about the tails, not efficiency.

    OPENBLAS_NUM_THREADS=1 python benchmarks/cauchy_tails.py [--seeds 1 2 3] [--tune 2000] [--draws 5000]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402

EXACT = {0.9: math.tan(0.45 * math.pi), 0.99: math.tan(0.495 * math.pi)}


def samplers():
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis

    return {
        "KameleonMetropolis()": KameleonMetropolis,
        "KameleonMetropolis(independence_weight=0)": lambda: KameleonMetropolis(independence_weight=0.0),
        "pm.Metropolis": pm.Metropolis,
        "pm.DEMetropolisZ": pm.DEMetropolisZ,
    }


def run(make_step, seed: int, tune: int, draws: int) -> dict:
    import arviz as az
    import pymc as pm

    with pm.Model():
        pm.Cauchy("x", 0.0, 1.0, shape=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(step=make_step(), tune=tune, draws=draws, chains=4, cores=1, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
    x = np.abs(idata.posterior["x"].values).ravel()
    return {
        "rhat": float(az.rhat(idata)["x"].max()),
        "bulk": float(az.ess(idata, method="bulk")["x"].min()),
        "tail": float(az.ess(idata, method="tail")["x"].min()),
        **{q: float(np.quantile(x, q)) for q in EXACT},
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=5000)
    args = parser.parse_args(argv)
    print(environment_line())
    print(f"# 2 independent Cauchy(0, 1), 4 chains x ({args.tune} + {args.draws}), cores=1, "
          f"seeds {args.seeds}; exact |x| quantiles: 90% {EXACT[0.9]:.2f}, 99% {EXACT[0.99]:.2f}")
    print("| sampler | seed | max R-hat | min bulk ESS | min tail ESS | 90% of abs(x) | 99% of abs(x) |")
    print("|---|---|---|---|---|---|---|")
    for name, make_step in samplers().items():
        for seed in args.seeds:
            r = run(make_step, seed, args.tune, args.draws)
            print(f"| {name} | {seed} | {r['rhat']:.3f} | {r['bulk']:.0f} | {r['tail']:.0f} | {r[0.9]:.2f} | "
                  f"{r[0.99]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
