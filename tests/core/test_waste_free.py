"""Waste-free KASS stages without PyMC: the chains (run_chains) and their single-run error bar
(chain_mean_variance, waste_free_relative_variance; Dau and Chopin 2022)."""

import numpy as np
import pytest

from pymc_kameleon.core.kameleon.kernels import GaussianKernel
from pymc_kameleon.core.smc.evidence import (
    chain_autocorrelation_time,
    chain_mean_variance,
    coordinate_autocorrelation_times,
    slowest_chain_autocorrelation,
    waste_free_relative_variance,
)
from pymc_kameleon.core.smc.population import population_mh_move, tempered_log_density
from pymc_kameleon.core.smc.rejuvenation import fit_stage_proposal
from pymc_kameleon.core.smc.waste_free import (
    WASTE_FREE_FINAL_THINNING,
    check_waste_free_options,
    run_chains,
    waste_free_chain_length,
    waste_free_final_thinning,
)

COV = np.array([[4.0, 1.8], [1.8, 1.0]])
PREC = np.linalg.inv(COV)


def evaluate(P):
    return -0.005 * np.sum(P**2, axis=1), -0.5 * np.einsum("ij,jk,ik->i", P, PREC, P)


def ar1_chains(P, M, rho, seed):
    """M stationary AR(1) chains of length P with unit variance, as a (P, M) array."""
    rng = np.random.default_rng(seed)
    X = np.empty((P, M))
    x = rng.normal(size=M)
    for p in range(P):
        x = rho * x + np.sqrt(1 - rho**2) * rng.normal(size=M)
        X[p] = x
    return X


@pytest.mark.parametrize(
    "P, M, seed, rho, expected",
    # MCMC_init_seq of the `particles` package (0.4, Dau's implementation) on the same arrays.
    [
        (4, 3, 0, 0.0, 0.3899973897610943),
        (12, 5, 1, 0.6, 0.9857673589365813),
        (30, 7, 2, 0.9, 18.486281535157875),
        (1, 9, 3, 0.0, 1.464127212319853),
    ],
)
def test_chain_mean_variance_matches_the_reference_implementation(P, M, seed, rho, expected):
    assert chain_mean_variance(ar1_chains(P, M, rho, seed)) == pytest.approx(expected, rel=1e-12)


def test_chain_mean_variance_hand_computed():
    """P = 3, M = 2: autocovariances about the grand mean, c_k = sum_{t} x_t x_{t+k} / (P M); the pair
    c_1 + c_0 >= 0 is admissible and the sequence runs out, so sigma^2 = -c0 + 2 (c0 + c1 + c2)."""
    X = np.array([[1.0, 2.0], [3.0, 0.0], [2.0, 4.0]])
    Y = X - X.mean()
    c = [np.sum(Y[: 3 - k] * Y[k:]) / 6 for k in range(3)]
    assert c[0] + c[1] >= 0
    assert chain_mean_variance(X) == pytest.approx(-c[0] + 2 * sum(c), rel=1e-14)


@pytest.mark.slow
def test_chain_mean_variance_recovers_the_ar1_asymptotic_variance():
    """AR(1) with rho = 0.5: sigma^2 = (1 + rho) / (1 - rho) = 3. 2000 chains of 50. The naive variance
    (the chains treated as independent draws) is 1: the negative control."""
    X = ar1_chains(50, 2000, 0.5, seed=7)
    assert chain_mean_variance(X) == pytest.approx(3.0, rel=0.08)
    assert chain_mean_variance(X.reshape(1, -1)) == pytest.approx(1.0, rel=0.05)


def test_chain_autocorrelation_time():
    """tau = sigma^2 / c0: (1 + rho) / (1 - rho) = 3 for AR(1) with rho = 0.5, 1 for independent draws, NaN
    for constant chains."""
    assert chain_autocorrelation_time(ar1_chains(50, 2000, 0.5, seed=7)) == pytest.approx(3.0, rel=0.08)
    assert chain_autocorrelation_time(ar1_chains(50, 2000, 0.0, seed=8)) == pytest.approx(1.0, rel=0.08)
    assert np.isnan(chain_autocorrelation_time(np.ones((5, 3))))
    X = ar1_chains(12, 5, 0.6, seed=1)
    assert chain_autocorrelation_time(X) == pytest.approx(chain_mean_variance(X) / X.var(), rel=1e-12)


