"""What GP delayed acceptance's hyperparameter fits cost during tuning.

While tuning, a GP-DA step refits its GP's hyperparameters by marginal likelihood (L-BFGS-B with
the analytic gradient) whenever the training set doubles, at every adaptation window's end and at
the end of the warm-up (three starts there, two elsewhere; starts within ``SAME_START`` run once, decision
0070), each on the latest ``fit_max_points`` points. On a cheap model these fits are most of a tuning
step's time. This script measures

1. one evaluation of the objective (value and gradient) against the number of points, with values
   only (GP-DA-MH) and with gradient observations (GP-DA-MALA, d + 1 rows per point), and
2. a GP-DA-MH chain's tuning: wall time per step and the part spent in fits, on the 3-coefficient
   correlated regression started 100 posterior sds away (tests/steps/test_robustness.py), a
   likelihood that costs about 20 µs.

    OPENBLAS_NUM_THREADS=1 python benchmarks/gp_fit_cost.py [--repeats 30] [--chains 3] [--tune 3000]

Run it on an otherwise idle machine: it is a wall-time measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402


def objective_cost(n_points, dim, gradients, repeats):
    """Milliseconds per objective evaluation on ``n_points`` points of a smooth ``dim``-d function."""
    from pymc_kameleon.core.gp.fit import MarginalLikelihoodObjective, log_hyperparameters
    from pymc_kameleon.core.gp.surrogate import GPSurrogate

    rng = np.random.default_rng(0)
    gp = GPSurrogate(dim, lengthscales=1.0, signal_variance=1.0, gradients=gradients)
    for x in rng.normal(size=(n_points, dim)):
        gp.add(x, -0.5 * x @ x + np.sin(x[0]), -x + np.eye(dim)[0] * np.cos(x[0]) if gradients else None)
    objective = MarginalLikelihoodObjective(gp)
    params = log_hyperparameters(gp)
    objective(params)
    start = time.perf_counter()
    for _ in range(repeats):
        objective(params)
    return (time.perf_counter() - start) / repeats * 1e3


def tuning_cost(seed, tune=3000):
    """(seconds per tuning step, part of them in fits, fits) for one far-start GP-DA-MH chain."""
    import pymc as pm

    from pymc_kameleon import GPDelayedAcceptanceMH
    from pymc_kameleon.core.gp import training as gp_training

    rng = np.random.default_rng(5)
    X = np.column_stack([np.ones(50), rng.uniform(0, 10, 50), rng.normal(50, 5, 50)])
    y = X @ np.array([1.0, 0.5, -0.2]) + rng.normal(0, 1, 50)
    cov = np.linalg.inv(X.T @ X + np.eye(3) / 100.0)
    mean = cov @ X.T @ y
    with pm.Model() as model:
        b = pm.Normal("b", 0, 10, shape=3)
        pm.Normal("y", pm.math.dot(X, b), 1.0, observed=y)
    spent, fits = [0.0], [0]
    original = gp_training.GPTrainingSchedule.fit

    def timed_fit(self, *args, **kwargs):
        begin = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - begin
            fits[0] += 1

    gp_training.GPTrainingSchedule.fit = timed_fit
    try:
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step = GPDelayedAcceptanceMH()
            begin = time.perf_counter()
            pm.sample(step=step, tune=tune, draws=1, chains=1, cores=1, random_seed=seed,
                      initvals={"b": mean + 100 * np.sqrt(np.diag(cov))}, progressbar=False,
                      compute_convergence_checks=False)
            total = time.perf_counter() - begin
    finally:
        gp_training.GPTrainingSchedule.fit = original
    return total / tune, spent[0] / total, fits[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--chains", type=int, default=3)
    parser.add_argument("--tune", type=int, default=3000)
    args = parser.parse_args(argv)
    out = {"objective": {}, "tuning": {}}
    print(environment_line())
    print("\n| rows | d | observations | ms per objective evaluation |")
    print("|---|---|---|---|")
    for n, d, gradients in [(100, 3, False), (300, 3, False), (300, 8, False), (50, 5, True), (100, 5, True)]:
        rows = n * (d + 1) if gradients else n
        ms = objective_cost(n, d, gradients, args.repeats)
        out["objective"][(rows, d, gradients)] = ms
        print(f"| {rows} | {d} | {'values and gradients' if gradients else 'values'} | {ms:.2f} |")
    print("\n| chain (seed) | ms per tuning step | part in fits | fits |")
    print("|---|---|---|---|")
    for seed in range(10, 10 + args.chains):
        per_step, part, fits = tuning_cost(seed, args.tune)
        out["tuning"][seed] = (per_step, part, fits)
        print(f"| {seed} | {per_step * 1e3:.2f} | {part:.0%} | {fits} |")
    return out


if __name__ == "__main__":
    main()
