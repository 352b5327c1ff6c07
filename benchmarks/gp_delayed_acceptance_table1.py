r"""GP-surrogate delayed acceptance against PyMC's samplers on the paper's Table-1 targets.

Benavoli, Wyse & White, section 4: five posteriors (``pymc_kameleon.problems.table1``), each
sampled with 2000 draws after 500 tuning steps, one chain, several repetitions with fresh
data. Samplers: ``GPDelayedAcceptanceMH()`` and ``GPDelayedAcceptanceMALA()`` (defaults; MALA
only where the model has gradients), ``pm.Metropolis()``, ``pm.DEMetropolisZ()`` and
``pm.NUTS()`` (gradients only). Repetition r simulates its data from ``seed + r`` and seeds
every sampler with ``1000 * seed + r``; all samplers of a repetition see the same data and
start at the model's initial point.

Reported per target and sampler, averaged over repetitions (the paper's metrics first):

* ``AR``: mean of the ``accepted`` stat (NUTS: mean ``acceptance_rate``, not comparable);
* ``ESS`` (mean over parameters) and ``minESS``: ArviZ bulk ESS of each reported parameter,
  on the paper's scale (``Table1Target.params``);
* ``ESJD``: mean over draws of the squared jump per parameter, averaged over parameters;
* ``Eval%``: the paper's column: exact likelihood evaluations during the 2000 posterior
  draws, per draw, in percent. It is counted, not inferred: every target's likelihood runs
  one Python ``perform`` per evaluation (``Table1Target.counter``), and the count is read by
  a ``pm.sample`` callback at the end of tuning and at the last draw. A stock step can exceed
  100%: ``pm.Metropolis`` evaluates ``logp(proposal) - logp(current)`` (two evaluations) once per
  variable and vector element (PyTensor merges the two when the likelihood's inputs did not
  change, as for T4's sigma), DEMetropolisZ once per step, NUTS once per leapfrog step.
  For GP-DA the count equals the sum of the ``exact_eval`` stat (checked);
* ``SD``: the paper's squared distance between posterior mean and the true parameters,
  averaged over parameters (dominated by the posterior's own spread and bias, as in the paper);
* ``zref²``: squared error of the posterior mean against a long reference run on the same
  data, in units of the reference posterior variance, averaged over parameters (about
  1/ESS for a correct sampler). Reference: NUTS, 2 chains x (1000 + 5000) where the model has
  gradients; else DEMetropolisZ, 1 chain x (2000 + 10 000);
* ``ESS/eval``: mean ESS per exact evaluation during the draws (``ESS/eval_all`` counts the
  tuning evaluations too), ``ESS/s`` and ``time``: per second of ``pm.sample`` wall time,
  tuning included (the machine was shared: see RESULTS.md);
* per target, the ratio of GP-DA-MH's ESS/eval to the best stock peer's.

Usage::

    python benchmarks/gp_delayed_acceptance_table1.py                       # 5 targets x 5 reps
    python benchmarks/gp_delayed_acceptance_table1.py --quick               # smoke test
    python benchmarks/gp_delayed_acceptance_table1.py --targets T4 --reps 3 --samplers GP-DA-MH Metropolis
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread

one_blas_thread()  # before NumPy is imported (see _common.py)

import argparse
import logging
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm

from pymc_kameleon import GPDelayedAcceptanceMALA, GPDelayedAcceptanceMH
from pymc_kameleon.problems.table1 import PAPER_COLUMNS, PAPER_TABLE1, TARGETS, build

# One chain per run, whose evaluations a pm.sample callback counts: PyMC's population sampler (which
# pooled tuning uses, even for one chain) calls no callback, and one chain tunes alone anyway.
SAMPLERS = {
    "GP-DA-MH": (lambda: GPDelayedAcceptanceMH(tuning="per_chain"), False),
    "GP-DA-MALA": (lambda: GPDelayedAcceptanceMALA(tuning="per_chain"), True),
    "Metropolis": (lambda: pm.Metropolis(), False),
    "DEMetropolisZ": (lambda: pm.DEMetropolisZ(), False),
    "NUTS": (lambda: pm.NUTS(), True),
}  # name -> (step factory, needs gradients)
GP_DA = ("GP-DA-MH", "GP-DA-MALA")
PEERS = ("Metropolis", "DEMetropolisZ", "NUTS")
PAPER_NAME = {"GP-DA-MH": "GP-MH", "GP-DA-MALA": "GP-MALA"}
METRICS = ("AR", "ESS", "minESS", "ESJD", "Eval%", "SD", "zref2", "ESS/eval", "ESS/eval_all", "ESS/s", "time")


def ess_per_param(draws: np.ndarray) -> np.ndarray:
    """ArviZ bulk ESS of each column of draws (chain, draw, k) (ArviZ 0.x and 1.x).

    A chain that never moved gets ESS 0 (ArviZ reports the number of draws for a constant chain).
    """
    return np.array([
        float(az.ess(draws[..., j], method="bulk")) if np.ptp(draws[..., j]) > 0 else 0.0
        for j in range(draws.shape[-1])
    ])


def esjd(draws: np.ndarray) -> float:
    """Mean squared jump per parameter, averaged over chains and parameters."""
    return float(np.mean(np.diff(draws, axis=1) ** 2))


class _EvalCounts:
    """pm.sample callback: the likelihood counter at the end of tuning and at the last draw."""

    def __init__(self, counter):
        self.counter = counter
        self.at_tune_end = counter.calls
        self.at_end = counter.calls

    def __call__(self, trace, draw):
        if draw.tuning:
            self.at_tune_end = self.counter.calls
        self.at_end = self.counter.calls


def sample(target, step_factory, *, tune, draws, chains, seed):
    """Run pm.sample on one target; returns (idata, wall seconds, evals in draws, evals total)."""
    target.counter.calls = 0
    with target.model:
        step = step_factory()
        counts = _EvalCounts(target.counter)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(
                step=step, tune=tune, draws=draws, chains=chains, cores=1, random_seed=seed,
                progressbar=False, compute_convergence_checks=False, callback=counts,
            )
        wall = time.perf_counter() - start
    seconds = float(idata.sample_stats.attrs.get("sampling_time", wall))
    if chains > 1:  # the callback saw only the last chain's tuning end; scale is not needed (refs)
        return idata, seconds, np.nan, counts.at_end
    return idata, seconds, counts.at_end - counts.at_tune_end, counts.at_end


def reference(target, seed):
    """Long reference run on the same data: posterior mean and variance per parameter."""
    if target.has_gradient:
        factory, kw = (lambda: pm.NUTS()), dict(tune=1000, draws=5000, chains=2)
    else:
        factory, kw = (lambda: pm.DEMetropolisZ()), dict(tune=2000, draws=10_000, chains=1)
    idata, *_ = sample(target, factory, seed=seed, **kw)
    x = target.draws(idata).reshape(-1, len(target.params))
    return x.mean(axis=0), x.var(axis=0), float(ess_per_param(target.draws(idata)).min())


def run_one(target, name, *, tune, draws, seed, ref_mean, ref_var):
    factory, _ = SAMPLERS[name]
    idata, seconds, evals_draws, evals_all = sample(
        target, factory, tune=tune, draws=draws, chains=1, seed=seed
    )
    x = target.draws(idata)  # (1, draws, k)
    ess = ess_per_param(x)
    stats = idata.sample_stats
    accept = stats["acceptance_rate"] if name == "NUTS" else stats["accepted"]
    mean = x.reshape(-1, x.shape[-1]).mean(axis=0)
    row = {
        "AR": float(np.mean(accept.values)),
        "ESS": float(ess.mean()),
        "minESS": float(ess.min()),
        "ESJD": esjd(x),
        "Eval%": 100.0 * evals_draws / draws,
        "SD": float(np.mean((mean - target.true_values) ** 2)),
        "zref2": float(np.mean((mean - ref_mean) ** 2 / ref_var)),
        "ESS/eval": float(ess.mean()) / max(evals_draws, 1),
        "ESS/eval_all": float(ess.mean()) / max(evals_all, 1),
        "ESS/s": float(ess.mean()) / seconds,
        "time": seconds,
    }
    if name in GP_DA:
        exact = stats["exact_eval"].values
        with warnings.catch_warnings():
            # all-NaN stage 2: a chain that never passed stage 1
            warnings.simplefilter("ignore", RuntimeWarning)
            # The share of proposals that passed stage 1 estimates E[alpha_1] (stage1_accept is only a
            # bound where GP-DA MH rejected on a bound of the GP's variance after tuning).
            row["stage1"] = float(np.mean(exact))
            row["stage2"] = float(np.nanmean(stats["stage2_accept"].values))
        row["gp_points"] = int(stats["gp_points"].values[..., -1].max())
        # The counter and the step's own stat must agree: the honest count of exact evaluations.
        row["count_check"] = int(exact.sum()) == evals_draws
    return row


def _fmt(v):
    if isinstance(v, str):
        return v
    if not np.isfinite(v):
        return "nan"
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.01:
        return f"{v:.3f}"
    return f"{v:.2e}"


def summarize(rows_by_rep):
    """Mean over repetitions of each metric (and the spread of Eval% and ESS)."""
    keys = rows_by_rep[0].keys()
    out = {k: float(np.mean([r[k] for r in rows_by_rep])) for k in keys if k != "count_check"}
    out["ESS_sd"] = float(np.std([r["ESS"] for r in rows_by_rep]))
    out["Eval%_sd"] = float(np.std([r["Eval%"] for r in rows_by_rep]))
    if "count_check" in keys:
        out["count_check"] = all(r["count_check"] for r in rows_by_rep)
    return out


def print_target(tname, summary, reps):
    print(f"\n## {tname} ({reps} reps)\n")
    header = ["sampler"] + list(METRICS)
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, s in summary.items():
        cells = [name] + [_fmt(s[m]) for m in METRICS]
        cells[METRICS.index("ESS") + 1] = f"{_fmt(s['ESS'])} ± {_fmt(s['ESS_sd'])}"
        cells[METRICS.index("Eval%") + 1] = f"{_fmt(s['Eval%'])} ± {_fmt(s['Eval%_sd'])}"
        print("| " + " | ".join(cells) + " |")
    for pname, vals in PAPER_TABLE1[tname].items():
        paper_row = dict(zip(PAPER_COLUMNS, vals))
        cells = [f"paper {pname}"] + [
            _fmt(paper_row["AR"]), _fmt(paper_row["ESS"]), "", _fmt(paper_row["ESJD"]),
            _fmt(paper_row["Eval%"]), _fmt(paper_row["SD"]), "", "", "", "", "",
        ]
        print("| " + " | ".join(cells) + " |")
    for name in GP_DA:
        if name in summary:
            s = summary[name]
            print(f"\n{name}: stage-1 acceptance {s['stage1']:.3f}, stage-2 acceptance {s['stage2']:.3f}, "
                  f"GP points at the end {s['gp_points']:.0f}; exact-eval count = sum(exact_eval): "
                  f"{s['count_check']}")
    peers = [p for p in PEERS if p in summary]
    if "GP-DA-MH" in summary and peers:
        best = max(peers, key=lambda p: summary[p]["ESS/eval"])
        g = summary["GP-DA-MH"]
        b = summary[best]
        print(f"GP-DA-MH vs best peer by ESS/eval ({best}): ESS/eval {g['ESS/eval'] / b['ESS/eval']:.2f}x, "
              f"ESS/s {g['ESS/s'] / b['ESS/s']:.2f}x, time {g['time'] / b['time']:.2f}x")
        free = [p for p in ("Metropolis", "DEMetropolisZ") if p in summary]
        if free:
            bf = max(free, key=lambda p: summary[p]["ESS/eval"])
            f = summary[bf]
            print(f"GP-DA-MH vs best gradient-free peer ({bf}): ESS/eval "
                  f"{g['ESS/eval'] / f['ESS/eval']:.2f}x, ESS {g['ESS'] / f['ESS']:.2f}x, "
                  f"ESS/s {g['ESS/s'] / f['ESS/s']:.2f}x")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="tiny budget, for smoke tests")
    parser.add_argument("--target-accept", type=float, default=None,
                        help="GP-DA-MH's target_accept (default: the step's own, 0.234)")
    parser.add_argument("--mala-target-accept", type=float, default=None,
                        help="GP-DA-MALA's target_accept (default: the step's own, 0.35)")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.tune, args.draws = 1, 100, 100
    if args.target_accept is not None:
        SAMPLERS["GP-DA-MH"] = (
            lambda: GPDelayedAcceptanceMH(target_accept=args.target_accept, tuning="per_chain"), False
        )
    mala_target = args.mala_target_accept
    if mala_target is not None:
        SAMPLERS["GP-DA-MALA"] = (
            lambda: GPDelayedAcceptanceMALA(target_accept=mala_target, tuning="per_chain"), True
        )
    logging.getLogger("pymc").setLevel(logging.ERROR)

    print(f"# {environment_line()}")
    print(f"# budget: 1 chain x ({args.tune} tune + {args.draws} draws), {args.reps} reps, "
          f"seed {args.seed}, cores=1"
          + ("" if args.target_accept is None else f", GP-DA-MH target_accept {args.target_accept}")
          + ("" if mala_target is None else f", GP-DA-MALA target_accept {mala_target}"))
    results = {}
    for tname in args.targets:
        per_sampler = {}
        for rep in range(args.reps):
            target = build(tname, seed=args.seed + rep)
            sampler_seed = 1000 * args.seed + rep
            if args.quick:
                ref = reference_quick(target, sampler_seed)
            else:
                ref = reference(target, sampler_seed + 500)
            for name in args.samplers:
                if SAMPLERS[name][1] and not target.has_gradient:
                    continue
                row = run_one(target, name, tune=args.tune, draws=args.draws, seed=sampler_seed,
                              ref_mean=ref[0], ref_var=ref[1])
                per_sampler.setdefault(name, []).append(row)
                cells = ", ".join(f"{k}={_fmt(v)}" for k, v in row.items())
                print(f"# {tname} rep {rep} {name}: {cells}", flush=True)
        summary = {name: summarize(rows) for name, rows in per_sampler.items()}
        print_target(tname, summary, args.reps)
        results[tname] = summary
    return results


def reference_quick(target, seed):
    """A tiny reference (smoke tests only)."""
    idata, *_ = sample(target, lambda: pm.DEMetropolisZ(), tune=200, draws=300, chains=1, seed=seed)
    x = target.draws(idata).reshape(-1, len(target.params))
    return x.mean(axis=0), x.var(axis=0), np.nan


if __name__ == "__main__":
    main()
