"""Gradient-free samplers against PyMC's on the posteriors real users bring.

Twenty-two posteriors: regressions and GLMs with unstandardised predictors (income in dollars; four
uncentred predictors, near and far start; 15 correlated predictors on scales 1e-3 to 1e3),
eight schools (centred and non-centred), an AR(2) series, a GARCH(1,1) volatility model, a
two-component mixture, GP hyperparameters, a Lotka-Volterra ODE behind a black-box
``solve_ivp`` Op (near and far start), the KAMH paper's 8-d banana B(0.1, 100) and flower,
two independent normals with sd 1e-3 and 1e3, 5 normals on scales 1e-4 to 1e4, and a 50-d
correlated Gaussian; and two frontier posteriors from posteriordb where no gradient-free sampler
converges today (issue 43): the Lotka-Volterra ODE on the Hudson's Bay lynx-hare pelts (black-box
Op; NUTS converges on its differentiable twin) and a centred latent Poisson GP (NUTS diverges too;
it converges on the non-centred form). The models, their data and how their references are obtained are in
``pymc_kameleon.problems.real_posteriors`` (the catalogue, ``POSTERIORS``); this script samples
them, and computes and caches the NUTS references.

Every sampler gets the same chains, tuning steps and draws, and the same seeds (by default 3 seeds of
2 chains x (2000 tune + 1000 draws); the twenty first posteriors take about 45 minutes on a busy
2-core machine, a third of it ``pm.Metropolis`` on the ODE, which solves it 16 times per iteration;
the two frontier posteriors, one of them another ODE, come on top). Reported per posterior and
sampler, as the median over seeds with the worst seed in brackets:

* ``mean err``: max over scalar parameters of |posterior mean - reference mean| / reference sd;
* ``log sd err``: max over scalar parameters of |log(posterior sd / reference sd)|;
* ``min ESS``: the smallest bulk ESS (ArviZ) over scalar parameters, chains pooled;
* ``max R-hat``: the largest rank-normalised split R-hat (ArviZ); NaN means a chain never moved;
* ``ESS/eval``: min ESS per log-density evaluation, **tuning included**, counted as each
  implementation makes them (see :func:`log_density_evaluations`);
* ``ESS/s``: min ESS per second of sampling wall time (PyMC's ``sampling_time``: tuning and
  draws, chains in parallel, compilation excluded);
* ``evals/iter``: log-density evaluations per chain iteration (tuning included).

Parameters are compared on the constrained scale that ``idata.posterior`` holds, over the
model's free variables. References are exact where a closed form (or exact i.i.d. draws) exists,
and otherwise moments of a long NUTS run, computed once and cached in
``benchmarks/data/real_posteriors_reference.json`` (``--refresh-reference`` recomputes them;
the run must reach R-hat < 1.01 and bulk ESS > 2000 on every scalar, or it is refused).

Samplers run with their defaults, as a user would call them; all chains start at the same
point (the model's initial point, or the posterior's own ``initvals``), without jitter.
NUTS is skipped where the log density has no gradient (the black-box ODE) and
``GPDelayedAcceptanceMH`` where the model has no likelihood term (no observed variable and no
potential), which it refuses.

Usage::

    python benchmarks/real_posteriors.py                          # 3 seeds, 2 chains x (2000 + 1000), ~45 min
    python benchmarks/real_posteriors.py --quick                  # smoke test, well under a minute
    python benchmarks/real_posteriors.py --posteriors two-normals gaussian-50d --seeds 5
    python benchmarks/real_posteriors.py --output table.md --json raw.json
    python benchmarks/real_posteriors.py --refresh-reference --posteriors ar2   # recompute a reference
"""

import argparse
import contextlib
import json
import logging
import os
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
import pytensor
from pytensor.gradient import NullTypeGradError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import tuning_reports  # noqa: E402

import pymc_kameleon
from pymc_kameleon import GPDelayedAcceptanceMALA, GPDelayedAcceptanceMH, KameleonMetropolis, SMCStart
from pymc_kameleon.problems.real_posteriors import POSTERIORS
from pymc_kameleon.problems.reference import ExactReference

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/, also when loaded by path
from _posterior_tables import COLUMNS as COLUMNS  # noqa: E402  (re-exported: the tests read it here)
from _posterior_tables import LEGEND, markdown_table, table_row, verdict  # noqa: E402
from _references import (  # noqa: E402  (re-exported: other scripts and the tests use them from here)
    REFERENCE_FILE,
    ReferenceStore,
    compare,
    free_variable_names,
    scalar_draws,
)

