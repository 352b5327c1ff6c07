"""One KASS stage without PyMC: fitting the stage's proposal, the sweeps and their stopping rules, and the
record of stages that barely mixed."""

import numpy as np
import pytest

from pymc_kameleon.core.kameleon.kernels import GaussianKernel, LinearKernel
from pymc_kameleon.core.smc.mixtures import GlobalWalkMixture, IndependenceMixture
from pymc_kameleon.core.smc.population import population_mh_move, tempered_log_density
from pymc_kameleon.core.smc.rejuvenation import (
    MIN_STAGE_ACCEPT,
    CollapsedParticlesError,
    PoorMixingLog,
    check_rejuvenation_options,
    fit_stage_proposal,
    rejuvenate,
)

# A correlated Gaussian target, evaluated like KASS's log densities: (log prior, log likelihood).
COV = np.array([[4.0, 1.8], [1.8, 1.0]])
PREC = np.linalg.inv(COV)


def evaluate(P):
    return -0.005 * np.sum(P**2, axis=1), -0.5 * np.einsum("ij,jk,ik->i", P, PREC, P)


def particles(n=120, seed=0):
    X = np.random.default_rng(seed).multivariate_normal([1.0, -2.0], COV, size=n)
    log_prior, loglik = evaluate(X)
    return X, log_prior, loglik, tempered_log_density(log_prior, loglik, 0.7)


def fit(X, scale=1.0, n_subsample=1000, seed=5, kernel=None):
    kernel = GaussianKernel(1.0) if kernel is None else kernel
    return fit_stage_proposal(X, kernel, "median", "auto", n_subsample, scale, np.random.default_rng(seed))


def test_stage_proposal_does_not_depend_on_the_units():
    """An affine change of units x -> A x + b carries the fitted proposal along: the same whitened
    bandwidth, gamma and nu2, and covariances A Sigma(x) A^T."""
    X = particles()[0]
    A, b = np.array([[1e3, 0.0], [2.0, 1e-3]]), np.array([5.0, -7.0])
    plain, moved = fit(X), fit(X @ A.T + b)
    for name in ("bandwidth", "gamma", "nu2", "scale", "subsample_size"):
        assert moved.stats()[name] == pytest.approx(plain.stats()[name], rel=1e-6), name
    x = X[3]
    np.testing.assert_allclose(
        moved.family.covariance(A @ x + b), A @ plain.family.covariance(x) @ A.T, rtol=1e-6
    )


def test_stage_proposal_scale_and_subsample():
    X = particles(n=300)[0]
    small, large = fit(X, scale=0.5), fit(X, scale=2.0)
    assert small.subsample_size == 300 and small.scale == 0.5 and large.scale == 2.0
    assert large.nu2 > small.nu2  # a larger s^2 means a wider kernel term
    assert fit(X, n_subsample=50).subsample_size == 50
    # The linear kernel has no bandwidth.
    assert np.isnan(fit(X, kernel=LinearKernel()).bandwidth)


def test_collapsed_particles_raise():
    X = particles()[0]
    X[:, 1] = 3.0
    with pytest.raises(CollapsedParticlesError, match="120 particles do not vary in every coordinate"):
        fit(X)
    assert issubclass(CollapsedParticlesError, ValueError)


def test_fixed_sweeps_are_population_moves_applied_in_place():
    """n_steps=3: the same stream as three population_mh_move calls, the accepted proposals copied in."""
    X, log_prior, loglik, log_target = particles()
    family = fit(X).family
    expected = [a.copy() for a in (X, log_prior, loglik, log_target)]
    rng = np.random.default_rng(11)
    accept = []
    for _ in range(3):
        move = population_mh_move(expected[0], expected[3], family, evaluate, 0.7, rng)
        acc = move.accepted
        for array, new in zip(expected, (move.proposals, move.log_prior, move.loglik, move.log_target)):
            array[acc] = new[acc]
        accept.append(np.mean(move.accept_prob))
    out = rejuvenate(
        X, log_prior, loglik, log_target, family, evaluate, 0.7, np.random.default_rng(11),
        n_steps=3, max_steps=100, move_probability=0.99,
    )
    assert out.sweeps == 3 and out.mean_accept == pytest.approx(np.mean(accept), rel=1e-14)
    for array, exact in zip((X, log_prior, loglik, log_target), expected):
        np.testing.assert_array_equal(array, exact)


