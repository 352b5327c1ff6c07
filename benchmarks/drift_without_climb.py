"""A chain exploring a ridge against one walking in: the end-of-tuning drift and climb, and what warns.

The model: mu ~ N(0, 1000) in 3-d and five observations of sum(mu) with noise sd 10, a flat ridge with
posterior sds of about 816 along it and 4.5 across it. ``KameleonMetropolis()`` from its start search
(tune=1500, 1 and 2 chains, seeds 2-9) and from starts off or along the ridge without it (the controls,
whose chains walk in). For every chain: the drift of its last tuning states in learned sds, and over their
last half; the climb of their log density in sqrt(d/2), and over their last half; whether the step warned
that the chain was still moving; and the draws' sds against the posterior's (816.5 along each mu).

Run: ``OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/drift_without_climb.py`` (about 2 minutes);
``--quick``: one seed, one chain.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import pymc as pm

from pymc_kameleon import KameleonMetropolis
from pymc_kameleon.problems.scales import FLAT_RIDGE_SD, flat_ridge

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import tuning_reports  # noqa: E402

FAR_STARTS = [  # (tune, start, seed): off the ridge, or on it and far along
    (1000, (3000.0, 3000.0, 3000.0), 3),
    (1000, (2000.0, -2000.0, 52.0), 2),
    (1000, (2000.0, -2000.0, 52.0), 3),
    (1500, (3000.0, -3000.0, 52.0), 2),
    (700, (1500.0, 1500.0, -2950.0), 2),
]


def run(tune: int, start, seed: int, chains: int, draws: int) -> list[str]:
    """One pm.sample; a table row per chain."""
    with tuning_reports() as reports, flat_ridge(start), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = KameleonMetropolis(start="search" if start is None else "initial_point")
        idata = pm.sample(step=step, tune=tune, draws=draws, chains=chains, cores=1, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
    moving = " ".join(str(w.message) for w in caught if "still moving at the end of tuning" in str(w.message))
    rows = []
    for chain, r in enumerate(reports):
        said = f"chain {chain} was still moving" in moving or (chains == 1 and bool(moving))
        sds = idata.posterior["mu"].values[chain].std(axis=0) / FLAT_RIDGE_SD
        where = "search" if start is None else start
        rows.append(
            f"| {where} | {tune} | {chains} | {seed} | {chain} | {r.drift:.2f} ({r.late_drift:.2f}) |"
            f" {r.climb:.2f} ({r.late_climb:.2f}) | {'yes' if said else 'no'} | "
            f"{' '.join(f'{s:.2f}' for s in sds)} |"
        )
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, one chain, 300 draws")
    args = parser.parse_args(argv)
    runs = [(1500, None, seed, chains) for chains in (1, 2) for seed in range(2, 10)]
    runs += [(tune, start, seed, 1) for tune, start, seed in FAR_STARTS]
    draws = 3000
    if args.quick:
        runs, draws = [(1500, None, 2, 1)], 300
    print("| start | tune | chains | seed | chain | drift (last half) | climb (last half) | still moving? "
          "| draws' sd / posterior sd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tune, start, seed, chains in runs:
        for row in run(tune, start, seed, chains, draws):
            print(row, flush=True)


if __name__ == "__main__":
    main()
