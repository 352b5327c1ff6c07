"""One harness for every proposal in core/proposals.py: a new proposal is one line in PROPOSALS."""

import math

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from pymc_kameleon.core.kameleon.family import KameleonProposal
from pymc_kameleon.core.kameleon.kernels import GaussianKernel, LinearKernel
from pymc_kameleon.core.kameleon.moves import KameleonMoves
from pymc_kameleon.core.mh import mh_log_ratio, mh_log_ratio_batch
from pymc_kameleon.core.proposals import LangevinProposal, Move, RandomWalkProposal, langevin_log_density

_Z = np.random.default_rng(0).normal(size=(40, 3)) * [1.0, 2.0, 0.5]
_CHOL = np.linalg.cholesky(np.array([[1.0, 0.3, 0.0], [0.3, 2.0, -0.4], [0.0, -0.4, 0.7]]))

PROPOSALS = {
    "isotropic random walk": lambda: RandomWalkProposal(0.7, dim=3),
    "adaptive-metropolis random walk": lambda: RandomWalkProposal(0.8, chol=_CHOL),
    "kameleon gaussian": lambda: KameleonMoves(KameleonProposal(_Z, GaussianKernel(1.3), 0.04, 0.5)),
    "kameleon linear": lambda: KameleonMoves(KameleonProposal(_Z, LinearKernel(), 0.04, 0.01)),
}


@pytest.fixture(params=sorted(PROPOSALS))
def proposal(request):
    return PROPOSALS[request.param]()


def test_move_carries_both_hastings_terms(proposal):
    """log q(x|y) and log q(y|x) in the Move equal the proposal's own densities (0, 0 if symmetric)."""
    rng = np.random.default_rng(1)
    y = np.array([0.3, -0.2, 0.1])
    for _ in range(5):
        move = proposal.propose(y, rng)
        assert move.feasible and move.x.shape == y.shape
        if proposal.symmetric:
            assert move.log_q_forward == 0.0 and move.log_q_reverse == 0.0
            assert proposal.log_density(move.x, y) == pytest.approx(
                proposal.log_density(y, move.x), rel=1e-12
            )
        else:
            assert move.log_q_forward == pytest.approx(proposal.log_density(move.x, y), rel=1e-10)
            assert move.log_q_reverse == pytest.approx(proposal.log_density(y, move.x), rel=1e-10)


def test_draws_follow_the_stated_density(proposal):
    """Monte Carlo: the mean and covariance of 20 000 draws match those of q(.|y) (5 MCSE)."""
    rng = np.random.default_rng(2)
    y = np.array([0.5, 1.0, -0.3])
    X = np.array([proposal.propose(y, rng).x for _ in range(20_000)])
    # The density's own moments, by numerical integration against importance draws would be
    # costly; instead check that log_density is the Gaussian with the empirical moments.
    mean, cov = X.mean(axis=0), np.cov(X, rowvar=False)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(mean - y) < 5 * sd / math.sqrt(X.shape[0]))
    probe = X[:50]
    expected = multivariate_normal(y, cov).logpdf(probe)
    got = np.array([proposal.log_density(x, y) for x in probe])
    assert np.allclose(got, expected, atol=0.05 * 3)  # sampling error of cov, d = 3


def test_density_test_negative_control():
    """A density that is off by a factor 2 in variance is caught by the same comparison."""
    rng = np.random.default_rng(2)
    y = np.zeros(3)
    proposal = RandomWalkProposal(0.7, dim=3)
    X = np.array([proposal.propose(y, rng).x for _ in range(20_000)])
    wrong = RandomWalkProposal(0.7 * math.sqrt(2), dim=3)
    expected = multivariate_normal(y, np.cov(X, rowvar=False)).logpdf(X[:50])
    got = np.array([wrong.log_density(x, y) for x in X[:50]])
    assert not np.allclose(got, expected, atol=0.15)


def test_kameleon_cache_follows_accepted_moves_and_nu2():
    """After accept(move) the cached factor at the new state is the one computed at move.x, and
    a change of nu2 refreshes it (a stale factor would give a wrong forward density)."""
    family = KameleonProposal(_Z, GaussianKernel(1.3), 0.04, 0.5)
    moves = KameleonMoves(family)
    rng = np.random.default_rng(3)
    y = np.array([0.1, 0.2, 0.3])
    move = moves.propose(y, rng)
    moves.accept(move)
    assert moves.at_current(move.x) is move.cache[1]
    moves.set_nu2(2.0)
    fresh = KameleonProposal(_Z, GaussianKernel(1.3), 0.04, 2.0).at(move.x)
    assert np.allclose(moves.at_current(move.x).chol, fresh.chol, rtol=1e-12)


def test_langevin_density_and_draws():
    L = _CHOL * 0.5
    g = np.array([1.0, -2.0, 0.5])
    y = np.array([0.2, 0.0, -0.1])
    prop = LangevinProposal(L)
    mean = y + 0.5 * L @ L.T @ g
    x = np.array([0.4, -0.3, 0.2])
    assert prop.log_density(x, y, g) == pytest.approx(multivariate_normal(mean, L @ L.T).logpdf(x), rel=1e-12)
    assert langevin_log_density(x, y, g, L) == prop.log_density(x, y, g)
    rng = np.random.default_rng(4)
    X = np.array([prop.draw(y, g, rng) for _ in range(20_000)])
    assert np.all(np.abs(X.mean(axis=0) - mean) < 5 * np.sqrt(np.diag(L @ L.T) / 20_000))


def test_infeasible_move_is_flagged():
    assert not Move(np.zeros(2), 0.0, math.nan).feasible
    assert Move(np.zeros(2)).feasible


def test_batch_log_ratio_matches_scalar():
    logp_x = np.array([0.0, -1.0, np.nan, -np.inf, 2.0, np.inf])
    logp_y = np.array([-0.5, -1.0, 0.0, 0.0, np.inf, np.inf])
    rev = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.0])
    fwd = np.array([0.3, 0.1, 0.0, 0.0, 0.1, 0.0])
    batch = mh_log_ratio_batch(logp_x, logp_y, rev, fwd)
    scalar = [mh_log_ratio(*args) for args in zip(logp_x, logp_y, rev, fwd)]
    assert np.array_equal(batch, np.array(scalar))
    # hand-computed first entry: 0 - (-0.5) + 0.1 - 0.3 = 0.3
    assert batch[0] == pytest.approx(0.3)
