r"""Posterior predictions of :class:`~pymc_kameleon.core.gp.surrogate.GPSurrogate`: mean, variance, gradient.

The predictive equations are derived in the module docstring of :mod:`pymc_kameleon.core.gp.surrogate`.
"""

from __future__ import annotations

import numpy as np

from pymc_kameleon.core.gp.covariance import se_ard_covariance
from pymc_kameleon.core.linalg import one_blas_thread

__all__ = ["GPPredictionMixin"]

# Relative margin (of s^2) of the variance bound over rounding in the computed variance, and the
# stored points (the first ones) whose variance bounds it besides each point alone.
_VARIANCE_BOUND_MARGIN = 1e-6
_VARIANCE_BOUND_POINTS = 64
# The joint covariance's bound is given the first max(64 rows, 16 points) stored (values and gradients):
# at d = 20 (21 rows a point) 64 rows decided 16% of a chain's steps, 16 points 61% (of 66% rejected).
_JOINT_BOUND_ROWS, _JOINT_BOUND_POINTS = 64, 16


class GPPredictionMixin:
    r"""The prediction methods of :class:`~pymc_kameleon.core.gp.surrogate.GPSurrogate`.

    Points come in, and gradients go out, in the caller's coordinates. Uses the host's stored
    points and factor (:class:`~pymc_kameleon.core.gp.factor.GPFactor`) and its input whitening
    (``_inputs``, ``_gradient_out``, ``_whitening``).
    """

    def _as_batch(self, theta):
        theta = np.asarray(theta, dtype=float)
        single = theta.ndim == 1
        x = np.atleast_2d(theta)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(
                f"GPSurrogate: expected points of dimension {self.dim}, got shape {theta.shape}."
            )
        return self._inputs(x), single

    @one_blas_thread
    def predict_mean(self, theta):
        r"""Predictive mean :math:`\mu(\theta) = m + k_\theta^\top\alpha`, :math:`O(t p d)` per point.

        ``theta`` of shape ``(d,)`` gives a float, ``(n, d)`` an array of shape ``(n,)``. (For
        inspection and checks: the samplers use :meth:`predict`, which gives the variance too.)
        """
        x, single = self._as_batch(theta)
        mean = self._rows_and_mean(x)[1] if self.n_points else np.full(x.shape[0], self.mean_value)
        return float(mean[0]) if single else mean

    def point_mean(self):
        r"""The predictive mean at one point as a function of the GP as it is now (a snapshot).

        :math:`\mu(\theta) = m + s^2 \sum_i \alpha_i \exp(-\tfrac12 \|(w - w_i)/\ell\|^2)`, with
        :math:`w` the whitened :math:`\theta`: the value rows of :meth:`predict_mean` in :math:`O(t d)`
        NumPy operations, without building the covariance blocks (a quarter of its time at 1000
        points). Values only (``gradients=False``); the function does not follow later changes.
        """
        if self.gradients:
            raise ValueError("GPSurrogate.point_mean: a GP with gradient observations; use predict_mean.")
        mean, ell, whitening = self.mean_value, self._ell.copy(), self._whitening
        if not self.n_points:
            return lambda theta: mean
        scaled = self._X / ell
        norms = np.einsum("ij,ij->i", scaled, scaled)
        weights = self._s2 * self._get_alpha()

        def mean_at(theta) -> float:
            w = np.asarray(theta, dtype=float) if whitening is None else whitening.whiten(theta)
            u = w / ell
            # |u - x_i|^2 = |x_i|^2 + |u|^2 - 2 x_i.u: one matrix-vector product (clipped at 0 for rounding)
            squared = np.maximum(norms + u @ u - 2.0 * (scaled @ u), 0.0)
            return mean + float(np.exp(-0.5 * squared) @ weights)

        return mean_at

    @one_blas_thread
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
            Kx, mean = self._rows_and_mean(x)
            var = self._variance_of_rows(Kx)
        if single:
            return float(mean[0]), float(var[0])
        return mean, var

    @one_blas_thread
    def predict_with_variance_bound(self, theta):
        r"""Predictive mean at one point, an upper bound of its variance, and the covariance row that
        :meth:`variance_given` turns into the variance itself.

        Observations never raise the variance, so the variance given any subset :math:`S` of them is
        an upper bound: :math:`\sigma^2 = s^2 - k^\top K^{-1} k \le s^2 - k_S^\top K_{SS}^{-1} k_S`.
        Two subsets cost little once :math:`k` is known: each observation alone
        (:math:`k_i^2 / K_{ii}`, :math:`O(t)`) and the first :math:`m` = 64 stored points, whose
        :math:`K_{SS}` factor is the leading block of :math:`L`
        (:math:`\lVert L_{SS}^{-1} k_S \rVert^2`, :math:`O(m^2)`: the first :math:`m` steps of the
        forward substitution), against :math:`O(t^2)` for the variance itself. A relative margin of
        1e-6 :math:`s^2` covers rounding. The mean, and the variance from :meth:`variance_given`,
        are those of :meth:`predict` to the last bit.

        Returns
        -------
        mean, var_bound : float
        row : array of shape (1, t) or None (no stored points; the bound is then the variance)
        """
        if self.gradients:
            raise ValueError("GPSurrogate.predict_with_variance_bound: values only; use predict.")
        x, _ = self._as_batch(theta)
        if self.n_points == 0:
            return float(self.mean_value), float(self._s2), None
        Kx, mean = self._rows_and_mean(x)
        k = Kx[0]
        m = min(self.n_points, _VARIANCE_BOUND_POINTS)
        leading = self._factor.solve(k[:m], size=m)
        explained = max(float(np.max(k * k / (self._s2 + self._diag_add))), float(leading @ leading))
        bound = max(self._s2 - explained, 0.0) + _VARIANCE_BOUND_MARGIN * self._s2
        return float(mean[0]), bound, Kx

    @one_blas_thread
    def variance_given(self, row) -> float:
        """The predictive variance at the point whose covariance row :meth:`predict_with_variance_bound`
        returned (as :meth:`predict` computes it)."""
        if row is None:
            return float(self._s2)
        return float(self._variance_of_rows(row)[0])

    def _rows_and_mean(self, x):
        """The covariance rows of the latent values at the kernel-coordinate points ``x`` with the
        observations, and the predictive means there (``n_points`` > 0)."""
        if self.gradients:
            Kx = se_ard_covariance(x, self._X, self._ell, self._s2, False, True)
        else:
            Kx = self._value_rows(x)
        return Kx, self.mean_value + Kx @ self._get_alpha()

    def _variance_of_rows(self, Kx):
        """The predictive variances at the points whose covariance rows are ``Kx``: one triangular solve."""
        V = self._factor.solve(Kx.T)
        # Rounding can push s^2 - |v|^2 slightly below zero near the data.
        return np.maximum(self._s2 - np.einsum("ij,ij->j", V, V), 0.0)

    @one_blas_thread
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

    @one_blas_thread
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
        prior, C, mean = self._joint_parts(theta)
        return self._joint_out(mean, prior if C is None else self._joint_posterior_cov(prior, C))

    @one_blas_thread
    def predict_joint_with_bound(self, theta):
        r""":meth:`predict_joint`'s mean, an upper bound of its covariance, and what :meth:`joint_cov_given`
        turns into the covariance itself.

        Observations never raise the covariance (in the Loewner order): the covariance given the first
        :math:`m` stored rows (64, or 16 points' with their gradients if more),
        :math:`\Sigma_0 - V_S^\top V_S` with :math:`V_S = L_{SS}^{-1} C_S^\top` (the leading block of
        :math:`L`, :math:`O(m^2 d)`), is at least the covariance given all :math:`t` of them
        (:math:`O(t^2 d)`). The mean, and the covariance from
        :meth:`joint_cov_given`, are those of :meth:`predict_joint` to the last bit.

        Returns
        -------
        mean : array of shape (d + 1,)
        cov_bound : array of shape (d + 1, d + 1)
        parts : tuple, or None (no stored rows: ``cov_bound`` is then the covariance)
        """
        prior, C, mean = self._joint_parts(theta)
        if C is None:
            mean, cov = self._joint_out(mean, prior)
            return mean, cov, None
        m = min(C.shape[1], max(_JOINT_BOUND_ROWS, _JOINT_BOUND_POINTS * self._p))
        V = self._factor.solve(C[:, :m].T, size=m)
        return self._joint_mean_out(mean), self._joint_cov_out(prior - V.T @ V), (prior, C)

    @one_blas_thread
    def joint_cov_given(self, parts) -> np.ndarray:
        """The joint predictive covariance at the point whose ``parts`` :meth:`predict_joint_with_bound`
        returned (as :meth:`predict_joint` computes it)."""
        prior, C = parts
        return self._joint_cov_out(self._joint_posterior_cov(prior, C))

    def _joint_parts(self, theta):
        """The prior covariance of (f, grad f) at one point, its covariance rows ``C`` with the
        observations (None if there are none) and the predictive mean, in kernel coordinates."""
        x, single = self._as_batch(theta)
        if not single:
            raise ValueError("GPSurrogate.predict_joint takes one point of shape (d,).")
        prior = se_ard_covariance(x, x, self._ell, self._s2, True, True)
        mean = np.zeros(self.dim + 1)
        mean[0] = self.mean_value
        if self.n_points == 0:
            return prior, None, mean
        C = se_ard_covariance(x, self._X, self._ell, self._s2, True, self.gradients)
        mean += C @ self._get_alpha()
        return prior, C, mean

    def _joint_jacobian(self) -> np.ndarray:
        r""":math:`J = \operatorname{diag}(1, L^{-\top})`, :math:`(f, \nabla_\theta f) = J (f, \nabla_w f)`,
        for the whitening in use: made once per whitening, not at every prediction."""
        whitening = self._whitening
        cached = self._jacobian_cache
        if cached is not None and cached[0] is whitening and cached[1] is whitening.chol:
            return cached[2]
        J = np.eye(self.dim + 1)
        J[1:, 1:] = self._gradient_out(np.eye(self.dim)).T  # L^{-T}
        self._jacobian_cache = (whitening, whitening.chol, J)
        return J

    def _joint_posterior_cov(self, prior, C):
        V = self._factor.solve(C.T)
        return prior - V.T @ V

    def _joint_out(self, mean, cov):
        """Mean and covariance in the caller's coordinates (:meth:`_joint_mean_out`,
        :meth:`_joint_cov_out`)."""
        return self._joint_mean_out(mean), self._joint_cov_out(cov)

    def _joint_mean_out(self, mean):
        return mean if self._whitening is None else self._joint_jacobian() @ mean

    def _joint_cov_out(self, cov):
        """The covariance in the caller's coordinates, symmetrised, its diagonal clipped at 0."""
        if self._whitening is not None:
            J = self._joint_jacobian()
            cov = J @ cov @ J.T
        cov = 0.5 * (cov + cov.T)
        idx = np.diag_indices_from(cov)
        cov[idx] = np.maximum(cov[idx], 0.0)
        return cov
