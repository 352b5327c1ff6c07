"""SMC where the random walks fail: KASS and PyMC's IMH kernel on the frontier of ``real_posteriors.py``.

On the latent Poisson GP regressions, the 8-d banana and flower and the centred eight schools no
gradient-free MCMC sampler converges at 4 x (3000 + 6000) (RESULTS, "Real posteriors"). Tempering
reaches a curved or funnel-shaped posterior from the prior, each stage's particles showing the next
stage's moves its shape, which a chain started in one place cannot learn. This script asks whether
``pm.sample_smc`` with ``kernel=KASS`` (its defaults, and waste-free) or with PyMC's default kernel
(IMH) gets those posteriors right, and at what cost, against the same references as
``real_posteriors.py`` (exact, or a long NUTS run).

Per run (one chain of ``--particles`` particles, ``cores=1``): the largest error of a posterior mean
over the scalar parameters, in reference sds (*mean err*), the largest abs(log(sd / reference sd))
(*sd err*), the log-density evaluations (the initial particles plus every proposal; PyMC's kernels
counted as ``kass_smc.CountedIMH`` counts them), wall seconds, and log Z with its single-run standard
error (KASS; PyMC's kernels give none). The particles' ESS is not reported: after resampling they are
not a Markov chain that ArviZ's ESS describes.

    python benchmarks/smc_real_posteriors.py --seeds 1 2 3
    python benchmarks/smc_real_posteriors.py --posteriors gp-poisson-latent-noncentred --samplers KASS
    python benchmarks/smc_real_posteriors.py --quick          # smoke test
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread

one_blas_thread()  # before NumPy is imported (see _common.py)

import argparse  # noqa: E402
import logging  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from _references import REFERENCE_FILE, ReferenceStore, compare, free_variable_names, scalar_draws  # noqa: E402
from kass_smc import CountedIMH, run_smc  # noqa: E402

from pymc_kameleon import KASS  # noqa: E402
from pymc_kameleon.problems.real_posteriors import POSTERIORS  # noqa: E402

FRONTIER = ("gp-poisson-latent-noncentred", "gp-poisson-latent", "eight-schools-centred", "banana-8d",
            "flower-8d")
SAMPLERS = {
    "PyMC IMH (default kernel)": (CountedIMH, {}),
    "KASS": (KASS, {}),
    "KASS waste-free": (KASS, {"waste_free": True}),
}


def skip_reason(model) -> str | None:
    """Why SMC cannot run on ``model``: it draws the first particles from the prior, which a flat prior
    (the density given by a Potential, as for the banana and the flower) does not have."""
    flat = [rv.name for rv in model.free_RVs if type(rv.owner.op).__name__ in ("FlatRV", "HalfFlatRV")]
    return f"skipped: a flat prior on {flat} (SMC draws its first particles from the prior)" if flat else None


def one_run(model, sampler: str, seed: int, particles: int, reference) -> dict:
    """One ``pm.sample_smc`` chain of ``sampler`` on ``model``, scored against ``reference``."""
    kernel, options = SAMPLERS[sampler]
    names = free_variable_names(model)
    result = run_smc(model, kernel, particles, seed, model.free_RVs[0].name, **options)
    scores = compare(scalar_draws(result["idata"].posterior, names), reference)
    return dict(mean_err=scores["mean_err"], worst=scores["worst_mean"], sd_err=scores["log_sd_err"],
                evals=result["evals"], seconds=result["seconds"], log_z=result["log_z"], se=result["se"],
                stages=result["stages"])


def log_z_text(run: dict) -> str:
    """log Z, with its standard error where the kernel gives one."""
    return f"{run['log_z']:.2f}" + (f" ± {run['se']:.2f}" if np.isfinite(run["se"]) else "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posteriors", nargs="+", choices=sorted(POSTERIORS), default=list(FRONTIER))
    parser.add_argument("--samplers", nargs="+", choices=list(SAMPLERS), default=list(SAMPLERS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--particles", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="200 particles, one seed, the first posterior")
    args = parser.parse_args(argv)
    if args.quick:
        args.particles, args.seeds, args.posteriors = 200, args.seeds[:1], args.posteriors[:1]
    warnings.filterwarnings("ignore")
    logging.getLogger("arviz").setLevel(logging.ERROR)  # R-hat of one chain: not reported
    logging.getLogger("pymc").setLevel(logging.ERROR)
    store = ReferenceStore(REFERENCE_FILE)
    print(f"# {environment_line()}")
    print(f"# {args.particles} particles, one chain per seed, seeds {args.seeds}\n")
    print("| posterior | sampler | mean err (sd) | sd err (log) | evaluations | seconds | log Z ± SE |")
    print("|---|---|---|---|---|---|---|")
    for name in args.posteriors:
        model, spec, _ = POSTERIORS[name]()
        reason = skip_reason(model)
        if reason:
            print(f"| {name} | every sampler | {reason} | | | | |")
            continue
        reference, _ = store.get(name, model, spec)
        for sampler in args.samplers:
            runs = []
            for seed in args.seeds:
                r = one_run(model, sampler, seed, args.particles, reference)
                runs.append(r)
                print(f"#   {name}, {sampler}, seed {seed}: mean err {r['mean_err']:.3f} ({r['worst']}), "
                      f"sd err {r['sd_err']:.3f}, {r['evals']} evaluations, {r['stages']} stages, "
                      f"{r['seconds']:.0f} s, log Z {log_z_text(r)}", flush=True)

            def col(key, runs=runs):
                return np.array([r[key] for r in runs], dtype=float)

            log_z = ", ".join(log_z_text(r) for r in runs)
            print(f"| {name} | {sampler} | {np.median(col('mean_err')):.3f} ({col('mean_err').max():.3f}) | "
                  f"{np.median(col('sd_err')):.3f} ({col('sd_err').max():.3f}) | "
                  f"{np.median(col('evals')):.3g} | {np.median(col('seconds')):.0f} | {log_z} |", flush=True)


if __name__ == "__main__":
    main()
