r"""Positive-definite kernels with their gradients in the first argument.

Every kernel exposes two batched functions:

``value(X, Z)``
    :math:`k(x, z_j)` for each row ``x`` of ``X``. A single point ``x`` of shape
    ``(d,)`` gives shape ``(n,)``; a batch of shape ``(m, d)`` gives ``(m, n)``.
``grad(X, Z)``
    :math:`\nabla_x k(x, z_j)`, shape ``(n, d)`` for one point and
    ``(m, n, d)`` for a batch.

Kameleon only needs these two functions, so a user-supplied kernel is any object
with ``value`` and ``grad`` methods of that form (subclassing :class:`Kernel`
is the easy way to get the shapes right).
"""

from __future__ import annotations

import difflib
import math
from abc import ABC, abstractmethod

import numpy as np
from scipy.spatial.distance import pdist

__all__ = [
    "GaussianKernel",
    "Kernel",
    "LinearKernel",
    "Matern32Kernel",
    "Matern52Kernel",
    "KERNEL_NAMES",
    "make_kernel",
    "median_heuristic_bandwidth",
]


def _diff(X, Z):
    """Return ``z_j - x`` with shape ``(n, d)`` or ``(m, n, d)``."""
    X = np.asarray(X, dtype=float)
    Z = np.asarray(Z, dtype=float)
    if X.ndim == 1:
        return Z - X
    return Z[None, :, :] - X[:, None, :]


def _sq_norm(diff):
    return np.einsum("...j,...j->...", diff, diff)


class Kernel(ABC):
    """Base class of kernels ``k(x, z)`` usable in Kameleon proposals.

    Subclasses implement :meth:`value` and :meth:`grad`. Kernels with a length
    scale set ``has_bandwidth = True`` and implement :meth:`with_bandwidth`, which
    lets the sampler refresh the bandwidth by the median heuristic.
    """

    has_bandwidth: bool = False
    bandwidth: float | None = None

    @abstractmethod
    def value(self, X, Z):
        """Kernel values ``k(x, z_j)``."""

    @abstractmethod
    def grad(self, X, Z):
        r"""Gradients :math:`\nabla_x k(x, z_j)`."""

    def with_bandwidth(self, bandwidth: float) -> Kernel:
        """Return a copy with another bandwidth (kernels without one return ``self``)."""
        return self

    def __repr__(self):
        if self.has_bandwidth:
            return f"{type(self).__name__}(bandwidth={self.bandwidth!r})"
        return f"{type(self).__name__}()"


class _RadialKernel(Kernel):
    r"""Kernels whose gradient is :math:`\nabla_x k(x, z) = w(\|x - z\|^2)\,(z - x)`.

    Subclasses implement :meth:`value_from_sq` and :meth:`radial_weights`; the
    Kameleon proposal uses the weights directly to build :math:`M H M^\top` from
    BLAS products, without forming the :math:`n \times d` gradient matrix.
    """

    has_bandwidth = True

    def __init__(self, bandwidth: float = 1.0):
        bandwidth = float(bandwidth)
        if not (np.isfinite(bandwidth) and bandwidth > 0):
            raise ValueError(f"bandwidth must be a positive finite number, got {bandwidth!r}.")
        self.bandwidth = bandwidth

    @abstractmethod
    def value_from_sq(self, sq):
        r"""Kernel value as a function of the squared distance."""

    @abstractmethod
    def radial_weights(self, sq):
        r"""The weight :math:`w` with :math:`\nabla_x k(x, z) = w\,(z - x)`, from the squared distance."""

    def value(self, X, Z):
        return self.value_from_sq(_sq_norm(_diff(X, Z)))

    def grad(self, X, Z):
        diff = _diff(X, Z)
        return diff * self.radial_weights(_sq_norm(diff))[..., None]

    def with_bandwidth(self, bandwidth: float) -> Kernel:
        return type(self)(bandwidth)

    def __eq__(self, other):
        return type(self) is type(other) and self.bandwidth == other.bandwidth

    def __hash__(self):
        return hash((type(self).__name__, self.bandwidth))


class GaussianKernel(_RadialKernel):
    r"""Gaussian RBF kernel :math:`k(x, z) = \exp(-\|x - z\|^2 / (2\sigma^2))`.

    Its gradient is :math:`\nabla_x k(x, z) = k(x, z)\,(z - x) / \sigma^2`.

    Parameters
    ----------
    bandwidth : float
        The length scale :math:`\sigma > 0`.
    """

    def value_from_sq(self, sq):
        return np.exp(sq * (-0.5 / self.bandwidth**2))

    def radial_weights(self, sq):
        return self.value_from_sq(sq) / self.bandwidth**2


class Matern32Kernel(_RadialKernel):
    r"""Matérn kernel with smoothness 3/2.

    .. math::
        k(x, z) = (1 + \sqrt{3} r/\rho)\, e^{-\sqrt{3} r/\rho}, \quad r = \|x - z\|,

        \nabla_x k(x, z) = \frac{3}{\rho^2} e^{-\sqrt{3} r/\rho}\, (z - x).

    Parameters
    ----------
    bandwidth : float
        The length scale :math:`\rho > 0`.
    """

    def value_from_sq(self, sq):
        s = math.sqrt(3.0) * np.sqrt(sq) / self.bandwidth
        return (1.0 + s) * np.exp(-s)

    def radial_weights(self, sq):
        s = math.sqrt(3.0) * np.sqrt(sq) / self.bandwidth
        return 3.0 / self.bandwidth**2 * np.exp(-s)


