r"""Squared-exponential ARD covariance of a GP's values and gradients (NumPy only).

The kernel, the covariances between values and gradients and the point-by-point ordering of the
observations are given in the module docstring of :mod:`pymc_kameleon.core.gp.surrogate`, whose
:class:`~pymc_kameleon.core.gp.surrogate.GPSurrogate` is built on these functions. Besides the public
:func:`se_ard_covariance`, the pieces are kept separate so that the marginal-likelihood gradient
(:mod:`pymc_kameleon.core.gp.fit`) can reuse the differences and kernel values of one evaluation.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_solve
from scipy.linalg.lapack import dpotri

__all__ = ["se_ard_covariance", "se_values_by_coordinate", "sum_terms_as_einsum"]


def _se_parts(A, B, lengthscales, signal_variance):
    """Differences ``r = a - b``, scaled ``u = r / ell^2`` and kernel values, all pairs."""
    R = A[:, None, :] - B[None, :, :]
    return (R, *_se_from_differences(R, lengthscales, signal_variance))


def _se_from_differences(R, lengthscales, signal_variance):
    """``u = r / ell^2`` and the kernel values from the differences ``R`` (a fit keeps ``R``)."""
    U = R / lengthscales**2
    Kv = signal_variance * np.exp(-0.5 * np.einsum("abj,abj->ab", R, U))
    return U, Kv


def sum_terms_as_einsum(P):
    """``P.sum(axis=0)`` for ``P`` of shape (d, ...), added in the order in which NumPy's ``einsum``
    adds a contiguous contraction axis of length d (as :func:`_se_from_differences` does), to the bit.

    ``einsum`` keeps two running sums in one SIMD register, of the even and of the odd terms: it takes
    the terms in blocks of eight, each block's last pair first, then the rest pair by pair, and adds
    the two sums at the end (NumPy 2.4 and 2.5, x86-64; a test compares this with ``einsum`` for d up
    to 60). In the layout (d, ...) every addition runs over a contiguous row.
    """
    d = P.shape[0]
    even, odd, j = np.zeros(P.shape[1:]), np.zeros(P.shape[1:]), 0
    while d - j >= 8:
        for pair in (6, 4, 2, 0):
            even += P[j + pair]
            odd += P[j + pair + 1]
        j += 8
    for k in range(j, d, 2):
        even += P[k]
        if k + 1 < d:
            odd += P[k + 1]
    even += odd
    return even


def se_values_by_coordinate(R, lengthscales, signal_variance):
    """The kernel values from the differences stored by coordinate, ``R`` of shape (d, ...): those of
    :func:`_se_from_differences` (from the differences as (..., d)) to the bit.

    Each division, product and sum then runs over contiguous rows, not over rows of length d, and the
    terms are added in ``einsum``'s order (:func:`sum_terms_as_einsum`). A GP's prediction rows use it
    (at 1000 points and d = 5 a row took 35 µs against 77); a values-only fit has its own products
    (decision 0070).
    """
    P = R / (lengthscales**2).reshape((-1,) + (1,) * (R.ndim - 1))
    P *= R
    Kv = sum_terms_as_einsum(P)
    Kv *= -0.5
    np.exp(Kv, out=Kv)
    Kv *= signal_variance
    return Kv


def _assemble(Kv, U, lengthscales, grad_a, grad_b):
    """Joint covariance tensor ``C[a, i, b, j]`` (index 0 = value, 1..d = gradient); ``U`` is used
    only with gradients."""
    if not grad_a and not grad_b:
        return Kv[:, None, :, None]
    na, nb, d = U.shape
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
        docstring of :mod:`pymc_kameleon.core.gp.surrogate`.
    """
    A = np.atleast_2d(np.asarray(A, dtype=float))
    B = np.atleast_2d(np.asarray(B, dtype=float))
    ell = np.asarray(lengthscales, dtype=float)
    _, U, Kv = _se_parts(A, B, ell, float(signal_variance))
    C = _assemble(Kv, U, ell, grad_a, grad_b)
    return C.reshape(C.shape[0] * C.shape[1], C.shape[2] * C.shape[3])


def _inverse_from_cholesky(L):
    """:math:`K^{-1}` from its lower Cholesky factor by LAPACK ``dpotri`` (a third of a cho_solve with I).

    ``L`` must be zero above the diagonal (as every factor here is: ``dpotrf`` with ``clean=1``,
    ``np.linalg.cholesky``): ``dpotri`` writes the lower triangle and leaves the upper one as it was.
    """
    inv, info = dpotri(L, lower=1)
    if info != 0:
        return cho_solve((L, True), np.eye(L.shape[0]), check_finite=False)
    inv += np.tril(inv, -1).T  # mirror the lower triangle into the (zero) upper one
    return inv


def _dcov_dlog_lengthscale(R, U, Kv, C, lengthscales, m, grads, squared_difference=None):
    r""":math:`\partial K / \partial \log \ell_m` for the joint (value, gradient) covariance.

    With :math:`w = r_m^2/\ell_m^2`, :math:`\partial k/\partial\log\ell_m = k w` and
    :math:`\partial u_j/\partial\log\ell_m = -2 u_j \delta_{jm}`, so every block is
    :math:`w` times itself plus corrections on the rows/columns of component ``m``.
    ``squared_difference``: ``R[..., m] ** 2`` if the caller keeps it.
    """
    r2 = R[..., m] ** 2 if squared_difference is None else squared_difference
    w = r2 / lengthscales[m] ** 2  # (n, n)
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
