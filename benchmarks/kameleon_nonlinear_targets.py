r"""KameleonMetropolis against PyMC's samplers on the KAMH paper's nonlinear targets.

Targets (paper section 5.2): the 8-d moderately twisted banana B(0.03, 100), the
strongly twisted banana B(0.1, 100), and the flower F(10, 6, 6, 1). Every sampler gets
the same chains, tuning steps and draws, in one run. NUTS is the gradient-based ceiling.

Reported per sampler and target:

* ``qerr``: mean |coverage - q| of the exact q-density regions, q = 0.1..0.9, averaged
  over chains (the paper's quantile measure), with the pooled value in brackets;
* ``|mean|``: norm of the empirical mean (exact: 0), averaged over chains;
* ``ESS``: minimum bulk ESS over coordinates (ArviZ), all chains pooled;
* ``level ESS``: bulk ESS of the HDR statistic :math:`T(x) = -2\log\pi(x)`, all chains
  pooled. ``qerr`` is the error of the distribution of :math:`T`, so this ESS, not the
  coordinates', sets it: for i.i.d. draws its expected size is about
  :math:`0.8\,\overline{\sqrt{q(1-q)}}/\sqrt{\text{ESS}} \approx 0.34/\sqrt{\text{ESS}}`;
* ``ESS/eval``: ESS per log-density evaluation made while drawing, counted as each
  PyMC implementation makes them (Metropolis and DEMetropolisZ evaluate the current and
  the proposed state at every step; KameleonMetropolis caches the current one; for NUTS
  it counts gradient evaluations);
* ``ESS/s``: ESS per second of sampling wall time (``idata.sample_stats.sampling_time``);
* ``overhead``: per-step cost beyond the log-density evaluations, in microseconds, from
  a separate single-process loop of 4000 post-tuning steps. It is the step time minus
  evaluations-per-step times the time of one compiled evaluation.

Usage::

    python benchmarks/kameleon_nonlinear_targets.py                  # the full run (paper budget)
    python benchmarks/kameleon_nonlinear_targets.py --quick          # smoke test, seconds
    python benchmarks/kameleon_nonlinear_targets.py --targets banana-strong --draws 10000
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread, start_chain

one_blas_thread()  # before NumPy is imported (see _common.py)

import argparse
import time
import warnings
from functools import partial

import arviz as az
import numpy as np
import pymc as pm

from pymc_kameleon import KameleonMetropolis
from pymc_kameleon.problems.targets import banana, flower

TARGETS = {
    "banana-moderate": lambda: banana(dim=8, b=0.03, v=100.0),
    "banana-strong": lambda: banana(dim=8, b=0.1, v=100.0),
    "flower": lambda: flower(dim=8, r0=10.0, A=6.0, omega=6.0, sigma=1.0),
}
SAMPLERS = {
    "KameleonMetropolis": KameleonMetropolis,
    # The Adaptive Metropolis walk alone (am_weight=1: no Kameleon component).
    "KameleonMetropolis-am": partial(KameleonMetropolis, am_weight=1.0),
    # The Kameleon mixture from the first window on (the default before kameleon_after).
    "KameleonMetropolis-mixture": partial(KameleonMetropolis, kameleon_after=0),
    "Metropolis": pm.Metropolis,
    "DEMetropolisZ": pm.DEMetropolisZ,
    "NUTS": pm.NUTS,
}
QS = np.round(np.arange(0.1, 1.0, 0.1), 1)


def evals_per_draw(name, idata) -> np.ndarray:
    """Log-density (or gradient) evaluations per posterior draw, as the implementation does them."""
    stats = idata.sample_stats
    if name.startswith("KameleonMetropolis"):
        return stats["logp_evals"].values
    if name == "NUTS":
        return stats["n_steps"].values
    return np.full(stats["accepted"].shape, 2.0)  # logp(proposal) - logp(current) per step


def per_step_overhead(target, name, n_tune=3000, n_steps=4000, seed=0):
    """Microseconds per step beyond log-density evaluations, single process, after tuning."""
    model = target.model()
    with model:
        step = SAMPLERS[name]()
        logp_fn = model.compile_logp() if name != "NUTS" else model.compile_dlogp()
    start_chain(step, np.random.default_rng(seed), n_tune, n_steps)
    point = model.initial_point()
    for _ in range(n_tune):
        point, _ = step.step(point)
    step.stop_tuning()
    evals = 0.0
    start = time.perf_counter()
    for _ in range(n_steps):
        point, stats = step.step(point)
        s = stats[0]
        evals += s.get("logp_evals", s.get("n_steps", 2))
    step_time = (time.perf_counter() - start) / n_steps
    reps = 5000
    start = time.perf_counter()
    for _ in range(reps):
        logp_fn(point)
    eval_time = (time.perf_counter() - start) / reps
    return 1e6 * (step_time - evals / n_steps * eval_time), 1e6 * step_time


def run_one(target, name, chains, tune, draws, seed):
    with target.model():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(
                step=SAMPLERS[name](), chains=chains, cores=min(chains, 2), tune=tune, draws=draws,
                random_seed=seed, progressbar=False, compute_convergence_checks=False,
            )
    x = idata.posterior["x"].values  # (chain, draw, dim)
    per_chain_q = [target.quantile_error(x[c], QS) for c in range(x.shape[0])]
    pooled_q = target.quantile_error(x.reshape(-1, target.dim), QS)
    mean_norm = float(
        np.mean([np.linalg.norm(x[c].mean(axis=0) - target.exact_mean) for c in range(x.shape[0])])
    )
    ess = float(az.ess(idata, var_names=["x"], method="bulk")["x"].values.min())
    level_ess = float(az.ess(np.asarray(target.statistic(x)), method="bulk"))
    evals = float(evals_per_draw(name, idata).sum())
    seconds = float(idata.sample_stats.attrs.get("sampling_time", np.nan))
    accept = (
        float(np.mean(idata.sample_stats["accepted"].values))
        if "accepted" in idata.sample_stats
        else float(np.mean(idata.sample_stats["acceptance_rate"].values))
    )
    return dict(
        qerr=float(np.mean(per_chain_q)), qerr_sd=float(np.std(per_chain_q)), qerr_pooled=pooled_q,
        mean_norm=mean_norm, ess=ess, level_ess=level_ess, ess_per_eval=ess / evals, ess_per_s=ess / seconds,
        accept=accept,
        seconds=seconds,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--tune", type=int, default=20_000)
    parser.add_argument("--draws", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=2014)
    parser.add_argument("--quick", action="store_true", help="tiny budget, for smoke tests")
    parser.add_argument("--overhead-only", action="store_true",
                        help="only the per-step overhead loop (run it on an otherwise idle machine)")
    args = parser.parse_args(argv)
    if args.quick:
        args.chains, args.tune, args.draws = 2, 300, 300

    print(f"# {environment_line()}")
    print(f"# budget: {args.chains} chains x ({args.tune} tune + {args.draws} draws), seed {args.seed}")
    all_rows = {}
    if args.overhead_only:
        for tname in args.targets:
            target = TARGETS[tname]()
            print(f"\n## {tname}: per-step overhead beyond log-density evaluations (us)")
            res = {s: per_step_overhead(target, s) for s in args.samplers}
            for s, (over, step_us) in res.items():
                print(f"| {s} | {over:.1f} | {step_us:.1f} |")
            if "KameleonMetropolis" in res and "DEMetropolisZ" in res:
                print(
                    "overhead vs DEMetropolisZ: "
                    f"{res['KameleonMetropolis'][0] / res['DEMetropolisZ'][0]:.2f}x"
                )
        return all_rows
    for tname in args.targets:
        target = TARGETS[tname]()
        print(f"\n## {tname}: {target!r}\n")
        print(
            "| sampler | qerr (pooled) | abs(mean) | accept | min ESS | level ESS | ESS/eval | ESS/s "
            "| overhead us/step (step) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        rows = {}
        for sname in args.samplers:
            r = run_one(target, sname, args.chains, args.tune, args.draws, args.seed)
            n_tune = 300 if args.quick else 3000
            r["overhead"], r["step_us"] = per_step_overhead(target, sname, n_tune=n_tune,
                                                            n_steps=300 if args.quick else 4000)
            rows[sname] = r
            print(f"| {sname} | {r['qerr']:.4f} ± {r['qerr_sd']:.4f} ({r['qerr_pooled']:.4f}) | "
                  f"{r['mean_norm']:.3f} | {r['accept']:.2f} | {r['ess']:.0f} | {r['level_ess']:.0f} | "
                  f"{r['ess_per_eval']:.2e} | "
                  f"{r['ess_per_s']:.1f} | {r['overhead']:.1f} ({r['step_us']:.1f}) |", flush=True)
        all_rows[tname] = rows
        if "KameleonMetropolis" in rows:
            k = rows["KameleonMetropolis"]
            peers = [p for p in ("Metropolis", "DEMetropolisZ") if p in rows]
            if peers:
                best = min(peers, key=lambda p: rows[p]["qerr"])
                print(f"\nratios vs best gradient-free PyMC peer ({best}): "
                      f"qerr {k['qerr'] / rows[best]['qerr']:.2f}x, "
                      f"ESS/eval {k['ess_per_eval'] / rows[best]['ess_per_eval']:.2f}x, "
                      f"ESS/s {k['ess_per_s'] / rows[best]['ess_per_s']:.2f}x")
            if "DEMetropolisZ" in rows:
                print(f"per-step overhead vs DEMetropolisZ: "
                      f"{k['overhead'] / rows['DEMetropolisZ']['overhead']:.2f}x "
                      f"(whole step: {k['step_us'] / rows['DEMetropolisZ']['step_us']:.2f}x)")
    return all_rows


if __name__ == "__main__":
    main()
