"""Small dense linear-algebra helpers: jittered Cholesky, Gaussian log densities, one BLAS thread."""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.linalg import solve_triangular
from scipy.linalg.blas import dtrsv
from scipy.linalg.lapack import dpotrf, dtrtrs

__all__ = [
    "SingularCovarianceError",
    "one_blas_thread",
    "bordered_blocks",
    "cholesky_append",
    "cholesky_lower",
    "gaussian_log_norm",
    "gaussian_logpdf_chol",
    "jittered_cholesky",
    "same_array",
    "schur_factor",
    "solve_lower",
]

_LOG_2PI = math.log(2.0 * math.pi)
_BLAS_LIBRARIES = None  # threadpoolctl's BLAS controllers, found at first use


def one_blas_thread(method):
    """Decorator: run ``method`` with BLAS limited to one thread.

    The GP's :math:`O(n^3)` work on matrices of a few hundred rows is many times slower with a
    threaded BLAS on a small or busy machine: a hyperparameter fit on 300 points took 65 s with
    OpenBLAS's two threads and 0.3 s with one on this project's 2-core machine, under load. PyMC
    limits BLAS threads only in parallel chains' workers, not with ``cores=1`` (nor, on Linux, at
    all in the session), nor in its population sampler's workers.

    Each BLAS library's thread count is read and, only where it is not 1, set to 1 for the call and
    restored after it: about 1 µs where the count is already 1 (``OPENBLAS_NUM_THREADS=1``), against
    20 µs for threadpoolctl's ``limit`` context, which queries every library's whole state (two
    OpenBLAS copies, NumPy's and SciPy's) on entry; GP-DA makes one or two such calls per step.
    """

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        changed = [(lib, n) for lib in _blas_libraries() if (n := lib.get_num_threads()) != 1]
        for lib, _ in changed:
            lib.set_num_threads(1)
        try:
            return method(*args, **kwargs)
        finally:
            for lib, n in changed:
                lib.set_num_threads(n)

    return wrapper


def _blas_libraries() -> list:
    """threadpoolctl's controllers of the loaded BLAS libraries (found once per process)."""
    global _BLAS_LIBRARIES
    if _BLAS_LIBRARIES is None:
        from threadpoolctl import ThreadpoolController

        _BLAS_LIBRARIES = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
    return _BLAS_LIBRARIES


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


def solve_lower_as_scipy(L, b) -> np.ndarray:
    """``scipy.linalg.solve_triangular(L, b, lower=True)`` for float64 ``L`` and vector ``b``, bit for bit.

    The same LAPACK call (``dtrtrs``, on ``L`` or on ``L.T`` as upper-triangular transposed, as SciPy
    chooses by memory layout) without the wrapper's per-call checks, 7 µs of a Kameleon step's
    whitening at d = 10. :func:`solve_lower` (``dtrsv``) is faster still but rounds differently, which
    would change the draws of a fixed seed.
    """
    b = np.asarray(b, dtype=float)
    if L.flags.f_contiguous:
        x, info = dtrtrs(L, b, lower=1, trans=0)
    else:
        x, info = dtrtrs(L.T, b, lower=0, trans=1)
    if info > 0:
        raise np.linalg.LinAlgError(f"singular matrix: resolution failed at diagonal {info - 1}")
    return x


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
    with np.errstate(over="ignore"):  # a point that far out has density 0: -inf is the answer
        return gaussian_log_norm(L) - 0.5 * float(u @ u)


