"""The proposal contract: one harness for every proposal of the package, single-point (Proposal) and
batched (BatchProposal). A new proposal is one line in PROPOSALS or BATCH_PROPOSALS.

The density test is the identity E_{x ~ q(.|y)}[q(x|y') / q(x|y)] = 1 (the density at another
conditioning point y' integrates to one), which holds for any proposal, Gaussian or not, symmetric
or not, and fails for a density off by a factor or a Jacobian; the negative controls show it."""

import math

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.adaptation.scales import RobbinsMonro
from pymc_kameleon.core.adaptation.scan import CoordinateScan
from pymc_kameleon.core.adaptation.transport_map import (
    MapIndependenceProposal,
    MapMixtureProposal,
    MapWalkProposal,
    TriangularMap,
)
from pymc_kameleon.core.adaptation.whitening import Whitening
from pymc_kameleon.core.kameleon.family import KameleonProposal
from pymc_kameleon.core.kameleon.kernels import GaussianKernel, LinearKernel
from pymc_kameleon.core.kameleon.moves import KameleonMoves
from pymc_kameleon.core.kameleon.scale_free import ScaleFreeProposal
from pymc_kameleon.core.kameleon.whitened import WhitenedFamily
from pymc_kameleon.core.mh import mh_log_ratio, mh_log_ratio_batch
from pymc_kameleon.core.proposals import (
    BatchProposal,
    CoordinateProposal,
    IndependenceProposal,
    LangevinProposal,
    Move,
    Proposal,
    RandomWalkProposal,
    langevin_log_density,
)
from pymc_kameleon.core.smc.mixtures import GlobalWalkMixture, IndependenceMixture
from pymc_kameleon.testing import curved_draws

_Z = np.random.default_rng(0).normal(size=(40, 3)) * [1.0, 2.0, 0.5]
_COV = np.array([[1.0, 0.3, 0.0], [0.3, 2.0, -0.4], [0.0, -0.4, 0.7]])
_CHOL = np.linalg.cholesky(_COV)
_PRECISION = np.linalg.inv(_COV)


_MAP = TriangularMap.fit(curved_draws(n=2000, width_slope=0.5))  # a banana whose width changes


def _scan():
    scan = CoordinateScan(3, 0.8, 1.0)
    scan.coordinate = 1
    return scan


def _scale_free(phase: str, am_weight: float = 0.3, independence_weight: float = 0.0):
    """A ScaleFreeProposal on a state in the given phase (whitening, Z and scales fixed)."""
    state = ScaleFreeAdaptation(3, GaussianKernel(1.0)).state
    if phase != "scan":
        state.tune_steps = state.scan_steps
        state.whitening = Whitening.from_moments(np.array([1.0, -2.0, 0.5]), _COV)
        state.am_scale = RobbinsMonro(0.9)
    if phase == "kameleon":
        state.family = KameleonProposal(_Z, GaussianKernel(1.3), 0.04, 0.5)
    assert state.phase == phase
    state.independence_weight = independence_weight
    return ScaleFreeProposal(state, am_weight)


PROPOSALS = {
    "isotropic random walk": lambda: RandomWalkProposal(0.7, dim=3),
    "adaptive-metropolis random walk": lambda: RandomWalkProposal(0.8, chol=_CHOL),
    "coordinate scan": lambda: CoordinateProposal(_scan()),
    "langevin": lambda: LangevinProposal(0.6 * _CHOL, lambda theta: -_PRECISION @ theta),
    "kameleon gaussian": lambda: KameleonMoves(KameleonProposal(_Z, GaussianKernel(1.3), 0.04, 0.5)),
    "kameleon linear": lambda: KameleonMoves(KameleonProposal(_Z, LinearKernel(), 0.04, 0.01)),
    "scale-free, scan": lambda: _scale_free("scan"),
    "scale-free, adaptive metropolis": lambda: _scale_free("adaptive_metropolis"),
    "scale-free, kameleon/AM mixture": lambda: _scale_free("kameleon"),
    "scale-free, kameleon alone": lambda: _scale_free("kameleon", am_weight=0.0),
    "independence student-t": lambda: IndependenceProposal(np.array([0.5, -1.0, 2.0]), _CHOL, 10.0),
    "independence through a triangular map": lambda: MapIndependenceProposal(_MAP, 10.0),
    "random walk through a triangular map": lambda: MapWalkProposal(_MAP, 0.8),
    "the map shape's mixture": lambda: MapMixtureProposal(_MAP, lambda: 0.8),
    "scale-free, AM + independence": lambda: _scale_free("adaptive_metropolis", independence_weight=0.4),
    "scale-free, kameleon/AM + independence": lambda: _scale_free("kameleon", independence_weight=0.4),
}

_WHITENING = Whitening.from_moments(np.array([0.5, 0.0, -1.0]), 0.5 * _COV)


