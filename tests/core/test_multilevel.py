"""Multilevel delayed acceptance without PyMC: the ratio by hand, the counts, and invariance for the finest
density with a coarse level 3 posterior sds off (and a negative control that drops the coarse terms)."""

import math

import numpy as np
import pytest

from pymc_kameleon.core.multilevel import (
    LevelPoint,
    MultilevelDelayedAcceptance,
    RelativeLevel,
    multilevel_log_ratio,
    narrowest_variance_ratio,
)
from pymc_kameleon.core.proposals import Move, Proposal, RandomWalkProposal
from pymc_kameleon.testing import mcse_of_mean


def normal_logpdf(mean, sd):
    return lambda x: float(-0.5 * ((x[0] - mean) / sd) ** 2 - math.log(sd))


def test_log_ratio_by_hand():
    """log a = log pi_l(y) - log pi_l(x) + log pi_{l-1}(x) - log pi_{l-1}(y)."""
    x = LevelPoint(np.zeros(1), (-1.0, -2.0, -3.0))
    y = LevelPoint(np.ones(1), (-0.5, -4.0, -1.0))
    assert multilevel_log_ratio(x, y, 2) == pytest.approx(-1.0 - (-3.0) + (-2.0) - (-4.0))  # 4
    assert multilevel_log_ratio(x, y, 1) == pytest.approx(-4.0 - (-2.0) + (-1.0) - (-0.5))  # -2.5
    assert multilevel_log_ratio(x, y.with_level(2, -math.inf), 2) == -math.inf


class StepBy(Proposal):
    """x -> x + 1, declared symmetric: a deterministic proposal for checking the arithmetic."""

    symmetric = True

    def propose(self, y, rng) -> Move:
        return Move(y + 1.0)

    def log_density(self, x, y) -> float:
        return 0.0


class FixedUniforms:
    """A generator whose uniforms are given in advance (the decisions' draws)."""

    def __init__(self, uniforms):
        self.uniforms = list(uniforms)

    def random(self):
        return self.uniforms.pop(0)


def test_one_two_level_step_by_hand():
    """Level 0: pi_0 = N(3, 1); level 1: pi_1 = N(0, 1). From x = 0 the subchain (J = 2) steps to 1,
    then 2 (both uphill for pi_0, accepted whatever the uniform), and the fine decision has
    log a = log pi_1(2) - log pi_1(0) + log pi_0(0) - log pi_0(2) = -2 - 4 = -6."""
    coarse, fine = normal_logpdf(3.0, 1.0), normal_logpdf(0.0, 1.0)
    mlda = MultilevelDelayedAcceptance([coarse, fine], [2], StepBy())
    start = mlda.point(np.zeros(1))
    expected = math.exp(-6.0)
    new, counts = mlda.step(start, FixedUniforms([0.99, 0.99, expected * 0.999]))
    assert new.x[0] == 2.0 and new.logp == (coarse(new.x), fine(new.x))
    assert counts.accept_prob[1] == pytest.approx(expected)
    assert counts.evaluations == [2, 1] and counts.steps == [2, 1] and counts.accepted == [2, 1]
    same, counts = mlda.step(start, FixedUniforms([0.99, 0.99, expected * 1.001]))
    assert same is start and counts.accepted == [2, 0]


def test_a_subchain_that_never_moves_costs_no_fine_evaluation():
    calls = []

    def fine(x):
        calls.append(x)
        return 0.0

    mlda = MultilevelDelayedAcceptance([lambda x: -math.inf if x[0] > 0.5 else 0.0, fine], [3], StepBy())
    start = LevelPoint(np.zeros(1), (0.0, 0.0))
    new, counts = mlda.step(start, np.random.default_rng(0))
    assert new is start and not calls and counts.evaluations == [3, 0] and counts.accept_prob[1] == 1.0


@pytest.mark.parametrize("bad", [[0], [1.5], [2, 2]])
def test_bad_subchain_lengths_are_refused(bad):
    with pytest.raises(ValueError, match="subchain length"):
        MultilevelDelayedAcceptance([normal_logpdf(0, 1), normal_logpdf(0, 1)], bad, StepBy())


