r"""The end-of-tuning checks: is the chain still walking, still climbing, or stuck in a coordinate?

Each takes the last tuning states (and their log densities or gradients) and returns a figure that
the steps' end-of-tuning warnings compare with a limit (:mod:`pymc_kameleon.steps.reporting`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize

__all__ = [
    "CLIMB_LIMIT",
    "gpd_shape_mle",
    "pareto_tail_index",
    "TuningReport",
    "gradient_slope",
    "gradient_spread",
    "log_density_climb",
    "relative_spread",
    "whitened_drift",
]

#: A climb (:func:`log_density_climb`) above this many sqrt(d/2) means the log density was still rising:
#: the chain was walking in (the end-of-tuning check, the rescue's width credit, the regions left behind).
CLIMB_LIMIT = 3.0

# log(1 + t) at which the profile likelihood is evaluated before it is refined: t = c / sigma from just
# above -1 (the support's bound, exceedances scaled to a largest of 1) to e^700 (tails so heavy that
# most exceedances are zero next to the largest), densest where t is of order 1.
_PROFILE_GRID = np.concatenate([np.arange(-12.0, 25.0, 0.25), np.arange(25.0, 700.0, 5.0)])


def pareto_tail_index(log_weights) -> float:
    r"""Pareto :math:`\hat k` of importance weights: the shape of a generalised Pareto fitted to their tail.

    The largest :math:`M = \min(0.2 S, 3\sqrt S)` of :math:`S` weights :math:`w_s` (as in Pareto
    smoothed importance sampling, Vehtari et al. 2024) exceed the next one, :math:`u`; the
    maximum-likelihood fit of :math:`w - u \sim \mathrm{GPD}(k, \sigma)` gives :math:`\hat k`
    (:func:`gpd_shape_mle`). :math:`\hat k > 0.7` says the weights' tail is too heavy for the proposal
    to stand in for the target; :math:`\hat k \ge 1`, that their mean is infinite. NaN with fewer
    than 25 finite weights.

    Parameters
    ----------
    log_weights : array of shape (S,)
        :math:`\log w_s = \log \pi(x_s) - \log q(x_s)` up to a constant, :math:`x_s \sim q`.
    """
    lw = np.sort(np.asarray(log_weights, dtype=float))
    lw = lw[np.isfinite(lw)]
    n = lw.size
    m = int(min(0.2 * n, 3.0 * math.sqrt(n)))
    if n < 25 or m < 5:
        return math.nan
    top = lw[-1]
    exceedances = np.exp(lw[-m:] - top) - math.exp(lw[-m - 1] - top)
    if not exceedances.max() > 0:
        return math.nan
    return gpd_shape_mle(exceedances)


def _negative_profile(x, u) -> np.ndarray:
    """``-l_p(t) / n`` (up to a constant) at ``t = expm1(u)`` for each entry of ``u``; inf where undefined."""
    t = np.expm1(u)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        c = np.log1p(t[:, None] * x[None, :]).mean(axis=1)
        value = np.log(c / t) + c + 1.0
    value[t == 0.0] = math.log(x.mean()) + 1.0  # the exponential limit, c -> 0
    return np.where(np.isfinite(value), value, np.inf)


def gpd_shape_mle(exceedances) -> float:
    r"""Maximum-likelihood shape :math:`\hat k` of a generalised Pareto with location 0 fitted to
    ``exceedances``, by its profile likelihood (Grimshaw 1993).

    With :math:`t = k / \sigma`, the likelihood of :math:`(k, \sigma)` is largest over :math:`k` at
    :math:`k(t) = \frac1n \sum_i \log(1 + t x_i)`, which leaves one dimension:

    .. math::
        \ell_p(t) = -n \left(\log \frac{k(t)}{t} + k(t) + 1\right), \qquad t > -1 / \max_i x_i,

    (at :math:`t = 0` the exponential's :math:`-n(\log \bar x + 1)`). :math:`\ell_p` is evaluated on
    a grid of :math:`\log(1 + t)` and each interior local maximum refined by bounded Brent
    (``scipy.optimize.minimize_scalar``); the highest wins. Toward :math:`t \to -1/\max x`
    (:math:`k < -1`) the likelihood is unbounded; a local maximum before it is the estimate, as
    SciPy's Nelder-Mead fit (``scipy.stats.genpareto.fit(x, floc=0)``) finds it, started at
    :math:`k = 1`. Both agree within 2e-4 for :math:`\hat k \in [-0.5, 1.2]` and on which side of
    0.7 every estimate of 3000 random weight tails lies; this takes about 0.3 ms where SciPy's generic
    fit takes 10 (a window end's main cost at :math:`d \le 10`). Only for very heavy tails (most
    exceedances zero next to the largest) or very light ones (:math:`\hat k < -0.5`) do the two differ,
    on the same side of every threshold used.

    Parameters
    ----------
    exceedances : array of shape (n,)
        Non-negative, with a positive largest.
    """
    x = np.asarray(exceedances, dtype=float)
    x = x / x.max()
    grid = _PROFILE_GRID
    values = _negative_profile(x, grid)
    inner = values[1:-1]
    peaks = np.nonzero((inner <= values[:-2]) & (inner <= values[2:]) & np.isfinite(inner))[0] + 1
    if peaks.size:
        def objective(u):  # _negative_profile at one u, without its array overhead (Brent's calls)
            t = math.expm1(u)
            if t == 0.0:
                return math.log(x.mean()) + 1.0
            c = float(np.log1p(t * x).mean())
            ratio = c / t
            return math.log(ratio) + c + 1.0 if ratio > 0.0 and math.isfinite(c) else math.inf

        found = [
            optimize.minimize_scalar(objective, bounds=(grid[i - 1], grid[i + 1]), method="bounded",
                                     options={"xatol": 1e-9})
            for i in peaks
        ]
        u = min(found, key=lambda r: r.fun).x
    else:  # monotone: the estimate runs to an end of the grid
        u = grid[int(np.argmin(values))]
    t = math.expm1(u)
    return float(np.log1p(t * x).mean()) if t != 0.0 else 0.0


def whitened_drift(W) -> float:
    """Root mean square shift between the means of the first and second halves of whitened states.

    About 0.5 or less for a chain that has settled; far above 1 for one still walking toward the
    posterior. NaN with fewer than 200 states (too few to tell).
    """
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[0] < 200:
        return math.nan
    half = W.shape[0] // 2
    return float(np.sqrt(np.mean((W[:half].mean(axis=0) - W[half:].mean(axis=0)) ** 2)))


def log_density_climb(log_densities, dim: int, min_states: int = 200) -> float:
    r"""How far the log density rose between the first and second halves of the last tuning states.

    .. math::
        \frac{\bar\ell_{\text{2nd half}} - \bar\ell_{\text{1st half}}}{\sqrt{d/2}},

    in units of :math:`\sqrt{d/2}`, the sd of the log density of a :math:`d`-dimensional Gaussian
    posterior (it is :math:`-\chi^2_d/2` plus a constant). A chain that has settled has a climb
    near 0 (it can be negative); one still climbing toward the posterior has a large positive one,
    also when only a few of many coordinates are still far out, which :func:`whitened_drift`
    averages away. NaN with fewer than ``min_states`` states or any non-finite log density.

    Pass the exact part of the log density: a kept pseudo-marginal log-estimate is not a function
    of the state, and on a correlated estimator's slowly mixing auxiliary chain its mean over a few
    hundred steps wanders by many times :math:`\sqrt{d/2}` at stationarity.
    """
    lp = np.asarray(log_densities, dtype=float)
    if lp.shape[0] < min_states or not np.all(np.isfinite(lp)):
        return math.nan
    half = lp.shape[0] // 2
    return float((lp[half:].mean() - lp[:half].mean()) / math.sqrt(dim / 2.0))


def gradient_spread(states, gradients) -> np.ndarray:
    r"""Per coordinate, the spread of the last tuning states against the least the gradient allows.

    .. math::
        \kappa_i = \operatorname{sd}(x_i)\,\sqrt{\overline{(\partial_i \log\pi)^2}},

    over states :math:`x` and the gradients of the log density at them. For draws from
    :math:`\pi`, :math:`\kappa_i \ge 1` (Cramér-Rao: integrating by parts,
    :math:`\operatorname{Cov}(X_i, \partial_i \log\pi(X)) = -1`, and Cauchy-Schwarz gives
    :math:`\operatorname{Var}(X_i)\, E[(\partial_i \log\pi)^2] \ge 1`, with equality for a
    Gaussian). It is unchanged by rescaling a coordinate. A chain that barely moves in coordinate
    :math:`i` while the gradient there is steep (a collapsed step, a chain stuck on a ridge) has
    :math:`\kappa_i \ll 1`. NaN everywhere with fewer than 200 states or a non-finite value.
    """
    X = np.asarray(states, dtype=float)
    G = np.asarray(gradients, dtype=float)
    usable = X.ndim == 2 and X.shape[0] >= 200 and X.shape == G.shape
    if not (usable and np.all(np.isfinite(X)) and np.all(np.isfinite(G))):
        return np.full(X.shape[-1] if X.ndim == 2 else 0, math.nan)
    return X.std(axis=0) * np.sqrt(np.mean(G * G, axis=0))


def gradient_slope(gradients) -> np.ndarray:
    r"""Per coordinate, how steadily the log density's gradient kept one sign over the last tuning
    states.

    .. math::
        s_i = \frac{\lvert \overline{\partial_i \log\pi} \rvert}
                  {\sqrt{\overline{(\partial_i \log\pi)^2}}} \in [0, 1].

    Under :math:`\pi` the score has mean zero (integrate :math:`\partial_i \pi` over the line:
    the density vanishes at both ends of an unconstrained coordinate), so for draws from
    :math:`\pi`, :math:`s_i` is of order :math:`1/\sqrt{\text{ESS}}` (at most 0.02-0.35 on GP-DA
    MALA's chains of catalogue posteriors whose draws converged; up to 0.71 on chains that did not
    converge, and 0.94 on one far off: ``benchmarks/results/gradient_slope_calibration.md``). A chain
    still climbing a slope sees a gradient of one sign and similar size at every state: :math:`s_i`
    near 1 (0.9995 in :math:`\mu` for a chain crawling down from :math:`\mu` = 203). Since
    :math:`s_i = (1 + \operatorname{sd}^2/\text{mean}^2)^{-1/2}`, :math:`s_i > 0.9` needs the mean
    gradient to exceed about twice its sd, which the mean over draws from :math:`\pi` does only if
    they hold about one independent draw's information (5% at an ESS of 1, 6e-5 at an ESS of 4). NaN
    everywhere with fewer than 200 states or a non-finite value, and in a coordinate whose gradient
    was 0 throughout.
    """
    G = np.asarray(gradients, dtype=float)
    if not (G.ndim == 2 and G.shape[0] >= 200 and np.all(np.isfinite(G))):
        return np.full(G.shape[-1] if G.ndim == 2 else 0, math.nan)
    rms = np.sqrt(np.mean(G * G, axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(rms > 0, np.abs(G.mean(axis=0)) / rms, math.nan)


def relative_spread(states) -> np.ndarray:
    r"""Per coordinate, the sd of the last tuning states relative to their size.

    .. math::
        r_i = \frac{\operatorname{sd}(x_i)}{\overline{\lvert x_i \rvert}}.

    Unchanged by rescaling a coordinate. Below 1e-12, the chain's moves change only the last four digits
    of a float (float64 resolves 2.2e-16): its step has collapsed (a pseudo-marginal chain held by an
    estimate far too high while tuning shrank its step sizes, then learned each window's covariance
    from those moves: 4e-15 and 5e-14) and its draws repeat one point. A healthy posterior can be far
    narrower than its value (sd 0.5 at 1.7e9: 2.9e-10), so this is no test of a posterior's width.
    NaN everywhere with fewer than 200 states or a non-finite value, and in a coordinate that never
    changed: no move is no collapsed step (the coordinate scan in 115 dimensions proposes each coordinate
    about 9 times in 1000 steps and can reject them all), and the sd of a constant is the rounding of its
    mean (1.5e-14 of its size there, which read as frozen).
    """
    X = np.asarray(states, dtype=float)
    if not (X.ndim == 2 and X.shape[0] >= 200 and np.all(np.isfinite(X))):
        return np.full(X.shape[-1] if X.ndim == 2 else 0, math.nan)
    size = np.mean(np.abs(X), axis=0)
    moved = np.any(X != X[0], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((size > 0) & moved, X.std(axis=0) / size, math.nan)


@dataclass(frozen=True)
class TuningReport:
    r"""What tuning achieved, for the step's end-of-tuning warnings.

    Attributes
    ----------
    tune_steps : int
        Tuning steps taken.
    phase : str
        ``"scan"``, ``"adaptive_metropolis"`` or ``"kameleon"`` at the end of tuning.
    accept_rate : float
        Mean acceptance probability over the last window of tuning, or over its last
        ``first_window`` steps if that window had fewer (NaN if none).
    wants_kameleon : bool
        Whether a Kameleon component was due by the end of tuning: a window ended after
        ``kameleon_after`` steps, where :math:`Z` is drawn. (A window still running when tuning ends
        leaves the chain with the Adaptive Metropolis walk, as tuning shorter than ``kameleon_after``
        does: nothing to report.)
    uncovered : float
        Fraction of the last window's states farther than 3 bandwidths (whitened) from every
        point of :math:`Z`, where the Kameleon term vanishes (NaN before the first :math:`Z`).
    drift : float
        Root mean square, over whitened coordinates, of the shift between the means of the first
        and second halves of the last (up to 1000) tuning states: about 0.5 or less for a chain
        that has settled, far above 1 for one still walking toward the posterior (NaN with fewer
        than 200 states).
    climb : float
        The rise of the log density between the same two halves, in units of :math:`\sqrt{d/2}`
        (:func:`~pymc_kameleon.core.adaptation.diagnostics.log_density_climb`; NaN if the step gave no log
        densities).
    late_climb : float
        The same rise between the two halves of the *last half* of those states (NaN with fewer
        than 400): near 0 for a chain that arrived early in them, whose ``climb`` counts its arrival.
    late_drift : float
        ``drift`` over the last half of those states (NaN with fewer than 400), in the same
        whitened coordinates: small for a chain that arrived early in them.
    spread : float
        The smallest, over coordinates, sd of the same states times the root mean square of the log
        density's gradient there (:func:`~pymc_kameleon.core.adaptation.diagnostics.gradient_spread`):
        at least about 1 for a chain that explores its target, far below for one stuck in some
        coordinate (NaN if the step gave no gradients).
    spread_coordinate : int
        The coordinate where ``spread`` is smallest (-1 if ``spread`` is NaN).
    slope : float
        The largest, over coordinates, :func:`~pymc_kameleon.core.adaptation.diagnostics.gradient_slope`
        of the last half of the same states: small for a chain at the posterior, near 1 for one still
        on a slope toward it (NaN if the step gave no gradients).
    slope_coordinate : int
        The coordinate where ``slope`` is largest (-1 if ``slope`` is NaN).
    relative_spread : float
        The smallest, over coordinates, :func:`~pymc_kameleon.core.adaptation.diagnostics.relative_spread`
        of the same states: below 1e-12 for a chain frozen by a collapsed step (NaN with fewer than
        200 states).
    relative_spread_coordinate : int
        The coordinate where ``relative_spread`` is smallest (-1 if it is NaN).
    """

    tune_steps: int
    phase: str
    accept_rate: float
    wants_kameleon: bool
    uncovered: float
    drift: float = math.nan
    climb: float = math.nan
    spread: float = math.nan
    spread_coordinate: int = -1
    late_climb: float = math.nan
    late_drift: float = math.nan
    slope: float = math.nan
    slope_coordinate: int = -1
    relative_spread: float = math.nan
    relative_spread_coordinate: int = -1