def _family():
    return KameleonProposal(_Z, GaussianKernel(1.3), 0.04, 0.5)


BATCH_PROPOSALS = {
    "kameleon family": _family,
    "whitened family": lambda: WhitenedFamily(_family(), _WHITENING),
    "global walk mixture": lambda: GlobalWalkMixture(_family(), 0.8, 0.3),
    "independence mixture": lambda: IndependenceMixture(_family(), 0.3, 3.0),
}


@pytest.fixture(params=sorted(PROPOSALS))
def proposal(request):
    return PROPOSALS[request.param]()


@pytest.fixture(params=sorted(BATCH_PROPOSALS))
def batch_proposal(request):
    return BATCH_PROPOSALS[request.param]()


def test_every_proposal_implements_the_protocol(proposal):
    assert isinstance(proposal, Proposal)
    assert not isinstance(proposal, BatchProposal)


def test_every_batch_proposal_implements_the_protocol(batch_proposal):
    assert isinstance(batch_proposal, BatchProposal)


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


def _identity_z(draws, log_q_at_y, log_q_at_other):
    """z-score of mean(q(x|y') / q(x|y)) - 1 over draws x ~ q(.|y): 0 in expectation when q is right."""
    ratio = np.exp(log_q_at_other - log_q_at_y)
    return (ratio.mean() - 1.0) / (ratio.std() / math.sqrt(draws.shape[0]))


def _single_identity_z(proposal, log_density, n=20_000, seed=2):
    rng = np.random.default_rng(seed)
    y = np.array([0.5, 1.0, -0.3])
    # The other conditioning point: half a typical move away (on the scan's line, for the scan).
    other = y + 0.5 * (proposal.propose(y, rng).x - y)
    X = np.array([proposal.propose(y, rng).x for _ in range(n)])
    at_y = np.array([log_density(x, y) for x in X])
    at_other = np.array([log_density(x, other) for x in X])
    return _identity_z(X, at_y, at_other)


def _reference_z(proposal, log_density, n=20_000, seed=2, spread=2.0):
    """z-score of mean(r(x) / q(x|y)) - 1 over draws x ~ q(.|y), for a Gaussian r with ``spread`` times
    the draws' covariance: the form of the identity for a proposal that ignores y (q(x|y') / q(x|y) is
    then 1). Through a curved map q is thin where such an r is not (inside the curve), and r / q must
    have a finite variance there: a tighter r."""
    rng = np.random.default_rng(seed)
    y = np.array([0.5, 1.0, -0.3])
    X = np.array([proposal.propose(y, rng).x for _ in range(n)])
    ref = multivariate_normal(X.mean(axis=0), spread * np.cov(X, rowvar=False)).logpdf(X)
    return _identity_z(X, np.array([log_density(x, y) for x in X]), ref)


@pytest.mark.slow
def test_draws_follow_the_stated_density(proposal):
    """Monte Carlo, 20 000 draws: the density at a nearby conditioning point integrates to one
    against the draws (|z| < 5); for an independence proposal, a reference density does."""
    if isinstance(proposal, MapIndependenceProposal):
        assert abs(_reference_z(proposal, proposal.log_density, spread=0.5)) < 5
    elif isinstance(proposal, IndependenceProposal):
        assert abs(_reference_z(proposal, proposal.log_density)) < 5
    else:
        assert abs(_single_identity_z(proposal, proposal.log_density)) < 5


def test_independence_density_negative_control():
    """The reference form fails for a Student-t density with the wrong degrees of freedom or scale."""
    mean = np.array([0.5, -1.0, 2.0])
    draws_from = IndependenceProposal(mean, _CHOL, 10.0)
    assert abs(_reference_z(draws_from, IndependenceProposal(mean, _CHOL, 3.0).log_density)) > 8
    assert abs(_reference_z(draws_from, IndependenceProposal(mean, 1.3 * _CHOL, 10.0).log_density)) > 8


@pytest.mark.slow
def test_map_independence_density_negative_control():
    """The reference form fails for the density of the map without its quadratic shifts (fitted to the
    same draws) and for the Student-t with the wrong degrees of freedom (|z| about 40 and 13; the right
    density gives -2.9 to 0.5 at seeds 2-5). The Jacobian's varying part, left out, gives only 8.6:
    the invariance test of test_transport_map.py shows that error more clearly."""
    draws_from = MapIndependenceProposal(_MAP, 10.0)
    linear = TriangularMap.fit(curved_draws(n=2000, width_slope=0.5), quadratic=False)
    assert abs(_reference_z(draws_from, MapIndependenceProposal(linear, 10.0).log_density, spread=0.5)) > 8
    assert abs(_reference_z(draws_from, MapIndependenceProposal(_MAP, 3.0).log_density, spread=0.5)) > 8


