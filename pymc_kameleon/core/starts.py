r"""Starts that find the posterior: a short gradient-free search before tuning (no PyMC).

A chain that starts in the basin of a minor mode (Lotka-Volterra's large-noise mode, 40 nats below
the posterior) usually tunes there, and so may every chain of a population that starts at one
point. Before tuning, :func:`search_start` runs Powell's method (``scipy.optimize``, no gradients)
for a short budget from a few dispersed candidates (prior draws) and returns the best point it
reached. Each run need not converge: it only has to end in the right basin, where tuning takes over.

Optimising a log density has one well-known trap: a hierarchical model's density is unbounded in its
funnel's neck (eight schools, centred: :math:`\tau \to 0`), so an optimiser runs there, far outside
where the posterior's mass is. A point the search reaches is therefore kept only if it is
**plausible**: every coordinate lies within the range of many prior draws (:class:`PlausibleBox`).
The neck of a funnel, far below the prior's range of :math:`\log\tau`, is not; a posterior's bulk
almost always is (a posterior outside its prior's range keeps its start: nothing is lost). A first
version widened the range by half on each side: with a half-Cauchy prior on :math:`\tau` that let
:math:`\tau` down to about 1e-4, and on the centred eight schools a chain started in the neck.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import optimize

__all__ = [
    "NO_FINITE_VALUE", "SEARCH_EVALS_PER_DIM", "SEARCH_MAX_EVALS", "PlausibleBox", "SearchResult",
    "powell_run", "search_start",
]

#: Log-density evaluations each candidate's Powell run may make, per dimension (at most
#: SEARCH_MAX_EVALS): enough to leave a far prior draw and reach a basin (on Lotka-Volterra's lynx-hare
#: posterior 4 of 6 prior draws ended in the posterior's basin after 50 d), not to converge.
SEARCH_EVALS_PER_DIM = 50
#: Cap on one run's evaluations: in 50 dimensions 50 d would be 2500, more than a quarter of a typical
#: chain's 9000 steps.
SEARCH_MAX_EVALS = 1000
# Powell's tolerances: loose, as the run only needs the basin.
_XTOL, _FTOL = 1e-2, 1e-4
#: What the minimised objective of :func:`powell_run` returns where the log density is not finite (a
#: finite stand-in, so that the line search keeps going): a result this large found no finite point.
NO_FINITE_VALUE = 1e300


@dataclass(frozen=True)
class PlausibleBox:
    r"""Where a found start may lie: per coordinate, the range :math:`[\ell, u]` of prior draws;
    unbounded where ``lower``/``upper`` are infinite (a flat prior).

    Attributes
    ----------
    lower, upper : arrays of shape (d,)
    """

    lower: np.ndarray
    upper: np.ndarray

    @classmethod
    def from_draws(cls, draws: np.ndarray, unbounded: np.ndarray | None = None) -> PlausibleBox:
        """The range of ``draws`` (shape ``(n, d)``); coordinates where ``unbounded`` is True are free."""
        draws = np.atleast_2d(np.asarray(draws, dtype=float))
        lower, upper = draws.min(axis=0), draws.max(axis=0)
        if unbounded is not None:
            lower = np.where(unbounded, -np.inf, lower)
            upper = np.where(unbounded, np.inf, upper)
        return cls(lower, upper)

    def contains(self, x) -> bool:
        x = np.asarray(x, dtype=float)
        return bool(np.all(np.isfinite(x)) and np.all(x >= self.lower) and np.all(x <= self.upper))

    def widened(self, factor: float) -> PlausibleBox:
        r"""The box about the same centre with ``factor`` times the half-widths,
        :math:`c \pm f (u - \ell) / 2` with :math:`c = (\ell + u) / 2`; unbounded coordinates stay so."""
        bounded = np.isfinite(self.lower) & np.isfinite(self.upper)
        # Bounds only where bounded: -inf + inf would be NaN with NumPy's "invalid value" warning (a
        # pm.Flat's coordinate), which a user's warnings filter can turn into an error.
        lower, upper = np.where(bounded, self.lower, 0.0), np.where(bounded, self.upper, 0.0)
        centre = 0.5 * (lower + upper)
        half = np.where(bounded, 0.5 * factor * (upper - lower), np.inf)
        return PlausibleBox(centre - half, centre + half)


@dataclass(frozen=True)
class SearchResult:
    """What :func:`search_start` found.

    Attributes
    ----------
    state : array of shape (d,)
        The best plausible point reached (the given start if none beat it).
    log_density : float
    n_evals : int
        Log-density evaluations made, all candidates together.
    moved : bool
        Whether ``state`` differs from the given start.
    """

    state: np.ndarray
    log_density: float
    n_evals: int
    moved: bool


def powell_run(
    log_density: Callable[[np.ndarray], float], x0, max_evals: int, xtol: float = _XTOL, ftol: float = _FTOL
) -> tuple[np.ndarray, float, int]:
    """One candidate's run of Powell's method on :math:`-\\log\\pi`: ``(point reached, -log density
    there (or a huge number), evaluations made)``. Non-finite values count as :math:`+\\infty`.
    ``xtol``, ``ftol``: Powell's tolerances (by default loose: a start only needs the basin)."""
    n_evals = 0
    users_errstate = np.geterr()

    def objective(x):
        nonlocal n_evals
        n_evals += 1
        with np.errstate(**users_errstate):  # the model's own floating-point warnings stay the user's
            value = float(log_density(x))
        # Brent's line search needs finite values: a non-finite density is just very bad.
        return -value if math.isfinite(value) else NO_FINITE_VALUE

    # The line search's arithmetic on NO_FINITE_VALUE overflows harmlessly (a new user saw "overflow
    # encountered in scalar multiply" from scipy, with nothing wrong).
    with np.errstate(over="ignore"):
        found = optimize.minimize(
            objective, x0, method="Powell", options={"maxfev": int(max_evals), "xtol": xtol, "ftol": ftol}
        )
    return np.array(found.x, dtype=float), float(found.fun), n_evals


