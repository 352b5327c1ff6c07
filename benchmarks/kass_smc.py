"""KASS in ``pm.sample_smc``: the KASS paper's section 5 (banana bridge, sensor network, GP evidence).

Three experiments, each printing Markdown tables (``--experiments`` picks some):

``banana``
    The 8-d strongly twisted banana B(b=0.1, v=100) reached from N(0, 50² I) by PyMC's
    geometric bridge: prior x ~ N(0, 50²), likelihood ``pm.Potential(banana − prior)``, with the
    banana normalised, so the exact log Z is 0. KASS, ASMC, PyMC's MH and IMH at equal particles
    (default rules for the number of sweeps), plus PyMC's MH with a fixed number of sweeps per stage
    chosen to match KASS's likelihood-evaluation budget. Per run: quantile error (the target's own
    measure), MMD² (polynomial kernel (1 + ⟨x, y⟩)³, coordinates divided by their exact sd) to
    exact draws, |log Z|, stages, likelihood evaluations, wall time.
``sensor``
    Sensor-network localisation (``pymc_kameleon.problems.sensor_network``, seed 38). KASS against
    single-chain ``KameleonMetropolis`` (KAMH) with as many steps as KASS made likelihood
    evaluations. The reference posterior: many randomly initialised random-walk chains (the paper's
    construction), whose pooled draws are then corrected by importance sampling with a mixture
    fitted to them, so that the modes get their correct weights (the raw pool weights a mode by
    how many chains fell into it). Modes are labelled by which side of the base line each
    sensor is on (the likelihood is invariant under reflection across it).
``regression20``
    Evidence in 20 dimensions: a conjugate linear regression (50 observations, known noise sd 1,
    N(0, 1) priors on the 20 coefficients), whose exact log Z is a Gaussian density. KASS, ASMC and
    PyMC's IMH at equal particles (1000); one chain per run, data and sampler seed ``seed + rep``.
    The KASS issue-14 notes had seen errors of ±3 at 2000 particles on a similar model.
``glass``
    Log evidence of the GP classifier on UCI Glass (pseudo-marginal likelihood, n_imp = 100,
    prior N(0, 5²) on the log squared lengthscales, as in the KASS paper's section 5.3): KASS and
    ASMC with 100 particles, repeated; the spread of log Ẑ, and a reference from larger runs.

Likelihood evaluations are counted the same way for every SMC kernel: the N evaluations of the
initial particles plus one per proposal in the rejuvenation sweeps. KASS reports the latter in its
``likelihood_evals`` statistic; for PyMC's kernels a subclass wraps ``likelihood_logp_func`` with a
counter during ``mutate`` (``_CountEvaluations``, in ``_kass_smc_kernels.py``). Wall times include
compilation and depend on the machine's load.

Usage::

    python benchmarks/kass_smc.py                         # everything (about 40 minutes)
    python benchmarks/kass_smc.py --experiments banana --reps 10
    python benchmarks/kass_smc.py --quick                 # smoke test
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread

one_blas_thread()  # before NumPy is imported (see _common.py)

import argparse
import json
import logging
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

# Split off under the 500-line rule, re-exported: other scripts, the tests and notebook 04 read them here.
from _kass_smc_kernels import (  # the counted kernels and one SMC run
    SMC_KW,
    CountedIMH,
    CountedMH,
    FixedSweepsIMH,
    FixedSweepsMH,
    evidence_table,
    kass_budget_sweeps,
    run_smc,
    summarise,
)
from _kass_smc_sensor import mode_masses, pattern_switches, sensor_reference
from _kass_smc_sensor import random_walk_chains as random_walk_chains
from scipy.stats import multivariate_normal

from pymc_kameleon import ASMC, KASS, KameleonMetropolis, PseudoMarginalPotential
from pymc_kameleon.metrics import mmd_squared
from pymc_kameleon.problems import GPClassificationLikelihood, load_glass
from pymc_kameleon.problems.sensor_network import sensor_network_data, sensor_network_model
from pymc_kameleon.problems.targets import banana

EXPERIMENTS = ("banana", "sensor", "glass", "regression20")


# ----------------------------------------------------------------- running SMC
# (the counted kernels, run_smc and the evidence table: _kass_smc_kernels.py)
def header(args):
    print(f"# {environment_line()}, seed {args.seed}, reps {args.reps}"
          f"{', QUICK' if args.quick else ''}")


# ----------------------------------------------------------------- 1. banana bridge
BANANA_PRIOR_SD = 50.0


def banana_bridge_model(target, prior_sd: float = BANANA_PRIOR_SD):
    """Prior N(0, prior_sd²) per coordinate; likelihood = normalised banana − prior, so log Z = 0."""
    import pytensor.tensor as pt

    with pm.Model() as model:
        x = pm.Normal("x", 0.0, sigma=prior_sd, shape=target.dim)
        prior = pt.sum(pm.logp(pm.Normal.dist(0.0, sigma=prior_sd), x))
        pm.Potential("likelihood", target.logp_tensor(x) - target.log_normalizer - prior)
    return model


def banana_metrics(target, samples, exact_scaled, seed) -> dict:
    """Quantile error, MMD² (sd-scaled coordinates, at most 2000 points each) and |log Z| inputs."""
    sd = np.sqrt(np.diag(target.exact_cov))
    rng = np.random.default_rng(seed)
    sub = samples[rng.choice(samples.shape[0], size=min(2000, samples.shape[0]), replace=False)]
    return dict(qerr=target.quantile_error(samples), mmd=mmd_squared(sub / sd, exact_scaled))


def banana_experiment(args) -> dict:
    target = banana(dim=8, b=0.1, v=100.0)
    model = banana_bridge_model(target)
    draws = 300 if args.quick else 2000
    exact = target.sample(2000, rng=args.seed + 10_000) / np.sqrt(np.diag(target.exact_cov))
    samplers = {
        "KASS": (KASS, {}),
        "ASMC": (ASMC, {}),
        "PyMC MH": (CountedMH, {}),
        "PyMC IMH": (CountedIMH, {}),
    }
    print(
        f"\n## banana: B(b=0.1, v=100), d=8, from N(0, {BANANA_PRIOR_SD:g}² I); N = {draws} particles; "
        "exact log Z = 0\n"
    )
    runs = {name: [] for name in samplers}

    def record(name, kernel, kwargs, rep):
        r = run_smc(model, kernel, draws, args.seed + rep, "x", **kwargs)
        r.update(banana_metrics(target, r["samples"], exact, args.seed + rep))
        del r["idata"], r["samples"]
        runs.setdefault(name, []).append(r)
        print(
            f"#   {name}, run {rep}: qerr {r['qerr']:.4f}, log Z {r['log_z']:+.3f}, {r['evals']} evals, "
            f"{r['seconds']:.0f} s",
            file=sys.stderr,
            flush=True,
        )

    for rep in range(args.reps):
        for name, (kernel, kwargs) in samplers.items():
            record(name, kernel, kwargs, rep)
    sweeps = kass_budget_sweeps(runs["KASS"], draws)
    for label, kernel in (("MH", FixedSweepsMH), ("IMH", FixedSweepsIMH)):
        for rep in range(args.reps):
            record(f"PyMC {label}, {sweeps} sweeps/stage (KASS budget)", kernel, {"n_sweeps": sweeps}, rep)
    for weight in args.am_weights:
        # KASS with another share of global-walk moves (the evidence's bias, issue 14).
        for rep in range(args.reps):
            record(f"KASS, am_weight={weight:g} (variant)", KASS, {"am_weight": weight}, rep)
    for weight in args.independence_weights:
        for rep in range(args.reps):
            record(f"KASS, independence_weight={weight:g} (variant)", KASS,
                   {"independence_weight": weight}, rep)
    if args.tuned:
        # PyMC's own rule for the number of sweeps (and the paper's constant learning rate 1), for comparison.
        for rep in range(args.reps):
            record("KASS, n_steps=correlation, learning_rate=1 (variant)", KASS,
                   {"n_steps": "correlation", "learning_rate": 1.0}, rep)

    print("mean ± sd over", args.reps, "runs (seeds", f"{args.seed}..{args.seed + args.reps - 1})\n")
    print(
        "| sampler | quantile error | MMD² (sd-scaled) | abs(log Z) | log Z | stages | likelihood evals "
        "| wall s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, rs in runs.items():
        col = lambda key, rs=rs: [r[key] for r in rs]  # noqa: E731
        print(f"| {name} | {summarise(col('qerr'))} | {summarise(col('mmd'))} | "
              f"{summarise(np.abs(col('log_z')))} | {summarise(col('log_z'))} | {summarise(col('stages'))} | "
              f"{summarise(col('evals'))} | {summarise(col('seconds'))} |")
    print(evidence_table(runs))
    means = {name: {k: float(np.mean([abs(r[k]) for r in rs])) for k in ("qerr", "mmd", "log_z", "evals")}
             for name, rs in runs.items()}
    # The goal is checked against PyMC's kernels with their own sweep rule (equal particles) and
    # against the fixed-sweep versions that spend KASS's likelihood budget (equal evaluations).
    groups = {
        "equal particles, PyMC's default sweep rule": [n for n in runs if n in ("PyMC MH", "PyMC IMH")],
        "equal likelihood evaluations": [n for n in runs if n.startswith("PyMC") and "KASS budget" in n],
    }
    for key, label in (("qerr", "quantile error"), ("log_z", "abs(log Z)")):
        for group, names in groups.items():
            best = min(names, key=lambda n: means[n][key])
            ratio = means["KASS"][key] / means[best][key]
            print(
                f"\nGoal, {label}, {group}: KASS / best PyMC kernel ({best}) = {means['KASS'][key]:.3g} / "
                f"{means[best][key]:.3g} = {ratio:.2f}x (goal <= 0.5x): "
                f"{'MET' if ratio <= 0.5 else 'NOT MET'}"
            )
    return {"runs": runs, "means": means, "sweeps": sweeps}


# ----------------------------------------------------------------- 1b. evidence in 20 dimensions
def regression20_model(seed: int, dim: int = 20, n: int = 50):
    """Conjugate linear regression y = X b + e, b ~ N(0, I), e ~ N(0, I); returns (model, exact log Z)."""
    rng = np.random.default_rng(100 + seed)
    X = rng.normal(size=(n, dim))
    y = X @ rng.normal(size=dim) + rng.normal(size=n)
    exact = float(multivariate_normal(np.zeros(n), X @ X.T + np.eye(n)).logpdf(y))
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=dim)
        pm.Normal("y", pm.math.dot(X, b), 1.0, observed=y)
    return model, exact


def regression20_experiment(args) -> dict:
    draws = 200 if args.quick else 1000
    samplers = {"KASS": (KASS, {}), "ASMC": (ASMC, {}), "PyMC IMH": (CountedIMH, {})}
    samplers.update({
        f"KASS, independence_weight={w:g} (variant)": (KASS, {"independence_weight": w})
        for w in args.independence_weights
    })
    dim = args.regression_dim
    print(f"\n## regression20: conjugate linear regression, d = {dim}, N = {draws} particles, exact log Z\n")
    runs = {name: [] for name in samplers}
    models = {}  # one model (and exact log Z) per repetition, shared by its samplers

    def record(name, kernel, kwargs, rep):
        if rep not in models:
            models[rep] = regression20_model(args.seed + rep, dim=dim)
        model, exact = models[rep]
        r = run_smc(model, kernel, draws, args.seed + rep, "b", **kwargs)
        r["log_z"] -= exact  # errors, so one table serves every data set
        del r["idata"], r["samples"]
        runs.setdefault(name, []).append(r)
        print(f"#   {name}, run {rep}: log Z error {r['log_z']:+.3f} (SE {r['se']:.3f}), "
              f"{r['evals']} evals, {r['seconds']:.0f} s", file=sys.stderr, flush=True)

    for rep in range(args.reps):
        for name, (kernel, kwargs) in samplers.items():
            record(name, kernel, kwargs, rep)
    sweeps = kass_budget_sweeps(runs["KASS"], draws)
    for rep in range(args.reps):
        record(f"PyMC IMH, {sweeps} sweeps/stage (KASS budget)", FixedSweepsIMH, {"n_sweeps": sweeps}, rep)
    print(evidence_table(runs))
    print("\n| sampler | likelihood evals | wall s |\n|---|---|---|")
    for name, rs in runs.items():
        print(f"| {name} | {summarise([r['evals'] for r in rs])} | {summarise([r['seconds'] for r in rs])} |")
    return {"runs": runs}


# ----------------------------------------------------------------- 2. sensor network
# (its reference posterior and mode labels: _kass_smc_sensor.py)
# --quick caps the KAMH chain of the sensor experiment (KASS's budget is ~50 000 evaluations).
QUICK_KAMH_STEPS = 6000


def sensor_experiment(args) -> dict:
    data = sensor_network_data()
    model = sensor_network_model(data)
    draws = 300 if args.quick else args.sensor_particles
    n_chains, n_steps, n_is = (30, 1000, 10_000) if args.quick else (200, 20_000, 400_000)
    start = time.perf_counter()
    ref = sensor_reference(data, args.seed + 1, n_chains, n_steps, n_is)
    ref_masses = mode_masses(data, ref["draws"], ref["weights"])
    pool_masses = mode_masses(data, ref["pooled"])
    print(
        "\n## sensor network: S=3 unknown, 2 base sensors, R=0.3, sigma²=0.02, data seed 38; "
        f"KASS N = {draws}\n"
    )
    print(
        f"reference: {n_chains} random-walk chains x {n_steps} steps from prior draws (half burn-in), "
        "pooled, then "
        f"importance-reweighted ({n_is} draws from a {ref['n_components']}-component mixture, "
        f"ESS {ref['ess']:.0f}); "
        f"log Z_ref = {ref['log_z']:.3f}; {time.perf_counter() - start:.0f} s\n"
    )

    results = {}
    for rep in range(args.sensor_reps):
        for name, kernel in (("KASS", KASS), ("ASMC", ASMC)):
            r = run_smc(model, kernel, draws, args.seed + rep, "x")
            r["masses"] = mode_masses(data, r["samples"])
            results.setdefault(name, []).append(r)
    # KAMH: one chain from a prior draw, as many steps as KASS made likelihood evaluations; half burn-in.
    for rep in range(args.sensor_reps):
        budget = results["KASS"][rep]["evals"]
        if args.quick:  # a smoke test of the code path, not an equal-budget comparison
            budget = min(budget, QUICK_KAMH_STEPS)
        init = data.prior_mean + data.prior_sd * np.random.default_rng(args.seed + 100 + rep).standard_normal(
            (data.n_sensors, 2)
        )
        start = time.perf_counter()
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(
                step=KameleonMetropolis(),
                chains=1,
                cores=1,
                tune=budget // 2,
                draws=budget - budget // 2,
                initvals={"x": init},
                random_seed=args.seed + rep,
                **SMC_KW,
            )
        samples = idata.posterior["x"].values.reshape(-1, data.dim)
        results.setdefault("KAMH (1 chain)", []).append(
            dict(
                samples=samples,
                masses=mode_masses(data, samples),
                evals=budget,
                seconds=time.perf_counter() - start,
                log_z=float("nan"),
                stages=0,
                switches=pattern_switches(data, samples),
            )
        )

    significant = [p for p, m in ref_masses.items() if m >= 0.02]
    rng = np.random.default_rng(args.seed)
    ref_sub = ref["sample"][:2000]
    print(
        "reference mass per reflection pattern (side of the base line for sensors 0, 1, 2):",
        ", ".join(f"{p}: {m:.3f}" for p, m in ref_masses.items()),
        f"(modes with mass >= 0.02: {len(significant)});",
        "raw pooled chains:",
        ", ".join(f"{p}: {m:.3f}" for p, m in pool_masses.items()),
        "\n",
    )
    print(f"| sampler | run | modes found (of {len(significant)}) | total variation to ref | MMD² to ref | "
          "log Z - log Z_ref | likelihood evals | pattern switches (kept draws) | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rs in results.items():
        for rep, r in enumerate(rs):
            found = sum(r["masses"].get(p, 0.0) >= 0.01 for p in significant)
            tv = 0.5 * sum(
                abs(r["masses"].get(p, 0.0) - ref_masses.get(p, 0.0))
                for p in set(ref_masses) | set(r["masses"])
            )
            sub = r["samples"][
                rng.choice(r["samples"].shape[0], size=min(2000, r["samples"].shape[0]), replace=False)
            ]
            r.update(found=found, tv=tv, mmd=mmd_squared(sub, ref_sub))
            print(
                f"| {name} | {rep} | {found} | {tv:.3f} | {r['mmd']:.2e} | "
                f"{r['log_z'] - ref['log_z']:+.3f} | "
                f"{r['evals']} | {r.get('switches', '')} | {r['seconds']:.0f} |"
            )
    print(
        "\nmass per pattern, run 0:",
        "; ".join(
            f"{name}: " + ", ".join(f"{p} {rs[0]['masses'].get(p, 0.0):.2f}" for p in significant)
            for name, rs in results.items()
        ),
    )
    return {"reference": ref, "ref_masses": ref_masses, "significant": significant, "results": results}


# ----------------------------------------------------------------- 3. GP evidence on Glass
GLASS_PRIOR_SD = 5.0
GLASS_RESULTS = Path(__file__).resolve().parent / "data" / "kass_glass_evidence.json"


def glass_evidence_model(estimator):
    """θ ~ N(0, 5²) (the KASS paper's prior on the 9 log squared lengthscales), pseudo-marginal likelihood."""
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, sigma=GLASS_PRIOR_SD, shape=estimator.n_features)
        PseudoMarginalPotential("likelihood", estimator, inputs=[theta])
    return model


