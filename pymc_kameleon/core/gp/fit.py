r"""Hyperparameters of :class:`~pymc_kameleon.core.gp.surrogate.GPSurrogate` by maximum marginal likelihood.

The functions take the surrogate ``gp`` and read its stored observations; only
:func:`fit_hyperparameters` changes it (through ``gp.set_hyperparameters``, one refactorisation).
The surrogate's :meth:`~pymc_kameleon.core.gp.surrogate.GPSurrogate.log_marginal_likelihood`,
:meth:`~pymc_kameleon.core.gp.surrogate.GPSurrogate.default_bounds` and
:meth:`~pymc_kameleon.core.gp.surrogate.GPSurrogate.fit_hyperparameters` call them.

The parameters are :math:`\eta = (\log\ell_1, \dots, \log\ell_d, \log s^2[, \log\sigma_n^2])`, the
noise only with ``fit_noise=True``; the objective is the profile log marginal likelihood (the
constant mean at its GLS estimate for ``mean="gls"``), maximised by L-BFGS-B with its analytic
gradient.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import solve_triangular
from scipy.optimize import minimize

from pymc_kameleon.core.gp.covariance import (
    _assemble,
    _dcov_dlog_lengthscale,
    _inverse_from_cholesky,
    _se_from_differences,
)
from pymc_kameleon.core.linalg import SingularCovarianceError

__all__ = [
    "FIT_FTOL",
    "FIT_GTOL",
    "SAME_START",
    "default_bounds",
    "fit_hyperparameters",
    "hyperparameters_from_log",
    "log_hyperparameters",
    "log_marginal_likelihood",
    "loo_log_predictive_density",
    "MarginalLikelihoodObjective",
    "neg_log_marginal_likelihood_and_grad",
]

_LOG_2PI = math.log(2.0 * math.pi)
#: L-BFGS-B's stopping rules for a fit: a relative change of the objective below FIT_FTOL (about 1e-4
#: nats at a log marginal likelihood of some hundreds) or a projected gradient below FIT_GTOL. SciPy's
#: defaults (2.2e-9 and 1e-5) polish far beyond what screening can tell: on the gallery Lotka-Volterra
#: model's 14 fits of a run they needed 1215 objective evaluations, these 746, and every fit's log
#: marginal likelihood agreed to 1e-4 nats (issue 44).
FIT_FTOL = 1e-6
FIT_GTOL = 1e-2
#: Starts whose log hyperparameters all differ by less than this are one start (a fit runs the first):
#: after the warm-up the current values are the data's scales of all points, the data start those of
#: the latest ``fit_max_points``, 0.002-0.003 apart, and both runs reached the same optimum.
SAME_START = 0.05


def log_marginal_likelihood(gp) -> float:
    r"""Log marginal likelihood :math:`\log \mathcal N(y;\, m h,\, K)` of ``gp`` at its current state.

    .. math::
        -\tfrac12 \|L^{-1}(y - m h)\|^2 - \sum_i \log L_{ii} - \tfrac n2 \log 2\pi,

    with :math:`m = \hat m` for ``mean="gls"`` (the profile likelihood). :math:`O(n)` given
    the stored :math:`L^{-1}y, L^{-1}h`.
    """
    n = gp._y.shape[0]
    if n == 0:
        return 0.0
    r = gp._zy - gp.mean_value * gp._zh
    return float(-0.5 * r @ r - np.log(np.diagonal(gp._L)).sum() - 0.5 * n * _LOG_2PI)


def loo_log_predictive_density(gp) -> float:
    r"""Leave-one-out log predictive density of ``gp``'s stored values at its current hyperparameters.

    For each value row :math:`i`, the density of :math:`y_i` under the GP conditioned on every other
    row (Rasmussen & Williams, 2006, section 5.4.2), in closed form from :math:`K^{-1}`:

    .. math::
        \sum_i \log \mathcal N\big(y_i;\, \mu_{-i},\, \sigma^2_{-i}\big), \qquad
        y_i - \mu_{-i} = \frac{[K^{-1}(y - m h)]_i}{[K^{-1}]_{ii}}, \qquad
        \sigma^2_{-i} = \frac{1}{[K^{-1}]_{ii}},

    with the constant mean :math:`m` held at its value on all the points. It measures prediction,
    which the marginal likelihood also rewards but trades against the complexity term: on a 20-d
    Gaussian log-likelihood a fit on the last 300 points gained 2.6 nats of marginal likelihood by
    shortening the length scales from 30-66 to 3-10 posterior sds, while its leave-one-out density
    fell by 400 nats and delayed acceptance's stage 2 went from accepting 95% of the proposals that
    passed stage 1 to 45%. :math:`O(n^3)` (one inverse); ``-inf`` if not finite.
    """
    n = gp._y.shape[0]
    if n < 2:
        return 0.0
    inverse = _inverse_from_cholesky(np.tril(gp._L))  # (a view of a growing buffer: zero its upper part)
    alpha = inverse @ (gp._y - gp.mean_value * gp._h)
    rows = gp._h > 0  # value rows
    precision = np.diagonal(inverse)[rows]
    value = float(np.sum(0.5 * np.log(precision) - 0.5 * alpha[rows] ** 2 / precision))
    value -= 0.5 * rows.sum() * _LOG_2PI
    return value if math.isfinite(value) else -math.inf


def log_hyperparameters(gp):
    """The current parameters :math:`\\eta` of ``gp``; a zero noise starts at ``1e-4`` times :math:`s^2`."""
    p = [*np.log(gp._ell), math.log(gp._s2)]
    if gp.fit_noise:
        p.append(math.log(gp._noise if gp._noise > 0 else 1e-4 * gp._s2))
    return np.array(p)


def hyperparameters_from_log(gp, params):
    """``(lengthscales, signal_variance, noise_variance)`` from :math:`\\eta` (``gp``'s noise if fixed)."""
    d = gp.dim
    ell = np.exp(params[:d])
    s2 = float(np.exp(params[d]))
    noise = float(np.exp(params[d + 1])) if gp.fit_noise else gp._noise
    return ell, s2, noise


def neg_log_marginal_likelihood_and_grad(gp, params):
    r"""Negative profile log marginal likelihood and its gradient in the log hyperparameters.

    :math:`\partial \log p / \partial \eta = \tfrac12 \operatorname{tr}\big((\alpha\alpha^\top - K^{-1})
    \partial K/\partial\eta\big)`; for ``mean="gls"`` the envelope theorem lets
    :math:`\hat m` be held fixed when differentiating. ``1e25`` (zero gradient) where :math:`K`
    cannot be factorised or the value is not finite. A fit evaluates it many times on the same
    points: :class:`MarginalLikelihoodObjective` keeps what does not depend on :math:`\eta`.
    """
    return MarginalLikelihoodObjective(gp)(params)


class MarginalLikelihoodObjective:
    r""":func:`neg_log_marginal_likelihood_and_grad` on the points ``gp`` holds now, as a callable.

    The pairwise differences :math:`r_{ab} = x_a - x_b` and their squares per coordinate do not
    depend on the hyperparameters; they are computed once per fit, and the kernel values once per
    evaluation. With gradient observations the kernel comes from the same ``_se_from_differences`` as
    :func:`~pymc_kameleon.core.gp.covariance.se_ard_covariance`'s and the derivative from
    :func:`~pymc_kameleon.core.gp.covariance._dcov_dlog_lengthscale`.

    With values only, both are matrix-vector products with the squares :math:`S` stored as a
    :math:`d \times n^2` matrix (one BLAS pass each, instead of four elementwise passes per
    coordinate): :math:`K = s^2 \exp(-\tfrac12 \ell^{-2} S)` and

    .. math::
        \frac{\partial \log p}{\partial \log \ell_m} = \frac{1}{2 \ell_m^2} \sum_{ab}
        (G \circ K)_{ab}\, r_{ab,m}^2, \qquad G = \alpha\alpha^\top - K^{-1},

    since :math:`\partial K_{ab} / \partial \log \ell_m = K_{ab} r_{ab,m}^2 / \ell_m^2` (zero on the
    diagonal, so the nugget adds nothing there).
    """

    def __init__(self, gp):
        self.gp = gp
        X = gp._X
        if gp.gradients:
            # By point, (n, n, d): the gradient blocks need every coordinate of each pair together.
            self.R = X[:, None, :] - X[None, :, :]
            self.squared_differences = [self.R[..., m] ** 2 for m in range(gp.dim)]
        else:
            # Values only: the squares by coordinate as one (d, n^2) matrix, for matrix-vector products.
            XT = np.ascontiguousarray(X.T)
            differences = XT[:, :, None] - XT[:, None, :]
            differences *= differences
            self.R, self.squared_differences = None, differences.reshape(gp.dim, -1)

    def __call__(self, params):
        gp = self.gp
        ell, s2, noise = hyperparameters_from_log(gp, params)
        g = gp.gradients
        n = gp._y.shape[0]
        R = self.R
        if g:
            U, Kv = _se_from_differences(R, ell, s2)
            C = _assemble(Kv, U, ell, g, g)
            Cm = C.reshape(n, n)
        else:
            Cm = (ell**-2.0) @ self.squared_differences
            Cm *= -0.5
            np.exp(Cm, out=Cm)
            Cm *= s2
            Cm = Cm.reshape(n, n)
        try:
            L, _ = gp._factorise(ell, s2, noise, K=Cm.copy())
        except SingularCovarianceError:
            return 1e25, np.zeros_like(params)
        zy = solve_triangular(L, gp._y, lower=True, check_finite=False)
        zh = solve_triangular(L, gp._h, lower=True, check_finite=False)
        m = gp._mean_spec if not isinstance(gp._mean_spec, str) else float(zh @ zy) / float(zh @ zh)
        r = zy - m * zh
        lml = -0.5 * r @ r - np.log(np.diagonal(L)).sum() - 0.5 * n * _LOG_2PI

        alpha = solve_triangular(L, r, lower=True, trans="T", check_finite=False)
        G = np.outer(alpha, alpha) - _inverse_from_cholesky(L)
        grad = np.empty_like(params)
        GK = G * Cm
        if g:
            for mdx in range(gp.dim):
                dK = _dcov_dlog_lengthscale(
                    R, U, Kv, C, ell, mdx, g, squared_difference=self.squared_differences[mdx]
                ).reshape(n, n)
                # The nugget is jitter x the prior variance of each row, so it moves with it.
                grad[mdx] = 0.5 * (np.sum(G * dK) + gp.jitter * np.sum(np.diagonal(G) * np.diagonal(dK)))
        else:
            grad[: gp.dim] = 0.5 * (self.squared_differences @ GK.reshape(-1)) / ell**2
        # Every block scales with s^2, so dK/dlog s^2 is K itself (nugget included, noise not).
        grad[gp.dim] = 0.5 * (np.sum(GK) + gp.jitter * np.sum(np.diagonal(G) * np.diagonal(Cm)))
        if gp.fit_noise:
            grad[gp.dim + 1] = 0.5 * noise * np.sum(np.diagonal(G) * gp._h)
        if not np.isfinite(lml):
            return 1e25, np.zeros_like(params)
        return -float(lml), -grad


def default_bounds(gp):
    """Box bounds (in log space) used by :func:`fit_hyperparameters` when none are given.

    Length scales within ``[1e-2, 1e2]`` times the spread of the stored points in each
    coordinate, :math:`s^2` within ``[1e-4, 1e4]`` times the variance of the stored values,
    the noise within ``[1e-8, 1]`` times that variance.
    """
    X = gp._X
    spread = np.ptp(X, axis=0) if X.shape[0] > 1 else np.ones(gp.dim)
    spread = np.where(spread > 0, spread, 1.0)
    vals = gp.values
    vy = float(np.var(vals)) if vals.size > 1 else 1.0
    vy = vy if vy > 0 else 1.0
    b = [(math.log(1e-2 * s), math.log(1e2 * s)) for s in spread]
    b.append((math.log(1e-4 * vy), math.log(1e4 * vy)))
    if gp.fit_noise:
        b.append((math.log(1e-8 * vy), math.log(vy)))
    return b


def data_scales(gp, fallback: float = 1.0):
    r"""The data's own scales ``(ell, s2)``: :math:`\ell_j` the sd of the stored points in coordinate
    :math:`j` (kernel coordinates; ``fallback`` where they do not spread), :math:`s^2` the variance of
    the values (1 if it is 0 or there is one value)."""
    X, vals = gp._X, gp.values
    ell = np.std(X, axis=0) if X.shape[0] > 1 else np.ones(gp.dim)
    ell = np.where(ell > 0, ell, fallback)
    vy = float(np.var(vals)) if vals.size > 1 else 1.0
    return ell, (vy if vy > 0 else 1.0)


def data_scale_start(gp):
    r"""Log hyperparameters at the data's scales (:func:`data_scales`), the noise as it is."""
    ell, vy = data_scales(gp)
    p = [*np.log(ell), math.log(vy)]
    if gp.fit_noise:
        p.append(log_hyperparameters(gp)[-1])
    return np.array(p)


def fit_hyperparameters(
    gp, *, n_restarts: int = 0, rng=None, bounds=None, maxiter: int = 200, data_start: bool = True
):
    r"""Maximise the log marginal likelihood of ``gp`` over the log hyperparameters, then refactorise.

    Optimises :math:`(\log\ell_1, \dots, \log\ell_d, \log s^2[, \log\sigma_n^2])` with L-BFGS-B
    from the current values (clipped into the bounds), from the data's scales
    (:func:`data_scale_start`, with ``data_start``) and from ``n_restarts`` starts drawn
    uniformly in the bounds. The best result is kept only if it beats the current value,
    so the log marginal likelihood never decreases. Costs :math:`O(n^3)` per evaluation:
    call it during tuning only.

    Starting only from the current values, a fit that once fell into the white-noise optimum
    (every :math:`\ell_j` at its lower bound, :math:`K \approx s^2 I`, where the likelihood is flat
    in :math:`\ell`) stayed there at every later refit. On a Lotka-Volterra posterior from a far
    start, two chains of four ended tuning with :math:`\ell \approx 0.05` posterior sds and a
    predictive sd of 7 nats at every proposal, so stage 1 passed everything. The data's scales
    found a log marginal likelihood 400 nats higher.

    Parameters
    ----------
    gp : GPSurrogate
    n_restarts : int
        Extra random starts.
    rng : numpy.random.Generator, optional
        For the restarts.
    bounds : sequence of (low, high), optional
        Bounds in log space, one pair per parameter; :func:`default_bounds` if omitted.
    maxiter : int
        L-BFGS-B's limit per start, on iterations and on objective evaluations alike (it stops earlier
        by :data:`FIT_FTOL` and :data:`FIT_GTOL`). A start whose line searches keep failing (a
        singular :math:`K` at most trial points) otherwise ran on: one random restart of a 3-d fit
        with gradient rows took 3014 evaluations (17.6 s, the others 33-44) to reach the optimum the
        other starts had found; starts that converge use under 70 (3-17 d).
    data_start : bool
        Whether to start from the data's scales too.

    Returns
    -------
    float
        The log marginal likelihood after fitting.
    """
    if gp.n_points < 2:
        return log_marginal_likelihood(gp)
    bounds = list(default_bounds(gp) if bounds is None else bounds)
    x_cur = log_hyperparameters(gp)
    if len(bounds) != x_cur.size:
        raise ValueError(f"fit_hyperparameters: expected {x_cur.size} bounds, got {len(bounds)}.")
    lo = np.array([b[0] for b in bounds])
    hi = np.array([b[1] for b in bounds])
    starts = [np.clip(x_cur, lo, hi)]
    if data_start:
        starts.append(np.clip(data_scale_start(gp), lo, hi))
    if n_restarts:
        rng = np.random.default_rng(rng)
        for _ in range(int(n_restarts)):
            starts.append(rng.uniform(lo, hi))
    objective = MarginalLikelihoodObjective(gp)
    best_f, best_x = objective(x_cur)[0], x_cur
    for i, x0 in enumerate(starts):
        if any(np.allclose(x0, earlier, rtol=0.0, atol=SAME_START) for earlier in starts[:i]):
            continue  # the same run again (after a warm-up the current values are the data's scales)
        res = minimize(
            objective, x0, jac=True, method="L-BFGS-B", bounds=bounds,
            options={"maxiter": int(maxiter), "maxfun": int(maxiter), "ftol": FIT_FTOL, "gtol": FIT_GTOL},
        )
        if np.isfinite(res.fun) and res.fun < best_f:
            best_f, best_x = float(res.fun), res.x
    ell, s2, noise = hyperparameters_from_log(gp, best_x)
    gp.set_hyperparameters(lengthscales=ell, signal_variance=s2, noise_variance=noise)
    return log_marginal_likelihood(gp)
