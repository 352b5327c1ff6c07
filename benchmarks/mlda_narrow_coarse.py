"""A coarse posterior narrower than the fine one: MLDA's draws under-sample the fine posterior's tails while
R-hat and ESS look fine, and no warning says so (an open problem, recorded in benchmarks/RESULTS.md).

The fine model is a normal mean, mu ~ N(0, 10^2), 20 observations y_i ~ N(mu, 1); a coarse model has the
same prior and data with observation sd ``r``, so its posterior sd is about r times the fine one's (the
importance weights pi_fine / pi_coarse then have a tail of Pareto shape 1 - r^2, heavy above r = 0.71).
Reported per r and seed: the posterior sd and the 99% quantile of |mu - posterior mean| over their exact
values, the fine level's acceptance, R-hat, bulk ESS, and MLDA's own warnings (their count, and how many
of them say that the coarse posterior is narrower: one per chain at most).

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/mlda_narrow_coarse.py [--ratios 0.5 0.6 0.66 0.8 1.25]
        [--seeds 1 2 3] [--tune 1000] [--draws 3000] [--chains 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
from scipy.stats import norm  # noqa: E402

from pymc_kameleon import MLDA  # noqa: E402

# The start of MLDA's warning of a coarse posterior narrower than the fine one (steps/multilevel_spread.py).
NARROW_SAID = "MLDA: the coarsest model's posterior is narrower than the fine one's"
N_OBS = 20
DATA = np.random.default_rng(0).normal(1.0, 1.0, size=N_OBS)
POST_SD = (N_OBS + 1.0 / 100.0) ** -0.5
POST_MEAN = DATA.sum() * POST_SD**2


def model(obs_sd: float) -> pm.Model:
    with pm.Model() as m:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, obs_sd, observed=DATA)
    return m


def run(ratio: float, seed: int, tune: int, draws: int, chains: int) -> dict:
    coarse = model(ratio)
    with model(1.0), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = MLDA(coarse_models=[coarse], adaptive_error_model=False)  # as measured (off by default then)
        idata = pm.sample(step=step, tune=tune, draws=draws, chains=chains, cores=1,
                          random_seed=seed, progressbar=False, compute_convergence_checks=False)
    mu = idata.posterior["mu"].values
    said = [w for w in caught if str(w.message).startswith("MLDA")]
    narrow = [w for w in said if str(w.message).startswith(NARROW_SAID)]
    q99 = np.quantile(np.abs(mu - POST_MEAN), 0.99) / (norm.ppf(0.995) * POST_SD)
    return {
        "sd": float(mu.std()) / POST_SD, "q99": float(q99),
        "accept": float(idata.sample_stats["accepted"].mean()),
        "rhat": float(az.rhat(idata)["mu"]), "ess": float(az.ess(idata)["mu"]), "warned": len(said),
        "narrow": len(narrow),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ratios", nargs="+", type=float, default=[0.5, 0.6, 0.66, 0.8, 1.25])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=3000)
    parser.add_argument("--chains", type=int, default=2)
    args = parser.parse_args(argv)
    print(environment_line())
    print(f"# normal mean, coarse observation sd r, {args.chains} chains x ({args.tune} + {args.draws}), "
          f"seeds {args.seeds}")
    print("| r | 1 / r^2 | seed | sd / exact | 99% quantile / exact | acceptance | R-hat | min ESS | "
          "MLDA warnings | of them: narrower coarse posterior |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for ratio in args.ratios:
        for seed in args.seeds:
            r = run(ratio, seed, args.tune, args.draws, args.chains)
            rows.append({"ratio": ratio, "seed": seed, **r})
            print(f"| {ratio} | {ratio**-2:.2f} | {seed} | {r['sd']:.3f} | {r['q99']:.3f} | "
                  f"{r['accept']:.2f} | {r['rhat']:.3f} | {r['ess']:.0f} | {r['warned']} | {r['narrow']} |",
                  flush=True)
    return rows


if __name__ == "__main__":
    main()
