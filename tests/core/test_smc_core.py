"""The NumPy core of KASS: one population MH sweep, the scale update and the sweep-count rule."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from pymc_kameleon.core.kameleon.family import KameleonProposal
from pymc_kameleon.core.kameleon.kernels import GaussianKernel
from pymc_kameleon.core.smc.evidence import (
    evidence_lag,
    evidence_relative_variance,
    genealogy_stats,
    loglik_rise,
)
from pymc_kameleon.core.smc.population import (
    adapt_log_scale,
    effective_sample_size,
    population_mh_move,
    refine_tempering_step,
    steps_for_acceptance,
    tempered_log_density,
    wrap_about_mean_direction,
)


class ScriptedFamily:
    """A proposal family with fixed proposals and densities, so the ratio is plain arithmetic."""

    def __init__(self, proposals, log_q_forward, log_q_reverse):
        self.proposals = np.asarray(proposals, dtype=float)
        self.log_q_forward = np.asarray(log_q_forward, dtype=float)
        self.log_q_reverse = np.asarray(log_q_reverse, dtype=float)
        self.reverse_args = None

    def sample_batch(self, Y, rng, chunk_size=None, factors=None):
        return self.proposals.copy(), self.log_q_forward.copy()

    def log_density_batch(self, X, Y, chunk_size=None, factors=None):
        self.reverse_args = (np.array(X), np.array(Y))
        return self.log_q_reverse.copy()


class FixedUniforms:
    def __init__(self, u):
        self.u = np.asarray(u, dtype=float)

    def random(self, size):
        assert size == self.u.size
        return self.u


def test_population_move_exact_log_ratios():
    """log alpha = [log p(x*) + beta l(x*)] - log pi_t(x) + log q(x | x*) - log q(x* | x), by hand."""
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    log_target = np.array([-1.0, -2.0, -3.0, -3.0])
    proposals = X + 0.5
    family = ScriptedFamily(
        proposals, log_q_forward=[-0.5, -0.7, -0.1, -0.1], log_q_reverse=[-0.6, -0.2, -0.3, -0.3]
    )
    prior = np.array([-1.5, -np.inf, -2.0, -2.0])
    loglik = np.array([2.0, 5.0, np.nan, -4.0])
    move = population_mh_move(
        X, log_target, family, lambda P: (prior, loglik), beta=0.5, rng=FixedUniforms([0.9, 0.0, 0.0, 0.3])
    )
    # particle 0: (-1.5 + 1) - (-1) + (-0.6) - (-0.5) = 0.4; particle 3: (-2 - 2) - (-3) - 0.3 + 0.1 = -1.2
    np.testing.assert_allclose(move.log_ratio, [0.4, -np.inf, -np.inf, -1.2], rtol=0, atol=1e-14)
    np.testing.assert_allclose(move.accept_prob, [1.0, 0.0, 0.0, math.exp(-1.2)], rtol=1e-14)
    np.testing.assert_allclose(move.log_target, [-0.5, -np.inf, -np.inf, -4.0])
    # u = 0.3 < exp(-1.2) = 0.3012 accepts particle 3; u = 0 cannot accept a zero probability.
    assert move.accepted.tolist() == [True, False, False, True]
    # The reverse density is q(x | x*): evaluated at the current particles, centred at the proposals.
    np.testing.assert_array_equal(family.reverse_args[0], X)
    np.testing.assert_array_equal(family.reverse_args[1], proposals)


def test_population_move_with_a_real_family_matches_single_point_densities():
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(40, 2)) * [3.0, 1.0]
    family = KameleonProposal(Z, GaussianKernel(1.5), gamma2=0.04, nu2=0.3)
    X = rng.normal(size=(25, 2))

    def log_pi(P):
        return -0.5 * np.sum(P**2, axis=1)

    move = population_mh_move(
        X, log_pi(X), family, lambda P: (log_pi(P), np.zeros(len(P))), 1.0, np.random.default_rng(9)
    )
    for i in range(len(X)):
        expected = (
            log_pi(move.proposals[i : i + 1])[0]
            - log_pi(X[i : i + 1])[0]
            + family.at(move.proposals[i]).log_density(X[i])
            - family.at(X[i]).log_density(move.proposals[i])
        )
        assert move.log_ratio[i] == pytest.approx(expected, rel=1e-10, abs=1e-10)


def test_population_move_stream_does_not_depend_on_outcomes():
    """Exactly N uniforms per sweep: the next draw is the same whatever was accepted."""
    family = ScriptedFamily([[1.0], [2.0]], [0.0, 0.0], [0.0, 0.0])
    for loglik in ([0.0, 0.0], [-np.inf, -np.inf]):
        rng = np.random.default_rng(1)
        population_mh_move(
            np.zeros((2, 1)), np.zeros(2), family, lambda P, ll=loglik: (np.zeros(2), np.array(ll)), 1.0, rng
        )
        assert rng.random() == pytest.approx(np.random.default_rng(1).random(3)[2])


def test_tempered_log_density_edge_cases():
    prior = np.array([-1.0, -np.inf, -1.0, -1.0, -1.0])
    loglik = np.array([-2.0, 3.0, np.nan, np.inf, -np.inf])
    np.testing.assert_array_equal(
        tempered_log_density(prior, loglik, 0.5), [-2.0, -np.inf, -np.inf, -np.inf, -np.inf]
    )
    # beta = 0: the likelihood is ignored, but the prior's support still counts.
    np.testing.assert_array_equal(tempered_log_density(prior, loglik, 0.0), [-1.0, -np.inf, -1.0, -1.0, -1.0])


def test_adapt_log_scale_is_equation_4_on_the_log_scale():
    assert adapt_log_scale(0.0, 0.5, 0.234, 1.0) == pytest.approx(0.266)
    assert adapt_log_scale(math.log(2.0), 0.1, 0.234, 0.1) == pytest.approx(math.log(2.0) - 0.0134)
    assert adapt_log_scale(0.7, math.nan, 0.234, 1.0) == 0.7


@pytest.mark.parametrize(
    "alpha, expected",
    [(0.5, 7), (0.234, 18), (0.9, 2), (1.0, 1), (0.0, 40), (math.nan, 40), (0.01, 40)],
)
def test_steps_for_acceptance(alpha, expected):
    # (1 - 0.5)^7 = 0.0078 < 0.01 <= 0.5^6 = 0.0156; (1 - 0.234)^18 = 0.0083 < 0.01 <= 0.766^17
    assert steps_for_acceptance(alpha, 0.99, 1, 40) == expected


def test_cached_factors_give_the_same_sweep():
    """Reusing the current particles' factors changes nothing but the cost."""
    rng = np.random.default_rng(8)
    Z = rng.normal(size=(60, 3)) * [2.0, 1.0, 0.5]
    family = KameleonProposal(Z, GaussianKernel(1.2), gamma2=0.01, nu2=0.5)
    X = rng.normal(size=(30, 3))

    def evaluate(P):
        return -0.5 * np.sum(P**2, axis=1), np.zeros(len(P))

    plain = population_mh_move(
        X, evaluate(X)[0], family, evaluate, 1.0, np.random.default_rng(1), chunk_size=7
    )
    factors = family.factor_batch(X, chunk_size=7)
    cached = population_mh_move(
        X, evaluate(X)[0], family, evaluate, 1.0, np.random.default_rng(1), chunk_size=7,
        current_factors=factors, cache_factors=True,
    )
    np.testing.assert_allclose(cached.proposals, plain.proposals, rtol=1e-12)
    np.testing.assert_allclose(cached.log_ratio, plain.log_ratio, rtol=1e-10, atol=1e-12)
    L, log_norm = cached.proposal_factors
    for i in range(len(X)):
        expected = family.at(cached.proposals[i])
        np.testing.assert_allclose(L[i], expected.chol, rtol=1e-10, atol=1e-14)
        assert log_norm[i] == pytest.approx(expected.log_norm, rel=1e-12)


