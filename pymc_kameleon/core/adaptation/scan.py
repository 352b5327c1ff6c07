r"""The coordinate scan that starts the scale-free adaptation: one coordinate moves per step.

Each coordinate :math:`j` has its own step size :math:`s_j`; a move is
:math:`x = y + s_j \varepsilon e_j`, :math:`\varepsilon \sim \mathcal N(0, 1)`, and
:math:`\log s_j` follows Robbins-Monro toward the one-dimensional optimal acceptance
:data:`SCAN_TARGET`, with a gain that starts large (3: a step size grows about 5x per accepted
move, so scales from 1e-4 to 1e4 are found in a few moves) and settles to 0.7. The coordinate
advances as the scan adapts, so a scan that is not adapted moves one coordinate for ever
(:meth:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation.end_tuning` ends it). The
move itself is :class:`~pymc_kameleon.core.proposals.CoordinateProposal`, built from this scan.

**In transit.** Far from the posterior a one-dimensional random walk accepts about half its
moves whatever their size (those toward the posterior, up to twice its distance), so the
acceptance rate barely exceeds :data:`SCAN_TARGET` and the step size grows a few percent per
move: from a start 30 sd away the scan ended with step sizes 0.06 of the posterior sd. Once a
coordinate's last :data:`TRANSIT_STREAK` accepted moves all went the same way, it is taken to be
in transit and only moves in that direction adapt its step size: accepted, they grow it (by up
to :data:`TRANSIT_LOG_STEP`, so that 25 moves can cross scales from 1 to 1e4); overshooting the
posterior, they are rejected and shrink it. The first accepted move the other way ends the
transit.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "MAX_LOG_STEP", "SCAN_TARGET", "TRANSIT_LOG_STEP", "TRANSIT_STREAK", "CoordinateScan", "scan_steps_for",
]

#: Acceptance rate the per-coordinate scan steps aim at (optimal for one-dimensional moves).
SCAN_TARGET = 0.44
#: Largest move of a Robbins-Monro log-scale in one step.
MAX_LOG_STEP = 0.5
#: Accepted moves in one direction in a row after which a coordinate is taken to be in transit.
TRANSIT_STREAK = 3
#: Largest growth of a log step size in one accepted move in transit.
TRANSIT_LOG_STEP = 1.0
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
        # Per coordinate: the sign of its last accepted move, and how many in a row went that way.
        self.direction = np.zeros(int(dim))
        self.streak = np.zeros(int(dim), dtype=int)

    @property
    def in_transit(self) -> np.ndarray:
        """Whether each coordinate's last :data:`TRANSIT_STREAK` accepted moves went the same way."""
        return self.streak >= TRANSIT_STREAK

    @property
    def scales(self) -> np.ndarray:
        """Per-coordinate step sizes :math:`s_j`."""
        return np.exp(self.log_scale)

    def adapt(self, accept_prob: float, start=None, proposal=None, y_new=None) -> None:
        """One Robbins-Monro step of the current coordinate's log step size, then the next coordinate.

        ``start`` is the state the move started from, ``proposal`` the point it proposed (along the
        current coordinate) and ``y_new`` the state after the step; with them, the move's direction
        and whether it was accepted keep track of the transit (without them, the step size adapts
        as if not in transit).
        """
        j = self.coordinate
        direction = 0.0
        if start is not None and proposal is not None:
            direction = float(np.sign(float(proposal[j]) - float(start[j])))
        accepted = direction != 0.0 and y_new is not None and float(y_new[j]) == float(proposal[j])
        # In transit, a move away from the posterior says nothing about the step size.
        transit = self.in_transit[j]
        if not (transit and direction == -self.direction[j] and not accepted):
            gain = _SCAN_GAIN + (_SCAN_GAIN_START - _SCAN_GAIN) * math.exp(-self.counts[j] / _SCAN_GAIN_MOVES)
            if transit:  # an accepted move grows the step by TRANSIT_LOG_STEP
                gain = max(gain, TRANSIT_LOG_STEP / (1.0 - SCAN_TARGET))
            gain *= self.learning_rate
            cap = (TRANSIT_LOG_STEP if transit else MAX_LOG_STEP) / gain
            self.log_scale[j] += gain * (min(accept_prob, SCAN_TARGET + cap) - SCAN_TARGET)
            self.log_scale[j] = min(max(self.log_scale[j], -700.0), 700.0)
        if accepted:
            same_way = direction == self.direction[j]
            self.streak[j] = self.streak[j] + 1 if same_way else 1
            self.direction[j] = direction
        self.counts[j] += 1
        self.coordinate = (j + 1) % self.log_scale.size
