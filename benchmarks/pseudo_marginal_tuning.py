"""Pseudo-marginal chains frozen in tuning: how often, and what tuning's refresh of a sticking estimate does.

A new user's model (Poisson-lognormal random effects, 12 counts): y_t ~ Poisson(exp(z_t)),
z_t ~ N(mu, sigma^2), mu ~ N(0, 2^2), sigma ~ HalfNormal(1); the likelihood is estimated by
importance sampling from the prior of z, N samples per count (N = 20: log L_hat has sd about 3 at
PyMC's start, about 1 at the posterior). KameleonMetropolis (or ``--step GPDelayedAcceptanceMH``) with
defaults, 4 chains x (tune + draws)
from PyMC's start, each seed in turn. ``--refresh R`` sets how many rejections in a row during tuning
make the step redraw the estimate at the chain's state (``steps.base.TUNING_REFRESH_REJECTIONS``;
0: never, the behaviour before decision 0051).

Per setting it reports frozen chains (draws' sd of mu below 1e-8), runs with max R-hat above 1.01,
the median max R-hat, runs in which some chain's step warned, the largest error of the posterior
means in posterior sds (against quadrature) over runs without a frozen chain, and estimator calls per
tuning step (the refresh's cost).

    python benchmarks/pseudo_marginal_tuning.py                                    # RESULTS.md
    python benchmarks/pseudo_marginal_tuning.py --samples 5 100 --seeds 10
    python benchmarks/pseudo_marginal_tuning.py --quick                            # smoke test
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread

one_blas_thread()  # before NumPy is imported

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
from scipy.special import gammaln, logsumexp  # noqa: E402
from scipy.stats import halfnorm, norm  # noqa: E402

import pymc_kameleon.steps.base as step_base  # noqa: E402
from pymc_kameleon import GPDelayedAcceptanceMH, KameleonMetropolis, PseudoMarginalPotential  # noqa: E402

COUNTS = np.array([3, 0, 7, 2, 12, 1, 4, 0, 5, 9, 2, 6])
FROZEN_SD = 1e-8


def log_estimator(n_samples: int):
    """log L_hat: importance sampling of each count's marginal from the prior of its z."""

    def estimate(mu, sigma, rng):
        z = mu + sigma * rng.standard_normal((n_samples, COUNTS.size))
        log_w = COUNTS * z - np.exp(z) - gammaln(COUNTS + 1)
        return float(np.sum(logsumexp(log_w, axis=0) - math.log(n_samples)))

    return estimate


def exact_posterior(n_grid: int = 301) -> dict:
    """Posterior means and sds of mu and sigma by quadrature (Gauss-Hermite in z, a grid in mu, sigma)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    mu = np.linspace(-2.0, 4.0, n_grid)[:, None, None, None]
    sigma = np.linspace(1e-3, 4.0, n_grid)[None, :, None, None]
    z = mu + sigma * nodes[None, None, :, None]
    log_w = COUNTS * z - np.exp(z) - gammaln(COUNTS + 1) + np.log(weights)[None, None, :, None]
    loglik = np.sum(logsumexp(log_w, axis=2) - 0.5 * math.log(2 * math.pi), axis=-1)
    log_post = loglik + norm.logpdf(mu[..., 0, 0], 0, 2) + halfnorm.logpdf(sigma[..., 0, 0], scale=1)
    p = np.exp(log_post - log_post.max())
    p /= p.sum()
    out = {}
    for name, grid in (("mu", mu[..., 0, 0]), ("sigma", sigma[..., 0, 0])):
        mean = float(np.sum(p * grid))
        out[name] = (mean, math.sqrt(float(np.sum(p * (grid - mean) ** 2))))
    return out


STEPS = {"KameleonMetropolis": KameleonMetropolis, "GPDelayedAcceptanceMH": GPDelayedAcceptanceMH}


def run_setting(n_samples: int, refresh: int, seeds, tune: int, draws: int, exact: dict, step) -> str:
    step_base.TUNING_REFRESH_REJECTIONS = refresh if refresh > 0 else 10**12
    frozen, rhats, warned, errors, calls = 0, [], 0, [], []
    start = time.perf_counter()
    with pm.Model():
        mu = pm.Normal("mu", 0, 2)
        sigma = pm.HalfNormal("sigma", 1)
        PseudoMarginalPotential("lik", log_estimator(n_samples), inputs=[mu, sigma])
        for seed in seeds:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                idata = pm.sample(
                    step=step(), chains=4, tune=tune, draws=draws, random_seed=seed,
                    progressbar=False, compute_convergence_checks=False, discard_tuned_samples=False,
                )
            post = idata.posterior
            n_frozen = int(np.sum(post["mu"].values.std(axis=1) < FROZEN_SD))
            frozen += n_frozen
            rhat = az.rhat(post)
            rhats.append(max(float(rhat["mu"]), float(rhat["sigma"])))
            warned += any(step.__name__ in str(w.message) for w in caught)
            if n_frozen == 0:
                errors.append(max(abs(float(post[v].mean()) - m) / s for v, (m, s) in exact.items()))
            calls.append(float(idata.warmup_sample_stats["estimator_calls"].values.mean()))
    rhats = np.array(rhats)
    worst = f"{max(errors):.2f}" if errors else "-"
    return (
        f"| {n_samples} | {refresh if refresh > 0 else 'never'} | {frozen} of {4 * len(seeds)} | "
        f"{int(np.sum(rhats > 1.01))} of {len(seeds)} | {np.median(rhats):.3f} | {warned} | {worst} | "
        f"{np.mean(calls):.3f} | {time.perf_counter() - start:.0f} |"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[20], help="importance samples per count")
    parser.add_argument("--refresh", type=int, nargs="+", default=[0, 5, 10],
                        help="rejections in a row that refresh the estimate in tuning (0: never)")
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--seed-base", type=int, default=1)
    parser.add_argument("--tune", type=int, default=3000)
    parser.add_argument("--draws", type=int, default=3000)
    parser.add_argument("--step", choices=sorted(STEPS), default="KameleonMetropolis")
    parser.add_argument("--quick", action="store_true", help="2 seeds, 4 x (600 + 200): a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.tune, args.draws, args.refresh = 2, 600, 200, [0, 5]
    print(environment_line())
    print(f"{args.step}(), 4 chains x ({args.tune} tune + {args.draws} draws), seeds {args.seed_base}-"
          f"{args.seed_base + args.seeds - 1}")
    exact = exact_posterior()
    print("exact posterior (mean, sd): " + ", ".join(f"{k} {m:.3f} ({s:.3f})" for k, (m, s) in exact.items()))
    print("| N | refresh after | frozen chains | runs R-hat > 1.01 | median max R-hat | runs warned | "
          "worst mean error (sd), no frozen chain | estimator calls per tuning step | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    seeds = range(args.seed_base, args.seed_base + args.seeds)
    for n_samples in args.samples:
        for refresh in args.refresh:
            print(run_setting(n_samples, refresh, seeds, args.tune, args.draws, exact, STEPS[args.step]),
                  flush=True)


if __name__ == "__main__":
    main()
