"""The banana of Haario et al. (1999), with an exact quantile reference."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from pymc_kameleon.problems.hdr import _LOG_2PI, Target, _as_rng, _check_dim, _check_int, _check_real

__all__ = ["BananaTarget", "banana"]


# --------------------------------------------------------------------- banana
class BananaTarget(Target):
    r"""The banana :math:`\mathcal B(b, v)` of Haario et al. (1999).

    .. math::
        \mathcal B(y; b, v) = \mathcal N(y_1; 0, v)\, \mathcal N(y_2; b(y_1^2 - v), 1)
        \prod_{j=3}^d \mathcal N(y_j; 0, 1).

    The map :math:`x_2 = y_2 - b(y_1^2 - v)`, :math:`x_j = y_j` otherwise, has unit
    Jacobian and sends :math:`\mathcal B(b, v)` to :math:`\mathcal N(0, \operatorname{diag}(v, 1, \dots, 1))`,
    so with

    .. math::
        T(y) = y_1^2 / v + \bigl(y_2 - b(y_1^2 - v)\bigr)^2 + \textstyle\sum_{j \geq 3} y_j^2

    the log density is :math:`-T/2 + \text{const}` and :math:`T \sim \chi^2_d` exactly.
    The HDR of probability :math:`q` is :math:`\{T \leq \chi^2_{d}{}^{-1}(q)\}`.
    Moments: :math:`\mathbb E Y = 0`, :math:`\operatorname{Var} Y_1 = v`,
    :math:`\operatorname{Var} Y_2 = 1 + 2 b^2 v^2`, all covariances zero.

    Use :func:`banana` to build one.
    """

    def __init__(self, dim: int = 8, b: float = 0.03, v: float = 100.0):
        dim = _check_dim(dim, 2)
        self.b = _check_real("b", b)
        self.v = _check_real("v", v, positive=True)
        super().__init__("banana", dim, {"b": self.b, "v": self.v})

    def _statistic(self, x, m):
        y1, y2 = x[..., 0], x[..., 1]
        return y1**2 / self.v + (y2 - self.b * (y1**2 - self.v)) ** 2 + m.sum(x[..., 2:] ** 2, axis=-1)

    def statistic_cdf(self, t):
        return stats.chi2.cdf(t, self.dim)

    def _threshold(self, q):
        return float(stats.chi2.ppf(q, self.dim))

    def sample(self, n: int, rng=None) -> np.ndarray:
        r"""Exact draws.

        :math:`y_1 = \sqrt v\, \varepsilon_1`, :math:`y_2 = \varepsilon_2 + b(y_1^2 - v)` and
        :math:`y_j = \varepsilon_j` otherwise, with :math:`\varepsilon \sim \mathcal N(0, I_d)`.

        Parameters
        ----------
        n : int
        rng : numpy.random.Generator or seed, optional
        """
        n = _check_int("n", n, 0)
        rng = _as_rng(rng)
        y = rng.standard_normal((n, self.dim))
        y[:, 0] *= math.sqrt(self.v)
        y[:, 1] += self.b * (y[:, 0] ** 2 - self.v)
        return y

    @property
    def exact_mean(self):
        return np.zeros(self.dim)

    @property
    def exact_cov(self):
        cov = np.eye(self.dim)
        cov[0, 0] = self.v
        cov[1, 1] = 1.0 + 2.0 * self.b**2 * self.v**2
        return cov

    @property
    def log_normalizer(self):
        return 0.5 * self.dim * _LOG_2PI + 0.5 * math.log(self.v)

    @property
    def initval(self):
        return np.zeros(self.dim)


def banana(dim: int = 8, b: float = 0.03, v: float = 100.0) -> BananaTarget:
    r"""The banana target :math:`\mathcal B(b, v)` (see :class:`BananaTarget`).

    Parameters
    ----------
    dim : int, default 8
        Dimension :math:`d \geq 2`.
    b : float, default 0.03
        Twist :math:`b`; the paper uses 0.03 (moderate) and 0.1 (strong). ``b = 0`` is a Gaussian.
    v : float, default 100.0
        Variance :math:`v > 0` of the first coordinate.

    Raises
    ------
    ValueError
        If ``dim``, ``b`` or ``v`` is invalid (the message names it).
    """
    return BananaTarget(dim=dim, b=b, v=v)
