"""Does the end-of-tuning noise check warn where a pseudo-marginal chain goes wrong, and only there?

The latent Gaussian model of ``pymc_kameleon.testing`` (exact posterior known) with its importance-
sampling likelihood estimate at N samples per group: fewer samples, noisier estimates. Per N, seeds
and ``KameleonMetropolis()`` (4 chains x (tune + draws), ``cores=1``): the log-estimate sd at the
posterior mean (``log_estimate_spread``, 200 repeats: what the check estimates from 30 at a chain's
state), the runs where the step's noise warning spoke (sd above 3), the smallest bulk ESS and the
largest R-hat of theta, and the largest error of a posterior mean and of a posterior sd, in exact
posterior sds.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/pseudo_marginal_noise_check.py [--n 1 2 4 8 20]
        [--seeds 1 2 3] [--tune 2000 --draws 3000]
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

NOISE_WARNING = "fresh likelihood estimates"


def run(n_importance: int, seed: int, tune: int, draws: int) -> dict:
    import arviz as az
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis
    from pymc_kameleon.testing import LATENT_POST_MEAN, LATENT_POST_VAR, latent_gaussian_model

    with latent_gaussian_model(n_importance=n_importance), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = pm.sample(step=KameleonMetropolis(), tune=tune, draws=draws, chains=4, cores=1,
                          random_seed=seed, progressbar=False, compute_convergence_checks=False)
    theta = idata.posterior["theta"].values  # (chain, draw, 2)
    sd = np.sqrt(LATENT_POST_VAR)
    return {
        "warned": any(NOISE_WARNING in str(w.message) for w in caught),
        "ess": float(az.ess(idata, var_names=["theta"])["theta"].min()),
        "rhat": float(az.rhat(idata, var_names=["theta"])["theta"].max()),
        "mean_err": float(np.max(np.abs(theta.mean(axis=(0, 1)) - LATENT_POST_MEAN)) / sd),
        "sd_err": float(np.max(np.abs(np.log(theta.std(axis=(0, 1)) / sd)))),
    }


def spread(n_importance: int) -> float:
    """The log-estimate sd at the posterior mean, 200 repeats."""
    from pymc_kameleon import log_estimate_spread
    from pymc_kameleon.testing import LATENT_POST_MEAN, latent_gaussian_log_estimator

    return log_estimate_spread(latent_gaussian_log_estimator(n_importance), LATENT_POST_MEAN, n_repeats=200,
                               rng=0)["sd"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 2, 4, 8, 20],
                        help="importance samples per group")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=3000)
    args = parser.parse_args(argv)
    print(f"# {environment_line()}")
    print(f"# KameleonMetropolis(), 4 chains x ({args.tune} + {args.draws}), seeds {args.seeds}; "
          "median over seeds (worst seed)")
    print("\n| N | log-estimate sd | runs warned | min ESS | max R-hat | mean err (sd) | log sd err |")
    print("|---|---|---|---|---|---|---|")
    for n in args.n:
        rows = [run(n, seed, args.tune, args.draws) for seed in args.seeds]

        def cell(key, fmt, worst=max, rows=rows):
            values = [r[key] for r in rows]
            return f"{format(np.median(values), fmt)} ({format(worst(values), fmt)})"

        warned = sum(r["warned"] for r in rows)
        print(f"| {n} | {spread(n):.2f} | {warned} of {len(rows)} | {cell('ess', '.0f', min)} | "
              f"{cell('rhat', '.3f')} | {cell('mean_err', '.2f')} | {cell('sd_err', '.2f')} |", flush=True)


if __name__ == "__main__":
    main()