class WithoutCoarseCorrection(MultilevelDelayedAcceptance):
    """Negative control: the fine decision ignores the coarse level (log a = log pi_l(y) - log pi_l(x))."""

    def _step(self, level, current, rng, counts, on_base_step):
        if level == 0:
            return super()._step(level, current, rng, counts, on_base_step)
        proposed = current
        for _ in range(self._subchain_length(level - 1, rng)):
            proposed = self._step(level - 1, proposed, rng, counts, on_base_step)
        if proposed.x is current.x:
            return current
        proposed = proposed.with_level(level, self.log_densities[level](proposed.x))
        log_ratio = proposed.at(level) - current.at(level)
        return proposed if rng.random() < math.exp(min(0.0, log_ratio)) else current


def run_chains(cls, levels, lengths, *, randomize=False, chains=4, steps=6000, seed=3):
    draws = np.empty((chains, steps))
    for c in range(chains):
        rng = np.random.default_rng([seed, c])
        mlda = cls(levels, lengths, RandomWalkProposal(1.5, dim=1), randomize_lengths=randomize)
        point = mlda.point(np.array([rng.normal()]))
        for t in range(steps):
            point, _ = mlda.step(point, rng)
            draws[c, t] = point.x[0]
    return draws


def z_scores(draws, mean, sd):
    """|error| / MCSE of the mean and of the second moment about the exact mean."""
    second = ((draws - mean) / sd) ** 2
    return (
        abs(draws.mean() - mean) / mcse_of_mean(draws),
        abs(second.mean() - 1.0) / mcse_of_mean(second),
    )


# Finest N(0, 1); the coarse level's posterior N(3, 1.2^2) is 3 sds away; a middle level N(1, 1) for three.
TWO_LEVELS = [normal_logpdf(3.0, 1.2), normal_logpdf(0.0, 1.0)]
THREE_LEVELS = [normal_logpdf(3.0, 1.2), normal_logpdf(1.0, 1.0), normal_logpdf(0.0, 1.0)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("levels", "lengths", "randomize"),
    [(TWO_LEVELS, [3], False), (TWO_LEVELS, [4], True), (THREE_LEVELS, [2, 3], False)],
    ids=["two-levels", "two-levels-random-lengths", "three-levels"],
)
def test_invariant_for_the_finest_density_with_a_biased_coarse_level(levels, lengths, randomize):
    draws = run_chains(MultilevelDelayedAcceptance, levels, lengths, randomize=randomize)
    z_mean, z_second = z_scores(draws, 0.0, 1.0)
    assert z_mean < 4 and z_second < 4, (z_mean, z_second)


@pytest.mark.slow
def test_negative_control_without_the_coarse_correction_fails():
    """The same run with the coarse terms dropped from the fine ratio samples a mixture of both
    levels, and the same test sees it."""
    draws = run_chains(WithoutCoarseCorrection, TWO_LEVELS, [3])
    z_mean, z_second = z_scores(draws, 0.0, 1.0)
    assert max(z_mean, z_second) > 8, (z_mean, z_second)


# ------------------------------------------------------------------------- a level relative to the one below
def middle_correction(x):
    """log N(x; 1, 1) - log N(x; 3, 1.2): THREE_LEVELS' middle level relative to its coarsest."""
    return THREE_LEVELS[1](x) - THREE_LEVELS[0](x)


def test_a_relative_level_adds_its_correction_to_the_level_below():
    mlda = MultilevelDelayedAcceptance(
        [THREE_LEVELS[0], RelativeLevel(middle_correction), THREE_LEVELS[2]], [2, 3], StepBy()
    )
    point = mlda.point(np.array([0.4]))
    assert point.at(0) == THREE_LEVELS[0](point.x)
    assert point.at(1) == pytest.approx(THREE_LEVELS[1](point.x), abs=1e-12)
    assert point.at(2) == THREE_LEVELS[2](point.x)
    assert mlda.log_density(1, point.with_level(0, -math.inf)) == -math.inf  # infeasible below: here too


@pytest.mark.parametrize("where", [0, 2])
def test_a_relative_level_is_refused_as_the_coarsest_or_the_finest(where):
    levels = [normal_logpdf(0, 1)] * 3
    levels[where] = RelativeLevel(middle_correction)
    with pytest.raises(ValueError, match="relative to the one below"):
        MultilevelDelayedAcceptance(levels, [2, 2], StepBy())


