r"""Stored observations of a GP and the Cholesky factor of their covariance, grown by appends.

:class:`GPFactor` is the base of :class:`~pymc_kameleon.core.gp.surrogate.GPSurrogate` (model, ordering of
the observations, nugget and predictive equations in :mod:`pymc_kameleon.core.gp.surrogate`). It works in the
kernel's coordinates only: :class:`~pymc_kameleon.core.gp.surrogate.GPSurrogate` validates the arguments, maps
the caller's points and gradients through its input whitening, and adds predictions and the
hyperparameter fit.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import solve_triangular

from pymc_kameleon.core.gp.covariance import se_ard_covariance, se_values_by_coordinate
from pymc_kameleon.core.gp.triangular import GrowingCholesky
from pymc_kameleon.core.linalg import bordered_blocks, cholesky_lower, jittered_cholesky, schur_factor

__all__ = ["GPFactor"]


class GPFactor:
    r"""Hyperparameters, observations and the factor :math:`K = L L^\top` of a GP in kernel coordinates.

    State: the points ``_X`` (kernel coordinates), the observations ``_y`` (point by point, ``p``
    rows each), the mean design ``_h``, everything added to the diagonal of :math:`K`
    (``_diag_add``), :math:`L`, :math:`L^{-1} y`, :math:`L^{-1} h` and, lazily,
    :math:`\alpha = K^{-1}(y - m h)`. The arguments are taken as already validated.
    """

    def __init__(self, dim, lengthscales, signal_variance, noise_variance, mean, jitter, gradients):
        self.dim = d = dim
        self._ell = lengthscales
        self._s2 = float(signal_variance)
        self._noise = float(noise_variance)
        self._mean_spec = mean
        self.jitter = float(jitter)
        self.gradients = bool(gradients)
        self._p = d + 1 if self.gradients else 1
        self._X = np.empty((0, d))  # stored points in the kernel's (whitened) coordinates
        self._y = np.empty(0)  # observations, point by point
        self._h = np.empty(0)  # mean design: 1 on value rows, 0 on gradient rows
        self._diag_add = np.empty(0)  # everything added to the diagonal of K (nugget, noise, extra)
        self._factor = GrowingCholesky()  # L, grown in place by appends
        self._zy = np.empty(0)  # L^{-1} y
        self._zh = np.empty(0)  # L^{-1} h
        self._alpha = None  # K^{-1} (y - m h), computed lazily after adds
        self._gls_mean = None  # (_zy, _zh, the GLS mean they give), made on first use
        self._points_transposed = None  # (_X, _X.T contiguous) for predictions, made on first use

    # ------------------------------------------------------------------ properties
    @property
    def n_points(self) -> int:
        """Number of stored points ``t``."""
        return self._X.shape[0]

    @property
    def lengthscales(self) -> np.ndarray:
        """ARD length scales :math:`\\ell` (a copy)."""
        return self._ell.copy()

    @property
    def signal_variance(self) -> float:
        """Prior variance :math:`s^2`."""
        return self._s2

    @property
    def noise_variance(self) -> float:
        """Observation-noise variance :math:`\\sigma_n^2` of the values."""
        return self._noise

    @property
    def W(self) -> np.ndarray:
        """Stored points in the kernel's coordinates (whitened; ``X`` without a whitening), a copy."""
        return self._X.copy()

    @property
    def values(self) -> np.ndarray:
        """Stored function values, shape ``(t,)``."""
        return self._y[:: self._p].copy()

    @property
    def _L(self) -> np.ndarray:
        """The factor :math:`L` (a read-only view; solve with ``self._factor.solve``)."""
        return self._factor.L

    @property
    def cholesky_factor(self) -> np.ndarray:
        """Lower Cholesky factor of :math:`K` (nugget included), shape ``(t p, t p)`` (a copy; for
        inspection and checks, as :meth:`covariance_matrix`)."""
        return self._L.copy()

    @property
    def mean_value(self) -> float:
        r"""The constant prior mean in use: :math:`\hat m` (GLS) or the fixed value."""
        if not isinstance(self._mean_spec, str):
            return self._mean_spec
        cached = self._gls_mean
        if cached is not None and cached[0] is self._zy and cached[1] is self._zh:
            return cached[2]  # every change of L^{-1} y or L^{-1} h makes new arrays
        zhh = float(self._zh @ self._zh)
        value = 0.0 if zhh <= 0 else float(self._zh @ self._zy) / zhh
        self._gls_mean = (self._zy, self._zh, value)
        return value

    # ------------------------------------------------------------------ covariance pieces
    def _prior_row_variances(self, ell, s2, n_points):
        """Prior variance of each observation row: s² for values, s²/ℓ_j² for gradients."""
        one = np.full(self._p, s2)
        if self.gradients:
            one[1:] = s2 / ell**2
        return np.tile(one, n_points)

    def _base_diag_add(self, ell, s2, noise, n_points):
        return self.jitter * self._prior_row_variances(ell, s2, n_points) + noise * np.tile(
            self._h_block(), n_points
        )

    def _h_block(self):
        h = np.zeros(self._p)
        h[0] = 1.0
        return h

    def covariance_matrix(self) -> np.ndarray:
        """Dense :math:`K` of the stored observations, nugget and noise included (for checks)."""
        K = se_ard_covariance(self._X, self._X, self._ell, self._s2, self.gradients, self.gradients)
        K[np.diag_indices_from(K)] += self._diag_add
        return K

    def _value_rows(self, x):
        r""":func:`~pymc_kameleon.core.gp.covariance.se_ard_covariance` of the points ``x`` (n, d) (kernel
        coordinates) with the stored points, values only, shape (n, t), to the bit, from differences
        stored by coordinate (:func:`~pymc_kameleon.core.gp.covariance.se_values_by_coordinate`): the
        stored points are kept transposed, (d, t), while they stay. The same bits matter: GP-DA adapts
        its scale in tuning on predictions, so a rounding difference would change the draws.
        """
        cached = self._points_transposed
        if cached is None or cached[0] is not self._X:
            cached = (self._X, np.ascontiguousarray(self._X.T))
            self._points_transposed = cached
        # (d, n, t), C-ordered: x - w as se_ard_covariance's R
        R = np.ascontiguousarray(x.T)[:, :, None] - cached[1][:, None, :]
        return se_values_by_coordinate(R, self._ell, self._s2)

    # ------------------------------------------------------------------ appending
    def _append(self, w, obs):
        r"""Condition on ``obs`` (``p`` rows) at ``w`` (kernel coordinates) in :math:`O(n^2 p)`.

        Raises :class:`~pymc_kameleon.core.linalg.SingularCovarianceError`, with nothing changed,
        if the new point is numerically a copy of stored ones even after jitter.
        """
        g = self.gradients
        if g:
            k_new = se_ard_covariance(self._X, w[None], self._ell, self._s2, g, g)
        else:  # the same bits: negated differences give the same squares
            k_new = self._value_rows(w[None]).T
        k_self = se_ard_covariance(w[None], w[None], self._ell, self._s2, g, g)
        diag_new = self._base_diag_add(self._ell, self._s2, self._noise, 1)
        k_self[np.diag_indices_from(k_self)] += diag_new
        # The bordered factor (linalg.cholesky_append), its new rows written in place: O(n^2 p).
        k_new, k_self = bordered_blocks(self._factor.n, k_new, k_self, "GP")
        B = self._factor.solve(k_new) if self._factor.n else k_new
        L22, extra = schur_factor(B, k_self, jitter=10.0 * max(self.jitter, 1e-12), what="GP")
        n = self._factor.n
        self._factor.append(B.T, L22)
        # Extend L^{-1} y and L^{-1} h by forward substitution with the new rows only (as stored:
        # the memory layout decides the BLAS path, and so the last bits).
        new_rows = self._factor.rows(n)
        L21, L22 = new_rows[:, :n], new_rows[:, n:]
        h_new = self._h_block()
        zy_new = solve_triangular(L22, obs - L21 @ self._zy, lower=True, check_finite=False)
        zh_new = solve_triangular(L22, h_new - L21 @ self._zh, lower=True, check_finite=False)
        self._X = np.vstack([self._X, w[None]])
        self._y = np.concatenate([self._y, obs])
        self._h = np.concatenate([self._h, h_new])
        self._diag_add = np.concatenate([self._diag_add, diag_new + extra])
        self._zy = np.concatenate([self._zy, zy_new])
        self._zh = np.concatenate([self._zh, zh_new])
        self._alpha = None

    def _get_alpha(self):
        if self._alpha is None:
            if self.n_points == 0:
                self._alpha = np.empty(0)
            else:
                r = self._zy - self.mean_value * self._zh
                # alpha = L^{-T} L^{-1} (y - m h): one O(n^2) back substitution per batch of adds.
                self._alpha = self._factor.solve(r, trans=True)
        return self._alpha

    # ------------------------------------------------------------------ refactorising
    def _factorise(self, ell, s2, noise, K=None):
        """Factor of K(ell, s2, noise) from scratch, with jitter escalation if needed.

        ``K``: the kernel matrix of the stored points at these hyperparameters, without the
        diagonal additions, if the caller has it (it is changed in place).
        """
        if K is None:
            g = self.gradients
            K = se_ard_covariance(self._X, self._X, ell, s2, g, g)
        diag_add = self._base_diag_add(ell, s2, noise, self.n_points)
        K[np.diag_indices_from(K)] += diag_add
        L = cholesky_lower(K)
        if L is None:
            L, extra = jittered_cholesky(K, initial_jitter=10.0 * max(self.jitter, 1e-12), what="GP")
            diag_add = diag_add + extra
        return L, diag_add

    def refit(self):
        r"""Refactorise :math:`K` from scratch (:math:`O(n^3)`) with the current hyperparameters."""
        if self.n_points == 0:
            return
        L, self._diag_add = self._factorise(self._ell, self._s2, self._noise)
        self._factor.set(L)
        self._zy = self._factor.solve(self._y)
        self._zh = self._factor.solve(self._h)
        self._alpha = None

    def set_hyperparameters(self, lengthscales=None, signal_variance=None, noise_variance=None):
        """Change hyperparameters and refactorise (:math:`O(n^3)`)."""
        if lengthscales is not None:
            ell = np.broadcast_to(np.asarray(lengthscales, dtype=float), (self.dim,)).copy()
            if not (np.all(np.isfinite(ell)) and np.all(ell > 0)):
                raise ValueError(f"lengthscales must be positive and finite, got {lengthscales!r}.")
            self._ell = ell
        if signal_variance is not None:
            if not (math.isfinite(signal_variance) and signal_variance > 0):
                raise ValueError(f"signal_variance must be positive, got {signal_variance!r}.")
            self._s2 = float(signal_variance)
        if noise_variance is not None:
            if not (math.isfinite(noise_variance) and noise_variance >= 0):
                raise ValueError(f"noise_variance must be >= 0, got {noise_variance!r}.")
            self._noise = float(noise_variance)
        self.refit()
