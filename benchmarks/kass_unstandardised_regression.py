"""SMC evidence on an ordinary regression whose predictors differ in scale (found by a new user's check).

y = a + b_age age + b_inc income + b_ind indicator + N(0, sigma^2), n = 100, age in years (20-70),
income in dollars (about 5e4), a 0/1 indicator; priors N(0, 10), N(0, 1), N(0, 1e-3), N(0, 5) and
HalfNormal(5). The coefficients integrate out analytically given sigma, so log Z is exact by 1-d
quadrature over sigma. Each variant runs one chain of ``pm.sample_smc`` per seed with the same seeds;
the table gives the mean log Z error over seeds with its standard error, the share of runs whose
+-2 SE interval (``log_evidence``) covers the exact log Z, the worst error in units of the run's own SE,
and the likelihood evaluations per run where the kernel reports them.

    python benchmarks/kass_unstandardised_regression.py --seeds 8
    python benchmarks/kass_unstandardised_regression.py --variants KASS "KASS iw=0" --seeds 8
    python benchmarks/kass_unstandardised_regression.py --quick
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
from scipy import stats  # noqa: E402
from scipy.special import logsumexp  # noqa: E402

from pymc_kameleon import ASMC, KASS  # noqa: E402
from pymc_kameleon.smc import log_evidence, stage_stats  # noqa: E402

PRIOR_SDS = np.array([10.0, 1.0, 1e-3, 5.0])  # a, b_age, b_inc, b_ind
SIGMA_PRIOR_SD = 5.0

VARIANTS = {
    "KASS": (KASS, {}),
    "KASS acceptance rule": (KASS, {"n_steps": "acceptance"}),  # the default before the "moved" rule
    "KASS iw=0": (KASS, {"independence_weight": 0.0}),
    "KASS n_steps=40": (KASS, {"n_steps": 40}),
    "ASMC": (ASMC, {}),
    "pm MH": (pm.smc.kernels.MH, {}),
    "pm IMH": (pm.smc.kernels.IMH, {}),
}


def make_data(n: int = 100, seed: int = 1):
    """Design matrix (intercept, age, income, indicator) and responses."""
    rng = np.random.default_rng(seed)
    age, income, indicator = rng.uniform(20, 70, n), rng.normal(5e4, 1.5e4, n), rng.integers(0, 2, n)
    X = np.column_stack([np.ones(n), age, income, indicator])
    y = X @ np.array([2.0, 0.05, 3e-5, 1.5]) + rng.normal(0, 1.0, n)
    return X, y


def build_model(X, y):
    with pm.Model() as model:
        coef = pm.Normal("coef", 0, PRIOR_SDS, shape=4)
        sigma = pm.HalfNormal("sigma", SIGMA_PRIOR_SD)
        pm.Normal("y", pm.math.dot(X, coef), sigma, observed=y)
    return model


def exact_log_z(X, y) -> float:
    r"""log Z = log \int p(sigma) N(y; 0, sigma^2 I + X S X^T) d sigma, S = diag(prior variances)."""
    n = y.size
    Xs = X * PRIOR_SDS

    def log_marginal(s):
        s2 = s * s
        A = np.eye(Xs.shape[1]) + Xs.T @ Xs / s2
        b = Xs.T @ y / s2
        quad = y @ y / s2 - b @ np.linalg.solve(A, b)
        return -0.5 * (n * math.log(2 * math.pi * s2) + np.linalg.slogdet(A)[1] + quad)

    log_s = np.linspace(math.log(1e-3), math.log(100.0), 8001)
    s = np.exp(log_s)
    integrand = [log_marginal(v) for v in s] + stats.halfnorm(scale=SIGMA_PRIOR_SD).logpdf(s) + log_s
    return float(logsumexp(integrand) + math.log(log_s[1] - log_s[0]))


def run(model, variant: str, draws: int, seed: int) -> dict:
    kernel, kwargs = VARIANTS[variant]
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample_smc(
            draws=draws, kernel=kernel, chains=1, cores=1, random_seed=seed, progressbar=False,
            compute_convergence_checks=False, **kwargs,
        )
        evidence = log_evidence(idata)
    evals = math.nan
    if "likelihood_evals" in idata.sample_stats:
        evals = draws + float(stage_stats(idata, "likelihood_evals")[0].sum())
    return dict(log_z=float(evidence.log_z[0]), se=float(evidence.std_error[0]), evals=evals,
                seconds=time.perf_counter() - start)


def table(rows: dict, exact: float) -> str:
    lines = [
        "| variant | runs | mean log Z error ± SE | ±2 SE coverage | worst error / own SE "
        "| evaluations per run | s per run |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant, runs in rows.items():
        err = np.array([r["log_z"] - exact for r in runs])
        se = np.array([r["se"] for r in runs])
        has_se = np.all(np.isfinite(se))
        spread = err.std(ddof=1) / math.sqrt(err.size) if err.size > 1 else math.nan
        coverage = f"{np.mean(np.abs(err) <= 2 * se):.2f}" if has_se else "–"
        worst = f"{np.max(np.abs(err) / se):.1f}" if has_se else "–"
        evals = np.mean([r["evals"] for r in runs])
        lines.append(
            f"| {variant} | {err.size} | {err.mean():+.3f} ± {spread:.3f} | {coverage} | {worst} | "
            f"{'–' if math.isnan(evals) else f'{evals:.0f}'} | {np.mean([r['seconds'] for r in runs]):.1f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=8, help="seeds 1..S")
    parser.add_argument("--draws", type=int, default=2000, help="particles")
    parser.add_argument("--quick", action="store_true", help="one seed, 200 particles, KASS and pm MH")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.draws, args.variants = 1, 200, ["KASS", "pm MH"]
    X, y = make_data()
    exact = exact_log_z(X, y)
    model = build_model(X, y)
    print(environment_line())
    print(f"exact log Z = {exact:.3f}; {args.draws} particles; seeds 1..{args.seeds}\n")
    rows = {}
    for variant in args.variants:
        rows[variant] = [run(model, variant, args.draws, seed) for seed in range(1, args.seeds + 1)]
    print(table(rows, exact))
    return rows, exact


if __name__ == "__main__":
    main()
