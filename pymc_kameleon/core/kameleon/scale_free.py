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

With the state's independence weight :math:`\iota > 0` the proposal gains a third component that
ignores :math:`y`: with probability :math:`\iota`, :math:`w_x \sim t_\nu(0, I)`, an independent
draw from the Student-t fitted to the chain (:math:`\nu =` :data:`INDEPENDENCE_DF`),

.. math::
    q_\iota(x \mid y) = \iota\, |L|^{-1} t_\nu(w_x) + (1 - \iota)\, q(x \mid y),

and both Hastings terms are again the full mixture's. Where tuning found a Gaussian fitted to the
evaluated log densities a better shape (``state.independence_fit``,
:mod:`~pymc_kameleon.core.adaptation.gaussian_fit`), :math:`w_x = b + A u`, :math:`u \sim t_\nu(0, I)`,
and :math:`t_\nu(w_x)` above becomes :math:`|A|^{-1} t_\nu(A^{-1}(w_x - b))`. Where the posterior is
close to its fitted Student-t, one accepted draw decorrelates the chain, which the walk needs of the order of
:math:`d` accepted steps for.

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
from pymc_kameleon.core.proposals import (
    CoordinateProposal,
    Move,
    Proposal,
    mixture_log_density,
    standard_t_draw,
    student_t_log_density,
)

__all__ = ["INDEPENDENCE_DF", "ScaleFreeProposal", "independence_log_density"]

_LOG_2PI = math.log(2.0 * math.pi)

#: Degrees of freedom of the independence component: tails a little heavier than a Gaussian's, at
#: a small cost in acceptance where the posterior is Gaussian (in 17 dimensions 0.68 against 1.0).
INDEPENDENCE_DF = 10.0


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
        # (whitening, model point, its whitened coordinates): the last accepted Kameleon-phase move's, or
        # the current state's as last whitened (a rejected proposal leaves the state where it was)
        self._current_white = None
        # (whitened current state, shape, whitening, log density there): the independence component's
        # density at the state, the reverse move's, the same while the state stays
        self._current_independence = None

    @property
    def symmetric(self) -> bool:
        """The scan's and the AM walk's moves are symmetric (their Hastings terms are reported as 0);
        the Kameleon mixture's and the independence component's are not."""
        state = self.state
        return state.phase == "scan" or (state.family is None and state.independence_weight <= 0.0)

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
        whitening = self.state.whitening
        if cur is not None and cur[0] is whitening and same_array(cur[1], y):
            return cur[2]
        w_y = whitening.whiten(y)
        self._current_white = (whitening, np.array(y, copy=True), w_y)
        return w_y

    def propose(self, y, rng) -> Move:
        state = self.state
        if state.phase == "scan":
            return self._scan.propose(y, rng)
        w_y = self._whitened_current(y)
        scale = state.am_scale.value
        iota = state.independence_weight
        # No uniform is drawn without the component: the chain is the same as before it existed.
        independent = iota > 0.0 and rng.random() < iota
        moves = self.moves
        if moves is None:
            if independent:
                component, w_x = "independence", self._independent_draw(rng)
            else:
                component, w_x = "adaptive_metropolis", w_y + scale * rng.standard_normal(state.dim)
            x = state.to_model(w_x)
            if iota <= 0.0:
                return Move(x, component=component)
            log_walk = self._am_log_density(w_x, w_y) - state.whitening.log_det  # symmetric: both ways
            log_q_forward = self._with_independence(log_walk, w_x)
            return Move(x, log_q_forward, self._with_independence(log_walk, w_y, True), component=component)
        at_y = moves.at_current(w_y)
        if independent:
            component, w_x = "independence", self._independent_draw(rng)
        elif rng.random() < self.am_weight:
            component = "adaptive_metropolis"
            w_x = w_y + scale * rng.standard_normal(state.dim)
        else:
            component = "kameleon"
            w_x = at_y.sample(rng)
        at_x, rkhs_x = moves.factor_at(w_x)
        x = state.to_model(w_x)
        log_q_forward = self._with_independence(self._mixture(at_y.log_density(w_x), w_x, w_y), w_x)
        if at_x is None:
            return Move(x, log_q_forward, math.nan, None, at_y.jitter, component)
        log_q_reverse = self._with_independence(self._mixture(at_x.log_density(w_y), w_y, w_x), w_y, True)
        cache = moves.cache_entry(w_x, at_x, rkhs_x)
        return Move(x, log_q_forward, log_q_reverse, cache, at_y.jitter, component)

    def independent_point(self, rng, fitted: bool | None = None) -> np.ndarray:
        r"""A draw from the independence component, :math:`m + L w`, :math:`w \sim t_\nu(0, I)`, or from
        the fitted shape, in the model's coordinates (what tuning evaluates to measure a shape before
        using it). ``fitted`` chooses the shape (default: the one the component uses)."""
        return self.state.to_model(self._independent_draw(rng, fitted))

    def _independent_draw(self, rng, fitted: bool | None = None) -> np.ndarray:
        r""":math:`w \sim t_\nu(0, I)` in whitened coordinates, or :math:`w = b + A u` with the fitted
        Gaussian's shape (``state.independence_fit``)."""
        state = self.state
        if state.independence_uses_fit if fitted is None else fitted:
            return state.independence_fit.draw(rng)
        return standard_t_draw(state.dim, INDEPENDENCE_DF, rng)

    def _with_independence(self, log_walk: float, w_to, at_current: bool = False) -> float:
        r""":math:`\log(\iota |L|^{-1} t_\nu(w_{to}) + (1 - \iota) q_{walk})` from :math:`\log q_{walk}`
        (model coordinates). ``at_current``: ``w_to`` is the whitened current state (its
        :meth:`_whitened_current`), whose :math:`t_\nu` term is kept while the state stays."""
        iota = self.state.independence_weight
        if iota <= 0.0:
            return log_walk
        log_t = self._independence_at_current(w_to) if at_current else self._independence_at(w_to)
        # mixture_log_density's arithmetic on Python floats: NumPy's scalar overhead is most of a step's.
        a, b = math.log1p(-iota) + log_walk, math.log(iota) + log_t
        top = max(a, b)
        if top == -math.inf:
            return -math.inf
        return top + math.log(math.exp(a - top) + math.exp(b - top))

    def _independence_at(self, w) -> float:
        state = self.state
        return independence_log_density(state, w) - state.whitening.log_det

    def _independence_at_current(self, w_y) -> float:
        state = self.state
        shape = state.independence_fit if state.independence_uses_fit else None
        cur = self._current_independence
        # The same array object: the cached whitened state (_whitened_current), so the same state.
        if cur is not None and cur[0] is w_y and cur[1] is shape and cur[2] is state.whitening:
            return cur[3]
        value = self._independence_at(w_y)
        self._current_independence = (w_y, shape, state.whitening, value)
        return value

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
            return self._with_independence(self._am_log_density(w_x, w_y) - state.whitening.log_det, w_x)
        return self._with_independence(self._mixture(moves.family.at(w_y).log_density(w_x), w_x, w_y), w_x)


def independence_log_density(state: ScaleFreeState, w, fitted: bool | None = None) -> float:
    r"""Log density of whitened ``w`` under a shape of the independence component, without the
    whitening's Jacobian: the fitted one (``state.independence_fit``) if ``fitted``, else the learned
    :math:`t_\nu(0, I)`; by default the shape the component uses."""
    if state.independence_uses_fit if fitted is None else fitted:
        return state.independence_fit.point_log_density(w)
    return student_t_log_density(w, INDEPENDENCE_DF)