def test_cached_factors_give_the_same_sweeps():
    runs = []
    for cache in (False, True):
        arrays = particles()
        family = fit(arrays[0]).family
        out = rejuvenate(
            *arrays, family, evaluate, 0.7, np.random.default_rng(2),
            n_steps=4, max_steps=100, move_probability=0.99, cache_factors=cache, chunk_size=7,
        )
        runs.append((arrays[0], out.mean_accept))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-10)
    assert runs[0][1] == pytest.approx(runs[1][1], rel=1e-10)


def run_rule(n_steps, evaluate_fn=evaluate, **kwargs):
    arrays = particles()
    family = fit(arrays[0]).family
    options = {"max_steps": 20, "move_probability": 0.99, **kwargs}
    return rejuvenate(*arrays, family, evaluate_fn, 0.7, np.random.default_rng(4), n_steps=n_steps, **options)


def test_acceptance_rule():
    """One sweep, then enough for a particle to have moved with probability 0.99; capped by max_steps."""
    out = run_rule("acceptance")
    assert 1 < out.sweeps < 20 and 0 < out.mean_accept < 1

    def nowhere(P):  # every proposal is outside the prior's support: nothing is ever accepted
        return np.full(len(P), -np.inf), np.zeros(len(P))

    stuck = run_rule("acceptance", nowhere)
    assert stuck.sweeps == 20 and stuck.mean_accept == 0.0


def half_stuck(P):
    """Proposals with x0 < 0 are outside the support; those with x0 >= 0 are far more probable than any
    particle. Particles deep on either side stay there, so one half accepts every proposal and the other
    none: the mean acceptance is 1/2, but half the particles never move."""
    return np.where(P[:, 0] < 0, -np.inf, 1e6), np.zeros(len(P))


