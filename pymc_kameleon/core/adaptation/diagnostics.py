r"""The end-of-tuning checks: is the chain still walking, still climbing, or stuck in a coordinate?

Each takes the last tuning states (and their log densities or gradients) and returns a figure that
the steps' end-of-tuning warnings compare with a limit (:mod:`pymc_kameleon.steps.reporting`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "gradient_spread",
    "log_density_climb",
    "whitened_drift",
]


def whitened_drift(W) -> float:
    """Root mean square shift between the means of the first and second halves of whitened states.

    About 0.5 or less for a chain that has settled; far above 1 for one still walking toward the
    posterior. NaN with fewer than 200 states (too few to tell).
    """
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[0] < 200:
        return math.nan
    half = W.shape[0] // 2
    return float(np.sqrt(np.mean((W[:half].mean(axis=0) - W[half:].mean(axis=0)) ** 2)))


def log_density_climb(log_densities, dim: int) -> float:
    r"""How far the log density rose between the first and second halves of the last tuning states.

    .. math::
        \frac{\bar\ell_{\text{2nd half}} - \bar\ell_{\text{1st half}}}{\sqrt{d/2}},

    in units of :math:`\sqrt{d/2}`, the sd of the log density of a :math:`d`-dimensional Gaussian
    posterior (it is :math:`-\chi^2_d/2` plus a constant). A chain that has settled has a climb
    near 0 (it can be negative); one still climbing toward the posterior has a large positive one,
    also when only a few of many coordinates are still far out, which :func:`whitened_drift`
    averages away. NaN with fewer than 200 states or any non-finite log density.

    Pass the exact part of the log density: a kept pseudo-marginal log-estimate is not a function
    of the state, and on a correlated estimator's slowly mixing auxiliary chain its mean over a few
    hundred steps wanders by many times :math:`\sqrt{d/2}` at stationarity.
    """
    lp = np.asarray(log_densities, dtype=float)
    if lp.shape[0] < 200 or not np.all(np.isfinite(lp)):
        return math.nan
    half = lp.shape[0] // 2
    return float((lp[half:].mean() - lp[:half].mean()) / math.sqrt(dim / 2.0))


def gradient_spread(states, gradients) -> np.ndarray:
    r"""Per coordinate, the spread of the last tuning states against the least the gradient allows.

    .. math::
        \kappa_i = \operatorname{sd}(x_i)\,\sqrt{\overline{(\partial_i \log\pi)^2}},

    over states :math:`x` and the gradients of the log density at them. For draws from
    :math:`\pi`, :math:`\kappa_i \ge 1` (Cramér-Rao: integrating by parts,
    :math:`\operatorname{Cov}(X_i, \partial_i \log\pi(X)) = -1`, and Cauchy-Schwarz gives
    :math:`\operatorname{Var}(X_i)\, E[(\partial_i \log\pi)^2] \ge 1`, with equality for a
    Gaussian). It is unchanged by rescaling a coordinate. A chain that barely moves in coordinate
    :math:`i` while the gradient there is steep (a collapsed step, a chain stuck on a ridge) has
    :math:`\kappa_i \ll 1`. NaN everywhere with fewer than 200 states or a non-finite value.
    """
    X = np.asarray(states, dtype=float)
    G = np.asarray(gradients, dtype=float)
    usable = X.ndim == 2 and X.shape[0] >= 200 and X.shape == G.shape
    if not (usable and np.all(np.isfinite(X)) and np.all(np.isfinite(G))):
        return np.full(X.shape[-1] if X.ndim == 2 else 0, math.nan)
    return X.std(axis=0) * np.sqrt(np.mean(G * G, axis=0))
