"""GP delayed acceptance against KameleonMetropolis on a pseudo-marginal likelihood, by the estimates' noise.

A new user's latent model: y_j | z_j ~ N(z_j, 1), z_j ~ N(mu, tau^2), j = 1..12, with mu ~ N(0, 5) and
tau ~ HalfNormal(2); the likelihood of (mu, tau) is estimated by importance sampling from the prior of
z with ``--samples`` draws per group (3: a log-estimate sd of about 1.1 at the mode; 10: about 0.55;
30: about 0.33). The reference is NUTS on the marginal model y_j ~ N(mu, sqrt(1 + tau^2)), 2 x 20 000
draws. Per seed, 2 chains x (3000 + ``--draws``): the error of each mean in MCSEs (z), its sd over
the reference sd, the bulk ESS, the estimator calls (tuning's included) and the smaller ESS per
1000 of them, and for GP-DA the GP's fitted noise sd at the end of the run.

    OPENBLAS_NUM_THREADS=1 python benchmarks/gpda_noisy_estimates.py --samples 3 --seeds 1 2 3 4 5 6 7 8
    OPENBLAS_NUM_THREADS=1 python benchmarks/gpda_noisy_estimates.py --samples 3 --sampler KAMH
    OPENBLAS_NUM_THREADS=1 python benchmarks/gpda_noisy_estimates.py --quick
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

import numpy as np  # noqa: E402

J = 12
_rng = np.random.default_rng(42)
Y = _rng.normal(1.0 + 0.8 * _rng.standard_normal(J), 1.0)


def make_estimator(n_samples: int):
    """log of the importance-sampling estimate of prod_j p(y_j | mu, tau), z_j from its prior."""

    def log_estimate(mu, tau, rng):
        z = float(mu) + float(tau) * rng.standard_normal((n_samples, J))
        log_w = -0.5 * (Y - z) ** 2 - 0.5 * np.log(2 * np.pi)
        top = log_w.max(axis=0)
        return float(np.sum(top + np.log(np.mean(np.exp(log_w - top), axis=0))))

    return log_estimate


def reference(seed: int = 0, draws: int = 20000) -> dict:
    import pymc as pm

    with pm.Model():
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 2)
        pm.Normal("y", mu, pm.math.sqrt(1 + tau**2), observed=Y)
        idata = pm.sample(draws=draws, tune=1000, chains=2, cores=1, random_seed=seed, progressbar=False)
    return {v: (float(idata.posterior[v].mean()), float(idata.posterior[v].std())) for v in ("mu", "tau")}


def run(sampler: str, n_samples: int, seed: int, tune: int, draws: int):
    import pymc as pm

    from pymc_kameleon import GPDelayedAcceptanceMH, KameleonMetropolis, PseudoMarginalPotential

    with pm.Model():
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 2)
        PseudoMarginalPotential("lik", make_estimator(n_samples), inputs=[mu, tau])
        step = KameleonMetropolis() if sampler == "KAMH" else GPDelayedAcceptanceMH()
        idata = pm.sample(step=step, tune=tune, draws=draws, chains=2, cores=1, random_seed=seed,
                          initvals={"mu": 1.0, "tau": 0.6}, progressbar=False,
                          compute_convergence_checks=False)
    noise = np.sqrt(step.gp.noise_variance) if sampler == "GP-DA-MH" else float("nan")
    return idata, noise


def main(argv=None):
    import arviz as az

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sampler", choices=["GP-DA-MH", "KAMH"], default="GP-DA-MH")
    parser.add_argument("--samples", type=int, default=3, help="importance samples per group")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 7, 8])
    parser.add_argument("--tune", type=int, default=3000)
    parser.add_argument("--draws", type=int, default=8000)
    parser.add_argument("--quick", action="store_true", help="one seed, 300 + 300, short reference (smoke)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.tune, args.draws = args.seeds[:1], 300, 300
    warnings.filterwarnings("ignore")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    print(f"# {environment_line()}")
    print(f"# {args.sampler}, {args.samples} importance samples per group, 2 x ({args.tune} + {args.draws})")
    ref = reference(draws=1000 if args.quick else 20000)
    print("| seed | GP noise sd | mu: z | mu: sd ratio | mu: ESS | tau: z | tau: sd ratio | tau: ESS "
          "| estimator calls | min ESS per 1000 calls |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for seed in args.seeds:
        idata, noise = run(args.sampler, args.samples, seed, args.tune, args.draws)
        row = []
        for v in ("mu", "tau"):
            post = idata.posterior[v]
            z = (float(post.mean()) - ref[v][0]) / float(az.mcse(idata, var_names=[v])[v])
            row += [z, float(post.std()) / ref[v][1], float(az.ess(idata, var_names=[v])[v])]
        # Every estimator call of the run, tuning's included: the last draw's running count, per chain.
        calls = float(idata.sample_stats["cumulative_estimator_calls"].isel(draw=-1).sum())
        row += [calls, 1000 * min(row[2], row[5]) / calls]
        rows.append(row)
        cells = [f"{x:.2f}" if i % 3 != 2 else f"{x:.0f}" for i, x in enumerate(row[:6])]
        cells += [f"{calls:.0f}", f"{row[7]:.1f}"]
        print(f"| {seed} | {noise:.2f} | " + " | ".join(cells) + " |", flush=True)
    a = np.array(rows)
    ess = a[:, [2, 5]]
    print(f"\nmean sd ratio: mu {a[:, 1].mean():.3f}, tau {a[:, 4].mean():.3f}; ESS range {ess.min():.0f}-"
          f"{ess.max():.0f}; rms z {np.sqrt((a[:, [0, 3]] ** 2).mean()):.2f}; median min ESS per 1000 "
          f"estimator calls {np.median(a[:, 7]):.1f}")
    return a


if __name__ == "__main__":
    main()
