"""What a biased coarse model costs MLDA: a conjugate model with closed-form posterior, coarse models
whose posterior is 0-3 posterior sds off, with and without the adaptive error model, against
KameleonMetropolis on the fine model alone.

The fine model is mu ~ N(0, 10^2 I_2), 20 observations y_i ~ N(mu, I); a coarse model has the same
prior and data, and a forward model off by a constant, y_i ~ N(mu + (shift sd, 0), I), so that its
posterior is ``shift`` posterior sds off in mu[0]. Reported per run (median over seeds,
worst in brackets): the fine level's acceptance rate, min bulk ESS, ESS per fine evaluation (tuning
included, the start's evaluation too), coarse evaluations per fine one, and the largest |error| of
the posterior mean over its MCSE. The coarse model here costs as much as the fine one; in practice
it is the cheap one, so the ESS per *fine* evaluation is the figure that matters.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/mlda_bias.py [--shifts 0 1 2 3] [--seeds 1 2 3]
        [--tune 1000] [--draws 5000] [--chains 4] [--quick]
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

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

from pymc_kameleon import MLDA, KameleonMetropolis  # noqa: E402
from pymc_kameleon.testing import mcse_of_mean  # noqa: E402

N_OBS = 20
DATA = np.random.default_rng(7).normal([0.5, -1.0], 1.0, size=(N_OBS, 2))
POST_VAR = 1.0 / (N_OBS + 1.0 / 100.0)
POST_MEAN = DATA.sum(0) * POST_VAR
POST_SD = POST_VAR**0.5


def conjugate_model(shift: float = 0.0):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10, shape=2)
        # The coarse forward model is off by a constant (what the adaptive error model corrects).
        pm.Normal("y", mu + np.array([shift * POST_SD, 0.0]), 1, observed=DATA)
    return model


def run(sampler: str, shift: float, seed: int, tune: int, draws: int, chains: int) -> dict:
    fine = conjugate_model()
    coarse = conjugate_model(shift)
    with fine:
        if sampler == "KAMH":
            step = KameleonMetropolis()
        else:
            step = MLDA(coarse_models=[coarse], adaptive_error_model=sampler == "MLDA-AEM")
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=1, step=step, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False, discard_tuned_samples=False)
    mu = idata.posterior["mu"].values
    stats, warm = idata.sample_stats, idata.warmup_sample_stats
    fine_evals = float(stats["cumulative_logp_evals"].values[:, -1].sum())
    ess = float(az.ess(idata, var_names=["mu"])["mu"].min())
    z = max(abs(mu[..., j].mean() - POST_MEAN[j]) / mcse_of_mean(mu[..., j]) for j in range(2))
    out = {"accept": float(stats["accepted"].values.mean()), "ess": ess, "ess_per_fine": ess / fine_evals,
           "z": float(z)}
    if sampler != "KAMH":
        coarse_evals = float(stats["level0_logp_evals"].values.sum() + warm["level0_logp_evals"].values.sum())
        out["coarse_per_fine"] = coarse_evals / fine_evals
    return out


def _cell(values, fmt, worst=min):
    return f"{fmt.format(float(np.median(values)))} ({fmt.format(worst(values))})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shifts", type=float, nargs="+", default=[0.0, 1.0, 2.0, 3.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=5000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: offsets 0 and 3, 1 seed, 2 x (100 + 100)")
    args = parser.parse_args(argv)
    if args.quick:
        args.shifts, args.seeds, args.tune, args.draws, args.chains = [0.0, 3.0], [1], 100, 100, 2
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    print(f"# {environment_line()}")
    print(f"# {args.chains} chains x ({args.tune} tune + {args.draws} draws), cores=1, seeds {args.seeds}; "
          "cells: median over seeds (worst)")
    print()
    print("| sampler | coarse posterior off by | fine acceptance | min ESS | ESS per fine evaluation | "
          "coarse evaluations per fine | max z (mean error / MCSE) |")
    print("|---|---|---|---|---|---|---|")
    rows = [("KAMH", None)] + [("MLDA", s) for s in args.shifts] + [("MLDA-AEM", s) for s in args.shifts]
    names = {"KAMH": "KameleonMetropolis (fine model only)", "MLDA": "MLDA",
             "MLDA-AEM": "MLDA(adaptive_error_model=True)"}
    for sampler, shift in rows:
        name = names[sampler]
        budget = (args.tune, args.draws, args.chains)
        results = [run(sampler, shift or 0.0, seed, *budget) for seed in args.seeds]

        def get(key, results=results):
            return [r[key] for r in results]

        coarse = _cell(get("coarse_per_fine"), "{:.1f}", max) if sampler != "KAMH" else "-"
        off = f"{shift:g} sd" if shift is not None else "-"
        print(f"| {name} | {off} | {_cell(get('accept'), '{:.2f}')} | {_cell(get('ess'), '{:.0f}')} | "
              f"{_cell(get('ess_per_fine'), '{:.3f}')} | {coarse} | {_cell(get('z'), '{:.1f}', max)} |",
              flush=True)


if __name__ == "__main__":
    main()
