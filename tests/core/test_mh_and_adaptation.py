import math

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from pymc_kameleon.core.adaptation.history import HistoryBuffer
from pymc_kameleon.core.adaptation.scales import RobbinsMonro, VanishingProbability
from pymc_kameleon.core.kameleon.family import KameleonProposal
from pymc_kameleon.core.kameleon.kernels import GaussianKernel
from pymc_kameleon.core.linalg import SingularCovarianceError, gaussian_logpdf_chol, jittered_cholesky
from pymc_kameleon.core.mh import accept_probability, metropolis_accept, mh_log_ratio, mh_log_ratio_batch


def test_exact_log_acceptance_ratio_with_asymmetric_proposal():
    """Fixed inputs; the answer is computed independently with SciPy densities."""
    Z = np.array([[0.0, 0.0], [1.0, 0.5], [-0.5, 1.5], [2.0, -1.0]])
    sigma, gamma2, nu2 = 1.0, 0.01, 0.8
    y = np.array([0.2, 0.1])
    x = np.array([0.9, -0.4])

    def log_target(p):  # a 2-d banana, b = 0.5
        return -0.5 * p[0] ** 2 - 0.5 * (p[1] - 0.5 * p[0] ** 2) ** 2

    prop = KameleonProposal(Z, GaussianKernel(sigma), gamma2, nu2)
    # Closed-form covariances (eq. 5 written out with explicit loops)
    def cov(c):
        k = np.exp(-np.sum((Z - c) ** 2, axis=1) / (2 * sigma**2))
        M = 2.0 / sigma**2 * (Z - c).T * k  # d x n
        H = np.eye(4) - np.ones((4, 4)) / 4
        return gamma2 * np.eye(2) + nu2 * M @ H @ M.T

    log_q_rev = multivariate_normal(x, cov(x)).logpdf(y)
    log_q_fwd = multivariate_normal(y, cov(y)).logpdf(x)
    expected = log_target(x) - log_target(y) + log_q_rev - log_q_fwd
    got = mh_log_ratio(log_target(x), log_target(y), prop.at(x).log_density(y), prop.at(y).log_density(x))
    assert got == pytest.approx(expected, rel=1e-12)
    # The asymmetric q-terms matter here: leaving them out changes the ratio.
    assert abs(log_q_rev - log_q_fwd) > 0.1
    # The target part by hand: log pi(x) = -0.405 - 0.5 (-0.4 - 0.405)^2 = -0.7290125 and
    # log pi(y) = -0.02 - 0.5 (0.08)^2 = -0.0232; the q-terms are -2.27392213 (reverse)
    # and -2.15424803 (forward), so log alpha = -0.7058125 - 0.1196741 = -0.8254866.
    assert got == pytest.approx(-0.82548659839693, rel=1e-10)


@pytest.mark.parametrize("bad", [np.nan, -np.inf, np.inf])
def test_nonfinite_proposal_is_rejected(bad):
    # +inf too: no density takes it, and accepting it let a new user's chain run into a region where a
    # Potential was +inf and stay there (every draw inside it)
    assert mh_log_ratio(bad, 0.0) == -math.inf
    assert mh_log_ratio_batch(np.array([bad, 0.5]), np.zeros(2)).tolist() == [-math.inf, 0.5]
    assert accept_probability(mh_log_ratio(bad, 0.0)) == 0.0
    accepted, prob = metropolis_accept(mh_log_ratio(bad, 0.0), np.random.default_rng(0))
    assert not accepted and prob == 0.0


def test_accept_probability_is_capped_and_nan_safe():
    assert accept_probability(3.0) == 1.0
    assert accept_probability(math.log(0.25)) == pytest.approx(0.25)
    assert accept_probability(np.nan) == 0.0
    assert mh_log_ratio(1.0, np.inf) == -math.inf  # inf - inf is NaN: reject


def test_metropolis_accept_frequency():
    rng = np.random.default_rng(0)
    n = 20_000
    hits = sum(metropolis_accept(math.log(0.3), rng)[0] for _ in range(n))
    assert abs(hits / n - 0.3) < 4 * math.sqrt(0.3 * 0.7 / n)


def test_jittered_cholesky():
    A = np.array([[1.0, 1.0], [1.0, 1.0]])  # singular PSD
    L, jitter = jittered_cholesky(A)
    assert jitter > 0
    np.testing.assert_allclose(L @ L.T, A + jitter * np.eye(2), atol=1e-12)
    L, jitter = jittered_cholesky(np.eye(2))
    assert jitter == 0.0
    with pytest.raises(SingularCovarianceError, match="non-finite"):
        jittered_cholesky(np.array([[np.nan, 0], [0, 1.0]]))
    with pytest.raises(SingularCovarianceError, match="not positive definite"):
        jittered_cholesky(-np.eye(2))