def cholesky_append(L, k_new, k_self, jitter: float = 1e-10, max_tries: int = 6, what: str = "covariance"):
    r"""Append a block of rows and columns to a lower Cholesky factor, in :math:`O(n^2 b)`.

    If :math:`K = L L^\top` is :math:`n \times n`, the bordered matrix and its factor are

    .. math::
        \begin{pmatrix} K & k \\ k^\top & c \end{pmatrix}
        = \begin{pmatrix} L & 0 \\ B^\top & L_{22} \end{pmatrix}
          \begin{pmatrix} L^\top & B \\ 0 & L_{22}^\top \end{pmatrix},
        \qquad B = L^{-1} k, \qquad L_{22} L_{22}^\top = c - B^\top B,

    so only one triangular solve with ``b`` right-hand sides and a ``b x b`` Cholesky
    factorisation of the Schur complement are needed. A single new row is ``b = 1``.

    Parameters
    ----------
    L : array of shape (n, n)
        Lower Cholesky factor of the current matrix (``n = 0`` is allowed).
    k_new : array of shape (n, b) or (n,)
        Covariances between the existing and the new variables.
    k_self : array of shape (b, b), or a scalar when ``b = 1``
        Covariance of the new variables.
    jitter : float
        If the Schur complement is not positive definite, ``jitter * 10**k * cbar`` is
        added to the diagonal of the *new block only* (``k = 0..max_tries-1``, ``cbar``
        the mean absolute diagonal of ``k_self``); the returned factor then belongs to
        the bordered matrix with that amount added to the new diagonal entries.
    max_tries : int
        How many growing jitters to try.
    what : str
        Name used in the error message.

    Returns
    -------
    L_new : array of shape (n + b, n + b)
        Lower Cholesky factor of the bordered matrix (plus any jitter used).
    added : float
        The absolute jitter added to each new diagonal entry (0.0 if none).

    Raises
    ------
    SingularCovarianceError
        If the inputs are not finite, or the new pivots stay non-positive even after jitter
        (the new variables are, numerically, linear combinations of the old ones).
    """
    L = np.asarray(L, dtype=float)
    n = L.shape[0] if L.ndim == 2 else 0
    k_new, k_self = bordered_blocks(n, k_new, k_self, what)
    # B = L^{-1} k: the only O(n^2 b) operation.
    B = solve_triangular(L, k_new, lower=True, check_finite=False) if n else k_new
    L22, added = schur_factor(B, k_self, jitter, max_tries, what)
    b = k_self.shape[0]
    out = np.zeros((n + b, n + b))
    out[:n, :n] = L
    out[n:, :n] = B.T
    out[n:, n:] = L22
    return out, added


def bordered_blocks(n, k_new, k_self, what: str = "covariance"):
    """The inputs of :func:`cholesky_append` checked: ``k_new`` as (n, b), ``k_self`` as (b, b), finite."""
    k_self = np.atleast_2d(np.asarray(k_self, dtype=float))
    b = k_self.shape[0]
    k_new = np.asarray(k_new, dtype=float)
    if k_new.ndim == 1 and b == 1:
        k_new = k_new[:, None]
    if k_self.shape != (b, b) or k_new.shape != (n, b):
        raise ValueError(
            f"cholesky_append: k_new has shape {k_new.shape} and k_self {k_self.shape}; "
            f"expected ({n}, b) and (b, b)."
        )
    if not (np.all(np.isfinite(k_new)) and np.all(np.isfinite(k_self))):
        raise SingularCovarianceError(f"The new {what} entries are not finite; cannot extend the factor.")
    return k_new, k_self


def schur_factor(B, k_self, jitter: float = 1e-10, max_tries: int = 6, what: str = "covariance"):
    r"""Factor :math:`L_{22}` of the Schur complement :math:`c - B^\top B` of a bordered matrix.

    The second half of :func:`cholesky_append` (see there for the jitter rule and the error),
    for a caller that solved :math:`B = L^{-1} k` itself. Returns ``(L22, added)``.
    """
    S = k_self - B.T @ B if B.shape[0] else k_self.copy()
    S = 0.5 * (S + S.T)
    L22 = cholesky_lower(S)
    added = 0.0
    if L22 is None:
        b = k_self.shape[0]
        scale = float(np.mean(np.abs(np.diag(k_self))))
        if not scale > 0:
            scale = 1.0
        eye = np.eye(b)
        for k in range(max_tries):
            added = jitter * 10.0**k * scale
            L22 = cholesky_lower(S + added * eye)
            if L22 is not None:
                break
        else:
            raise SingularCovarianceError(
                f"Cannot append {b} row(s) to the {what} Cholesky factor: the new pivot "
                f"(Schur complement, smallest diagonal {float(np.min(np.diag(S))):.3g}) is not "
                f"positive even with jitter {added:.3g} on the diagonal. The new point(s) "
                "duplicate existing ones numerically; add a nugget or noise variance, or skip them."
            )
    return L22, added


def same_array(a, b) -> bool:
    """Whether ``b`` holds the same bytes as ``a`` (same shape and dtype); False if ``a`` is None.

    The test of the hot path's caches (a rejected proposal leaves the state, and its whitened form, its
    log density and its independence term, unchanged) and of whether a chain moved. Bytes are what such
    results depend on: equal bytes give equal results, NaN included, and a -0.0 is another state (no
    continuous proposal draws one). Equal values in other dtypes are compared elementwise. An elementwise
    test on every miss (an accepted move, about 4 steps in 10) had cost 10% of KAMH's draw iteration at
    d = 10.
    """
    if a is None or a.shape != b.shape:
        return False
    if a.dtype == b.dtype:
        return a.tobytes() == b.tobytes()
    return bool((a == b).all())
