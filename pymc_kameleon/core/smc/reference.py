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

from pymc_kameleon.core.starts import NO_FINITE_VALUE, powell_run

__all__ = ["REFERENCE_WIDTH", "Curvature", "ModeReference", "NoModeError", "curvature_sds", "mode_reference"]

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
# A trial point this much above the point the search reached shows it is no mode: the search goes on
# from there, _MODE_RESTARTS times at most. An imprecise mode, delta sds off, has points at most
# delta^2 / 2 nats higher nearby, so 1 nat is a miss by more than 1.4 sds.
_HIGHER_NATS = 1.0
_MODE_RESTARTS = 2
# Curvature sds below this times max(1, |m_i|) are a peak of the arithmetic, not of a posterior.
_DEGENERATE_SD = 1e-10


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


class NoModeError(ValueError):
    """The log density rises beyond every point the search for its mode reached, along ``coordinates``
    (indices): it has no mode there, as a hierarchical model's funnel, unbounded in its neck, has none."""

    def __init__(self, message: str, coordinates: list[int]):
        super().__init__(message)
        self.coordinates = coordinates


@dataclass(frozen=True)
class Curvature:
    """What :func:`curvature_sds` found at a point.

    Attributes
    ----------
    sds : array of shape (d,)
        The curvature's sds (NaN where there is none).
    n_evals : int
    higher : tuple or None
        ``(point, log density)`` of the highest trial point if one lay more than
        :data:`_HIGHER_NATS` above the given one (it is no mode), else None.
    rising : list of int
        The coordinates along which a trial point lay that much higher.
    unresolved : list of int
        The coordinates along which no step that moves the point (down to the coordinate's float
        resolution) had a finite density on both sides: the point is at the edge of where the density is
        finite.
    """

    sds: np.ndarray
    n_evals: int
    higher: tuple | None
    rising: list
    unresolved: list


def curvature_sds(log_density: Callable[[np.ndarray], float], mode, mode_log_density: float) -> Curvature:
    r"""Per coordinate, the sd :math:`\sigma_i` that the log density's curvature at ``mode`` implies.

    Along coordinate :math:`i`, a central step :math:`h` drops the log density by
    :math:`\delta = \log\pi(m) - \tfrac12(\log\pi(m + h e_i) + \log\pi(m - h e_i))`, which is
    :math:`h^2 / (2\sigma_i^2)` for a Gaussian, so :math:`\sigma_i = h / \sqrt{2\delta}`. The step is
    scaled by tens until :math:`\delta` lies in [1e-3, 5] nats, so the answer does not depend on the
    coordinate's units. A coordinate where no step gives such a drop (the density flat or rising along
    it, or not finite on either side) gets NaN. A trial point more than :data:`_HIGHER_NATS` above
    ``mode`` says that ``mode`` is no mode (a search stopped short, or a density without one): it is
    returned, with the coordinates along which such points lay.
    """
    mode = np.asarray(mode, dtype=float)
    d = mode.shape[0]
    sds = np.full(d, np.nan)
    n_evals, higher, rising, unresolved = 0, None, [], []
    for i in range(d):
        h = _FIRST_STEP * max(1.0, abs(mode[i]))
        finite_pair = False
        for _ in range(_STEP_TRIES):
            if mode[i] + h == mode[i] or mode[i] - h == mode[i]:
                break  # below the coordinate's float resolution: no step left to read a curvature from
            step = np.zeros(d)
            step[i] = h
            points = (mode + step, mode - step)
            up, down = float(log_density(points[0])), float(log_density(points[1]))
            n_evals += 2
            for point, value in zip(points, (up, down)):
                if math.isfinite(value) and value > mode_log_density + _HIGHER_NATS:
                    if i not in rising:
                        rising.append(i)
                    if higher is None or value > higher[1]:
                        higher = (point, value)
            drop = mode_log_density - 0.5 * (up + down)
            finite_pair = finite_pair or (math.isfinite(up) and math.isfinite(down))
            if not (math.isfinite(up) and math.isfinite(down)) or drop > _DROP_HIGH:
                h /= 10.0
            elif drop < _DROP_LOW:
                h *= 10.0
            else:
                sds[i] = h / math.sqrt(2.0 * drop)
                break
        if not finite_pair:
            unresolved.append(i)
    return Curvature(sds, n_evals, higher, rising, unresolved)