def test_gaussian_logpdf_chol():
    C = np.array([[2.0, 0.3], [0.3, 0.5]])
    L = np.linalg.cholesky(C)
    x, m = np.array([0.4, -1.0]), np.array([0.1, 0.2])
    assert gaussian_logpdf_chol(x, m, L) == pytest.approx(multivariate_normal(m, C).logpdf(x), rel=1e-12)


def test_robbins_monro_reaches_target():
    """With acceptance probability exp(-s), the fixed point is s* = -log(0.234)."""
    rm = RobbinsMonro(initial=10.0, target=0.234)
    for _ in range(20_000):
        rm.update(math.exp(-rm.value))
    assert rm.value == pytest.approx(-math.log(0.234), rel=0.02)


def test_robbins_monro_negative_control_wrong_direction():
    """Feeding 1 - alpha drives the scale away from s*: the previous check would fail."""
    rm = RobbinsMonro(initial=10.0, target=0.234)
    for _ in range(2000):
        rm.update(1 - math.exp(-rm.value))
    assert abs(rm.value - (-math.log(0.234))) > 0.5


def test_vanishing_probability():
    p = VanishingProbability(1.0)
    assert p(1) == 1.0 and p(100) == pytest.approx(0.01)
    assert sum(p(t) for t in range(1, 100_000)) > 10  # diverging sum
    with pytest.raises(ValueError, match="decay"):
        VanishingProbability(1.5)


def test_history_buffer_thins_evenly_and_stays_bounded():
    buf = HistoryBuffer(dim=1, capacity=8)
    for t in range(100):
        buf.append([t])
    assert len(buf) <= 8
    stored = buf.points[:, 0]
    assert np.all(stored % buf.stride == 0)  # evenly spaced
    assert np.all(np.diff(stored) == buf.stride)
    assert stored[-1] >= 100 - buf.stride  # reaches the recent history


def _previous_history_points(values, capacity):
    """The buffer's rule before steps with several points: one point per append, every other point
    dropped when full."""
    kept, stride = [], 1
    for seen, value in enumerate(values):
        if seen % stride == 0:
            if len(kept) == capacity:
                kept, stride = kept[::2], 2 * stride
            if seen % stride == 0:
                kept.append(value)
    return np.array(kept)


def test_history_buffer_single_points_as_before():
    """One point per step: the same points as the rule it replaced (draws kept bit for bit)."""
    for capacity, n in [(8, 100), (10, 1000), (7, 333)]:
        buf = HistoryBuffer(dim=1, capacity=capacity)
        for t in range(n):
            buf.append([t])
        np.testing.assert_array_equal(buf.points[:, 0], _previous_history_points(range(n), capacity))


def test_history_buffer_keeps_every_chain_when_thinning_population_rows():
    """Pooled tuning records every chain's state per step: thinned, the buffer keeps whole steps, so
    every chain's states stay, evenly spaced. Control: the same rows appended one by one keep chain 0's
    alone (the bug this replaced)."""
    chains, steps = 4, 400
    by_steps, by_points = HistoryBuffer(dim=2, capacity=100), HistoryBuffer(dim=2, capacity=100)
    for t in range(steps):
        rows = np.column_stack([np.arange(chains), np.full(chains, t)])  # (chain, step)
        by_steps.append_rows(rows)
        for row in rows:
            by_points.append(row)
    kept = by_steps.points
    assert len(kept) <= 100
    chain_counts = np.bincount(kept[:, 0].astype(int), minlength=chains)
    assert np.all(chain_counts == chain_counts[0]) and chain_counts[0] >= 100 // (2 * chains)
    step_of = kept[::chains, 1]
    assert np.all(np.diff(step_of) == by_steps.stride) and step_of[-1] >= steps - by_steps.stride
    assert set(by_points.points[:, 0]) == {0.0}  # the control: thinned point by point
    with pytest.raises(ValueError, match="capacity"):
        HistoryBuffer(2, 3).append_rows(np.zeros((4, 2)))


def test_history_buffer_subsample_discards_transient():
    buf = HistoryBuffer(dim=1, capacity=1000)
    for t in range(200):
        buf.append([t])
    Z = buf.subsample(50, np.random.default_rng(0), discard_fraction=0.5)
    assert Z.shape == (50, 1)
    assert Z.min() >= 100
    assert len(np.unique(Z)) == 50  # without replacement
    assert buf.subsample(500, np.random.default_rng(0)).shape == (100, 1)
    with pytest.raises(ValueError, match="capacity"):
        HistoryBuffer(2, 1)


def test_metropolis_accept_batch_matches_the_scalar_rule():
    from pymc_kameleon.core.mh import metropolis_accept_batch

    log_ratio = np.array([0.3, -0.5, np.nan, -np.inf, -2.0])
    accepted, prob = metropolis_accept_batch(log_ratio, np.random.default_rng(5))
    np.testing.assert_allclose(prob, [1.0, np.exp(-0.5), 0.0, 0.0, np.exp(-2.0)])
    u = np.random.default_rng(5).random(5)
    np.testing.assert_array_equal(accepted, u < prob)
