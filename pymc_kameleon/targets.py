r"""Benchmark targets with exact references (Sejdinovic, Strathmann et al. 2014, section 5.2).

Every target here has an unnormalised log density of the form

.. math::
    \log \pi(x) = -\tfrac12\, T(x) + \text{const},

for an explicit *statistic* :math:`T(x) \geq 0` whose distribution under
:math:`\pi` is known exactly. The density is a decreasing function of :math:`T`,
so the highest-density region (HDR) of probability :math:`q` is

.. math::
    R_q = \{x : T(x) \leq t_q\}, \qquad P_\pi(T \leq t_q) = q,

and the paper's quantile measure compares, for :math:`q = 0.1, \dots, 0.9`, the
fraction of a chain's draws inside :math:`R_q` with :math:`q`:

.. math::
    \text{quantile error} = \frac{1}{|Q|} \sum_{q \in Q}
    \Bigl| \tfrac1m \textstyle\sum_{i=1}^m \mathbf 1[T(x_i) \le t_q] - q \Bigr|.

Available targets (factory functions):

:func:`banana`
    :math:`\mathcal B(b, v)` of Haario et al. (1999); :math:`T \sim \chi^2_d` exactly.
:func:`flower`
    :math:`\mathcal F(r_0, A, \omega, \sigma)`; :math:`T \sim \chi^2_{d-1}` up to a
    truncation term of order :math:`\Phi(-(r_0 - A)/\sigma)` that is computed, not ignored.
:func:`ring`
    the flower with :math:`A = 0`.
:func:`correlated_gaussian`
    an equicorrelated Gaussian; :math:`T \sim \chi^2_d` exactly.

Each target gives its NumPy log density (:meth:`Target.logp`), a fresh PyMC
model with the same density (:meth:`Target.model`, gradients included), exact
i.i.d. draws (:meth:`Target.sample`), the exact mean, the log normalising
constant, and the quantile measure (:meth:`Target.quantile_coverage`,
:meth:`Target.quantile_error`).

Examples
--------
>>> import numpy as np
>>> from pymc_kameleon.targets import banana
>>> target = banana(dim=8, b=0.03, v=100.0)
>>> x = target.sample(20_000, rng=1)
>>> float(target.quantile_error(x)) < 0.01
True
>>> with target.model():  # doctest: +SKIP
...     idata = pm.sample(step=KameleonMetropolis())
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from functools import lru_cache
from numbers import Integral, Real

import numpy as np
from scipy import optimize, special, stats

__all__ = [
    "DEFAULT_QUANTILES",
    "BananaTarget",
    "FlowerTarget",
    "GaussianTarget",
    "Target",
    "banana",
    "correlated_gaussian",
    "flower",
    "quantile_error",
    "ring",
]

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
class Target(ABC):
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
        """A point with finite density and finite gradient: the model's initial value."""

    @property
    def exact_cov(self) -> np.ndarray | None:
        r""":math:`\operatorname{Cov}_\pi[X]` when it is known in closed form, else ``None``."""
        return None

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