# ----------------------------------------------------------------- the evidence's error bar
def test_evidence_relative_variance_hand_computed():
    """V = 1 - (N/(N-1))^n (1 - sum over Eves of (their descendants' weight)^2)."""
    weights, eve = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0, 0, 1, 2])
    # Eve masses 0.3, 0.3, 0.4: sum of squares 0.34; (4/3)^2 * 0.66 = 1.17333...
    assert evidence_relative_variance(weights, eve, 2) == pytest.approx(1 - 16 / 9 * 0.66, abs=1e-14)
    # One reweighting and no resampling: the importance-sampling estimate (N sum W^2 - 1)/(N - 1).
    importance = evidence_relative_variance(weights, np.arange(4), 1)
    assert importance == pytest.approx((4 * 0.30 - 1) / 3, abs=1e-14)
    # Equal weights, every particle its own Eve, no resampling: no variance.
    assert evidence_relative_variance(np.full(5, 0.2), np.arange(5), 1) == pytest.approx(0.0, abs=1e-14)
    with pytest.raises(ValueError, match="at least 2 particles"):
        evidence_relative_variance(np.ones(1), np.zeros(1, dtype=int), 1)


# A tempered SMC sampler with a known evidence: x ~ N(0, 1), L(x) = N(y; x, s^2), so
# Z = N(y; 0, 1 + s^2), and every tempered target is Gaussian, so an exact pi_t-invariant
# autoregressive move x' = m + rho (x - m) + sqrt(1 - rho^2) sd eps stands in for MCMC.
TOY_Y, TOY_S, TOY_BETAS, TOY_RHO = 1.0, 0.5, (0.05, 0.2, 0.5, 1.0), 0.5
TOY_LOG_Z = norm.logpdf(TOY_Y, 0.0, math.sqrt(1 + TOY_S**2))


