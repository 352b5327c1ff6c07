r"""How much wider each chain's region is than another's: the part of a mode's mass that its log density
does not show (pooled tuning's rescue rule, decision record 0057).

A Gaussian mode of covariance :math:`\Sigma` and peak density :math:`\pi^*` holds mass
:math:`\pi^* (2\pi)^{d/2} |\Sigma|^{1/2}`, and a chain in its bulk sits at
:math:`\log\pi^* - \chi^2_d / 2`, whatever :math:`\Sigma`. Two chains' log densities therefore compare
the modes' peaks, not their masses: a mode :math:`k` times wider in each of :math:`d` coordinates holds
the same mass :math:`d \log k` nats lower (a new user's two equal-mass modes, 10 times apart in width,
at :math:`d = 10`: 23 nats, and every chain went to the narrow one). The log-volume term
:math:`\tfrac12 \log|\Sigma|` is estimated from each chain's recent tuning states, which every chain of
a population records (:attr:`~pymc_kameleon.core.adaptation.windows.AdaptationWindow.recent_population`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["MIN_MOVED", "half_log_volumes"]

#: A chain that moved in fewer than this share of the recent steps has no measured width (a stuck
#: chain's states have no spread, which would credit every other chain with a huge volume).
MIN_MOVED = 0.1
# Eigenvalues of a chain's covariance (in units of the population's variance per coordinate) are floored
# here: a direction in which a chain has barely moved says little, and no single one may dominate.
_EIGENVALUE_FLOOR = 1e-4


def half_log_volumes(states, min_steps: int) -> np.ndarray | None:
    r"""Per chain, :math:`\tfrac12 \log|S_c|`: the log-volume term of a Gaussian mode's mass, from the
    covariance :math:`S_c` of the chain's recent states.

    The states are first standardised by the whole population's per-coordinate sd (so the figures do
    not depend on the model's units, and only their differences between chains mean anything); the
    eigenvalues of :math:`S_c` are floored at 1e-4. A chain that moved in fewer than :data:`MIN_MOVED`
    of the steps gets NaN.

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
    scale = states.reshape(-1, dim).std(axis=0)
    scale[~(scale > 0)] = 1.0
    standardised = states / scale
    moved = np.any(standardised[1:] != standardised[:-1], axis=2).mean(axis=0)
    volumes = np.full(chains, np.nan)
    for c in range(chains):
        if moved[c] < MIN_MOVED:
            continue
        covariance = np.atleast_2d(np.cov(standardised[:, c, :], rowvar=False))
        eigenvalues = np.linalg.eigvalsh(covariance)
        volumes[c] = 0.5 * float(np.sum(np.log(np.maximum(eigenvalues, _EIGENVALUE_FLOOR))))
    return volumes
