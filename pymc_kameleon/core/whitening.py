r"""Whitened coordinates :math:`w = L^{-1}(x - m)` for a learned mean :math:`m` and covariance
:math:`C = L L^\top`, and the pieces of the scale-free adaptation that work in them.

:class:`Whitening` maps between model and whitened coordinates; :class:`WhitenedFamily` is a
Kameleon family built on whitened points, used in model coordinates (with the Jacobian
:math:`|L|^{-1}`); :func:`shrunk_covariance` estimates :math:`(m, C)` from a window's draws;
:func:`whitened_drift` tells a chain still walking in from one that has settled.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular

from pymc_kameleon.core.adaptation import HistoryBuffer
from pymc_kameleon.core.linalg import jittered_cholesky

__all__ = [
    "DRIFT_STATES",
    "AdaptationWindow",
    "WhitenedCoordinates",
    "WhitenedFamily",
    "Whitening",
    "gradient_spread",
    "log_density_climb",
    "shrunk_covariance",
    "whitened_drift",
]

# Effective draws per window draw, for the covariance shrinkage (random-walk draws are correlated).
_EFFECTIVE_FRACTION = 0.1
# A window's correlation at least this strong, after one of at least _STRONG_PREVIOUS_CORRELATION in
# the previous window's estimate, is kept unshrunk (shrunk_covariance). Measured (RESULTS, "Less
# shrinkage toward the diagonal"): an uncentred logistic regression, KAMH min ESS 1-25 -> 10-88 of
# 2000; without the previous window's condition, trending windows of independent normals showed
# 0.93-0.99 and cost GP-DA-MH its ESS there (49 -> 7).
_STRONG_CORRELATION = 0.9
_STRONG_PREVIOUS_CORRELATION = 0.8
# A window whose chain moved in fewer than this fraction of its steps says nothing about the
# posterior's covariance: it keeps the previous whitening (a stuck chain must not shrink C to zero).
_MIN_WINDOW_MOVES = 0.02
# A window ends early when its draws' sd in whitened coordinates is off by more than this factor.
_WHITENING_TOLERANCE = 3.0
# The last this many tuning states are kept for the end-of-tuning drift check (TuningReport.drift).
DRIFT_STATES = 1000


def shrunk_covariance(points, previous_cov=None):
    r"""Mean and covariance of a window's draws, shrunk toward the diagonal except where a strong
    correlation persists.

    .. math::
        C_{ij} = f_i f_j \hat C_{ij} \;(i \ne j), \qquad C_{ii} = \hat C_{ii}, \qquad
        f_i = \begin{cases} 1 & \text{$i$ is strongly correlated} \\ \sqrt{w} & \text{otherwise,}\end{cases}
        \qquad w = \frac{n_e}{n_e + d}, \quad n_e = n / 10,

    where :math:`n_e` is a rough effective sample size of correlated random-walk draws. With no
    strong correlation this is :math:`w \hat C + (1 - w) \operatorname{diag}(\hat C)`: the
    diagonal target keeps :math:`C` full rank and in the units of each coordinate. Coordinate
    :math:`i` is strongly correlated if some :math:`j` has :math:`|\hat r_{ij}| \ge 0.9` here and a
    correlation of at least 0.8, of the same sign, in ``previous_cov`` (the previous window's
    estimate): shrinking such a pair by :math:`w` would make the narrow direction of the posterior
    many times too wide (:math:`1 - w|r|` against :math:`1 - |r|`), while one window alone may show a
    strong correlation that is a walk's, not the posterior's. :math:`C` is positive definite: it is
    the Hadamard product of :math:`\hat C` with :math:`f f^\top + \operatorname{diag}(1 - f^2)`, both
    positive semi-definite, the second with a positive diagonal (Schur).

    Returns ``(mean, cov)``, or None if there are fewer than two draws or some coordinate never moved.
    """
    points = np.asarray(points, dtype=float)
    n, d = points.shape
    if n < 2:
        return None
    mean = points.mean(axis=0)
    cov = np.atleast_2d(np.cov(points, rowvar=False))
    diag = np.diag(cov).copy()
    if not (np.all(np.isfinite(cov)) and np.all(diag > 0)):
        return None
    n_eff = _EFFECTIVE_FRACTION * n
    w = n_eff / (n_eff + d)
    shrunk = w * cov
    shrunk[np.diag_indices(d)] += (1.0 - w) * diag
    kept = _persistently_correlated(cov, previous_cov)
    if kept.any():
        # Only pairs with a kept coordinate are recomputed: elsewhere C is bit for bit as without the rule.
        f = np.where(kept, 1.0, np.sqrt(w))
        pairs = np.logical_or.outer(kept, kept) & ~np.eye(d, dtype=bool)
        shrunk[pairs] = (cov * np.outer(f, f))[pairs]
    return mean, shrunk


def _correlation(cov) -> np.ndarray:
    sd = np.sqrt(np.diag(cov))
    corr = cov / np.outer(sd, sd)
    np.fill_diagonal(corr, 0.0)
    return corr


def _persistently_correlated(cov, previous_cov) -> np.ndarray:
    """Coordinates with a partner correlated at least 0.9 in ``cov`` and at least 0.8, of the same
    sign, in ``previous_cov``."""
    if previous_cov is None:
        return np.zeros(cov.shape[0], dtype=bool)
    corr, previous = _correlation(cov), _correlation(previous_cov)
    pairs = (
        (np.abs(corr) >= _STRONG_CORRELATION)
        & (np.abs(previous) >= _STRONG_PREVIOUS_CORRELATION)
        & (np.sign(corr) == np.sign(previous))
    )
    return np.any(pairs, axis=1)


@dataclass(frozen=True)
class Whitening:
    r"""The affine map :math:`w = L^{-1}(x - m)` to coordinates in which the learned covariance is :math:`I`.

    Attributes
    ----------
    mean : array of shape (d,)
        :math:`m`.
    chol : array of shape (d, d)
        Lower Cholesky factor :math:`L` of the covariance :math:`C = L L^\top`.
    log_det : float
        :math:`\log|L|`; a density in :math:`w` is one in :math:`x` minus this.
    """

    mean: np.ndarray
    chol: np.ndarray
    log_det: float

    @classmethod
    def identity(cls, dim: int) -> Whitening:
        return cls(np.zeros(dim), np.eye(dim), 0.0)

    @classmethod
    def from_moments(cls, mean, cov, what: str = "learned posterior covariance") -> Whitening:
        """From a mean and covariance (jitter if needed; :class:`SingularCovarianceError` if even that
        fails)."""
        chol, _ = jittered_cholesky(np.asarray(cov, dtype=float), what=what)
        return cls(np.asarray(mean, dtype=float), chol, float(np.log(np.diagonal(chol)).sum()))

    def whiten(self, x) -> np.ndarray:
        """:math:`w = L^{-1}(x - m)` for a point (d,) or rows (n, d)."""
        x = np.asarray(x, dtype=float)
        if x.ndim == 1:
            return solve_triangular(self.chol, x - self.mean, lower=True, check_finite=False)
        return solve_triangular(self.chol, (x - self.mean).T, lower=True, check_finite=False).T

    def to_model(self, w) -> np.ndarray:
        """:math:`x = m + L w` for a point (d,) or rows (n, d)."""
        w = np.asarray(w, dtype=float)
        return self.mean + (w @ self.chol.T if w.ndim == 2 else self.chol @ w)


class WhitenedFamily:
    r"""A Kameleon family fitted in whitened coordinates, used in the model's (batched, for SMC).

    :math:`q(x \mid y) = |L|^{-1} q_w(L^{-1}(x - m) \mid L^{-1}(y - m))`. It has the batch methods of
    :class:`~pymc_kameleon.core.kameleon.KameleonProposal` (``factor_batch``, ``sample_batch``,
    ``log_density_batch``), so :func:`pymc_kameleon.core.smc.population_mh_move` uses it unchanged.

    Parameters
    ----------
    family : KameleonProposal
        Fitted on whitened points.
    whitening : Whitening
    """

    def __init__(self, family, whitening: Whitening):
        self.family = family
        self.whitening = whitening
        self.dim = family.dim

    @property
    def Z(self) -> np.ndarray:
        """The subsample in the model's coordinates."""
        return self.whitening.to_model(self.family.Z)

    @property
    def nu2(self) -> float:
        return self.family.nu2

    @property
    def gamma2(self) -> float:
        """:math:`\\gamma^2`, in whitened units."""
        return self.family.gamma2

    @property
    def kernel(self):
        return self.family.kernel

    def covariance(self, y) -> np.ndarray:
        r"""Proposal covariance at ``y`` in the model's coordinates, :math:`L \Sigma_w L^\top`."""
        L = self.whitening.chol
        return L @ self.family.covariance(self.whitening.whiten(y)) @ L.T

    def factor_batch(self, Y, chunk_size=None):
        return self.family.factor_batch(self.whitening.whiten(Y), chunk_size=chunk_size)

    def sample_batch(self, Y, rng, chunk_size=None, factors=None):
        W, log_q = self.family.sample_batch(
            self.whitening.whiten(Y), rng, chunk_size=chunk_size, factors=factors
        )
        return self.whitening.to_model(W), log_q - self.whitening.log_det

    def log_density_batch(self, X, Y, chunk_size=None, factors=None):
        w = self.whitening
        out = self.family.log_density_batch(w.whiten(X), w.whiten(Y), chunk_size=chunk_size, factors=factors)
        return out - w.log_det


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


