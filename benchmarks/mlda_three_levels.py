"""MLDA with two coarse models (three levels) and the adaptive error model, on an SIR epidemic.

A new user's setting (issue 46's MLDA): the fine model solves the SIR equations with ``solve_ivp``
(DOP853, rtol 1e-10); the coarse models integrate them with fixed-step RK4, 4 or 16 steps over
[0, 40], interpolated linearly at the 30 observation times. Parameters beta, gamma (log-normal priors)
and the noise sd sigma (half-normal). The exact answer is a quadrature: sigma integrated on a grid, then
(beta, gamma) on a grid in the Laplace approximation's whitened coordinates, the solutions by RK4 with
steps of at most 0.02 (within 1e-9 of the fine solve).

Samplers, 2 chains x (1000 + 2000), ``cores=1``: MLDA with the error model on [RK4-4, RK4-16]
(subsampling rates [3, 5]), on [RK4-16] alone and on [RK4-4] alone (rate 5), and ``pm.DEMetropolisZ``
on the fine model. Reported per seed: the largest |mean error| in posterior sds, min bulk ESS, max
R-hat, each chain's fine solves (tuning, the start search and the error model's solves included) and,
for three levels, each chain's middle-level acceptance over the draws (a chain whose middle level
rejects nearly everything stalls), ESS per fine solve, ESS per second.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/mlda_three_levels.py [--seeds 1 2 3 4]
        [--samplers MLDA-AEM-3 MLDA-AEM-16 MLDA-AEM-4 DEMetropolisZ] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, fine_and_coarse_evaluations, one_blas_thread, timed_sample  # noqa: E402

one_blas_thread()  # before NumPy is imported

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from pytensor.compile.ops import as_op  # noqa: E402
from scipy import stats  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402
from scipy.optimize import minimize  # noqa: E402

from pymc_kameleon import MLDA  # noqa: E402

TIMES = np.linspace(2.0, 40.0, 30)
Y0 = (0.99, 0.01)
TRUE = {"beta": 0.55, "gamma": 0.18, "sigma": 0.01}
NAMES = ("beta", "gamma", "sigma")
SAMPLERS = ("MLDA-AEM-3", "MLDA-AEM-16", "MLDA-AEM-4", "DEMetropolisZ")


def _rhs(t, y, beta, gamma):
    s, i = y
    return [-beta * s * i, beta * s * i - gamma * i]


def fine_infected(beta: float, gamma: float) -> np.ndarray:
    """The infected fraction at ``TIMES``, DOP853 at rtol 1e-10."""
    solution = solve_ivp(_rhs, (0.0, TIMES[-1]), Y0, method="DOP853", t_eval=TIMES, args=(beta, gamma),
                         rtol=1e-10, atol=1e-12)
    return solution.y[1]


def rk4_infected(beta, gamma, steps: int, times=TIMES, max_step=None) -> np.ndarray:
    """RK4 from 0: ``steps`` equal steps to the last time, interpolated linearly at ``times``; or, with
    ``max_step``, steps of at most that between consecutive times (exact at them). Vectorised over
    array-valued ``beta``, ``gamma`` (the last axis of the result is time)."""
    beta, gamma = np.asarray(beta, dtype=float), np.asarray(gamma, dtype=float)
    s, i = np.full(beta.shape, Y0[0]), np.full(beta.shape, Y0[1])

    def f(s, i):
        infection = beta * s * i
        return -infection, infection - gamma * i

    def advance(s, i, h):
        a1, b1 = f(s, i)
        a2, b2 = f(s + h / 2 * a1, i + h / 2 * b1)
        a3, b3 = f(s + h / 2 * a2, i + h / 2 * b2)
        a4, b4 = f(s + h * a3, i + h * b3)
        return s + h / 6 * (a1 + 2 * a2 + 2 * a3 + a4), i + h / 6 * (b1 + 2 * b2 + 2 * b3 + b4)

    if max_step is not None:
        out, t = [], 0.0
        for tk in times:
            n = max(1, int(np.ceil((tk - t) / max_step)))
            for _ in range(n):
                s, i = advance(s, i, (tk - t) / n)
            out.append(i)
            t = tk
        return np.stack(out, -1)
    h = times[-1] / steps
    grid, values = [0.0], [float(i)]
    for k in range(steps):
        s, i = advance(s, i, h)
        grid.append((k + 1) * h)
        values.append(float(i))
    return np.interp(times, grid, values)


DATA = fine_infected(TRUE["beta"], TRUE["gamma"]) + np.random.default_rng(42).normal(
    0, TRUE["sigma"], TIMES.size
)


def model(steps: int | None = None) -> pm.Model:
    """The fine model (``steps`` None) or the RK4 coarse model with ``steps`` steps."""

    @as_op(itypes=[pt.dscalar, pt.dscalar], otypes=[pt.dvector])
    def infected(beta, gamma):
        if steps is None:
            return fine_infected(float(beta), float(gamma))
        return rk4_infected(float(beta), float(gamma), steps)

    with pm.Model() as m:
        beta = pm.LogNormal("beta", np.log(0.5), 0.5)
        gamma = pm.LogNormal("gamma", np.log(0.2), 0.5)
        sigma = pm.HalfNormal("sigma", 0.05)
        pm.Normal("y", mu=infected(beta, gamma), sigma=sigma, observed=DATA)
    return m


def reference(points: int = 241) -> dict:
    """Posterior means and sds by quadrature (sigma on a grid, then (beta, gamma) on a whitened grid of
    ``points`` x ``points`` over ±9 Laplace sds)."""
    sigmas = np.linspace(1e-4, 0.04, 800)

    def log_post(beta, gamma):
        """log p(beta, gamma, data) with sigma integrated out; and E[sigma], E[sigma^2] given beta, gamma."""
        sse = ((rk4_infected(beta, gamma, 0, max_step=0.02) - DATA) ** 2).sum(-1)[..., None]
        lp = -DATA.size * np.log(sigmas) - sse / (2 * sigmas**2) + stats.halfnorm.logpdf(sigmas, scale=0.05)
        top = lp.max(-1, keepdims=True)
        w = np.exp(lp - top)
        total = w.sum(-1)
        prior = stats.lognorm.logpdf(beta, 0.5, scale=0.5) + stats.lognorm.logpdf(gamma, 0.5, scale=0.2)
        moments = (w * sigmas).sum(-1) / total, (w * sigmas**2).sum(-1) / total
        return np.log(total) + top[..., 0] + prior, *moments

    def negative(x):
        return -float(log_post(np.array(x[0]), np.array(x[1]))[0])

    mode = minimize(negative, [0.55, 0.18], method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-10}).x
    e, hessian = 1e-4, np.zeros((2, 2))
    for a in range(2):
        for b in range(2):
            ea, eb = np.eye(2)[a] * e, np.eye(2)[b] * e
            hessian[a, b] = (negative(mode + ea + eb) - negative(mode + ea - eb) - negative(mode - ea + eb)
                             + negative(mode - ea - eb)) / (4 * e * e)
    root = np.linalg.cholesky(np.linalg.inv(hessian))
    z = np.linspace(-9, 9, points)
    grid = mode[:, None, None] + np.einsum("ij,jkl->ikl", root, np.stack(np.meshgrid(z, z, indexing="ij")))
    lp, e_sigma, e_sigma2 = log_post(grid[0], grid[1])
    w = np.exp(lp - lp.max())
    w /= w.sum()
    out = {}
    for name, values in (("beta", grid[0]), ("gamma", grid[1])):
        mean = float((w * values).sum())
        out[name] = (mean, float(np.sqrt((w * (values - mean) ** 2).sum())))
    mean = float((w * e_sigma).sum())
    out["sigma"] = (mean, float(np.sqrt((w * e_sigma2).sum() - mean**2)))
    return out


def run(sampler: str, seed: int, ref: dict, tune: int, draws: int) -> dict:
    chains = 2
    fine = model()
    coarse = {"MLDA-AEM-3": [model(4), model(16)], "MLDA-AEM-16": [model(16)], "MLDA-AEM-4": [model(4)]}
    with fine:
        if sampler == "DEMetropolisZ":
            step = pm.DEMetropolisZ()
        else:
            rates = [3, 5] if sampler == "MLDA-AEM-3" else 5
            step = MLDA(coarse_models=coarse[sampler], subsampling_rates=rates, adaptive_error_model=True)
    idata, seconds = timed_sample(fine, step, tune=tune, draws=draws, chains=chains, seed=seed)
    post = idata.posterior
    ess = min(float(az.ess(post[n].values)) for n in NAMES)
    rhat = max(float(az.rhat(post[n].values)) for n in NAMES)
    err = max(abs(float(post[n].values.mean()) - ref[n][0]) / ref[n][1] for n in NAMES)
    fine_total, _ = fine_and_coarse_evaluations(idata, sampler, chains * (tune + draws))
    per_chain = (idata.sample_stats["cumulative_logp_evals"].values[:, -1] if sampler != "DEMetropolisZ"
                 else np.full(chains, 2 * (tune + draws)))
    middle = (np.nanmean(idata.sample_stats["level1_accept_rate"].values, axis=1)
              if sampler == "MLDA-AEM-3" else None)
    return {"err": err, "ess": ess, "rhat": rhat, "fine": per_chain, "middle": middle,
            "ess_per_fine": ess / fine_total, "ess_per_s": ess / seconds}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--samplers", nargs="+", choices=SAMPLERS, default=list(SAMPLERS))
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 seed, 2 x (60 + 60), MLDA-AEM-3")
    args = parser.parse_args(argv)
    budget = (1000, 2000)
    if args.quick:
        args.seeds, args.samplers, budget = args.seeds[:1], ["MLDA-AEM-3"], (60, 60)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    ref = reference(61 if args.quick else 241)  # quick: the same means to 1e-5 sd
    print(f"# {environment_line()}")
    exact = ", ".join(f"{n} {m:.5f} ± {s:.5f}" for n, (m, s) in ref.items())
    print(f"# SIR, fine DOP853 rtol 1e-10, coarse RK4 with 4 / 16 steps; 2 chains x ({budget[0]} + "
          f"{budget[1]}), cores=1; reference by quadrature: {exact}")
    print()
    print("| sampler | seed | mean err (sd) | min ESS | max R-hat | fine solves per chain | middle level's "
          "acceptance per chain | ESS per fine solve | ESS/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for sampler in args.samplers:
        for seed in args.seeds:
            r = run(sampler, seed, ref, *budget)
            rows.append(r)
            middle = "–" if r["middle"] is None else ", ".join(f"{m:.3f}" for m in r["middle"])
            print(f"| {sampler} | {seed} | {r['err']:.3f} | {r['ess']:.0f} | {r['rhat']:.3f} | "
                  f"{', '.join(str(int(f)) for f in r['fine'])} | {middle} | {r['ess_per_fine']:.3f} | "
                  f"{r['ess_per_s']:.1f} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
