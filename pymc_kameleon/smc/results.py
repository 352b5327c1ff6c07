"""Read per-stage SMC statistics back from ``pm.sample_smc`` output, the same way on PyMC 5 and 6."""

from __future__ import annotations

import numpy as np

__all__ = ["log_evidence", "stage_stats"]


def stage_stats(idata, name: str) -> list[np.ndarray]:
    """Per-chain arrays of one per-stage statistic (``beta``, ``nu2``, ...), as floats.

    ``pm.sample_smc`` stores per-stage statistics with layouts that depend on the PyMC
    version and on whether chains ran different numbers of stages (ragged object arrays;
    on PyMC 6 a single chain's stages even sit on the ``chain`` dimension). This undoes that.
    """
    n_chains = int(idata.posterior.sizes["chain"])
    values = np.asarray(idata.sample_stats[name].values)
    if n_chains == 1:
        return [np.asarray(values, dtype=float).reshape(-1)]
    return [np.asarray(list(row), dtype=float).reshape(-1) for row in values]


def log_evidence(idata) -> np.ndarray:
    r"""Final :math:`\log \hat Z` of each chain: ``log_marginal_likelihood`` at the last stage
    (:math:`\beta = 1`)."""
    return np.array([chain[-1] for chain in stage_stats(idata, "log_marginal_likelihood")])
