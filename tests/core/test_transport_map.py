"""The triangular transport map and independent proposals through it (core/adaptation/transport_map.py).

The shared proposal harness (tests/core/test_proposals.py) also runs MapIndependenceProposal and
MapWalkProposal: the protocol, the Move's Hastings terms and the density by Monte Carlo.
"""

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest

from pymc_kameleon.core.adaptation.transport_map import (
    MapIndependenceProposal,
    MapMixtureProposal,
    MapWalkProposal,
    TriangularMap,
)
from pymc_kameleon.core.mh import metropolis_hastings_step
from pymc_kameleon.core.proposals import IndependenceProposal, student_t_log_density
from pymc_kameleon.problems.banana import banana
from pymc_kameleon.testing import curved_draws, invariance_z_scores

Z_MAX = 4.0


def hand_built_map(shift=0.5, slope=0.3, mean=(1.0, -2.0), chol=((1.5, 0.0), (0.4, 0.8))):
    """A 2-d map with z_2 = shift (z_1^2 - 1) + exp(slope z_1) u_2 (by default a correlated L)."""
    # Features of z_<2 = [1, z_1, z_1^2]; s_2 = slope z_1, clipped to [-1, 1].
    return TriangularMap(mean, chol, [np.zeros(1), np.array([-shift, 0.0, shift])],
                         [np.zeros(1), np.array([0.0, slope])], [[0.0, 0.0], [-1.0, 1.0]], quadratic=True)


def test_the_map_inverts_itself_and_states_its_log_jacobian():
    """u -> x -> u returns u, one row or many; log |dx/du| equals the log determinant of the
    Jacobian by central differences, and log |du/dx| is its negative."""
    tmap = TriangularMap.fit(curved_draws())
    rng = np.random.default_rng(1)
    for u in rng.standard_normal((5, 3)) * 1.5:
        x, log_det = tmap.to_model(u)
        back, log_det_back = tmap.to_reference(x)
        np.testing.assert_allclose(back, u, atol=1e-10)
        assert log_det_back == pytest.approx(-log_det, abs=1e-10)
        h = 1e-6
        J = np.column_stack([(tmap.to_model(u + h * e)[0] - tmap.to_model(u - h * e)[0]) / (2 * h)
                             for e in np.eye(3)])
        assert np.linalg.slogdet(J)[1] == pytest.approx(log_det, abs=1e-6)
    X = np.array([tmap.to_model(u)[0] for u in rng.standard_normal((4, 3))])
    U, log_dets = tmap.to_reference(X)
    for x, u, log_det in zip(X, U, log_dets):
        single = tmap.to_reference(x)
        np.testing.assert_allclose(single[0], u, rtol=1e-13, atol=1e-15)
        assert single[1] == pytest.approx(log_det, rel=1e-13)


def test_the_fit_straightens_a_curved_posterior_and_its_changing_width():
    """In the fitted map's reference coordinates the curved draws are uncorrelated with unit variance,
    u_2 does not depend on u_1^2 (the curve) and u_2^2 not on u_1 (the width). Negative control: the
    whitening alone (a linear map, constant widths) leaves the curve, and shifts without widths leave
    the width."""
    X = curved_draws(n=8000)
    U, _ = TriangularMap.fit(X).to_reference(X)
    np.testing.assert_allclose(np.cov(U, rowvar=False), np.eye(3), atol=0.06)
    assert abs(np.corrcoef(U[:, 1], U[:, 0] ** 2)[0, 1]) < 0.1
    assert abs(np.corrcoef(U[:, 1] ** 2, U[:, 0])[0, 1]) < 0.1
    linear, _ = TriangularMap.fit(X, quadratic=False, scale=False).to_reference(X)
    assert np.corrcoef(linear[:, 1], linear[:, 0] ** 2)[0, 1] > 0.5
    no_width, _ = TriangularMap.fit(X, scale=False).to_reference(X)
    assert np.corrcoef(no_width[:, 1] ** 2, no_width[:, 0])[0, 1] > 0.2