@pytest.mark.parametrize("scale", [1e-8, 1e-4, 1e6])
def test_chain_mean_variance_and_time_are_free_of_units(scale):
    """Values in other units: the variance scales with their square and the time does not (with an
    absolute tolerance of 1e-10 on the autocovariances, values with sd 1e-8 had every lag admitted and
    a variance of about 0)."""
    X = ar1_chains(40, 15, 0.7, seed=3)
    assert chain_mean_variance(scale * X) == pytest.approx(scale**2 * chain_mean_variance(X), rel=1e-9)
    assert chain_autocorrelation_time(scale * X) == pytest.approx(chain_autocorrelation_time(X), rel=1e-9)


def test_coordinate_autocorrelation_times_are_each_columns_and_free_of_units():
    """Each coordinate's tau equals chain_autocorrelation_time of its column (FFT against the direct
    sums), whatever its units (1e-4, 1e-8, or 1e4 about 5e6); NaN for a constant coordinate; AR(1) with rho =
    0.5 gives 3 and independent draws 1."""
    X = np.stack([ar1_chains(40, 15, rho, seed=s) for s, rho in enumerate((0.7, 0.2, 0.9, 0.5))], axis=-1)
    X[..., 1] *= 1e-4
    X[..., 2] = 1e4 * X[..., 2] + 5e6
    expected = [chain_autocorrelation_time(X[:, :, j]) for j in range(4)]
    # A rate constant's scale: it varies, so it has its time.
    X[..., 3] *= 1e-8
    assert coordinate_autocorrelation_times(X) == pytest.approx(expected, rel=1e-6)
    constants = np.stack([np.full(X.shape[:2], 2.5), np.full(X.shape[:2], 5e6 + 0.1)], axis=-1)
    taus = coordinate_autocorrelation_times(np.concatenate([X[..., :1], constants], axis=-1))
    assert np.isnan(taus[1:]).all() and taus[0] == pytest.approx(expected[0], rel=1e-6)
    both = np.stack([ar1_chains(50, 2000, 0.5, seed=7), ar1_chains(50, 2000, 0.0, seed=8)], axis=-1)
    assert coordinate_autocorrelation_times(both) == pytest.approx([3.0, 1.0], rel=0.08)
    with pytest.raises(ValueError, match=r"shape \(P, M, d\)"):
        coordinate_autocorrelation_times(X[:, :, 0])


def test_slowest_chain_autocorrelation_names_what_mixes_slowest():
    """A slow coordinate beside a fast log-likelihood is the one named; a slow log-likelihood beside
    fast coordinates is; constant coordinates are skipped."""
    fast, slow = ar1_chains(40, 200, 0.0, seed=1), ar1_chains(40, 200, 0.9, seed=2)
    tau, what = slowest_chain_autocorrelation(fast, np.stack([fast, slow], axis=-1))
    assert what == "coordinate 1 of the particles" and tau == pytest.approx(chain_autocorrelation_time(slow))
    assert slowest_chain_autocorrelation(fast, np.stack([fast, slow], axis=-1), ["mu", "tau_log__"])[1] == (
        "tau_log__"
    )
    tau, what = slowest_chain_autocorrelation(slow, np.stack([fast, np.ones_like(fast)], axis=-1))
    assert what == "the log-likelihood" and tau == pytest.approx(chain_autocorrelation_time(slow))


def test_waste_free_relative_variance_of_independent_draws_is_the_importance_sampling_one():
    """N chains of length 1: sigma^2 is the (biased) variance of N W, so the result is
    (N sum W^2 - 1) / N, the importance-sampling relative variance divided by N."""
    W = np.random.default_rng(3).gamma(2.0, size=50)
    W /= W.sum()
    assert waste_free_relative_variance(W, 50) == pytest.approx((50 * np.sum(W**2) - 1) / 50, rel=1e-12)