class AdaptationWindow:
    """The draws of the current adaptation window, and the signs that it should end.

    ``index`` counts the windows completed (the coordinate scan counts as the first) and ``end``
    is the tuning step at which the current one ends. ``recent``, ``recent_log_density`` and
    ``recent_gradient`` keep the last :data:`DRIFT_STATES` tuning states, their log densities and
    (if the step has them) the log density's gradients there across windows, for the drift, climb
    and gradient-spread checks; ``recent_accept`` their acceptance probabilities, for the
    acceptance check when tuning ends early in a window.
    """

    def __init__(self, dim: int, history_size: int, first_window: int, end: int):
        self.draws = HistoryBuffer(dim, max(int(history_size), 2))
        self.first_window = first_window
        self.index = 0
        self.end = end
        self.accept = []  # acceptance probabilities (or their estimates) of this window's steps
        self.moves = 0  # steps of this window whose state differs from the previous one
        self._gradient_squares = np.zeros(dim)  # sum over this window's steps of the squared gradient
        self._gradients = 0  # steps of this window that came with a gradient
        self._last_state = None
        self.recent = deque(maxlen=DRIFT_STATES)
        self.recent_log_density = deque(maxlen=DRIFT_STATES)
        self.recent_gradient = deque(maxlen=DRIFT_STATES)
        self.recent_accept = deque(maxlen=DRIFT_STATES)

    def record(self, y_new, accept_prob: float, log_density: float = math.nan, gradient=None) -> None:
        """One tuning step's state, acceptance probability, log density (NaN if unknown) and the log
        density's gradient (None if unknown)."""
        self.draws.append(y_new)
        self.accept.append(float(accept_prob))
        self.recent_accept.append(float(accept_prob))
        y_new = np.asarray(y_new, dtype=float)
        if self._last_state is not None and not np.array_equal(y_new, self._last_state):
            self.moves += 1
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
        return self.moves < _MIN_WINDOW_MOVES * len(self.accept)

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
        """Mean acceptance probability of this window's steps (NaN if none)."""
        return float(np.mean(self.accept)) if self.accept else math.nan

    @property
    def last_accept_rate(self) -> float:
        """Mean acceptance probability over the last tuning steps (NaN if none): this window's, or
        the last ``first_window`` (at most :data:`DRIFT_STATES`) if this window has fewer steps.

        Tuning can end just after a window did; this window's few steps (none, at worst) would then
        hide a chain that stopped moving.
        """
        least = min(self.first_window, DRIFT_STATES)
        if len(self.accept) >= least or len(self.recent_accept) <= len(self.accept):
            return self.accept_rate
        return float(np.mean(list(self.recent_accept)[-least:]))

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
        n = len(self.draws)
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

    def start_next(self, end: int) -> None:
        """Close this window and start the next, which ends at tuning step ``end``."""
        self.index += 1
        self.end = end
        self.draws.clear()
        self.accept = []
        self.moves = 0
        self._gradient_squares = np.zeros_like(self._gradient_squares)
        self._gradients = 0


class WhitenedCoordinates:
    """Mixin: the learned mean, covariance and coordinate maps of an object with a ``whitening``."""

    @property
    def mean(self) -> np.ndarray:
        """The learned mean :math:`m`."""
        return self.whitening.mean

    @property
    def chol(self) -> np.ndarray:
        """Lower Cholesky factor :math:`L` of the learned covariance."""
        return self.whitening.chol

    @property
    def covariance(self) -> np.ndarray:
        """The learned covariance :math:`C = L L^\\top`."""
        return self.chol @ self.chol.T

    def whiten(self, x) -> np.ndarray:
        """:math:`w = L^{-1}(x - m)` for a point (d,) or rows (n, d)."""
        return self.whitening.whiten(x)

    def to_model(self, w) -> np.ndarray:
        """:math:`x = m + L w` for a point (d,) or rows (n, d)."""
        return self.whitening.to_model(w)
