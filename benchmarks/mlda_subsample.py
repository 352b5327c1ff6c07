"""MLDA with a subsample of the data as its coarse model (issue 46, problem (c)), against single-level steps.

The fine model is a linear regression on all N observations with a known noise sd (so the posterior is
Gaussian and exact: the conjugate update of the N(0, 10² I) prior); the coarse model is the same
regression on a random fraction of the rows, its log-likelihood multiplied by 1/fraction so that its
posterior has about the fine one's width (``--unscaled`` leaves it as it is). Both likelihoods are
black-box Ops (no gradient), as an expensive likelihood would be. Every sampler runs 2 chains x (2000 +
2000), ``cores=1``. Reported (median over seeds, worst in brackets): largest |mean error| in exact
posterior sds, min bulk ESS, max R-hat, the share of subchain ends the fine level accepted (MLDA), fine
evaluations per iteration and ESS per fine evaluation.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/mlda_subsample.py [--seeds 1 2 3]
        [--fractions 0.1 0.5] [--unscaled] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import (  # noqa: E402
    environment_line,
    fine_and_coarse_evaluations,
    one_blas_thread,
    timed_sample,
)

one_blas_thread()  # before NumPy is imported

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from pytensor.graph.basic import Apply  # noqa: E402
from pytensor.graph.op import Op  # noqa: E402

from pymc_kameleon import MLDA, KameleonMetropolis  # noqa: E402

DIM, NOISE_SD, PRIOR_SD = 5, 1.0, 10.0


class GaussianLogLikelihoodOp(Op):
    """Black box: beta (d,) -> weight * sum of N(y_i; x_i beta, sd) log densities; no gradient."""

    __props__ = ("key",)

    def __init__(self, X, y, weight):
        self.X, self.y, self.weight = X, y, float(weight)
        self.key = (X.shape, float(weight), hash(y.tobytes()))

    def make_node(self, beta):
        return Apply(self, [pt.as_tensor_variable(beta, dtype="float64")], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        r = self.y - self.X @ inputs[0]
        outputs[0][0] = np.asarray(
            self.weight * (-0.5 * r @ r / NOISE_SD**2 - r.size * np.log(NOISE_SD * np.sqrt(2 * np.pi)))
        )


def data(n: int, seed: int = 20261128):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, DIM))
    beta = rng.standard_normal(DIM)
    return X, X @ beta + rng.normal(0.0, NOISE_SD, n)


def exact_posterior(X, y):
    """Mean and sds of the conjugate posterior (prior N(0, PRIOR_SD² I), known noise sd)."""
    precision = X.T @ X / NOISE_SD**2 + np.eye(DIM) / PRIOR_SD**2
    cov = np.linalg.inv(precision)
    return cov @ X.T @ y / NOISE_SD**2, np.sqrt(np.diag(cov))


def model(X, y, weight=1.0):
    with pm.Model() as m:
        beta = pm.Normal("beta", 0.0, PRIOR_SD, shape=DIM)
        pm.Potential("likelihood", GaussianLogLikelihoodOp(X, y, weight)(beta))
    return m


def run(name, seed, X, y, fraction, scaled, exact, tune, draws, chains=2) -> dict:
    fine = model(X, y)
    if name == "MLDA":  # built outside the fine model's `with` (a model inside it is a sub-model)
        rows = np.random.default_rng(seed).choice(len(y), size=max(DIM + 1, int(fraction * len(y))),
                                                  replace=False)
        coarse = model(X[rows], y[rows], 1.0 / fraction if scaled else 1.0)
    with fine:
        if name == "MLDA":
            step = MLDA([coarse], subsampling_rates=5)
        else:
            step = {"KAMH": KameleonMetropolis, "DEMetropolisZ": pm.DEMetropolisZ}[name]()
    idata, _ = timed_sample(fine, step, tune=tune, draws=draws, chains=chains, seed=seed)
    post = idata.posterior["beta"].values
    iterations = chains * (tune + draws)
    fine_evals, _ = fine_and_coarse_evaluations(idata, name, iterations)
    ess = float(az.ess(idata)["beta"].values.min())
    accept = float(idata.sample_stats["accepted"].values.mean()) if name == "MLDA" else float("nan")
    return {
        "err": float(np.max(np.abs(post.reshape(-1, DIM).mean(0) - exact[0]) / exact[1])),
        "ess": ess, "rhat": float(az.rhat(idata)["beta"].values.max()), "accept": accept,
        "fine_per_iter": fine_evals / iterations, "ess_per_fine": ess / fine_evals,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.5])
    parser.add_argument("--n", type=int, default=2000, help="observations")
    parser.add_argument("--unscaled", action="store_true", help="leave the subsample's likelihood unscaled")
    parser.add_argument("--quick", action="store_true", help="smoke test: small budget, one seed")
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    tune, draws = (100, 100) if args.quick else (2000, 2000)
    seeds = args.seeds[:1] if args.quick else args.seeds
    X, y = data(args.n)
    exact = exact_posterior(X, y)
    scaled = not args.unscaled
    print(f"# {environment_line()}")
    print(f"# linear regression, N = {args.n}, d = {DIM}; coarse: a random subsample, likelihood "
          f"{'scaled by 1/fraction' if scaled else 'unscaled'}; 2 chains x ({tune} + {draws}); "
          f"seeds {seeds}\n")
    variants = [(f"MLDA, {f:.0%} subsample", "MLDA", f) for f in args.fractions]
    variants += [("KAMH (all data)", "KAMH", None), ("DEMetropolisZ (all data)", "DEMetropolisZ", None)]
    print("| sampler | mean err (sd) | min ESS | max R-hat | fine acceptance | fine evals / iter "
          "| ESS per fine eval |")
    print("|---|---|---|---|---|---|---|")
    for label, name, fraction in variants:
        runs = [run(name, s, X, y, fraction, scaled, exact, tune, draws) for s in seeds]

        def cell(key, fmt, worst, runs=runs):
            values = [r[key] for r in runs]
            return f"{fmt.format(np.median(values))} ({fmt.format(worst(values))})"

        accept = cell("accept", "{:.2f}", min) if name == "MLDA" else "–"
        print(f"| {label} | {cell('err', '{:.2f}', max)} | {cell('ess', '{:.0f}', min)} | "
              f"{cell('rhat', '{:.3f}', max)} | {accept} | {cell('fine_per_iter', '{:.2f}', max)} | "
              f"{cell('ess_per_fine', '{:.4f}', min)} |", flush=True)


if __name__ == "__main__":
    main()