def two_groups(n=100):
    X, log_prior, loglik, log_target = particles(n=n)
    X[:, 0] = np.where(np.arange(n) < n // 2, -1e3, 1e3)
    return X, log_prior, loglik, log_target


def test_moved_rule_counts_every_particle():
    """Exact: half the particles accept with probability 1 and half with 0. The acceptance rule plans
    ceil(log 0.01 / log 0.5) = 7 sweeps at the mean rate 1/2 (the negative control: it stops with half the
    particles never moved); the moved rule sees that the expected unmoved fraction stays at exactly 1/2 and
    sweeps to the cap."""
    results = {}
    for rule in ("acceptance", "moved"):
        arrays = two_groups()
        family = fit(particles()[0]).family  # fitted on ordinary particles: proposals stay on their side
        results[rule] = rejuvenate(
            *arrays, family, half_stuck, 0.7, np.random.default_rng(4),
            n_steps=rule, max_steps=20, move_probability=0.99,
        )
    assert results["acceptance"].sweeps == 7 and results["acceptance"].mean_accept == pytest.approx(0.5)
    assert results["acceptance"].unmoved == pytest.approx(0.5)
    assert results["moved"].sweeps == 20 and results["moved"].unmoved == pytest.approx(0.5)


def test_moved_rule_stops_when_every_particle_has_moved():
    """Every proposal accepted: after one sweep no particle is unmoved (u_1 = 0), so the rule stops;
    on the correlated Gaussian it stops once the expected unmoved fraction is at most 1%, and needs at
    least the acceptance rule's sweeps (Jensen: mean of prod(1 - alpha) >= (1 - mean alpha)^k)."""
    def everywhere(P):
        return np.full(len(P), 1e6), np.zeros(len(P))

    one = run_rule("moved", everywhere)
    assert one.sweeps == 1 and one.unmoved == 0.0 and one.mean_accept == 1.0
    moved, acceptance = run_rule("moved", max_steps=100), run_rule("acceptance", max_steps=100)
    assert moved.unmoved <= 0.01 < run_rule("moved", max_steps=moved.sweeps - 1).unmoved
    assert moved.sweeps >= acceptance.sweeps


class Correlations:
    """Stands in for PyMC's Pearson: scripted correlations with the starting particles, sweep by sweep."""

    def __init__(self, values):
        self.values = iter(values)

    def get(self, X):
        return np.full(X.shape[1], next(self.values))


def test_correlation_rule_stops_when_the_correlations_stop_dropping():
    # Drops of 1.1, 0.5, 0.2 pass the 0.01 threshold; the drop of 0.001 stops after the 4th sweep.
    out = run_rule("correlation", correlation=Correlations([0.9, 0.4, 0.2, 0.199, 0.0]))
    assert out.sweeps == 4
    capped = run_rule("correlation", correlation=Correlations(np.linspace(0.9, -5.0, 30)), max_steps=6)
    assert capped.sweeps == 6


def test_poor_mixing_log():
    log = PoorMixingLog(max_steps=10, adaptive=True)
    assert not log and "Use more draws" in log.collapse_cause(1.0)
    log.record(1, 0.01, 0.3, 4)  # mixed well
    log.record(2, 0.05, MIN_STAGE_ACCEPT / 2, 4)  # barely accepted
    log.record(3, 0.2, 0.1, 10)  # hit the cap
    log.record(4, 0.5, 0.001, 10)  # both: the worst
    assert len(log) == 3 and log.worst() == (4, 0.5, 0.001, 10)
    message = log.warning("KASS", 5)
    assert message.startswith("KASS: the rejuvenation moves barely mixed in 3 of 5 stages")
    assert "stage 4 (beta=0.5), accepted 0.10%" in message
    assert "2 stages hit the cap of max_steps=10" in message
    assert "stage 4 (beta=0.5) accepted 0.10%" in log.collapse_cause(1e6)
    assert "1e+06 times the optimal" in log.collapse_cause(1e6)
    # A fixed number of sweeps is no cap to hit.
    fixed = PoorMixingLog(max_steps=10, adaptive=False)
    fixed.record(1, 0.1, 0.5, 10)
    fixed.record(2, 0.2, 0.0, 10)
    assert len(fixed) == 1 and "hit the cap" not in fixed.warning("ASMC", 2)


def test_poor_mixing_log_capped_stages_that_accepted():
    """Stages that hit the cap of the moved rule while accepting often: the warning names the stage with
    the most particles never moved and its fraction, and does not call the run unreliable. Control: with
    one stage that accepted nothing, the barely-mixed warning is back."""
    log = PoorMixingLog(max_steps=100, adaptive=True)
    log.record(1, 0.05, 0.14, 100, 0.06)
    log.record(2, 0.38, 0.17, 100, 0.276)
    log.record(3, 1.0, 0.2, 40, 0.005)  # stopped by the rule: not recorded
    message = log.warning("KASS", 3)
    assert message.startswith("KASS: 2 of 3 stages reached the cap of max_steps=100 sweeps")
    assert "stage 2 (beta=0.38) 27.6% of the particles had never moved" in message
    assert "17.0% of all proposals were accepted" in message and "unreliable" not in message
    assert "non-centred" in message
    log.record(4, 1.0, 0.0, 100, 1.0)
    assert "barely mixed in 3 of 4 stages" in log.warning("KASS", 4)
    assert "estimated" not in message and "estimated" not in log.warning("KASS", 4)


def test_poor_mixing_log_names_noisy_estimates_where_the_likelihood_is_estimated():
    """A pseudo-marginal likelihood: both warnings name the estimates' noise and the remedy (a new user's
    random-intercept model reached the cap at its last stages and was told of funnels and modes only)."""
    log = PoorMixingLog(max_steps=100, adaptive=True, estimated=True)
    log.record(7, 0.9, 0.18, 100, 0.02)
    capped = log.warning("KASS", 8)
    assert capped.startswith("KASS: 1 of 8 stages reached the cap") and "non-centred" in capped
    assert "The likelihood here is estimated" in capped and "log_estimate_spread" in capped
    log.record(8, 1.0, 0.0, 100, 1.0)
    assert "barely mixed" in log.warning("KASS", 8) and "log_estimate_spread" in log.warning("KASS", 8)


VALID = dict(
    bandwidth="median", gamma="auto", n_subsample=1000, learning_rate=3.0, initial_scale=1.0,
    target_accept=0.234, n_steps="acceptance", correlation_threshold=0.01, move_probability=0.99,
    max_steps=100, chunk_size=None, batch_logp="auto", resampling="multinomial", am_weight=0.25,
    independence_weight=0.25,
)


@pytest.mark.parametrize(
    "option, value",
    [
        ("n_steps", "sometimes"), ("n_steps", 0), ("max_steps", 0), ("initial_scale", 0.0),
        ("chunk_size", 0), ("batch_logp", "yes"), ("resampling", "stratified"), ("gamma", "x"),
        ("am_weight", 1.0), ("am_weight", -0.1), ("independence_weight", 1.0),
        ("independence_weight", -0.1), ("independence_weight", "half"),
    ],
)
def test_invalid_options_are_named(option, value):
    check_rejuvenation_options(**VALID)
    with pytest.raises(ValueError, match=option):
        check_rejuvenation_options(**{**VALID, option: value})


# ----------------------------------------------------------------- the global-walk mixture (am_weight)
def test_mixture_density_is_the_weighted_sum_of_its_components():
    """Fixed inputs: log q = log((1 - rho) q_K + rho N(x; y, sigma^2 I)), by SciPy, and in model
    coordinates with the whitening's Jacobian."""
    from scipy.stats import multivariate_normal

    X = particles()[0]
    stage = fit_stage_proposal(X, GaussianKernel(1.0), "median", "auto", 1000, 1.0, np.random.default_rng(5),
                               am_weight=0.3)
    mixture, whitening = stage.family.family, stage.family.whitening
    assert isinstance(mixture, GlobalWalkMixture) and mixture.weight == 0.3
    kameleon = mixture.family
    Y, Xn = X[:4], X[4:8] + 0.3
    Wy, Wx = whitening.whiten(Y), whitening.whiten(Xn)
    expected = [
        np.log(0.7 * multivariate_normal(wy, kameleon.covariance(wy)).pdf(wx)
               + 0.3 * multivariate_normal(wy, mixture.walk_variance * np.eye(2)).pdf(wx)) - whitening.log_det
        for wx, wy in zip(Wx, Wy, strict=True)
    ]
    np.testing.assert_allclose(stage.family.log_density_batch(Xn, Y), expected, rtol=1e-10)
    np.testing.assert_allclose(
        mixture.covariance(Wy[0]), 0.7 * kameleon.covariance(Wy[0]) + 0.3 * mixture.walk_variance * np.eye(2)
    )


def test_independence_mixture_density_is_the_weighted_sum_with_the_particles_gaussian():
    """Fixed inputs: log q = log((1 - iota) q_local + iota N(x; m, C) 1{r(x) <= R} / F(R^2)) with m, C
    the particles' mean and covariance (PyMC IMH's proposal), r the Mahalanobis distance, R the
    particles' largest and F the chi-squared(2) CDF, computed by SciPy in model coordinates; the local
    part is the global-walk mixture, as in the test above."""
    from scipy.stats import chi2, multivariate_normal

    X = particles()[0]
    stage = fit_stage_proposal(X, GaussianKernel(1.0), "median", "auto", 1000, 1.0, np.random.default_rng(5),
                               am_weight=0.3, independence_weight=0.2)
    mixture, whitening = stage.family.family, stage.family.whitening
    assert isinstance(mixture, IndependenceMixture) and mixture.weight == 0.2
    local = mixture.family
    assert isinstance(local, GlobalWalkMixture) and local.weight == 0.3
    m, C = X.mean(axis=0), np.cov(X, rowvar=False)

    def mahalanobis(P):
        return np.sqrt(np.einsum("ij,jk,ik->i", P - m, np.linalg.inv(C), P - m))

    R = mahalanobis(X).max()
    assert mixture.radius == pytest.approx(R, rel=1e-10)
    far_out = m + 1.2 * R * np.sqrt(np.diag(C)) * np.array([1.0, 0.0])  # outside the ball
    assert mahalanobis(far_out[None])[0] > R
    Y, Xn = X[:5], np.vstack([X[4:8] + 0.3, far_out])
    log_local = local.log_density_batch(whitening.whiten(Xn), whitening.whiten(Y)) - whitening.log_det
    inside = mahalanobis(Xn) <= R
    independent = multivariate_normal(m, C).pdf(Xn) * inside / chi2.cdf(R**2, 2)
    expected = np.log(0.8 * np.exp(log_local) + 0.2 * independent)
    np.testing.assert_allclose(stage.family.log_density_batch(Xn, Y), expected, rtol=1e-10)
    # The independent component does not depend on y: its share of q is the same from anywhere.
    far = Y[:4] + 100.0
    log_far = stage.family.log_density_batch(Xn[:4], far)
    np.testing.assert_allclose(log_far, np.log(0.2 * independent[:4]), rtol=1e-8)


def test_independent_draws_follow_the_truncated_chi_squared_radius():
    """Monte Carlo: the independent component's squared radii follow chi-squared(d) truncated at R^2
    (Kolmogorov-Smirnov, 20 000 draws), never exceed R^2, and point in uniform directions. Negative
    control: the untruncated chi-squared is rejected."""
    from types import SimpleNamespace

    from scipy.stats import chi2, kstest

    mixture = IndependenceMixture(SimpleNamespace(dim=3), 0.5, radius=2.0)  # no local moves needed here
    W = mixture._draw_other(np.zeros((20_000, 3)), np.random.default_rng(3))
    r2 = np.einsum("ij,ij->i", W, W)
    assert r2.max() <= 4.0
    truncated = kstest(r2, lambda t: chi2.cdf(np.minimum(t, 4.0), 3) / chi2.cdf(4.0, 3))
    assert truncated.pvalue > 0.01
    assert kstest(r2, chi2(3).cdf).pvalue < 1e-6
    np.testing.assert_allclose((W / np.sqrt(r2)[:, None]).mean(axis=0), 0.0, atol=0.02)


@pytest.mark.parametrize("independence_weight", [0.0, 0.3])
def test_mixture_draws_report_their_own_density_and_follow_the_mixture(independence_weight):
    """sample_batch's log q equals log_density_batch at the draws (with and without cached factors),
    and the draws' covariance around a fixed y is the mixture's (Monte Carlo, 20 000 draws), with the
    global walk alone and with the independent draws too."""
    X = particles()[0]
    stage = fit_stage_proposal(X, GaussianKernel(1.0), "median", "auto", 1000, 1.0, np.random.default_rng(5),
                               am_weight=0.4, independence_weight=independence_weight)
    family = stage.family
    draws, log_q = family.sample_batch(X, np.random.default_rng(1))
    np.testing.assert_allclose(log_q, family.log_density_batch(draws, X), rtol=1e-9)
    cached, log_q_cached = family.sample_batch(X, np.random.default_rng(1), factors=family.factor_batch(X))
    np.testing.assert_allclose(cached, draws, rtol=1e-12)
    np.testing.assert_allclose(log_q_cached, log_q, rtol=1e-9)
    Y = np.repeat(X[:1], 20_000, axis=0)
    D = family.sample_batch(Y, np.random.default_rng(2))[0] - Y
    target = family.covariance(X[0])  # the mixture's, mapped to model coordinates
    np.testing.assert_allclose(np.cov(D, rowvar=False), target, rtol=0.05, atol=0.03 * np.abs(target).max())


@pytest.mark.slow
@pytest.mark.parametrize(
    "am_weight, independence_weight, wrong",
    [(0.5, 0.0, False), (0.5, 0.0, True), (0.25, 0.25, False), (0.25, 0.25, True)],
)
def test_mixture_sweeps_keep_the_target(am_weight, independence_weight, wrong, monkeypatch):
    """Exact draws of the target stay exact after 30 sweeps: moments within 4 standard errors over
    4000 particles. Negative control: the mixtures' Hastings terms replaced by the Kameleon density
    alone, which is caught. The family is fitted to a squeezed independent draw, so the components
    differ (and the independent draws come from a Gaussian 5 times too narrow)."""
    from pymc_kameleon.core.smc import mixtures

    # Target at beta = 1 (see evaluate): N(0, COV) times the prior exp(-0.005 |x|^2), a Gaussian.
    cov = np.linalg.inv(PREC + 0.01 * np.eye(2))
    mean = np.zeros(2)
    rng = np.random.default_rng(11)
    X = rng.multivariate_normal(mean, cov, size=4000)
    log_prior, loglik = evaluate(X)
    log_target = tempered_log_density(log_prior, loglik, 1.0)
    Z = rng.multivariate_normal(mean, cov / 25, size=500)
    stage = fit_stage_proposal(Z, GaussianKernel(1.0), "median", "auto", 1000, 4.0, rng, am_weight=am_weight,
                               independence_weight=independence_weight)
    if wrong:
        monkeypatch.setattr(mixtures, "mixture_log_density", lambda main, _other, _w: main)
    rejuvenate(X, log_prior, loglik, log_target, stage.family, evaluate, 1.0, rng, n_steps=30, max_steps=30,
               move_probability=0.99)
    z_mean = np.abs(X.mean(axis=0) - mean) / np.sqrt(np.diag(cov) / X.shape[0])
    z_var = np.abs(X.var(axis=0) / np.diag(cov) - 1) / np.sqrt(2 / X.shape[0])
    worst = max(z_mean.max(), z_var.max())
    if wrong:
        assert worst > 6, (z_mean, z_var)
    else:
        assert worst < 4, (z_mean, z_var)