def test_waste_free_relative_variance_reads_the_particles_step_by_step():
    """Particle p*M + m is step p of chain m; a trailing partial step is left out."""
    W = np.random.default_rng(4).gamma(2.0, size=23)
    W /= W.sum()
    n, M = 23, 5
    expected = chain_mean_variance(n * W[:20].reshape(4, 5)) / n
    assert waste_free_relative_variance(W, M) == pytest.approx(expected, rel=1e-14)


def stage(seed=5, n=300):
    rng = np.random.default_rng(seed)
    X = rng.multivariate_normal([0.0, 0.0], COV, size=n)
    return fit_stage_proposal(X, GaussianKernel(1.0), "median", "auto", 1000, 1.0, rng, am_weight=0.25,
                              independence_weight=0.25).family


def starts(M, seed=0):
    X = np.random.default_rng(seed).multivariate_normal([1.0, -2.0], COV, size=M)
    log_prior, loglik = evaluate(X)
    return X, log_prior, loglik, tempered_log_density(log_prior, loglik, 0.7)


@pytest.mark.parametrize("cache_factors", [False, True])
@pytest.mark.parametrize("thin", [1, 2])
def test_run_chains_is_population_moves_stored_step_by_step(cache_factors, thin):
    """N = 10 states from M = 3 chains: lengths 4, 3, 3 (7 proposals); the same random stream and states
    as population moves of the first k chains applied by hand. With thin = 2 each kept state is two
    moves after the one before (the moves between are made, not kept): 14 proposals in 6 calls."""
    family = stage()
    X0, lp0, ll0, lt0 = starts(3)
    calls = []

    def counted(P):
        calls.append(P.shape[0])
        return evaluate(P)

    out = run_chains(X0, lp0, ll0, lt0, 10, family, counted, 0.7, np.random.default_rng(9),
                     cache_factors=cache_factors, thin=thin)
    assert calls == [k for k in (3, 3, 1) for _ in range(thin)]
    assert out.n_chains == 3 and out.steps == 3 * thin
    rng = np.random.default_rng(9)
    X, lt, rows = X0.copy(), lt0.copy(), [X0.copy()]
    for k in (3, 3, 1):
        for _ in range(thin):
            move = population_mh_move(X[:k], lt[:k], family, evaluate, 0.7, rng)
            acc = np.flatnonzero(move.accepted)
            X[acc], lt[acc] = move.proposals[acc], move.log_target[acc]
        rows.append(X[:k].copy())
    np.testing.assert_array_equal(out.X, np.concatenate(rows))
    np.testing.assert_array_equal(out.log_target, tempered_log_density(out.log_prior, out.loglik, 0.7))
    np.testing.assert_array_equal(out.X[:3], X0)
    assert 0 < out.mean_accept < 1 and 0 <= out.unmoved <= 1


def test_run_chains_thin_must_be_a_positive_integer():
    X0, lp0, ll0, lt0 = starts(3)
    for thin in (0, 1.5):
        with pytest.raises(ValueError, match="thin must be an integer >= 1"):
            run_chains(X0, lp0, ll0, lt0, 10, stage(), evaluate, 0.7, np.random.default_rng(9), thin=thin)