def _systematic(weights, rng):
    positions = (rng.random() + np.arange(weights.size)) / weights.size
    return np.minimum(np.searchsorted(np.cumsum(weights), positions), weights.size - 1)


def _toy_smc(n_particles, rng, resampling):
    """One run: (log Z_hat, V at the last stage)."""
    x, eve, log_z, old_beta = rng.normal(size=n_particles), np.arange(n_particles), 0.0, 0.0
    for t, beta in enumerate(TOY_BETAS, start=1):
        log_w = (beta - old_beta) * norm.logpdf(TOY_Y, x, TOY_S)
        old_beta = beta
        w = np.exp(log_w - log_w.max())
        log_z += log_w.max() + math.log(w.mean())
        w /= w.sum()
        rel_var = evidence_relative_variance(w, eve, t)
        if resampling == "multinomial":
            idx = rng.choice(n_particles, size=n_particles, p=w)
        else:
            idx = _systematic(w, rng)
        x, eve = x[idx], eve[idx]
        precision = 1 + beta / TOY_S**2
        mean, sd = beta * TOY_Y / TOY_S**2 / precision, precision**-0.5
        x = mean + TOY_RHO * (x - mean) + math.sqrt(1 - TOY_RHO**2) * sd * rng.normal(size=n_particles)
    return log_z, rel_var


def _toy_runs(resampling, runs=2000, n_particles=30):
    rng = np.random.default_rng(0)
    out = np.array([_toy_smc(n_particles, rng, resampling) for _ in range(runs)])
    ratio, rel_var = np.exp(out[:, 0] - TOY_LOG_Z), out[:, 1]
    # Z_hat^2 (1 - V) is Lee and Whiteley's unbiased estimator of Z^2.
    z_squared = ratio**2 * (1 - rel_var)
    return ratio, rel_var, z_squared


def _z_score(values, exact):
    return abs(values.mean() - exact) / (values.std(ddof=1) / math.sqrt(values.size))


def test_evidence_relative_variance_is_unbiased_under_multinomial_resampling():
    """Over 2000 runs of 30 particles: Z_hat is unbiased, Z_hat^2 (1 - V) is unbiased for Z^2, and the
    mean of V matches the observed variance of Z_hat / Z."""
    ratio, rel_var, z_squared = _toy_runs("multinomial")
    assert _z_score(ratio, 1.0) < 4
    assert _z_score(z_squared, 1.0) < 4
    assert rel_var.mean() == pytest.approx(ratio.var(ddof=1), rel=0.15)