def mode_reference(
    log_density: Callable[[np.ndarray], float], x0, width: float = REFERENCE_WIDTH
) -> ModeReference:
    r"""The reference :math:`N(m, \operatorname{diag}(s^2))` for tempering from ``x0``'s basin.

    :math:`m` is where Powell's method (``scipy.optimize``, no gradients) on :math:`-\log\pi` from
    ``x0`` ends, within :math:`200 d` evaluations (at most 20 000); :math:`s_i` is ``width`` times
    :func:`curvature_sds`. A coordinate without a curvature (NaN) gets the largest of the others' sds
    (or :math:`\max(1, |m_i|)` times ``width`` if none has one). Where the curvature's steps find a
    point more than 1 nat higher, the search goes on from there, at most :data:`_MODE_RESTARTS` times.

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

    Raises
    ------
    NoModeError
        If the density still rises beyond the last search's end, or its peak there is narrower than
        1e-10 times :math:`\max(1, |m_i|)` along a coordinate: no mode to temper from.
    ValueError
        If the search finds no point of finite log density.
    """
    x0 = np.asarray(x0, dtype=float)
    max_evals = min(_MODE_EVALS_PER_DIM * x0.shape[0], _MODE_MAX_EVALS)
    n_evals = 0
    for restart in range(_MODE_RESTARTS + 1):
        mode, worst, search_evals = powell_run(log_density, x0, max_evals, xtol=1e-6, ftol=1e-10)
        n_evals += search_evals
        mode_log_density = -worst
        if not math.isfinite(mode_log_density) or worst >= NO_FINITE_VALUE:
            raise ValueError(
                "the search for the density's mode found no point of finite log density from the model's "
                "initial point"
            )
        curvature = curvature_sds(log_density, mode, mode_log_density)
        n_evals += curvature.n_evals
        if curvature.higher is None:
            break
        if restart == _MODE_RESTARTS:
            raise NoModeError(
                f"the log density still rises beyond the point its search reached, after {restart + 1} "
                "searches: it has no mode there (a density unbounded along a ridge, as a hierarchical "
                "model's funnel is in its neck)",
                curvature.rising,
            )
        x0 = curvature.higher[0]
    if curvature.unresolved:
        raise NoModeError(
            f"the density is not finite on both sides of the point its search reached (log density "
            f"{mode_log_density:.4g}), whatever the step: the search ran to the edge of where it is finite, "
            "as it does where the density is unbounded (a scale running to 0 with data it fits exactly, a "
            "funnel's neck)",
            curvature.unresolved,
        )
    sds = curvature.sds
    # A peak narrower than a float64 step at the mode is no posterior's: a funnel's neck, where the search
    # ran until its coordinates could only be told apart in their last digits.
    degenerate = np.flatnonzero(sds < _DEGENERATE_SD * np.maximum(1.0, np.abs(mode)))
    if degenerate.size:
        raise NoModeError(
            f"the point its search reached (log density {mode_log_density:.4g}) is a peak narrower than "
            f"floating point resolves (sd {np.min(sds[degenerate]):.2g}): the density has no usable mode, "
            "as a hierarchical model's funnel has none (its density is unbounded in the neck)",
            degenerate.tolist(),
        )
    finite = np.isfinite(sds)
    fallback = np.max(sds[finite]) if finite.any() else np.maximum(1.0, np.abs(mode))
    sds = np.where(finite, sds, fallback)
    return ModeReference(mode, width * sds, mode_log_density, n_evals)
