r"""One proposal interface for every Metropolis-Hastings move in the package.

A proposal is a conditional density :math:`q(\cdot \mid y)` that can be sampled and evaluated.
:meth:`Proposal.propose` draws :math:`x \sim q(\cdot \mid y)` and returns a :class:`Move` that
carries both Hastings terms, :math:`\log q(x \mid y)` and :math:`\log q(y \mid x)`, so that
:func:`pymc_kameleon.core.mh.mh_log_ratio` (or a delayed-acceptance ratio) can be formed
without knowing what kind of proposal made the move. :meth:`Proposal.accept` tells a stateful
proposal that the chain moved to ``move.x``, so that what it computed there (a factorised
covariance) becomes its cache at the current state.

For a **symmetric** proposal (:math:`q(x \mid y) = q(y \mid x)`) both terms are reported as 0:
they cancel in every ratio, and skipping them keeps the random walk free of wasted work.

SMC moves every particle at once: a :class:`BatchProposal` draws and evaluates
:math:`q(\cdot \mid y_i)` for all rows :math:`y_i` of an array in one call.

Implementations
---------------
:class:`RandomWalkProposal`
    :math:`\mathcal N(y, s^2 L L^\top)`, with an optional fixed factor :math:`L`
    (isotropic random walk, or Adaptive Metropolis with a learned covariance).
:class:`CoordinateProposal`
    :math:`y + s_j \varepsilon e_j`: one coordinate per step (the coordinate scan of tuning).
:class:`LangevinProposal`
    :math:`\mathcal N(y + \tfrac12 \Sigma g(y), \Sigma)` for a drift gradient function :math:`g`.
:class:`IndependenceProposal`
    :math:`t_\nu(m, L L^\top)`, whatever :math:`y`: independent draws from a Student-t fitted to
    the chain (the independence component of the tuned proposal).
:class:`~pymc_kameleon.core.kameleon.moves.KameleonMoves`
    :math:`\mathcal N(y, \gamma^2 I + \nu^2 M_y H M_y^\top)` for a fixed
    :class:`~pymc_kameleon.core.kameleon.family.KameleonProposal` family, with the covariance at the
    current state cached between steps.
:class:`~pymc_kameleon.core.kameleon.scale_free.ScaleFreeProposal`
    The tuned proposal of KAMH and GP-DA: the scan, then the Kameleon/AM mixture in coordinates
    whitened by a learned covariance (built from a
    :class:`~pymc_kameleon.core.adaptation.state.ScaleFreeState`).
Batch proposals (:class:`BatchProposal`)
    :class:`~pymc_kameleon.core.kameleon.family.KameleonProposal`,
    :class:`~pymc_kameleon.core.kameleon.whitened.WhitenedFamily`, and KASS's
    :class:`~pymc_kameleon.core.smc.mixtures.GlobalWalkMixture` and
    :class:`~pymc_kameleon.core.smc.mixtures.IndependenceMixture`.
:func:`crank_nicolson_move`
    :math:`u' = \rho u + \sqrt{1 - \rho^2}\,\varepsilon` for the auxiliary normals of a correlated
    pseudo-marginal estimator; reversible with respect to :math:`\mathcal N(0, I)`, so it adds no
    Hastings term.

Adding a proposal means writing one small class with :meth:`~Proposal.propose` (and
:meth:`~Proposal.log_density`), and one line in the shared test harness
(``tests/core/test_proposals.py``).
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pymc_kameleon.core.linalg import gaussian_logpdf_chol, solve_lower

_LOG_2PI = math.log(2.0 * math.pi)

__all__ = [
    "BatchProposal",
    "CoordinateProposal",
    "IndependenceProposal",
    "LangevinProposal",
    "Move",
    "Proposal",
    "RandomWalkProposal",
    "crank_nicolson_move",
    "langevin_log_density",
    "mixture_log_density",
    "standard_t_draw",
    "student_t_log_density",
]


@dataclass(frozen=True)
class Move:
    r"""A proposed move from the current state :math:`y` to :math:`x`.

    Attributes
    ----------
    x : array of shape (d,)
        The proposal :math:`x \sim q(\cdot \mid y)`.
    log_q_forward : float
        :math:`\log q(x \mid y)` (0 for a symmetric proposal).
    log_q_reverse : float
        :math:`\log q(y \mid x)` (0 for a symmetric proposal); NaN when the reverse density
        cannot be computed (a covariance at :math:`x` that cannot be factorised), in which
        case the move must be rejected without evaluating the target.
    cache : object
        What the proposal computed at :math:`x`; handed back through :meth:`Proposal.accept`.
    jitter : float
        Diagonal jitter needed to factorise the proposal covariance at :math:`y` (usually 0).
    component : str
        Which part of a mixture (or which phase of a tuned proposal) drew the move, as the
        adaptation names the scale it tunes: ``"scan"``, ``"adaptive_metropolis"``, ``"kameleon"``,
        ``"langevin"``, ``"independence"`` (no scale); empty for a plain proposal.
    """

    x: np.ndarray
    log_q_forward: float = 0.0
    log_q_reverse: float = 0.0
    cache: Any = None
    jitter: float = 0.0
    component: str = ""

    @property
    def feasible(self) -> bool:
        """Whether the reverse density is known (otherwise reject the move outright)."""
        return not math.isnan(self.log_q_reverse)


class Proposal(ABC):
    r"""Conditional density :math:`q(\cdot \mid y)`: draw a :class:`Move`, evaluate, keep a cache."""

    #: True when :math:`q(x \mid y) = q(y \mid x)`; the Hastings terms are then reported as 0.
    symmetric = False

    @abstractmethod
    def propose(self, y, rng: np.random.Generator) -> Move:
        r"""Draw :math:`x \sim q(\cdot \mid y)` and return it with both Hastings terms."""

    @abstractmethod
    def log_density(self, x, y) -> float:
        r""":math:`\log q(x \mid y)`, normalised (also for symmetric proposals)."""

    def accept(self, move: Move) -> None:  # noqa: B027 - stateless proposals keep nothing
        """The chain moved to ``move.x``: keep what was computed there (stateless proposals: nothing)."""


class RandomWalkProposal(Proposal):
    r"""Gaussian random walk :math:`x = y + s L \varepsilon`, :math:`\varepsilon \sim \mathcal N(0, I)`.

    Parameters
    ----------
    scale : float
        :math:`s > 0`.
    chol : array of shape (d, d), optional
        Lower Cholesky factor :math:`L` of a fixed covariance (Adaptive Metropolis). Without it
        the walk is isotropic, :math:`L = I`.
    dim : int, optional
        Dimension; required without ``chol``.
    """

    symmetric = True

    def __init__(self, scale: float, chol=None, dim: int | None = None):
        self.scale = float(scale)
        self.chol = None if chol is None else np.asarray(chol, dtype=float)
        self.dim = int(dim) if self.chol is None else self.chol.shape[0]

    @property
    def scaled_chol(self) -> np.ndarray:
        """:math:`s L`, the Cholesky factor of the proposal covariance."""
        return self.scale * (np.eye(self.dim) if self.chol is None else self.chol)

    def propose(self, y, rng) -> Move:
        eps = rng.standard_normal(self.dim)
        if self.chol is None:
            return Move(y + self.scale * eps)
        return Move(y + (self.scale * self.chol) @ eps)

    def log_density(self, x, y) -> float:
        return gaussian_logpdf_chol(x, y, self.scaled_chol)


class CoordinateProposal(Proposal):
    r"""One coordinate per step: :math:`x = y + s_j \varepsilon e_j`, :math:`\varepsilon \sim N(0, 1)`
    (:math:`e_j` the :math:`j`-th unit vector).

    Built from a coordinate scan (:class:`~pymc_kameleon.core.adaptation.scan.CoordinateScan`):
    :math:`j` is its current ``coordinate`` and :math:`\log s_j` its ``log_scale[j]``, read at each
    call. For a fixed :math:`j` the move is symmetric, but the coordinate changes between steps, so
    :meth:`log_density` is the density along the current coordinate (:math:`-\infty` off it) and
    the terms are reported as 0 (they cancel: both ends lie on the same line, at the same scale).

    Parameters
    ----------
    scan : object with ``coordinate`` (int) and ``log_scale`` (array of shape (d,))
    """

    symmetric = True

    def __init__(self, scan):
        self.scan = scan

    def propose(self, y, rng) -> Move:
        j = self.scan.coordinate
        x = np.array(y, dtype=float, copy=True)
        x[j] += math.exp(self.scan.log_scale[j]) * rng.standard_normal()
        return Move(x, component="scan")

    def log_density(self, x, y) -> float:
        r""":math:`\log q(x \mid y)`: Gaussian along the current coordinate, :math:`-\infty` off it."""
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        j = self.scan.coordinate
        if np.any(np.delete(x - y, j) != 0.0):
            return -math.inf
        s = math.exp(self.scan.log_scale[j])
        return -0.5 * _LOG_2PI - math.log(s) - 0.5 * ((x[j] - y[j]) / s) ** 2


class LangevinProposal(Proposal):
    r"""Langevin move :math:`x = y + \tfrac12 \Sigma g(y) + L \varepsilon`, :math:`\Sigma = L L^\top`.

    :math:`g` is a drift gradient function, fixed while a move is made (the exact gradient of the
    log target, or a surrogate's). The move is not symmetric: :math:`\log q(y \mid x)` needs
    :math:`g(x)`, so :meth:`propose` calls ``drift`` at both ends, the current state first. Where
    :math:`g(x)` is not finite, the reverse term is NaN and the move infeasible.

    Parameters
    ----------
    chol : array of shape (d, d)
        Lower Cholesky factor :math:`L` of the proposal covariance :math:`\Sigma`.
    drift : callable
        ``drift(theta)``: the drift gradient :math:`g` at ``theta``, an array of shape (d,).
    """

    def __init__(self, chol, drift):
        self.chol = np.asarray(chol, dtype=float)
        self.drift = drift

    def propose(self, y, rng) -> Move:
        L = self.chol
        g_y = self.drift(y)
        x = y + 0.5 * (L @ (L.T @ g_y)) + L @ rng.standard_normal(L.shape[0])
        log_q_forward = langevin_log_density(x, y, g_y, L)
        g_x = self.drift(x)
        log_q_reverse = langevin_log_density(y, x, g_x, L) if np.all(np.isfinite(g_x)) else math.nan
        return Move(x, log_q_forward, log_q_reverse, component="langevin")

    def log_density(self, x, y) -> float:
        """:math:`\\log \\mathcal N(x;\\ y + \\tfrac12 \\Sigma g(y), \\Sigma)`."""
        return langevin_log_density(x, y, self.drift(y), self.chol)


class IndependenceProposal(Proposal):
    r"""Independent draws :math:`x = m + L w`, :math:`w \sim t_\nu(0, I)`, whatever the current state.

    .. math::
        q(x \mid y) = q(x) = |L|^{-1}\, t_\nu\big(L^{-1}(x - m);\ 0, I\big)

    (:func:`student_t_log_density`), drawn by :func:`standard_t_draw`. Its tails are heavier than
    a Gaussian's, so a posterior a little wider than :math:`L L^\top` does not leave the chain stuck
    in a tail where :math:`\pi / q` is large.

    Parameters
    ----------
    mean : array of shape (d,)
        :math:`m`.
    chol : array of shape (d, d)
        Lower Cholesky factor :math:`L` of the shape matrix.
    df : float
        Degrees of freedom :math:`\nu > 0`.

    Attributes
    ----------
    log_det : float
        :math:`\log |L|`.
    """

    def __init__(self, mean, chol, df: float):
        self.mean = np.asarray(mean, dtype=float)
        self.chol = np.asarray(chol, dtype=float)
        self.df = float(df)
        self.log_det = float(np.sum(np.log(np.diag(self.chol))))

    def propose(self, y, rng) -> Move:
        x = self.draw(rng)
        return Move(x, self.point_log_density(x), self.point_log_density(y), component="independence")

    def draw(self, rng) -> np.ndarray:
        """A draw :math:`x = m + L w` (:func:`standard_t_draw`)."""
        return self.mean + self.chol @ standard_t_draw(self.mean.shape[0], self.df, rng)

    def point_log_density(self, x) -> float:
        r""":math:`\log q(x)`, whatever the current state."""
        w = solve_lower(self.chol, np.asarray(x, dtype=float) - self.mean)
        return student_t_log_density(w, self.df) - self.log_det

    def log_density(self, x, y) -> float:
        return self.point_log_density(x)


def standard_t_draw(dim: int, df: float, rng) -> np.ndarray:
    r"""A draw of the standard multivariate Student-t :math:`t_\nu(0, I)` in ``dim`` dimensions:
    :math:`\varepsilon / \sqrt{g / \nu}`, :math:`\varepsilon \sim \mathcal N(0, I)`, then
    :math:`g \sim \chi^2_\nu` (in that order from ``rng``)."""
    eps = rng.standard_normal(dim)
    return eps / math.sqrt(rng.chisquare(df) / df)


def student_t_log_density(w, df: float) -> float:
    r"""Log density of the standard multivariate Student-t at ``w`` (shape :math:`I`, location 0).

    .. math::
        \log t_\nu(w) = \log\Gamma\big(\tfrac{\nu + d}{2}\big) - \log\Gamma\big(\tfrac{\nu}{2}\big)
            - \tfrac d2 \log(\nu\pi) - \tfrac{\nu + d}{2} \log\big(1 + \lVert w \rVert^2 / \nu\big)

    Parameters
    ----------
    w : array of shape (d,)
    df : float
        :math:`\nu > 0`.
    """
    w = np.asarray(w, dtype=float)
    d = w.shape[-1]
    return _student_t_log_norm(float(df), d) - 0.5 * (df + d) * math.log1p(float(w @ w) / df)


@functools.lru_cache(maxsize=64)
def _student_t_log_norm(df: float, d: int) -> float:
    return math.lgamma(0.5 * (df + d)) - math.lgamma(0.5 * df) - 0.5 * d * math.log(df * math.pi)


@runtime_checkable
class BatchProposal(Protocol):
    r"""A proposal for many points at once (SMC): :math:`q(\cdot \mid y_i)` for every row of ``Y``.

    ``factors`` are what :meth:`factor_batch` returns at ``Y`` (per-row Cholesky factors and log
    normalisers, or whatever the proposal needs), passed back to reuse them.
    """

    def factor_batch(self, Y, chunk_size=None):
        """What a draw or a density at the rows of ``Y`` needs, computed once."""

    def sample_batch(self, Y, rng, chunk_size=None, factors=None) -> tuple[np.ndarray, np.ndarray]:
        r"""Draw :math:`x_i \sim q(\cdot \mid y_i)` for every row; returns ``(X, log_q)``."""

    def log_density_batch(self, X, Y, chunk_size=None, factors=None) -> np.ndarray:
        r""":math:`\log q(x_i \mid y_i)` for paired rows, shape ``(m,)``."""


def langevin_log_density(theta_to, theta_from, drift_gradient, proposal_chol) -> float:
    r"""Log density of the Langevin proposal.

    .. math::
        \log \mathcal N(\theta_{to};\, \theta_{from} + \tfrac12\Sigma g,\, \Sigma)

    The GP-DA paper's eq. (8) with :math:`\Sigma = \delta\Lambda` and
    :math:`g = \nabla\ell + \nabla\log p` at :math:`\theta_{from}` (or the GP's version of it).

    Parameters
    ----------
    theta_to, theta_from, drift_gradient : arrays of shape (d,)
    proposal_chol : array of shape (d, d)
        Lower Cholesky factor :math:`L` of :math:`\Sigma = L L^\top`.
    """
    L = np.asarray(proposal_chol, dtype=float)
    mean = np.asarray(theta_from, dtype=float) + 0.5 * (L @ (L.T @ np.asarray(drift_gradient, dtype=float)))
    return gaussian_logpdf_chol(np.asarray(theta_to, dtype=float), mean, L)


def mixture_log_density(log_q_main, log_q_walk, walk_weight: float):
    r"""Log density of a two-component proposal mixture, for scalars or arrays.

    .. math::
        \log\big((1 - \rho)\, q_{\mathrm{main}} + \rho\, q_{\mathrm{walk}}\big),
        \qquad \rho = \text{walk\_weight} \in (0, 1).

    The Kameleon moves mixed with a random walk in
    :class:`~pymc_kameleon.core.kameleon.scale_free.ScaleFreeProposal` (KAMH, GP-DA) and in
    :class:`~pymc_kameleon.core.smc.mixtures.GlobalWalkMixture` (KASS) use it for both Hastings
    terms, so the MH ratio is exact whichever component drew the move.
    """
    return np.logaddexp(math.log1p(-walk_weight) + log_q_main, math.log(walk_weight) + log_q_walk)


def crank_nicolson_move(u, correlation: float, rng) -> np.ndarray:
    r"""Crank-Nicolson move of standard-normal auxiliary variables (correlated pseudo-marginal).

    .. math::
        u' = \rho\, u + \sqrt{1 - \rho^2}\, \varepsilon, \qquad \varepsilon \sim \mathcal N(0, I).

    The kernel :math:`K(u' \mid u) = \mathcal N(u';\ \rho u,\ (1 - \rho^2) I)` is reversible with
    respect to :math:`\varphi = \mathcal N(0, I)`: :math:`\varphi(u) K(u' \mid u)` is the density of a
    centred normal pair with unit variances and correlation :math:`\rho`, symmetric in
    :math:`(u, u')`. So in the Metropolis-Hastings ratio of the extended target
    :math:`\pi(\theta)\, \hat L(\theta, u)\, \varphi(u)` under the joint proposal
    :math:`q(\theta' \mid \theta) K(u' \mid u)`, the factor
    :math:`\varphi(u') K(u \mid u') / (\varphi(u) K(u' \mid u))` is 1: the ratio is the
    pseudo-marginal one, with no :math:`u` terms (Deligiannidis, Doucet and Pitt 2018).

    Parameters
    ----------
    u : array
        The current auxiliary variables.
    correlation : float
        :math:`\rho \in [0, 1)`; 0 draws :math:`u'` afresh (standard pseudo-marginal).
    rng : numpy.random.Generator

    References
    ----------
    Deligiannidis, G., Doucet, A. and Pitt, M. K. (2018). The correlated pseudomarginal method.
    J. R. Statist. Soc. B 80(5), 839-870.
    """
    u = np.asarray(u, dtype=float)
    noise = rng.standard_normal(u.shape)
    if correlation == 0:
        return noise
    return correlation * u + math.sqrt(1.0 - correlation**2) * noise
