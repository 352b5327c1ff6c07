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
the covariance matrix :math:`K` and its Cholesky factor is extended as
:func:`~pymc_kameleon.core.linalg.cholesky_append` does, in :math:`O(n^2 p)`, :math:`n = t p`, in
place (:class:`~pymc_kameleon.core.gp.triangular.GrowingCholesky`), never refactorised from scratch
(only a hyperparameter change does that).

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
    :math:`w = L^{-1}(\theta - m)` (a :class:`~pymc_kameleon.core.adaptation.whitening.Whitening` learned
    by the sampler): the length scales are then in units of the posterior's covariance, so a
    thin, correlated ridge (an unstandardised regression) looks round to the ARD kernel. The
    public interface stays in the caller's coordinates: points, predictions and gradients
    (:math:`\nabla_\theta f = L^{-\top} \nabla_w f`) go in and come out in :math:`\theta`.
Hyperparameters
    Fitted by maximising the log marginal likelihood with L-BFGS-B and analytic gradients
    (:meth:`fit_hyperparameters`); then the factor is rebuilt once. Call it during tuning only
    (fixed hyperparameters afterwards give the diminishing adaptation of the paper's
    Proposition 2.3).

Code layout
-----------
The covariance functions are in :mod:`pymc_kameleon.core.gp.covariance` (re-exported here),
the stored observations and their factor in :class:`~pymc_kameleon.core.gp.factor.GPFactor`,
the predictions in :class:`~pymc_kameleon.core.gp.predict.GPPredictionMixin` and the
marginal-likelihood fit in :mod:`pymc_kameleon.core.gp.fit`; :class:`GPSurrogate` combines them
and is the only entry point.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import solve_triangular

from pymc_kameleon.core.gp import fit as gp_fit
from pymc_kameleon.core.gp.covariance import se_ard_covariance
from pymc_kameleon.core.gp.factor import GPFactor
from pymc_kameleon.core.gp.predict import GPPredictionMixin
from pymc_kameleon.core.linalg import one_blas_thread

__all__ = ["GPSurrogate", "se_ard_covariance"]


