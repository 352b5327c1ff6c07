r"""The coordinate scan that starts the scale-free adaptation: one coordinate moves per step.

Each coordinate :math:`j` has its own step size :math:`s_j`; a move is
:math:`x = y + s_j \varepsilon e_j`, :math:`\varepsilon \sim \mathcal N(0, 1)`, and
:math:`\log s_j` follows Robbins-Monro toward the one-dimensional optimal acceptance
:data:`SCAN_TARGET`, with a gain that starts large (3: a step size grows about 5x per accepted
move, so scales from 1e-4 to 1e4 are found in a few moves) and settles to 0.7. The coordinate
advances as the scan adapts, so a scan that is not adapted moves one coordinate for ever
(:meth:`~pymc_kameleon.core.scale_free.ScaleFreeKameleon.end_tuning` ends it).
"""

from __future__ import annotations

import math

import numpy as np

from pymc_kameleon.core.proposals import Move

__all__ = ["MAX_LOG_STEP", "SCAN_TARGET", "CoordinateScan", "scan_steps_for"]

#: Acceptance rate the per-coordinate scan steps aim at (optimal for one-dimensional moves).
SCAN_TARGET = 0.44
#: Largest move of a Robbins-Monro log-scale in one step.
MAX_LOG_STEP = 0.5
# Robbins-Monro gain of the scan's log step sizes: 3 at a coordinate's first move, settling to 0.7.
_SCAN_GAIN, _SCAN_GAIN_START, _SCAN_GAIN_MOVES = 0.7, 3.0, 8.0
_LOG_2PI = math.log(2.0 * math.pi)


def scan_steps_for(dim: int) -> int:
    """Default length of the coordinate scan: 25 moves per coordinate, plus 50."""
    return 25 * int(dim) + 50


class CoordinateScan:
    """Per-coordinate step sizes, the coordinate that moves next, and their adaptation."""

    def __init__(self, dim: int, initial_scale: float, learning_rate: float):
        self.log_scale = np.full(int(dim), math.log(initial_scale))
        self.counts = np.zeros(int(dim), dtype=int)
        self.coordinate = 0
        self.learning_rate = float(learning_rate)

    @property
    def scales(self) -> np.ndarray:
        """Per-coordinate step sizes :math:`s_j`."""
        return np.exp(self.log_scale)

    def propose(self, y, rng) -> Move:
        j = self.coordinate
        x = np.array(y, dtype=float, copy=True)
        x[j] += math.exp(self.log_scale[j]) * rng.standard_normal()
        return Move(x)

    def log_density(self, x, y) -> float:
        r""":math:`\log q(x \mid y)`: Gaussian along the current coordinate, :math:`-\infty` off it."""
        j = self.coordinate
        others = np.delete(x - y, j)
        if np.any(others != 0.0):
            return -math.inf
        s = math.exp(self.log_scale[j])
        return -0.5 * _LOG_2PI - math.log(s) - 0.5 * ((x[j] - y[j]) / s) ** 2

    def adapt(self, accept_prob: float) -> None:
        """One Robbins-Monro step of the current coordinate's log step size, then the next coordinate."""
        j = self.coordinate
        gain = _SCAN_GAIN + (_SCAN_GAIN_START - _SCAN_GAIN) * math.exp(-self.counts[j] / _SCAN_GAIN_MOVES)
        gain *= self.learning_rate
        self.log_scale[j] += gain * (min(accept_prob, SCAN_TARGET + MAX_LOG_STEP / gain) - SCAN_TARGET)
        self.log_scale[j] = min(max(self.log_scale[j], -700.0), 700.0)
        self.counts[j] += 1
        self.coordinate = (j + 1) % self.log_scale.size
