"""MLDA's check of a coarsest model whose posterior is narrower than the fine one's.

MLDA is exact whatever its coarse models, but where the coarse posterior is narrower than the fine one
its subchains pull every proposal back towards the coarse bulk, the fine chain rarely reaches the fine
posterior's tails, and the draws under-cover them while R-hat and ESS look fine: a coarse sd 0.6 times
the fine one gave sds 5-13% and 99% quantiles about 20% too small, with R-hat <= 1.002
(``benchmarks/mlda_narrow_coarse.py``). The importance weights :math:`\\pi_L / \\pi_0` then have a tail of
Pareto shape :math:`1 - r^2` for a sd ratio :math:`r`: infinite variance below :math:`r = 0.71`.

At the end of tuning the chain runs the coarsest level alone (its frozen base proposal, a side stream:
the draws are unchanged; the evaluations count in the first draw's ``level0_logp_evals``; not in a
``CompoundStep`` with other variables, whose values the run would hold fixed), and compares
that run's spread with its own first :data:`COARSE_SPREAD_DRAWS` draws (or more, until their effective
sample is large enough to judge by) along the coordinates and the draws' principal axes
(:func:`~pymc_kameleon.core.multilevel.narrowest_variance_ratio`). Two detections were tried before and
dropped (``benchmarks/results/mlda_narrow_coarse.md``): the per-chain Pareto
k-hat of the level log ratios (too noisy) and the base proposal's learned covariance (it follows the
subchains, which restart at the fine states, so it lies between the two posteriors' spreads).
"""

from __future__ import annotations

import math

import arviz as az
import numpy as np

from pymc_kameleon.core.multilevel import narrowest_variance_ratio
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.steps.agreement import CROSS_CHAIN_MORE_DRAWS, coordinate_name
from pymc_kameleon.steps.chain import side_stream

__all__ = [
    "COARSE_SPREAD_CHECKPOINTS", "COARSE_SPREAD_DRAWS", "NARROW_VARIANCE_RATIO", "SPREAD_VERDICT_Z",
    "CoarseSpreadCheck", "CoarseSpreadChecks", "coarse_probe_steps",
]

#: Draws after which a chain first compares the coarsest level's spread with its own: PyMC's default
#: number; then after twice, four and eight times as many, until the verdict is sure
#: (:data:`SPREAD_VERDICT_Z`; else it says nothing).
COARSE_SPREAD_DRAWS = CROSS_CHAIN_MORE_DRAWS
COARSE_SPREAD_CHECKPOINTS = tuple(COARSE_SPREAD_DRAWS * 2**k for k in range(4))
#: How sure a verdict must be: the ratio's log, give or take this many standard errors (about
#: sqrt(2 / ESS) for each variance, ArviZ's bulk ESS along the direction, the draws' and the run's), must
#: lie below log 0.5 for a warning, or above it to stop looking; in between the chain looks again at the
#: next checkpoint. With a bare threshold, a chain whose coarse posterior was as wide as the fine one but
#: 1 sd off (fine acceptance 47%, about 60 effective draws in 1000) came out at 0.49 and was warned; at a
#: coarse sd 0.8 times the fine one (ratio about 0.64) the ratio minus one standard error stayed above 0.5
#: in 12 of 12 chains, and 1.5 standard errors missed 4 of 12 chains at 0.6 (one the worst-covered run).
SPREAD_VERDICT_Z = 1.0
#: The variance ratio below which the coarsest posterior is called narrower: a sd ratio of 0.71, where the
#: importance weights' variance becomes infinite. On the normal mean of mlda_narrow_coarse.py the ratio at
#: the end of tuning came out at 0.06-0.62 for r = 0.5, 0.39-0.61 for 0.6, 0.54-0.85 for 0.8 and
#: 0.87-1.35 for 1 (8 chains each; against 500 tuning states rather than 1000 draws).
NARROW_VARIANCE_RATIO = 0.5


def coarse_probe_steps(dim: int, tuning_steps: int | None = None) -> int:
    """Coarsest-level steps of the run at the end of tuning: 1000 per dimension (a tuned walk's
    effective sample is about a third of its steps over d), between 4000 and 20 000, and at most the
    ``tuning_steps`` tuning made on the coarsest level (so the check at most doubles tuning's coarse
    cost; fewer steps only widen the verdict's standard error)."""
    steps = int(min(max(1000 * dim, 4000), 20_000))
    return steps if tuning_steps is None else max(min(steps, int(tuning_steps)), 1)