def search_start(
    log_density: Callable[[np.ndarray], float],
    start: np.ndarray,
    start_log_density: float,
    candidates: np.ndarray,
    box: PlausibleBox,
    max_evals: int,
    run_elsewhere: Callable | None = None,
) -> SearchResult:
    r"""The highest-density plausible point that Powell runs from ``candidates`` reach, or ``start``.

    Each candidate :math:`x_0^{(k)}` starts a run of Powell's method on :math:`-\log\pi` limited to
    ``max_evals`` evaluations (:func:`powell_run`). Of the points the runs end at, those inside
    ``box`` compete with ``start`` (not searched from: it is the chain's given start, shared by every
    chain of a population): the one with the highest :math:`\log\pi` is returned.

    Parameters
    ----------
    log_density : callable
        :math:`x \mapsto \log\pi(x)` (may return -inf or NaN).
    start : array of shape (d,)
    start_log_density : float
    candidates : array of shape (k, d)
        Where the runs start (prior draws).
    box : PlausibleBox
    max_evals : int
        Evaluations per run.
    run_elsewhere : callable, optional
        ``run_elsewhere(x0, max_evals)`` starts :func:`powell_run` from ``x0`` on another worker and
        returns a ``concurrent.futures.Future`` of its result (or None if it could not): the runs
        of all candidates but the first go there, while the first runs here. The runs do not depend
        on each other, so the result is the same.

    Returns
    -------
    SearchResult
    """
    best, best_logp = np.array(start, dtype=float, copy=True), float(start_log_density)
    if not math.isfinite(best_logp):
        best_logp = -math.inf
    candidates = np.atleast_2d(candidates)
    elsewhere = [None] + [run_elsewhere(x0, max_evals) for x0 in candidates[1:]] if run_elsewhere else []
    n_evals, moved = 0, False
    for k, x0 in enumerate(candidates):
        run = None
        if k < len(elsewhere) and elsewhere[k] is not None:
            try:
                run = elsewhere[k].result()
            except Exception:  # noqa: BLE001 - a lost run is run here instead
                run = None
        if run is None:
            run = powell_run(log_density, x0, max_evals)
        x, fun, evals = run
        n_evals += evals
        logp = -fun
        if fun < NO_FINITE_VALUE and logp > best_logp and box.contains(x):
            best, best_logp, moved = np.array(x, dtype=float), logp, True
    return SearchResult(best, best_logp, n_evals, moved)
