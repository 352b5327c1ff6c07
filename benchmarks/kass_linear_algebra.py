"""KASS on a model whose vectorised log density loops in Python: a multivariate normal likelihood whose
Cholesky factor is a parameter (an LKJ prior, 3 dimensions, ``--rows`` observations).

PyTensor's C backend (PyMC 5's default) runs a vectorised Cholesky or triangular solve as a Python loop
(``Blockwise``): one solve per particle and row, where PyMC's per-particle function makes one solve of
all rows. ``batch_logp="auto"`` now evaluates such a model's particles one by one
(``smc._batched.looped_core_calls``); ``batch_logp=True`` is the vectorised evaluation it used before.
Each run is scored against a NUTS reference of the same model (every scalar's mean, in posterior sds)
and reports its wall time, likelihood evaluations and log evidence, beside PyMC's own SMC kernel (IMH).
``--crossover`` times instead the two evaluations of 1000 particles against the number of rows, beside
the Python-loop calls per particle that ``"auto"`` compares with its threshold of 8. ``--scan`` runs an
AR(1) likelihood written with ``pytensor.scan`` instead, whose vectorised graph runs one Scan per particle
in that loop (``smc._batched.looped_inner_graphs``): KASS with ``"auto"`` and vectorised, and PyMC's IMH.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/kass_linear_algebra.py --seeds 1 2 3
    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/kass_linear_algebra.py --crossover
    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/kass_linear_algebra.py --scan --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

from pymc_kameleon import KASS  # noqa: E402
from pymc_kameleon.smc import log_evidence, stage_stats  # noqa: E402

KERNELS = {
    "KASS (auto)": {"kernel": KASS},
    "KASS (vectorised)": {"kernel": KASS, "batch_logp": True},
    "pm IMH": {},
}


def lkj_model(rows: int) -> pm.Model:
    """3-d normal observations with unknown mean and an LKJ(2) Cholesky factor, Exponential(1) scales."""
    rng = np.random.default_rng(0)
    cov = np.array([[1.0, 0.5, 0.2], [0.5, 2.0, -0.3], [0.2, -0.3, 0.5]])
    data = rng.multivariate_normal([1.0, -1.0, 0.5], cov, size=rows)
    with pm.Model() as model:
        scales = pm.Exponential.dist(1.0)
        chol, _, _ = pm.LKJCholeskyCov("chol", n=3, eta=2.0, sd_dist=scales, compute_corr=True)
        mu = pm.Normal("mu", 0.0, 5.0, shape=3)
        pm.MvNormal("y", mu=mu, chol=chol, observed=data)
    return model


def scalars(idata) -> dict[str, np.ndarray]:
    """Every scalar of the free variables' draws (the Cholesky factor's packed elements and the means)."""
    out = {}
    for name in ("chol", "mu"):
        values = idata.posterior[name].values
        flat = values.reshape(values.shape[0] * values.shape[1], -1)
        out.update({f"{name}[{i}]": flat[:, i] for i in range(flat.shape[1])})
    return out


def run(model, options: dict, draws: int, seed: int) -> dict:
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        idata = pm.sample_smc(draws=draws, chains=1, cores=1, random_seed=seed, progressbar=False, **options)
        wall = time.perf_counter() - start
    stats = idata.sample_stats
    row = {"wall": wall, "scalars": scalars(idata), "log_z": float("nan"), "se": float("nan"), "evals": None}
    if "likelihood_evals" in stats:
        row["evals"] = int(np.nansum(stage_stats(idata, "likelihood_evals")[0])) + draws
        estimate = log_evidence(idata)
        row["log_z"], row["se"] = float(estimate.log_z[0]), float(estimate.std_error[0])
        row["batch"] = int(stats.attrs["batch_logp"])
    else:
        # PyMC 5 keeps the stages' values per chain, PyMC 6 the last one: the last finite value.
        per_stage = np.ravel(stats["log_marginal_likelihood"].values[0])
        values = np.hstack([np.ravel(np.asarray(v, dtype=float)) for v in per_stage])
        finite = values[np.isfinite(values)]
        row["log_z"] = float(finite[-1]) if finite.size else float("nan")
    return row


def ar1_scan_model(steps: int = 60) -> pm.Model:
    """An AR(1) series of ``steps`` values, its likelihood written with ``pytensor.scan``."""
    import pytensor
    import pytensor.tensor as pt

    rng = np.random.default_rng(1)
    y = np.zeros(steps)
    for t in range(1, steps):
        y[t] = 0.7 * y[t - 1] + rng.normal(0, 0.5)
    with pm.Model() as model:
        phi = pm.Uniform("phi", -1, 1)
        s = pm.HalfNormal("s", 1.0)
        means, _ = pytensor.scan(lambda y_prev, phi: phi * y_prev, sequences=[pt.as_tensor(y[:-1])],
                                 non_sequences=[phi])
        pm.Potential("likelihood", pm.logp(pm.Normal.dist(means, s), y[1:]).sum())
    return model


def scan_runs(seeds, particles: int) -> dict:
    """KASS ("auto" and vectorised) and PyMC's IMH on :func:`ar1_scan_model`: wall times, posterior means."""
    model = ar1_scan_model()
    print(f"\nAR(1) likelihood with pytensor.scan, 59 steps, {particles} particles\n")
    print("| kernel | seed | wall (s) | vectorised | likelihood evals | mean phi | mean s | log Z |")
    print("|---|---|---|---|---|---|---|---|")
    rows: dict[str, list[dict]] = {k: [] for k in KERNELS}
    for seed in seeds:
        for name, options in KERNELS.items():
            with model, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                idata = pm.sample_smc(draws=particles, chains=1, cores=1, random_seed=seed, progressbar=False,
                                      **options)
                wall = time.perf_counter() - start
            stats = idata.sample_stats
            means = [float(idata.posterior[v].mean()) for v in ("phi", "s")]
            row = {"wall": wall, "phi": means[0], "s": means[1]}
            if "likelihood_evals" in stats:
                row["evals"] = int(np.nansum(stage_stats(idata, "likelihood_evals")[0])) + particles
                row["log_z"] = float(log_evidence(idata).log_z[0])
                row["batch"] = int(stats.attrs["batch_logp"])
            rows[name].append(row)
            evals = f"{row['evals']:,}" if "evals" in row else "–"
            vectorised = {0: "no", 1: "yes"}.get(row.get("batch"), "–")
            log_z = f"{row['log_z']:.3f}" if "log_z" in row else "–"
            print(f"| {name} | {seed} | {wall:.1f} | {vectorised} | {evals} | {means[0]:.4f} "
                  f"| {means[1]:.4f} | {log_z} |", flush=True)
    print("\nmedian wall over seeds: " + ", ".join(
        f"{name} {np.median([r['wall'] for r in rs]):.1f} s" for name, rs in rows.items()))
    return rows


