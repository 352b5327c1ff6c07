"""Waste-free KASS against KASS's sweeps and PyMC's IMH kernel on the 8-d banana bridge (issue 45).

The target of ``kass_smc.py --experiments banana``: the twisted banana B(b=0.1, v=100) in 8
dimensions, reached from N(0, 50² I) by PyMC's geometric bridge, exact log Z = 0. Every variant runs
one chain per seed with the same seeds; a variant is a name, the kernel, its particle count N and its
options. The waste-free variants keep every state of M = N / P chains of length P, so a stage costs
N - M likelihood evaluations, against about 33 N for KASS's "moved" sweep rule and 8 N for PyMC's IMH
at N = 2000: at N = 16000 they spend about IMH's budget at N = 2000.

Per variant: mean log Z error with its standard error over the runs, mean abs(log Z error), the
coverage of log Z ± 2 SE (KASS's single-run error bars), the banana's quantile error, likelihood
evaluations and wall seconds (compilation included, one process, one BLAS thread).

Usage::

    python benchmarks/kass_waste_free.py --seeds 30                       # all variants
    python benchmarks/kass_waste_free.py --seeds 10 --variants "PyMC IMH" "KASS waste-free, P=50"
    python benchmarks/kass_waste_free.py --quick                          # smoke test

The ``particles`` rows need that package beside this one (``pip install --no-deps particles joblib``:
its metadata still pins NumPy < 2, which it runs without); its likelihood is the banana's NumPy
density, evaluated on all particles at once.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread

one_blas_thread()  # before NumPy is imported (see _common.py)

import argparse

import numpy as np
from kass_smc import BANANA_PRIOR_SD, CountedIMH, banana_bridge_model, banana_metrics, evidence_table, run_smc

from pymc_kameleon import KASS
from pymc_kameleon.problems.targets import banana

# name: (kernel, particles, options)
VARIANTS = {
    "PyMC IMH": (CountedIMH, 2000, {}),
    "KASS (moved sweeps)": (KASS, 2000, {}),
    "KASS, n_subsample=250": (KASS, 2000, {"n_subsample": 250}),
    "KASS, n_subsample=500": (KASS, 2000, {"n_subsample": 500}),
    "KASS waste-free, P=20": (KASS, 16000, {"waste_free": True, "chain_length": 20}),
    "KASS waste-free, P=50": (KASS, 16000, {"waste_free": True, "chain_length": 50}),
    "KASS waste-free, P=100": (KASS, 16000, {"waste_free": True, "chain_length": 100}),
    "KASS waste-free, P=200": (KASS, 16000, {"waste_free": True, "chain_length": 200}),
    "KASS waste-free, N=2000, P=50": (KASS, 2000, {"waste_free": True, "chain_length": 50}),
    "KASS waste-free, N=2000, P=100": (KASS, 2000, {"waste_free": True, "chain_length": 100}),
    "KASS waste-free, N=2000, P=200": (KASS, 2000, {"waste_free": True, "chain_length": 200}),
    "KASS waste-free, P=800": (KASS, 16000, {"waste_free": True, "chain_length": 800}),
    # The `particles` package (Chopin; pip install --no-deps particles joblib): waste-free SMC with its
    # defaults (adaptive tempering at ESS N/2, random-walk moves scaled to the particles, chains of 10).
    "particles (waste-free, its defaults)": ("particles", 2000, {"len_chain": 10}),
    "particles (waste-free), N=16000": ("particles", 16000, {"len_chain": 10}),
}


def run_particles(target, draws: int, seed: int, len_chain: int) -> dict:
    """One run of ``particles``' waste-free adaptive tempering on the same bridge (prior N(0, 50² I)):
    draws = M P states, log Z and its single-run SE (its Var_logLt collector, divided by the states)."""
    import time

    import particles
    from particles import distributions as dists
    from particles import resampling
    from particles import smc_samplers as ssp

    calls = [0]

    class Bridge(ssp.TemperingBridge):
        def logtarget(self, theta):
            calls[0] += len(theta)
            return target.log_density(theta["x"]) - target.log_normalizer

    start = time.perf_counter()
    np.random.seed(seed)  # particles draws from NumPy's global generator
    base = dists.StructDist({"x": dists.MvNormal(loc=np.zeros(target.dim), scale=BANANA_PRIOR_SD,
                                                 cov=np.eye(target.dim))})
    fk = ssp.AdaptiveTempering(Bridge(base_dist=base), len_chain=len_chain)
    alg = particles.SMC(fk=fk, N=draws // len_chain, collect=[ssp.Var_logLt()], verbose=False)
    alg.run()
    seconds = time.perf_counter() - start
    samples = alg.X.theta["x"][resampling.multinomial(alg.W)]
    se = float(np.sqrt(alg.summaries.var_logLt[-1] / draws))
    return dict(samples=samples, log_z=float(alg.logLt), se=se, evals=calls[0], seconds=seconds,
                stages=len(alg.summaries.var_logLt), idata=None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=101, help="first seed")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 1 seed, a sixteenth of the particles, three variants")
    args = parser.parse_args(argv)
    shrink = 16 if args.quick else 1
    if args.quick:
        args.seeds = 1
        args.variants = ["PyMC IMH", "KASS (moved sweeps)", "KASS waste-free, P=20"]
    target = banana(dim=8, b=0.1, v=100.0)
    model = banana_bridge_model(target)
    exact = target.sample(2000, rng=args.seed + 10_000) / np.sqrt(np.diag(target.exact_cov))
    print(f"# {environment_line()}; seeds {args.seed}..{args.seed + args.seeds - 1}\n")
    runs = {name: [] for name in args.variants}
    for seed in range(args.seed, args.seed + args.seeds):
        for name in args.variants:
            kernel, draws, options = VARIANTS[name]
            draws //= shrink
            if shrink > 1 and "chain_length" in options:
                options = {**options, "chain_length": max(2, options["chain_length"] // shrink)}
            if kernel == "particles":
                r = run_particles(target, draws, seed, **options)
            else:
                r = run_smc(model, kernel, draws, seed, "x", **options)
            r.update(banana_metrics(target, r["samples"], exact, seed))
            del r["idata"], r["samples"]
            runs[name].append(r)
            print(f"#   {name}, seed {seed}: log Z {r['log_z']:+.3f} (se {r['se']:.3f}), "
                  f"qerr {r['qerr']:.4f}, {r['evals']} evals, {r['seconds']:.1f} s",
                  file=sys.stderr, flush=True)
    print("| sampler | N | quantile error | likelihood evals | wall s |")
    print("|---|---|---|---|---|")
    for name, rs in runs.items():
        col = lambda key, rs=rs: np.array([r[key] for r in rs], dtype=float)  # noqa: E731
        print(f"| {name} | {VARIANTS[name][1] // shrink} | {col('qerr').mean():.4f} | "
              f"{col('evals').mean():.3g} | {np.median(col('seconds')):.1f} (median) |")
    print(evidence_table(runs))


if __name__ == "__main__":
    main()
