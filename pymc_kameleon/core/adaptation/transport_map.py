r"""A lower-triangular transport map learned from draws, and proposals through it (decision record
0060: KameleonMetropolis's map shape, with ``start="smc"``).

A Gaussian or Student-t fitted to a curved posterior (a banana, the latent GP's ridge) proposes
mostly where the posterior is not. A triangular map (Parno and Marzouk 2018, "Transport map
accelerated Markov chain Monte Carlo") straightens the curve first. In the whitened coordinates of
the draws, :math:`z = L^{-1}(x - m)` (:math:`m, C = L L^\top` the draws' mean and covariance), each
coordinate is a shift and a width that depend on the earlier ones only:

.. math::
    z_k = h_k(z_{<k}) + e^{s_k(z_{<k})}\, u_k, \qquad k = 1, \dots, d,

with :math:`h_k` a quadratic polynomial (or a linear one) and :math:`s_k` linear in
:math:`z_{<k}`, so that :math:`u` (the *reference* coordinates) is close to standard when
:math:`x` follows the draws. For any :math:`z_{<k}` each :math:`z_k` is increasing in
:math:`u_k`, so the map is a bijection, with a triangular Jacobian:

.. math::
    \log \left|\frac{\partial x}{\partial u}\right| = \log |L| + \sum_k s_k(z_{<k}).

*Fitting* (:meth:`TriangularMap.fit`): :math:`h_k` by ridge least squares of :math:`z_k` on the
features of :math:`z_{<k}` (the penalty :math:`\lambda n`, the intercept unpenalised; whitened
coordinates make it scale-free); :math:`s_k` by least squares of
:math:`\log r^2` on :math:`[1, z_{<k}]` (:math:`r` the residuals), whose slopes, halved, are
:math:`s_k`'s; its level :math:`a_0` makes :math:`\overline{(r e^{-s_k})^2} = 1` (the intercept of
that fit is biased low by :math:`\mathbb E \log \chi^2_1`). Outside the draws a linear
:math:`s_k` can grow without bound, so it is *clipped* to the range it takes on the fitted draws;
the map stays a bijection (the clip acts on the earlier coordinates only) and the Jacobian above
holds with the clipped :math:`s_k`.

:class:`MapIndependenceProposal` draws :math:`u \sim t_\nu(0, I)` and maps it to :math:`x`; its
density is the Student-t's at :math:`u(x)` times the Jacobian of :math:`x \mapsto u`.
:class:`MapWalkProposal` is a random walk in :math:`u`. Together they are the moves that converged on
the latent GP from tempered particles (decision 0060); :class:`MapMixtureProposal` mixes them, with
both Hastings terms the mixture's, as the step uses them.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import solve_triangular

from pymc_kameleon.core.linalg import jittered_cholesky, same_array, solve_lower
from pymc_kameleon.core.proposals import (
    Move,
    Proposal,
    RandomWalkProposal,
    standard_t_draw,
    student_t_log_density,
)

__all__ = [
    "INDEPENDENT_COMPONENTS", "MAP_COMPONENTS", "MAP_INDEPENDENCE_DF", "MAP_INDEPENDENCE_WEIGHT",
    "MAP_ROWS_PER_FEATURE", "MapIndependenceProposal", "MapMixtureProposal", "MapWalkProposal",
    "TriangularMap", "map_features",
]

_LOG_2PI = math.log(2.0 * math.pi)
#: Rows per feature below which a coordinate's shift stays linear (TriangularMap.fit): at d = 13 the latent
#: GP's 2000 particles keep every coordinate quadratic (at most 91 features); at d = 17-50 the first 13.
#: Fitted to 2000 draws of Gaussians in 30 and 50 dimensions, the largest held-out variance of a
#: coordinate of u (1 if the map is right) was 1.10 and 1.17 with 20 rows per feature, 1.29 and 1.24
#: with 10, 1.76 and 8.6 with quadratic shifts everywhere.
MAP_ROWS_PER_FEATURE = 20
#: The map shape's mixture (decision 0060's measured recipe): half independent draws, t with 10 df.
MAP_INDEPENDENCE_WEIGHT = 0.5
MAP_INDEPENDENCE_DF = 10.0
#: The moves' names (``Move.component``) of MapMixtureProposal, and of every independent draw a step makes
#: (its independence component's or the map's): these tune no scale.
MAP_COMPONENTS = ("map_walk", "map_independence")
INDEPENDENT_COMPONENTS = ("independence", "map_independence")


def map_features(Z_before: np.ndarray, quadratic: bool) -> np.ndarray:
    """Rows :math:`[1, z_{<k}]`, then :math:`z_i z_j` for :math:`i \\le j < k` if ``quadratic``."""
    n, k = Z_before.shape
    columns = [np.ones((n, 1)), Z_before]
    if quadratic and k:
        i, j = np.triu_indices(k)
        columns.append(Z_before[:, i] * Z_before[:, j])
    return np.hstack(columns)


class TriangularMap:
    r"""The map :math:`x = m + L z(u)`, :math:`z_k = h_k(z_{<k}) + e^{s_k(z_{<k})} u_k` (module
    docstring). Build it with :meth:`fit`.

    Attributes
    ----------
    mean : array of shape (d,)
        :math:`m`.
    chol : array of shape (d, d)
        :math:`L`, the lower Cholesky factor of the draws' covariance.
    shift_coefs : list of arrays
        Coordinate :math:`k`'s coefficients of :math:`h_k` on the features of :math:`z_{<k}`.
    width_coefs : list of arrays
        Coordinate :math:`k`'s :math:`s_k = a_0 + a^\top z_{<k}` as :math:`[a_0, a]`.
    width_bounds : array of shape (d, 2)
        The range of :math:`s_k` on the fitted draws, where it is clipped.
    quadratic : array of bool, shape (d,)
        Per coordinate, whether :math:`h_k` has the quadratic terms (a bool given for all).
    """

    def __init__(self, mean, chol, shift_coefs, width_coefs, width_bounds, quadratic):
        self.mean = np.asarray(mean, dtype=float)
        self.chol = np.asarray(chol, dtype=float)
        self.shift_coefs = [np.asarray(c, dtype=float) for c in shift_coefs]
        self.width_coefs = [np.asarray(c, dtype=float) for c in width_coefs]
        self.width_bounds = np.asarray(width_bounds, dtype=float)
        self.quadratic = np.broadcast_to(np.asarray(quadratic, dtype=bool), self.mean.shape).copy()
        self.log_det_chol = float(np.sum(np.log(np.diag(self.chol))))
        self._unpack()

    @property
    def dim(self) -> int:
        return self.mean.shape[0]

    @classmethod
    def fit(cls, draws, quadratic: bool = True, scale: bool = True, ridge: float = 1e-3) -> TriangularMap:
        r"""The map fitted to ``draws`` (module docstring).

        Parameters
        ----------
        draws : array of shape (n, d)
            Draws that cover the target (particles, pooled chains' states); more rows than
            :math:`d`.
        quadratic : bool
            Quadratic shifts :math:`h_k` where the draws support them: for coordinate :math:`k` only
            with at least :data:`MAP_ROWS_PER_FEATURE` rows per feature, :math:`1 + k + k(k+1)/2` of
            them, else linear ones (with ``scale=False`` the map is then the whitening alone). Fitted
            to 2000 draws of a 50-d Gaussian, quadratic shifts everywhere overfit: a held-out
            coordinate's variance in :math:`u` reached 8.6 (1.8 at d = 30), where it should be 1.
        scale : bool
            Widths :math:`s_k` that depend on :math:`z_{<k}` (else constant ones).
        ridge : float
            :math:`\lambda \ge 0`, the ridge penalty per row on every coefficient but the intercept.

        Raises
        ------
        ValueError
            Fewer finite rows than features, or a nonsensical ``ridge``.
        """
        X = np.asarray(draws, dtype=float)
        if X.ndim != 2:
            raise ValueError(f"draws must be an (n, d) array, got shape {X.shape}")
        if not (math.isfinite(ridge) and ridge >= 0):
            raise ValueError(f"ridge must be finite and >= 0, got {ridge}")
        X = X[np.all(np.isfinite(X), axis=1)]
        n, d = X.shape
        if n <= d:
            raise ValueError(
                f"{n} finite draws cannot fit a triangular map in {d} dimensions: it needs more than {d} "
                "(the last coordinate's linear features)"
            )
        k = np.arange(d)
        quadratic = bool(quadratic) & (n >= MAP_ROWS_PER_FEATURE * (1 + k + k * (k + 1) // 2))
        mean = X.mean(axis=0)
        chol, _ = jittered_cholesky(np.atleast_2d(np.cov(X, rowvar=False)), what="map's draws' covariance")
        Z = solve_triangular(chol, (X - mean).T, lower=True).T
        shift_coefs, width_coefs, width_bounds = [], [], np.zeros((d, 2))
        for k in range(d):
            F = map_features(Z[:, :k], quadratic[k])
            penalty = ridge * n * np.eye(F.shape[1])
            penalty[0, 0] = 0.0
            coef = np.linalg.solve(F.T @ F + penalty, F.T @ Z[:, k])
            residual = Z[:, k] - F @ coef
            mean_square = max(float(np.mean(residual**2)), 1e-300)
            width = np.zeros(k + 1)
            if scale and k:
                G = F[:, : k + 1]  # [1, z_<k]
                slopes = np.linalg.lstsq(G, np.log(residual**2 + 1e-12 * mean_square), rcond=None)[0][1:]
                width[1:] = 0.5 * slopes
            tilt = Z[:, :k] @ width[1:]
            width[0] = 0.5 * math.log(max(float(np.mean(residual**2 * np.exp(-2.0 * tilt))), 1e-300))
            s = width[0] + tilt
            shift_coefs.append(coef)
            width_coefs.append(width)
            width_bounds[k] = s.min(), s.max()
        return cls(mean, chol, shift_coefs, width_coefs, width_bounds, quadratic)

    def _unpack(self) -> None:
        """Each coordinate's :math:`h_k = c_k + b_k^\top z_{<k} + z_{<k}^\top A_k z_{<k}` and
        :math:`s_k = a_{k0} + a_k^\top z_{<k}` as arrays, for the one-point path."""
        self._intercepts, self._linear, self._quadratic_forms = [], [], []
        for k, coef in enumerate(self.shift_coefs):
            self._intercepts.append(float(coef[0]))
            self._linear.append(coef[1 : k + 1])
            A = np.zeros((k, k))
            if self.quadratic[k] and k:
                A[np.triu_indices(k)] = coef[k + 1 :]
            self._quadratic_forms.append(A)
        self._width_levels = [float(w[0]) for w in self.width_coefs]
        self._width_slopes = [w[1:] for w in self.width_coefs]

    def _width(self, z_before: np.ndarray, k: int) -> float:
        """:math:`s_k` at one point, clipped."""
        low, high = self.width_bounds[k]
        return min(max(self._width_levels[k] + float(self._width_slopes[k] @ z_before), low), high)

    def _shift(self, z_before: np.ndarray, k: int) -> float:
        """:math:`h_k` at one point."""
        return (self._intercepts[k] + float(self._linear[k] @ z_before)
                + float(z_before @ self._quadratic_forms[k] @ z_before))

    def to_reference(self, X) -> tuple[np.ndarray, np.ndarray]:
        r"""The reference coordinates :math:`u(x)` of rows ``X`` and
        :math:`\log |\partial u / \partial x| = -\log |L| - \sum_k s_k(z_{<k})` at each.

        Parameters
        ----------
        X : array of shape (n, d) or (d,)

        Returns
        -------
        U : array of the shape of ``X``
        log_det : array of shape (n,) (a float for one point)
        """
        X = np.asarray(X, dtype=float)
        if X.ndim == 1:
            z = solve_lower(self.chol, X - self.mean)
            u = np.empty(self.dim)
            log_det = -self.log_det_chol
            for k in range(self.dim):
                s = self._width(z[:k], k)
                u[k] = (z[k] - self._shift(z[:k], k)) * math.exp(-s)
                log_det -= s
            return u, log_det
        Z = solve_triangular(self.chol, (X - self.mean).T, lower=True).T
        U = np.empty_like(Z)
        log_det = np.full(Z.shape[0], -self.log_det_chol)
        for k in range(self.dim):
            Z_before = Z[:, :k]
            s = np.clip(self._width_levels[k] + Z_before @ self._width_slopes[k], *self.width_bounds[k])
            h = map_features(Z_before, self.quadratic[k]) @ self.shift_coefs[k]
            U[:, k] = (Z[:, k] - h) * np.exp(-s)
            log_det -= s
        return U, log_det

    def to_model(self, u) -> tuple[np.ndarray, float]:
        r"""The point :math:`x(u)` and :math:`\log |\partial x / \partial u| = \log |L| + \sum_k s_k`.

        Parameters
        ----------
        u : array of shape (d,)
        """
        u = np.asarray(u, dtype=float)
        z = np.empty(self.dim)
        log_det = self.log_det_chol
        for k in range(self.dim):
            s = self._width(z[:k], k)
            z[k] = self._shift(z[:k], k) + math.exp(s) * u[k]
            log_det += s
        return self.mean + self.chol @ z, log_det


class MapIndependenceProposal(Proposal):
    r"""Independent draws through a triangular map: :math:`x = T(u)`, :math:`u \sim t_\nu(0, I)`.

    .. math::
        q(x \mid y) = q(x) = t_\nu\big(u(x);\ 0, I\big)\,
            \left|\frac{\partial u}{\partial x}\right|

    (:class:`TriangularMap`, :func:`~pymc_kameleon.core.proposals.student_t_log_density`). With the
    map that is the whitening alone it is
    :class:`~pymc_kameleon.core.proposals.IndependenceProposal` with the draws' :math:`m, L`.

    Parameters
    ----------
    transport_map : TriangularMap
    df : float
        Degrees of freedom :math:`\nu > 0`.
    """

    def __init__(self, transport_map: TriangularMap, df: float):
        if not df > 0:
            raise ValueError(f"df must be > 0, got {df}")
        self.transport_map = transport_map
        self.df = float(df)

    def propose(self, y, rng) -> Move:
        x = self.draw(rng)
        return Move(x, self.point_log_density(x), self.point_log_density(y), component="independence")

    def draw(self, rng) -> np.ndarray:
        """:math:`T(u)` for a draw :math:`u` of :func:`~pymc_kameleon.core.proposals.standard_t_draw`."""
        return self.transport_map.to_model(standard_t_draw(self.transport_map.dim, self.df, rng))[0]

    def point_log_density(self, x) -> float:
        r""":math:`\log q(x)`, whatever the current state."""
        u, log_det = self.transport_map.to_reference(x)
        return student_t_log_density(u, self.df) + log_det

    def log_density(self, x, y) -> float:
        return self.point_log_density(x)


class MapWalkProposal(Proposal):
    r"""A random walk in a triangular map's reference coordinates: :math:`x = T(u(y) + s\varepsilon)`,
    :math:`\varepsilon \sim \mathcal N(0, I)`.

    .. math::
        q(x \mid y) = \mathcal N\big(u(x);\ u(y), s^2 I\big)\,
            \left|\frac{\partial u}{\partial x}\right|_{x}

    The Gaussian factor is symmetric, so the Hastings ratio is the ratio of the Jacobians,
    :math:`q(y \mid x) / q(x \mid y) = |\partial u / \partial x|_y \,/\, |\partial u / \partial x|_x`:
    Metropolis in :math:`u` on the target :math:`\pi(x(u))\, |\partial x / \partial u|`.
    Its moves are named ``"map_walk"`` (:class:`MapMixtureProposal`'s walk is the one a step tunes).

    Parameters
    ----------
    transport_map : TriangularMap
    scale : float
        :math:`s > 0`.
    """

    def __init__(self, transport_map: TriangularMap, scale: float):
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale must be finite and > 0, got {scale}")
        self.transport_map = transport_map
        self.scale = float(scale)
        self._walk = RandomWalkProposal(self.scale, dim=transport_map.dim)  # the walk in u

    def propose(self, y, rng) -> Move:
        u_y, log_det_y = self.transport_map.to_reference(y)
        u_x = self._walk.propose(u_y, rng).x
        x, log_det_to_model = self.transport_map.to_model(u_x)
        gaussian = self._walk.log_density(u_x, u_y)
        return Move(x, gaussian - log_det_to_model, gaussian + log_det_y, component="map_walk")

    def log_density(self, x, y) -> float:
        u_x, log_det_x = self.transport_map.to_reference(x)
        return self._walk.log_density(u_x, self.transport_map.to_reference(y)[0]) + log_det_x


class MapMixtureProposal(Proposal):
    r"""The map shape's move (KameleonMetropolis with ``start="smc"``): with probability :math:`\iota` an
    independent draw through the map, else a random walk in its reference coordinates.

    .. math::
        q(x \mid y) = \left|\frac{\partial u}{\partial x}\right|_x
            \Big[\iota\, t_\nu\big(u(x)\big) + (1 - \iota)\,
            \mathcal N\big(u(x);\ u(y), s^2 I\big)\Big]

    Both Hastings terms are the full mixture's. The walk's scale :math:`s` is read at each proposal
    from ``scale`` (a callable: the step's tuned :math:`\lambda`, so tuning adapts it on the
    ``"map_walk"`` moves); the map itself is fixed. One map evaluation per step: the current state's
    reference coordinates are kept from the accepted move.

    Parameters
    ----------
    transport_map : TriangularMap
    scale : callable
        ``scale()`` returns :math:`s > 0`.
    independence : float, default MAP_INDEPENDENCE_WEIGHT
        :math:`\iota \in (0, 1)`.
    df : float, default MAP_INDEPENDENCE_DF
        :math:`\nu > 0`.
    """

    def __init__(self, transport_map: TriangularMap, scale, independence: float = MAP_INDEPENDENCE_WEIGHT,
                 df: float = MAP_INDEPENDENCE_DF):
        if not 0.0 < independence < 1.0:
            raise ValueError(f"independence must be in (0, 1), got {independence}")
        if not df > 0:
            raise ValueError(f"df must be > 0, got {df}")
        self.transport_map = transport_map
        self.scale = scale
        self.independence = float(independence)
        self.df = float(df)
        self._current = None  # (state, its u, log|du/dx| there)

    def _at(self, y):
        cur = self._current
        if cur is not None and same_array(cur[0], y):
            return cur[1], cur[2]
        u, log_det = self.transport_map.to_reference(np.asarray(y, dtype=float))
        self._current = (np.array(y, copy=True), u, log_det)
        return u, log_det

    def _log_mixture(self, u_to, u_from, s: float) -> float:
        d = u_to.shape[0]
        r = (u_to - u_from) / s
        log_walk = -0.5 * d * _LOG_2PI - d * math.log(s) - 0.5 * float(r @ r)
        a = math.log1p(-self.independence) + log_walk
        b = math.log(self.independence) + student_t_log_density(u_to, self.df)
        top = max(a, b)
        return top + math.log(math.exp(a - top) + math.exp(b - top))

    def propose(self, y, rng) -> Move:
        s = float(self.scale())
        u_y, log_det_y = self._at(y)
        d = u_y.shape[0]
        if rng.random() < self.independence:
            component, u_x = "map_independence", standard_t_draw(d, self.df, rng)
        else:
            component, u_x = "map_walk", u_y + s * rng.standard_normal(d)
        x, log_det_to_model = self.transport_map.to_model(u_x)
        log_q_forward = self._log_mixture(u_x, u_y, s) - log_det_to_model
        log_q_reverse = self._log_mixture(u_y, u_x, s) + log_det_y
        return Move(x, log_q_forward, log_q_reverse, cache=(u_x, -log_det_to_model), component=component)

    def accept(self, move: Move) -> None:
        self._current = (np.array(move.x, copy=True), move.cache[0], move.cache[1])

    def log_density(self, x, y) -> float:
        s = float(self.scale())
        u_x, log_det_x = self.transport_map.to_reference(np.asarray(x, dtype=float))
        u_y, _ = self.transport_map.to_reference(np.asarray(y, dtype=float))
        return self._log_mixture(u_x, u_y, s) + log_det_x
