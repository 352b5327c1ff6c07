"""KASS's log Z on a random-intercept logistic model (3 parameters, 40 group effects) against an exact one.

A new user's model (2026-12-06): 40 groups of 8 Bernoulli observations, logit p = a + b x + sigma z_g with
z_g ~ N(0, 1) sampled as parameters, a, b ~ N(0, 2), sigma ~ HalfNormal(1). Integrating each z_g out by
40-node Gauss-Hermite quadrature leaves a 3-d marginal likelihood, whose log Z importance sampling gets to
about 0.005 nats (a Student-t proposal at the marginal's mode). Each run is ``pm.sample_smc(kernel=KASS)``
with 2 chains; it reports each chain's log Z error in its own standard errors, the chains' pooled
log-likelihood rise at the last stage (``smc.results.final_climb``) and which warnings ``log_evidence`` gave.

    OPENBLAS_NUM_THREADS=1 python benchmarks/kass_random_intercepts.py --seeds 1 2 3 4 [--n-steps 50] [--imh]
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
from scipy import optimize, stats  # noqa: E402
from scipy.special import log_expit, logsumexp  # noqa: E402

GROUPS, PER_GROUP = 40, 8
_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(40)
_GH_LOG_W = np.log(_GH_W / np.sqrt(2 * np.pi))


def make_data(seed: int = 20240):
    """Covariate x (G, J) and signs 2y - 1 of the outcomes, from a = -0.5, b = 1, sigma = 1."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=GROUPS * PER_GROUP)
    z = rng.normal(size=GROUPS)
    eta = -0.5 + x + z[np.repeat(np.arange(GROUPS), PER_GROUP)]
    y = (rng.uniform(size=x.size) < 1 / (1 + np.exp(-eta))).astype(int)
    return x.reshape(GROUPS, PER_GROUP), (2 * y - 1).reshape(GROUPS, PER_GROUP)


def build_model(x, sign):
    """The model with the group effects as parameters (what KASS samples: 43 dimensions)."""
    import pymc as pm

    group = np.repeat(np.arange(GROUPS), PER_GROUP)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2)
        sigma = pm.HalfNormal("sigma", 1)
        z = pm.Normal("z", 0, 1, shape=GROUPS)
        pm.Bernoulli("y", logit_p=a + b * x.ravel() + sigma * z[group], observed=(sign.ravel() + 1) // 2)
    return model


def marginal_log_density(u, x, sign):
    """Log prior + Gauss-Hermite marginal log-likelihood at rows (a, b, log sigma), Jacobian included."""
    u = np.atleast_2d(u)
    a, b, s = u[:, 0], u[:, 1], np.exp(u[:, 2])
    linear = (a[:, None, None] + b[:, None, None] * x[None])[:, None]
    eta = linear + s[:, None, None, None] * _GH_X[None, :, None, None]
    per_node = log_expit(sign[None, None] * eta).sum(-1)  # (P, nodes, G)
    loglik = logsumexp(per_node + _GH_LOG_W[None, :, None], axis=1).sum(-1)
    prior = stats.norm(0, 2).logpdf(a) + stats.norm(0, 2).logpdf(b) + stats.halfnorm().logpdf(s) + u[:, 2]
    return prior + loglik


def reference_log_z(x, sign, draws: int = 20_000, reps: int = 5, seed: int = 0) -> tuple[float, float]:
    """Importance sampling on the 3-d marginal: a t_4 proposal at its mode, twice the Laplace covariance."""
    found = optimize.minimize(lambda u: -marginal_log_density(u, x, sign)[0], np.array([0.0, 0.0, -1.0]))
    cov = 2.0 * found.hess_inv
    proposal = stats.multivariate_t(found.x, cov, df=4)
    estimates = []
    for rep in range(reps):
        u = proposal.rvs(size=draws, random_state=seed + rep)
        chunks = [marginal_log_density(c, x, sign) for c in np.array_split(u, 40)]
        log_w = np.concatenate(chunks) - proposal.logpdf(u)
        estimates.append(logsumexp(log_w) - np.log(draws))
    return float(np.mean(estimates)), float(np.std(estimates, ddof=1) / np.sqrt(reps))


def run(model, seed: int, draws: int, kernel: str, n_steps):
    import pymc as pm

    from pymc_kameleon import KASS
    from pymc_kameleon.smc import log_evidence, stage_stats
    from pymc_kameleon.smc.results import final_climb

    options = {} if n_steps is None else {"n_steps": n_steps}
    start = time.perf_counter()
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kw = {"kernel": KASS, **options} if kernel == "KASS" else {}
        idata = pm.sample_smc(draws=draws, chains=2, cores=1, random_seed=seed, progressbar=False, **kw)
        evidence = log_evidence(idata)
    seconds = time.perf_counter() - start
    said = [str(w.message) for w in caught]
    climb = (np.nan, np.nan)
    if kernel == "KASS":
        climb = final_climb(stage_stats(idata, "loglik_rise"), stage_stats(idata, "loglik_rise_se"))
    return dict(
        log_z=evidence.log_z, se=evidence.std_error, climb=climb, seconds=seconds,
        climbing=any("still climbing" in m for m in said), lagged=any("lagged behind" in m for m in said),
    )


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--n-steps", type=int, default=None, help="a fixed number of sweeps per stage")
    parser.add_argument("--imh", action="store_true", help="also PyMC's default kernel (no error bar)")
    parser.add_argument("--quick", action="store_true", help="one seed, 200 particles")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.draws = args.seeds[:1], 200
    x, sign = make_data()
    exact, exact_se = reference_log_z(x, sign, draws=2000 if args.quick else 20_000)
    print(environment_line())
    print(f"# random-intercept logistic model, 43 parameters; exact log Z {exact:.3f} +- {exact_se:.3f} "
          f"(importance sampling on the quadrature marginal); {args.draws} particles, 2 chains")
    print("\n| kernel | seed | log Z error per chain | in its SEs | last-stage rise (pooled) | warned: "
          "climbing / lag | s |")
    print("|---|---|---|---|---|---|---|")
    model = build_model(x, sign)
    rows = []
    kernels = [("KASS", args.n_steps)] + ([("IMH", None)] if args.imh else [])
    for seed in args.seeds:
        for kernel, n_steps in kernels:
            r = run(model, seed, args.draws, kernel, n_steps)
            err = r["log_z"] - exact
            label = kernel if n_steps is None else f"{kernel}, n_steps={n_steps}"
            rise, rise_se = r["climb"]
            climb = "–" if np.isnan(rise) else f"{rise:.2f} +- {rise_se:.2f} ({rise / rise_se:.1f} SE)"
            in_se = "–"
            if np.isfinite(r["se"]).all():
                in_se = ", ".join(f"{e / s:+.1f}" for e, s in zip(err, r["se"]))
            warned = f"{'yes' if r['climbing'] else 'no'} / {'yes' if r['lagged'] else 'no'}"
            print(f"| {label} | {seed} | {', '.join(f'{e:+.3f}' for e in err)} | {in_se} | {climb} | "
                  f"{warned} | {r['seconds']:.0f} |", flush=True)
            rows.append(dict(kernel=label, seed=seed, err=err, **r))
    return rows


if __name__ == "__main__":
    main()
