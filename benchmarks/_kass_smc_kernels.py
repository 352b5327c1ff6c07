"""The SMC machinery of ``kass_smc.py``: PyMC's kernels with counted likelihood evaluations, one run.

Split from ``kass_smc.py`` (which re-exports every public name here) under the 500-line rule; other
scripts import these names from ``kass_smc`` as before. :class:`CountedMH` and :class:`CountedIMH`
add a ``likelihood_evals`` statistic to PyMC's kernels, :class:`FixedSweepsMH` and
:class:`FixedSweepsIMH` spend a fixed number of sweeps per stage, :func:`run_smc` runs one chain of
``pm.sample_smc``, and :func:`evidence_table` tabulates the log Z errors over runs.
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import pymc as pm
from _common import CountedCall
from pymc.smc.kernels import IMH, MH

from pymc_kameleon.smc import log_evidence, stage_stats

__all__ = [
    "SMC_KW", "CountedIMH", "CountedMH", "FixedSweepsIMH", "FixedSweepsMH", "evidence_table",
    "kass_budget_sweeps", "run_smc", "summarise",
]

SMC_KW = dict(progressbar=False, compute_convergence_checks=False)


# ----------------------------------------------------------------- counting PyMC's kernels
class _CountEvaluations:
    """Counts the likelihood evaluations of a PyMC SMC kernel's ``mutate`` (its stats lack them)."""

    def mutate(self):
        compiled = self.likelihood_logp_func
        counted = CountedCall(compiled)
        self.likelihood_logp_func = counted
        try:
            super().mutate()
        finally:
            self.likelihood_logp_func = compiled
        self._stage_evals = counted.calls

    def sample_stats(self):
        return {**super().sample_stats(), "likelihood_evals": self._stage_evals}


class CountedMH(_CountEvaluations, MH):
    """PyMC's MH kernel, unchanged, with a ``likelihood_evals`` statistic per stage."""

    stats_dtypes_shapes = {**MH.stats_dtypes_shapes, "likelihood_evals": (int, [])}


class CountedIMH(_CountEvaluations, IMH):
    """PyMC's IMH kernel, unchanged, with a ``likelihood_evals`` statistic per stage."""

    stats_dtypes_shapes = {**IMH.stats_dtypes_shapes, "likelihood_evals": (int, [])}


class _FixedSweeps:
    """A PyMC kernel with exactly ``n_sweeps`` sweeps per stage (a fixed likelihood budget).

    Each call of PyMC's ``mutate`` with a correlation threshold above 2 makes exactly one sweep
    (its stopping test ``2 - r > threshold`` fails at once), so the sweeps are PyMC's own code. The
    acceptance rates of all sweeps feed PyMC's tuning, as in one multi-sweep call.
    """

    _rate_attr = "chain_acc_rate"

    def __init__(self, *args, n_sweeps: int = 10, **kwargs):
        super().__init__(*args, correlation_threshold=3.0, **kwargs)
        self.n_sweeps = int(n_sweeps)

    def mutate(self):
        rates, evals = [], 0
        for _ in range(self.n_sweeps):
            super().mutate()
            rates.append(getattr(self, self._rate_attr))
            evals += self._stage_evals
        setattr(self, self._rate_attr, np.mean(rates, axis=0))
        self._stage_evals = evals


class FixedSweepsMH(_FixedSweeps, CountedMH):
    """PyMC's MH kernel with a fixed number of sweeps per stage."""


class FixedSweepsIMH(_FixedSweeps, CountedIMH):
    """PyMC's IMH kernel with a fixed number of sweeps per stage."""

    _rate_attr = "acc_rate"


# ----------------------------------------------------------------- running SMC
def run_smc(model, kernel, draws: int, seed: int, var: str, **kernel_kwargs) -> dict:
    """One chain of ``pm.sample_smc``: particles, log Z, stages, likelihood evaluations, seconds."""
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample_smc(
            draws=draws, kernel=kernel, chains=1, cores=1, random_seed=seed, **SMC_KW, **kernel_kwargs
        )
    seconds = time.perf_counter() - start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyMC's kernels have no error bar (NaN)
        evidence = log_evidence(idata)
    beta = stage_stats(idata, "beta")[0]
    stage_evals = stage_stats(idata, "likelihood_evals")[0]
    samples = idata.posterior[var].values.reshape(draws, -1)
    return dict(
        samples=samples, log_z=float(evidence.log_z[0]), se=float(evidence.std_error[0]),
        stages=int(beta.size),
        evals=int(draws + stage_evals.sum()), seconds=seconds, idata=idata,
    )


def kass_budget_sweeps(kass_runs, draws: int) -> int:
    """Sweeps per stage with which a fixed-sweep PyMC kernel spends about KASS's likelihood evaluations
    (equal budget), from KASS's mean evaluations and stages over its runs."""
    kass_evals = np.mean([r["evals"] for r in kass_runs])
    kass_stages = np.mean([r["stages"] for r in kass_runs])
    return max(1, round((kass_evals - draws) / (draws * kass_stages)))


def summarise(values) -> str:
    """'mean ± sd' over repetitions."""
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.3g} ± {v.std(ddof=1) if v.size > 1 else 0.0:.2g}"


def evidence_table(runs, exact_log_z: float = 0.0) -> str:
    """Bias of log Z (mean error and its standard error over runs) and the single-run error bar
    (root-mean-square reported SE against the spread over runs; coverage of log Z ± 2 SE)."""
    lines = [
        "\n| sampler | mean log Z error ± SE of the mean | bias / SE | mean abs(error) | reported SE (rms) "
        "| spread of log Z | coverage of ± 2 SE |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rs in runs.items():
        error = np.array([r["log_z"] for r in rs]) - exact_log_z
        se = np.array([r["se"] for r in rs])
        spread = error.std(ddof=1) if error.size > 1 else float("nan")
        mean_se = spread / math.sqrt(error.size)
        has_se = bool(np.all(np.isfinite(se)))
        reported = f"{math.sqrt(np.mean(se**2)):.3g}" if has_se else "none"
        coverage = f"{np.mean(np.abs(error) <= 2 * se):.2f}" if has_se else "none"
        lines.append(
            f"| {name} | {error.mean():+.3f} ± {mean_se:.3f} | {error.mean() / mean_se:+.1f} | "
            f"{np.abs(error).mean():.3f} | {reported} | {spread:.3g} | {coverage} |"
        )
    return "\n".join(lines)
