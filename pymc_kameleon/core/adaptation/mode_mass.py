r"""How much wider each chain's region is than another's: the part of a mode's mass that its log density
does not show (pooled tuning's rescue rule, decision record 0057).

A Gaussian mode of covariance :math:`\Sigma` and peak density :math:`\pi^*` holds mass
:math:`\pi^* (2\pi)^{d/2} |\Sigma|^{1/2}`, and a chain in its bulk sits at
:math:`\log\pi^* - \chi^2_d / 2`, whatever :math:`\Sigma`. Two chains' log densities therefore compare
the modes' peaks, not their masses: a mode :math:`k` times wider in each of :math:`d` coordinates holds
the same mass :math:`d \log k` nats lower (a new user's two equal-mass modes, 10 times apart in width,
at :math:`d = 10`: 23 nats, and every chain went to the narrow one). The log-volume term
:math:`\tfrac12 \log|\Sigma|` is estimated from each chain's recent tuning states, which every chain of
a population records (the ``recent_population`` of
:class:`~pymc_kameleon.core.adaptation.windows.AdaptationWindow`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MIN_MOVED", "half_log_volumes", "whitened_half_log_det", "whitened_half_log_det_bound"]

#: A chain that moved in fewer than this share of the recent steps has no measured width (a stuck
#: chain's states have no spread, which would credit every other chain with a huge volume).
MIN_MOVED = 0.1
# Eigenvalues of a chain's covariance, in units of the chains' mean covariance, are floored here: a
# direction in which a chain has barely moved (the coordinate scan moves one coordinate a step) says
# little. Relative to the chains' own spreads, not to the population's, whose spread between two far
# modes would floor a narrow mode's whole covariance (a new user's modes 20 sds apart, 100 times apart
# in width: the credit fell from 46 nats to 22, and the wide mode's chains were rescued).
_EIGENVALUE_FLOOR = 1e-6


def half_log_volumes(states, min_steps: int) -> np.ndarray | None:
    r"""Per chain, :math:`\tfrac12 \log|S_c|`: the log-volume term of a Gaussian mode's mass, from the
    covariance :math:`S_c` of the chain's recent states.

    The covariances are taken in the coordinates whitened by the moving chains' mean covariance
    :math:`\bar S` (so the figures do not depend on the model's units or on how far apart the chains
    are, and only their differences between chains mean anything); there the eigenvalues of
    :math:`S_c` are floored at 1e-6. A chain that moved in fewer than :data:`MIN_MOVED` of the steps
    gets NaN.

    Parameters
    ----------
    states : array of shape (steps, chains, d)
        Every chain's state at each recent step, in a fixed chain order.
    min_steps : int
        Fewest steps from which the widths are measured.

    Returns
    -------
    array of shape (chains,), or None with fewer than ``min_steps`` steps
    """
    states = np.asarray(states, dtype=float)
    steps, chains, dim = states.shape
    if steps < max(min_steps, 2):
        return None
    moved = np.any(states[1:] != states[:-1], axis=2).mean(axis=0)
    volumes = np.full(chains, np.nan)
    measured = np.flatnonzero(moved >= MIN_MOVED)
    if measured.size == 0:
        return volumes
    covariances = {c: np.atleast_2d(np.cov(states[:, c, :], rowvar=False)) for c in measured}
    mean = sum(covariances.values()) / measured.size
    scale = np.sqrt(np.diag(mean))
    scale[~(scale > 0)] = 1.0
    factor = np.linalg.cholesky(mean / np.outer(scale, scale) + 1e-10 * np.eye(dim))
    for c, covariance in covariances.items():
        # S_c in the coordinates whitened by the mean covariance D L L^T D.
        volumes[c] = whitened_half_log_det(covariance / np.outer(scale, scale), factor)
    return volumes


def whitened_half_log_det(covariance, factor) -> float:
    r""":math:`\tfrac12 \sum_i \log \max(\lambda_i, 10^{-6})` over the eigenvalues of
    :math:`L^{-1} S L^{-\top}`: the half log-volume of ``covariance`` :math:`S` in the coordinates whitened
    by a reference covariance :math:`L L^\top` (``factor``, lower), directions it barely spans floored."""
    half = np.linalg.solve(factor, covariance)
    eigenvalues = np.linalg.eigvalsh(np.linalg.solve(factor, half.T))
    return 0.5 * float(np.sum(np.log(np.maximum(eigenvalues, _EIGENVALUE_FLOOR))))


def whitened_half_log_det_bound(covariance, reference_inverse) -> float:
    r"""An upper bound of :func:`whitened_half_log_det` at a :math:`d^2` cost, not an eigendecomposition's:
    with :math:`W = L^{-1} S L^{-\top}`, :math:`\operatorname{tr} W = \sum_{ij} S_{ij} (LL^\top)^{-1}_{ij}`
    and, by Jensen's inequality, :math:`\tfrac12 \sum_i \log\max(\lambda_i, \epsilon) \le \tfrac d2
    \log(\operatorname{tr} W / d + \epsilon)`. ``reference_inverse``: :math:`(L L^\top)^{-1}`."""
    d = covariance.shape[0]
    trace = float(np.sum(covariance * reference_inverse))
    return 0.5 * d * math.log(max(trace, 0.0) / d + _EIGENVALUE_FLOOR)