def glass_experiment(args) -> dict:
    X, y = load_glass()
    if args.quick:  # a smoke test: every third fragment (a 72 x 72 Laplace step costs ~20x less)
        X, y = X[::3], y[::3]
    n_imp = 20 if args.quick else 100
    model = glass_evidence_model(GPClassificationLikelihood(X, y, n_importance=n_imp))
    draws = 20 if args.quick else 100
    print(
        f"\n## GP classification evidence on UCI Glass: pseudo-marginal (n_imp = {n_imp}), "
        f"prior N(0, {GLASS_PRIOR_SD:g}²); N = {draws}\n"
    )
    runs = {}
    for rep in range(args.glass_reps):
        for name, kernel in (("KASS", KASS), ("ASMC", ASMC)):
            r = run_smc(model, kernel, draws, args.seed + rep, "theta")
            del r["idata"], r["samples"]
            runs.setdefault(name, []).append(r)
            print(
                f"#   {name}, run {rep}: log Z {r['log_z']:.3f}, {r['stages']} stages, {r['evals']} evals, "
                f"{r['seconds']:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    ref_runs = []
    for rep in range(args.glass_ref_runs):
        r = run_smc(model, KASS, args.glass_ref_particles, args.seed + 1000 + rep, "theta")
        ref_runs.append(r["log_z"])
        print(f"reference run {rep}: KASS N = {args.glass_ref_particles}: log Z = {r['log_z']:.3f} "
              f"({r['evals']} evals, {r['seconds']:.0f} s)", flush=True)
    if ref_runs:
        ref, ref_note = (
            float(np.mean(ref_runs)),
            f"mean of {len(ref_runs)} KASS runs, N = {args.glass_ref_particles}",
        )
    else:
        ref, ref_note = float("nan"), "none"
    print(f"\nreference log Z ({ref_note}): {ref:.3f}\n")
    print(
        "| sampler | runs | mean log Z | sd | IQR | median - ref | RMSE to ref | stages | likelihood evals "
        "| wall s per run |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rs in runs.items():
        lz = np.array([r["log_z"] for r in rs])
        q1, q3 = np.percentile(lz, [25, 75])
        sd = lz.std(ddof=1) if lz.size > 1 else float("nan")
        print(
            f"| {name} | {lz.size} | {lz.mean():.3f} | {sd:.3f} | {q3 - q1:.3f} | "
            f"{np.median(lz) - ref:+.3f} | "
            f"{np.sqrt(np.mean((lz - ref) ** 2)):.3f} | {summarise([r['stages'] for r in rs])} | "
            f"{summarise([r['evals'] for r in rs])} | {summarise([r['seconds'] for r in rs])} |"
        )
    if args.save_glass:
        GLASS_RESULTS.parent.mkdir(exist_ok=True)
        GLASS_RESULTS.write_text(
            json.dumps(
                {
                    "particles": draws,
                    "n_importance": n_imp,
                    "seed": args.seed,
                    "reference": ref,
                    "reference_note": ref_note,
                    "reference_runs": ref_runs,
                    "runs": {name: [r["log_z"] for r in rs] for name, rs in runs.items()},
                },
                indent=1,
            )
        )
        print(f"\n# saved {GLASS_RESULTS}")
    return {"runs": runs, "reference": ref, "reference_runs": ref_runs}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    parser.add_argument("--reps", type=int, default=10, help="repetitions (banana, regression20)")
    parser.add_argument("--seed", type=int, default=2015)
    parser.add_argument(
        "--tuned",
        action="store_true",
        help="banana: an extra, labelled KASS row with PyMC's correlation rule and learning_rate=1",
    )
    parser.add_argument(
        "--am-weights",
        type=float,
        nargs="*",
        default=[],
        help="banana: an extra, labelled KASS row for each of these am_weight values",
    )
    parser.add_argument(
        "--independence-weights",
        type=float,
        nargs="*",
        default=[],
        help="banana, regression20: an extra, labelled KASS row for each of these independence_weight values",
    )
    parser.add_argument(
        "--regression-dim", type=int, default=20, help="regression20: the number of coefficients (default 20)"
    )
    parser.add_argument("--sensor-particles", type=int, default=10_000)
    parser.add_argument("--sensor-reps", type=int, default=2)
    parser.add_argument("--glass-reps", type=int, default=10)
    parser.add_argument("--glass-ref-runs", type=int, default=0)
    parser.add_argument("--glass-ref-particles", type=int, default=500)
    parser.add_argument(
        "--save-glass",
        action="store_true",
        help=f"write the Glass log Z values to {GLASS_RESULTS.name} (notebook 04)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny budget, for smoke tests")
    args = parser.parse_args(argv)
    if args.quick:
        args.save_glass = False
        args.reps, args.sensor_reps, args.glass_reps, args.glass_ref_runs = 1, 1, 1, 0
    logging.getLogger("pymc").setLevel(logging.ERROR)
    header(args)
    out = {}
    for name in args.experiments:
        experiments = {"banana": banana_experiment, "sensor": sensor_experiment, "glass": glass_experiment,
                       "regression20": regression20_experiment}
        out[name] = experiments[name](args)
    return out


if __name__ == "__main__":
    main()
