"""The multilevel guide's two examples against `KameleonMetropolis` and MLDA without its error model.

Runs the guide's own code blocks (read from ``docs/guide/multilevel.md``, so the figures follow the
page): the explicit-Euler decay and the ``solve_ivp`` decay at two tolerances, each sampled by MLDA as
the guide calls it (its defaults: the adaptive error model on), by ``MLDA(adaptive_error_model=False)``
and by ``KameleonMetropolis()`` on the fine model alone, 4 chains x (1000 + 1000), ``cores=1``.

    python -W ignore benchmarks/mlda_guide_examples.py [--seeds 1]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line  # noqa: E402

GUIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "guide", "multilevel.md")


def guide_models(marker: str) -> tuple:
    """``(coarse, fine)`` from the guide's block that contains ``marker``: its code up to the sampling."""
    text = open(GUIDE, encoding="utf-8").read()
    block = next(b for b in re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M) if marker in b)
    setup = block.split("with fine:")[0]
    names = {}
    exec(compile(setup, "multilevel.md", "exec"), names)  # noqa: S102 - the guide's own code
    return names["coarse"], names["fine"]


def run(example: str, sampler: str, seed: int) -> str:
    import arviz as az
    import pymc as pm

    from pymc_kameleon import MLDA, KameleonMetropolis

    coarse, fine = guide_models({"euler": "euler_step=0.1", "solve_ivp": "build(rtol=1e-2)"}[example])
    with fine:
        step = {
            "MLDA (defaults)": lambda: MLDA(coarse_models=[coarse]),  # as both blocks call it
            "MLDA(adaptive_error_model=False)": lambda: MLDA(
                coarse_models=[coarse], adaptive_error_model=False
            ),
            "KameleonMetropolis": KameleonMetropolis,
        }[sampler]()
        start = time.perf_counter()
        idata = pm.sample(step=step, chains=4, tune=1000, draws=1000, cores=1, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
        seconds = time.perf_counter() - start
    ess = float(az.ess(idata).to_array().min())
    rhat = float(az.rhat(idata).to_array().max())
    solves = int(idata.sample_stats["cumulative_logp_evals"].isel(draw=-1).sum())
    moved = float(idata.sample_stats["accepted"].mean())
    return (f"| {example} | {sampler} | {seed} | {ess:.0f} | {rhat:.3f} | {solves} | {ess / solves:.3f} | "
            f"{seconds:.1f} | {ess / seconds:.1f} | {moved:.2f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    examples = ["euler", "solve_ivp"]
    parser.add_argument("--examples", nargs="+", default=examples, choices=examples)
    args = parser.parse_args(argv)
    print(f"# {environment_line()}")
    print("| example | sampler | seed | min ESS | max R-hat | fine solves | ESS per solve | s | ESS/s "
          "| moved |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for example in args.examples:
        for seed in args.seeds:
            for sampler in ("MLDA (defaults)", "MLDA(adaptive_error_model=False)", "KameleonMetropolis"):
                print(run(example, sampler, seed), flush=True)


if __name__ == "__main__":
    main()
