"""Demo: the strongly twisted 8-d banana B(0.1, 100), KameleonMetropolis against pm.Metropolis.

Run with ``make demo`` (sets up a virtualenv first) or ``python examples/demo.py``.
Every sampler gets the same chains, tuning and draws; the exact quantile regions
of the banana show how well each chain covers the target. At this budget no random walk
converges here, and KameleonMetropolis says so; the third run is the remedy its warning names,
``KameleonMetropolis(start="smc")``: tuning from a tempered SMC run, through a map fitted to its
particles, whose evaluations the last lines count.
"""

import textwrap
import warnings
from contextlib import contextmanager
from functools import partial

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
        "start='smc'": run(
            target, partial(KameleonMetropolis, start="smc"), "KameleonMetropolis(start='smc')"
        ),
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
    print("\nLog-density evaluations, tuning (and the SMC run) included:")
    for name, idata in results.items():
        ess = az.ess(idata, var_names=["x"])["x"].values
        evals = log_density_evaluations(name, idata, target.dim)
        print(f"{name:>20}: acceptance {float(idata.sample_stats['accepted'].mean()):.2f}, "
              f"min bulk ESS {ess.min():.0f}, R-hat {float(az.rhat(idata)['x'].max()):.3f}, "
              f"{evals:,} evaluations, min ESS per 1000 of them {1000 * ess.min() / evals:.3f}")
    print("(pm.Metropolis makes 16 log-density evaluations per iteration here, KameleonMetropolis one: "
          "at equal iterations pm.Metropolis can reach a higher ESS, at 16 times the cost. start='smc' "
          "spends about a million on its SMC run, and converges.)")


def log_density_evaluations(name, idata, dim) -> int:
    """The evaluations each sampler made: our steps count theirs (``cumulative_logp_evals`` at each chain's
    last draw: tuning and the SMC run included); pm.Metropolis updates element by element, two per element
    per iteration, tuning included."""
    if name == "pm.Metropolis":
        return 2 * dim * CHAINS * (TUNE + DRAWS)
    return int(idata.sample_stats["cumulative_logp_evals"].values[:, -1].sum())


if __name__ == "__main__":
    main()
