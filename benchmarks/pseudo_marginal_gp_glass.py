"""Pseudo-marginal GP classification on UCI Glass: KameleonMetropolis against Adaptive Metropolis.

The KAMH paper's section 5.1. The posterior of the 9 log squared lengthscales θ of a GP
classifier (window against non-window glass), with θ ~ N(0, 5I), where p(y | θ) is estimated
without bias by importance sampling from the Laplace approximation (n_imp = 100). Both samplers
are ``KameleonMetropolis``, so they share every detail (pseudo-marginal bookkeeping, ν²
adaptation, tuning schedule, frozen after tuning) except the kernel: ``"gaussian"`` is KAMH,
``"linear"`` is Adaptive Metropolis (AM), the paper's strongest baseline. PyMC's own
Metropolis-type steps would re-estimate the current state every step (a biased chain), and
NUTS needs gradients, so they are not peers here.

Reported, at equal budgets (the same chains, tuning steps and draws, one estimator call per step):

* ``ESS/call``: minimum and median bulk ESS over the 9 coordinates (ArviZ, chains pooled) per
  estimator call made while drawing;
* ``‖mean − ref‖``: distance between each chain's posterior mean and the mean of a long
  reference run, averaged over chains;
* ``MMD²``: unbiased MMD² with the polynomial kernel (1 + ⟨θ, θ'⟩)³ between each chain
  (thinned to 2000 points) and the reference sample, averaged over chains (the paper's Fig. 4);
* timing from a separate single-process loop after tuning: wall time per iteration, split into
  the estimator and everything else (the Kameleon proposal, the compiled prior, PyMC's step
  machinery), and the proposal overhead relative to the estimator's cost.

The reference is a long AM run (the baseline's own kind, so it cannot favour KAMH) with its
own seed; ``--save-reference`` writes a thinned copy that notebook 02 uses.

Usage::

    python benchmarks/pseudo_marginal_gp_glass.py              # full run (about 25 minutes)
    python benchmarks/pseudo_marginal_gp_glass.py --quick      # smoke test
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import CountedCall, environment_line, one_blas_thread, start_chain

one_blas_thread()  # before NumPy is imported (see _common.py)

import argparse
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm

from pymc_kameleon import KameleonMetropolis, PseudoMarginalPotential
from pymc_kameleon.metrics import mmd_squared
from pymc_kameleon.problems import GPClassificationLikelihood, load_glass

SAMPLERS = {"KAMH": "gaussian", "AM": "linear"}
REFERENCE_FILE = Path(__file__).resolve().parent / "data" / "glass_reference.npz"


def glass_model(n_importance=100, estimator=None):
    X, y = load_glass()
    estimator = estimator or GPClassificationLikelihood(X, y, n_importance=n_importance)
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, sigma=np.sqrt(5.0), shape=X.shape[1])
        PseudoMarginalPotential("lik", estimator, inputs=[theta])
    return model


def sample(kernel, chains, tune, draws, seed, n_importance):
    with glass_model(n_importance):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(
                # The paper's KAMH and AM: the Kameleon component from the first window on.
                step=KameleonMetropolis(kernel=kernel, kameleon_after=0), chains=chains, cores=min(chains, 2),
                tune=tune, draws=draws, random_seed=seed, progressbar=False, compute_convergence_checks=False,
            )
    return idata


def thin_to(x, n):
    step = max(1, x.shape[0] // n)
    return x[::step][:n]


def evaluate(idata, reference):
    theta = idata.posterior["theta"].values  # (chain, draw, 9)
    ess = az.ess(idata, var_names=["theta"], method="bulk")["theta"].values
    calls = float(idata.sample_stats["estimator_calls"].values.sum())
    ref_mean = reference.mean(axis=0)
    ref_thin = thin_to(reference, 2000)
    dist = [float(np.linalg.norm(theta[c].mean(axis=0) - ref_mean)) for c in range(theta.shape[0])]
    mmd = [mmd_squared(thin_to(theta[c], 2000), ref_thin) for c in range(theta.shape[0])]
    return dict(
        min_ess=float(ess.min()), median_ess=float(np.median(ess)), calls=calls,
        min_ess_per_call=float(ess.min()) / calls, median_ess_per_call=float(np.median(ess)) / calls,
        dist=float(np.mean(dist)), dist_chains=dist, mmd=float(np.mean(mmd)), mmd_chains=mmd,
        accept=float(idata.sample_stats["accepted"].values.mean()),
        loglik_sd=float(np.std(idata.sample_stats["loglik_estimate"].values)),
        seconds=float(idata.sample_stats.attrs.get("sampling_time", np.nan)),
    )


def timing(kernel, n_tune, n_steps, seed, n_importance):
    """Seconds per iteration after tuning, split into the estimator and the rest (one process)."""
    X, y = load_glass()
    timed = CountedCall(GPClassificationLikelihood(X, y, n_importance=n_importance))
    model = glass_model(estimator=timed)
    with model:
        step = KameleonMetropolis(kernel=kernel, kameleon_after=0)
    start_chain(step, np.random.default_rng(seed), n_tune, n_steps)
    point = model.initial_point()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(n_tune):
            point, _ = step.step(point)
        step.stop_tuning()
    timed.reset()
    start = time.perf_counter()
    for _ in range(n_steps):
        point, _ = step.step(point)
    total = (time.perf_counter() - start) / n_steps
    estimator = timed.seconds / n_steps
    # The proposal alone: draw at the current point and build the covariance at the proposal.
    y0 = point["theta"].copy()
    start = time.perf_counter()
    reps = 200
    if step.proposal is not None:
        for _ in range(reps):
            step.scale_free_proposal.propose(y0, step.rng)  # the step's own move (core.kameleon.scale_free)
    proposal = (time.perf_counter() - start) / reps
    return dict(total=total, estimator=estimator, rest=total - estimator, proposal=proposal,
                subsample=0 if step.proposal is None else step.proposal.Z.shape[0])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--tune", type=int, default=5000)
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--reference-tune", type=int, default=10000)
    parser.add_argument("--reference-draws", type=int, default=60000)
    parser.add_argument("--n-importance", type=int, default=100)
    parser.add_argument("--seed", type=int, default=2014)
    parser.add_argument("--save-reference", action="store_true", help=f"write {REFERENCE_FILE.name}")
    parser.add_argument("--use-saved-reference", action="store_true", help=f"read {REFERENCE_FILE.name}")
    parser.add_argument("--quick", action="store_true", help="tiny budget, for smoke tests")
    args = parser.parse_args(argv)
    if args.quick:
        args.chains, args.tune, args.draws = 2, 200, 200
        args.reference_tune, args.reference_draws = 200, 300
    print(f"# {environment_line()}")
    print(f"# budget per sampler: {args.chains} chains x ({args.tune} tune + {args.draws} draws), "
          f"n_imp={args.n_importance}, seed {args.seed}")

    if args.use_saved_reference:
        reference = np.load(REFERENCE_FILE)["theta"]
        print(f"# reference: {REFERENCE_FILE.name}, {reference.shape[0]} points")
    else:
        t0 = time.perf_counter()
        ref = sample("linear", 2, args.reference_tune, args.reference_draws, args.seed + 1, args.n_importance)
        reference = ref.posterior["theta"].values.reshape(-1, 9)
        ref_ess = az.ess(ref, var_names=["theta"], method="bulk")["theta"].values
        print(f"# reference: AM, 2 chains x ({args.reference_tune} tune + {args.reference_draws} draws), "
              f"min ESS {ref_ess.min():.0f}, max R-hat "
              f"{float(az.rhat(ref, var_names=['theta'])['theta'].values.max()):.3f}, "
              f"{time.perf_counter() - t0:.0f} s")
        if args.save_reference:
            REFERENCE_FILE.parent.mkdir(exist_ok=True)
            np.savez_compressed(REFERENCE_FILE, theta=thin_to(reference, 4000),
                                mean=reference.mean(axis=0), n_total=reference.shape[0])
            print(f"# saved {REFERENCE_FILE}")

    rows = {}
    print(
        "\n| sampler | accept | min ESS | median ESS | min ESS/call | median ESS/call | ‖mean − ref‖ "
        "| MMD² | sd(log p̂) | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, kernel in SAMPLERS.items():
        r = evaluate(
            sample(kernel, args.chains, args.tune, args.draws, args.seed, args.n_importance), reference
        )
        rows[name] = r
        print(f"| {name} | {r['accept']:.2f} | {r['min_ess']:.0f} | {r['median_ess']:.0f} | "
              f"{r['min_ess_per_call']:.2e} | {r['median_ess_per_call']:.2e} | {r['dist']:.3f} | "
              f"{r['mmd']:.3g} | {r['loglik_sd']:.2f} | {r['seconds']:.0f} |", flush=True)
    k, a = rows["KAMH"], rows["AM"]
    print(f"\nKAMH / AM: min ESS per call {k['min_ess_per_call'] / a['min_ess_per_call']:.2f}x, "
          f"median ESS per call {k['median_ess_per_call'] / a['median_ess_per_call']:.2f}x, "
          f"‖mean − ref‖ {k['dist'] / a['dist']:.2f}x, MMD² {k['mmd'] / a['mmd']:.2f}x")

    n_tune = 300 if args.quick else 3000
    n_steps = 100 if args.quick else 1000
    print(f"\n## time per iteration, one process ({n_tune} tuning steps, then {n_steps} timed steps)\n")
    print("| sampler | |Z| | iteration ms | estimator ms | rest ms | proposal ms | proposal / estimator |")
    print("|---|---|---|---|---|---|---|")
    for name, kernel in SAMPLERS.items():
        t = timing(kernel, n_tune, n_steps, args.seed, args.n_importance)
        rows[name]["timing"] = t
        print(
            f"| {name} | {t['subsample']} | {1e3 * t['total']:.2f} | {1e3 * t['estimator']:.2f} | "
            f"{1e3 * t['rest']:.3f} | {1e3 * t['proposal']:.3f} | "
            f"{100 * t['proposal'] / t['estimator']:.1f}% |",
            flush=True,
        )
    return rows


if __name__ == "__main__":
    main()