def crossover(row_counts=(1, 4, 8, 16, 32), particles: int = 1000, repeats: int = 5) -> list[dict]:
    """Milliseconds to evaluate ``particles`` particles vectorised and one by one (median of ``repeats``),
    and the looped calls per particle that vectorising adds (``loops_added_per_particle``)."""
    from pymc_kameleon.smc._batched import loops_added_per_particle

    print("| rows | looped calls added per particle | vectorised (ms) | one by one (ms) | \"auto\" |")
    print("|---|---|---|---|---|")
    out = []
    for rows in row_counts:
        model = lkj_model(rows)
        kernels = [KASS(draws=40, model=model, random_seed=1, batch_logp=b) for b in (True, False)]
        for k in kernels:
            k.initialize(None, np.random.default_rng(2))
        vectorised = kernels[0]
        added = loops_added_per_particle(
            vectorised._batch_logp_func, (vectorised.prior_logp_func, vectorised.likelihood_logp_func), model,
            vectorised.variables, None,
        )
        points = np.random.default_rng(3).normal(size=(particles, 9)) * 0.3
        ms = []
        for k in kernels:
            k._evaluate(points)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                k._evaluate(points)
                times.append(1e3 * (time.perf_counter() - start))
            ms.append(float(np.median(times)))
        chosen = KASS(draws=40, model=model, random_seed=1)._batch_logp_func
        auto = "one by one" if chosen is None else "vectorised"
        print(f"| {rows} | {added} | {ms[0]:.1f} | {ms[1]:.1f} | {auto} |", flush=True)
        out.append({"rows": rows, "added": added, "vectorised_ms": ms[0], "each_ms": ms[1], "auto": auto})
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--particles", type=int, default=500)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    parser.add_argument("--quick", action="store_true", help="100 particles, 20 rows, seed 1, short NUTS")
    parser.add_argument("--crossover", action="store_true", help="time both evaluations against the rows")
    parser.add_argument("--scan", action="store_true", help="an AR(1) likelihood written with pytensor.scan")
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.WARNING)
    if args.scan:
        print(environment_line())
        print(f"# command: python benchmarks/kass_linear_algebra.py {' '.join(argv or sys.argv[1:])}")
        seeds, particles = ([1], 100) if args.quick else (args.seeds, 1000)
        return {"scan": scan_runs(seeds, particles)}
    if args.crossover:
        print(environment_line())
        print(f"# command: python benchmarks/kass_linear_algebra.py {' '.join(argv or sys.argv[1:])}\n")
        return {"crossover": crossover(row_counts=(1, 8) if args.quick else (1, 4, 8, 16, 32))}
    if args.quick:
        args.seeds, args.particles, args.rows = [1], 100, 20
    print(environment_line())
    print(f"# command: python benchmarks/kass_linear_algebra.py {' '.join(argv or sys.argv[1:])}")
    model = lkj_model(args.rows)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        budget = 300 if args.quick else 3000
        reference = pm.sample(draws=budget, tune=budget // 2, chains=4, random_seed=2025, progressbar=False,
                              compute_convergence_checks=False)
    ref = {k: (v.mean(), v.std()) for k, v in scalars(reference).items()}
    print(f"\nLKJ model, {args.rows} rows, {args.particles} particles; reference: NUTS 4 x {budget} draws\n")
    print("| kernel | seed | wall (s) | vectorised | likelihood evals | max mean err (sd) | log Z | SE |")
    print("|---|---|---|---|---|---|---|---|")
    rows: dict[str, list[dict]] = {k: [] for k in args.kernels}
    for seed in args.seeds:
        for name in args.kernels:
            row = run(model, KERNELS[name], args.particles, seed)
            row["mean_err"] = max(abs(v.mean() - ref[k][0]) / ref[k][1] for k, v in row["scalars"].items())
            rows[name].append(row)
            evals = "–" if row["evals"] is None else f"{row['evals']:,}"
            vectorised = {0: "no", 1: "yes"}.get(row.get("batch"), "–")
            print(f"| {name} | {seed} | {row['wall']:.1f} | {vectorised} | {evals} | {row['mean_err']:.3f} "
                  f"| {row['log_z']:.2f} | {row['se']:.2f} |", flush=True)
    print("\nmedian wall over seeds: " + ", ".join(
        f"{name} {np.median([r['wall'] for r in rs]):.1f} s" for name, rs in rows.items()))
    return rows


if __name__ == "__main__":
    main()