def test_the_width_is_clipped_to_its_range_on_the_draws():
    """Far outside the draws the width stays at its extreme fitted value; the map still inverts, and
    its log Jacobian is log |L| plus the clipped widths."""
    tmap = TriangularMap.fit(curved_draws())
    x, log_det = tmap.to_model(np.array([40.0, 1.0, 0.0]))  # z_1 far beyond the draws
    assert np.all(np.isfinite(x))
    assert _s(tmap, x, 1) in tuple(tmap.width_bounds[1])
    assert log_det == pytest.approx(tmap.log_det_chol + sum(_s(tmap, x, k) for k in range(3)), abs=1e-9)
    np.testing.assert_allclose(tmap.to_reference(x)[0], [40.0, 1.0, 0.0], atol=1e-8)


def _s(tmap, x, k):
    """s_k at x, clipped, from the map's own coefficients."""
    z = np.linalg.solve(tmap.chol, x - tmap.mean)
    return float(np.clip(tmap.width_coefs[k][0] + z[:k] @ tmap.width_coefs[k][1:], *tmap.width_bounds[k]))


def test_with_the_whitening_alone_it_is_the_student_t_independence_proposal():
    """A map with zero shifts and widths: the same draws for the same seed and the same density as
    IndependenceProposal with the map's m and L."""
    mean, chol = np.array([1.0, -2.0]), np.array([[1.5, 0.0], [0.4, 0.8]])
    identity = TriangularMap(mean, chol, [np.zeros(1), np.zeros(2)], [np.zeros(1), np.zeros(2)],
                             np.zeros((2, 2)), quadratic=False)
    through_map, plain = MapIndependenceProposal(identity, 7.0), IndependenceProposal(mean, chol, 7.0)
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(5):
        x = through_map.draw(a)
        np.testing.assert_array_equal(x, plain.draw(b))
        assert through_map.point_log_density(x) == pytest.approx(plain.point_log_density(x), rel=1e-12)


def test_exact_log_density_by_hand():
    """The hand-built map at x = m + L (1, 2): z = (1, 2), s_2 = 0.3, h_2 = 0, so u = (1, 2 e^-0.3),
    and log q = log t_5(u) - log|L| - 0.3, with log t_5 written out."""
    tmap = hand_built_map()
    x = tmap.mean + tmap.chol @ np.array([1.0, 2.0])
    u, log_det = tmap.to_reference(x)
    np.testing.assert_allclose(u, [1.0, 2.0 * math.exp(-0.3)], rtol=1e-14)
    df, d = 5.0, 2
    log_t = (math.lgamma((df + d) / 2) - math.lgamma(df / 2) - d / 2 * math.log(df * math.pi)
             - (df + d) / 2 * math.log1p((1.0 + 4.0 * math.exp(-0.6)) / df))
    expected = log_t - math.log(1.5 * 0.8) - 0.3
    assert MapIndependenceProposal(tmap, df).point_log_density(x) == pytest.approx(expected, rel=1e-12)
    assert log_det == pytest.approx(-math.log(1.2) - 0.3, rel=1e-12)


class _WithoutJacobian(MapIndependenceProposal):
    def point_log_density(self, x):
        u, _ = self.transport_map.to_reference(x)
        return student_t_log_density(u, self.df) - self.transport_map.log_det_chol


class _SymmetricMapWalk(MapWalkProposal):
    """The walk in u taken for symmetric in x: its Jacobians left out of the ratio."""

    def propose(self, y, rng):
        return dataclasses.replace(super().propose(y, rng), log_q_forward=0.0, log_q_reverse=0.0)


def _banana_chains(proposal, chains=4, steps=5000, seed=3):
    target = banana(dim=2, b=0.5, v=2.0)

    def log_density(x):
        return SimpleNamespace(logp=float(target.logp(x)))

    rng = np.random.default_rng(seed)
    draws = np.empty((chains, steps, 2))
    for c in range(chains):
        current = target.sample(1, rng)[0]
        current_logp = log_density(current).logp
        for t in range(steps):
            step = metropolis_hastings_step(proposal, current, current_logp, log_density, rng)
            if step.accepted:
                current, current_logp = step.state, step.evaluation.logp
            draws[c, t] = current
    return invariance_z_scores(draws, target)


