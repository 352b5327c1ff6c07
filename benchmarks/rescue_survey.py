"""Every rescue pooled tuning makes on the real posteriors, with what the rule saw (decision record 0062).

Samples each posterior of ``real_posteriors.py`` with a pooled step's defaults, 4 chains × (3000 tune + 50
draws) (rescues happen only during tuning), and prints one row per rescue: the chain and tuning step, its
deficit (how far the destination's log density is above its own), the gap 10 + 5 sqrt(d/2), its climb
(the rise of its log density between the halves of its recent states, in units of sqrt(d/2)), the width
credit the rule could give it against the destination (the difference of half log-volumes, or none where
a width is unmeasured), and the shares of the recent steps at which the chain and the destination moved.
Run it at two commits to see which rescues a change of the rule removes or adds: a posterior whose rows
are the same has the same draws.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/rescue_survey.py [--posteriors ...]
        [--step KameleonMetropolis|GPDelayedAcceptanceMH] [--seeds 2025 2026 2027]
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

import numpy as np  # noqa: E402


def _instrument(rows: list):
    """Wrap the pooled step's rescue so that each rescue appends its row to ``rows``; returns the function
    that puts the step's own methods back."""
    from pymc_kameleon.core.adaptation.diagnostics import log_density_climb
    from pymc_kameleon.steps import population

    seen = {}
    rescue, wider_by = population.PooledTuning._rescue, population.PooledTuning._wider_by

    def watched_wider_by(self, windows, others, *args):
        states = np.array(windows.recent_population) if windows.recent_population else None
        volumes = population.half_log_volumes(states, population.RESCUE_EVERY) if states is not None else None
        moved = np.any(states[1:] != states[:-1], axis=2).mean(axis=0) if volumes is not None else None
        climb = log_density_climb(windows.recent_log_density, self.dim, min_states=population.RESCUE_EVERY)
        seen[id(self)] = (volumes, moved, climb)
        return wider_by(self, windows, others, *args)

    def watched_rescue(self, own_logp, states, adaptation, window_before, rng):
        seen.pop(id(self), None)
        jump = rescue(self, own_logp, states, adaptation, window_before, rng)
        if jump is not None:
            volumes, moved, climb = seen.get(id(self), (None, None, math.nan))
            to = next(k for k in range(len(states)) if np.array_equal(states[k], jump[0]))
            own = self.this_chain
            credit = math.nan if volumes is None else float(volumes[own] - volumes[to])
            rows.append({
                "chain": own, "step": adaptation.tune_steps, "to": to,
                "deficit": float(jump[1].exact) - own_logp,
                "gap": population.RESCUE_NATS + population.RESCUE_SDS * math.sqrt(self.dim / 2.0),
                "climb": climb, "credit": credit,
                "moved": (math.nan, math.nan) if moved is None else (float(moved[own]), float(moved[to])),
            })
        return jump

    population.PooledTuning._rescue, population.PooledTuning._wider_by = watched_rescue, watched_wider_by

    def restore():
        population.PooledTuning._rescue, population.PooledTuning._wider_by = rescue, wider_by

    return restore


def main(argv=None):
    from pymc_kameleon import GPDelayedAcceptanceMH, KameleonMetropolis
    from pymc_kameleon.problems.real_posteriors import POSTERIORS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = {"KameleonMetropolis": KameleonMetropolis, "GPDelayedAcceptanceMH": GPDelayedAcceptanceMH}
    every = [n for n in POSTERIORS if n != "gallery-lotka-volterra"]  # the gallery's is the lotka-volterra's
    parser.add_argument("--posteriors", nargs="+", default=every)
    parser.add_argument("--step", default="KameleonMetropolis", choices=list(steps))
    parser.add_argument("--seeds", nargs="+", type=int, default=[2025, 2026, 2027])
    parser.add_argument("--tune", type=int, default=3000)
    args = parser.parse_args(argv)
    rows = []
    restore = _instrument(rows)
    try:
        _survey(args, steps[args.step], rows)
    finally:
        restore()


def _survey(args, step_class, rows):
    """Sample each posterior and seed, printing its rescues' rows."""
    import pymc as pm

    from pymc_kameleon.problems.real_posteriors import POSTERIORS

    print(f"# {environment_line()}")
    print(f"# {args.step}, 4 chains x ({args.tune} + 50), cores=1, seeds {args.seeds}\n")
    print("| posterior | seed | chain | step | to | deficit | gap | climb | credit | moved (chain, to) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.posteriors:
        for seed in args.seeds:
            rows.clear()
            model, _, initvals = POSTERIORS[name]()
            with model, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pm.sample(draws=50, tune=args.tune, chains=4, cores=1, step=step_class(), initvals=initvals,
                          random_seed=seed, progressbar=False, compute_convergence_checks=False)
            if not rows:
                print(f"| {name} | {seed} | no rescue | | | | | | | |", flush=True)
            for r in rows:
                cells = [name, seed, r["chain"], r["step"], r["to"], f"{r['deficit']:.1f}", f"{r['gap']:.1f}",
                         f"{r['climb']:.2f}", f"{r['credit']:.1f}", "{:.2f}, {:.2f}".format(*r["moved"])]
                print("| " + " | ".join(map(str, cells)) + " |", flush=True)


if __name__ == "__main__":
    main()
