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

from pymc_kameleon.core._fused import HAVE_NUMBA, RADIAL_CODES, fused_rkhs_covariance
from pymc_kameleon.core.linalg import cholesky_lower, gaussian_log_norm, jittered_cholesky, solve_lower

__all__ = ["KameleonProposal", "ProposalAtPoint"]


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
        (see :mod:`pymc_kameleon.core.kernels`).
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
        r"""Return :math:`(M_y H)^\top`, shape ``(n, d)``: twice the kernel gradients, centred over :math:`i`."""
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
        r"""Turn :math:`M_y H M_y^\top` into the proposal covariance :math:`\gamma^2 I + \nu^2 M_y H M_y^\top`."""
        cov = self.nu2 * rkhs_cov
        cov.flat[:: self.dim + 1] += self.gamma2
        return cov

    def covariance(self, y) -> np.ndarray:
        r"""Proposal covariance :math:`\gamma^2 I + \nu^2 M_y H M_y^\top` at ``y``."""
        return self.scaled(self.rkhs_covariance(y))

    def at(self, y) -> ProposalAtPoint:
        """Factorised proposal :math:`q_Z(\\cdot \\mid y)`, ready to sample and evaluate."""
        return ProposalAtPoint.from_covariance(y, self.covariance(y))

    # Batched versions (used by SMC): one covariance per row of Y.
    def covariance_batch(self, Y) -> np.ndarray:
        """Proposal covariances at each row of ``Y``, shape ``(m, d, d)``."""
        Y = np.atleast_2d(np.asarray(Y, dtype=float))
        G = self.kernel.grad(Y, self.Z)  # (m, n, d)
        A = 2.0 * (G - G.mean(axis=1, keepdims=True))
        cov = self.nu2 * np.einsum("mni,mnj->mij", A, A)
        cov[:, np.arange(self.dim), np.arange(self.dim)] += self.gamma2
        return cov

    def log_density_batch(self, X, Y) -> np.ndarray:
        """:math:`\\log q(x_i \\mid y_i)` for paired rows of ``X`` and ``Y``."""
        X = np.atleast_2d(np.asarray(X, dtype=float))
        Y = np.atleast_2d(np.asarray(Y, dtype=float))
        covs = self.covariance_batch(Y)
        out = np.empty(Y.shape[0])
        for i, cov in enumerate(covs):
            out[i] = ProposalAtPoint.from_covariance(Y[i], cov).log_density(X[i])
        return out
