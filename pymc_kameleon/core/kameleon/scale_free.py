r"""The tuned proposal of KAMH and GP-DA MH: the Kameleon proposal in coordinates whitened by a
learned covariance, mixed with the Adaptive Metropolis walk.

With the learned mean :math:`m` and covariance :math:`C = L L^\top` of a
:class:`~pymc_kameleon.core.adaptation.state.ScaleFreeState` and whitened coordinates
:math:`w = L^{-1}(x - m)`, the proposal is

.. math::
    q(x \mid y) = |L|^{-1}\Big[(1 - \rho)\,
                  \mathcal N\big(w_x;\ w_y,\ \gamma^2 I + \nu^2 M_{w_y} H M_{w_y}^\top\big)
                  + \rho\, \mathcal N\big(w_x;\ w_y,\ \lambda^2 I\big)\Big],

a mixture of the Kameleon proposal built on the whitened subsample :math:`Z_w = L^{-1}(Z - m)`
(bandwidth and :math:`\gamma` in whitened units) and the Adaptive Metropolis (AM) random walk
:math:`\mathcal N(y, \lambda^2 C)`. The AM component is the fallback where the kernel carries no
information (far from :math:`Z`, or where the RKHS term degenerates in high dimension); both
Hastings terms are the full mixture density, so the chain is exact. Sampling :math:`x` and
:math:`A x + b` gives the same chain after mapping back (affine equivariance), up to the
floating-point rounding of the whitening.

Before the state has a Kameleon family the proposal is the AM walk alone, and during the
coordinate scan it is the scan's one-coordinate move
(:class:`~pymc_kameleon.core.proposals.CoordinateProposal`). The proposal only reads the state;
:class:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation` changes it.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_kameleon.core.adaptation.state import ScaleFreeState
from pymc_kameleon.core.kameleon.moves import KameleonMoves
from pymc_kameleon.core.linalg import same_array
from pymc_kameleon.core.proposals import CoordinateProposal, Move, Proposal, mixture_log_density

__all__ = ["ScaleFreeProposal"]

_LOG_2PI = math.log(2.0 * math.pi)


class ScaleFreeProposal(Proposal):
    r"""The scan, the AM walk or the Kameleon/AM mixture of a :class:`ScaleFreeState` (module docstring).

    Parameters
    ----------
    state : ScaleFreeState
        What tuning has learned; read at every call.
    am_weight : float
        Mixture weight :math:`\rho \in [0, 1]` of the AM component once the state has a Kameleon family.
    on_jitter : callable, optional
        Called when a Kameleon covariance needed jitter or could not be factorised.

    Notes
    -----
    Caches: the Kameleon factor at the current state
    (:class:`~pymc_kameleon.core.kameleon.moves.KameleonMoves`, rebuilt when the state's family
    changes), and the accepted proposal's own whitened coordinates:
    whitening the model point again would differ in the last bits and miss the Kameleon cache.
    """

    def __init__(self, state: ScaleFreeState, am_weight: float, on_jitter=None):
        self.state = state
        self.am_weight = float(am_weight)
        self.on_jitter = on_jitter
        self._scan = CoordinateProposal(state.scan)
        self._moves = None  # KameleonMoves on state.family
        # (whitening, model point, its whitened coordinates) of the last accepted Kameleon-phase move
        self._current_white = None

    @property
    def symmetric(self) -> bool:
        """The scan's and the AM walk's moves are symmetric (their Hastings terms are reported as 0);
        the Kameleon mixture's are not."""
        return self.state.phase == "scan" or self.state.family is None

    @property
    def moves(self) -> KameleonMoves | None:
        """The Kameleon component on the state's whitened subsample (None before the first)."""
        family = self.state.family
        if family is None:
            return None
        if self._moves is None or self._moves.family is not family:
            self._moves = KameleonMoves(family, on_jitter=self.on_jitter)
        return self._moves

    def _am_log_density(self, w_to, w_from) -> float:
        scale = self.state.am_scale.value
        r = (w_to - w_from) / scale
        return -0.5 * self.state.dim * _LOG_2PI - self.state.dim * math.log(scale) - 0.5 * float(r @ r)

    def _whitened_current(self, y) -> np.ndarray:
        cur = self._current_white
        if cur is not None and cur[0] is self.state.whitening and same_array(cur[1], y):
            return cur[2]
        return self.state.whiten(y)

    def propose(self, y, rng) -> Move:
        state = self.state
        if state.phase == "scan":
            return self._scan.propose(y, rng)
        w_y = self._whitened_current(y)
        scale = state.am_scale.value
        moves = self.moves
        if moves is None:
            x = state.to_model(w_y + scale * rng.standard_normal(state.dim))
            return Move(x, component="adaptive_metropolis")
        at_y = moves.at_current(w_y)
        if rng.random() < self.am_weight:
            component = "adaptive_metropolis"
            w_x = w_y + scale * rng.standard_normal(state.dim)
        else:
            component = "kameleon"
            w_x = at_y.sample(rng)
        at_x, rkhs_x = moves.factor_at(w_x)
        x = state.to_model(w_x)
        log_q_forward = self._mixture(at_y.log_density(w_x), w_x, w_y)
        if at_x is None:
            return Move(x, log_q_forward, math.nan, None, at_y.jitter, component)
        log_q_reverse = self._mixture(at_x.log_density(w_y), w_y, w_x)
        cache = moves.cache_entry(w_x, at_x, rkhs_x)
        return Move(x, log_q_forward, log_q_reverse, cache, at_y.jitter, component)

    def _mixture(self, log_kameleon, w_to, w_from) -> float:
        """Log mixture density in model coordinates (the Jacobian :math:`-\\log|L|` included)."""
        rho = self.am_weight
        log_det = self.state.whitening.log_det
        if rho <= 0.0:
            return log_kameleon - log_det
        log_am = self._am_log_density(w_to, w_from)
        if rho >= 1.0:
            return log_am - log_det
        return float(mixture_log_density(log_kameleon, log_am, rho)) - log_det

    def accept(self, move: Move) -> None:
        moves = self.moves
        if move.cache is not None and moves is not None:
            moves.accept(move)
            self._current_white = (self.state.whitening, np.array(move.x, copy=True), move.cache[2])

    def log_density(self, x, y) -> float:
        r""":math:`\log q(x \mid y)` of the proposal in the state's current phase."""
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        state = self.state
        if state.phase == "scan":
            return self._scan.log_density(x, y)
        w_x, w_y = state.whiten(x), state.whiten(y)
        moves = self.moves
        if moves is None:
            return self._am_log_density(w_x, w_y) - state.whitening.log_det
        return self._mixture(moves.family.at(w_y).log_density(w_x), w_x, w_y)
