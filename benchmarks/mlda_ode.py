"""MLDA with a loose-tolerance coarse ODE, against our single-level steps and PyMC's on the fine model.

The fine model is PyMC's gallery Lotka-Volterra model (``odeint`` at its default tolerances in an
``as_op`` Op; ``pymc_kameleon.problems.gallery``); the coarse model is the same with ``rtol = atol =
--tolerance`` (about half a fine solve's time at 1e-3). Every sampler runs 2 chains x (2000 + 2000),
``cores=1``, as issue 44's yardstick. Reported (median over seeds, worst in brackets): largest |mean
error| in NUTS-reference sds (the cached reference of ``benchmarks/real_posteriors.py``), min bulk ESS,
max R-hat, fine solves per iteration (tuning, the start search and the error model's solves included),
coarse solves per iteration, ESS per fine solve, and ESS per second of ``pm.sample``.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/mlda_ode.py [--seeds 1 2 3] [--tolerance 1e-3]
        [--samplers MLDA MLDA-AEM KAMH GP-DA-MH DEMetropolisZ] [--quick]

``--samplers MLDA-AEM-GP MLDA-AEM-GP-exact`` adds a GP level between the two, with and without its noise
variance (not in the default run).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import (  # noqa: E402
    environment_line,
    fine_and_coarse_evaluations,
    one_blas_thread,
    timed_sample,
)

one_blas_thread()  # before NumPy is imported

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
from _references import REFERENCE_FILE  # noqa: E402

from pymc_kameleon import MLDA, GPDelayedAcceptanceMH, GPLevel, KameleonMetropolis  # noqa: E402
from pymc_kameleon.problems.gallery import (  # noqa: E402
    gallery_lotka_volterra,
    gallery_lotka_volterra_coarse,
)

NAMES = ("alpha", "beta", "gamma", "delta", "xto", "yto", "sigma")
SAMPLERS = ("MLDA", "MLDA-AEM", "MLDA-AEM-GP", "MLDA-AEM-GP-exact", "KAMH", "GP-DA-MH", "DEMetropolisZ")
DEFAULT_SAMPLERS = ("MLDA", "MLDA-AEM", "KAMH", "GP-DA-MH", "DEMetropolisZ")


def run(sampler: str, seed: int, tolerance: float, reference: dict, tune=2000, draws=2000) -> dict:
    chains = 2
    model, _, _ = gallery_lotka_volterra()
    coarse = gallery_lotka_volterra_coarse(tolerance)
    with model:
        step = {
            "MLDA": lambda: MLDA(coarse_models=[coarse], adaptive_error_model=False),
            "MLDA-AEM": lambda: MLDA(coarse_models=[coarse], adaptive_error_model=True),
            # A GP level between the grids (subchains [2, 3], as on the groundwater problem), its noise
            # variance fitted (the default) or fixed at 0 (the GP as an exact function, the default before).
            "MLDA-AEM-GP": lambda: MLDA(coarse_models=[coarse, GPLevel()], subsampling_rates=[2, 3],
                                        adaptive_error_model=True),
            "MLDA-AEM-GP-exact": lambda: MLDA(
                coarse_models=[coarse, GPLevel(hyperparameters={"noise_variance": 0.0})],
                subsampling_rates=[2, 3], adaptive_error_model=True,
            ),
            "KAMH": KameleonMetropolis,
            "GP-DA-MH": GPDelayedAcceptanceMH,
            "DEMetropolisZ": pm.DEMetropolisZ,
        }[sampler]()
    idata, seconds = timed_sample(model, step, tune=tune, draws=draws, chains=chains, seed=seed)
    post = idata.posterior
    ess = min(float(az.ess(post[n].values)) for n in NAMES)
    rhat = max(float(az.rhat(post[n].values)) for n in NAMES)
    err = max(abs(float(post[n].values.mean()) - reference[n][0]) / reference[n][1] for n in NAMES)
    iterations = chains * (tune + draws)
    gp_levels = (1,) if "-GP" in sampler else ()
    fine, coarse_evals = fine_and_coarse_evaluations(idata, sampler, iterations, gp_levels)
    return {
        "err": err, "ess": ess, "rhat": rhat, "fine_per_iter": fine / iterations,
        "coarse_per_iter": coarse_evals / iterations, "ess_per_fine": ess / fine, "ess_per_s": ess / seconds,
    }


def _cell(values, fmt, worst):
    return f"{fmt.format(float(np.median(values)))} ({fmt.format(worst(values))})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--samplers", nargs="+", choices=SAMPLERS, default=list(DEFAULT_SAMPLERS))
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 1 seed, 2 x (100 + 100), MLDA-AEM and KAMH")
    args = parser.parse_args(argv)
    budget = (2000, 2000)
    if args.quick:
        args.seeds, args.samplers, budget = args.seeds[:1], ["MLDA-AEM", "KAMH"], (100, 100)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    reference = json.loads(REFERENCE_FILE.read_text())["gallery-lotka-volterra"]["params"]
    print(f"# {environment_line()}")
    print(f"# fine: odeint defaults; coarse: rtol = atol = {args.tolerance:g}; 2 chains x ({budget[0]} + "
          f"{budget[1]}), cores=1, seeds {args.seeds}; cells: median over seeds (worst)")
    print()
    print("| sampler | mean err (ref sd) | min ESS | max R-hat | fine solves / iter | coarse solves / iter | "
          "ESS per fine solve | ESS/s |")
    print("|---|---|---|---|---|---|---|---|")
    for sampler in args.samplers:
        results = [run(sampler, seed, args.tolerance, reference, *budget) for seed in args.seeds]

        def get(key, results=results):
            return [r[key] for r in results]

        print(f"| {sampler} | {_cell(get('err'), '{:.2f}', max)} | {_cell(get('ess'), '{:.0f}', min)} | "
              f"{_cell(get('rhat'), '{:.3f}', max)} | {_cell(get('fine_per_iter'), '{:.2f}', max)} | "
              f"{_cell(get('coarse_per_iter'), '{:.2f}', max)} | "
              f"{_cell(get('ess_per_fine'), '{:.4f}', min)} | "
              f"{_cell(get('ess_per_s'), '{:.1f}', min)} |", flush=True)


if __name__ == "__main__":
    main()