def test_evidence_relative_variance_negative_control_systematic_resampling():
    """The estimator needs multinomial resampling: after systematic resampling (PyMC's default) it is
    far too small (negative on average here), and Z_hat^2 (1 - V) overestimates Z^2."""
    ratio, rel_var, z_squared = _toy_runs("systematic")
    assert _z_score(ratio, 1.0) < 4  # Z_hat itself is still unbiased
    assert _z_score(z_squared, 1.0) > 8
    assert rel_var.mean() < 0.5 * ratio.var(ddof=1)


def test_genealogy_stats():
    """The variance estimate only for multinomial resampling; the distinct Eve indices either way."""
    weights = np.array([0.1, 0.2, 0.3, 0.4])
    eve = np.array([0, 0, 2, 3])
    stats = genealogy_stats(weights, eve, 2)
    assert stats["evidence_relative_variance"] == evidence_relative_variance(weights, eve, 2)
    assert stats["distinct_ancestors"] == 3 and type(stats["distinct_ancestors"]) is int
    systematic = genealogy_stats(weights, eve, 2, multinomial=False)
    assert np.isnan(systematic["evidence_relative_variance"]) and systematic["distinct_ancestors"] == 3


def test_loglik_rise_exact():
    """Hand-computed: rises 3, 3, 1, 1 (mean 2) from two parents with two copies each. The deviations
    +1, +1 and -1, -1 sum to +2 and -2 per parent, so se = sqrt(4 + 4) / 4 = 0.7071; counted as four
    independent particles it would be sqrt(4) / 4 = 0.5."""
    start = np.array([0.0, 0.0, 5.0, 5.0])
    end = start + np.array([3.0, 3.0, 1.0, 1.0])
    assert loglik_rise(start, end, [7, 7, 2, 2]) == pytest.approx((2.0, math.sqrt(8) / 4))
    assert loglik_rise(start, end, [0, 1, 2, 3]) == pytest.approx((2.0, 0.5))
    assert all(math.isnan(v) for v in loglik_rise(start, end + [0, 0, 0, -np.inf], [0, 1, 2, 3]))


def test_evidence_lag_exact():
    """beta 0.1, 0.5, 1 (steps 0.1, 0.4, 0.5), rises 1, 2, -1 with se 0.1, 0.2, 0.3:
    lag 0.1 + 0.8 - 0.5 = 0.4, se sqrt(0.01^2 + 0.08^2 + 0.15^2); a NaN stage is left out."""
    lag, se = evidence_lag([0.1, 0.5, 1.0], [1.0, 2.0, -1.0], [0.1, 0.2, 0.3])
    assert lag == pytest.approx(0.4) and se == pytest.approx(math.sqrt(0.029))
    assert evidence_lag([0.1, 0.5, 1.0], [np.nan, 2.0, -1.0], [0.1, 0.2, 0.3])[0] == pytest.approx(0.3)


def _gaussian_stage(rng, lagging: bool, n=400, sweeps=3):
    """One tempered stage on prior N(0, 1) and likelihood N(y=3; x, 0.5^2): exact draws from pi at
    beta = 0.2, reweighted to beta = 0.5 and resampled multinomially, then exact random-walk MH sweeps.
    ``lagging`` starts instead from pi at beta = 0.05, as particles that lag their target would."""
    def log_pi(x, beta):
        return norm.logpdf(x) + beta * norm.logpdf(3.0, x, 0.5)

    def posterior(beta):  # conjugate: mean and sd of pi_beta
        precision = 1 + beta / 0.25
        return 3.0 * beta / 0.25 / precision, precision**-0.5

    m, s = posterior(0.05 if lagging else 0.2)
    x = rng.normal(m, s, n)
    log_w = 0.3 * norm.logpdf(3.0, x, 0.5)
    w = np.exp(log_w - log_w.max())
    parents = rng.choice(n, size=n, p=w / w.sum())
    x = x[parents]
    start = norm.logpdf(3.0, x, 0.5)
    for _ in range(sweeps):
        prop = x + 0.8 * rng.standard_normal(n)
        accept = np.log(rng.random(n)) < log_pi(prop, 0.5) - log_pi(x, 0.5)
        x = np.where(accept, prop, x)
    return loglik_rise(start, norm.logpdf(3.0, x, 0.5), parents)