class GPSurrogate(GPPredictionMixin, GPFactor):
    r"""GP surrogate of a scalar function on :math:`\mathbb{R}^d`, updated by Cholesky appends.

    See the module docstring for the model, the covariances and the design choices. The stored
    observations and their factor come from :class:`~pymc_kameleon.core.gp.factor.GPFactor`, the
    ``predict*`` methods from :class:`~pymc_kameleon.core.gp.predict.GPPredictionMixin`.

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
        d = int(dim)
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
        super().__init__(d, ell, signal_variance, noise_variance, mean, jitter, gradients)
        self.fit_noise = bool(fit_noise)
        self.max_points = int(max_points)
        self._factor.max_rows = self.max_points * self._p  # the factor's buffer never grows beyond
        self._whitening = None  # input map w = L^{-1}(theta - m); None is the identity
        self._jacobian_cache = None  # (whitening, its chol, J) of predict_joint's J
        self._X_model = np.empty((0, d))  # the stored points as given
        self._G_model = np.empty((0, d))  # their gradients as given (gradients=True only)

    # ------------------------------------------------------------------ properties
    @property
    def X(self) -> np.ndarray:
        """Stored points in the caller's coordinates, shape ``(t, d)`` (a copy)."""
        return self._X_model.copy()

    @property
    def G(self) -> np.ndarray:
        """Stored gradients in the caller's coordinates, shape ``(t, d)`` (``gradients=True``), a copy."""
        return self._G_model.copy()

    @property
    def whitening(self):
        """The input whitening in use (None: the identity)."""
        return self._whitening

    # ------------------------------------------------------------------ input whitening
    def _inputs(self, x):
        """Points (n, d) in the kernel's coordinates."""
        return x if self._whitening is None else self._whitening.whiten(x)

    def _gradient_in(self, grad):
        r""":math:`\nabla_w f = L^\top \nabla_\theta f`."""
        return grad if self._whitening is None else self._whitening.chol.T @ grad

    def _gradient_out(self, grad_w):
        r""":math:`\nabla_\theta f = L^{-\top} \nabla_w f` for rows (n, d) or a vector."""
        if self._whitening is None:
            return grad_w
        L = self._whitening.chol
        return solve_triangular(L, np.asarray(grad_w).T, lower=True, trans="T", check_finite=False).T

    @one_blas_thread
    def set_input_whitening(self, whitening) -> None:
        r"""Let the kernel act on :math:`w = L^{-1}(\theta - m)`, then refactorise (:math:`O(n^3)`).

        Parameters
        ----------
        whitening : Whitening or None
            An object with ``whiten(points)`` and a lower-triangular ``chol`` :math:`L`, e.g.
            :class:`~pymc_kameleon.core.adaptation.whitening.Whitening`; None for the identity. The length
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
            self._zy = self._factor.solve(self._y)
            self._alpha = None
        return n_low

    @one_blas_thread
    def replace_values(self, values) -> None:
        r"""New observed values at the stored points (values-only GP): :math:`O(n^2)`, since :math:`K`
        does not depend on them; only :math:`L^{-1} y` is recomputed. The hyperparameters are kept."""
        if self.gradients:
            raise ValueError("GPSurrogate.replace_values: a GP with gradient observations.")
        values = np.asarray(values, dtype=float)
        if values.shape != (self.n_points,) or not np.all(np.isfinite(values)):
            raise ValueError(f"GPSurrogate.replace_values: expected {self.n_points} finite values.")
        self._y[:] = values
        self._zy = self._factor.solve(self._y)
        self._alpha = None

    @one_blas_thread
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

    # ------------------------------------------------------------------ adding points
    @one_blas_thread
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

        if self.gradients:
            obs[1:] = self._gradient_in(grad)
        self._append(self._inputs(theta[None])[0], obs)
        self._X_model = np.vstack([self._X_model, theta[None]])
        if self.gradients:
            self._G_model = np.vstack([self._G_model, grad[None]])
        return True

    # ------------------------------------------------------------------ hyperparameters (gp_fit)
    def log_marginal_likelihood(self) -> float:
        r"""Log marginal likelihood :math:`\log \mathcal N(y;\, m h,\, K)` at the current state, :math:`O(n)`.

        See :func:`pymc_kameleon.core.gp.fit.log_marginal_likelihood`.
        """
        return gp_fit.log_marginal_likelihood(self)

    @one_blas_thread
    def loo_log_predictive_density(self) -> float:
        r"""Leave-one-out log predictive density of the stored values, :math:`O(n^3)`.

        See :func:`pymc_kameleon.core.gp.fit.loo_log_predictive_density`.
        """
        return gp_fit.loo_log_predictive_density(self)

    def default_bounds(self):
        """Box bounds (in log space) used by :meth:`fit_hyperparameters` when none are given.

        See :func:`pymc_kameleon.core.gp.fit.default_bounds`.
        """
        return gp_fit.default_bounds(self)

    @one_blas_thread
    def fit_hyperparameters(
        self, *, n_restarts: int = 0, rng=None, bounds=None, maxiter: int = 200, data_start: bool = True
    ):
        r"""Maximise the log marginal likelihood over the log hyperparameters, then refactorise.

        L-BFGS-B from the current values, from the data's scales (``data_start``) and ``n_restarts``
        random starts (``rng``) within ``bounds`` (log space; :meth:`default_bounds` if omitted),
        ``maxiter`` iterations and evaluations each; the log marginal likelihood never decreases and is
        returned.
        :math:`O(n^3)` per evaluation: tuning only. See :func:`pymc_kameleon.core.gp.fit.fit_hyperparameters`.
        """
        return gp_fit.fit_hyperparameters(
            self, n_restarts=n_restarts, rng=rng, bounds=bounds, maxiter=maxiter, data_start=data_start
        )

    def __repr__(self):
        return (
            f"GPSurrogate(dim={self.dim}, n_points={self.n_points}, lengthscales={self._ell.tolist()}, "
            f"signal_variance={self._s2:.4g}, noise_variance={self._noise:.4g}, gradients={self.gradients})"
        )
