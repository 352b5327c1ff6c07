r"""Regions a chain sat in during tuning that the draws never reach: a mode left behind (decision record
0059).

Adaptation makes a chain that left a mode unlikely to return: once every chain is in one mode, the
learned covariance is that mode's, and a proposal that size does not reach another mode some
distance away. Two equal-mass modes in two dimensions, N(-3, 0.1^2 I) and N(3, I), two chains started
in each: at one seed of three both chains in the wide mode crossed to the narrow one within 330
tuning steps, and every draw of the four chains stayed there; split R-hat 1.001, nothing said. R-hat
cannot see a mode no chain is in, but the chains' tuning saw it.

So each chain keeps, per block of :data:`BLOCK_STEPS` tuning steps, the mean and covariance of its
states and its mean log density (:class:`TuningBlocks`), and after the first draws
:func:`regions_left_behind` compares them with the draws: a block is a region left behind when

- the chain settled there (it moved in at least :data:`~.mode_mass.MIN_MOVED` of the block's steps and
  its log density did not climb by more than :data:`~.diagnostics.CLIMB_LIMIT` :math:`\sqrt{d/2}` between the
  block's halves: a chain walking in is on its way, not in a mode);
- no draw comes near: the nearest, in the metric of the block's covariance plus the draws'
  (:math:`(x - \mu_b)^\top (S_b + S)^{-1} (x - \mu_b)`), lies beyond the :math:`1 - 10^{-4}` quantile
  of :math:`\chi^2_d`;
- and the region holds at least :math:`e^{-3}` (:data:`LEFT_NATS`) of the draws' mass. A Gaussian
  mode's log mass is its mean log density plus :math:`\tfrac12\log|\Sigma|` plus a constant
  (:mod:`.mode_mass`), so the block's :math:`\bar\ell_b + \tfrac12\log|S_b|` is compared with the draws'
  :math:`\bar\ell + \tfrac12\log|S|`. A block sees part of its mode, so its spread, and the mass, err
  low: the check errs towards silence.
"""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

import numpy as np
from scipy import linalg, stats

from pymc_kameleon.core.adaptation.diagnostics import CLIMB_LIMIT, log_density_climb
from pymc_kameleon.core.adaptation.mode_mass import (
    MIN_MOVED,
    whitened_half_log_det,
    whitened_half_log_det_bound,
)

__all__ = ["BLOCK_STEPS", "LEFT_NATS", "MAX_DIM", "Block", "BlockMargins", "LeftRegion", "TuningBlocks",
           "block_margins", "regions_left_behind"]

#: Tuning steps per block (as many as between two rescue checks).
BLOCK_STEPS = 100
#: A region left behind is said if it holds at least e^-LEFT_NATS of the draws' mass (3 nats: about a
#: twentieth).
LEFT_NATS = 3.0
#: Tail probability of chi^2_d beyond which no draw is near a block.
FAR_TAIL = 1e-4
# Nats by which the volume's bound may err in rounding (its trace and the eigenvalues are computed apart).
_BOUND_MARGIN = 1e-6
#: Blocks kept (the latest): 2 MB at d = 50.
MAX_BLOCKS = 100
#: Largest dimension judged: a block's states span at most BLOCK_STEPS - 1 directions, so from d = 100 on
#: its covariance is singular and says nothing of a region's mass (and 100 blocks of d x d would cost
#: 80 MB a chain at d = 1000).
MAX_DIM = BLOCK_STEPS - 1


class Block(NamedTuple):
    """One block of a chain's tuning states: steps ``start`` to ``end`` (exclusive), their mean and
    covariance (model coordinates) and mean log density."""

    start: int
    end: int
    mean: np.ndarray
    cov: np.ndarray
    mean_log_density: float


class LeftRegion(NamedTuple):
    """Consecutive blocks left behind: tuning steps ``start`` to ``end``; ``distance``, the nearest draw's
    :math:`\\sqrt{(x - \\mu_b)^\\top (S_b + S)^{-1} (x - \\mu_b)}` (the least over the blocks);
    ``mass_nats``, the region's log mass minus the draws' (the largest over the blocks)."""

    start: int
    end: int
    distance: float
    mass_nats: float


