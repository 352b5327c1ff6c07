"""GP-DA-MH at the tuning length PyMC 6 gives it without ``tune``, at PyMC 5's default, and one window more.

``GPDelayedAcceptanceMH.default_tune_steps`` is what ``pm.sample(tune=None)`` uses on PyMC 6: the minimum, a
coordinate scan and three doubling windows (``required_tune_steps()``, 25 d + 750). Its independence
component switches on only on a window's verdict; until decision record 0065 the third window's rested
on 20 probes per shape, too few, so the default was one window more (``required_tune_steps(4)``, 25 d +
1550) and at PyMC 5's default ``tune=1000`` the component stayed off. All lengths are passed explicitly,
so the script runs on PyMC 5 too.

Models (ordinary ones a user would start with): a 2-d normal mean and sd (the GP-DA guide's first
example), a 5-d logistic regression, a 10-d linear regression with correlated predictors. Per seed:
the smallest bulk ESS, the largest R-hat, the share of draw iterations with an exact evaluation, the
share of draws the independence component proposed, the exact evaluations of the run (tuning and the
start search included, ``cumulative_logp_evals``) and the ESS per exact evaluation.

    OPENBLAS_NUM_THREADS=1 python benchmarks/gpda_default_tune.py [--models normal2 logistic5 regression10]
        [--seeds 1 2 3] [--chains 4] [--draws 1000] [--lengths "minimum (3 windows)" ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402


def normal2():
    import pymc as pm

    y = np.random.default_rng(0).normal(1.0, 2.0, size=50)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        sigma = pm.HalfNormal("sigma", 5)
        pm.Normal("y", mu, sigma, observed=y)
    return model


def logistic5():
    import pymc as pm

    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 4))
    p = 1 / (1 + np.exp(-(0.5 + X @ np.array([1.0, -0.5, 0.25, 2.0]))))
    y = rng.uniform(size=200) < p
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5, shape=4)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(X, b), observed=y)
    return model


def regression10():
    import pymc as pm

    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 10)) @ np.linalg.cholesky(0.5 * np.eye(10) + 0.5).T
    y = X @ rng.normal(size=10) + rng.normal(size=100)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=10)
        pm.Normal("y", pm.math.dot(X, b), 1.0, observed=y)
    return model


MODELS = {"normal2": normal2, "logistic5": logistic5, "regression10": regression10}
#: Tuning lengths: a number of windows (``required_tune_steps``), or ``tune`` itself (PyMC 5's default).
LENGTHS = {"minimum (3 windows)": ("windows", 3), "one window more (4)": ("windows", 4),
           "PyMC 5's default": ("steps", 1000)}


def run(model_name: str, length: tuple[str, int], seed: int, chains: int, draws: int) -> dict:
    import arviz as az
    import pymc as pm

    from pymc_kameleon import GPDelayedAcceptanceMH

    with MODELS[model_name]():
        step = GPDelayedAcceptanceMH()
        kind, value = length
        tune = step._chain.kernel.adaptation.required_tune_steps(value) if kind == "windows" else value
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(step=step, tune=tune, draws=draws, chains=chains, cores=1, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
        wall = time.perf_counter() - start
    scalars = [
        column for values in (np.asarray(v.values) for v in idata.posterior.data_vars.values())
        for column in np.moveaxis(values.reshape(*values.shape[:2], -1), -1, 0)
    ]  # each scalar's (chain, draw) array
    ess = min(float(az.ess(x, method="bulk")) for x in scalars)
    stats = idata.sample_stats
    evals = float(stats["cumulative_logp_evals"].isel(draw=-1).sum())
    return {
        "tune": tune, "ess": ess, "rhat": max(float(az.rhat(x)) for x in scalars),
        "exact": float(stats["exact_eval"].mean()), "independence": float(stats["independence"].mean()),
        "evals": evals, "ess_per_eval": ess / evals, "wall": wall,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--lengths", nargs="+", default=list(LENGTHS)[:2], choices=list(LENGTHS))
    args = parser.parse_args(argv)
    print(environment_line())
    print(f"# {args.chains} chains x (tune + {args.draws}), cores=1, seeds {args.seeds}")
    print("| model | tuning | tune | seed | min ESS | max R-hat | exact evals / draw | independence share "
          "| exact evals | ESS per exact eval | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for model_name in args.models:
        for label in args.lengths:
            for seed in args.seeds:
                r = run(model_name, LENGTHS[label], seed, args.chains, args.draws)
                rows.append({"model": model_name, "length": label, "seed": seed, **r})
                print(f"| {model_name} | {label} | {r['tune']} | {seed} | {r['ess']:.0f} | {r['rhat']:.3f} | "
                      f"{r['exact']:.2f} | {r['independence']:.2f} | {r['evals']:.0f} | "
                      f"{r['ess_per_eval']:.3f} | {r['wall']:.1f} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
