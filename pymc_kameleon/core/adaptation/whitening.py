r"""Whitened coordinates :math:`w = L^{-1}(x - m)` for a learned mean :math:`m` and covariance
:math:`C = L L^\top`, and the pieces of the scale-free adaptation that work in them.

:class:`Whitening` maps between model and whitened coordinates; :class:`WhitenedFamily` is a
Kameleon family built on whitened points, used in model coordinates (with the Jacobian
:math:`|L|^{-1}`); :func:`shrunk_covariance` estimates :math:`(m, C)` from a window's draws;
:func:`whitened_drift` tells a chain still walking in from one that has settled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular

from pymc_kameleon.core.linalg import jittered_cholesky, solve_lower_as_scipy

__all__ = [
    "WhitenedCoordinates",
    "Whitening",
]


@dataclass(frozen=True)
class Whitening:
    r"""The affine map :math:`w = L^{-1}(x - m)` to coordinates in which the learned covariance is :math:`I`.

    Attributes
    ----------
    mean : array of shape (d,)
        :math:`m`.
    chol : array of shape (d, d)
        Lower Cholesky factor :math:`L` of the covariance :math:`C = L L^\top`.
    log_det : float
        :math:`\log|L|`; a density in :math:`w` is one in :math:`x` minus this.
    """

    mean: np.ndarray
    chol: np.ndarray
    log_det: float

    @classmethod
    def identity(cls, dim: int) -> Whitening:
        return cls(np.zeros(dim), np.eye(dim), 0.0)

    @classmethod
    def from_moments(cls, mean, cov, what: str = "learned posterior covariance") -> Whitening:
        """From a mean and covariance (jitter if needed; :class:`SingularCovarianceError` if even that
        fails)."""
        chol, _ = jittered_cholesky(np.asarray(cov, dtype=float), what=what)
        return cls(np.asarray(mean, dtype=float), chol, float(np.log(np.diagonal(chol)).sum()))

    def whiten(self, x) -> np.ndarray:
        """:math:`w = L^{-1}(x - m)` for a point (d,) or rows (n, d)."""
        x = np.asarray(x, dtype=float)
        if x.ndim == 1:
            return solve_lower_as_scipy(self.chol, x - self.mean)  # the hot path: once per step
        if x.shape[0] == 1:  # one row (a GP's prediction at a proposal): the same LAPACK call, bit for bit
            return solve_lower_as_scipy(self.chol, x[0] - self.mean)[None]
        return solve_triangular(self.chol, (x - self.mean).T, lower=True, check_finite=False).T

    def to_model(self, w) -> np.ndarray:
        """:math:`x = m + L w` for a point (d,) or rows (n, d)."""
        w = np.asarray(w, dtype=float)
        return self.mean + (w @ self.chol.T if w.ndim == 2 else self.chol @ w)


class WhitenedCoordinates:
    """Mixin: the learned mean, covariance and coordinate maps of an object with a ``whitening``."""

    @property
    def mean(self) -> np.ndarray:
        """The learned mean :math:`m`."""
        return self.whitening.mean

    @property
    def chol(self) -> np.ndarray:
        """Lower Cholesky factor :math:`L` of the learned covariance."""
        return self.whitening.chol

    @property
    def covariance(self) -> np.ndarray:
        """The learned covariance :math:`C = L L^\\top`."""
        return self.chol @ self.chol.T

    def whiten(self, x) -> np.ndarray:
        """:math:`w = L^{-1}(x - m)` for a point (d,) or rows (n, d)."""
        return self.whitening.whiten(x)

    def to_model(self, w) -> np.ndarray:
        """:math:`x = m + L w` for a point (d,) or rows (n, d)."""
        return self.whitening.to_model(w)
