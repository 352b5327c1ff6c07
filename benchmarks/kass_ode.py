"""KASS on a non-vectorisable ODE: PyMC's gallery Lotka-Volterra model (``odeint`` in an ``as_op`` Op,
about 1.6 ms per solve, seven parameters), ``pm.sample_smc`` with 1000 particles (issue 45). The
gallery's ``initval=`` are removed, so that the particles are drawn from the priors.

Samplers: PyMC's default kernel (IMH, its correlation sweep rule), KASS with its defaults (the
"moved" sweep rule), and waste-free KASS (chains of ``chain_length`` states, every state kept; at
the last stage ``final_thinning`` moves between kept states). One
chain per seed, ``cores=1``. Per run: ODE solves (the initial particles plus every proposal), wall
seconds, the largest error of a posterior mean in reference sd (the NUTS reference of
``benchmarks/data/real_posteriors_reference.json``, a differentiable twin of the model), and log Z with
its single-run standard error where the kernel has one. The evidence's check: over the seeds, the
chi-squared of the log Z estimates about their precision-weighted mean, and the largest
abs(log Z - mean) / SE.

Usage::

    python benchmarks/kass_ode.py --seeds 1 2 3 4 5
    python benchmarks/kass_ode.py --seeds 1 --samplers "KASS waste-free, P=20"
    python benchmarks/kass_ode.py --quick                 # smoke test
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
import warnings

import numpy as np
from _references import REFERENCE_FILE
from kass_smc import CountedIMH, run_smc

from pymc_kameleon import KASS
from pymc_kameleon.problems.gallery import gallery_lotka_volterra

NAMES = ("alpha", "beta", "gamma", "delta", "xto", "yto", "sigma")
SAMPLERS = {
    "PyMC IMH (default kernel)": (CountedIMH, {}),
    "KASS (moved sweeps)": (KASS, {}),
    "KASS, correlation sweep rule": (KASS, {"n_steps": "correlation"}),
    # Fewer sweeps per stage (PyMC's MH kernel's rule stops when the correlations drop by less than this).
    "KASS, correlation sweep rule, threshold 0.05": (
        KASS, {"n_steps": "correlation", "correlation_threshold": 0.05}
    ),
    # Waste-free with its default final_thinning (5 moves between kept states at the last stage).
    "KASS waste-free, P=10": (KASS, {"waste_free": True, "chain_length": 10}),
    "KASS waste-free, P=20": (KASS, {"waste_free": True, "chain_length": 20}),
    "KASS waste-free, P=50": (KASS, {"waste_free": True, "chain_length": 50}),
    "KASS waste-free, P=100": (KASS, {"waste_free": True, "chain_length": 100}),
    # Every state of the last stage kept (the default before decision 0053), and twice the default.
    "KASS waste-free, P=50, final_thinning=1": (
        KASS, {"waste_free": True, "chain_length": 50, "final_thinning": 1}
    ),
    "KASS waste-free, P=50, final_thinning=10": (
        KASS, {"waste_free": True, "chain_length": 50, "final_thinning": 10}
    ),
}


def one_run(model, kernel, options, seed, draws, reference) -> dict:
    r = run_smc(model, kernel, draws, seed, "alpha", **options)
    post = r["idata"].posterior
    errors = {n: abs(float(post[n].values.mean()) - reference[n][0]) / reference[n][1] for n in NAMES}
    return dict(evals=r["evals"], seconds=r["seconds"], log_z=r["log_z"], se=r["se"],
                err=max(errors.values()), worst=max(errors, key=errors.get), stages=r["stages"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--samplers", nargs="+", choices=list(SAMPLERS), default=list(SAMPLERS))
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 1 seed, 100 particles, IMH and waste-free KASS (chains of 10)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.draws = args.seeds[:1], 100
        args.samplers = ["PyMC IMH (default kernel)", "KASS waste-free, P=10"]
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    reference = json.loads(REFERENCE_FILE.read_text())["gallery-lotka-volterra"]["params"]
    model = gallery_lotka_volterra()[0]
    for rv in model.free_RVs:  # the gallery's initval= would start every particle there (KASS says so)
        model.rvs_to_initial_values[rv] = None
    print(f"# {environment_line()}")
    print(f"# gallery Lotka-Volterra, pm.sample_smc(draws={args.draws}, chains=1, cores=1), "
          f"seeds {args.seeds}\n")
    print("| sampler | ODE solves | wall s | max mean error (ref sd) | log Z ± SE per seed | chi² / dof | "
          "max abs(log Z - mean) / SE |")
    print("|---|---|---|---|---|---|---|")
    for name in args.samplers:
        kernel, options = SAMPLERS[name]
        runs = []
        for seed in args.seeds:
            runs.append(one_run(model, kernel, options, seed, args.draws, reference))
            r = runs[-1]
            print(f"#   {name}, seed {seed}: {r['evals']} solves, {r['seconds']:.1f} s, err {r['err']:.3f} "
                  f"({r['worst']}), log Z {r['log_z']:.3f} ± {r['se']:.3f}, {r['stages']} stages",
                  file=sys.stderr, flush=True)
        log_z, se = np.array([r["log_z"] for r in runs]), np.array([r["se"] for r in runs])
        per_seed = ", ".join(f"{z:.2f} ± {s:.2f}" for z, s in zip(log_z, se, strict=True))
        if np.all(np.isfinite(se)) and len(runs) > 1:
            w = 1 / se**2
            mean = np.sum(w * log_z) / np.sum(w)
            chi2 = f"{np.sum(w * (log_z - mean) ** 2) / (len(runs) - 1):.2f}"
            worst = f"{np.max(np.abs(log_z - mean) / se):.2f}"
        else:
            chi2 = worst = "n/a"
        col = lambda key, runs=runs: np.array([r[key] for r in runs], dtype=float)  # noqa: E731
        print(f"| {name} | {np.median(col('evals')):.0f} (median; {col('evals').min():.0f}–"
              f"{col('evals').max():.0f}) | {np.median(col('seconds')):.1f} | {np.median(col('err')):.3f} "
              f"(worst {col('err').max():.3f}) | {per_seed} | {chi2} | {worst} |", flush=True)


if __name__ == "__main__":
    main()