@pytest.mark.slow
def test_independent_draws_through_a_map_leave_the_banana_invariant():
    """4 chains x 5000 steps of MH with independent draws through a map whose width changes (not the
    banana's own map): HDR coverages and means within 4 MCSE of the exact ones. Negative control: the
    same proposal with its density missing the Jacobian's varying part fails the same check."""
    tmap = hand_built_map(shift=0.35, slope=0.3, mean=(0.0, 0.0), chol=((1.5, 0.0), (0.0, 1.6)))
    scores = _banana_chains(MapIndependenceProposal(tmap, 5.0))
    assert max(scores.values()) < Z_MAX, scores
    wrong = _banana_chains(_WithoutJacobian(tmap, 5.0))
    assert max(wrong.values()) > 2 * Z_MAX, wrong


@pytest.mark.slow
def test_a_walk_through_a_map_leaves_the_banana_invariant():
    """4 chains x 5000 steps of MH with the walk in a (not the banana's own) map's coordinates: HDR
    coverages and means within 4 MCSE. Negative control: the same walk with its Jacobians left out of
    the ratio (as if it were symmetric in x) fails the same check."""
    tmap = hand_built_map(shift=0.35, slope=0.3, mean=(0.0, 0.0), chol=((1.5, 0.0), (0.0, 1.6)))
    scores = _banana_chains(MapWalkProposal(tmap, 1.2))  # at most 2.1
    assert max(scores.values()) < Z_MAX, scores
    wrong = _banana_chains(_SymmetricMapWalk(tmap, 1.2))  # the mean of x_1: 7.8 MCSE off
    assert max(wrong.values()) > Z_MAX + 2, wrong


def test_the_walks_hastings_terms_by_hand():
    """At y = m + L (1, 2) under the hand-built map, u(y) = (1, 2 e^-0.3) and log |du/dx| at y is
    -log |L| - 0.3; a move's terms differ by exactly the two log Jacobians."""
    tmap = hand_built_map()
    walk = MapWalkProposal(tmap, 0.5)
    y = tmap.mean + tmap.chol @ np.array([1.0, 2.0])
    move = walk.propose(y, np.random.default_rng(0))
    _, log_det_x = tmap.to_reference(move.x)
    log_det_y = -math.log(1.2) - 0.3
    assert move.log_q_reverse - move.log_q_forward == pytest.approx(log_det_y - log_det_x, rel=1e-10)
    assert move.component == "map_walk"
    with pytest.raises(ValueError, match="scale"):
        MapWalkProposal(tmap, 0.0)


def test_the_mixtures_hastings_terms_by_hand():
    """The hand-built map at y = m + L (1, 2), u(y) = (1, 2 e^-0.3): for the move's u(x), log q(x | y) is
    log |du/dx|_x + log(iota t_10(u_x) + (1 - iota) N(u_x; u_y, s^2 I)), both mixtures written out with
    scipy; the reverse term swaps x and y. The walk's scale is read at each proposal."""
    from scipy import stats

    tmap = hand_built_map()
    scale = [0.5]
    mixture = MapMixtureProposal(tmap, lambda: scale[0], independence=0.3, df=10.0)
    y = tmap.mean + tmap.chol @ np.array([1.0, 2.0])
    u_y = np.array([1.0, 2.0 * math.exp(-0.3)])
    t10 = stats.multivariate_t(np.zeros(2), np.eye(2), df=10.0)
    components = set()
    for seed in range(6):
        move = mixture.propose(y, np.random.default_rng(seed))
        components.add(move.component)
        u_x, log_det_x = tmap.to_reference(move.x)
        walk = stats.multivariate_normal(u_y, 0.25).pdf(u_x)
        forward = log_det_x + math.log(0.3 * t10.pdf(u_x) + 0.7 * walk)
        reverse = (-math.log(1.2) - 0.3
                   + math.log(0.3 * t10.pdf(u_y) + 0.7 * stats.multivariate_normal(u_x, 0.25).pdf(u_y)))
        assert move.log_q_forward == pytest.approx(forward, rel=1e-9)
        assert move.log_q_reverse == pytest.approx(reverse, rel=1e-9)
        assert mixture.log_density(move.x, y) == pytest.approx(forward, rel=1e-9)
    assert components == {"map_walk", "map_independence"}
    scale[0] = 2.0  # the tuned scale changes: the next move's walk and density follow it
    move = mixture.propose(y, np.random.default_rng(1))
    u_x, log_det_x = tmap.to_reference(move.x)
    walk = stats.multivariate_normal(u_y, 4.0).pdf(u_x)
    forward = log_det_x + math.log(0.3 * t10.pdf(u_x) + 0.7 * walk)
    assert move.log_q_forward == pytest.approx(forward, rel=1e-9)
    for bad in ({"independence": 0.0}, {"independence": 1.0}, {"df": 0.0}):
        with pytest.raises(ValueError):
            MapMixtureProposal(tmap, lambda: 1.0, **bad)


