"""Tuning that ends a little past an adaptation window's end: is more tuning ever worse?

The windows double after the coordinate scan of 25 d + 50 steps (for 3 parameters they end at tuning
steps 225, 425, 825, 1625, 3225). A ``tune`` just past a window's end leaves a few dozen steps in the
next window, too few to end it. This script samples a model with 2 chains at the end of the fourth
window (25 d + 1550, GP-DA-MH's default ``tune`` until decision record 0065) and at 25-875 steps past
it, and reports per step and ``tune``,
over the seeds: the median smallest bulk ESS, the largest R-hat, the lowest acceptance rate of any
chain in the draws, and the seeds at which a chain's acceptance is below half the best chain's (a chain
crippled by its frozen proposal). Models: ``regression3``, a 3-parameter linear regression (intercept,
slope, noise sd; 50 points); ``gaussian50``, a 50-d Gaussian with sds from 1e-2 to 1e2 and correlation
0.5 between neighbours (``tune=3000`` is 200 steps past its fourth window).

    OPENBLAS_NUM_THREADS=1 python benchmarks/tune_past_window.py [--steps gpda kamh] [--seeds 0 1 ... 10]
        [--past 0 25 75 175 375 875] [--draws 1000] [--model regression3] [--chains 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402


def window_end(dim: int) -> int:
    """The end of the fourth window: the scan (25 d + 50) and windows of 100, 200, 400 and 800 steps."""
    return 25 * dim + 50 + 1500


def regression3():
    import pymc as pm

    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    y = 1.0 + 2.0 * x + rng.normal(scale=0.5, size=50)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 10)
        b = pm.Normal("b", 0, 10)
        s = pm.HalfNormal("s", 5)
        pm.Normal("y", a + b * x, s, observed=y)
    return model


def gaussian50():
    import pymc as pm

    d = 50
    sds = np.logspace(-2, 2, d)
    corr = np.eye(d) + 0.5 * (np.eye(d, k=1) + np.eye(d, k=-1))
    with pm.Model() as model:
        pm.MvNormal("x", mu=np.zeros(d), cov=corr * np.outer(sds, sds))
    return model


MODELS = {"regression3": (regression3, 3), "gaussian50": (gaussian50, 50)}


def make_step(name: str):
    from pymc_kameleon import GPDelayedAcceptanceMH, KameleonMetropolis

    return {"gpda": GPDelayedAcceptanceMH, "kamh": KameleonMetropolis}[name]()


def run(model_name: str, step_name: str, tune: int, seed: int, draws: int, chains: int = 2) -> dict:
    import arviz as az
    import pymc as pm

    with MODELS[model_name][0]():
        step = make_step(step_name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(step=step, tune=tune, draws=draws, chains=chains, cores=1, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
    accept = idata.sample_stats["accepted"].mean("draw").values
    return {
        "ess": float(az.ess(idata).to_array().min()), "rhat": float(az.rhat(idata).to_array().max()),
        "accept": accept, "crippled": bool(accept.min() < 0.5 * accept.max()),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", nargs="+", default=["gpda", "kamh"], choices=["gpda", "kamh"])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(11)))
    parser.add_argument("--past", nargs="+", type=int, default=[0, 25, 75, 175, 375, 875])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--model", default="regression3", choices=list(MODELS))
    parser.add_argument("--chains", type=int, default=2)
    args = parser.parse_args(argv)
    print(environment_line())
    print(f"# {args.model}, {args.chains} chains x (tune + {args.draws}), cores=1, seeds {args.seeds}")
    print("| step | tune | median min ESS | lowest min ESS | max R-hat | lowest chain acceptance "
          "| seeds with a crippled chain |")
    print("|---|---|---|---|---|---|---|")
    for step_name in args.steps:
        for past in args.past:
            tune = window_end(MODELS[args.model][1]) + past
            runs = [run(args.model, step_name, tune, seed, args.draws, args.chains) for seed in args.seeds]
            ess = [r["ess"] for r in runs]
            crippled = [seed for seed, r in zip(args.seeds, runs) if r["crippled"]]
            print(f"| {step_name} | {tune} | {np.median(ess):.0f} | {min(ess):.0f} | "
                  f"{max(r['rhat'] for r in runs):.3f} | {min(r['accept'].min() for r in runs):.2f} | "
                  f"{len(crippled)} {crippled if crippled else ''} |", flush=True)


if __name__ == "__main__":
    main()
