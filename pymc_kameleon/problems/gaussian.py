"""A correlated Gaussian, with an exact quantile reference."""

from __future__ import annotations

import numpy as np
from scipy import stats

from pymc_kameleon.problems.hdr import _LOG_2PI, Target, _as_rng, _check_dim, _check_int, _check_real

__all__ = ["GaussianTarget", "correlated_gaussian"]


# --------------------------------------------------------------------- Gaussian
class GaussianTarget(Target):
    r"""A zero-mean Gaussian :math:`\mathcal N(0, \Sigma)`.

    The statistic is the Mahalanobis form :math:`T(x) = x^\top \Sigma^{-1} x \sim \chi^2_d`.

    Use :func:`correlated_gaussian` to build one.

    Parameters
    ----------
    cov : array of shape (d, d)
        Symmetric positive-definite covariance.
    """

    def __init__(self, cov, *, name="gaussian", params=None):
        cov = np.asarray(cov, dtype=float)
        if cov.ndim != 2 or cov.shape[0] != cov.shape[1] or cov.shape[0] < 1:
            raise ValueError(f"cov must be a square (d, d) matrix, got shape {cov.shape}.")
        if not np.all(np.isfinite(cov)) or not np.allclose(cov, cov.T):
            raise ValueError("cov must be a finite symmetric matrix.")
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            raise ValueError("cov must be positive definite.") from None
        self._cov = cov.copy()
        self._chol = chol
        inv_chol = np.linalg.inv(chol)
        self._precision = inv_chol.T @ inv_chol
        self._logdet = 2.0 * float(np.sum(np.log(np.diag(chol))))
        super().__init__(name, cov.shape[0], params if params is not None else {"cov": self._cov})

    def _statistic(self, x, m):
        return ((x @ self._precision) * x).sum(axis=-1)

    def statistic_cdf(self, t):
        return stats.chi2.cdf(t, self.dim)

    def _threshold(self, q):
        return float(stats.chi2.ppf(q, self.dim))

    def sample(self, n: int, rng=None) -> np.ndarray:
        """Exact draws :math:`L\\varepsilon`, :math:`LL^\\top = \\Sigma`."""
        n = _check_int("n", n, 0)
        return _as_rng(rng).standard_normal((n, self.dim)) @ self._chol.T

    @property
    def exact_mean(self):
        return np.zeros(self.dim)

    @property
    def exact_cov(self):
        return self._cov.copy()

    @property
    def log_normalizer(self):
        return 0.5 * self.dim * _LOG_2PI + 0.5 * self._logdet

    @property
    def initval(self):
        return np.zeros(self.dim)


def correlated_gaussian(dim: int = 2, rho: float = 0.9, scales=None) -> GaussianTarget:
    r"""An equicorrelated Gaussian :math:`\mathcal N(0, D R D)`.

    Here :math:`R = (1-\rho) I + \rho \mathbf 1\mathbf 1^\top` and
    :math:`D = \operatorname{diag}(\text{scales})`.

    Every pair of coordinates has correlation :math:`\rho`. The eigenvalues of
    :math:`R` are :math:`1 + (d-1)\rho` (once) and :math:`1 - \rho`, so
    :math:`\rho` close to 1 gives a thin, ill-conditioned target.

    Parameters
    ----------
    dim : int, default 2
        Dimension :math:`d \geq 1`.
    rho : float, default 0.9
        Correlation, :math:`-1/(d-1) < \rho < 1` (for :math:`d = 1`, :math:`|\rho| < 1`; it has no effect).
    scales : array of shape (dim,), optional
        Marginal standard deviations (all positive); default all ones.

    Raises
    ------
    ValueError
        If ``dim``, ``rho`` or ``scales`` is invalid (the message names it).
    """
    dim = _check_dim(dim, 1)
    rho = _check_real("rho", rho)
    lower = -1.0 / (dim - 1) if dim > 1 else -1.0
    if not lower < rho < 1.0:
        raise ValueError(
            f"rho must lie in ({lower:g}, 1) for dim={dim} to give a positive-definite matrix, got {rho!r}."
        )
    if scales is None:
        scales_arr = np.ones(dim)
    else:
        scales_arr = np.asarray(scales, dtype=float)
        if scales_arr.shape != (dim,) or not np.all(np.isfinite(scales_arr)) or not np.all(scales_arr > 0):
            raise ValueError(f"scales must be {dim} positive finite numbers, got {scales!r}.")
    corr = np.full((dim, dim), rho)
    np.fill_diagonal(corr, 1.0)
    cov = corr * np.outer(scales_arr, scales_arr)
    return GaussianTarget(
        cov, name="correlated_gaussian", params={"rho": rho, "scales": tuple(float(s) for s in scales_arr)}
    )
