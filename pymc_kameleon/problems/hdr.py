r"""The base class of the exact-reference benchmark targets: the HDR statistic and the quantile measure.

See :mod:`pymc_kameleon.problems.targets` for the measure and the list of targets; the families
live in :mod:`~pymc_kameleon.problems.banana`, :mod:`~pymc_kameleon.problems.flower` and
:mod:`~pymc_kameleon.problems.gaussian`.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from functools import lru_cache
from numbers import Integral, Real

import numpy as np
from scipy import optimize, special, stats

from pymc_kameleon.problems.base import Problem

__all__ = ["DEFAULT_QUANTILES", "Target", "quantile_error"]

#: The paper's probabilities :math:`q = 0.1, 0.2, \dots, 0.9`.
DEFAULT_QUANTILES = np.round(np.arange(0.1, 1.0, 0.1), 10)

_LOG_2PI = math.log(2.0 * math.pi)


# --------------------------------------------------------------------- validation
def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def _check_dim(dim, minimum: int) -> int:
    return _check_int("dim", dim, minimum)


def _check_real(name: str, value, *, positive=False, nonnegative=False) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, got {value!r}.")
    if positive and not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}.")
    if nonnegative and not value >= 0:
        raise ValueError(f"{name} must be non-negative, got {value!r}.")
    return float(value)


def _check_qs(qs) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(qs, dtype=float))
    if arr.ndim != 1 or arr.size == 0 or not np.all((arr > 0) & (arr < 1)):
        raise ValueError(f"qs must be a non-empty 1-D sequence of probabilities in (0, 1), got {qs!r}.")
    return arr


@lru_cache(maxsize=4)
def _gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [-1, 1] (cached)."""
    nodes, weights = special.roots_legendre(n)
    nodes.flags.writeable = False
    weights.flags.writeable = False
    return nodes, weights


def _as_rng(rng) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


