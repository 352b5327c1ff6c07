r"""A Gaussian fitted to the log densities tuning has evaluated: the independence component's second
candidate (decision record 0039).

The independence component draws from :math:`t_\nu(m, C)` (:mod:`.independence`). With the learned
:math:`m, C` of a random walk's windows it fails where the walk mixes too slowly to learn
:math:`C`: measured against NUTS, the posterior covariance in the learned whitening has eigenvalues
0.23–1.56 on a 17-d regression with strongly correlated slopes and 0.19–185 on a 50-d Gaussian. Yet
every tuning step evaluates the target at a proposal, and a posterior close to a Gaussian has a log
density close to a quadratic. A least-squares fit of

.. math::
    \log \pi(x) \approx c + g^\top z - \tfrac12 z^\top H z, \qquad z = L^{-1}(x - m)

(in the learned whitening, where the terms are well scaled) to the last evaluations recovers
:math:`H` from points that need not be distributed as the posterior: there the fitted shape's
eigenvalues are 0.72–1.33 and 0.84–1.16 (``benchmarks/results/independence_shapes.md``, seed 2025).
The candidate is :math:`z \sim t_\nu(H^{-1} g, H^{-1})`, an
:class:`~pymc_kameleon.core.proposals.IndependenceProposal` in whitened coordinates; a direction
without a clear curvature keeps the whitening's.

Whether the component uses it, or the learned shape, or neither, is measured by
:mod:`.independence`: both shapes are probed, and the one whose draws jump further with a light
enough importance-weight tail wins the window.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import linalg

from pymc_kameleon.core.proposals import IndependenceProposal

__all__ = [
    "FIT_MAX_DIM",
    "EvaluatedPoints",
    "bulk_log_density_range",
    "fit_gaussian",
    "quadratic_terms",
]

#: Largest dimension fitted: the least-squares problem has (d + 1)(d + 2) / 2 unknowns and 1.2-4 times
#: as many rows, about 0.13 s at d = 50 on one core, once per window.
FIT_MAX_DIM = 50
# Rows per unknown: at least _MIN_ROWS to fit, at most _MAX_ROWS kept (and at least _MIN_CAPACITY).
# 1.2 rather than 1.5 (decision record 0044): at d = 50 the 1592 rows are there by the window that
# ends at tuning step 2000, so every chain is judged with the fit before a 3000-step tuning ends; a
# noisier fit costs nothing unmeasured, since a shape is used only where its probes won.
_MIN_ROWS, _MAX_ROWS, _MIN_CAPACITY = 1.2, 4, 1000
# Whitened curvature below which a direction keeps the learned whitening's (variance 1e4 or more, or
# negative: the fit says nothing there).
_MIN_CURVATURE = 1e-4


def bulk_log_density_range(dim: int) -> float:
    r"""How far below a posterior draw's log density the posterior's bulk reaches, in ``dim`` dimensions:
    :math:`d/2 + 4\sqrt{d/2} + 5` nats (a Gaussian's log density is its maximum minus
    :math:`\chi^2_d / 2`, mean :math:`d/2`, sd :math:`\sqrt{d/2}`). The fit keeps the points within it
    of the highest; MLDA judges a coarse model's failure by it."""
    return 0.5 * dim + 4.0 * math.sqrt(0.5 * dim) + 5.0


def quadratic_terms(dim: int) -> int:
    """Unknowns of a quadratic in ``dim`` variables: :math:`(d + 1)(d + 2) / 2`."""
    return (dim + 1) * (dim + 2) // 2


