r"""Multilevel delayed acceptance without PyMC (Lykkegaard, Dodwell, Fox, Mingas and Scheichl 2023).

The target is the finest of the densities :math:`\pi_0, \dots, \pi_L` (coarsest first): cheaper,
approximate versions of :math:`\pi_L` (a coarser mesh, a looser ODE tolerance, a subsample of the data).
One step at level :math:`\ell \ge 1` from :math:`x`:

1. runs a subchain of :math:`J_{\ell-1}` steps at level :math:`\ell - 1` from :math:`x` (each of them
   such a step itself, down to level 0, whose steps are Metropolis-Hastings with the base proposal);
   its last state :math:`y` is the proposal;
2. accepts :math:`y` with

.. math::
    \alpha_\ell(x, y) = 1 \wedge
        \frac{\pi_\ell(y)\, \pi_{\ell-1}(x)}{\pi_\ell(x)\, \pi_{\ell-1}(y)}.

A level's step is reversible with respect to its density: the subchain's :math:`J`-step kernel
:math:`K^J` is reversible with respect to :math:`\pi_{\ell-1}` (by induction from level 0), so it is a
proposal with :math:`\pi_{\ell-1}(x) K^J(x, y) = \pi_{\ell-1}(y) K^J(y, x)`, and the ratio above is the
Metropolis-Hastings ratio for :math:`\pi_\ell` with that proposal. The finest chain is therefore exact
for :math:`\pi_L` however biased the coarse levels are; a poor coarse level only costs acceptance.
With ``randomize_lengths`` each subchain's length is drawn uniformly from :math:`\{1, \dots,
2J - 1\}` (mean :math:`J`) independently of the state: a mixture of reversible kernels, so still exact;
it breaks the periodicity a fixed length can give a subchain that alternates between two states.

A level may be given **relative to the one below** (:class:`RelativeLevel`): :math:`\log\pi_\ell(x) =
\log\pi_{\ell-1}(x) + c_\ell(x)` with a cheap correction :math:`c_\ell` (a GP of the next finer level's
excess over level :math:`\ell - 1`). Its value reuses :math:`\pi_{\ell-1}(x)`, known wherever level
:math:`\ell` is evaluated (every proposal to level :math:`\ell` is the end of a level-:math:`(\ell-1)`
subchain), and its ratio is :math:`1 \wedge e^{c_\ell(y) - c_\ell(x)}`; a fixed :math:`c_\ell` is a fixed
density, so the chain stays exact.

In the code the states are ``current`` and ``proposed``; a :class:`LevelPoint` carries a point with its
log densities at the levels evaluated there (NaN above). The base proposal is any
:class:`~pymc_kameleon.core.proposals.Proposal`, frozen for an exact chain (the steps freeze it after
tuning); during tuning every level-0 step is reported to ``on_base_step``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from pymc_kameleon.core.mh import metropolis_accept, metropolis_hastings_step

__all__ = [
    "LevelPoint",
    "MultilevelCounts",
    "MultilevelDelayedAcceptance",
    "RelativeLevel",
    "multilevel_log_ratio",
    "narrowest_variance_ratio",
]


class RelativeLevel:
    r"""A level given relative to the one below: :math:`\log\pi_\ell(x) = \log\pi_{\ell-1}(x) + c(x)`.

    Parameters
    ----------
    correction : callable
        :math:`x \mapsto c(x)`, a float (finite, or NaN for a rejection).
    """

    def __init__(self, correction: Callable[[np.ndarray], float]):
        self.correction = correction


@dataclass(frozen=True)
class LevelPoint:
    """A point and its log densities: ``logp[l]`` is :math:`\\log\\pi_l` at ``x`` (NaN if not evaluated)."""

    x: np.ndarray
    logp: tuple

    def at(self, level: int) -> float:
        return self.logp[level]

    def with_level(self, level: int, value: float) -> LevelPoint:
        logp = list(self.logp)
        logp[level] = float(value)
        return LevelPoint(self.x, tuple(logp))


@dataclass
class MultilevelCounts:
    """What one finest-level step did, per level (index 0 the coarsest).

    Attributes
    ----------
    evaluations : list of int
        Log-density evaluations of each level.
    steps, accepted : list of int
        Steps taken at each level and how many moved (level 0: MH steps; level l: delayed-acceptance
        decisions on a subchain's end).
    subchain_lengths : list of int
        The length of the last subchain run at each level below the finest.
    accept_prob : list of float
        The acceptance probability of the last decision at each level (NaN if none).
    finest_proposal : array of shape (d,) or None
        Where the finest level was evaluated in this step (None if its subchain did not move).
    """

    evaluations: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    accepted: list = field(default_factory=list)
    subchain_lengths: list = field(default_factory=list)
    accept_prob: list = field(default_factory=list)
    finest_proposal: np.ndarray | None = None

    @classmethod
    def zeros(cls, n_levels: int) -> MultilevelCounts:
        zeros = [0] * n_levels
        return cls(list(zeros), list(zeros), list(zeros), [0] * (n_levels - 1), [math.nan] * n_levels)


def multilevel_log_ratio(current: LevelPoint, proposed: LevelPoint, level: int) -> float:
    r""":math:`\log\alpha_\ell`'s ratio: :math:`\log\pi_\ell(y) - \log\pi_\ell(x) + \log\pi_{\ell-1}(x) -
    \log\pi_{\ell-1}(y)`; :math:`-\infty` where :math:`\pi_\ell(y)` is not finite. NaN only if an input is."""
    fine_y = proposed.at(level)
    if not math.isfinite(fine_y):
        return -math.inf
    return fine_y - current.at(level) + current.at(level - 1) - proposed.at(level - 1)


class MultilevelDelayedAcceptance:
    r"""Multilevel delayed acceptance on densities ``log_densities`` (coarsest first).

    Parameters
    ----------
    log_densities : sequence of callables or RelativeLevel
        ``log_densities[l](x)`` is :math:`\log\pi_l(x)` (may be -inf or NaN: a rejection), for
        :math:`l = 0, \dots, L` with :math:`L \ge 1`; a :class:`RelativeLevel` (not at level 0 nor
        :math:`L`) gives :math:`\log\pi_l` as :math:`\log\pi_{l-1}` plus its correction.
    subchain_lengths : sequence of int
        :math:`J_0, \dots, J_{L-1}`: the level-:math:`l` steps of the subchain that proposes at level
        :math:`l + 1` (each at least 1).
    proposal : Proposal
        The base proposal of level 0's Metropolis-Hastings steps.
    randomize_lengths : bool
        Draw each subchain's length uniformly from :math:`\{1, \dots, 2J_l - 1\}`.
    """

    def __init__(
        self,
        log_densities: Sequence[Callable[[np.ndarray], float]],
        subchain_lengths: Sequence[int],
        proposal,
        *,
        randomize_lengths: bool = False,
    ):
        if len(log_densities) < 2:
            raise ValueError(
                f"multilevel delayed acceptance needs at least 2 levels, got {len(log_densities)}."
            )
        if len(subchain_lengths) != len(log_densities) - 1:
            raise ValueError(
                f"expected {len(log_densities) - 1} subchain lengths (one per level below the finest), "
                f"got {len(subchain_lengths)}."
            )
        for length in subchain_lengths:
            if int(length) != length or length < 1:
                raise ValueError(f"subchain lengths must be integers >= 1, got {list(subchain_lengths)!r}.")
        for level, density in enumerate(log_densities):
            if isinstance(density, RelativeLevel) and level in (0, len(log_densities) - 1):
                raise ValueError(
                    "a level relative to the one below can be neither the coarsest (there is none below) "
                    f"nor the finest (the target), got one at level {level} of {len(log_densities)}."
                )
        self.log_densities = list(log_densities)
        self.subchain_lengths = [int(j) for j in subchain_lengths]
        self.proposal = proposal
        self.randomize_lengths = bool(randomize_lengths)
        self.n_levels = len(self.log_densities)
        self._on_evaluation = None
        self._on_state = None

    @property
    def finest(self) -> int:
        return self.n_levels - 1

    def point(self, x, logp_finest: float | None = None) -> LevelPoint:
        """``x`` with every level's log density evaluated (the finest's given, if known)."""
        x = np.asarray(x, dtype=float)
        point = LevelPoint(x, (math.nan,) * self.n_levels)
        for level in range(self.finest):
            point = point.with_level(level, self.log_density(level, point))
        finest = self.log_density(self.finest, point) if logp_finest is None else float(logp_finest)
        return point.with_level(self.finest, finest)

    def log_density(self, level: int, point: LevelPoint) -> float:
        r""":math:`\log\pi_\ell` at ``point`` (a relative level reads the level below from ``point``)."""
        density = self.log_densities[level]
        if isinstance(density, RelativeLevel):
            return point.at(level - 1) + float(density.correction(point.x))
        return float(density(point.x))

    def step(self, current: LevelPoint, rng, on_base_step=None,
             on_evaluation=None, on_state=None) -> tuple[LevelPoint, MultilevelCounts]:
        """One step of the finest level from ``current`` (every level's log density known there).

        ``on_base_step(mh_step, start)`` is called after every level-0 step with its
        :class:`~pymc_kameleon.core.mh.MHStep` and the :class:`LevelPoint` it started from, for the base
        proposal's adaptation during tuning. ``on_evaluation(level, point)`` is called after every
        evaluation of a level above 0 at a subchain's end (``point`` holds that level's value and those
        below), for what learns from them (a GP level). ``on_state(level, point)`` is called after every
        step of a level between the coarsest and the finest with the state its chain is in after it (for
        what learns from that level's chain: the adaptive error model).
        Returns the new point and the counts of this step.
        """
        counts = MultilevelCounts.zeros(self.n_levels)
        self._on_evaluation = on_evaluation
        self._on_state = on_state
        return self._step(self.finest, current, rng, counts, on_base_step), counts

    def coarsest_run(self, start: LevelPoint, steps: int, rng) -> np.ndarray:
        """The states of ``steps`` level-0 Metropolis-Hastings steps from ``start`` with the base proposal:
        a chain of the coarsest density alone (shape ``(steps, d)``)."""
        counts = MultilevelCounts.zeros(self.n_levels)
        current = LevelPoint(np.asarray(start.x, dtype=float), (start.at(0),) + (math.nan,) * self.finest)
        states = np.empty((int(steps), current.x.size))
        for i in range(int(steps)):
            current = self._base_step(current, rng, counts, None)
            states[i] = current.x
        return states

    def _subchain_length(self, level: int, rng) -> int:
        length = self.subchain_lengths[level]
        if self.randomize_lengths and length > 1:
            return int(rng.integers(1, 2 * length))
        return length

    def _step(self, level: int, current: LevelPoint, rng, counts, on_base_step) -> LevelPoint:
        counts.steps[level] += 1
        if level == 0:
            return self._base_step(current, rng, counts, on_base_step)
        length = self._subchain_length(level - 1, rng)
        counts.subchain_lengths[level - 1] = length
        proposed = current
        for _ in range(length):
            proposed = self._step(level - 1, proposed, rng, counts, on_base_step)
            if self._on_state is not None and level - 1 > 0:
                self._on_state(level - 1, proposed)
        if proposed.x is current.x:  # the subchain never moved: the proposal is the current state
            metropolis_accept(0.0, rng)  # the uniform the decision draws, so the stream is the same
            counts.accept_prob[level] = 1.0
            return current
        counts.evaluations[level] += 1
        if level == self.finest:
            counts.finest_proposal = proposed.x
        proposed = proposed.with_level(level, self.log_density(level, proposed))
        if self._on_evaluation is not None:
            self._on_evaluation(level, proposed)
        log_ratio = multilevel_log_ratio(current, proposed, level)
        accepted, counts.accept_prob[level] = metropolis_accept(log_ratio, rng)
        if accepted:
            counts.accepted[level] += 1
            return proposed
        return current

    def _base_step(self, current: LevelPoint, rng, counts, on_base_step) -> LevelPoint:
        coarsest = self.log_densities[0]
        result = metropolis_hastings_step(
            self.proposal, current.x, current.at(0), lambda x: _Value(float(coarsest(x))), rng
        )
        counts.evaluations[0] += result.evaluation is not None  # an infeasible move is not evaluated
        counts.accept_prob[0] = result.accept_prob
        if on_base_step is not None:
            on_base_step(result, current)
        if not result.accepted:
            return current
        counts.accepted[0] += 1
        nan = (math.nan,) * (self.n_levels - 1)
        return LevelPoint(result.state, (result.evaluation.logp, *nan))


def narrowest_variance_ratio(coarse_states, fine_states) -> tuple[float, np.ndarray]:
    r"""The smallest ratio of the coarse states' variance to the fine states' over a fixed set of
    directions: the coordinate axes and the eigenvectors of the fine states' covariance :math:`S_f`,
    :math:`\min_v v^\top S_c v / v^\top S_f v`, with its direction :math:`v` (unit length).

    Fixed directions, not the generalised eigenvalues of :math:`(S_c, S_f)`: their smallest is the
    minimum over every direction, which sampling noise alone pulls down as the dimension grows.

    Parameters
    ----------
    coarse_states, fine_states : arrays of shape (n, d)
    """
    coarse = np.atleast_2d(np.cov(np.asarray(coarse_states, dtype=float), rowvar=False))
    fine = np.atleast_2d(np.cov(np.asarray(fine_states, dtype=float), rowvar=False))
    _, vectors = np.linalg.eigh(fine)
    directions = np.concatenate([np.eye(fine.shape[0]), vectors.T])
    fine_var = np.einsum("ij,jk,ik->i", directions, fine, directions)
    coarse_var = np.einsum("ij,jk,ik->i", directions, coarse, directions)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(fine_var > 0, coarse_var / fine_var, np.inf)
    k = int(np.argmin(ratios))
    return float(ratios[k]), directions[k]


@dataclass(frozen=True)
class _Value:
    logp: float
