r"""A lower Cholesky factor that grows by appended rows without being copied.

A GP surrogate extends the factor :math:`K = L L^\top` of its training covariance by a few rows
per new point (:func:`~pymc_kameleon.core.linalg.cholesky_append`). Stored as an ``(n, n)``
array, every append allocates and fills a new ``(n + b, n + b)`` array: at ``n = 1000`` that is
an 8 MB copy, about 0.8 ms, ten times the triangular solve the append actually needs.

:class:`GrowingCholesky` keeps :math:`L` in the top-left corner of a larger C-ordered buffer
(capacity doubled when full) and solves with it in place: BLAS takes a leading dimension, so the
corner is used as it lies. The calls go to SciPy's BLAS (``scipy.linalg.cython_blas``, the
library ``scipy.linalg.solve_triangular`` uses), ``dtrsv`` for one right-hand side and ``dtrsm``
for several, as LAPACK's ``dtrtrs`` behind ``solve_triangular`` does, so the results are the same
to the last bit (tested). That also needs the same memory order: ``solve_triangular`` solves with
a C-ordered ``L`` as ``U^T x = b`` (the buffer read by Fortran BLAS is :math:`U = L^\top`) and with a
Fortran-ordered one (as LAPACK's Cholesky returns it) directly, so the buffer keeps the order of
the factor it was given, and becomes C-ordered at the first append, as a bordered copy would.
Where the BLAS symbols cannot be found, each solve copies the corner and calls
``solve_triangular``.
"""

from __future__ import annotations

import ctypes

import numpy as np
from scipy.linalg import solve_triangular

__all__ = ["GrowingCholesky"]

_MIN_CAPACITY = 64


def _load_blas():
    """ctypes handles to ``dtrsv`` and ``dtrsm`` of ``scipy.linalg.cython_blas``, or None."""
    try:
        from scipy.linalg import cython_blas

        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype = ctypes.c_char_p
        get_name.argtypes = [ctypes.py_object]
        get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
        get_pointer.restype = ctypes.c_void_p
        get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

        def address(name):
            capsule = cython_blas.__pyx_capi__[name]
            return get_pointer(capsule, get_name(capsule))

        # Arrays go in as addresses (c_void_p): converting an int costs less than an array's .ctypes.
        char, dptr, iptr = ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)
        # dtrsv(uplo, trans, diag, n, a, lda, x, incx)
        trsv = ctypes.CFUNCTYPE(None, char, char, char, iptr, dptr, iptr, dptr, iptr)(address("dtrsv"))
        # dtrsm(side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb)
        trsm = ctypes.CFUNCTYPE(
            None, char, char, char, char, iptr, iptr, ctypes.POINTER(ctypes.c_double), dptr, iptr, dptr, iptr
        )(address("dtrsm"))
        return trsv, trsm
    except Exception:  # pragma: no cover - SciPy without the Cython BLAS capsules
        return None


_BLAS = _load_blas()
_ONE_INT, _ONE = ctypes.c_int(1), ctypes.c_double(1.0)


