"""Standard against correlated pseudo-marginal on a random-effects model with an exact posterior (issue 15).

The model (the random-effects example of Deligiannidis, Doucet and Pitt 2018, with two parameters):

    x_t ~ N(mu, sigma^2),  y_t | x_t ~ N(x_t, 1),  t = 1..T;   mu ~ N(0, 10^2),  sigma ~ HalfNormal(2).

Marginally y_t ~ N(mu, sigma^2 + 1), so the posterior of (mu, sigma) is computed exactly on a grid.
The likelihood is estimated by importance sampling from the prior of each x_t, N samples per
observation: L_hat = prod_t (1/N) sum_i N(y_t; mu + sigma u_ti, 1), with u ~ N(0, I) of shape
(N, T). Standard pseudo-marginal draws u afresh at every proposal; correlated pseudo-marginal
moves it by Crank-Nicolson with correlation rho. Both run KameleonMetropolis with defaults,
started at the exact posterior mean: the comparison is of mixing at stationarity (from PyMC's
default start, sigma = 1.6, standard pseudo-marginal chains can stick for the whole run on one
lucky estimate, which would flatter the correlated method further).

Per configuration and seed it reports the largest standardised error of the posterior means and
the largest |log sd ratio| against the exact posterior, min ESS (ArviZ, bulk), max R-hat, ESS per
million importance samples (estimator calls x N x T, all of tuning included) and ESS per second,
and, at the posterior mean, the sd of log L_hat and the correlation between the log-estimates at
u and at its Crank-Nicolson move. The verdict compares the best configuration of each method by
median ESS per importance sample over the seeds.

    python benchmarks/correlated_pseudo_marginal.py                # the full run (RESULTS.md)
    python benchmarks/correlated_pseudo_marginal.py --quick        # smoke test
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
from scipy.special import logsumexp  # noqa: E402
from scipy.stats import halfnorm, norm  # noqa: E402

from pymc_kameleon import KameleonMetropolis, PseudoMarginalPotential  # noqa: E402
from pymc_kameleon.core.proposals import crank_nicolson_move

PRIOR_MU_SD, PRIOR_SIGMA_SD = 10.0, 2.0
TRUE_MU, TRUE_SIGMA = 0.5, 1.0


def make_data(n_obs: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return TRUE_MU + TRUE_SIGMA * rng.standard_normal(n_obs) + rng.standard_normal(n_obs)


def exact_posterior(y: np.ndarray, n_grid: int = 801) -> dict:
    """Posterior means and sds of mu and sigma, by quadrature on a (mu, log sigma) grid."""
    s2 = y.var() - 1
    centre_mu, half_mu = y.mean(), 8 * math.sqrt((max(s2, 0.1) + 1) / y.size)
    mu = np.linspace(centre_mu - half_mu, centre_mu + half_mu, n_grid)
    log_sigma = np.linspace(math.log(0.05), math.log(5.0), n_grid)
    M, LS = np.meshgrid(mu, log_sigma, indexing="ij")
    S = np.exp(LS)
    var = S**2 + 1
    loglik = -0.5 * (y.size * np.log(2 * math.pi * var) + ((y[:, None, None] - M) ** 2).sum(0) / var)
    logp = loglik + norm.logpdf(M, 0, PRIOR_MU_SD) + halfnorm.logpdf(S, scale=PRIOR_SIGMA_SD) + LS
    w = np.exp(logp - logsumexp(logp))
    out = {}
    for name, values in (("mu", M), ("sigma", S)):
        mean = float((w * values).sum())
        out[name] = (mean, math.sqrt(float((w * (values - mean) ** 2).sum())))
    return out


def log_estimate(y, mu, sigma, u):
    """log prod_t (1/N) sum_i N(y_t; mu + sigma u_ti, 1), u of shape (N, T)."""
    log_w = -0.5 * (y - mu - sigma * u) ** 2  # log N(y; x, 1) without its constant, added below
    constant = y.size * (math.log(u.shape[0]) + 0.5 * math.log(2 * math.pi))
    return float(np.sum(logsumexp(log_w, axis=0)) - constant)


def build_model(y, n_samples: int, correlation: float | None):
    """The model with a standard (correlation None) or correlated estimator of N samples per observation."""
    shape = (n_samples, y.size)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, PRIOR_MU_SD)
        sigma = pm.HalfNormal("sigma", PRIOR_SIGMA_SD)
        if correlation is None:
            PseudoMarginalPotential(
                "lik", lambda m, s, rng: log_estimate(y, m, s, rng.standard_normal(shape)), inputs=[mu, sigma]
            )
        else:
            PseudoMarginalPotential(
                "lik",
                lambda m, s, u: log_estimate(y, m, s, u),
                inputs=[mu, sigma],
                auxiliary_shape=shape,
                correlation=correlation,
            )
    return model


def estimator_noise(y, exact, n_samples, correlation, repeats=200, seed=0):
    """sd of log L_hat at the posterior mean, and corr(log L_hat(u), log L_hat(u')) for u' a CN move."""
    rng = np.random.default_rng(seed)
    mu, sigma = exact["mu"][0], exact["sigma"][0]
    pairs = []
    for _ in range(repeats):
        u = rng.standard_normal((n_samples, y.size))
        moved = crank_nicolson_move(u, correlation or 0.0, rng)
        pairs.append((log_estimate(y, mu, sigma, u), log_estimate(y, mu, sigma, moved)))
    pairs = np.array(pairs)
    return float(pairs[:, 0].std(ddof=1)), float(np.corrcoef(pairs.T)[0, 1])


def run(y, exact, n_samples, correlation, seed, tune, draws, chains, cores):
    model = build_model(y, n_samples, correlation)
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            step=KameleonMetropolis(),
            tune=tune,
            draws=draws,
            chains=chains,
            cores=cores,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
            discard_tuned_samples=False,
            initvals={"mu": exact["mu"][0], "sigma": exact["sigma"][0]},
        )
    seconds = time.perf_counter() - start
    groups = (idata.warmup_sample_stats, idata.sample_stats)
    calls = sum(int(stats["estimator_calls"].sum()) for stats in groups)
    post = idata.posterior
    ess = az.ess(idata, var_names=["mu", "sigma"])
    rhat = az.rhat(idata, var_names=["mu", "sigma"])
    min_ess = min(float(ess[v]) for v in ("mu", "sigma"))
    mean_err = max(abs(float(post[v].mean()) - exact[v][0]) / exact[v][1] for v in ("mu", "sigma"))
    log_sd = max(abs(math.log(float(post[v].std()) / exact[v][1])) for v in ("mu", "sigma"))
    samples = calls * n_samples * y.size
    return {
        "mean err": mean_err,
        "log sd err": log_sd,
        "min ESS": min_ess,
        "max R-hat": max(float(rhat[v]) for v in ("mu", "sigma")),
        "accept": float(post.sizes["draw"] and idata.sample_stats["accepted"].mean()),
        "ESS/1e6 samples": min_ess / samples * 1e6,
        "ESS/s": min_ess / seconds,
        "seconds": seconds,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n-obs", type=int, default=500, help="T, the number of observations")
    parser.add_argument("--standard", type=int, nargs="*", default=[64, 128, 256, 512], help="N, standard")
    parser.add_argument("--correlated", type=int, nargs="*", default=[1, 2, 4, 8], help="N, correlated")
    parser.add_argument("--correlations", type=float, nargs="*", default=[0.99, 0.999])
    parser.add_argument("--seeds", type=int, nargs="*", default=[1, 2, 3])
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=5000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny budget: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.n_obs, args.standard, args.correlated, args.correlations = 50, [8], [2], [0.99]
        args.seeds, args.tune, args.draws, args.chains, args.cores = [1], 200, 200, 2, 1

    y = make_data(args.n_obs)
    exact = exact_posterior(y)
    print(f"# {environment_line()}")
    budget = f"{args.chains} chains x ({args.tune} tune + {args.draws} draws)"
    print(f"# T = {args.n_obs} observations; budget {budget}")
    print(
        f"# exact posterior: mu {exact['mu'][0]:.4f} (sd {exact['mu'][1]:.4f}), "
        f"sigma {exact['sigma'][0]:.4f} (sd {exact['sigma'][1]:.4f})\n"
    )
    configs = [("standard", n, None) for n in args.standard]
    configs += [("correlated", n, rho) for rho in args.correlations for n in args.correlated]
    columns = ["mean err", "log sd err", "min ESS", "max R-hat", "accept", "ESS/1e6 samples", "ESS/s"]
    print("| method | N | rho | sd log L_hat | corr(log L_hat, moved) | " + " | ".join(columns) + " |")
    print("|" + "---|" * (5 + len(columns)))
    rows = {}
    for method, n, rho in configs:
        sd, corr = estimator_noise(y, exact, n, rho)
        per_seed = [
            run(y, exact, n, rho, seed, args.tune, args.draws, args.chains, args.cores) for seed in args.seeds
        ]
        median = {c: float(np.median([r[c] for r in per_seed])) for c in per_seed[0]}
        rows[(method, n, rho)] = {"median": median, "per_seed": per_seed, "sd": sd, "corr": corr}
        cells = [f"{median[c]:.3g}" for c in columns]
        label = f"| {method} | {n} | {'-' if rho is None else rho} | {sd:.2f} | {corr:.3f} | "
        print(label + " | ".join(cells) + " |", flush=True)
    print(f"\nmedians over seeds {args.seeds}; per seed, ESS/1e6 samples:")
    for (method, n, rho), row in rows.items():
        values = ", ".join(f"{r['ESS/1e6 samples']:.3g}" for r in row["per_seed"])
        print(f"- {method} N={n}{'' if rho is None else f' rho={rho}'}: {values}")
    best = {}
    for method in ("standard", "correlated"):
        candidates = {k: v for k, v in rows.items() if k[0] == method}
        if candidates:
            best[method] = max(candidates.items(), key=lambda kv: kv[1]["median"]["ESS/1e6 samples"])
    if len(best) == 2:
        (ks, s), (kc, c) = best["standard"], best["correlated"]
        ratio = c["median"]["ESS/1e6 samples"] / s["median"]["ESS/1e6 samples"]
        print(
            f"\nbest standard: N={ks[1]} ({s['median']['ESS/1e6 samples']:.3g} ESS per 1e6 samples); "
            f"best correlated: N={kc[1]}, rho={kc[2]} ({c['median']['ESS/1e6 samples']:.3g}): "
            f"{ratio:.1f}x (goal >= 5x): {'MET' if ratio >= 5 else 'NOT MET'}"
        )
    return rows


if __name__ == "__main__":
    main()
