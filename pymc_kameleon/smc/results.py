"""Read per-stage SMC statistics back from ``pm.sample_smc`` output, the same way on PyMC 5 and 6."""

from __future__ import annotations

import numpy as np

__all__ = ["log_evidence", "stage_stats"]


def stage_stats(idata, name: str) -> list[np.ndarray]:
    """Per-chain arrays of one per-stage statistic (``beta``, ``nu2``, ...), as floats.

    ``pm.sample_smc`` stores per-stage statistics with layouts that depend on the PyMC version
    and on whether the chains ran the same number of stages:

    - equal stages: a numeric (chain, stage) array; on PyMC 6 a single chain's stages sit on
      the ``chain`` dimension;
    - unequal stages: an object array of one list per chain, shaped (chain,) on PyMC 6 and
      (1, chain) on PyMC 5 (the chains on the ``draw`` dimension).

    This undoes all of them: one float array per chain, in chain order.
    """
    n_chains = int(idata.posterior.sizes["chain"])
    values = np.asarray(idata.sample_stats[name].values)
    if values.dtype == object:
        cells = [np.asarray(cell, dtype=float).reshape(-1) for cell in values.reshape(-1)]
        if len(cells) == n_chains:
            return cells
        values = np.concatenate(cells)  # one number per cell: a numeric array in disguise
    values = np.asarray(values, dtype=float)
    if values.size % n_chains:
        raise ValueError(
            f"sample_stats[{name!r}] has {values.size} values, which do not split over {n_chains} chains."
        )
    return list(values.reshape(n_chains, -1))


def log_evidence(idata) -> np.ndarray:
    r"""Final :math:`\log \hat Z` of each chain: ``log_marginal_likelihood`` at the last stage
    (:math:`\beta = 1`)."""
    return np.array([chain[-1] for chain in stage_stats(idata, "log_marginal_likelihood")])