# --------------------------------------------------------------------- flower
class FlowerTarget(Target):
    r"""The flower :math:`\mathcal F(r_0, A, \omega, \sigma)`: a noisy, periodically perturbed circle.

    .. math::
        \log \mathcal F(x) = -\frac{\bigl(r - r_0 - A\cos(\omega\theta)\bigr)^2}{2\sigma^2}
        - \sum_{j\geq 3} \frac{x_j^2}{2} + \text{const},
        \qquad r = \sqrt{x_1^2 + x_2^2},\ \theta = \operatorname{atan2}(x_2, x_1) \in (-\pi, \pi].

    (The paper's display drops the square; the reference code and the intended
    target use it.) The cosine is even, so the density is continuous for any
    :math:`\omega \geq 0`; for integer :math:`\omega` it is smooth.

    **Exact reference.** Let :math:`c(\theta) = r_0 + A\cos(\omega\theta)`,
    :math:`a(\theta) = c(\theta)/\sigma` and :math:`S = (r - c(\theta))/\sigma`. In the
    coordinates :math:`(S, \theta)` the Jacobian is :math:`r\,\sigma`, so

    .. math::
        p(S, \theta) \propto \varphi(S)\,\bigl(\sigma S + c(\theta)\bigr), \qquad S > -a(\theta),

    independently of :math:`x_3, \dots, x_d \sim \mathcal N(0, 1)`. The density is a
    decreasing function of

    .. math::
        T = S^2 + \textstyle\sum_{j \geq 3} x_j^2 ,

    so the HDRs are :math:`\{T \le t_q\}`. For fixed :math:`\theta` the odd part
    :math:`\sigma S\,\varphi(S)` integrates to zero over any symmetric interval
    :math:`|S| \le u \le a(\theta)`; hence, **were it not for the truncation**
    :math:`S > -a(\theta)` (i.e. :math:`r > 0`), :math:`S^2 \sim \chi^2_1` and
    :math:`T \sim \chi^2_{d-1}` (one degree of freedom for the two polar
    coordinates, not two: the angle carries no quadratic term). Exactly,

    .. math::
        P(T \le t) = \frac{Z_0\, F_{\chi^2_{d-1}}(t) + C(t)}{Z},\qquad
        C(t) = \int_{-\pi}^{\pi} \int_{a(\theta)}^{\sqrt t} \varphi(s)\,\bigl(\sigma s - c(\theta)\bigr)\,
        F_{\chi^2_{d-2}}(t - s^2)\, ds\, d\theta \;\ge 0,

    with :math:`Z_0 = \int c\,d\theta = 2\pi r_0 + 2A\sin(\omega\pi)/\omega`,
    :math:`Z = Z_0 + \int [\sigma\varphi(a) - c\,\Phi(-a)]\,d\theta` and
    :math:`F_{\chi^2_0} \equiv 1`. **Size of the truncation.** With
    :math:`a_{\min} = (r_0 - A)/\sigma`, the Mills-ratio bound gives
    :math:`0 \le \sigma\varphi(a) - c\,\Phi(-a) \le c\,\varphi(a)/(a(1 + a^2)) \le c\,\Phi(-a)/a^2`,
    so :math:`(Z - Z_0)/Z_0 \le \Phi(-a_{\min})/a_{\min}^2`; :math:`|P(T \le t) - F_{\chi^2_{d-1}}(t)|`
    is of the same order, and :math:`C(t) = 0` for :math:`t \le a_{\min}^2`. For the
    paper's :math:`\mathcal F(10, 6, 6, 1)`, :math:`a_{\min} = 4` and the relative error of
    plain :math:`\chi^2_{7}` thresholds is about :math:`5\cdot 10^{-8}` (see
    :attr:`truncation_mass`); :math:`t_q` is then given in closed form (up to :math:`Z`) for
    all :math:`q \le 0.9` and :math:`d \le 8`. Otherwise :math:`Z` and :math:`C(t)` are
    evaluated by Gauss-Legendre quadrature (agreeing with adaptive quadrature to about
    :math:`10^{-8}`, far below any Monte Carlo error), so the reference stays exact also
    for strongly truncated flowers. The reference code (``kameleon-mcmc``) also uses
    :math:`\chi^2_{d-1}`, without the truncation terms.

    **Exact draws** use rejection sampling from the envelope
    :math:`\varphi(S)(\sigma|S| + r_0 + A) \ge \varphi(S)(\sigma S + c(\theta))_+` with
    :math:`\theta \sim U(-\pi, \pi)`; the envelope is a mixture of a standard normal
    and a symmetrised Rayleigh for :math:`S`. The marginal of :math:`\theta` is
    :math:`p(\theta) = [\sigma\varphi(a(\theta)) + c(\theta)\Phi(a(\theta))]/Z`
    (:meth:`angle_density`), which is :math:`\propto c(\theta)` up to the truncation.
    (The reference code's sampler draws :math:`\theta` uniformly and
    :math:`r \sim \mathcal N(c(\theta), \sigma^2)`, which is not this density.)

    **Limitation of the quantile measure.** Coverage depends on a sample only through
    :math:`T`, i.e. through :math:`S` and :math:`x_{3:d}`, not through :math:`\theta`. Draws
    with the right radial profile but wrong angular weights (e.g. a chain that has
    not visited every petal in proportion) can have a small quantile error; check
    the mean norm or the angle histogram against :meth:`angle_density` as well.

    Use :func:`flower` or :func:`ring` to build one.
    """

    # Gauss-Legendre nodes for the angle (on [0, pi], the integrands are even) and the radius.
    _N_THETA = 512
    _N_S = 64

    def __init__(self, dim=8, r0=10.0, A=6.0, omega=6.0, sigma=1.0, *, name="flower", params=None):
        dim = _check_dim(dim, 2)
        self.r0 = _check_real("r0", r0, positive=True)
        self.A = _check_real("A", A, nonnegative=True)
        self.omega = _check_real("omega", omega, nonnegative=True)
        self.sigma = _check_real("sigma", sigma, positive=True)
        if not self.r0 > self.A:
            raise ValueError(
                f"The flower needs r0 > A >= 0 so that its centre curve r0 + A cos(omega theta) stays "
                f"away from the origin; got r0={r0!r}, A={A!r}."
            )
        if params is None:
            params = {"r0": self.r0, "A": self.A, "omega": self.omega, "sigma": self.sigma}
        super().__init__(name, dim, params)
        xi, w = _gauss_legendre(self._N_THETA)
        self._theta = 0.5 * math.pi * (xi + 1.0)  # nodes on [0, pi]
        self._theta_w = math.pi * w  # weights for the integral over (-pi, pi] of an even function
        self._s_nodes, self._s_w = _gauss_legendre(self._N_S)
        c = self._c(self._theta)
        a = c / self.sigma
        self._Z0 = self._integral_of_c()
        self._Z = self._Z0 + float(self._theta_w @ (self.sigma * stats.norm.pdf(a) - c * stats.norm.sf(a)))
        self._a_min = (self.r0 - self.A) / self.sigma

    # -- pieces -------------------------------------------------------------
    def _c(self, theta):
        return self.r0 + self.A * np.cos(self.omega * theta)

    def _integral_of_c(self) -> float:
        r""":math:`Z_0 = \int_{-\pi}^{\pi} c(\theta)\,d\theta`, in closed form."""
        if self.omega == 0.0:
            return 2.0 * math.pi * (self.r0 + self.A)
        return 2.0 * math.pi * self.r0 + 2.0 * self.A * math.sin(self.omega * math.pi) / self.omega

    def _statistic(self, x, m):
        x1, x2 = x[..., 0], x[..., 1]
        r = m.sqrt(x1**2 + x2**2)
        s = (r - self.r0 - self.A * m.cos(self.omega * m.arctan2(x2, x1))) / self.sigma
        return s**2 + m.sum(x[..., 2:] ** 2, axis=-1)

    @property
    def truncation_mass(self) -> float:
        r"""Relative weight :math:`(Z - Z_0)/Z` of the truncation :math:`r > 0` in the normaliser."""
        return (self._Z - self._Z0) / self._Z

    def angle_density(self, theta) -> np.ndarray:
        r"""Exact marginal density of :math:`\theta = \operatorname{atan2}(x_2, x_1)` on :math:`(-\pi, \pi]`.

        .. math:: p(\theta) = \bigl[\sigma\varphi(a(\theta)) + c(\theta)\Phi(a(\theta))\bigr] / Z.
        """
        theta = np.asarray(theta, dtype=float)
        c = self._c(theta)
        a = c / self.sigma
        out = (self.sigma * stats.norm.pdf(a) + c * stats.norm.cdf(a)) / self._Z
        return np.where(np.abs(theta) <= math.pi, out, 0.0)

    def _truncation_term(self, t: float) -> float:
        """:math:`C(t)` of the class docstring (zero when no angle is truncated below :math:`\\sqrt t`)."""
        u = math.sqrt(t)
        if u <= self._a_min:
            return 0.0
        c = self._c(self._theta)
        a = c / self.sigma
        active = a < u
        c, a, wt = c[active], a[active], self._theta_w[active]
        half = 0.5 * (u - a)
        s = a[:, None] + half[:, None] * (self._s_nodes[None, :] + 1.0)  # (n_theta, n_s)
        f = stats.norm.pdf(s) * (self.sigma * s - c[:, None])
        if self.dim > 2:
            f = f * stats.chi2.cdf(np.maximum(t - s**2, 0.0), self.dim - 2)
        inner = (f @ self._s_w) * half
        return float(wt @ inner)

    def statistic_cdf(self, t):
        t_arr = np.asarray(t, dtype=float)
        flat = np.atleast_1d(t_arr).ravel()
        out = np.empty_like(flat)
        for i, ti in enumerate(flat):
            if ti <= 0:
                out[i] = 0.0
            elif not np.isfinite(ti):
                out[i] = 1.0
            else:
                val = self._Z0 * stats.chi2.cdf(ti, self.dim - 1) + self._truncation_term(ti)
                out[i] = min(val / self._Z, 1.0)
        return float(out[0]) if t_arr.ndim == 0 else out.reshape(t_arr.shape)

    def _threshold(self, q):
        # Below t = a_min^2 the CDF is (Z0/Z) F_{chi2_{d-1}}(t): invert it in closed form when possible.
        p = q * self._Z / self._Z0
        if p < 1.0:
            t = float(stats.chi2.ppf(p, self.dim - 1))
            if t <= self._a_min**2:
                return t
        return super()._threshold(q)

    # -- draws and moments --------------------------------------------------
    def sample(self, n: int, rng=None) -> np.ndarray:
        """Exact i.i.d. draws by rejection sampling (see the class docstring).

        The acceptance rate is :math:`Z / (2\\pi(\\sigma\\sqrt{2/\\pi} + r_0 + A))`, about 60% for
        F(10, 6, 6, 1) and 90% for rings.

        Parameters
        ----------
        n : int
        rng : numpy.random.Generator or seed, optional
        """
        n = _check_int("n", n, 0)
        rng = _as_rng(rng)
        sig, top = self.sigma, self.r0 + self.A
        w_rayleigh = sig * math.sqrt(2.0 / math.pi)
        p_rayleigh = w_rayleigh / (w_rayleigh + top)
        envelope_mass = 2.0 * math.pi * (w_rayleigh + top)
        rate = self._Z / envelope_mass
        theta_out, s_out = [], []
        have = 0
        while have < n:
            k = int(1.1 * (n - have) / rate) + 16
            theta = rng.uniform(-math.pi, math.pi, k)
            use_rayleigh = rng.random(k) < p_rayleigh
            s = rng.standard_normal(k)
            rayleigh = np.sqrt(-2.0 * np.log1p(-rng.random(k))) * rng.choice((-1.0, 1.0), k)
            s = np.where(use_rayleigh, rayleigh, s)
            c = self._c(theta)
            accept = rng.random(k) * (sig * np.abs(s) + top) < sig * s + c
            theta_out.append(theta[accept])
            s_out.append(s[accept])
            have += int(accept.sum())
        theta = np.concatenate(theta_out)[:n]
        s = np.concatenate(s_out)[:n]
        r = self._c(theta) + sig * s
        x = np.empty((n, self.dim))
        x[:, 0] = r * np.cos(theta)
        x[:, 1] = r * np.sin(theta)
        x[:, 2:] = rng.standard_normal((n, self.dim - 2))
        return x

    @property
    def exact_mean(self):
        r"""Exact mean.

        It is zero whenever the density has a rotational symmetry (:math:`A = 0`,
        :math:`\omega = 0` or integer :math:`\omega \ge 2`). Otherwise
        :math:`\mathbb E X_1 = Z^{-1}\int \cos\theta\,[(\sigma^2 + c^2)\Phi(a) + \sigma c\,\varphi(a)]\,d\theta`
        by quadrature, and :math:`\mathbb E X_2 = 0` by the reflection symmetry :math:`\theta \to -\theta`.
        """
        mean = np.zeros(self.dim)
        integer_omega = self.omega >= 2 and self.omega == round(self.omega)
        symmetric = self.A == 0.0 or self.omega == 0.0 or integer_omega
        if not symmetric:
            c = self._c(self._theta)
            a = c / self.sigma
            second = (self.sigma**2 + c**2) * stats.norm.cdf(a) + self.sigma * c * stats.norm.pdf(a)
            mean[0] = float(self._theta_w @ (np.cos(self._theta) * second)) / self._Z
        return mean

    @property
    def log_normalizer(self):
        return math.log(self.sigma) + math.log(self._Z) + 0.5 * (self.dim - 1) * _LOG_2PI

    @property
    def initval(self):
        """The point of the centre curve at :math:`\\theta = 0`: :math:`(r_0 + A, 0, \\dots, 0)`."""
        x = np.zeros(self.dim)
        x[0] = self.r0 + self.A
        return x