def test_waste_free_options_are_named():
    check_waste_free_options(True, 20, None, 2000)
    with pytest.raises(ValueError, match="chain_length"):
        check_waste_free_options(True, 1, None, 2000)
    with pytest.raises(ValueError, match="n_steps does not apply"):
        check_waste_free_options(True, 20, 5, 2000)
    with pytest.raises(ValueError, match="more than the 10 particles"):
        check_waste_free_options(True, 20, None, 10)
    with pytest.raises(TypeError, match="waste_free"):
        check_waste_free_options("yes", 20, None, 2000)
    check_waste_free_options(False, "auto", 5, 10)
    with pytest.raises(ValueError, match="applies only to waste-free runs"):
        check_waste_free_options(False, 50, None, 2000)
    check_waste_free_options(True, "auto", None, 10)
    with pytest.raises(ValueError, match="n_steps does not apply"):
        check_waste_free_options(True, "auto", 5, 2000)
    with pytest.raises(ValueError, match='"auto" or an integer'):
        check_waste_free_options(True, "long", None, 2000)
    check_waste_free_options(True, "auto", None, 2000, final_thinning=1)
    for wrong in (0, 2.5, "auto"):
        with pytest.raises((ValueError, TypeError), match="final_thinning"):
            check_waste_free_options(True, "auto", None, 2000, final_thinning=wrong)
    with pytest.raises(ValueError, match="final_thinning=5 applies only to waste-free runs"):
        check_waste_free_options(False, "auto", None, 2000, final_thinning=5)
    assert waste_free_final_thinning(None) == WASTE_FREE_FINAL_THINNING == 5
    assert waste_free_final_thinning(2) == 2


def test_automatic_chain_length_makes_about_twenty_chains():
    """About 20 chains; below 500 particles chains of 25 while 4 chains remain (decision 0054), never
    shorter than 10, at most N."""
    assert waste_free_chain_length("auto", 1000) == 50
    assert waste_free_chain_length("auto", 16000) == 800
    assert waste_free_chain_length("auto", 500) == waste_free_chain_length("auto", 200) == 25
    assert waste_free_chain_length("auto", 100) == 25  # 4 chains
    assert waste_free_chain_length("auto", 60) == 15  # 4 chains
    assert waste_free_chain_length("auto", 30) == 10  # few particles: fewer chains, never shorter than 10
    assert waste_free_chain_length("auto", 6) == 6
    assert waste_free_chain_length(7, 1000) == 7
    # M = ceil(N / P) chains share the N states: 2 chains of 500 for P = 600 or 501, and the same M back.
    for asked in (600, 501, 7, 333, 1000):
        length = waste_free_chain_length(asked, 1000)
        assert -(-1000 // length) == -(-1000 // asked)
    assert waste_free_chain_length(600, 1000) == waste_free_chain_length(501, 1000) == 500
    assert waste_free_chain_length(10, 105) == 10  # 11 chains: 6 of 10 states, 5 of 9


@pytest.mark.slow
@pytest.mark.parametrize("wrong, thin", [(False, 1), (True, 1), (False, 3)])
def test_waste_free_chains_keep_the_target(wrong, thin, monkeypatch):
    """Exact draws of the target as starts: all N = 4000 states of 200 chains of 20 have the target's
    mean and variance, within 4 standard errors that account for the chains' autocorrelation
    (chain_mean_variance); so do thinned chains (3 moves between kept states, the last stage's
    final_thinning). Negative control: the mixture's Hastings terms replaced by the Kameleon
    density alone (the family is fitted to a squeezed draw, so the components differ), which is caught."""
    from pymc_kameleon.core.smc import mixtures

    cov = np.linalg.inv(PREC + 0.01 * np.eye(2))
    rng = np.random.default_rng(11)
    X0 = rng.multivariate_normal([0.0, 0.0], cov, size=200)
    log_prior, loglik = evaluate(X0)
    Z = rng.multivariate_normal([0.0, 0.0], cov / 25, size=500)
    family = fit_stage_proposal(Z, GaussianKernel(1.0), "median", "auto", 1000, 4.0, rng, am_weight=0.25,
                                independence_weight=0.25).family
    if wrong:
        monkeypatch.setattr(mixtures, "mixture_log_density", lambda main, _other, _w: main)
    out = run_chains(X0, log_prior, loglik, tempered_log_density(log_prior, loglik, 1.0), 4000, family,
                     evaluate, 1.0, rng, thin=thin)
    z = []
    for j in range(2):
        for values, truth in ((out.X[:, j], 0.0), (out.X[:, j] ** 2, cov[j, j])):
            chains = values.reshape(20, 200)
            se = np.sqrt(chain_mean_variance(chains) / values.size)
            z.append(abs(values.mean() - truth) / se)
    if wrong:
        assert max(z) > 6, z
    else:
        assert max(z) < 4, z