# --------------------------------------------------------------------- base class
class Target(Problem):
    r"""A benchmark target with an exact quantile reference.

    Subclasses define the statistic :math:`T(x)` once, for both NumPy and
    PyTensor (:meth:`_statistic` receives the array module), the CDF of
    :math:`T` under the target, exact draws, the exact mean and the log
    normalising constant. Everything else (log density, PyMC model, quantile
    measures) is shared.

    Attributes
    ----------
    name : str
        Short name, e.g. ``"banana"``.
    dim : int
        Dimension :math:`d`.
    params : dict
        The parameters the target was built with (a copy is returned).
    """

    def __init__(self, name: str, dim: int, params: dict):
        self._name = str(name)
        self._dim = int(dim)
        self._params = dict(params)
        self._threshold_cache: dict[float, float] = {}

    # -- read-only identity ------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def params(self) -> dict:
        return dict(self._params)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._params.items())
        return f"{type(self).__name__}(dim={self._dim}, {args})"

    # -- subclass interface -------------------------------------------------
    @abstractmethod
    def _statistic(self, x, m):
        """:math:`T(x)` over the last axis of ``x``, written with array module ``m``.

        ``m`` is :mod:`numpy` or :mod:`pytensor.tensor`, so one definition serves
        :meth:`logp` and :meth:`model`.
        """

    @abstractmethod
    def statistic_cdf(self, t):
        r""":math:`P_\pi(T \leq t)`, vectorised over ``t``."""

    @abstractmethod
    def sample(self, n: int, rng=None) -> np.ndarray:
        """``n`` exact i.i.d. draws, shape ``(n, dim)``."""

    @property
    @abstractmethod
    def exact_mean(self) -> np.ndarray:
        r""":math:`\mathbb E_\pi[X]`, shape ``(dim,)``."""

    @property
    @abstractmethod
    def log_normalizer(self) -> float:
        r""":math:`\log \int e^{-T(x)/2}\,dx`.

        ``logp(x) - log_normalizer`` is the normalised log density.
        """

    @property
    @abstractmethod
    def initval(self) -> np.ndarray:
        """The model's initial value, a point with finite density and finite gradient."""

    # -- shared functionality ----------------------------------------------
    def _as_points(self, x, what="x") -> np.ndarray:
        arr = np.asarray(x, dtype=float)
        if arr.ndim == 0 or arr.shape[-1] != self._dim:
            raise ValueError(
                f"{what} must have shape (..., {self._dim}) for this {self._dim}-dimensional "
                f"{self._name} target, got shape {arr.shape}."
            )
        return arr

    def statistic(self, x) -> np.ndarray:
        r"""The HDR statistic :math:`T(x) = -2 \log \pi(x) + \text{const}`.

        Parameters
        ----------
        x : array of shape (..., dim)

        Returns
        -------
        float or array of shape (...)
        """
        arr = self._as_points(x)
        out = self._statistic(arr, np)
        return float(out) if np.ndim(out) == 0 else out

    def logp(self, x, normalized: bool = False):
        r"""Log density :math:`-T(x)/2`, batched over leading axes.

        Parameters
        ----------
        x : array of shape (dim,) or (m, dim)
        normalized : bool, default False
            Subtract :attr:`log_normalizer`, giving the exact log density.

        Returns
        -------
        float for a single point, array of shape (m,) for a batch.
        """
        val = -0.5 * self._statistic(self._as_points(x), np)
        if normalized:
            val = val - self.log_normalizer
        return float(val) if np.ndim(val) == 0 else val

    def logp_tensor(self, x):
        """The unnormalised log density :math:`-T(x)/2` as a PyTensor expression of a vector ``x``."""
        import pytensor.tensor as pt

        return -0.5 * self._statistic(pt.as_tensor_variable(x), pt)

    def model(self, initval=None):
        r"""A fresh PyMC model whose only free variable ``x`` (shape ``(dim,)``) has this target's density.

        The model is ``x ~ Flat`` plus ``pm.Potential("target_logp", -T(x)/2)``, so its
        log density equals :meth:`logp` exactly (no constant) and is differentiable
        (NUTS works).

        Parameters
        ----------
        initval : array of shape (dim,), optional
            Initial value of ``x``; defaults to :attr:`initval`.

        Returns
        -------
        pymc.Model
        """
        import pymc as pm

        init = self.initval if initval is None else self._as_points(initval, "initval")
        if init.shape != (self._dim,):
            raise ValueError(f"initval must have shape ({self._dim},), got {init.shape}.")
        if not np.isfinite(self.logp(init)):
            raise ValueError(f"initval={init!r} has a non-finite log density under the {self._name} target.")
        with pm.Model(model=None) as model:
            x = pm.Flat("x", shape=self._dim, initval=np.array(init, dtype=float))
            pm.Potential("target_logp", self.logp_tensor(x))
        return model

    def pymc_model(self):
        """:meth:`model` with the default initial value (the :class:`~.base.Problem` interface)."""
        return self.model()

    def log_density(self, x):
        """:meth:`logp` (the :class:`~.base.Problem` interface)."""
        return self.logp(x)

    def hdr_threshold(self, q: float) -> float:
        r"""The level :math:`t_q` with :math:`P_\pi(T \leq t_q) = q`.

        The highest-density region of probability ``q`` is :math:`\{x : T(x) \leq t_q\}`.
        Thresholds are cached per target.
        """
        if np.ndim(q) != 0:
            raise ValueError(
                f"q must be a single probability in (0, 1), got {q!r}; use quantile_coverage for several."
            )
        q = float(_check_qs(q)[0])
        cached = self._threshold_cache.get(q)
        if cached is None:
            cached = self._threshold(q)
            self._threshold_cache[q] = cached
        return cached

    def _threshold(self, q: float) -> float:
        """Solve ``statistic_cdf(t) = q``; subclasses with a closed form override this."""
        hi = max(1.0, float(stats.chi2.ppf(q, self._dim)))
        while self.statistic_cdf(hi) < q:
            hi *= 2.0
        return float(optimize.brentq(lambda t: self.statistic_cdf(t) - q, 0.0, hi, xtol=1e-13, rtol=1e-13))

    def in_hdr(self, x, q: float) -> np.ndarray:
        """Whether each point lies in the exact highest-density region of probability ``q``."""
        return self.statistic(x) <= self.hdr_threshold(q)

    def quantile_coverage(self, samples, qs=DEFAULT_QUANTILES) -> np.ndarray:
        r"""Fraction of ``samples`` inside the exact HDR of each probability in ``qs``.

        For exact i.i.d. draws the coverage of :math:`q` is
        :math:`\operatorname{Binomial}(m, q)/m`, with standard error :math:`\sqrt{q(1-q)/m}`.

        Parameters
        ----------
        samples : array of shape (m, dim)
            Draws (flatten chains first; any leading axes are flattened here).
        qs : sequence of float in (0, 1), default 0.1, ..., 0.9

        Returns
        -------
        array of shape (len(qs),)
        """
        X = self._as_points(samples, "samples").reshape(-1, self._dim)
        if X.shape[0] == 0:
            raise ValueError("samples is empty.")
        if np.isnan(X).any():
            raise ValueError("samples contains NaN.")
        qs = _check_qs(qs)
        T = self._statistic(X, np)
        thresholds = np.array([self.hdr_threshold(q) for q in qs])
        return (T[:, None] <= thresholds[None, :]).mean(axis=0)

    def quantile_error(self, samples, qs=DEFAULT_QUANTILES) -> float:
        r"""The paper's quantile measure :math:`\frac{1}{|Q|}\sum_{q\in Q} |\text{coverage}(q) - q|`.

        Parameters
        ----------
        samples : array of shape (m, dim)
        qs : sequence of float in (0, 1), default 0.1, ..., 0.9
        """
        qs = _check_qs(qs)
        return float(np.mean(np.abs(self.quantile_coverage(samples, qs) - qs)))


def quantile_error(target: Target, samples, qs=DEFAULT_QUANTILES) -> float:
    """Module-level shortcut for :meth:`Target.quantile_error`."""
    return target.quantile_error(samples, qs)