class _MixtureWithoutJacobians(MapMixtureProposal):
    """The mixture with its Jacobians left out of the ratio (densities in u taken for densities in x)."""

    def propose(self, y, rng):
        move = super().propose(y, rng)
        u_x, log_det_x = self.transport_map.to_reference(move.x)
        u_y, log_det_y = self.transport_map.to_reference(y)
        return dataclasses.replace(move, log_q_forward=move.log_q_forward - log_det_x,
                                   log_q_reverse=move.log_q_reverse - log_det_y)


@pytest.mark.slow
def test_the_maps_mixture_leaves_the_banana_invariant():
    """4 chains x 5000 steps of MH with the map shape's mixture (half independent draws through a map
    that is not the banana's own, half a walk in its coordinates): HDR coverages and means within 4
    MCSE. Negative control: the same moves with the Jacobians left out of the ratio fail the check."""
    tmap = hand_built_map(shift=0.35, slope=0.3, mean=(0.0, 0.0), chol=((1.5, 0.0), (0.0, 1.6)))
    scores = _banana_chains(MapMixtureProposal(tmap, lambda: 1.2))  # at most 2.7
    assert max(scores.values()) < Z_MAX, scores
    wrong = _banana_chains(_MixtureWithoutJacobians(tmap, lambda: 1.2))  # 15.4
    assert max(wrong.values()) > Z_MAX + 2, wrong


def test_quadratic_shifts_only_where_the_draws_support_them(monkeypatch):
    """2000 draws of a correlated 30-d Gaussian: the first 13 coordinates (at most 91 features, 20 rows
    each) get quadratic shifts, the rest linear ones, and held out every coordinate of u has a variance
    near 1. Negative control: quadratic shifts everywhere overfit (a held-out variance far above 1)."""
    import pymc_kameleon.core.adaptation.transport_map as transport_map

    rng = np.random.default_rng(1)
    A = rng.standard_normal((30, 30))
    cov = A @ A.T / 30 + 0.1 * np.eye(30)
    fitted, held_out = (rng.multivariate_normal(np.zeros(30), cov, size=n) for n in (2000, 4000))
    tmap = TriangularMap.fit(fitted)
    assert tmap.quadratic.tolist() == [True] * 13 + [False] * 17
    assert (tmap.to_reference(held_out)[0] ** 2).mean(axis=0).max() < 1.2
    monkeypatch.setattr(transport_map, "MAP_ROWS_PER_FEATURE", 0)
    overfitted = TriangularMap.fit(fitted)
    assert overfitted.quadratic.all()
    assert (overfitted.to_reference(held_out)[0] ** 2).mean(axis=0).max() > 1.5


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="cannot fit a triangular map"):
        TriangularMap.fit(np.random.default_rng(0).standard_normal((6, 6)))
    with pytest.raises(ValueError, match="ridge"):
        TriangularMap.fit(curved_draws(), ridge=-1.0)
    with pytest.raises(ValueError, match=r"\(n, d\)"):
        TriangularMap.fit(np.zeros(5))
    with pytest.raises(ValueError, match="df"):
        MapIndependenceProposal(hand_built_map(), 0.0)
    X = curved_draws()
    X[:5] = np.nan  # non-finite rows are left out
    assert np.all(np.isfinite(TriangularMap.fit(X).mean))