class EvaluatedPoints:
    """The last points at which tuning evaluated the target (model coordinates), with their log
    densities: :math:`\\max(1000, 4p)` of them, :math:`p` = :func:`quadratic_terms`; none kept above
    :data:`FIT_MAX_DIM`."""

    def __init__(self, dim: int):
        self.dim = int(dim)
        self.capacity = 0 if dim > FIT_MAX_DIM else max(_MIN_CAPACITY, _MAX_ROWS * quadratic_terms(dim))
        self._points = np.empty((self.capacity, self.dim))
        self._values = np.empty(self.capacity)
        self._next = 0
        self._size = 0

    def add(self, x, log_density: float) -> None:
        """Keep ``x`` and its log density if finite (a proposal outside the support says nothing of
        the curvature)."""
        if self.capacity == 0 or not math.isfinite(log_density):
            return
        self._points[self._next] = x
        self._values[self._next] = log_density
        self._next = (self._next + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def __len__(self) -> int:
        return self._size

    @property
    def enough(self) -> bool:
        """Whether a quadratic can be fitted: at least 1.2 times as many points as unknowns."""
        return self.capacity > 0 and self._size >= _MIN_ROWS * quadratic_terms(self.dim)

    @property
    def points(self) -> np.ndarray:
        return self._points[: self._size]

    @property
    def values(self) -> np.ndarray:
        return self._values[: self._size]


def _design(z: np.ndarray) -> np.ndarray:
    """Columns 1, z_i, and z_i z_j for i <= j (row-major upper triangle, as ``np.triu_indices``)."""
    n, d = z.shape
    design = np.empty((n, quadratic_terms(d)))
    design[:, 0] = 1.0
    design[:, 1 : 1 + d] = z
    column = 1 + d
    # One block per row of the triangle: an eighth of the outer product's time (0.04 s at d = 50).
    for i in range(d):
        design[:, column : column + d - i] = z[:, i : i + 1] * z[:, i:]
        column += d - i
    return design


def fit_gaussian(z, log_density, df: float) -> IndependenceProposal | None:
    r"""The Gaussian whose log density is the least-squares quadratic through ``(z, log_density)``, as
    the Student-t shape :math:`t_\nu(b, A A^\top)` the independence component draws from.

    Fits :math:`c + g^\top z + \sum_{i \le j} q_{ij} z_i z_j` to the points within a Gaussian bulk's
    range of the highest value and returns the shape with mean :math:`b = H^{-1} g` and lower
    Cholesky factor :math:`A`, :math:`A A^\top = H^{-1}`, where :math:`H_{ii} = -2 q_{ii}`,
    :math:`H_{ij} = -q_{ij}`. Where an eigenvalue of :math:`H` is
    below 1e-4 (no clear curvature) that direction keeps the whitening's, curvature 1 about
    :math:`z = 0`. None if the fit is rank deficient or no direction has a clear curvature.

    Parameters
    ----------
    z : array of shape (n, d)
        Evaluated points, whitened.
    log_density : array of shape (n,)
        The target's log density there (finite).
    df : float
        The shape's degrees of freedom :math:`\nu`.
    """
    z = np.asarray(z, dtype=float)
    values = np.asarray(log_density, dtype=float)
    d = z.shape[1]
    # Only the points within a Gaussian bulk's range of the highest: a far proposal's value says more
    # about the tails' shape than about the curvature where the mass is.
    near = values >= values.max() - bulk_log_density_range(d)
    if np.count_nonzero(near) < _MIN_ROWS * quadratic_terms(d):
        return None
    z, values = z[near], values[near]
    design = _design(z)
    # The normal equations: a third of lstsq's (SVD's) time at d = 50, and well conditioned enough in
    # whitened coordinates; a Cholesky that fails means a rank-deficient fit.
    try:
        factor = linalg.cho_factor(design.T @ design, check_finite=False)
    except linalg.LinAlgError:
        return None
    coef = linalg.cho_solve(factor, design.T @ values, check_finite=False)
    g = coef[1 : 1 + d]
    q = np.zeros((d, d))
    q[np.triu_indices(d)] = coef[1 + d :]
    hessian = -(q + q.T)  # the diagonal's q_ii z_i^2 gives -2 q_ii; a pair's q_ij gives -q_ij twice
    if not (np.all(np.isfinite(hessian)) and np.all(np.isfinite(g))):
        return None
    curvature, vectors = np.linalg.eigh(hessian)
    # A direction without a clear curvature (a walk that barely crossed it, a curved ridge) keeps the
    # learned whitening's: variance 1 about the learned mean.
    kept = curvature > _MIN_CURVATURE
    if not kept.any():
        return None
    curvature = np.where(kept, curvature, 1.0)
    mean = vectors @ np.where(kept, (vectors.T @ g) / curvature, 0.0)
    # A = V diag(curvature^-1/2) is a square root of H^-1; its lower Cholesky factor is the same shape.
    cov = (vectors / curvature) @ vectors.T
    try:
        chol = np.linalg.cholesky(0.5 * (cov + cov.T))
    except np.linalg.LinAlgError:
        return None
    return IndependenceProposal(mean, chol, df)