def flower(
    dim: int = 8, r0: float = 10.0, A: float = 6.0, omega: float = 6.0, sigma: float = 1.0
) -> FlowerTarget:
    r"""The flower target :math:`\mathcal F(r_0, A, \omega, \sigma)` (see :class:`FlowerTarget`).

    Parameters
    ----------
    dim : int, default 8
        Dimension :math:`d \geq 2`; coordinates 3..d are independent standard normals.
    r0 : float, default 10.0
        Radius of the circle, :math:`r_0 > A`.
    A : float, default 6.0
        Amplitude of the periodic perturbation, :math:`0 \le A < r_0`.
    omega : float, default 6.0
        Frequency (number of petals) :math:`\omega \geq 0`.
    sigma : float, default 1.0
        Radial standard deviation :math:`\sigma > 0`.

    Raises
    ------
    ValueError
        If a parameter is invalid (the message names it), in particular unless ``r0 > A >= 0``.
    """
    return FlowerTarget(dim=dim, r0=r0, A=A, omega=omega, sigma=sigma)


def ring(dim: int = 2, radius: float = 2.0, sigma: float = 0.2) -> FlowerTarget:
    r"""A noisy ring: the flower (:class:`FlowerTarget`) with :math:`A = 0`.

    .. math:: \log\pi(x) = -\frac{(r - \text{radius})^2}{2\sigma^2} - \sum_{j\ge3} \frac{x_j^2}{2}.

    A small, strongly nonlinear target for invariance tests.

    Parameters
    ----------
    dim : int, default 2
    radius : float, default 2.0
        Ring radius :math:`r_0 > 0`.
    sigma : float, default 0.2
        Radial standard deviation :math:`\sigma > 0`.

    Raises
    ------
    ValueError
        If ``dim``, ``radius`` or ``sigma`` is invalid.
    """
    radius = _check_real("radius", radius, positive=True)
    sigma = _check_real("sigma", sigma, positive=True)
    return FlowerTarget(
        dim=dim, r0=radius, A=0.0, omega=0.0, sigma=sigma, name="ring",
        params={"radius": radius, "sigma": sigma},
    )