def test_a_relative_level_gives_the_draws_of_the_same_density_given_whole():
    """The same middle density, given whole or as a correction of the coarsest: the same chain (their
    values agree to rounding, which decides no uniform in 2000 steps)."""
    relative = [THREE_LEVELS[0], RelativeLevel(middle_correction), THREE_LEVELS[2]]
    whole = run_chains(MultilevelDelayedAcceptance, THREE_LEVELS, [2, 3], chains=1, steps=2000)
    np.testing.assert_array_equal(
        run_chains(MultilevelDelayedAcceptance, relative, [2, 3], chains=1, steps=2000), whole
    )


def test_each_evaluation_above_the_coarsest_is_reported_with_the_levels_below():
    seen = []
    mlda = MultilevelDelayedAcceptance(THREE_LEVELS, [2, 3], RandomWalkProposal(1.5, dim=1))
    point = mlda.point(np.zeros(1))
    rng = np.random.default_rng(4)
    for _ in range(20):
        point, counts = mlda.step(point, rng, on_evaluation=lambda level, p: seen.append((level, p)))
    assert {level for level, _ in seen} == {1, 2}
    for level, p in seen:
        assert all(math.isfinite(p.at(k)) for k in range(level + 1))
        assert p.at(level) == THREE_LEVELS[level](p.x)


# ------------------------------------------------------------ the coarsest level alone, and its spread
def test_the_coarsest_run_is_level_zeros_chain_alone():
    """StepBy from x = 0 under pi_0 = N(3, 1): the run climbs 1, 2, 3 (uphill), takes the step to 4
    (log a = -0.5) with the uniform 0.5 < e^-0.5 and refuses the step to 5 (log a = -1.5) with 0.9; the
    finest level is never evaluated."""
    def never(x):
        raise AssertionError("the finest level was evaluated")

    mlda = MultilevelDelayedAcceptance([normal_logpdf(3.0, 1.0), never], [2], StepBy())
    start = LevelPoint(np.zeros(1), (normal_logpdf(3.0, 1.0)(np.zeros(1)), math.nan))
    states = mlda.coarsest_run(start, 5, FixedUniforms([0.99, 0.99, 0.99, 0.5, 0.9]))
    np.testing.assert_array_equal(states[:, 0], [1.0, 2.0, 3.0, 4.0, 4.0])


def test_the_coarsest_run_samples_the_coarsest_density():
    """Monte Carlo: the run's mean and variance on pi_0 = N(1, 0.5^2) agree with them within 4 MCSEs."""
    mlda = MultilevelDelayedAcceptance([normal_logpdf(1.0, 0.5), normal_logpdf(0.0, 1.0)], [3],
                                       RandomWalkProposal(1.2, dim=1))
    start = LevelPoint(np.zeros(1), (normal_logpdf(1.0, 0.5)(np.zeros(1)), math.nan))
    x = mlda.coarsest_run(start, 40_000, np.random.default_rng(3))[1000:, 0]
    assert abs(x.mean() - 1.0) < 4 * mcse_of_mean(x)
    assert abs(np.mean((x - 1.0) ** 2) - 0.25) < 4 * mcse_of_mean((x - 1.0) ** 2)


def test_the_narrowest_variance_ratio_by_hand():
    """Fine states with covariance diag(2/3, 8/3), coarse diag(2/3, 2/3): the ratio along x is 1, along y
    1/4, the minimum; rotated by 45 degrees, the same along the fine covariance's eigenvector."""
    fine = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    coarse = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    ratio, direction = narrowest_variance_ratio(coarse, fine)
    assert ratio == pytest.approx(0.25) and abs(direction[1]) == pytest.approx(1.0)
    rotation = np.array([[1.0, -1.0], [1.0, 1.0]]) / math.sqrt(2.0)
    ratio, direction = narrowest_variance_ratio(coarse @ rotation.T, fine @ rotation.T)
    assert ratio == pytest.approx(0.25) and np.abs(direction) == pytest.approx([2**-0.5, 2**-0.5])
    # Along the axes alone the rotated ratio is (1/3 + 1/3) / (1/3 + 4/3) = 0.4: the eigenvectors count.
    assert narrowest_variance_ratio(coarse, coarse)[0] == pytest.approx(1.0)