class TuningBlocks:
    """A chain's tuning states and log densities, summarised per block of ``block_steps`` steps.

    Only blocks where the chain settled are kept (see the module docstring), at most
    :data:`MAX_BLOCKS` of them.
    """

    def __init__(self, dim: int, block_steps: int = BLOCK_STEPS):
        self.dim = int(dim)
        self.block_steps = int(block_steps)
        self.blocks: deque[Block] = deque(maxlen=MAX_BLOCKS)
        self.steps = 0
        self._states = np.empty((self.block_steps, self.dim if self.dim <= MAX_DIM else 0))
        self._log_density = np.empty(self.block_steps)
        self._filled = 0

    def record(self, state, log_density: float) -> None:
        """One tuning step's state and (exact) log density (nothing kept above :data:`MAX_DIM`)."""
        self.steps += 1
        if self.dim > MAX_DIM:
            return
        self._states[self._filled] = state
        self._log_density[self._filled] = log_density
        self._filled += 1
        if self._filled == self.block_steps:
            self._filled = 0
            self._close()

    def restart(self) -> None:
        """The chain jumped (a rescue): the block under way mixes two places, and is dropped."""
        self._filled = 0

    def _close(self) -> None:
        states, log_density = self._states, self._log_density
        moved = np.any(states[1:] != states[:-1], axis=1).mean()
        climb = log_density_climb(log_density, self.dim, min_states=2)
        if moved < MIN_MOVED or not climb <= CLIMB_LIMIT:  # NaN: a non-finite log density
            return
        cov = np.atleast_2d(np.cov(states, rowvar=False))
        self.blocks.append(
            Block(self.steps - len(states), self.steps, states.mean(axis=0), cov, float(log_density.mean()))
        )


class BlockMargins(NamedTuple):
    r"""How far one block is from being said: ``mass_nats``, its log mass minus the draws' (said from
    -:data:`LEFT_NATS`); ``nearest``, the nearest draw's squared distance in the block's metric, and
    ``far``, the :math:`\chi^2_d` quantile it must exceed."""

    block: Block
    mass_nats: float
    nearest: float
    far: float

    @property
    def said(self) -> bool:
        return self.mass_nats >= -LEFT_NATS and self.nearest > self.far


def block_margins(blocks, draws, draws_log_density, candidates_only: bool = False) -> list[BlockMargins]:
    """Each block's :class:`BlockMargins` against the draws (see :func:`regions_left_behind` for the
    arguments); empty if there is nothing to compare, or if the draws' covariance cannot be factorised,
    and without the blocks whose metric cannot be. ``candidates_only``: only what
    :func:`regions_left_behind` reads, at a fraction of the cost: a block whose mass cannot reach
    -:data:`LEFT_NATS` by an upper bound of its volume (:func:`~.mode_mass.whitened_half_log_det_bound`)
    is left out, and one whose mass is below it gets no distance to the draws (``nearest`` NaN). Neither
    is said."""
    draws = np.asarray(draws, dtype=float)
    values = np.asarray(draws_log_density, dtype=float)
    values = values[np.isfinite(values)]
    if not len(blocks) or draws.ndim != 2 or draws.shape[0] < 2 or values.size == 0:
        return []
    d = draws.shape[1]
    cov = np.atleast_2d(np.cov(draws, rowvar=False))
    try:
        factor = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        return []
    far = stats.chi2.isf(FAR_TAIL, d)
    draws_mass = float(values.mean())  # + 1/2 log|S| = 0 in the draws' whitening
    margins = []
    if candidates_only:
        inverse = linalg.cho_solve((factor, True), np.eye(d), check_finite=False)
    for block in blocks:
        if candidates_only:
            bound = block.mean_log_density + whitened_half_log_det_bound(block.cov, inverse) - draws_mass
            if not bound >= -LEFT_NATS - _BOUND_MARGIN:
                continue
        half_log_volume = whitened_half_log_det(block.cov, factor)
        try:
            metric = np.linalg.cholesky(block.cov + cov)
        except np.linalg.LinAlgError:
            continue
        mass = block.mean_log_density + half_log_volume - draws_mass
        if candidates_only and not mass >= -LEFT_NATS:
            margins.append(BlockMargins(block, mass, math.nan, far))
            continue
        nearest = float(np.min(np.sum(np.linalg.solve(metric, (draws - block.mean).T) ** 2, axis=0)))
        margins.append(BlockMargins(block, mass, nearest, far))
    return margins


def regions_left_behind(blocks, draws, draws_log_density) -> list[LeftRegion]:
    r"""The regions a chain settled in during tuning that the draws never reach, yet which hold at least
    :math:`e^{-3}` of the draws' mass (the module docstring gives the rule).

    Parameters
    ----------
    blocks : sequence of Block
        The chain's settled tuning blocks (:attr:`TuningBlocks.blocks`).
    draws : array of shape (n, d)
        Draws (pooled tuning: every chain's), model coordinates.
    draws_log_density : array of shape (m,)
        The chain's log density at its own draws (exact part).

    Returns
    -------
    list of LeftRegion
        Consecutive blocks merged; empty if none, or if the draws' covariance cannot be factorised.
    """
    regions: list[LeftRegion] = []
    for margin in block_margins(blocks, draws, draws_log_density, candidates_only=True):
        if not margin.said:
            continue
        block, distance, mass = margin.block, math.sqrt(margin.nearest), margin.mass_nats
        if regions and regions[-1].end == block.start:
            last = regions[-1]
            distance, mass = min(last.distance, distance), max(last.mass_nats, mass)
            regions[-1] = LeftRegion(last.start, block.end, distance, mass)
        else:
            regions.append(LeftRegion(block.start, block.end, distance, mass))
    return regions