def test_density_test_negative_controls():
    """The same test fails for a random walk whose density has the variance off by a factor 2, and
    for a scale-free mixture whose density forgets the Jacobian of the whitening."""
    draws_from = RandomWalkProposal(0.7, dim=3)
    wrong = RandomWalkProposal(0.7 * math.sqrt(2), dim=3)
    assert abs(_single_identity_z(draws_from, wrong.log_density)) > 8
    mixture = _scale_free("kameleon")
    log_det = mixture.state.whitening.log_det
    without_jacobian = lambda x, y: mixture.log_density(x, y) + log_det  # noqa: E731
    # The Jacobian is a constant: it cancels in the ratio, so the identity test needs the draws'
    # own density to see it; q(x|y) must then integrate to one against a reference density.
    rng = np.random.default_rng(3)
    y = np.array([0.5, 1.0, -0.3])
    X = np.array([mixture.propose(y, rng).x for _ in range(20_000)])
    ref = multivariate_normal(y, 0.5 * np.cov(X, rowvar=False)).logpdf(X)
    right = np.array([mixture.log_density(x, y) for x in X])
    assert abs(_identity_z(X, right, ref)) < 5
    assert abs(_identity_z(X, right - log_det, ref)) > 8
    assert abs(_identity_z(X, np.array([without_jacobian(x, y) for x in X]), ref)) > 8


def test_batch_draws_follow_the_stated_density(batch_proposal):
    """sample_batch's log q equals log_density_batch at its draws, and the identity test holds."""
    rng = np.random.default_rng(4)
    n = 20_000
    Y = np.tile([0.5, 1.0, -0.3], (n, 1))
    X, log_q = batch_proposal.sample_batch(Y, rng)
    np.testing.assert_allclose(log_q, batch_proposal.log_density_batch(X, Y), rtol=1e-9, atol=1e-9)
    other = Y + 0.5 * (X[:1] - Y[:1])
    at_other = batch_proposal.log_density_batch(X, np.tile(other[0], (n, 1)))
    assert abs(_identity_z(X, log_q, at_other)) < 5
    factors = batch_proposal.factor_batch(Y[:5])
    np.testing.assert_allclose(
        batch_proposal.log_density_batch(X[:5], Y[:5], factors=factors), log_q[:5], rtol=1e-9, atol=1e-9
    )


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
    family.nu2 = 2.0  # set on the family by whoever tunes it (ScaleFreeState): the cache follows
    fresh = KameleonProposal(_Z, GaussianKernel(1.3), 0.04, 2.0).at(move.x)
    assert np.allclose(moves.at_current(move.x).chol, fresh.chol, rtol=1e-12)
    family.gamma2 = 0.09
    fresh = KameleonProposal(_Z, GaussianKernel(1.3), 0.09, 2.0).at(move.x)
    assert np.allclose(moves.at_current(move.x).chol, fresh.chol, rtol=1e-12)


def test_langevin_density_and_its_hastings_terms():
    """Hand-built: the drift at each end enters its own density; a drift that is not finite at the
    proposal makes the move infeasible."""
    L = _CHOL * 0.5
    y = np.array([0.2, 0.0, -0.1])
    prop = LangevinProposal(L, lambda theta: -_PRECISION @ theta)
    mean = y + 0.5 * L @ L.T @ (-_PRECISION @ y)
    x = np.array([0.4, -0.3, 0.2])
    assert prop.log_density(x, y) == pytest.approx(multivariate_normal(mean, L @ L.T).logpdf(x), rel=1e-12)
    assert langevin_log_density(x, y, -_PRECISION @ y, L) == prop.log_density(x, y)
    move = prop.propose(y, np.random.default_rng(4))
    assert move.log_q_reverse == pytest.approx(
        multivariate_normal(move.x + 0.5 * L @ L.T @ (-_PRECISION @ move.x), L @ L.T).logpdf(y), rel=1e-12
    )
    bad = LangevinProposal(L, lambda theta: np.full(3, np.nan) if theta is not y else -_PRECISION @ theta)
    assert not bad.propose(y, np.random.default_rng(4)).feasible


def test_scale_free_moves_say_which_component_drew_them():
    rng = np.random.default_rng(5)
    y = np.array([0.3, -0.2, 0.1])
    assert _scale_free("scan").propose(y, rng).component == "scan"
    assert _scale_free("adaptive_metropolis").propose(y, rng).component == "adaptive_metropolis"
    drawn = {_scale_free("kameleon").propose(y, rng).component for _ in range(50)}
    assert drawn == {"kameleon", "adaptive_metropolis"}
    drawn = {_scale_free("kameleon", independence_weight=0.4).propose(y, rng).component for _ in range(50)}
    assert drawn == {"kameleon", "adaptive_metropolis", "independence"}
    with_independence = _scale_free("adaptive_metropolis", independence_weight=0.4)
    assert not with_independence.symmetric
    assert {with_independence.propose(y, rng).component for _ in range(50)} == {
        "adaptive_metropolis", "independence"}


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
