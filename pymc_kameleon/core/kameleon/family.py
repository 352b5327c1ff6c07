r"""The Kameleon proposal (Sejdinovic, Strathmann et al., ICML 2014).

Given a subsample :math:`Z = \{z_i\}_{i=1}^n` of the chain history and the current
state :math:`y`, the proposal is (Proposition 2 of the paper)

.. math::
    q_Z(\cdot \mid y) = \mathcal N\!\left(y,\; \gamma^2 I + \nu^2 M_y H M_y^\top\right),
    \qquad M_y = 2\,[\nabla_x k(x, z_1), \dots, \nabla_x k(x, z_n)]_{x=y},

with the centring matrix :math:`H = I - \mathbf 1 \mathbf 1^\top / n`. Because
:math:`H` is idempotent, :math:`M H M^\top = (MH)(MH)^\top`, and :math:`(MH)^\top`
is :math:`M^\top` with its columns centred. This module never builds the
:math:`n \times n` matrix :math:`H`: a covariance costs :math:`O(n d^2)` and its
Cholesky :math:`O(d^3)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pymc_kameleon.core.kameleon._fused import HAVE_NUMBA, RADIAL_CODES, fused_rkhs_covariance
from pymc_kameleon.core.kameleon.kernels import median_heuristic_bandwidth
from pymc_kameleon.core.linalg import cholesky_lower, gaussian_log_norm, jittered_cholesky, solve_lower

__all__ = [
    "FittedProposal",
    "KameleonProposal",
    "ProposalAtPoint",
    "check_subsample_size",
    "fit_proposal",
    "matched_nu2",
    "mean_rkhs_variance",
]

# gamma="auto" is this fraction of the median marginal standard deviation of Z;
# on the paper's targets (unit-variance marginals) it is the paper's gamma = 0.2.
AUTO_GAMMA_FRACTION = 0.2
# Points of Z at which the average proposal variance is measured to keep the
# proposal scale continuous when Z or the bandwidth changes.
SCALE_PROBE_POINTS = 20

_LOG_2PI = math.log(2.0 * math.pi)
# Batched methods work on chunks of rows whose temporaries stay below about this many bytes.
_CHUNK_BYTES = 64 * 2**20
# ... and by default about this many, which keeps them in cache (measured fastest at d = 10).
_CHUNK_TARGET_BYTES = 4 * 2**20
_MIN_CHUNK = 16
_MAX_CHUNK = 4096


@dataclass(frozen=True)
class ProposalAtPoint:
    """The proposal distribution conditioned on one point, factorised once.

    Attributes
    ----------
    center : array of shape (d,)
        The conditioning point :math:`y` (the proposal mean).
    chol : array of shape (d, d)
        Lower Cholesky factor of the proposal covariance at ``center``.
    log_norm : float
        :math:`-\\tfrac d2 \\log 2\\pi - \\sum_i \\log L_{ii}`, the constant part of the log density.
    jitter : float
        Diagonal jitter that had to be added to factorise the covariance (usually 0).
    """

    center: np.ndarray
    chol: np.ndarray
    log_norm: float
    jitter: float = 0.0

    @classmethod
    def from_covariance(cls, center, cov):
        """Factorise ``cov`` (adding jitter only if plain Cholesky fails)."""
        jitter = 0.0
        chol = cholesky_lower(cov)
        if chol is None:
            chol, jitter = jittered_cholesky(cov, what="Kameleon proposal covariance")
        log_norm = gaussian_log_norm(chol)
        if not math.isfinite(log_norm):  # NaN in, NaN out: LAPACK's Cholesky does not raise
            chol, jitter = jittered_cholesky(cov, what="Kameleon proposal covariance")
            log_norm = gaussian_log_norm(chol)
        return cls(np.array(center, dtype=float), chol, log_norm, jitter)

    def sample(self, rng) -> np.ndarray:
        """Draw :math:`x^* = y + L\\varepsilon`, :math:`\\varepsilon \\sim \\mathcal N(0, I)`."""
        return self.sample_with_log_density(rng)[0]

    def sample_with_log_density(self, rng) -> tuple[np.ndarray, float]:
        """Draw :math:`x^*` and return it with :math:`\\log q(x^* \\mid y) = c - \\|\\varepsilon\\|^2/2`.

        The forward density needs no triangular solve, because :math:`\\varepsilon` is known.
        """
        eps = rng.standard_normal(self.center.shape[0])
        return self.center + self.chol @ eps, self.log_norm - 0.5 * float(eps @ eps)

    def log_density(self, x) -> float:
        """Log density :math:`\\log q(x \\mid y)` of this proposal at ``x``."""
        u = solve_lower(self.chol, np.asarray(x, dtype=float) - self.center)
        return self.log_norm - 0.5 * float(u @ u)


class KameleonProposal:
    r"""Kameleon proposal family for a fixed subsample, kernel and scales.

    Parameters
    ----------
    Z : array of shape (n, d)
        Subsample of the chain history, :math:`n \geq 1`.
    kernel : kernel object
        Has ``grad(X, Z)`` returning :math:`\nabla_x k(x, z_j)`
        (see :mod:`pymc_kameleon.core.kameleon.kernels`).
    gamma2 : float
        Exploration variance :math:`\gamma^2 \geq 0`.
    nu2 : float
        Scale :math:`\nu^2 > 0` of the RKHS move.
    """

    def __init__(self, Z, kernel, gamma2: float, nu2: float):
        Z = np.ascontiguousarray(Z, dtype=float)
        if Z.ndim != 2 or Z.shape[0] < 1:
            raise ValueError(f"Z must have shape (n, d) with n >= 1, got {Z.shape}.")
        if not (np.isfinite(gamma2) and gamma2 >= 0):
            raise ValueError(f"gamma2 must be a non-negative finite number, got {gamma2!r}.")
        if not (np.isfinite(nu2) and nu2 > 0):
            raise ValueError(f"nu2 must be a positive finite number, got {nu2!r}.")
        self.Z = Z
        self.kernel = kernel
        self.gamma2 = float(gamma2)
        self.nu2 = float(nu2)
        self.dim = Z.shape[1]
        # Work relative to the subsample mean: it keeps the expanded sums below well conditioned.
        self._z_mean = Z.mean(axis=0)
        self._Zc = np.ascontiguousarray(Z - self._z_mean)
        self._Zc_sq = np.einsum("ij,ij->i", self._Zc, self._Zc)
        self._radial = callable(getattr(kernel, "radial_weights", None))
        self._fused_code = RADIAL_CODES.get(type(kernel).__name__) if HAVE_NUMBA else None
        self._constant = None
        if getattr(kernel, "constant_gradient", False):
            # Linear kernel: M H M^T = 4 Z^T H Z whatever the state.
            self._constant = 4.0 * (self._Zc.T @ self._Zc)

    def centred_gradients(self, y) -> np.ndarray:
        r"""Return :math:`(M_y H)^\top`, shape ``(n, d)``: twice the kernel gradients, centred over
        :math:`i`."""
        G = self.kernel.grad(np.asarray(y, dtype=float), self.Z)
        return 2.0 * (G - G.mean(axis=0))

    def rkhs_covariance(self, y) -> np.ndarray:
        r""":math:`M_y H M_y^\top = (M_y H)(M_y H)^\top`, the part of the covariance that the scales multiply.

        For radial kernels, :math:`\nabla_x k(y, z_i) = w_i (z_i - y)`, and with
        :math:`g = \sum_i w_i (z_i - y)`,

        .. math::
            \tfrac14 M_y H M_y^\top = \sum_i w_i^2 (z_i - y)(z_i - y)^\top - g g^\top / n,

        which is assembled from :math:`O(nd)` vector work and one :math:`d \times d`
        BLAS product, without an :math:`n \times d` gradient matrix.
        """
        if self._constant is not None:
            return self._constant.copy()
        if self._fused_code is not None:
            return fused_rkhs_covariance(self._Zc, np.asarray(y, dtype=float) - self._z_mean,
                                         self._fused_code, self.kernel.bandwidth)
        return self.rkhs_covariance_numpy(y)

    def rkhs_covariance_numpy(self, y) -> np.ndarray:
        """Pure NumPy :meth:`rkhs_covariance` (the reference for the compiled loop)."""
        if self._constant is not None:
            return self._constant.copy()
        if not self._radial:
            A = self.centred_gradients(y)
            return A.T @ A
        yc = np.asarray(y, dtype=float) - self._z_mean
        Zc = self._Zc
        sq = self._Zc_sq - 2.0 * (Zc @ yc) + yc @ yc
        np.maximum(sq, 0.0, out=sq)
        w = self.kernel.radial_weights(sq)
        w2 = w * w
        cov = Zc.T @ (Zc * w2[:, None])  # sum_i w_i^2 z_i z_i^T
        zw = Zc.T @ w  # sum_i w_i z_i
        zw2 = Zc.T @ w2  # sum_i w_i^2 z_i
        cross = yc[:, None] * zw2
        cov -= cross + cross.T
        cov += w2.sum() * (yc[:, None] * yc)
        g = zw - w.sum() * yc  # sum_i w_i (z_i - y)
        cov -= (g[:, None] * g) / Zc.shape[0]
        cov *= 4.0
        return cov

    def scaled(self, rkhs_cov) -> np.ndarray:
        r"""Turn :math:`M_y H M_y^\top` into the proposal covariance
        :math:`\gamma^2 I + \nu^2 M_y H M_y^\top`."""
        cov = self.nu2 * rkhs_cov
        cov.flat[:: self.dim + 1] += self.gamma2
        return cov

    def covariance(self, y) -> np.ndarray:
        r"""Proposal covariance :math:`\gamma^2 I + \nu^2 M_y H M_y^\top` at ``y``."""
        return self.scaled(self.rkhs_covariance(y))

    def at(self, y) -> ProposalAtPoint:
        """Factorised proposal :math:`q_Z(\\cdot \\mid y)`, ready to sample and evaluate."""
        return ProposalAtPoint.from_covariance(y, self.covariance(y))

    # Batched versions (used by SMC): one covariance per row of Y, vectorised over chunks of rows.
    def _check_points(self, Y, name: str = "Y") -> np.ndarray:
        Y = np.asarray(Y, dtype=float)
        if Y.ndim == 1:
            Y = Y[None, :]
        if Y.ndim != 2 or Y.shape[1] != self.dim:
            raise ValueError(f"{name} must have shape (m, {self.dim}) or ({self.dim},), got {np.shape(Y)}.")
        return Y

    def _chunk_size(self, chunk_size) -> int:
        if chunk_size is None:
            n, d = self.Z.shape
            # Per row of a chunk: a few length-n rows (distances, weights, squared weights)
            # and a few d x d blocks (covariance, Cholesky factor, temporaries); the generic
            # path also holds an (n, d) gradient block per row.
            per_row = 8 * (4 * n + 6 * d * d + 8 * d + (0 if self._radial else 2 * n * d))
            # Aim at cache-sized chunks (faster than huge ones), never above the hard bound.
            step = min(max(_MIN_CHUNK, _CHUNK_TARGET_BYTES // per_row), _CHUNK_BYTES // per_row, _MAX_CHUNK)
            return int(max(1, step))
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}.")
        return int(chunk_size)

    def _zz_upper(self):
        """Products :math:`z_{ia} z_{ib}` for :math:`a \\le b`, shape ``(n, d(d+1)/2)`` (cached)."""
        if getattr(self, "_zz_cache", None) is None:
            iu, ju = np.triu_indices(self.dim)
            zz = np.ascontiguousarray(self._Zc[:, iu] * self._Zc[:, ju])
            self._zz_cache = (iu, ju, zz)
        return self._zz_cache

    def _rkhs_covariance_chunk(self, Y) -> np.ndarray:
        r""":math:`M_y H M_y^\top` for each row of ``Y`` (shape ``(m, d, d)``), memory :math:`O(m(n + d^2))`.

        Radial kernels use the expansion of :meth:`rkhs_covariance_numpy` with a stack of
        weights :math:`W` (``m x n``): :math:`\sum_i w_i^2 z_i z_i^\top` for all rows is one
        GEMM of :math:`W^{\circ 2}` with the products :math:`z_{ia} z_{ib}` (upper triangle
        only, so the result is exactly symmetric).
        """
        m, d = Y.shape
        n = self._Zc.shape[0]
        if self._constant is not None:
            return np.broadcast_to(self._constant, (m, d, d)).copy()
        if not self._radial:
            G = np.asarray(self.kernel.grad(Y, self.Z), dtype=float)  # (m, n, d)
            if G.shape != (m, n, d):  # a user kernel without batched gradients: one point at a time
                return np.stack([self.rkhs_covariance_numpy(y) for y in Y]) if m else np.empty((0, d, d))
            A = 2.0 * (G - G.mean(axis=1, keepdims=True))
            return np.matmul(A.transpose(0, 2, 1), A)
        Zc = self._Zc
        Yc = Y - self._z_mean
        sq = Yc @ Zc.T  # (m, n)
        sq *= -2.0
        sq += self._Zc_sq
        sq += np.einsum("ij,ij->i", Yc, Yc)[:, None]
        np.maximum(sq, 0.0, out=sq)
        W = np.asarray(self.kernel.radial_weights(sq), dtype=float)
        del sq
        W2 = W * W
        iu, ju, zz = self._zz_upper()
        upper = W2 @ zz  # (m, d(d+1)/2): sum_i w_i^2 z_ia z_ib
        cov = np.empty((m, d, d))
        cov[:, iu, ju] = upper
        cov[:, ju, iu] = upper
        zw = W @ Zc  # sum_i w_i z_i
        zw2 = W2 @ Zc  # sum_i w_i^2 z_i
        s1 = W.sum(axis=1)
        s2 = W2.sum(axis=1)
        del W, W2
        # Every term below is exactly symmetric, so the covariances are too.
        cross = Yc[:, :, None] * zw2[:, None, :]
        cov -= cross + cross.transpose(0, 2, 1)
        cov += s2[:, None, None] * (Yc[:, :, None] * Yc[:, None, :])
        g = zw - s1[:, None] * Yc  # sum_i w_i (z_i - y)
        cov -= (g[:, :, None] * g[:, None, :]) / n
        cov *= 4.0
        return cov

    def _covariance_chunk(self, Y) -> np.ndarray:
        cov = self._rkhs_covariance_chunk(Y)
        cov *= self.nu2
        idx = np.arange(self.dim)
        cov[:, idx, idx] += self.gamma2
        return cov

    def _factor_chunk(self, Y):
        """Lower Cholesky factors and log normalisers of the proposals at the rows of ``Y``.

        One batched ``np.linalg.cholesky``; if it fails, or gives a non-finite normaliser,
        only the offending rows are refactorised as in :meth:`ProposalAtPoint.from_covariance`
        (jitter, or :class:`SingularCovarianceError` for non-finite covariances).
        """
        covs = self._covariance_chunk(Y)
        d = self.dim
        try:
            L = np.linalg.cholesky(covs)
            bad = None
        except np.linalg.LinAlgError:
            # Which matrices failed: factorise one by one, keep the good ones.
            L = np.zeros_like(covs)
            bad = []
            for i, c in enumerate(covs):
                Li = cholesky_lower(c)
                if Li is None:
                    bad.append(i)
                else:
                    L[i] = Li
            bad = np.asarray(bad, dtype=int)
        with np.errstate(invalid="ignore", divide="ignore"):
            log_norm = -0.5 * d * _LOG_2PI - np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1)
        nonfinite = np.flatnonzero(~np.isfinite(log_norm))
        if bad is not None and bad.size:
            nonfinite = np.union1d(nonfinite, bad)
        for i in nonfinite:
            Li, _ = jittered_cholesky(covs[i], what="Kameleon proposal covariance")
            L[i] = Li
            log_norm[i] = gaussian_log_norm(Li)
        return L, log_norm

    def covariance_batch(self, Y, chunk_size: int | None = None) -> np.ndarray:
        """Proposal covariances :math:`\\gamma^2 I + \\nu^2 M_y H M_y^\\top` at the rows of ``Y``.

        Returns shape ``(m, d, d)``. Vectorised over chunks of ``chunk_size`` rows; the default
        keeps a chunk's temporaries near 4 MB (cache-sized) and always below 64 MB. The results
        do not depend on the chunk size.
        """
        Y = self._check_points(Y)
        step = self._chunk_size(chunk_size)
        m = Y.shape[0]
        out = np.empty((m, self.dim, self.dim))
        for s in range(0, m, step):
            out[s : s + step] = self._covariance_chunk(Y[s : s + step])
        return out

    def factor_batch(self, Y, chunk_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Cholesky factors ``(m, d, d)`` and log normalisers ``(m,)`` of the proposals at the rows of ``Y``.

        Pass them back as ``factors=`` to :meth:`sample_batch` or :meth:`log_density_batch` to
        reuse them (an SMC sweep needs the factor at each proposal twice: for the reverse
        density now, and to propose from it next sweep if it is accepted). Holds
        :math:`8 m d^2` bytes, unlike the chunked methods.
        """
        Y = self._check_points(Y)
        step = self._chunk_size(chunk_size)
        m = Y.shape[0]
        L = np.empty((m, self.dim, self.dim))
        log_norm = np.empty(m)
        for s in range(0, m, step):
            L[s : s + step], log_norm[s : s + step] = self._factor_chunk(Y[s : s + step])
        return L, log_norm

    def _factor_chunks(self, Y, step, factors):
        """Yield ``(start, L, log_norm)`` per chunk of rows of ``Y``: from ``factors`` if given, else
        computed."""
        for s in range(0, Y.shape[0], step):
            if factors is None:
                yield (s, *self._factor_chunk(Y[s : s + step]))
            else:
                yield s, factors[0][s : s + step], factors[1][s : s + step]

    def log_density_batch(self, X, Y, chunk_size: int | None = None, factors=None) -> np.ndarray:
        r""":math:`\log q(x_i \mid y_i)` for paired rows of ``X`` and ``Y``, shape ``(m,)``.

        Each chunk is one batched covariance build, one batched Cholesky and one batched
        triangular solve; see :meth:`covariance_batch` for ``chunk_size``. ``factors`` are
        :meth:`factor_batch` at ``Y``, if already known.
        """
        X = self._check_points(X, "X")
        Y = self._check_points(Y, "Y")
        if X.shape != Y.shape:
            raise ValueError(f"X and Y must have the same shape, got {X.shape} and {Y.shape}.")
        step = self._chunk_size(chunk_size)
        out = np.empty(Y.shape[0])
        for s, L, log_norm in self._factor_chunks(Y, step, factors):
            r = (X[s : s + step] - Y[s : s + step])[:, :, None]
            u = np.linalg.solve(L, r)[:, :, 0]
            out[s : s + step] = log_norm - 0.5 * np.einsum("ij,ij->i", u, u)
        return out

    def sample_batch(
        self, Y, rng, chunk_size: int | None = None, factors=None
    ) -> tuple[np.ndarray, np.ndarray]:
        r"""Draw :math:`x_i \sim q_Z(\cdot \mid y_i)` for every row of ``Y``.

        Returns ``(X, log_q)`` with ``log_q[i]`` :math:`= \log q(x_i \mid y_i)`, taken from the
        draw's :math:`\varepsilon` (no solve). All normals are drawn in one call, so the draws
        do not depend on ``chunk_size``. ``factors`` are :meth:`factor_batch` at ``Y``, if known.
        """
        Y = self._check_points(Y)
        step = self._chunk_size(chunk_size)
        eps = rng.standard_normal(Y.shape)
        X = np.empty_like(Y)
        log_q = np.empty(Y.shape[0])
        for s, L, log_norm in self._factor_chunks(Y, step, factors):
            e = eps[s : s + step]
            X[s : s + step] = Y[s : s + step] + np.einsum("kij,kj->ki", L, e)
            log_q[s : s + step] = log_norm - 0.5 * np.einsum("ij,ij->i", e, e)
        return X, log_q


