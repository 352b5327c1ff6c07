r"""One adaptation window: its draws, acceptance probabilities and gradients, and the signs that it
should end.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from pymc_kameleon.core.adaptation.covariance import shrunk_covariance
from pymc_kameleon.core.adaptation.history import HistoryBuffer
from pymc_kameleon.core.adaptation.whitening import Whitening

__all__ = [
    "AdaptationWindow",
    "DRIFT_STATES",
]


# A window whose chain moved in fewer than this fraction of its steps says nothing about the
# posterior's covariance: it keeps the previous whitening (a stuck chain must not shrink C to zero).
_MIN_WINDOW_MOVES = 0.02
# A window ends early when its draws' sd in whitened coordinates is off by more than this factor.
_WHITENING_TOLERANCE = 3.0
# The last this many tuning states are kept for the end-of-tuning drift check (TuningReport.drift).
DRIFT_STATES = 1000


class AdaptationWindow:
    """The draws of the current adaptation window, and the signs that it should end.

    ``index`` counts the windows completed (the coordinate scan counts as the first) and ``end``
    is the tuning step at which the current one ends. ``recent``, ``recent_log_density`` and
    ``recent_gradient`` keep the last :data:`DRIFT_STATES` tuning states, their log densities and
    (if the step has them) the log density's gradients there across windows, for the drift, climb
    and gradient-spread checks; ``recent_accept`` their acceptance probabilities and ``recent_tuned``
    whether each came from a move whose scale is tuned to the target acceptance, for the acceptance
    check when tuning ends early in a window; ``recent_population`` (pooled) every
    chain's states at those steps, for the end-of-tuning check across chains.

    **Pooled** (a population of chains, see :meth:`record`): the window's draws are every chain's
    state at every step, so its covariance, :math:`Z`, movement and end-early test read all chains'
    tuning; the acceptance, the gradients and the recent states stay this chain's.

    **Angles** (``angles``, an :class:`~pymc_kameleon.core.angles.AngleFrame`): every row recorded is
    first moved into the frame's period, so that no window mixes copies of a periodic posterior.
    """

    def __init__(self, dim: int, history_size: int, first_window: int, end: int, angles=None):
        self.angles = angles
        self.draws = HistoryBuffer(dim, max(int(history_size), 2))
        self.first_window = first_window
        self.index = 0
        self.end = end
        self.accept = []  # acceptance probabilities (or their estimates) of this window's steps
        self.tuned = []  # per step: whether its move's scale is tuned to the target (not an independent draw)
        self.moves = 0  # steps of this window whose state differs from the previous one (per chain, pooled)
        self.rows = 0  # draws recorded in this window (one per step, or one per chain and step, pooled)
        self._last_rows = None  # the population's states at the last pooled step
        self._gradient_squares = np.zeros(dim)  # sum over this window's steps of the squared gradient
        self._gradients = 0  # steps of this window that came with a gradient
        self._last_state = None
        self.seeded = 0  # draws given before the first step (start_from_draws), not the chain's own
        self.recent = deque(maxlen=DRIFT_STATES)
        self.recent_log_density = deque(maxlen=DRIFT_STATES)
        self.recent_gradient = deque(maxlen=DRIFT_STATES)
        self.recent_accept = deque(maxlen=DRIFT_STATES)
        self.recent_tuned = deque(maxlen=DRIFT_STATES)
        self.recent_population = deque(maxlen=DRIFT_STATES)  # pooled: every chain's state per step

    def seed(self, points: np.ndarray, end: int) -> None:
        """Before the first step: ``points`` (draws that cover the posterior) stand for the coordinate
        scan. This first window after them ends at step ``end``, holding them besides the chains' draws;
        its movement and end-early tests follow the steps alone."""
        self.index, self.end = 1, end
        if self.angles is not None:
            points = self.angles.record(points)
        for point in points:
            self.draws.append(point)
        self.seeded = points.shape[0]

    def forget_recent_states(self) -> None:
        """After this chain jumped to another's state (a rescue): its drift, climb and gradient
        checks read only the states since."""
        self.recent.clear()
        self.recent_log_density.clear()
        self.recent_gradient.clear()

    def record(
        self, y_new, accept_prob: float, log_density: float = math.nan, gradient=None, population=None,
        tuned: bool = True,
    ) -> None:
        """One tuning step's state, acceptance probability, log density (NaN if unknown) and the log
        density's gradient (None if unknown). ``tuned``: whether the move's scale is tuned to the target
        acceptance (False for an independent draw), for :attr:`last_accept_rate`.

        ``population``, if given, is every chain's state at the start of the step (rows, this
        chain's among them, in a fixed order): those rows are the window's draws instead of
        ``y_new``, so that every chain of a population records the same draws.
        """
        self.accept.append(float(accept_prob))
        self.recent_accept.append(float(accept_prob))
        self.tuned.append(bool(tuned))
        self.recent_tuned.append(bool(tuned))
        y_new = np.asarray(y_new, dtype=float)
        if self.angles is not None:
            if population is None:
                y_new = self.angles.record(y_new)[0]
            else:
                population = self.angles.record(population)
        if population is None:
            self.draws.append(y_new)
            self.rows += 1
            if self._last_state is not None and not np.array_equal(y_new, self._last_state):
                self.moves += 1
        else:
            rows = np.asarray(population, dtype=float)
            self.draws.append_rows(rows)
            self.rows += rows.shape[0]
            if self._last_rows is not None and self._last_rows.shape == rows.shape:
                moves, jumped = _moves_and_jump(self._last_rows, rows)
                self.moves += moves
                if jumped:
                    # A rescued chain's states before its jump are no part of its walk: the
                    # cross-chain check reads only the population's states since.
                    self.recent_population.clear()
            self._last_rows = rows.copy()
            self.recent_population.append(self._last_rows)
        self._last_state = y_new.copy()
        self.recent.append(self._last_state)
        self.recent_log_density.append(float(log_density))
        if gradient is None:
            self.recent_gradient.append(None)
        else:
            gradient = np.array(gradient, dtype=float)
            self.recent_gradient.append(gradient)
            self._gradient_squares += gradient * gradient
            self._gradients += 1

    @property
    def stuck(self) -> bool:
        """Whether the chain moved in fewer than 2% of this window's steps.

        Counted from the draws, not from the adaptation signal: delayed acceptance's signal is an
        importance weight that one rare pass can make large in a window where the chain never moved.
        """
        return self.moves < _MIN_WINDOW_MOVES * self.rows

    @property
    def variance_floor(self) -> np.ndarray | None:
        r"""Per coordinate, :math:`1 / \overline{(\partial_i \log\pi)^2}` over this window's states.

        A lower bound on the target's variance in coordinate :math:`i` (Cramér-Rao, see
        :func:`gradient_spread`), so a floor for a covariance learned from draws that barely moved
        there. None unless every step of the window came with a finite gradient.
        """
        if self._gradients == 0 or self._gradients != len(self.accept):
            return None
        mean_square = self._gradient_squares / self._gradients
        if not np.all(np.isfinite(mean_square) & (mean_square > 0)):
            return None
        return 1.0 / mean_square

    @property
    def accept_rate(self) -> float:
        """Mean acceptance probability of this window's tuned moves (NaN if none): an independent draw's
        is left out, as its spread is not tuned to the target (mixed in, independence draws accepted at
        0.84 took a healthy 2-d chain's rate to 0.62, read as steps too short)."""
        return _tuned_mean(self.accept, self.tuned)

    @property
    def last_accept_rate(self) -> float:
        """Mean acceptance probability of the tuned moves over the last tuning steps (NaN if none): this
        window's, or the last ``first_window`` (at most :data:`DRIFT_STATES`) if this window has fewer
        steps.

        Tuning can end just after a window did; this window's few steps (none, at worst) would then
        hide a chain that stopped moving.
        """
        least = min(self.first_window, DRIFT_STATES)
        if len(self.accept) >= least or len(self.recent_accept) <= len(self.accept):
            return self.accept_rate
        return _tuned_mean(list(self.recent_accept)[-least:], list(self.recent_tuned)[-least:])

    def whitening_is_off(self, whitening: Whitening) -> bool:
        r"""Whether this window's draws so far say the learned covariance is off by a factor 3 in sd.

        Checked every ``first_window`` draws once a window (after the first) has ``2 first_window``.
        The geometric mean variance :math:`|\hat C_w|^{1/d}` of the later half of the window's
        draws, in whitened coordinates, is about 1 when :math:`C` fits. Far below, the chain has
        settled into a region much smaller than :math:`C` (estimated while walking in from a far
        start); far above, it is still walking. Either way the window should end early, so that a
        tuning run shorter than the window schedule does not end with a covariance from the
        transient (an unstandardised regression from a far start: sds 2-100x the posterior's before).
        """
        # Pooled windows hold several draws per step; the checks follow the steps.
        n = len(self.draws) if self._last_rows is None and not self.seeded else len(self.accept)
        if self.index == 0 or n < 2 * self.first_window or n % self.first_window:
            return False
        points = self.draws.points
        estimate = shrunk_covariance(whitening.whiten(points[points.shape[0] // 2 :]))
        if estimate is None:
            return False
        sign, log_det = np.linalg.slogdet(estimate[1])
        # The geometric mean of the variances (rotation-invariant, unlike the diagonal, and not
        # dominated by one wide direction, like the trace).
        return sign <= 0 or abs(log_det / points.shape[1]) > 2.0 * math.log(_WHITENING_TOLERANCE)

    def merged(self, *others: AdaptationWindow) -> AdaptationWindow:
        """This window pooled with other chains' windows of the same schedule (mergeable state).

        The pooled window's draws are each window's stored draws in turn (evenly thinned if they
        exceed this window's capacity), and its sufficient statistics are the sums of theirs: the
        acceptance probabilities, the steps that moved, the squared gradients and their count. So
        the mean and covariance it estimates (:func:`~.covariance.shrunk_covariance` of its draws),
        its variance floor, acceptance rate and stuck test are those of all the chains' steps
        together. The recent states (the end-of-tuning checks) stay
        this chain's.
        """
        pooled = AdaptationWindow(
            self.draws.dim, self.draws.capacity, self.first_window, self.end, self.angles
        )
        pooled.index = self.index
        for window in (self, *others):
            for point in window.draws.points:
                pooled.draws.append(point)
            pooled.accept.extend(window.accept)
            pooled.tuned.extend(window.tuned)
            pooled.moves += window.moves
            pooled.rows += window.rows
            pooled._gradient_squares = pooled._gradient_squares + window._gradient_squares
            pooled._gradients += window._gradients
        pooled._last_state = self._last_state
        pooled.recent, pooled.recent_log_density = self.recent.copy(), self.recent_log_density.copy()
        pooled.recent_gradient, pooled.recent_accept = self.recent_gradient.copy(), self.recent_accept.copy()
        pooled.recent_tuned = self.recent_tuned.copy()
        return pooled

    def start_next(self, end: int) -> None:
        """Close this window and start the next, which ends at tuning step ``end``."""
        self.index += 1
        self.end = end
        if self.angles is not None:
            self.angles.next_window()
        self.draws.clear()
        self.accept = []
        self.tuned = []
        self.moves = 0
        self.rows = 0
        self.seeded = 0
        self._gradient_squares = np.zeros_like(self._gradient_squares)
        self._gradients = 0


def _tuned_mean(accept, tuned) -> float:
    """The mean of the acceptance probabilities ``accept`` of the steps whose ``tuned`` is True (NaN if
    none)."""
    values = [a for a, t in zip(accept, tuned, strict=True) if t]
    return float(np.mean(values)) if values else math.nan


def _moves_and_jump(previous: np.ndarray, rows: np.ndarray) -> tuple[int, bool]:
    """The chains that moved since ``previous`` (their state differs from their own previous one), and
    whether one of them now equals another chain's previous state exactly: a rescue (in a continuous
    space no Metropolis move lands there). A moved chain's own previous state differs from its state, so
    comparing with every previous state is enough. Compared as bytes, every pooled tuning step: a third
    less time than one broadcast comparison of all pairs at d = 10 (adding 0.0 makes -0.0 equal 0.0,
    as ==; the states are finite, so NaN never compares)."""
    width = previous.shape[1] * previous.itemsize
    before, now = (previous + 0.0).tobytes(), (rows + 0.0).tobytes()
    before_rows = [before[k : k + width] for k in range(0, len(before), width)]
    seen = set(before_rows)
    moves, jumped = 0, False
    for i, own in enumerate(before_rows):
        row = now[i * width : (i + 1) * width]
        if row != own:
            moves += 1
            jumped = jumped or row in seen
    return moves, jumped
