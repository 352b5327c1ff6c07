r"""A wide Gaussian reference around a density's mode, for tempering where there is no prior to start from.

SMC tempers from a distribution it can draw from to the posterior. PyMC's SMC starts from the prior,
which a model with an improper prior (``pm.Flat``) does not have, and which a variable's ``initval``
replaces by a single point. A *reference* :math:`\rho` takes the prior's place: the tempered targets
are :math:`\pi_\beta \propto \rho^{1-\beta}\,\pi^\beta`, from :math:`\rho` at :math:`\beta = 0` to the
posterior :math:`\pi` at :math:`\beta = 1`, and the normalising constant the run estimates is
:math:`\int \pi`, whatever :math:`\rho` is.

:func:`mode_reference` builds :math:`\rho = N(m, \operatorname{diag}(s^2))`: :math:`m` the mode found
by Powell's method (no gradients), :math:`s_i` :data:`REFERENCE_WIDTH` times the sd that the log
density's curvature along coordinate :math:`i` at :math:`m` implies. The width matters: the particles
must still cover the posterior's tails at :math:`\beta = 1`, or the chains that start from them and
move through a map fitted to them visit the tails too rarely, with an ESS that does not show it. On the
8-d banana B(0.1, 100) (a Flat prior; ``KameleonMetropolis(start="smc")``, 4 x (3000 + 6000), seeds
2025-2027) a width of 10 left the largest sd error at 10%, 5% and 12% with min ESS 2768-3524 and
R-hat <= 1.002; a width of 30 at 4%, 1% and 3% (min ESS 3170-5485).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_kameleon.core.starts import _WORST, powell_run

__all__ = ["REFERENCE_WIDTH", "ModeReference", "curvature_sds", "mode_reference"]

#: Each coordinate's reference sd in units of the sd its curvature at the mode implies.
REFERENCE_WIDTH = 30.0
#: Powell's evaluations per dimension for the mode (at most _MODE_MAX_EVALS): the run costs a small
#: fraction of the SMC run that follows (about 10^6 evaluations on the 8-d banana).
_MODE_EVALS_PER_DIM = 200
_MODE_MAX_EVALS = 20_000
# A curvature is read where a central step drops the log density by 1e-3 to 5 nats: within it a smooth
# density is close to quadratic, and the step is found in decades from 1e-3 (times |m_i| if larger).
_DROP_LOW, _DROP_HIGH = 1e-3, 5.0
_FIRST_STEP = 1e-3
_STEP_TRIES = 16


@dataclass(frozen=True)
class ModeReference:
    """The reference :math:`N(m, \\operatorname{diag}(s^2))` and what finding it cost.

    Attributes
    ----------
    mean : array of shape (d,)
        The mode :math:`m` Powell's method reached.
    sd : array of shape (d,)
        :math:`s`, :data:`REFERENCE_WIDTH` times the curvature's sds (:func:`curvature_sds`).
    log_density : float
        :math:`\\log\\pi(m)`.
    n_evals : int
        Log-density evaluations made (the search and the curvatures).
    """

    mean: np.ndarray
    sd: np.ndarray
    log_density: float
    n_evals: int


def curvature_sds(log_density: Callable[[np.ndarray], float], mode, mode_log_density: float):
    r"""Per coordinate, the sd :math:`\sigma_i` that the log density's curvature at ``mode`` implies.

    Along coordinate :math:`i`, a central step :math:`h` drops the log density by
    :math:`\delta = \log\pi(m) - \tfrac12(\log\pi(m + h e_i) + \log\pi(m - h e_i))`, which is
    :math:`h^2 / (2\sigma_i^2)` for a Gaussian, so :math:`\sigma_i = h / \sqrt{2\delta}`. The step is
    scaled by tens until :math:`\delta` lies in [1e-3, 5] nats, so the answer does not depend on the
    coordinate's units. A coordinate where no step gives such a drop (the density flat or rising along
    it, or not finite on either side) gets NaN.

    Returns
    -------
    sds : array of shape (d,)
    n_evals : int
    """
    mode = np.asarray(mode, dtype=float)
    d = mode.shape[0]
    sds = np.full(d, np.nan)
    n_evals = 0
    for i in range(d):
        h = _FIRST_STEP * max(1.0, abs(mode[i]))
        for _ in range(_STEP_TRIES):
            step = np.zeros(d)
            step[i] = h
            up, down = float(log_density(mode + step)), float(log_density(mode - step))
            n_evals += 2
            drop = mode_log_density - 0.5 * (up + down)
            if not (math.isfinite(up) and math.isfinite(down)) or drop > _DROP_HIGH:
                h /= 10.0
            elif drop < _DROP_LOW:
                h *= 10.0
            else:
                sds[i] = h / math.sqrt(2.0 * drop)
                break
    return sds, n_evals


def mode_reference(
    log_density: Callable[[np.ndarray], float], x0, width: float = REFERENCE_WIDTH
) -> ModeReference:
    r"""The reference :math:`N(m, \operatorname{diag}(s^2))` for tempering from ``x0``'s basin.

    :math:`m` is where Powell's method (``scipy.optimize``, no gradients) on :math:`-\log\pi` from
    ``x0`` ends, within :math:`200 d` evaluations (at most 20 000); :math:`s_i` is ``width`` times
    :func:`curvature_sds`. A coordinate without a curvature (NaN) gets the largest of the others' sds
    (or :math:`\max(1, |m_i|)` times ``width`` if none has one).

    Parameters
    ----------
    log_density : callable
        :math:`x \mapsto \log\pi(x)` (may return -inf or NaN).
    x0 : array of shape (d,)
        Where the search starts; its log density must be finite.
    width : float, default :data:`REFERENCE_WIDTH`

    Returns
    -------
    ModeReference
    """
    x0 = np.asarray(x0, dtype=float)
    max_evals = min(_MODE_EVALS_PER_DIM * x0.shape[0], _MODE_MAX_EVALS)
    mode, worst, n_evals = powell_run(log_density, x0, max_evals, xtol=1e-6, ftol=1e-10)
    mode_log_density = -worst
    if not math.isfinite(mode_log_density) or worst >= _WORST:
        raise ValueError(
            "the search for the density's mode found no point of finite log density from the model's "
            "initial point"
        )
    sds, curvature_evals = curvature_sds(log_density, mode, mode_log_density)
    finite = np.isfinite(sds)
    fallback = np.max(sds[finite]) if finite.any() else np.maximum(1.0, np.abs(mode))
    sds = np.where(finite, sds, fallback)
    return ModeReference(mode, width * sds, mode_log_density, n_evals + curvature_evals)
