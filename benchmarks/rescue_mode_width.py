"""Pooled tuning's rescue on two modes of equal mass and different widths (decision record 0057).

The target is the equal-weight mixture of N(3 - L, (1/k)^2 I_d) and N(3, I_d) (L = 6 unless a case gives
it): the narrow mode's log density is d log k nats higher for the same mass. Two of four chains start in
each mode (``start="initial_point"``, as a user looking for several modes would). With the rescue
judged by log densities alone the chains in the wide mode jumped to the narrow one at d log k above the
gap 10 + 5 sqrt(d/2), leaving every draw in the narrow mode and R-hat near 1; counting each chain's
spread (the default) leaves each mode its two chains. Per (d, k, L, seed): the share of draws in the
narrow mode (exact: 0.5), the chains rescued, ArviZ's largest split R-hat (which should flag chains
that cannot cross between the modes) and the chains that say they left a region the draws never reach
(decision record 0059: where every chain ends in one mode, R-hat cannot see the other).

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/rescue_mode_width.py [--seeds 1 2 3]
        [--cases 2:10 10:10 5:100 20:10 30:3 50:3 10:100:20 10:10:200] [--without-width] [--per-chain]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402


def run(dim: int, k: float, seed: int, tune: int, draws: int, apart: float = 6.0, tuning: str = "pooled"):
    """(share of the draws in the narrow mode, the chains rescued, max split R-hat, the chains that said
    they left a region: their indices, pooled, or how many, per chain)."""
    import arviz as az
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis

    with pm.Model():
        x = pm.Flat("x", shape=dim)  # the mixture alone: the modes' masses equal wherever they are
        narrow = pm.logp(pm.Normal.dist(3.0 - apart, 1.0 / k), x).sum()
        wide = pm.logp(pm.Normal.dist(3.0, 1.0), x).sum()
        pm.Potential("mix", pm.math.logaddexp(narrow, wide))
        starts = [{"x": np.full(dim, 3.0 - apart)}] * 2 + [{"x": np.full(dim, 3.0)}] * 2
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step = KameleonMetropolis(start="initial_point", tuning=tuning)
            idata = pm.sample(step=step, initvals=starts, chains=4, cores=1, tune=tune, draws=draws,
                              random_seed=seed, progressbar=False, compute_convergence_checks=False,
                              discard_tuned_samples=False)
    share = float((idata.posterior["x"].values[..., 0] < 3.0 - apart / 2).mean())
    stats = idata.warmup_sample_stats
    rescued = np.flatnonzero(stats["rescued"].values.any(axis=1)).tolist() if "rescued" in stats else []
    rhat = float(az.rhat(idata.posterior)["x"].max())
    said = [re.search(r"during tuning (chain \d+|this chain) settled", str(w.message)) for w in caught]
    left = [m.group(1).removeprefix("chain ") for m in said if m]
    return share, rescued, rhat, left


def _said(left) -> str:
    """The chains that said they left a region: by index (pooled), or how many (per chain, unnamed)."""
    if not left:
        return "none"
    named = [c for c in left if c != "this chain"]
    return ", ".join(named) if len(named) == len(left) else f"{len(left)} (unnamed: per chain)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    cases = ["2:10", "10:10", "5:100", "20:10", "30:3", "50:3", "10:100:20", "10:10:200"]
    parser.add_argument("--cases", nargs="+", default=cases,
                        help="d:k or d:k:L (L: the modes' distance in the wide mode's sds, 6 if not given)")
    parser.add_argument("--tune", type=int, default=3000)
    parser.add_argument("--draws", type=int, default=3000)
    parser.add_argument("--without-width", action="store_true",
                        help="the rule before decision 0057: log densities alone")
    parser.add_argument("--per-chain", action="store_true", help="tuning='per_chain': no pooling, no rescue")
    args = parser.parse_args(argv)
    if args.without_width:
        import pymc_kameleon.steps.population as population

        population.half_log_volumes = lambda states, min_steps: None
    print(environment_line())
    rule = "log densities alone (before 0057)" if args.without_width else "with the chains' spreads (0057)"
    tuning = "per_chain" if args.per_chain else "pooled"
    print(f"# tuning {tuning}; rescue rule: {rule}; 4 chains x ({args.tune} + {args.draws}), two started in "
          "each mode\n")
    print("| d | k | L | d log k (nats) | gap (nats) | seed | share in the narrow mode | chains rescued "
          "| max R-hat | chains that left a region (0059) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in args.cases:
        fields = case.split(":")
        dim, k, apart = int(fields[0]), float(fields[1]), float(fields[2]) if len(fields) > 2 else 6.0
        gap = 10.0 + 5.0 * np.sqrt(dim / 2.0)
        for seed in args.seeds:
            share, rescued, rhat, left = run(dim, k, seed, args.tune, args.draws, apart, tuning)
            print(f"| {dim} | {k:g} | {apart:g} | {dim * np.log(k):.1f} | {gap:.1f} | {seed} | {share:.3f} | "
                  f"{rescued or 'none'} | {rhat:.3f} | {_said(left)} |", flush=True)


if __name__ == "__main__":
    main()
