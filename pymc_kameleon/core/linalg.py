"""Small dense linear-algebra helpers: jittered Cholesky and Gaussian log densities."""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg.blas import dtrsv
from scipy.linalg.lapack import dpotrf

__all__ = [
    "SingularCovarianceError",
    "cholesky_lower",
    "gaussian_log_norm",
    "gaussian_logpdf_chol",
    "jittered_cholesky",
    "solve_lower",
]

_LOG_2PI = math.log(2.0 * math.pi)


class SingularCovarianceError(np.linalg.LinAlgError, ValueError):
    """A covariance matrix stayed non-positive-definite even after jitter was added."""


def cholesky_lower(C):
    """Lower Cholesky factor by LAPACK ``dpotrf``, or None if ``C`` is not positive definite.

    Non-finite input gives NaNs in the factor rather than an error; callers check
    the diagonal. ``dpotrf`` skips the per-call overhead of ``np.linalg.cholesky``.
    """
    L, info = dpotrf(C, lower=1, clean=1, overwrite_a=0)
    return L if info == 0 else None


def jittered_cholesky(C, max_tries: int = 6, initial_jitter: float = 1e-10, what: str = "covariance"):
    r"""Lower Cholesky factor of a symmetric matrix, adding jitter if it is needed.

    Tries :math:`C`, then :math:`C + \epsilon_k \bar c I` with
    :math:`\epsilon_k = 10^{k}\,\epsilon_0` for ``k = 0..max_tries-1``, where
    :math:`\bar c` is the mean absolute diagonal.

    Parameters
    ----------
    C : array of shape (d, d)
    max_tries : int
        How many growing jitters to try.
    initial_jitter : float
        Relative size of the first jitter.
    what : str
        Name used in the error message.

    Returns
    -------
    L : array of shape (d, d)
        Lower triangular with ``L @ L.T`` equal to ``C`` plus the jitter used.
    jitter : float
        The absolute jitter that was added (0.0 if none).

    Raises
    ------
    SingularCovarianceError
        If ``C`` is not finite, or no jitter makes it positive definite.
    """
    C = np.asarray(C, dtype=float)
    if not np.all(np.isfinite(C)):
        raise SingularCovarianceError(f"The {what} matrix has non-finite entries; cannot factorise it.")
    try:
        return np.linalg.cholesky(C), 0.0
    except np.linalg.LinAlgError:
        pass
    scale = float(np.mean(np.abs(np.diag(C))))
    if not scale > 0:
        scale = 1.0
    eye = np.eye(C.shape[0])
    for k in range(max_tries):
        jitter = initial_jitter * 10.0**k * scale
        try:
            return np.linalg.cholesky(C + jitter * eye), jitter
        except np.linalg.LinAlgError:
            continue
    raise SingularCovarianceError(
        f"The {what} matrix is not positive definite even with jitter "
        f"{initial_jitter * 10.0 ** (max_tries - 1) * scale:.3g} on the diagonal. "
        "Increase the exploration term gamma, or check the model for degenerate variables."
    )


def solve_lower(L, b):
    """Solve ``L x = b`` for lower-triangular ``L`` and a vector ``b``.

    Calls BLAS ``dtrsv`` directly: for the small systems of a proposal density it is
    about ten times faster than ``scipy.linalg.solve_triangular``'s wrapper.
    """
    return dtrsv(L, np.asarray(b, dtype=float), lower=1)


def gaussian_log_norm(L) -> float:
    r"""Constant part :math:`-\tfrac d2 \log 2\pi - \sum_i \log L_{ii}` of a Gaussian log density."""
    return -0.5 * L.shape[0] * _LOG_2PI - float(np.log(np.diagonal(L)).sum())


def gaussian_logpdf_chol(x, mean, L):
    r"""Log density of :math:`\mathcal N(\text{mean}, L L^\top)` at ``x``.

    .. math::
        \log \mathcal N(x; m, LL^\top) = -\tfrac{d}{2}\log 2\pi - \sum_i \log L_{ii}
        - \tfrac12 \|L^{-1}(x - m)\|^2
    """
    u = solve_lower(L, np.asarray(x, dtype=float) - mean)
    return gaussian_log_norm(L) - 0.5 * float(u @ u)