@pytest.mark.slow
def test_loglik_rise_is_centred_with_a_calibrated_se():
    """Monte Carlo: particles that reached their target give rises whose z = D / se averages 0 with sd
    about 1 (300 stages: the mean within 4 / sqrt(300) of 0, the sd within 0.85-1.2), so a warning at
    z > 3 is rare by chance (measured: mean 0.076, sd 0.965, none above 3). Negative control: particles
    that lag (from beta = 0.05, not 0.2) rise, z > 2.5 on average (measured: 3.59)."""
    rng = np.random.default_rng(11)
    z = np.array([mean / se for mean, se in (_gaussian_stage(rng, False) for _ in range(300))])
    assert abs(z.mean()) < 4 / math.sqrt(300) and 0.85 < z.std() < 1.2
    lagging = np.array([mean / se for mean, se in (_gaussian_stage(rng, True) for _ in range(50))])
    assert lagging.mean() > 2.5


def test_refine_tempering_step_goes_below_pymcs_resolution():
    """log L spread over 1e12 nats (a regression on dollars with vague priors): PyMC's smallest step,
    2**-20 = 9.5e-7, leaves an effective sample size of about 1 of 1000; the refined step is the largest
    with ESS >= 500, to a relative 1e-6, far below PyMC's. A step PyMC resolved (ESS near the target)
    and a likelihood with too few finite values are left alone."""
    rng = np.random.default_rng(5)
    loglik = -1e12 * rng.chisquare(3, 1000)
    pymc_beta = 2.0**-20
    assert effective_sample_size(loglik, pymc_beta) < 2
    beta = refine_tempering_step(loglik, 0.0, pymc_beta, 500)
    assert beta < 1e-9
    assert effective_sample_size(loglik, beta) >= 500
    assert effective_sample_size(loglik, beta * (1 + 1e-5)) < 500
    # From beta_{t-1} > 0 the step, not beta, is refined.
    assert refine_tempering_step(loglik, 0.25, 0.25 + pymc_beta, 500) == pytest.approx(0.25 + beta, abs=1e-15)
    tame = rng.normal(size=1000)
    resolved = 0.7
    assert effective_sample_size(tame, resolved) > 250  # above half the target: unchanged
    assert refine_tempering_step(tame, 0.0, resolved, 500) == resolved
    sparse = np.full(1000, -np.inf)
    sparse[:3] = [-1e9, -2e9, -3e9]  # ESS can never reach 500: PyMC's step stays
    assert refine_tempering_step(sparse, 0.0, pymc_beta, 500) == pymc_beta
    assert math.isnan(effective_sample_size(np.full(5, -np.inf), 1e-3))


def test_angles_are_wrapped_into_the_period_about_their_mean_direction():
    """Each angle moves by a multiple of 2 pi (so a 2 pi-periodic density keeps its value) into the
    period centred on the mean direction: a cluster straddling +-pi, drawn in several periods, ends in
    one piece about pi; the other column and the input are untouched; no columns: the same array."""
    rng = np.random.default_rng(1)
    angles = np.pi + 0.3 * rng.standard_normal(200) + 2 * np.pi * rng.integers(-3, 4, size=200)
    X = np.column_stack([angles, rng.standard_normal(200)])
    wrapped = wrap_about_mean_direction(X, [0])
    shift = (wrapped[:, 0] - X[:, 0]) / (2 * np.pi)
    np.testing.assert_allclose(shift, np.round(shift), atol=1e-9)
    assert np.ptp(wrapped[:, 0]) < 2.5 and abs(np.mean(wrapped[:, 0]) % (2 * np.pi) - np.pi) < 0.1
    np.testing.assert_array_equal(wrapped[:, 1], X[:, 1])
    assert np.ptp(X[:, 0]) > 30  # the input is not changed in place
    assert wrap_about_mean_direction(X, []) is X