# --------------------------------------------------------------------- Gaussian
class GaussianTarget(Target):
    r"""A zero-mean Gaussian :math:`\mathcal N(0, \Sigma)`.

    The statistic is the Mahalanobis form :math:`T(x) = x^\top \Sigma^{-1} x \sim \chi^2_d`.

    Use :func:`correlated_gaussian` to build one.

    Parameters
    ----------
    cov : array of shape (d, d)
        Symmetric positive-definite covariance.
    """

    def __init__(self, cov, *, name="gaussian", params=None):
        cov = np.asarray(cov, dtype=float)
        if cov.ndim != 2 or cov.shape[0] != cov.shape[1] or cov.shape[0] < 1:
            raise ValueError(f"cov must be a square (d, d) matrix, got shape {cov.shape}.")
        if not np.all(np.isfinite(cov)) or not np.allclose(cov, cov.T):
            raise ValueError("cov must be a finite symmetric matrix.")
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            raise ValueError("cov must be positive definite.") from None
        self._cov = cov.copy()
        self._chol = chol
        inv_chol = np.linalg.inv(chol)
        self._precision = inv_chol.T @ inv_chol
        self._logdet = 2.0 * float(np.sum(np.log(np.diag(chol))))
        super().__init__(name, cov.shape[0], params if params is not None else {"cov": self._cov})

    def _statistic(self, x, m):
        return ((x @ self._precision) * x).sum(axis=-1)

    def statistic_cdf(self, t):
        return stats.chi2.cdf(t, self.dim)

    def _threshold(self, q):
        return float(stats.chi2.ppf(q, self.dim))

    def sample(self, n: int, rng=None) -> np.ndarray:
        """Exact draws :math:`L\\varepsilon`, :math:`LL^\\top = \\Sigma`."""
        n = _check_int("n", n, 0)
        return _as_rng(rng).standard_normal((n, self.dim)) @ self._chol.T

    @property
    def exact_mean(self):
        return np.zeros(self.dim)

    @property
    def exact_cov(self):
        return self._cov.copy()

    @property
    def log_normalizer(self):
        return 0.5 * self.dim * _LOG_2PI + 0.5 * self._logdet

    @property
    def initval(self):
        return np.zeros(self.dim)