QUICK_POSTERIORS = ("regression-income-sigma-known", "two-normals")


# ============================================================================ samplers
@dataclass(frozen=True)
class Sampler:
    """A step method to benchmark: ``make()`` is called inside the model context."""

    make: Callable[[], object]
    needs_gradient: bool = False
    needs_likelihood: bool = False


SAMPLERS = {
    "KameleonMetropolis": Sampler(KameleonMetropolis),
    "GPDelayedAcceptanceMH": Sampler(GPDelayedAcceptanceMH, needs_likelihood=True),
    "Metropolis": Sampler(pm.Metropolis),
    "DEMetropolisZ": Sampler(pm.DEMetropolisZ),
    "NUTS": Sampler(pm.NUTS, needs_gradient=True),
}
# Not run by default; choose with --samplers.
EXTRA_SAMPLERS = {
    "KameleonMetropolis-linear": Sampler(partial(KameleonMetropolis, kernel="linear")),
    # The Adaptive Metropolis walk alone (am_weight=1: no Kameleon component).
    "KameleonMetropolis-am": Sampler(partial(KameleonMetropolis, am_weight=1.0)),
    # Without the independence component (the default before decision record 0038).
    "KameleonMetropolis-without-independence": Sampler(partial(KameleonMetropolis, independence_weight=0)),
    "GPDelayedAcceptanceMH-kameleon": Sampler(
        partial(GPDelayedAcceptanceMH, proposal="kameleon"), needs_likelihood=True
    ),
    "GPDelayedAcceptanceMALA": Sampler(GPDelayedAcceptanceMALA, needs_gradient=True, needs_likelihood=True),
    # GP-DA MH with the independence component of decision 0038 (off by default there).
    "GPDelayedAcceptanceMH-independence": Sampler(
        partial(GPDelayedAcceptanceMH, independence_weight=0.5), needs_likelihood=True
    ),
    # PyMC's population sampler (chains >= 3: it proposes from other chains' differences).
    "DEMetropolis": Sampler(pm.DEMetropolis),
    # Tuning pooled across chains (our default since issue 43: pm.sample runs the chains as a
    # population) or per chain (the default before), whatever the default.
    "KameleonMetropolis-per-chain": Sampler(partial(KameleonMetropolis, tuning="per_chain")),
    "GPDelayedAcceptanceMH-per-chain": Sampler(
        partial(GPDelayedAcceptanceMH, tuning="per_chain"), needs_likelihood=True
    ),
    "KameleonMetropolis-pooled": Sampler(partial(KameleonMetropolis, tuning="pooled")),
    "GPDelayedAcceptanceMH-pooled": Sampler(
        partial(GPDelayedAcceptanceMH, tuning="pooled"), needs_likelihood=True
    ),
    # Chains start where PyMC starts them (the default before the start search of issue 43).
    "KameleonMetropolis-initial-point": Sampler(partial(KameleonMetropolis, start="initial_point")),
    "GPDelayedAcceptanceMH-initial-point": Sampler(
        partial(GPDelayedAcceptanceMH, start="initial_point"), needs_likelihood=True
    ),
    # Tuning from a KASS run's particles (decision 0060): the particles alone, and through a map fitted to
    # them (start="smc", the map on by default for KameleonMetropolis since it was measured).
    "KameleonMetropolis-smc": Sampler(partial(KameleonMetropolis, start=SMCStart(transport_map=False))),
    "KameleonMetropolis-smc-map": Sampler(partial(KameleonMetropolis, start=SMCStart(transport_map=True))),
    "GPDelayedAcceptanceMH-smc": Sampler(partial(GPDelayedAcceptanceMH, start="smc"), needs_likelihood=True),
    # Cheaper runs for the map: waste-free KASS (its automatic chains), and 500 particles.
    "KameleonMetropolis-smc-map-waste-free": Sampler(
        partial(KameleonMetropolis, start=SMCStart(kernel_options={"waste_free": True}))
    ),
    "KameleonMetropolis-smc-map-500": Sampler(partial(KameleonMetropolis, start=SMCStart(particles=500))),
    "KameleonMetropolis-smc-map-1000": Sampler(partial(KameleonMetropolis, start=SMCStart(particles=1000))),
    # Tempered from a wide Gaussian around the mode instead of the prior (the default where the prior cannot
    # be drawn from: pm.Flat, an initval).
    "KameleonMetropolis-smc-mode": Sampler(
        partial(KameleonMetropolis, start=SMCStart(transport_map=True, reference="mode"))
    ),
}
ALL_SAMPLERS = {**SAMPLERS, **EXTRA_SAMPLERS}