class CoarseSpreadCheck:
    """The coarsest level's run at the end of tuning, compared with the chain's first draws.

    Parameters
    ----------
    coarse_states : array of shape (n, d)
        The coarsest level's run (:meth:`~pymc_kameleon.core.multilevel.MultilevelDelayedAcceptance.
        coarsest_run`); its first tenth is dropped (it starts at the fine chain's state).
    names : list of str
        The coordinates' names, for the warning.
    """

    def __init__(self, coarse_states, names):
        states = np.asarray(coarse_states, dtype=float)
        self.coarse_states = states[len(states) // 10 :]
        self.names = list(names)
        self.draws = np.empty((COARSE_SPREAD_CHECKPOINTS[-1], states.shape[1]))
        self.n = 0
        self.done = False

    def record(self, x) -> str | None:
        """Add one draw. At a checkpoint (:data:`COARSE_SPREAD_CHECKPOINTS`) where the verdict is sure
        (:data:`SPREAD_VERDICT_Z`), the warning's text if the coarsest posterior is narrower (else None);
        then nothing more."""
        if self.done:
            return None
        self.draws[self.n] = x
        self.n += 1
        if self.n not in COARSE_SPREAD_CHECKPOINTS:
            return None
        draws = self.draws[: self.n]
        ratio, direction = narrowest_variance_ratio(self.coarse_states, draws)
        margin = SPREAD_VERDICT_Z * _log_ratio_se(draws @ direction, self.coarse_states @ direction)
        log_gap = math.log(ratio) - math.log(NARROW_VARIANCE_RATIO) if ratio > 0 else -math.inf
        self.done = self.n == COARSE_SPREAD_CHECKPOINTS[-1] or abs(log_gap) > margin
        if not log_gap < -margin:
            return None  # as wide, or not yet sure: look again at the next checkpoint, if any
        where, steps, wide = self._where(direction), len(self.coarse_states), np.sqrt(ratio)
        return (
            f"MLDA: the coarsest model's posterior is narrower than the fine one's: along {where} the "
            f"coarsest level alone ({steps} steps after tuning) spreads {wide:.2g} times as wide as this "
            f"chain's first {self.n} draws (below {np.sqrt(NARROW_VARIANCE_RATIO):.2g}). MLDA "
            "stays exact, but its proposals then rarely reach the fine posterior's tails, and the draws "
            "under-cover them without R-hat or ESS showing it (a coarse sd 0.6 times the fine one gave sds "
            "5-13% and 99% quantiles about 20% too small). Make the coarse model at least as wide as the "
            "fine one: a fixed noise sd no smaller than the fine model's, or its log-likelihood scaled by a "
            "factor below 1 (pm.Potential), which widens it whatever its parameters; or sample with "
            "GPDelayedAcceptanceMH or KameleonMetropolis."
        )

    def _where(self, direction) -> str:
        """The direction in the user's words: a coordinate, or the ones that lead a combination."""
        weights = np.abs(direction)
        order = np.argsort(weights)[::-1]
        names = self.names if len(self.names) == len(direction) else None
        if weights[order[0]] >= 0.95:
            return coordinate_name(names, order[0])
        led = " and ".join(coordinate_name(names, i) for i in order[:2])
        return f"a combination led by {led}"


def _log_ratio_se(fine_projected, coarse_projected) -> float:
    """The standard error of the log of the two series' variance ratio: sqrt(2 / ESS) for each variance
    (ArviZ's bulk ESS); infinite where a series is constant."""
    variance = 0.0
    for series in (fine_projected, coarse_projected):
        if np.ptp(series) == 0:
            return math.inf
        ess = float(az.ess(np.asarray(series, dtype=float)[None, :]))
        variance += 2.0 / max(ess, 1.0)
    return math.sqrt(variance)


class CoarseSpreadChecks:
    """A mixin of :class:`~pymc_kameleon.MLDA`: the coarsest level's run when tuning ends, and the check
    of the draws against it (reads the step's chain, rng, coordinate names and warnings)."""

    def _start_coarse_spread_check(self) -> None:
        """When tuning ends (the base proposal frozen): run the coarsest level alone, on a side stream."""
        chain = self._chain
        chain.coarse_spread = None
        # In a CompoundStep the run would hold the other steps' variables at their current values, while
        # the draws move with them: a discrete switch between two means made the draws of x 1.6 times as
        # wide as the run, with the coarse model as wide as the fine one.
        if chain.current is None or chain.adaptation.tune_steps == 0 or self._target.shared:
            return
        steps = coarse_probe_steps(self.dim, chain.adaptation.tune_steps)
        states = chain.move.coarsest_run(chain.current, steps, side_stream(self.rng))
        chain.coarse_spread = CoarseSpreadCheck(states, self._coordinate_names)

    def _check_coarse_spread(self) -> None:
        """After tuning: record the draw; at the last one the check needs, warn if the coarsest posterior is
        narrower than the fine one."""
        check = self._chain.coarse_spread
        if check is None or self.tune:
            return
        message = check.record(self._chain.current.x)
        if check.done:
            self._chain.coarse_spread = None
        if message:
            self._warnings.warn(message, KameleonWarning, stacklevel=4)