def correlated_gaussian(dim: int = 2, rho: float = 0.9, scales=None) -> GaussianTarget:
    r"""An equicorrelated Gaussian :math:`\mathcal N(0, D R D)`.

    Here :math:`R = (1-\rho) I + \rho \mathbf 1\mathbf 1^\top` and
    :math:`D = \operatorname{diag}(\text{scales})`.

    Every pair of coordinates has correlation :math:`\rho`. The eigenvalues of
    :math:`R` are :math:`1 + (d-1)\rho` (once) and :math:`1 - \rho`, so
    :math:`\rho` close to 1 gives a thin, ill-conditioned target.

    Parameters
    ----------
    dim : int, default 2
        Dimension :math:`d \geq 1`.
    rho : float, default 0.9
        Correlation, :math:`-1/(d-1) < \rho < 1` (for :math:`d = 1`, :math:`|\rho| < 1`; it has no effect).
    scales : array of shape (dim,), optional
        Marginal standard deviations (all positive); default all ones.

    Raises
    ------
    ValueError
        If ``dim``, ``rho`` or ``scales`` is invalid (the message names it).
    """
    dim = _check_dim(dim, 1)
    rho = _check_real("rho", rho)
    lower = -1.0 / (dim - 1) if dim > 1 else -1.0
    if not lower < rho < 1.0:
        raise ValueError(
            f"rho must lie in ({lower:g}, 1) for dim={dim} to give a positive-definite matrix, got {rho!r}."
        )
    if scales is None:
        scales_arr = np.ones(dim)
    else:
        scales_arr = np.asarray(scales, dtype=float)
        if scales_arr.shape != (dim,) or not np.all(np.isfinite(scales_arr)) or not np.all(scales_arr > 0):
            raise ValueError(f"scales must be {dim} positive finite numbers, got {scales!r}.")
    corr = np.full((dim, dim), rho)
    np.fill_diagonal(corr, 1.0)
    cov = corr * np.outer(scales_arr, scales_arr)
    return GaussianTarget(
        cov, name="correlated_gaussian", params={"rho": rho, "scales": tuple(float(s) for s in scales_arr)}
    )
