r"""Tuning's measure of the independence component: is it on, and why (decision record 0038).

The tuned proposal (:class:`~pymc_kameleon.core.kameleon.scale_free.ScaleFreeProposal`) may draw a
share :math:`\iota` of its moves independently from the Student-t :math:`t_\nu(m, C)` with the
learned mean and covariance. :class:`IndependenceTuning` decides, per chain and per window, whether
it is on (``ScaleFreeState.independence_weight`` :math:`\in \{0, \iota_{max}\}`). It is *measured
before it is used*: while it is off, a share :data:`INDEPENDENCE_PROBE` of the tuning steps also
evaluates the target at one such draw without moving (a *probe*). At each window's end it is on for
the next window if, in this one,

(a) its draws jumped, or would have jumped, further than the walk's moves, by the expected squared
    jump distance in whitened units, :math:`\overline{\min(1, \alpha)\, \lVert w_x - w_y \rVert^2}`
    (Pasarica and Gelman 2010; for a probe :math:`\alpha = \min(1, w(x') / w(y))`, the independence
    sampler's, with :math:`w = \pi / t_\nu`), and
(b) the Pareto :math:`\hat k` of its draws' importance weights is at most
    :data:`INDEPENDENCE_MAX_KHAT` (above it the Student-t misses a region the target holds, such as a
    funnel's neck, where a chain that enters sticks).

While on, its own moves are measured. After tuning it stays as the last window left it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from pymc_kameleon.core.adaptation.diagnostics import pareto_tail_index
from pymc_kameleon.core.adaptation.state import ScaleFreeState, TuningDraw
from pymc_kameleon.core.kameleon.scale_free import INDEPENDENCE_DF
from pymc_kameleon.core.linalg import solve_lower
from pymc_kameleon.core.proposals import student_t_log_density
from pymc_kameleon.core.validation import check_independence_weight

__all__ = ["INDEPENDENCE_MAX_KHAT", "INDEPENDENCE_PROBE", "IndependenceDecision", "IndependenceTuning"]

#: Share of the tuning steps that evaluate the target at an independent draw (without moving) while
#: the independence component is off, to measure whether it would pay.
INDEPENDENCE_PROBE = 0.1
# Fewer moves than this of either kind in a window leave the independence weight as it was.
_MIN_JUMPS = 20
#: Pareto k-hat of the independent draws' importance weights above which the component is not used:
#: the Student-t misses a region the target holds (a funnel's neck), where a chain would stick.
INDEPENDENCE_MAX_KHAT = 0.7


class IndependenceDecision(NamedTuple):
    """One window's verdict on the independence component (:attr:`IndependenceTuning.decisions`, also
    ``ScaleFreeAdaptation.independence_decisions``).

    Attributes
    ----------
    tune_step : int
        The tuning step at which the window ended (or tuning did).
    independent_jump, walk_jump : float
        Mean expected squared jump (whitened) of the window's independent draws (probes or moves)
        and of its walk moves.
    khat : float
        Pareto :math:`\hat k` of the independent draws' importance weights (NaN: too few finite).
    draws : int
        Independent draws (probes or moves) in the window.
    on : bool
        Whether the component is on after the verdict.
    """

    tune_step: int
    independent_jump: float
    walk_jump: float
    khat: float
    draws: int
    on: bool


class IndependenceTuning:
    r"""Whether the independence component is on, measured window by window (module docstring).

    Parameters
    ----------
    weight : float
        :math:`\iota_{max} \in [0, 1)`, the component's weight when on; 0 never turns it on and draws
        no uniform for it.

    Attributes
    ----------
    decisions : list of IndependenceDecision
        Every window's verdict, in order.
    """

    def __init__(self, weight: float):
        check_independence_weight(weight)
        self.weight = float(weight)
        # Per window: [sum of min(1, alpha) |w_x - w_y|^2, moves], independent draws then walk moves.
        self._jumps = np.zeros((2, 2))
        self._log_weights = []  # the window's independent draws: log pi - log t_nu (whitened)
        self.decisions = []

    @property
    def enabled(self) -> bool:
        """Whether the component can ever be on."""
        return self.weight > 0.0

    def record_move(self, state: ScaleFreeState, draw: TuningDraw, accept_prob: float) -> None:
        r"""Add a move's expected squared jump, :math:`\min(1, \alpha) \lVert w_x - w_y \rVert^2`, and an
        independent move's importance weight."""
        if not math.isfinite(accept_prob) or draw.start is None:
            return
        step = solve_lower(state.chol, draw.proposal - draw.start)  # BLAS dtrsv: a statistic, not a draw
        independent = draw.component == "independence"
        self._jumps[0 if independent else 1] += (min(accept_prob, 1.0) * float(step @ step), 1.0)
        if independent:
            self._log_weights.append(draw.proposal_log_density - _log_t(state.whiten(draw.proposal)))

    def probe_due(self, state: ScaleFreeState, windows_completed: int, rng) -> bool:
        """Whether this tuning step should also evaluate the target at an independent draw: with
        probability :data:`INDEPENDENCE_PROBE` while the component is off, from the first window after
        the scan (no uniform is drawn otherwise)."""
        if not self.enabled or state.phase == "scan" or windows_completed < 1:
            return False
        return state.independence_weight <= 0.0 and rng.random() < INDEPENDENCE_PROBE

    def record_probe(self, state: ScaleFreeState, start, start_log_density: float, point,
                     point_log_density: float) -> None:
        r"""An independent draw ``point`` evaluated but not proposed: its importance weight, and the jump
        it would have made from ``start``, :math:`\min(1, w(x') / w(y)) \lVert w_{x'} - w_y \rVert^2`
        with :math:`w = \pi / t_\nu` (the independence sampler's acceptance probability)."""
        w_x, w_y = state.whiten(point), state.whiten(start)
        log_weight = point_log_density - _log_t(w_x)
        log_ratio = log_weight - (start_log_density - _log_t(w_y))
        finite = math.isfinite(log_weight) and not math.isnan(log_ratio)
        accept = math.exp(min(log_ratio, 0.0)) if finite else 0.0
        d = w_x - w_y
        self._jumps[0] += (accept * float(d @ d), 1.0)
        self._log_weights.append(log_weight)

    def verdict(self, tune_step: int) -> bool | None:
        """Whether the window's independent draws jumped (or would have jumped) further on average than
        its walk moves, with importance weights whose tail is light enough (None with fewer than
        ``_MIN_JUMPS`` of either); recorded in :attr:`decisions`."""
        (ind_sum, ind_n), (walk_sum, walk_n) = self._jumps
        if min(ind_n, walk_n) < _MIN_JUMPS:
            return None
        khat = pareto_tail_index(self._log_weights)
        independent_jump, walk_jump = ind_sum / ind_n, walk_sum / walk_n
        # NaN k-hat too fails: weights that cannot be judged (infinite, or too few finite).
        wins = bool(khat <= INDEPENDENCE_MAX_KHAT and independent_jump > walk_jump)
        decision = IndependenceDecision(tune_step, independent_jump, walk_jump, khat, int(ind_n), wins)
        self.decisions.append(decision)
        return wins

    def window_ended(self, state: ScaleFreeState, after_scan: bool) -> None:
        """At a window end: the component on or off for the next window, from this window's jumps."""
        if not self.enabled:
            return
        wins = None if after_scan else self.verdict(state.tune_steps)
        if wins is not None:
            state.independence_weight = self.weight if wins else 0.0
        self._jumps[:] = 0.0
        self._log_weights.clear()

    def freeze(self, state: ScaleFreeState) -> None:
        """At the end of tuning: the component stays on if it won the window tuning ended in (or, with
        too few moves there to tell, the last window that could)."""
        if not self.enabled:
            return
        wins = self.verdict(state.tune_steps)
        if wins is not None:
            state.independence_weight = self.weight if wins else 0.0


def _log_t(w) -> float:
    return student_t_log_density(w, INDEPENDENCE_DF)
