"""Regions a chain settled in during tuning that the draws never reach (decision record 0059): the blocks
kept, the rule on hand-made blocks and draws, its invariance to the model's units, and negative controls."""

import math

import numpy as np
import pytest
from scipy import stats

from pymc_kameleon.core.adaptation.diagnostics import CLIMB_LIMIT
from pymc_kameleon.core.adaptation.left_regions import (
    BLOCK_STEPS,
    FAR_TAIL,
    LEFT_NATS,
    MAX_DIM,
    Block,
    TuningBlocks,
    block_margins,
    regions_left_behind,
)
from pymc_kameleon.core.adaptation.mode_mass import whitened_half_log_det, whitened_half_log_det_bound


def _mixture_log_density(x, narrow_sd=0.1, apart=6.0):
    """Equal-mass mixture of N(-apart/2, narrow_sd^2 I) and N(apart/2, I) (rows of x)."""
    x = np.atleast_2d(x)
    d = x.shape[1]

    def log_normal(mu, sd):
        squares = np.sum(((x - mu) / sd) ** 2, axis=1)
        return -0.5 * squares - d * math.log(sd) - 0.5 * d * math.log(2 * math.pi)

    return np.logaddexp(log_normal(-apart / 2, narrow_sd), log_normal(apart / 2, 1.0)) + math.log(0.5)


def _blocks_from(states, log_density):
    blocks = TuningBlocks(states.shape[1])
    for x, lp in zip(states, log_density):
        blocks.record(x, lp)
    return blocks