@dataclass(frozen=True)
class FittedProposal:
    """A proposal family built from a fresh subsample (see :func:`fit_proposal`)."""

    family: KameleonProposal
    bandwidth: float  # NaN for kernels without a bandwidth
    gamma: float
    probe_variance: float  # average tr(M H M^T) / d over probe points of Z


def check_subsample_size(n_subsample, dim: int) -> None:
    r"""Raise a ValueError unless the subsample :math:`Z` can hold :math:`d + 1` points.

    Fewer than :math:`d + 1` points span at most a :math:`(d-1)`-dimensional affine subspace, so
    the kernel term :math:`M_y H M_y^\top` (and the linear kernel's covariance) is rank deficient
    in some direction, and a single point gives no median distance at all.
    """
    if int(n_subsample) < dim + 1:
        raise ValueError(
            f"n_subsample must be at least d + 1 = {dim + 1} ({dim} sampled coordinates), got "
            f"{n_subsample!r}: a smaller subsample Z cannot span every direction of the posterior. "
            "The default (1000) suits most models."
        )


def fit_proposal(Z, kernel, bandwidth, gamma, nu2: float, rng) -> FittedProposal | None:
    r"""Build the proposal family for a new subsample :math:`Z` (one adaptation refresh).

    - Bandwidth: ``"median"`` gives the median heuristic
      :math:`\sigma^2 = \operatorname{median}\|z_i - z_j\|^2 / 2`; a number is used as is.
    - :math:`\gamma`: ``"auto"`` gives 0.2 times the median marginal standard deviation of
      :math:`Z`; a number is used as is.
    - ``probe_variance`` is :math:`\operatorname{tr}(M_z H M_z^\top) / d` averaged over up to 20
      points of :math:`Z`. Steps use it to choose or rescale :math:`\nu^2` so that the average
      proposal variance stays continuous across refreshes.

    Returns None when :math:`Z` has fewer than two distinct points (the chain has not moved).
    """
    Z = np.asarray(Z, dtype=float)
    if Z.shape[0] < 2 or np.unique(Z, axis=0).shape[0] < 2:
        return None
    sigma = math.nan
    if getattr(kernel, "has_bandwidth", False):
        sigma = (
            median_heuristic_bandwidth(Z, max_points=500, rng=rng)
            if bandwidth == "median"
            else float(bandwidth)
        )
        kernel = kernel.with_bandwidth(sigma)
    if gamma == "auto":
        sd = float(np.median(np.std(Z, axis=0)))
        gamma = AUTO_GAMMA_FRACTION * sd if sd > 0 else AUTO_GAMMA_FRACTION
    gamma = float(gamma)
    family = KameleonProposal(Z, kernel, gamma**2, nu2)
    probe = Z[rng.choice(Z.shape[0], size=min(SCALE_PROBE_POINTS, Z.shape[0]), replace=False)]
    probe_variance = mean_rkhs_variance(family, probe)
    return FittedProposal(family, sigma, gamma, probe_variance)


def mean_rkhs_variance(family: KameleonProposal, points) -> float:
    r""":math:`\bar v`: :math:`\operatorname{tr}(M_z H M_z^\top) / d` averaged over ``points`` (rows).

    The kernel term's mean variance per coordinate is :math:`\nu^2 \bar v`; steps keep it
    continuous when :math:`Z` changes.
    """
    points = np.atleast_2d(np.asarray(points, dtype=float))
    return float(np.mean([np.trace(family.rkhs_covariance(z)) for z in points])) / points.shape[1]


def matched_nu2(rw_variance: float, gamma: float, probe_variance: float) -> float:
    r""":math:`\nu^2` whose average proposal variance matches a tuned random walk's per-coordinate variance.

    :math:`\nu^2 = \max(s^2 - \gamma^2,\ 0.1 s^2) / \bar v`, with :math:`s^2` the random-walk
    variance and :math:`\bar v` the ``probe_variance`` of :func:`fit_proposal`.
    """
    return max(rw_variance - gamma**2, 0.1 * rw_variance) / max(probe_variance, 1e-300)