class GrowingCholesky:
    r"""Lower Cholesky factor :math:`L` (``n x n``) in the corner of a buffer, extended in :math:`O(n b)`.

    Parameters
    ----------
    L : array of shape (n, n), optional
        The initial factor (copied); empty by default.
    max_rows : int, optional
        Capacity is never grown beyond this (it still grows if an append needs it).
    """

    def __init__(self, L=None, max_rows: int | None = None):
        self.max_rows = None if max_rows is None else int(max_rows)
        self.set(np.empty((0, 0)) if L is None else L)

    def __getstate__(self):
        state = self.__dict__.copy()
        del state["_address"], state["_lda"]  # an address means nothing in another process
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._use_buffer(self._buf)

    @property
    def n(self) -> int:
        return self._n

    @property
    def L(self) -> np.ndarray:
        """The factor, a read-only view of the buffer's corner."""
        view = self._buf[: self._n, : self._n]
        view.flags.writeable = False
        return view

    def _capacity_for(self, rows: int) -> int:
        """Room for twice ``rows`` (so appends copy the factor O(log n) times), within ``max_rows``."""
        capacity = max(_MIN_CAPACITY, 2 * rows)
        if self.max_rows is not None:
            capacity = min(capacity, self.max_rows)
        return max(capacity, rows)

    def set(self, L) -> None:
        """Replace the factor by ``L`` (copied into a fresh buffer of the same memory order)."""
        L = np.asarray(L, dtype=float)
        n = L.shape[0]
        order = "F" if L.flags.f_contiguous and not L.flags.c_contiguous else "C"
        self._use_buffer(np.zeros((self._capacity_for(n),) * 2, order=order))
        self._buf[:n, :n] = L
        self._n = n

    def _use_buffer(self, buf) -> None:
        """Store ``L`` in ``buf`` from now on; its address and leading dimension are kept for BLAS (a
        solve of a small block costs the call's arguments more than its arithmetic)."""
        self._buf = buf
        self._address = buf.ctypes.data
        self._lda = ctypes.c_int(buf.shape[0])

    def append(self, lower_left, lower_right) -> None:
        r"""Add ``b`` rows: :math:`L \leftarrow \begin{pmatrix} L & 0 \\ B^\top & L_{22}\end{pmatrix}`.

        Parameters
        ----------
        lower_left : array of shape (b, n)
            :math:`B^\top`.
        lower_right : array of shape (b, b)
            :math:`L_{22}`, lower triangular.
        """
        n = self._n
        b = np.shape(lower_right)[0]
        if n + b > self._buf.shape[0] or not self._buf.flags.c_contiguous:
            buf = np.zeros((self._capacity_for(n + b),) * 2)
            buf[:n, :n] = self._buf[:n, :n]
            self._use_buffer(buf)
        self._buf[n : n + b, :n] = lower_left
        self._buf[n : n + b, n : n + b] = np.tril(lower_right)
        self._n = n + b

    def rows(self, start: int) -> np.ndarray:
        """Rows ``start:`` of :math:`L` (a read-only view, shape ``(n - start, n)``)."""
        view = self._buf[start : self._n, : self._n]
        view.flags.writeable = False
        return view

    def solve(self, rhs, trans: bool = False, size: int | None = None) -> np.ndarray:
        r""":math:`L^{-1} b` (or :math:`L^{-\top} b` with ``trans``) for ``b`` of shape (n,) or (n, k).

        Bit-for-bit equal to ``scipy.linalg.solve_triangular(L, b, lower=True, trans=...)``. With
        ``size``, the same with the leading ``size`` x ``size`` block of :math:`L` (then ``b`` has
        ``size`` rows): the first ``size`` entries of :math:`L^{-1} b'` for every ``b'`` that starts
        with ``b`` (forward substitution).
        """
        n = self._n if size is None else int(size)
        rhs = np.asarray(rhs, dtype=float)
        if not 0 <= n <= self._n or rhs.shape[0] != n:
            raise ValueError(
                f"GrowingCholesky.solve: the right-hand side has {rhs.shape[0]} rows; L has {self._n} "
                f"(block size {n})."
            )
        if _BLAS is None or n == 0:
            return solve_triangular(
                np.ascontiguousarray(self._buf[:n, :n]), rhs, lower=True, trans="T" if trans else "N",
                check_finite=False,
            )
        trsv, trsm = _BLAS
        x = np.array(rhs, dtype=float, order="F", copy=True)
        if self._buf.flags.c_contiguous:  # read column-major, the buffer is U = L^T
            uplo, transa = b"U", (b"N" if trans else b"T")
        else:
            uplo, transa = b"L", (b"T" if trans else b"N")
        m = ctypes.c_int(n)
        k = 1 if x.ndim == 1 else x.shape[1]
        if k == 1:
            trsv(uplo, transa, b"N", m, self._address, self._lda, x.ctypes.data, _ONE_INT)
        elif k > 1:
            trsm(b"L", uplo, transa, b"N", m, ctypes.c_int(k), _ONE, self._address, self._lda,
                 x.ctypes.data, m)
        return x
