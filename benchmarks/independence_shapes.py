"""How close each shape of the independence component is to the posterior it proposes for.

For each posterior, ``KameleonMetropolis()`` samples with its defaults (4 chains, ``cores=1``) and a
NUTS run on the same model gives the reference covariance Σ of the unconstrained parameters (so
choose posteriors NUTS samples as written: not the logistic GLM, whose reference is a rescaled twin,
nor a black-box ODE). At the end of tuning each
chain holds two shapes (decision record 0039): the learned one (the windows' covariance C) and the
Gaussian fitted to the log densities tuning evaluated (covariance L A Aᵀ Lᵀ, where it exists). For
each, the eigenvalues of S⁻¹ Σ S⁻ᵀ (S the shape's Cholesky factor) say how far it is from Σ: all
1 for an exact covariance; an eigenvalue above 1 is a direction the shape is too narrow in (what
makes an independence sampler's weights heavy-tailed). Printed per chain: the range of those
eigenvalues for each shape, the shape the component uses after tuning (or "off") and the last
verdict's figures.

    OPENBLAS_NUM_THREADS=1 python benchmarks/independence_shapes.py [--posteriors ...] [--seed 2025]
        [--tune 3000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

from pymc_kameleon import KameleonMetropolis  # noqa: E402
from pymc_kameleon.problems.real_posteriors import POSTERIORS  # noqa: E402

# Posteriors NUTS samples well as written (the reference runs on the model itself, not a twin).
DEFAULT_POSTERIORS = ["regression-17d-mixed-scales", "gaussian-50d", "eight-schools-noncentred", "ar2",
                      "gp-hyperparameters", "banana-8d"]


def reference_draws(model, initvals, seed: int):
    """NUTS draws of every unconstrained variable, by name, flattened per draw."""
    with model:
        idata = pm.sample(tune=1000, draws=2000, chains=4, cores=1, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False, initvals=initvals,
                          idata_kwargs={"include_transformed": True})
    return {v.name: idata.posterior[v.name].values.reshape(8000, -1) for v in model.value_vars}


def eigen_range(shape_chol: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    inner = np.linalg.solve(shape_chol, np.linalg.solve(shape_chol, reference).T)
    values = np.linalg.eigvalsh(0.5 * (inner + inner.T))
    return float(values.min()), float(values.max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posteriors", nargs="+", default=DEFAULT_POSTERIORS, choices=sorted(POSTERIORS))
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--tune", type=int, default=3000)
    args = parser.parse_args()
    print(f"# {environment_line()}")
    print(f"# KameleonMetropolis() 4 x ({args.tune} + 200), cores=1, seed {args.seed}; reference: NUTS 4 x "
          "(1000 + 2000)\n")
    print("| posterior | chain | learned: eig range | fitted: eig range | used after tuning | last verdict "
          "(shape: jump / walk, k-hat) |")
    print("|---|---|---|---|---|---|")
    for name in args.posteriors:
        start = time.time()
        model, _, initvals = POSTERIORS[name]()
        draws = reference_draws(model, initvals, args.seed)
        with model:
            step = KameleonMetropolis()
            pm.sample(tune=args.tune, draws=200, chains=4, cores=1, step=step, random_seed=args.seed,
                      progressbar=False, compute_convergence_checks=False, initvals=initvals)
        # in the step's raveled order
        sigma = np.cov(np.concatenate([draws[v.name] for v in step.vars], axis=1), rowvar=False)
        for chain, copy in sorted(step._population_steps.items()):
            adaptation = copy.scale_free_adaptation
            state = adaptation.state
            learned = eigen_range(state.chol, sigma)
            fitted = "–"
            if state.independence_fit is not None:
                fitted_chol = np.linalg.cholesky(state.covariance) @ state.independence_fit.chol
                fitted = "%.2f–%.2f" % eigen_range(fitted_chol, sigma)
            used = "off"
            if state.independence_weight > 0:
                used = "fitted" if state.independence_uses_fit else "learned"
            last = adaptation.independence_decisions
            final = [d for d in last if last and d.tune_step == last[-1].tune_step]
            verdicts = "; ".join(
                f"{'fitted' if d.fitted else 'learned'}: {d.independent_jump:.2f} / {d.walk_jump:.2f}, "
                f"{d.khat:.2f}" for d in final
            )
            learned_range = "%.2f–%.2f" % learned
            print(f"| {name} | {chain} | {learned_range} | {fitted} | {used} | {verdicts} |")
        print(f"  ({name}: {time.time() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