def has_gradient(model) -> bool:
    """Whether PyTensor can differentiate the model's log density."""
    try:
        pytensor.grad(model.logp(), model.value_vars)
    except (NotImplementedError, NullTypeGradError, TypeError):  # e.g. an Op without grad
        return False
    return True


def has_likelihood(model) -> bool:
    """Whether the model has a likelihood term (an observed variable or a potential)."""
    return bool(model.observed_RVs or model.potentials)


def skip_reason(sampler: Sampler, model) -> str | None:
    """Why ``sampler`` does not run on ``model``, or None."""
    if sampler.needs_gradient and not has_gradient(model):
        return "skipped: no gradient"
    if sampler.needs_likelihood and not has_likelihood(model):
        return "skipped: no likelihood term"
    return None


def _stat(idata, name) -> np.ndarray:
    """A sample statistic over tuning and draws, shape (chain, tune + draw, ...)."""
    parts = [idata[group][name].values for group in ("warmup_sample_stats", "sample_stats") if group in idata]
    return np.concatenate(parts, axis=1)


def log_density_evaluations(sampler_name: str, idata, model) -> float:
    """Log-density evaluations over tuning and draws, all chains, as the implementation makes them.

    * ``Metropolis``: PyMC 5 makes one ``Metropolis`` per free variable (``default_blocked = False``);
      each proposes a vector variable element by element (``elemwise_update``), and every proposal
      calls ``delta_logp``, one compiled function computing logp(proposal) - logp(current): two
      evaluations per scalar element per iteration.
    * ``DEMetropolisZ`` and ``DEMetropolis`` (a population sampler): one blocked ``delta_logp`` per
      iteration, so two evaluations.
    * ``KameleonMetropolis``: its ``logp_evals`` stat (one per iteration; the current value is cached).
    * ``GPDelayedAcceptanceMH`` and ``GPDelayedAcceptanceMALA``: exact likelihood evaluations,
      the running ``cumulative_logp_evals`` stat at each chain's last draw (tuning, the start
      search and, pooled, the checks for stranded chains included; each check evaluates the other
      chains' states). The prior, evaluated at every proposal, is not counted; MALA's exact
      evaluations also return the likelihood's gradient.
    * ``NUTS``: gradient evaluations, the ``n_steps`` stat (leapfrog steps).

    Parameters
    ----------
    sampler_name : str
        A key of ``ALL_SAMPLERS``.
    idata : arviz.InferenceData
        Sampled with ``discard_tuned_samples=False``, so the tuning stats are present.
    model : pymc.Model

    Returns
    -------
    float
    """
    base = sampler_name.split("-")[0]
    n_chain, n_iter = _stat(idata, "accept" if base != "NUTS" else "n_steps").shape[:2]
    if base == "KameleonMetropolis":
        return float(_stat(idata, "logp_evals").sum())
    if base in ("GPDelayedAcceptanceMH", "GPDelayedAcceptanceMALA"):
        return float(idata.sample_stats["cumulative_logp_evals"].values[:, -1].sum())
    if base == "NUTS":
        return float(_stat(idata, "n_steps").sum())
    if base in ("DEMetropolisZ", "DEMetropolis"):
        return 2.0 * n_chain * n_iter
    if base == "Metropolis":
        d = sum(int(np.size(v)) for v in model.initial_point().values())
        return 2.0 * d * n_chain * n_iter
    raise ValueError(f"no evaluation count for sampler {sampler_name!r}")


