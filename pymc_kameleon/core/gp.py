r"""Gaussian-process surrogate of a scalar function (the log-likelihood), grown one point at a time.

The model is :math:`f \sim \mathcal{GP}(m, k)` on :math:`\theta \in \mathbb{R}^d` with a
constant prior mean :math:`m` and the squared-exponential ARD kernel

.. math::
    k(a, b) = s^2 \exp\Big(-\tfrac12 \sum_{j=1}^d \frac{(a_j - b_j)^2}{\ell_j^2}\Big).

Observations are exact values :math:`f(\theta_i)` (optionally with Gaussian noise of
variance :math:`\sigma_n^2`, for pseudo-marginal estimates) and, optionally, exact
gradients :math:`\nabla f(\theta_i)`. Derivatives of a GP are jointly Gaussian with it
(Solak et al., 2002); with :math:`r = a - b` and :math:`u = \Lambda^{-1} r`,
:math:`\Lambda = \operatorname{diag}(\ell^2)`, the covariances are

.. math::
    \operatorname{cov}(f(a), f(b)) = k, \quad
    \operatorname{cov}(f(a), \partial_j f(b)) = k\, u_j, \quad
    \operatorname{cov}(\partial_i f(a), f(b)) = -k\, u_i, \quad
    \operatorname{cov}(\partial_i f(a), \partial_j f(b)) = k\,(\delta_{ij}/\ell_i^2 - u_i u_j).

Observations are ordered point by point, ``[f(θ_1), ∇f(θ_1), f(θ_2), ∇f(θ_2), ...]``, so
that adding a point appends one block of ``p = 1`` (values only) or ``p = d + 1`` rows to
the covariance matrix :math:`K` and its Cholesky factor is extended by
:func:`~pymc_kameleon.core.linalg.cholesky_append` in :math:`O(n^2 p)`,
:math:`n = t p`, never refactorised from scratch (only a hyperparameter change does that).

Given :math:`K = L L^\top` (including the nugget below), :math:`h` the mean design vector
(1 on value rows, 0 on gradient rows: a constant mean has zero gradient) and
:math:`\alpha = K^{-1}(y - m h)`, the posterior predictive of the latent function is

.. math::
    \mu(\theta) = m + k_\theta^\top \alpha, \qquad
    \sigma^2(\theta) = s^2 - \|L^{-1} k_\theta\|^2 \;(\text{clipped at } 0),

an :math:`O(t p d)` mean and an :math:`O(n^2)` variance per point.

Design choices
--------------
Constant mean
    ``mean="gls"`` (default) uses the generalised-least-squares constant
    :math:`\hat m = h^\top K^{-1} y / h^\top K^{-1} h`, the maximiser of the marginal likelihood
    over :math:`m`; it is plugged in (its estimation uncertainty is not added to
    :math:`\sigma^2`). :math:`L^{-1} y` and :math:`L^{-1} h` are extended by forward
    substitution when a point is added, so :math:`\hat m` costs :math:`O(n)` to update. Far from
    the data :math:`\mu \to \hat m`, a typical observed log-likelihood, and
    :math:`\sigma^2 \to s^2`. A float fixes :math:`m`.
Nugget
    A noise-free GP still gets ``jitter`` times each row's prior variance on the diagonal
    (:math:`s^2` for values, :math:`s^2/\ell_j^2` for gradients), which is the same as jittering
    the correlation matrix. Interpolation is then exact to about ``jitter`` relative error.
Cap
    When ``max_points`` points are stored, :meth:`add` stops adding and returns ``False``;
    the surrogate stays fixed. A sliding window would need an :math:`O(n^3)` refactorisation
    per step. A delayed-acceptance chain stays exact whatever the surrogate, as long as it is
    one fixed function within each step, so either policy would be correct; stopping is the
    cheap one. Beyond the cap, states accepted later are not training points, so the surrogate
    no longer interpolates them.
Input whitening
    :meth:`set_input_whitening` makes the kernel act on whitened coordinates
    :math:`w = L^{-1}(\theta - m)` (a :class:`~pymc_kameleon.core.scale_free.Whitening` learned
    by the sampler): the length scales are then in units of the posterior's covariance, so a
    thin, correlated ridge (an unstandardised regression) looks round to the ARD kernel. The
    public interface stays in the caller's coordinates: points, predictions and gradients
    (:math:`\nabla_\theta f = L^{-\top} \nabla_w f`) go in and come out in :math:`\theta`.
Hyperparameters
    Fitted by maximising the log marginal likelihood with L-BFGS-B and analytic gradients
    (:meth:`fit_hyperparameters`); then the factor is rebuilt once. Call it during tuning only
    (fixed hyperparameters afterwards give the diminishing adaptation of the paper's
    Proposition 2.3).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import cho_solve, solve_triangular
from scipy.linalg.lapack import dpotri
from scipy.optimize import minimize

from pymc_kameleon.core.linalg import (
    SingularCovarianceError,
    cholesky_append,
    cholesky_lower,
    jittered_cholesky,
)

__all__ = ["GPSurrogate", "se_ard_covariance"]

_LOG_2PI = math.log(2.0 * math.pi)


def _se_parts(A, B, lengthscales, signal_variance):
    """Differences ``r = a - b``, scaled ``u = r / ell^2`` and kernel values, all pairs."""
    R = A[:, None, :] - B[None, :, :]
    U = R / lengthscales**2
    Kv = signal_variance * np.exp(-0.5 * np.einsum("abj,abj->ab", R, U))
    return R, U, Kv


def _assemble(Kv, U, lengthscales, grad_a, grad_b):
    """Joint covariance tensor ``C[a, i, b, j]`` (index 0 = value, 1..d = gradient)."""
    na, nb, d = U.shape
    if not grad_a and not grad_b:
        return Kv[:, None, :, None]
    pa = d + 1 if grad_a else 1
    pb = d + 1 if grad_b else 1
    C = np.empty((na, pa, nb, pb))
    C[:, 0, :, 0] = Kv
    KU = Kv[..., None] * U  # (na, nb, d)
    if grad_b:
        C[:, 0, :, 1:] = KU  # cov(f(a), d_j f(b)) = k u_j
    if grad_a:
        C[:, 1:, :, 0] = -KU.transpose(0, 2, 1)  # cov(d_i f(a), f(b)) = -k u_i
    if grad_a and grad_b:
        Ut = U.transpose(0, 2, 1)
        C[:, 1:, :, 1:] = Kv[:, None, :, None] * (
            np.diag(1.0 / lengthscales**2)[None, :, None, :] - Ut[:, :, :, None] * U[:, None, :, :]
        )
    return C


def se_ard_covariance(A, B, lengthscales, signal_variance, grad_a=False, grad_b=False):
    r"""Joint covariance of values (and gradients) of a GP with the SE ARD kernel.

    Parameters
    ----------
    A : array of shape (na, d)
    B : array of shape (nb, d)
    lengthscales : array of shape (d,)
    signal_variance : float
    grad_a, grad_b : bool
        Whether the gradient at each point of ``A`` (resp. ``B``) is included after its value.

    Returns
    -------
    array of shape (na * pa, nb * pb)
        ``pa = d + 1`` if ``grad_a`` else 1 (same for ``pb``); rows are ordered point by point,
        ``[f(a_1), ∇f(a_1), f(a_2), ...]``. Entries are the covariances listed in the module
        docstring.
    """
    A = np.atleast_2d(np.asarray(A, dtype=float))
    B = np.atleast_2d(np.asarray(B, dtype=float))
    ell = np.asarray(lengthscales, dtype=float)
    _, U, Kv = _se_parts(A, B, ell, float(signal_variance))
    C = _assemble(Kv, U, ell, grad_a, grad_b)
    return C.reshape(C.shape[0] * C.shape[1], C.shape[2] * C.shape[3])


def _inverse_from_cholesky(L):
    """:math:`K^{-1}` from its lower Cholesky factor by LAPACK ``dpotri`` (a third of a cho_solve with I)."""
    inv, info = dpotri(L, lower=1)
    if info != 0:
        return cho_solve((L, True), np.eye(L.shape[0]), check_finite=False)
    inv = np.tril(inv)
    return inv + np.tril(inv, -1).T


def _dcov_dlog_lengthscale(R, U, Kv, C, lengthscales, m, grads):
    r""":math:`\partial K / \partial \log \ell_m` for the joint (value, gradient) covariance.

    With :math:`w = r_m^2/\ell_m^2`, :math:`\partial k/\partial\log\ell_m = k w` and
    :math:`\partial u_j/\partial\log\ell_m = -2 u_j \delta_{jm}`, so every block is
    :math:`w` times itself plus corrections on the rows/columns of component ``m``.
    """
    w = R[..., m] ** 2 / lengthscales[m] ** 2  # (n, n)
    dC = C * w[:, None, :, None]
    if grads:
        KUm = Kv * U[..., m]
        dC[:, 0, :, 1 + m] -= 2.0 * KUm
        dC[:, 1 + m, :, 0] += 2.0 * KUm
        # d/dlog l_m of k (delta_ij / l_i^2 - u_i u_j): -2 k delta_im delta_jm / l_m^2
        # + 2 k u_i u_j (delta_im + delta_jm)
        KUmU = KUm[..., None] * U  # (n, n, d): k u_m u_j
        dC[:, 1 + m, :, 1:] += 2.0 * KUmU
        dC[:, 1:, :, 1 + m] += 2.0 * KUmU.transpose(0, 2, 1)
        dC[:, 1 + m, :, 1 + m] -= 2.0 * Kv / lengthscales[m] ** 2
    return dC


class GPSurrogate:
    r"""GP surrogate of a scalar function on :math:`\mathbb{R}^d`, updated by Cholesky appends.

    See the module docstring for the model, the covariances and the design choices.

    Parameters
    ----------
    dim : int
        Dimension ``d`` of :math:`\theta`.
    lengthscales : float or array of shape (d,)
        Initial ARD length scales :math:`\ell_j > 0`.
    signal_variance : float
        Initial :math:`s^2 > 0`.
    noise_variance : float
        Variance :math:`\sigma_n^2 \ge 0` of Gaussian noise on the *value* observations
        (gradients are always exact). 0 (default) is noise-free interpolation.
    fit_noise : bool
        Whether :meth:`fit_hyperparameters` also fits :math:`\log \sigma_n^2` (otherwise it stays
        fixed). If ``noise_variance`` is 0 the fit starts from ``1e-4 * signal_variance``.
    mean : "gls" or float
        Constant prior mean: ``"gls"`` for the marginal-likelihood (generalised least squares)
        estimate, or a fixed value.
    jitter : float
        Relative nugget: ``jitter`` times each observation's prior variance is added to the
        diagonal of :math:`K`.
    max_points : int
        Cap on the number of stored points; :meth:`add` returns ``False`` beyond it.
    gradients : bool
        Whether every point carries the exact gradient :math:`\nabla f(\theta_i)` as well.
    """

    def __init__(
        self,
        dim: int,
        *,
        lengthscales=1.0,
        signal_variance: float = 1.0,
        noise_variance: float = 0.0,
        fit_noise: bool = False,
        mean="gls",
        jitter: float = 1e-8,
        max_points: int = 1000,
        gradients: bool = False,
    ):
        if int(dim) != dim or dim < 1:
            raise ValueError(f"GPSurrogate: dim must be a positive integer, got {dim!r}.")
        self.dim = d = int(dim)
        ell = np.broadcast_to(np.asarray(lengthscales, dtype=float), (d,)).copy()
        if not (np.all(np.isfinite(ell)) and np.all(ell > 0)):
            raise ValueError(f"GPSurrogate: lengthscales must be positive and finite, got {lengthscales!r}.")
        if not (math.isfinite(signal_variance) and signal_variance > 0):
            raise ValueError(f"GPSurrogate: signal_variance must be positive, got {signal_variance!r}.")
        if not (math.isfinite(noise_variance) and noise_variance >= 0):
            raise ValueError(f"GPSurrogate: noise_variance must be >= 0, got {noise_variance!r}.")
        if not (isinstance(mean, str) and mean == "gls"):
            try:
                mean = float(mean)
            except (TypeError, ValueError):
                raise ValueError(f'GPSurrogate: mean must be "gls" or a number, got {mean!r}.') from None
            if not math.isfinite(mean):
                raise ValueError(f"GPSurrogate: a fixed mean must be finite, got {mean!r}.")
        if not (jitter >= 0 and math.isfinite(jitter)):
            raise ValueError(f"GPSurrogate: jitter must be >= 0, got {jitter!r}.")
        if int(max_points) != max_points or max_points < 1:
            raise ValueError(f"GPSurrogate: max_points must be a positive integer, got {max_points!r}.")
        self._ell = ell
        self._s2 = float(signal_variance)
        self._noise = float(noise_variance)
        self.fit_noise = bool(fit_noise)
        self._mean_spec = mean
        self.jitter = float(jitter)
        self.max_points = int(max_points)
        self.gradients = bool(gradients)
        self._p = d + 1 if self.gradients else 1
        self._whitening = None  # input map w = L^{-1}(theta - m); None is the identity
        self._X = np.empty((0, d))  # stored points in the kernel's (whitened) coordinates
        self._X_model = np.empty((0, d))  # the same points as given
        self._G_model = np.empty((0, d))  # their gradients as given (gradients=True only)
        self._y = np.empty(0)  # observations, point by point
        self._h = np.empty(0)  # mean design: 1 on value rows, 0 on gradient rows
        self._diag_add = np.empty(0)  # everything added to the diagonal of K (nugget, noise, extra)
        self._L = np.empty((0, 0))
        self._zy = np.empty(0)  # L^{-1} y
        self._zh = np.empty(0)  # L^{-1} h
        self._alpha = None  # K^{-1} (y - m h), computed lazily after adds

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
    def X(self) -> np.ndarray:
        """Stored points in the caller's coordinates, shape ``(t, d)`` (a copy)."""
        return self._X_model.copy()

    @property
    def G(self) -> np.ndarray:
        """Stored gradients in the caller's coordinates, shape ``(t, d)`` (``gradients=True``), a copy."""
        return self._G_model.copy()

    @property
    def W(self) -> np.ndarray:
        """Stored points in the kernel's coordinates (whitened; ``X`` without a whitening), a copy."""
        return self._X.copy()

    @property
    def whitening(self):
        """The input whitening in use (None: the identity)."""
        return self._whitening

    # ------------------------------------------------------------------ input whitening
    def _inputs(self, x):
        """Points (n, d) in the kernel's coordinates."""
        return x if self._whitening is None else self._whitening.whiten(x)

    def _gradient_in(self, grad):
        """:math:`\nabla_w f = L^\top \nabla_\theta f`."""
        return grad if self._whitening is None else self._whitening.chol.T @ grad

    def _gradient_out(self, grad_w):
        """:math:`\nabla_\theta f = L^{-\top} \nabla_w f` for rows (n, d) or a vector."""
        if self._whitening is None:
            return grad_w
        L = self._whitening.chol
        return solve_triangular(L, np.asarray(grad_w).T, lower=True, trans="T", check_finite=False).T

    def set_input_whitening(self, whitening) -> None:
        r"""Let the kernel act on :math:`w = L^{-1}(\theta - m)`, then refactorise (:math:`O(n^3)`).

        Parameters
        ----------
        whitening : Whitening or None
            An object with ``whiten(points)`` and a lower-triangular ``chol`` :math:`L`, e.g.
            :class:`~pymc_kameleon.core.scale_free.Whitening`; None for the identity. The length
            scales keep their values, now in the new coordinates.
        """
        self._whitening = whitening
        self._X = self._inputs(self._X_model) if self.n_points else np.empty((0, self.dim))
        if self.gradients and self.n_points:
            rows = self._y.reshape(self.n_points, self._p)
            rows[:, 1:] = self._G_model if whitening is None else self._G_model @ whitening.chol
        self.refit()

    def raise_values_to(self, floor: float) -> int:
        r"""Raise stored values below ``floor`` to it (their gradients to 0); :math:`O(n^2)` if any change.

        :math:`K` does not depend on the values, so only :math:`L^{-1} y` is recomputed. Used to keep
        every stored value within a fixed distance of the best one as the best improves.

        Returns
        -------
        int
            How many values were raised.
        """
        rows = self._y.reshape(self.n_points, self._p)
        low = rows[:, 0] < floor
        n_low = int(low.sum())
        if n_low:
            rows[low, 0] = floor
            if self.gradients:
                rows[low, 1:] = 0.0
                self._G_model[low] = 0.0
            self._zy = solve_triangular(self._L, self._y, lower=True, check_finite=False)
            self._alpha = None
        return n_low

    def latest(self, m: int, max_points: int | None = None) -> GPSurrogate:
        """A surrogate with the same settings, hyperparameters and whitening on the latest ``m`` points.

        ``max_points`` is its cap (default ``m``).
        """
        m = min(int(m), self.n_points)
        sub = GPSurrogate(
            self.dim, lengthscales=self._ell, signal_variance=self._s2, noise_variance=self._noise,
            fit_noise=self.fit_noise, mean=self._mean_spec, jitter=self.jitter,
            max_points=max(m, 1) if max_points is None else max_points, gradients=self.gradients,
        )
        sub._whitening = self._whitening
        n, p = self.n_points, self._p
        sub._X = self._X[n - m :].copy()
        sub._X_model = self._X_model[n - m :].copy()
        sub._G_model = self._G_model[n - m :].copy()
        sub._y = self._y[(n - m) * p :].copy()
        sub._h = self._h[(n - m) * p :].copy()
        if m:
            sub.refit()
        return sub

    @property
    def values(self) -> np.ndarray:
        """Stored function values, shape ``(t,)``."""
        return self._y[:: self._p].copy()

    @property
    def cholesky_factor(self) -> np.ndarray:
        """Lower Cholesky factor of :math:`K` (nugget included), shape ``(t p, t p)`` (a copy)."""
        return self._L.copy()

    @property
    def mean_value(self) -> float:
        r"""The constant prior mean in use: :math:`\hat m` (GLS) or the fixed value."""
        if not isinstance(self._mean_spec, str):
            return self._mean_spec
        zhh = float(self._zh @ self._zh)
        if zhh <= 0:
            return 0.0
        return float(self._zh @ self._zy) / zhh

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

    # ------------------------------------------------------------------ adding points
    def add(self, theta, value, grad=None) -> bool:
        r"""Condition on one more exact evaluation, by a Cholesky append in :math:`O(n^2 p)`.

        Parameters
        ----------
        theta : array of shape (d,)
        value : float
            :math:`f(\theta)`. ``-inf`` (zero likelihood) cannot be interpolated; such a
            point is skipped.
        grad : array of shape (d,), optional
            :math:`\nabla f(\theta)`; required if the surrogate was built with
            ``gradients=True``, ignored otherwise.

        Returns
        -------
        bool
            Whether the point was added (``False`` at the ``max_points`` cap or for ``-inf``).

        Raises
        ------
        ValueError
            For a NaN or ``+inf`` value or gradient, a wrong shape, or a missing gradient.
        SingularCovarianceError
            If the new point is numerically a copy of stored ones even after jitter.
        """
        theta = np.asarray(theta, dtype=float).reshape(-1)
        if theta.shape != (self.dim,) or not np.all(np.isfinite(theta)):
            raise ValueError(
                f"GPSurrogate.add: theta must be a finite vector of length {self.dim}, got {theta!r}."
            )
        value = float(value)
        if value == -math.inf:
            return False
        if not math.isfinite(value):
            raise ValueError(
                f"GPSurrogate.add: the value at theta={theta} is {value}; only finite values or -inf."
            )
        obs = np.array([value])
        if self.gradients:
            if grad is None:
                raise ValueError(
                    "GPSurrogate.add: this surrogate uses gradients=True, so pass grad=∇f(theta)."
                )
            grad = np.asarray(grad, dtype=float).reshape(-1)
            if grad.shape != (self.dim,) or not np.all(np.isfinite(grad)):
                raise ValueError(
                    f"GPSurrogate.add: grad at theta={theta} must be a finite vector of length {self.dim}, "
                    f"got {grad!r}."
                )
            obs = np.concatenate([obs, grad])
        if self.n_points >= self.max_points:
            return False

        theta_model, grad_model = theta, grad
        theta = self._inputs(theta[None])[0]
        if self.gradients:
            obs[1:] = self._gradient_in(grad)
        g = self.gradients
        k_new = se_ard_covariance(self._X, theta[None], self._ell, self._s2, g, g)
        k_self = se_ard_covariance(theta[None], theta[None], self._ell, self._s2, g, g)
        diag_new = self._base_diag_add(self._ell, self._s2, self._noise, 1)
        k_self[np.diag_indices_from(k_self)] += diag_new
        L, extra = cholesky_append(self._L, k_new, k_self, jitter=10.0 * max(self.jitter, 1e-12), what="GP")
        n = self._L.shape[0]
        # Extend L^{-1} y and L^{-1} h by forward substitution with the new rows only.
        L21, L22 = L[n:, :n], L[n:, n:]
        h_new = self._h_block()
        zy_new = solve_triangular(L22, obs - L21 @ self._zy, lower=True, check_finite=False)
        zh_new = solve_triangular(L22, h_new - L21 @ self._zh, lower=True, check_finite=False)
        self._L = L
        self._X = np.vstack([self._X, theta[None]])
        self._X_model = np.vstack([self._X_model, theta_model[None]])
        if self.gradients:
            self._G_model = np.vstack([self._G_model, grad_model[None]])
        self._y = np.concatenate([self._y, obs])
        self._h = np.concatenate([self._h, h_new])
        self._diag_add = np.concatenate([self._diag_add, diag_new + extra])
        self._zy = np.concatenate([self._zy, zy_new])
        self._zh = np.concatenate([self._zh, zh_new])
        self._alpha = None
        return True

    def _get_alpha(self):
        if self._alpha is None:
            if self.n_points == 0:
                self._alpha = np.empty(0)
            else:
                r = self._zy - self.mean_value * self._zh
                # alpha = L^{-T} L^{-1} (y - m h): one O(n^2) back substitution per batch of adds.
                self._alpha = solve_triangular(self._L, r, lower=True, trans="T", check_finite=False)
        return self._alpha

    # ------------------------------------------------------------------ refactorising
    def _factorise(self, ell, s2, noise):
        """Factor of K(ell, s2, noise) from scratch, with jitter escalation if needed."""
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
        self._L, self._diag_add = self._factorise(self._ell, self._s2, self._noise)
        self._zy = solve_triangular(self._L, self._y, lower=True, check_finite=False)
        self._zh = solve_triangular(self._L, self._h, lower=True, check_finite=False)
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

    # ------------------------------------------------------------------ prediction
    def _as_batch(self, theta):
        theta = np.asarray(theta, dtype=float)
        single = theta.ndim == 1
        x = np.atleast_2d(theta)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(
                f"GPSurrogate: expected points of dimension {self.dim}, got shape {theta.shape}."
            )
        return self._inputs(x), single

    def predict_mean(self, theta):
        r"""Predictive mean :math:`\mu(\theta) = m + k_\theta^\top\alpha`, :math:`O(t p d)` per point.

        ``theta`` of shape ``(d,)`` gives a float, ``(n, d)`` an array of shape ``(n,)``.
        """
        x, single = self._as_batch(theta)
        mean = np.full(x.shape[0], self.mean_value)
        if self.n_points:
            Kx = se_ard_covariance(x, self._X, self._ell, self._s2, False, self.gradients)
            mean += Kx @ self._get_alpha()
        return float(mean[0]) if single else mean

    def predict(self, theta):
        r"""Predictive mean and variance of the latent :math:`f(\theta)`.

        .. math::
            \mu = m + k_\theta^\top \alpha, \qquad
            \sigma^2 = \max\big(0,\; s^2 - \|L^{-1} k_\theta\|^2\big),

        where :math:`k_\theta` is the covariance of :math:`f(\theta)` with the observations.
        The variance excludes the observation noise.

        Parameters
        ----------
        theta : array of shape (d,) or (n, d)

        Returns
        -------
        mean, var : floats, or arrays of shape (n,)
        """
        x, single = self._as_batch(theta)
        if self.n_points == 0:
            mean = np.full(x.shape[0], self.mean_value)
            var = np.full(x.shape[0], self._s2)
        else:
            Kx = se_ard_covariance(x, self._X, self._ell, self._s2, False, self.gradients)
            mean = self.mean_value + Kx @ self._get_alpha()
            V = solve_triangular(self._L, Kx.T, lower=True, check_finite=False)
            # Rounding can push s^2 - |v|^2 slightly below zero near the data.
            var = np.maximum(self._s2 - np.einsum("ij,ij->j", V, V), 0.0)
        if single:
            return float(mean[0]), float(var[0])
        return mean, var

    def predict_gradient(self, theta):
        r"""Gradient of the predictive mean.

        .. math::
            \nabla_\theta \mu(\theta) = (\partial_\theta k_\theta)^\top \alpha

        It equals the predictive mean of :math:`\nabla f(\theta)` (differentiation commutes with
        conditioning), which is the MALA drift of the GP variant.

        Parameters
        ----------
        theta : array of shape (d,) or (n, d)

        Returns
        -------
        array of shape (d,) or (n, d)
        """
        x, single = self._as_batch(theta)
        if self.n_points == 0:
            out = np.zeros_like(x)
        else:
            C = se_ard_covariance(x, self._X, self._ell, self._s2, True, self.gradients)
            out = self._gradient_out((C @ self._get_alpha()).reshape(x.shape[0], self.dim + 1)[:, 1:])
        return out[0] if single else out

    def predict_joint(self, theta):
        r"""Joint predictive mean and covariance of :math:`(f(\theta), \nabla f(\theta))`.

        Prior covariance at one point is :math:`\operatorname{diag}(s^2, s^2/\ell_1^2, \dots)`;
        the posterior is :math:`\Sigma_0 - V^\top V`, :math:`V = L^{-1} C^\top`, with :math:`C` the
        covariance of :math:`(f, \nabla f)(\theta)` with the observations. Needed by the
        GP-MALA stage 1 (Proposition 3.1).

        Parameters
        ----------
        theta : array of shape (d,)

        Returns
        -------
        mean : array of shape (d + 1,)
            ``[μ(θ), ∇μ(θ)]``.
        cov : array of shape (d + 1, d + 1)
            Symmetrised, with the diagonal clipped at 0.
        """
        x, single = self._as_batch(theta)
        if not single:
            raise ValueError("GPSurrogate.predict_joint takes one point of shape (d,).")
        prior = se_ard_covariance(x, x, self._ell, self._s2, True, True)
        mean = np.zeros(self.dim + 1)
        mean[0] = self.mean_value
        if self.n_points == 0:
            cov = prior
        else:
            C = se_ard_covariance(x, self._X, self._ell, self._s2, True, self.gradients)
            mean += C @ self._get_alpha()
            V = solve_triangular(self._L, C.T, lower=True, check_finite=False)
            cov = prior - V.T @ V
        if self._whitening is not None:
            # (f, grad_theta f) = J (f, grad_w f) with J = diag(1, L^{-T}).
            J = np.eye(self.dim + 1)
            J[1:, 1:] = self._gradient_out(np.eye(self.dim)).T  # L^{-T}
            mean, cov = J @ mean, J @ cov @ J.T
        cov = 0.5 * (cov + cov.T)
        idx = np.diag_indices_from(cov)
        cov[idx] = np.maximum(cov[idx], 0.0)
        return mean, cov

    # ------------------------------------------------------------------ marginal likelihood
    def log_marginal_likelihood(self) -> float:
        r"""Log marginal likelihood :math:`\log \mathcal N(y;\, m h,\, K)` at the current state.

        .. math::
            -\tfrac12 \|L^{-1}(y - m h)\|^2 - \sum_i \log L_{ii} - \tfrac n2 \log 2\pi,

        with :math:`m = \hat m` for ``mean="gls"`` (the profile likelihood). :math:`O(n)` given
        the stored :math:`L^{-1}y, L^{-1}h`.
        """
        n = self._y.shape[0]
        if n == 0:
            return 0.0
        r = self._zy - self.mean_value * self._zh
        return float(-0.5 * r @ r - np.log(np.diagonal(self._L)).sum() - 0.5 * n * _LOG_2PI)

    def _pack(self):
        p = [*np.log(self._ell), math.log(self._s2)]
        if self.fit_noise:
            p.append(math.log(self._noise if self._noise > 0 else 1e-4 * self._s2))
        return np.array(p)

    def _unpack(self, params):
        d = self.dim
        ell = np.exp(params[:d])
        s2 = float(np.exp(params[d]))
        noise = float(np.exp(params[d + 1])) if self.fit_noise else self._noise
        return ell, s2, noise

    def _neg_lml_and_grad(self, params):
        r"""Negative profile log marginal likelihood and its gradient in the log hyperparameters.

        :math:`\partial \log p / \partial \eta = \tfrac12 \operatorname{tr}\big((\alpha\alpha^\top - K^{-1})
        \partial K/\partial\eta\big)`; for ``mean="gls"`` the envelope theorem lets
        :math:`\hat m` be held fixed when differentiating.
        """
        ell, s2, noise = self._unpack(params)
        g = self.gradients
        n = self._y.shape[0]
        try:
            L, _ = self._factorise(ell, s2, noise)
        except SingularCovarianceError:
            return 1e25, np.zeros_like(params)
        zy = solve_triangular(L, self._y, lower=True, check_finite=False)
        zh = solve_triangular(L, self._h, lower=True, check_finite=False)
        m = self._mean_spec if not isinstance(self._mean_spec, str) else float(zh @ zy) / float(zh @ zh)
        r = zy - m * zh
        lml = -0.5 * r @ r - np.log(np.diagonal(L)).sum() - 0.5 * n * _LOG_2PI

        alpha = solve_triangular(L, r, lower=True, trans="T", check_finite=False)
        G = np.outer(alpha, alpha) - _inverse_from_cholesky(L)
        R, U, Kv = _se_parts(self._X, self._X, ell, s2)
        C = _assemble(Kv, U, ell, g, g)
        grad = np.empty_like(params)
        for mdx in range(self.dim):
            dK = _dcov_dlog_lengthscale(R, U, Kv, C, ell, mdx, g).reshape(n, n)
            # The nugget is jitter x the prior variance of each row, so it moves with it.
            grad[mdx] = 0.5 * (np.sum(G * dK) + self.jitter * np.sum(np.diagonal(G) * np.diagonal(dK)))
        # Every block scales with s^2, so dK/dlog s^2 is K itself (nugget included, noise not).
        Cm = C.reshape(n, n)
        grad[self.dim] = 0.5 * (np.sum(G * Cm) + self.jitter * np.sum(np.diagonal(G) * np.diagonal(Cm)))
        if self.fit_noise:
            grad[self.dim + 1] = 0.5 * noise * np.sum(np.diagonal(G) * self._h)
        if not np.isfinite(lml):
            return 1e25, np.zeros_like(params)
        return -float(lml), -grad

    def default_bounds(self):
        """Box bounds (in log space) used by :meth:`fit_hyperparameters` when none are given.

        Length scales within ``[1e-2, 1e2]`` times the spread of the stored points in each
        coordinate, :math:`s^2` within ``[1e-4, 1e4]`` times the variance of the stored values,
        the noise within ``[1e-8, 1]`` times that variance.
        """
        X = self._X
        spread = np.ptp(X, axis=0) if X.shape[0] > 1 else np.ones(self.dim)
        spread = np.where(spread > 0, spread, 1.0)
        vals = self.values
        vy = float(np.var(vals)) if vals.size > 1 else 1.0
        vy = vy if vy > 0 else 1.0
        b = [(math.log(1e-2 * s), math.log(1e2 * s)) for s in spread]
        b.append((math.log(1e-4 * vy), math.log(1e4 * vy)))
        if self.fit_noise:
            b.append((math.log(1e-8 * vy), math.log(vy)))
        return b

    def fit_hyperparameters(self, *, n_restarts: int = 0, rng=None, bounds=None, maxiter: int = 200):
        r"""Maximise the log marginal likelihood over the log hyperparameters, then refactorise.

        Optimises :math:`(\log\ell_1, \dots, \log\ell_d, \log s^2[, \log\sigma_n^2])` with L-BFGS-B
        from the current values (clipped into the bounds), plus ``n_restarts`` starts drawn
        uniformly in the bounds. The best result is kept only if it beats the current value,
        so the log marginal likelihood never decreases. Costs :math:`O(n^3)` per evaluation:
        call it during tuning only.

        Parameters
        ----------
        n_restarts : int
            Extra random starts.
        rng : numpy.random.Generator, optional
            For the restarts.
        bounds : sequence of (low, high), optional
            Bounds in log space, one pair per parameter; :meth:`default_bounds` if omitted.
        maxiter : int
            L-BFGS-B iteration limit per start.

        Returns
        -------
        float
            The log marginal likelihood after fitting.
        """
        if self.n_points < 2:
            return self.log_marginal_likelihood()
        bounds = list(self.default_bounds() if bounds is None else bounds)
        x_cur = self._pack()
        if len(bounds) != x_cur.size:
            raise ValueError(f"fit_hyperparameters: expected {x_cur.size} bounds, got {len(bounds)}.")
        lo = np.array([b[0] for b in bounds])
        hi = np.array([b[1] for b in bounds])
        starts = [np.clip(x_cur, lo, hi)]
        if n_restarts:
            rng = np.random.default_rng(rng)
            for _ in range(int(n_restarts)):
                starts.append(rng.uniform(lo, hi))
        best_f, best_x = self._neg_lml_and_grad(x_cur)[0], x_cur
        for x0 in starts:
            res = minimize(
                self._neg_lml_and_grad, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                options={"maxiter": int(maxiter)},
            )
            if np.isfinite(res.fun) and res.fun < best_f:
                best_f, best_x = float(res.fun), res.x
        ell, s2, noise = self._unpack(best_x)
        self.set_hyperparameters(lengthscales=ell, signal_variance=s2, noise_variance=noise)
        return self.log_marginal_likelihood()

    def __repr__(self):
        return (
            f"GPSurrogate(dim={self.dim}, n_points={self.n_points}, lengthscales={self._ell.tolist()}, "
            f"signal_variance={self._s2:.4g}, noise_variance={self._noise:.4g}, gradients={self.gradients})"
        )
