"""Demo: the strongly twisted 8-d banana B(0.1, 100), KameleonMetropolis against pm.Metropolis.

Run with ``make demo`` (sets up a virtualenv first) or ``python examples/demo.py``.
Both samplers get the same chains, tuning and draws; the exact quantile regions
of the banana show how well each chain covers the target.
"""

import textwrap
import warnings
from contextlib import contextmanager

import arviz as az
import numpy as np
import pymc as pm

import pymc_kameleon
from pymc_kameleon import KameleonMetropolis
from pymc_kameleon.problems.targets import banana

CHAINS, TUNE, DRAWS, SEED = 4, 5000, 10000, 2014
QS = np.round(np.arange(0.1, 1.0, 0.1), 1)


def short_warning(message, category, filename, lineno, line=None):
    """A warning as its text, wrapped, without the file and line it was raised at (with cores > 1 our
    steps' warnings arrive from the worker processes, through multiprocessing's code)."""
    text = textwrap.fill(f"{category.__name__}: {message}", width=100, subsequent_indent="    ")
    return f"{text}\n"


@contextmanager
def our_warnings_only():
    """Other libraries' UserWarnings (PyTensor's note on BLAS, ...) hidden, our steps' shown: a step
    that says its tuning or its chains went wrong is part of the result."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("default", pymc_kameleon.KameleonWarning)
        yield


def run(target, make_step, label, chains=CHAINS, tune=TUNE, draws=DRAWS):
    print(f"\n=== {label} ===")
    with target.model():
        with our_warnings_only():
            idata = pm.sample(
                step=make_step(), chains=chains, cores=min(chains, 2), tune=tune, draws=draws,
                random_seed=SEED, compute_convergence_checks=False,
            )
    print(az.summary(idata, var_names=["x"], kind="all", round_to=3).to_string())
    return idata


def main():
    warnings.formatwarning = short_warning
    target = banana(dim=8, b=0.1, v=100.0)
    print(f"Target: {target!r}; {CHAINS} chains, {TUNE} tuning steps, {DRAWS} draws each.")
    results = {
        "KameleonMetropolis": run(target, KameleonMetropolis, "KameleonMetropolis()"),
        "pm.Metropolis": run(target, pm.Metropolis, "pm.Metropolis()"),
    }
    print("\nCoverage of the exact q-density regions (ideal: coverage = q)")
    header = "q      " + "".join(f"{name:>22}" for name in results)
    print(header)
    coverages = {}
    for name, idata in results.items():
        samples = idata.posterior["x"].values.reshape(-1, target.dim)
        coverages[name] = target.quantile_coverage(samples, QS)
    for i, q in enumerate(QS):
        print(f"{q:<7.1f}" + "".join(f"{coverages[name][i]:>22.3f}" for name in results))
    print("-" * len(header))
    print("error  " + "".join(f"{np.mean(np.abs(coverages[n] - QS)):>22.4f}" for n in results))
    print("\nmean |coverage - q| over q = 0.1..0.9: lower is better.")
    # Log-density evaluations as each sampler makes them: KameleonMetropolis one per iteration
    # (the current value is cached); pm.Metropolis updates element by element, two per element.
    evals_per_iteration = {"KameleonMetropolis": 1, "pm.Metropolis": 2 * target.dim}
    for name, idata in results.items():
        ess = az.ess(idata, var_names=["x"])["x"].values
        evals = evals_per_iteration[name] * CHAINS * DRAWS
        print(f"{name:>20}: acceptance {float(idata.sample_stats['accepted'].mean()):.2f}, "
              f"min bulk ESS {ess.min():.0f}, ESS of x[0] {ess[0]:.0f}, "
              f"min ESS per 1000 log-density evaluations {1000 * ess.min() / evals:.3f}")
    print("(pm.Metropolis makes 16 log-density evaluations per iteration here, KameleonMetropolis one: "
          "at equal iterations pm.Metropolis can reach a higher ESS, at 16 times the cost.)")


if __name__ == "__main__":
    main()
