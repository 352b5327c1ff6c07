r"""Sample-quality measures used by the benchmarks and notebooks (NumPy only).

ESS, R-hat and MCSE come from ArviZ; this module only adds what ArviZ does not have: the
maximum mean discrepancy between two samples, which the KAMH and KASS papers use to compare
sampler output with a benchmark sample.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mmd_squared", "polynomial_kernel"]


def polynomial_kernel(X, Y, degree: int = 3, offset: float = 1.0):
    r"""Gram matrix of :math:`k(x, y) = (c + \langle x, y \rangle)^p` for rows of ``X`` and ``Y``."""
    return (offset + np.asarray(X, dtype=float) @ np.asarray(Y, dtype=float).T) ** degree


def mmd_squared(X, Y, degree: int = 3, offset: float = 1.0) -> float:
    r"""Unbiased estimate of the squared maximum mean discrepancy with a polynomial kernel.

    .. math::
        \widehat{\mathrm{MMD}}^2 = \frac{1}{m(m-1)} \sum_{i \ne j} k(x_i, x_j)
        + \frac{1}{n(n-1)} \sum_{i \ne j} k(y_i, y_j) - \frac{2}{mn} \sum_{i, j} k(x_i, y_j)

    (Gretton et al. 2012). With :math:`k(x, y) = (1 + \langle x, y \rangle)^3`, as in the KAMH
    paper's Figure 4, it compares all mixed moments up to order 3, so it is zero in expectation
    when the two samples agree in those moments, and can be slightly negative.

    Parameters
    ----------
    X : array (m, d)
        Sampler output (thin correlated chains first: the estimator assumes nothing about
        independence, but its variance grows with autocorrelation).
    Y : array (n, d)
        Benchmark sample.
    degree, offset : polynomial kernel :math:`(c + \langle x, y\rangle)^p`.
    """
    X = np.atleast_2d(np.asarray(X, dtype=float))
    Y = np.atleast_2d(np.asarray(Y, dtype=float))
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must have the same dimension, got {X.shape[1]} and {Y.shape[1]}.")
    m, n = X.shape[0], Y.shape[0]
    if m < 2 or n < 2:
        raise ValueError("mmd_squared needs at least two points in each sample.")
    kxx = polynomial_kernel(X, X, degree, offset)
    kyy = polynomial_kernel(Y, Y, degree, offset)
    kxy = polynomial_kernel(X, Y, degree, offset)
    term_x = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    term_y = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(term_x + term_y - 2.0 * kxy.mean())