# ============================================================================ running
def run_one(name: str, sampler_name: str, seed: int, *, chains: int, tune: int, draws: int, cores: int,
            reference: ExactReference) -> dict:
    """Sample posterior ``name`` with one sampler and seed; return the metrics (or the skip reason).

    Parameters
    ----------
    name : str
        A key of ``POSTERIORS``.
    sampler_name : str
        A key of ``ALL_SAMPLERS``.
    seed : int
        ``random_seed`` of ``pm.sample``.
    chains, tune, draws, cores
        The budget, the same for every sampler.
    reference : dict
        Scalar name -> (mean, sd).

    Returns
    -------
    dict
        The metrics of :func:`compare` plus ``evals``, ``evals_per_iter``, ``ess_per_eval``,
        ``ess_per_s``, ``seconds`` and ``divergences`` (NUTS); or ``{"skipped": reason}``, or
        ``{"error": message}`` if sampling raised.
    """
    model, _, initvals = POSTERIORS[name]()
    sampler = ALL_SAMPLERS[sampler_name]
    reason = skip_reason(sampler, model)
    if reason:
        return {"skipped": reason}
    try:
        with model, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step = sampler.make()
            idata = pm.sample(
                draws=draws, tune=tune, chains=chains, cores=cores, step=step, initvals=initvals,
                random_seed=seed, progressbar=False, compute_convergence_checks=False,
                discard_tuned_samples=False,
            )
    except Exception as err:  # noqa: BLE001 - any failure is a benchmark row, not the end of the run
        return {"error": f"{type(err).__name__}: {err}"[:200]}
    # Our steps start every warning with their class name (PyMC's own convergence checks are off).
    warned = any(str(w.message).startswith(type(step).__name__ + ":") for w in caught)
    result = compare(scalar_draws(idata.posterior, free_variable_names(model)), reference)
    evals = log_density_evaluations(sampler_name, idata, model)
    seconds = float(idata.sample_stats.attrs["sampling_time"])
    result.update(
        evals=evals,
        evals_per_iter=evals / (chains * (tune + draws)),
        ess_per_eval=result["min_ess"] / evals,
        ess_per_s=result["min_ess"] / seconds,
        seconds=seconds,
        warned=warned,
    )
    if "diverging" in idata.sample_stats:
        result["divergences"] = int(idata.sample_stats["diverging"].values.sum())
    return result


