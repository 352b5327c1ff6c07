"""The flower and the ring (a flower without petals), with exact quantile references."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from pymc_kameleon.problems.hdr import (
    _LOG_2PI,
    Target,
    _as_rng,
    _check_dim,
    _check_int,
    _check_real,
    _gauss_legendre,
)

__all__ = ["FlowerTarget", "flower", "ring"]


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
        :math:`\mathbb E X_1 = Z^{-1}\int \cos\theta\,[(\sigma^2 + c^2)\Phi(a)
        + \sigma c\,\varphi(a)]\,d\theta` by quadrature, and :math:`\mathbb E X_2 = 0` by the
        reflection symmetry :math:`\theta \to -\theta`.
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
