"""How often the regions-left-behind warning (decision record 0059) fires on the catalogue's posteriors.

Each posterior of ``pymc_kameleon.problems.real_posteriors`` is sampled with a step's defaults (4 chains,
``cores=1``) for ``--tune`` + ``--draws`` iterations, and every chain's check after its first 1000 draws
is read: whether it warned, and how near its closest block came to being said, as the lesser of two
margins (the block is said when both are positive): its mass's, in nats above -3 (``LEFT_NATS``), and its
distance's, the log of the nearest draw's squared distance over the chi^2_d quantile. A posterior whose
draws are right should be silent with clearly negative margins.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/left_regions_sweep.py [--sampler KAMH|GP-DA-MH]
        [--tuning pooled|per_chain] [--seeds 2025 2026 2027] [--posteriors ...]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

DEFAULT_POSTERIORS = [
    "regression-income", "logistic-glm", "logistic-uncentred-far-start", "eight-schools-centred",
    "eight-schools-noncentred-far-start", "ar2", "garch11", "mixture-2", "gp-hyperparameters", "banana-8d",
    "flower-8d", "two-normals", "normals-5d-scales", "gaussian-50d", "regression-17d-mixed-scales",
    "gp-poisson-latent-noncentred", "lotka-volterra-far-start", "lotka-volterra-lynx-hare",
]


def closest_margin(blocks, draws, draws_log_density) -> float:
    """The largest, over the blocks, of the lesser of the block's two margins (see the module docstring);
    NaN without blocks or without a factorisable draws' covariance."""
    from pymc_kameleon.core.adaptation.left_regions import LEFT_NATS, block_margins

    margins = [
        min(m.mass_nats + LEFT_NATS, math.log(m.nearest / m.far))
        for m in block_margins(blocks, draws, draws_log_density)
    ]
    return max(margins) if margins else math.nan


def run(name: str, sampler: str, tuning: str, seed: int, tune: int, draws: int) -> tuple[str, float]:
    """(what the chains said: 'silent', or the chains that warned, or an error; the closest margin)."""
    import pymc as pm

    import pymc_kameleon as pk
    import pymc_kameleon.steps.left_regions as check
    from pymc_kameleon.problems.real_posteriors import POSTERIORS

    margins = []
    judge = check.regions_left_behind

    def spy(blocks, draws_, log_density):
        margins.append(closest_margin(blocks, draws_, log_density))
        return judge(blocks, draws_, log_density)

    check.regions_left_behind = spy
    try:
        model, _, initvals = POSTERIORS[name]()
        with model, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step_class = pk.KameleonMetropolis if sampler == "KAMH" else pk.GPDelayedAcceptanceMH
            step = step_class(tuning=tuning)
            pm.sample(draws=draws, tune=tune, chains=4, cores=1, step=step, initvals=initvals,
                      random_seed=seed, progressbar=False, compute_convergence_checks=False)
    except ValueError as err:  # GP-DA on a posterior without a likelihood
        return f"not run: {str(err)[:60]}", math.nan
    finally:
        check.regions_left_behind = judge
    said = [str(w.message) for w in caught if "settled for" in str(w.message)]
    who = [text.split("during tuning ")[1].split(" settled")[0] for text in said]
    return (", ".join(who) if who else "silent"), (max(margins) if margins else math.nan)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sampler", choices=["KAMH", "GP-DA-MH"], default="KAMH")
    parser.add_argument("--tuning", choices=["pooled", "per_chain"], default="pooled")
    parser.add_argument("--seeds", type=int, nargs="+", default=[2025, 2026, 2027])
    parser.add_argument("--posteriors", nargs="+", default=DEFAULT_POSTERIORS)
    parser.add_argument("--tune", type=int, default=3000)
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args(argv)
    print(environment_line())
    print(f"# {args.sampler}, tuning {args.tuning}, 4 chains x ({args.tune} + {args.draws}), cores=1\n")
    print("| posterior | seed | said by | closest margin |")
    print("|---|---|---|---|")
    for name in args.posteriors:
        for seed in args.seeds:
            said, margin = run(name, args.sampler, args.tuning, seed, args.tune, args.draws)
            print(f"| {name} | {seed} | {said} | {margin:.2f} |", flush=True)


if __name__ == "__main__":
    main()