class Matern52Kernel(_RadialKernel):
    r"""Matérn kernel with smoothness 5/2.

    .. math::
        k(x, z) = \left(1 + \sqrt{5} r/\rho + \tfrac{5 r^2}{3\rho^2}\right) e^{-\sqrt{5} r/\rho},

        \nabla_x k(x, z) = \frac{5}{3\rho^2}\left(1 + \sqrt{5} r/\rho\right)
        e^{-\sqrt{5} r/\rho}\, (z - x).

    Parameters
    ----------
    bandwidth : float
        The length scale :math:`\rho > 0`.
    """

    def value_from_sq(self, sq):
        s = math.sqrt(5.0) * np.sqrt(sq) / self.bandwidth
        return (1.0 + s + sq * (5.0 / (3.0 * self.bandwidth**2))) * np.exp(-s)

    def radial_weights(self, sq):
        s = math.sqrt(5.0) * np.sqrt(sq) / self.bandwidth
        return 5.0 / (3.0 * self.bandwidth**2) * (1.0 + s) * np.exp(-s)


class LinearKernel(Kernel):
    r"""Linear kernel :math:`k(x, z) = x^\top z`, with :math:`\nabla_x k(x, z) = z`.

    With this kernel the Kameleon proposal is Adaptive Metropolis (Haario et al.
    2001): its covariance :math:`\gamma^2 I + 4\nu^2 Z^\top H Z` is the scaled
    empirical covariance of the subsample and does not depend on the current state.
    """

    constant_gradient = True

    def value(self, X, Z):
        return np.asarray(X, dtype=float) @ np.asarray(Z, dtype=float).T

    def grad(self, X, Z):
        X = np.asarray(X, dtype=float)
        Z = np.asarray(Z, dtype=float)
        if X.ndim == 1:
            return Z.copy()
        return np.broadcast_to(Z, (X.shape[0],) + Z.shape).copy()

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self).__name__)


KERNEL_NAMES = {
    "gaussian": GaussianKernel,
    "rbf": GaussianKernel,
    "matern32": Matern32Kernel,
    "matern52": Matern52Kernel,
    "linear": LinearKernel,
}


def make_kernel(kernel="gaussian", bandwidth: float = 1.0, *, option: str = "kernel"):
    """Build a kernel from a name, or validate a user-supplied kernel object.

    Parameters
    ----------
    kernel : str or kernel object
        One of ``"gaussian"`` (alias ``"rbf"``), ``"matern32"``, ``"matern52"``,
        ``"linear"``, or an object with ``value(X, Z)`` and ``grad(X, Z)`` methods.
    bandwidth : float
        Starting bandwidth for named kernels that have one.
    option : str, default "kernel"
        The name of the caller's option that ``kernel`` was passed as (``proposal_kernel`` for KASS),
        used in error messages.

    Raises
    ------
    ValueError
        If the name is unknown or the object lacks ``value``/``grad``.
    """
    if isinstance(kernel, str):
        key = kernel.lower().replace("-", "").replace("_", "").replace(" ", "")
        key = {"matern3/2": "matern32", "matern5/2": "matern52"}.get(key, key)
        if key not in KERNEL_NAMES:
            close = difflib.get_close_matches(key, KERNEL_NAMES, n=1)
            hint = f" (did you mean {option}={close[0]!r}?)" if close else ""
            raise ValueError(
                f"{option}={kernel!r} is not a known kernel{hint}; use one of "
                f"{sorted(KERNEL_NAMES)} or pass an object with value(X, Z) and grad(X, Z)."
            )
        cls = KERNEL_NAMES[key]
        return cls(bandwidth) if cls.has_bandwidth else cls()
    if not (callable(getattr(kernel, "value", None)) and callable(getattr(kernel, "grad", None))):
        raise ValueError(
            f"{option}={kernel!r} must be a kernel name or an object with value(X, Z) and "
            "grad(X, Z) methods (see pymc_kameleon.core.kameleon.kernels.Kernel)."
        )
    return kernel


def median_heuristic_bandwidth(Z, max_points: int = 1000, rng=None) -> float:
    r"""Median-heuristic bandwidth of a point set.

    Returns :math:`\sigma = \sqrt{\operatorname{median}_{i<j,\,z_i \neq z_j} \|z_i - z_j\|^2 / 2}`,
    so that the Gaussian kernel equals :math:`e^{-1}` at the median squared distance,
    as in the reference Kameleon code. Repeated points (rejections) are left out.

    Parameters
    ----------
    Z : array of shape (n, d)
    max_points : int
        A random subset of at most this many points is used, which keeps the cost
        at :math:`O(\text{max\_points}^2 d)`.
    rng : numpy.random.Generator, optional
        Used only when ``Z`` has more than ``max_points`` rows.

    Raises
    ------
    ValueError
        If fewer than two distinct points are given.
    """
    Z = np.asarray(Z, dtype=float)
    if Z.ndim != 2:
        raise ValueError(f"Z must have shape (n, d), got {Z.shape}.")
    if Z.shape[0] > max_points:
        rng = np.random.default_rng(rng)
        Z = Z[rng.choice(Z.shape[0], size=max_points, replace=False)]
    sq = pdist(Z, "sqeuclidean")
    sq = sq[sq > 0]
    if sq.size == 0:
        raise ValueError("The median heuristic needs at least two distinct points.")
    return float(np.sqrt(0.5 * np.median(sq)))