def test_blocks_keep_settled_steps_only():
    """A block closes every BLOCK_STEPS steps with the states' mean and covariance and the mean log
    density; a chain that did not move, or whose log density climbed by more than CLIMB_LIMIT sqrt(d/2),
    keeps no block; a restart drops the block under way."""
    rng = np.random.default_rng(1)
    d = 3
    states = rng.normal(size=(BLOCK_STEPS, d))
    lp = -0.5 * np.sum(states**2, axis=1)
    blocks = _blocks_from(states, lp)
    assert len(blocks.blocks) == 1
    block = blocks.blocks[0]
    assert (block.start, block.end) == (0, BLOCK_STEPS)
    np.testing.assert_allclose(block.mean, states.mean(axis=0))
    np.testing.assert_allclose(block.cov, np.cov(states, rowvar=False))
    assert block.mean_log_density == pytest.approx(lp.mean())

    frozen = _blocks_from(np.repeat(states[:1], BLOCK_STEPS, axis=0), np.full(BLOCK_STEPS, -1.0))
    assert len(frozen.blocks) == 0
    rise = (CLIMB_LIMIT + 0.5) * math.sqrt(d / 2)  # the second half's mean this much above the first's
    climbing = _blocks_from(states, np.where(np.arange(BLOCK_STEPS) < BLOCK_STEPS // 2, 0.0, rise))
    assert len(climbing.blocks) == 0
    settled = _blocks_from(states, np.where(np.arange(BLOCK_STEPS) < BLOCK_STEPS // 2, 0.0, rise / 2))
    assert len(settled.blocks) == 1  # the control: a rise within the limit is kept

    restarted = TuningBlocks(d)
    for x, value in zip(states[:60], lp[:60]):
        restarted.record(x, value)
    restarted.restart()
    for x, value in zip(states, lp):
        restarted.record(x, value)
    assert [(b.start, b.end) for b in restarted.blocks] == [(160 - BLOCK_STEPS, 160)]


def _two_modes_case(seed=1, d=2, blocks_in="wide", n_blocks=3):
    """Draws from the narrow mode with their log densities, and tuning blocks of i.i.d. states in one
    mode (its exact spread: the rule's best case)."""
    rng = np.random.default_rng(seed)
    draws = rng.normal(-3.0, 0.1, size=(2000, d))
    if blocks_in == "wide":
        states = rng.normal(3.0, 1.0, size=(n_blocks * BLOCK_STEPS, d))
    else:
        states = rng.normal(-3.0, 0.1, size=(n_blocks * BLOCK_STEPS, d))
    blocks = _blocks_from(states, _mixture_log_density(states))
    return blocks.blocks, draws, _mixture_log_density(draws[:500])


@pytest.mark.parametrize("d", [2, 10])
def test_a_mode_of_the_same_mass_left_behind_is_found(d):
    """Blocks in the wide mode of an equal-mass pair, the draws all in the narrow one: one region, tuning
    steps 0-300, whose mass is the draws' (log ratio 0 within the blocks' sampling error: 100 states a
    block), the nearest draw far beyond the chi^2_d tail. Negative control: blocks in the draws' own mode
    give nothing."""
    blocks, draws, values = _two_modes_case(d=d)
    regions = regions_left_behind(blocks, draws, values)
    assert len(regions) == 1
    region = regions[0]
    assert (region.start, region.end) == (0, 3 * BLOCK_STEPS)
    assert abs(region.mass_nats) < 0.3 * d
    assert region.distance**2 > stats.chi2.isf(FAR_TAIL, d)
    here, draws, values = _two_modes_case(d=d, blocks_in="narrow")
    assert regions_left_behind(here, draws, values) == []


def test_a_light_mode_left_behind_is_not_said():
    """The same blocks with their log densities LEFT_NATS + 1 lower (a mode with e^-4 of the draws' mass)
    are not said; LEFT_NATS - 1 lower, they are."""
    blocks, draws, values = _two_modes_case()
    lighter = [b._replace(mean_log_density=b.mean_log_density - LEFT_NATS - 1) for b in blocks]
    assert regions_left_behind(lighter, draws, values) == []
    heavier = [b._replace(mean_log_density=b.mean_log_density - LEFT_NATS + 1) for b in blocks]
    assert len(regions_left_behind(heavier, draws, values)) == 1


def test_candidates_only_keeps_every_said_block_and_its_figures():
    """regions_left_behind's shortcut: blocks too light to be said are left out or get no distance (NaN);
    every block kept has the full computation's figures to the bit, and the said ones are the same."""
    blocks, draws, values = _two_modes_case()
    lighter = [(LEFT_NATS + 1) * (i % 3 == 1) + 40 * (i % 3 == 2) for i in range(len(blocks))]
    mixed = [b._replace(mean_log_density=b.mean_log_density - drop) for b, drop in zip(blocks, lighter)]
    full = block_margins(mixed, draws, values)
    short = block_margins(mixed, draws, values, candidates_only=True)
    assert len(full) == len(mixed) >= 3 and len(short) < len(full)  # the 40-nats-lighter ones are left out
    by_start = {m.block.start: m for m in full}
    for b in short:
        a = by_start[b.block.start]
        assert (a.mass_nats, a.far) == (b.mass_nats, b.far)
        assert a.nearest == b.nearest or (math.isnan(b.nearest) and a.mass_nats < -LEFT_NATS)
    assert [m.block.start for m in full if m.said] == [m.block.start for m in short if m.said] != []


def test_the_volume_bound_is_an_upper_bound():
    """whitened_half_log_det_bound >= whitened_half_log_det, near-singular covariances included, and equal
    for a covariance proportional to the reference."""
    rng = np.random.default_rng(3)
    for d in (2, 10, 50):
        a = rng.standard_normal((d, d))
        reference = a @ a.T + d * np.eye(d)
        factor, inverse = np.linalg.cholesky(reference), np.linalg.inv(reference)
        for rank in (1, d // 2 + 1, d):
            b = rng.standard_normal((d, rank)) * rng.uniform(1e-4, 1e2, rank)
            cov = b @ b.T
            assert whitened_half_log_det_bound(cov, inverse) >= whitened_half_log_det(cov, factor) - 1e-9
        assert whitened_half_log_det_bound(3.0 * reference, inverse) == pytest.approx(
            whitened_half_log_det(3.0 * reference, factor), abs=1e-5 * d)  # the bound adds d eps / 2

def test_the_rule_does_not_depend_on_the_units():
    """Every coordinate in other units (1e-4 and 1e4): the same regions, the same figures (the log
    densities shift by the Jacobian, the same for blocks and draws)."""
    blocks, draws, values = _two_modes_case(d=2)
    scale = np.array([1e-4, 1e4])
    shift = -float(np.sum(np.log(scale)))
    scaled = [
        Block(b.start, b.end, b.mean * scale, b.cov * np.outer(scale, scale), b.mean_log_density + shift)
        for b in blocks
    ]
    here = regions_left_behind(blocks, draws, values)
    there = regions_left_behind(scaled, draws * scale, np.asarray(values) + shift)
    assert len(here) == len(there) == 1
    assert there[0].distance == pytest.approx(here[0].distance, rel=1e-6)
    assert there[0].mass_nats == pytest.approx(here[0].mass_nats, abs=1e-6)


def test_blocks_apart_are_separate_regions_and_nothing_to_compare_is_silent():
    blocks, draws, values = _two_modes_case(n_blocks=3)
    apart = [blocks[0], blocks[2]]
    regions = regions_left_behind(apart, draws, values)
    assert [(r.start, r.end) for r in regions] == [(0, BLOCK_STEPS), (2 * BLOCK_STEPS, 3 * BLOCK_STEPS)]
    assert regions_left_behind([], draws, values) == []
    assert regions_left_behind(blocks, draws[:1], values) == []
    assert regions_left_behind(blocks, draws, [math.nan]) == []
    assert regions_left_behind(blocks, np.zeros((10, 2)), values) == []  # draws without spread


def test_no_blocks_above_the_dimension_a_block_can_measure():
    """From d = BLOCK_STEPS on a block's covariance is singular: nothing is kept (nor its memory spent)."""
    rng = np.random.default_rng(2)
    for d, kept in ((MAX_DIM, 1), (MAX_DIM + 1, 0)):
        states = rng.normal(size=(BLOCK_STEPS, d))
        assert len(_blocks_from(states, -0.5 * np.sum(states**2, axis=1)).blocks) == kept, d
