"""MLDA on the groundwater-flow inverse problem (issue 46, problem (a)), against tinyDA and single-level
steps.

The fine model is :func:`pymc_kameleon.problems.groundwater.groundwater_model` on ``--fine-cells``
cells a side (48: several ms a solve), the coarse one the same on ``--coarse-cells`` (8: a few
percent of a fine solve, with a bias of up to two thirds of the noise sd at a well). Every sampler runs
2 chains x (2000 + 2000) (``--tune``, ``--draws``) with one process, as ``mlda_ode.py``:

* ``MLDA`` and ``MLDA-AEM`` (``adaptive_error_model=True``): ours, subchains of 5 coarse steps;
  ``MLDA-AEMC``: the error model with its covariance (``error_covariance=True``);
  ``MLDA-AEM-3``: three levels, a middle grid of twice the coarse cells between (subchains of 5 coarse
  steps per middle step, of 2 middle steps per fine one), error model on;
* ``MLDA-GP`` and ``MLDA-AEM-GP``: three levels, a :class:`~pymc_kameleon.GPLevel` between the coarse
  grid and the fine one (a GP of the fine-minus-coarse log density, learned in tuning; subchains of 2
  coarse steps per GP-level step, of 3 GP-level steps per fine one), without and with the error model;
* ``KAMH``, ``GP-DA-MH`` and ``DEMetropolisZ`` on the fine model alone;
* ``tinyDA`` and ``tinyDA-AEM``: ``tinyDA.sample`` with the same two levels, its Adaptive Metropolis
  proposal at its defaults started from the prior covariance, subchains of 5 (its default is 1) and,
  for the second, its state-independent error model; the first 2000 fine iterations are discarded.

Reported per sampler (median over seeds, worst in brackets): largest |mean error| over the six
parameters in reference sds, min bulk ESS, max R-hat, fine solves per iteration (tuning, the start
search and the error model's solves included), coarse solves per iteration (all coarse levels), ESS
per fine solve and ESS per second. The reference is importance sampling of the fine posterior from a
Student-t (5 degrees of freedom) fitted at the posterior mode (``--reference``, cached in
``data/groundwater_reference.json``).

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/mlda_groundwater.py [--seeds 1 2 3]
        [--samplers ...] [--tune 2000] [--draws 2000] [--reference] [--quick]

The tinyDA rows need that package beside this one: ``pip install --no-deps --target DIR tinyda tqdm ray
protobuf`` (tinyDA pins NumPy < 2, and imports ray at module level), then ``PYTHONPATH=DIR``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path

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
from scipy import optimize, stats  # noqa: E402

from pymc_kameleon import MLDA, GPDelayedAcceptanceMH, GPLevel, KameleonMetropolis  # noqa: E402
from pymc_kameleon.problems.groundwater import (  # noqa: E402
    GROUNDWATER_MODES,
    NOISE_SD,
    groundwater_data,
    groundwater_model,
    log_posterior,
    solve_heads,
)

REFERENCE = Path(__file__).resolve().parent / "data" / "groundwater_reference.json"
SAMPLERS = ("MLDA", "MLDA-AEM", "MLDA-AEMC", "MLDA-AEM-3", "MLDA-GP", "MLDA-AEM-GP", "KAMH", "GP-DA-MH",
            "DEMetropolisZ", "tinyDA", "tinyDA-AEM")
D = len(GROUNDWATER_MODES)
SUBCHAIN = 5
GP_SUBCHAINS = [2, 3]  # coarse steps per GP-level step, GP-level steps per fine step ([5, 2]: see RESULTS)


def importance_reference(cells: int, draws: int, seed: int = 0) -> dict:
    """Means and sds of the fine posterior by importance sampling from a t_5 fitted at the mode."""
    f = lambda t: -log_posterior(t, cells)  # noqa: E731
    mode = optimize.minimize(f, np.zeros(D), method="BFGS").x
    # Central-difference Hessian at the mode.
    h = 1e-3
    H = np.empty((D, D))
    for i in range(D):
        for j in range(i, D):
            ei, ej = np.eye(D)[i] * h, np.eye(D)[j] * h
            second = f(mode + ei + ej) - f(mode + ei - ej) - f(mode - ei + ej) + f(mode - ei - ej)
            H[i, j] = H[j, i] = second / (4 * h * h)
    cov = 1.5 * np.linalg.inv(H)  # a little wider than the Laplace fit: the t's tails must cover
    proposal = stats.multivariate_t(loc=mode, shape=cov, df=5)
    x = proposal.rvs(size=draws, random_state=np.random.default_rng(seed))
    logw = np.array([log_posterior(t, cells) for t in x]) - proposal.logpdf(x)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    mean = w @ x
    sd = np.sqrt(w @ (x - mean) ** 2)
    return {"cells": cells, "draws": draws, "importance_ess": float(1.0 / np.sum(w**2)),
            "mean": mean.tolist(), "sd": sd.tolist(), "mode": mode.tolist()}


def load_reference(cells: int) -> dict:
    ref = json.loads(REFERENCE.read_text())
    if ref["cells"] != cells:
        raise SystemExit(f"{REFERENCE} is for {ref['cells']} cells; run with --reference for {cells}.")
    return ref


def metrics(samples, seconds, fine, coarse, iterations, reference) -> dict:
    post = az.convert_to_dataset({"theta": samples})
    ess = float(az.ess(post)["theta"].values.min())
    rhat = float(az.rhat(post)["theta"].values.max())
    mean = samples.reshape(-1, D).mean(axis=0)
    err = float(np.max(np.abs(mean - reference["mean"]) / reference["sd"]))
    return {"err": err, "ess": ess, "rhat": rhat, "fine_per_iter": fine / iterations,
            "coarse_per_iter": coarse / iterations, "ess_per_fine": ess / fine, "ess_per_s": ess / seconds}


def run_pymc(sampler, seed, fine_cells, coarse_cells, tune, draws, chains=2) -> tuple:
    model, coarse = groundwater_model(fine_cells), groundwater_model(coarse_cells)
    middle = groundwater_model(2 * coarse_cells) if sampler == "MLDA-AEM-3" else None
    with model:
        step = {
            "MLDA": lambda: MLDA(
                coarse_models=[coarse], subsampling_rates=SUBCHAIN, adaptive_error_model=False
            ),
            "MLDA-AEM": lambda: MLDA(
                coarse_models=[coarse], subsampling_rates=SUBCHAIN, adaptive_error_model=True
            ),
            "MLDA-AEMC": lambda: MLDA(
                coarse_models=[coarse], subsampling_rates=SUBCHAIN, adaptive_error_model=True,
                error_covariance=True,
            ),
            "MLDA-AEM-3": lambda: MLDA(
                coarse_models=[coarse, middle], subsampling_rates=[SUBCHAIN, 2], adaptive_error_model=True
            ),
            "MLDA-GP": lambda: MLDA(
                coarse_models=[coarse, GPLevel()], subsampling_rates=GP_SUBCHAINS, adaptive_error_model=False
            ),
            "MLDA-AEM-GP": lambda: MLDA(
                coarse_models=[coarse, GPLevel()], subsampling_rates=GP_SUBCHAINS, adaptive_error_model=True
            ),
            "KAMH": KameleonMetropolis,
            "GP-DA-MH": GPDelayedAcceptanceMH,
            "DEMetropolisZ": pm.DEMetropolisZ,
        }[sampler]()
    idata, seconds = timed_sample(model, step, tune=tune, draws=draws, chains=chains, seed=seed)
    iterations = chains * (tune + draws)
    gp_levels = (1,) if sampler.endswith("-GP") else ()
    fine, coarse = fine_and_coarse_evaluations(idata, sampler, iterations, gp_levels)
    return idata.posterior["theta"].values, seconds, fine, coarse, iterations


def have_tinyda() -> bool:
    try:
        import tinyDA  # noqa: F401
    except ImportError:
        return False
    return True


class Counted:
    """A forward model that counts its calls (tinyDA's levels)."""

    def __init__(self, cells):
        self.cells, self.calls = cells, 0

    def __call__(self, theta):
        self.calls += 1
        return solve_heads(theta, self.cells)


def run_tinyda(sampler, seed, fine_cells, coarse_cells, tune, draws, chains=2) -> tuple:
    import tinyDA as tda

    _, heads = groundwater_data()
    prior = stats.multivariate_normal(np.zeros(D), np.eye(D))
    cov = NOISE_SD**2 * np.eye(heads.size)
    # The error model corrects the coarse level's likelihood (tinyDA's AdaptiveGaussianLogLike).
    coarse_likelihood = (tda.AdaptiveGaussianLogLike(heads, cov) if sampler == "tinyDA-AEM"
                         else tda.GaussianLogLike(heads, cov))
    coarse, fine = Counted(coarse_cells), Counted(fine_cells)
    posteriors = [tda.Posterior(prior, coarse_likelihood, coarse),
                  tda.Posterior(prior, tda.GaussianLogLike(heads, cov), fine)]
    proposal = tda.AdaptiveMetropolis(C0=np.eye(D))
    np.random.seed(seed)  # tinyDA draws from NumPy's global generator
    start = time.perf_counter()
    out = tda.sample(posteriors, proposal, iterations=tune + draws, n_chains=chains, force_sequential=True,
                     subchain_length=SUBCHAIN, initial_parameters=prior.rvs(random_state=seed),
                     adaptive_error_model="state-independent" if sampler == "tinyDA-AEM" else None)
    seconds = time.perf_counter() - start
    samples = np.stack([
        np.array([link.parameters for link in out[f"chain_fine_{c}"]])[-draws:] for c in range(chains)
    ])
    return samples, seconds, float(fine.calls), float(coarse.calls), chains * (tune + draws)


def table(results: dict) -> None:
    print("| sampler | mean err (ref sd) | min ESS | max R-hat | fine solves / iter | coarse solves / iter "
          "| ESS per fine solve | ESS/s |")
    print("|---|---|---|---|---|---|---|---|")
    worst = {"err": max, "ess": min, "rhat": max, "fine_per_iter": max, "coarse_per_iter": max,
             "ess_per_fine": min, "ess_per_s": min}
    fmt = {"err": "{:.2f}", "ess": "{:.0f}", "rhat": "{:.3f}", "fine_per_iter": "{:.2f}",
           "coarse_per_iter": "{:.2f}", "ess_per_fine": "{:.4f}", "ess_per_s": "{:.1f}"}
    for name, runs in results.items():
        cells = []
        for key in fmt:
            values = [r[key] for r in runs]
            cells.append(f"{fmt[key].format(np.median(values))} ({fmt[key].format(worst[key](values))})")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--samplers", nargs="+", default=None, choices=SAMPLERS,
                        help="default: all, the tinyDA rows only where tinyDA can be imported")
    parser.add_argument("--fine-cells", type=int, default=48)
    parser.add_argument("--coarse-cells", type=int, default=8)
    parser.add_argument("--reference", action="store_true",
                        help="recompute the importance-sampling reference")
    parser.add_argument("--reference-draws", type=int, default=20_000)
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny grids and budget, one seed")
    args = parser.parse_args(argv)
    if args.samplers is None:
        args.samplers = [s for s in SAMPLERS if have_tinyda() or not s.startswith("tinyDA")]
    elif any(s.startswith("tinyDA") for s in args.samplers) and not have_tinyda():
        raise SystemExit("tinyDA is not importable: see this script's docstring for how to install it.")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    tune, draws = args.tune, args.draws
    if args.quick:
        args.fine_cells, args.coarse_cells, args.seeds, tune, draws = 12, 4, args.seeds[:1], 60, 60
    print(f"# {environment_line()}")
    print(f"# fine grid {args.fine_cells}², coarse grid {args.coarse_cells}², 2 chains x ({tune} + {draws}), "
          f"seeds {args.seeds}")
    if args.reference or args.quick:
        start = time.perf_counter()
        reference = importance_reference(args.fine_cells, 500 if args.quick else args.reference_draws)
        print(f"# reference: {reference['draws']} importance draws, ESS {reference['importance_ess']:.0f}, "
              f"{time.perf_counter() - start:.0f} s")
        if not args.quick:
            REFERENCE.write_text(json.dumps(reference, indent=1) + "\n")
    else:
        reference = load_reference(args.fine_cells)
    print("# reference mean " + " ".join(f"{m:.3f}" for m in reference["mean"]) + "; sd "
          + " ".join(f"{s:.3f}" for s in reference["sd"]))
    for cells in (args.fine_cells, args.coarse_cells):
        theta = np.asarray(reference["mean"])
        start = time.perf_counter()
        for _ in range(20):
            solve_heads(theta, cells)
        print(f"# {cells}² grid: {(time.perf_counter() - start) / 20 * 1e3:.2f} ms a solve")
    results = {}
    for name in args.samplers:
        runner = run_tinyda if name.startswith("tinyDA") else run_pymc
        for seed in args.seeds:
            samples, seconds, fine, coarse, iterations = runner(
                name, seed, args.fine_cells, args.coarse_cells, tune, draws
            )
            r = metrics(samples, seconds, fine, coarse, iterations, reference)
            results.setdefault(name, []).append(r)
            print(f"# {name} seed {seed}: " + ", ".join(f"{k} {v:.4g}" for k, v in r.items()), flush=True)
    print()
    table(results)
    return results


if __name__ == "__main__":
    main()