def _git_describe() -> str:
    root = Path(pymc_kameleon.__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "pymc_kameleon"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"pymc_kameleon from {root} (not a git checkout)"
    return f"pymc_kameleon from {root}, commit {commit}{' + uncommitted changes' if dirty else ''}"


def main(argv=None) -> dict:
    """Run the benchmark; print (and optionally write) the markdown table.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (default: ``sys.argv[1:]``); see ``--help``.

    Returns
    -------
    dict
        ``{posterior: {sampler: [result per seed]}}`` as returned by :func:`run_one`, plus the
        table under the key ``"_table"`` and the reference sources under ``"_references"``.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posteriors", nargs="+", choices=list(POSTERIORS), default=None)
    parser.add_argument("--samplers", nargs="+", choices=list(ALL_SAMPLERS), default=None)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--cores", type=int, default=None, help="default: min(chains, 2)")
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds: seed-base, seed-base + 1, ...")
    parser.add_argument("--seed-base", type=int, default=2025)
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: {', '.join(QUICK_POSTERIORS)}; 2 x (200 + 200), 1 seed, 1 core")
    parser.add_argument("--refresh-reference", action="store_true",
                        help="recompute the cached NUTS references of the chosen posteriors")
    parser.add_argument("--reference-only", action="store_true",
                        help="compute (or check) the references of the chosen posteriors, then stop")
    parser.add_argument("--reference-file", type=Path, default=REFERENCE_FILE)
    parser.add_argument("--output", type=Path, default=None, help="also write the table (markdown) here")
    parser.add_argument("--json", type=Path, default=None, help="write the per-seed results here")
    parser.add_argument("--note", default=None, help="a line printed in the header")
    parser.add_argument("--tuning-figures", action="store_true",
                        help="after each run, print every chain's end-of-tuning figures (drift, climb, each "
                        "also over the last half; gradient spread and slope), which the tuning warnings read")
    parser.add_argument("--peers-from", type=Path, default=None,
                        help="a --json file of an earlier run: its samplers that are not run now join the "
                        "table (same posteriors and seeds; PyMC's samplers do not change with our code)")
    args = parser.parse_args(argv)
    if args.quick:
        args.tune, args.draws, args.seeds, args.cores = 200, 200, 1, 1
        args.posteriors = args.posteriors or list(QUICK_POSTERIORS)
    posteriors = args.posteriors or list(POSTERIORS)
    samplers = args.samplers or list(SAMPLERS)
    cores = args.cores or min(args.chains, 2)
    seeds = [args.seed_base + i for i in range(args.seeds)]

    header = [
        (f"# pymc {pm.__version__}, pytensor {pytensor.__version__}, arviz {az.__version__}, "
         f"python {platform.python_version()}, {platform.machine()}"),
        f"# {_git_describe()}",
        (f"# budget per sampler: {args.chains} chains x ({args.tune} tune + {args.draws} draws), "
         f"cores={cores}, seeds {seeds}"),
    ]
    if args.note:
        header.append(f"# {args.note}")
    earlier = {}
    if args.peers_from:
        earlier = json.loads(args.peers_from.read_text())
        header.append(
            f"# rows of samplers not run now are from {args.peers_from.name} (same seeds and budget)"
        )
    print("\n".join(header), flush=True)

    logging.getLogger("pymc").setLevel(logging.WARNING)  # no "Sequential sampling ..." per run
    # Kept for the rest of the process, as the runs below go on.
    reports = contextlib.ExitStack().enter_context(tuning_reports()) if args.tuning_figures else None
    store = ReferenceStore(args.reference_file, refresh=args.refresh_reference, cores=cores)
    results, rows, sources = {}, [], {}
    start = time.perf_counter()
    for name in posteriors:
        model, reference, _ = POSTERIORS[name]()
        ref, sources[name] = store.get(name, model, reference)
        if args.reference_only:
            print(f"- {name}: {sources[name]}", flush=True)
            continue
        results[name] = {}
        for sampler_name in samplers:
            per_seed = []
            for seed in seeds:
                t0 = time.perf_counter()
                r = run_one(name, sampler_name, seed, chains=args.chains, tune=args.tune, draws=args.draws,
                            cores=cores, reference=ref)
                per_seed.append(r)
                status = r.get("skipped") or r.get("error") or (
                    f"mean err {r['mean_err']:.2f}, log sd err {r['log_sd_err']:.2f}, "
                    f"min ESS {r['min_ess']:.0f}, R-hat {r['max_rhat']:.3f}")
                print(f"  {name} / {sampler_name} / seed {seed}: {status} "
                      f"[{time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
                if reports:
                    print("    end of tuning, per chain: " + "; ".join(
                        f"drift {t.drift:.2f} (late {t.late_drift:.2f}), climb {t.climb:.2f} (late "
                        f"{t.late_climb:.2f}), spread {t.spread:.3f}, slope {t.slope:.3f}" for t in reports),
                        flush=True)
                    reports.clear()
                if "skipped" in r:
                    break
            results[name][sampler_name] = per_seed
        for sampler_name in ALL_SAMPLERS:
            if sampler_name not in results[name] and sampler_name in earlier.get(name, {}):
                results[name][sampler_name] = earlier[name][sampler_name]
        for sampler_name in ALL_SAMPLERS:
            if sampler_name in results[name]:
                rows.append(table_row(name, sampler_name, results[name][sampler_name]))
    elapsed = time.perf_counter() - start
    if args.reference_only:
        return {"_references": sources}

    table = markdown_table(rows)
    lines = [table, "", LEGEND, "", "References:"]
    lines += [f"- {name}: {source}" for name, source in sources.items()]
    verdict_lines = verdict(results)
    if verdict_lines:
        lines += ["", "Issue 12's done-when (medians over seeds):", *verdict_lines]
    lines.append(f"\nTotal benchmark time {elapsed / 60:.1f} min.")
    text = "\n".join(lines)
    print("\n" + text, flush=True)
    if args.output:
        args.output.write_text("\n".join(header) + "\n\n" + text + "\n")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float) + "\n")
    return {**results, "_table": rows, "_references": sources}


if __name__ == "__main__":
    main()
