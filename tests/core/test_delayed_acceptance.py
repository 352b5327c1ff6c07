import math

import numpy as np
import pytest

from pymc_kameleon.core.delayed_acceptance.mala import (
    log_expected_langevin_term,
    mala_delayed_acceptance_log_ratios,
    mala_log_alpha1,
    mala_point,
)
from pymc_kameleon.core.delayed_acceptance.ratios import (
    DAPoint,
    delayed_acceptance_log_ratios,
    log_alpha1,
    stage1_log_ratio,
    stage2_log_ratio,
    surrogate_point,
)
from pymc_kameleon.core.gp.surrogate import GPSurrogate
from pymc_kameleon.core.mh import accept_probability, metropolis_accept, mh_log_ratio
from pymc_kameleon.core.proposals import langevin_log_density

# ------------------------------------------------------------------------- exact values


def test_stage1_and_stage2_exact_values():
    # Stage 1: mu(y) + var(y)/2 - LL(x) + log p(y) - log p(x) + log q(x|y) - log q(y|x)
    #   = -1.2 + 0.25 + 2.0 - 0.3 + 0.1 - 1.0 + 1.5 = 1.35
    assert stage1_log_ratio(-1.2, 0.5, -2.0, -0.3, -0.1, -1.0, -1.5) == pytest.approx(1.35, abs=1e-14)
    cur = DAPoint(log_prior=-0.1, mu=-2.6, var=0.2, ll=-2.0)
    prop = DAPoint(log_prior=-0.3, mu=-1.2, var=0.5, ll=-2.5)
    lq_fwd, lq_rev = -1.5, -1.0

    # current_value="exact".
    # alpha1(x, y): log r1 = 1.35 as above, so log alpha1 = 0.
    # alpha1(y, x): mu(x) + var(x)/2 - LL(y) + log p(x) - log p(y) + log q(y|x) - log q(x|y)
    #   = -2.6 + 0.1 + 2.5 - 0.1 + 0.3 - 1.5 + 1.0 = -0.3.
    # Stage 2: LL(y) + log p(y) - LL(x) - log p(x) + [log q(x|y) + log a1(y,x)] - [log q(y|x) + log a1(x,y)]
    #   = (-2.5 - 0.3) - (-2.0 - 0.1) + (-1.0 - 0.3) - (-1.5 + 0) = -0.7 - 1.3 + 1.5 = -0.5.
    r = delayed_acceptance_log_ratios(cur, prop, lq_fwd, lq_rev, "exact")
    assert r.log_alpha1_forward == 0.0
    assert r.log_alpha1_reverse == pytest.approx(-0.3, abs=1e-14)
    assert r.log_ratio_stage2 == pytest.approx(-0.5, abs=1e-14)
    r2 = stage2_log_ratio(-2.5, -2.0, -0.3, -0.1, lq_rev, lq_fwd, 0.0, -0.3)
    assert r2 == pytest.approx(-0.5, abs=1e-14)

    # current_value="surrogate": c(x) = mu(x) + var(x)/2 = -2.5, c(y) = -1.2 + 0.25 = -0.95.
    # alpha1(x, y): -1.2 + 0.25 + 2.5 - 0.3 + 0.1 - 1.0 + 1.5 = 1.85 -> 0.
    # alpha1(y, x): -2.6 + 0.1 + 0.95 - 0.1 + 0.3 - 1.5 + 1.0 = -1.85.
    # Stage 2: -0.7 + (-1.0 - 1.85) - (-1.5) = -2.05, which is the Christen-Fox form
    #   [LL(y) - c(y)] - [LL(x) - c(x)] = (-2.5 + 0.95) - (-2.0 + 2.5) = -2.05.
    r = delayed_acceptance_log_ratios(cur, prop, lq_fwd, lq_rev, "surrogate")
    assert r.log_alpha1_forward == 0.0
    assert r.log_alpha1_reverse == pytest.approx(-1.85, abs=1e-14)
    assert r.log_ratio_stage2 == pytest.approx(-2.05, abs=1e-14)


def test_bad_inputs_are_rejected_or_refused():
    assert stage1_log_ratio(np.nan, 0.1, 0.0, 0.0, 0.0) == -math.inf  # a NaN surrogate is a rejection
    assert stage1_log_ratio(0.0, 0.1, 0.0, -np.inf, 0.0) == -math.inf  # outside the prior support
    assert stage2_log_ratio(-np.inf, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0) == -math.inf
    with pytest.raises(ValueError, match="variance"):
        stage1_log_ratio(0.0, -1.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="cannot have accepted"):
        stage2_log_ratio(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -np.inf, 0.0)
    pts = DAPoint(0.0, 0.0, 0.1), DAPoint(0.0, 0.0, 0.1, 0.0)
    with pytest.raises(ValueError, match="exact log-likelihood"):
        log_alpha1(pts[0], pts[1], 0.0, 0.0)  # the from-point has no exact LL yet
    with pytest.raises(ValueError, match="current_value"):
        log_alpha1(pts[1], pts[0], 0.0, 0.0, current_value="mean")


# ------------------------------------------------------------------------- detailed balance


def _random_problem(rng, n=5, symmetric=True):
    ll = rng.normal(0, 2, n)  # exact log-likelihood
    lp = rng.normal(0, 1, n)  # log prior
    mu = rng.normal(0, 3, n)  # a deliberately bad surrogate, unrelated to ll ...
    var = rng.uniform(0, 4, n)  # ... and nowhere interpolating
    if symmetric:
        Q = np.full((n, n), 1.0 / (n - 1))
    else:
        Q = rng.uniform(0.1, 1.0, (n, n))
    np.fill_diagonal(Q, 0.0)
    Q /= Q.sum(axis=1, keepdims=True)
    logQ = np.full((n, n), -np.inf)  # the diagonal is never used
    off = ~np.eye(n, dtype=bool)
    logQ[off] = np.log(Q[off])
    return ll, lp, mu, var, logQ


def _transition_matrix(ll, lp, mu, var, logQ, current_value, mode="correct"):
    """Full transition matrix of the two-stage kernel on a finite state space."""
    n = len(ll)
    pts = [DAPoint(lp[i], mu[i], var[i], ll[i]) for i in range(n)]
    P = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            a1 = log_alpha1(pts[i], pts[j], logQ[i, j], logQ[j, i], current_value)
            if mode == "correct":
                r2 = delayed_acceptance_log_ratios(pts[i], pts[j], logQ[i, j], logQ[j, i], current_value)
                assert r2.log_alpha1_forward == a1
                r2 = r2.log_ratio_stage2
            elif mode == "no_alpha1":  # negative control: plain MH ratio at stage 2
                r2 = mh_log_ratio(ll[j] + lp[j], ll[i] + lp[i], logQ[j, i], logQ[i, j])
            elif mode == "updated_surrogate":
                # negative control: the proposal is added to the GP before stage 2, so the
                # stage-2 alpha1's see mu(y) = LL(y), var(y) = 0 while stage 1 did not.
                upd = [pts[i], pts[j]._replace(mu=ll[j], var=0.0)]
                r2 = delayed_acceptance_log_ratios(upd[0], upd[1], logQ[i, j], logQ[j, i], current_value)
                r2 = r2.log_ratio_stage2
            P[i, j] = math.exp(logQ[i, j]) * math.exp(a1) * accept_probability(r2)
        P[i, i] = 1.0 - P[i].sum()
    return P


@pytest.mark.parametrize("current_value", ["exact", "surrogate"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_two_stage_kernel_is_exactly_reversible_with_a_bad_surrogate(current_value, symmetric):
    rng = np.random.default_rng(20 + symmetric)
    ll, lp, mu, var, logQ = _random_problem(rng, symmetric=symmetric)
    pi = np.exp(ll + lp - np.max(ll + lp))
    pi /= pi.sum()
    P = _transition_matrix(ll, lp, mu, var, logQ, current_value)
    assert np.all(P >= 0) and np.allclose(P.sum(axis=1), 1.0)
    assert np.abs(pi @ P - pi).max() < 1e-12
    flux = pi[:, None] * P
    assert np.abs(flux - flux.T).max() < 1e-12
    # The surrogate really is bad: stage 1 alone would target something else.
    pi_tilde = np.exp(mu + 0.5 * var + lp - np.max(mu + 0.5 * var + lp))
    assert np.abs(pi_tilde / pi_tilde.sum() - pi).max() > 0.1


@pytest.mark.parametrize("mode", ["no_alpha1", "updated_surrogate"])
def test_negative_controls_break_detailed_balance(mode):
    rng = np.random.default_rng(21)
    ll, lp, mu, var, logQ = _random_problem(rng, symmetric=False)
    pi = np.exp(ll + lp - np.max(ll + lp))
    pi /= pi.sum()
    P = _transition_matrix(ll, lp, mu, var, logQ, "exact", mode=mode)
    # Stationary law of the wrong kernel: far from pi.
    w, v = np.linalg.eig(P.T)
    stat = np.real(v[:, np.argmin(np.abs(w - 1))])
    stat /= stat.sum()
    assert np.abs(pi @ P - pi).max() > 1e-3
    assert np.abs(stat - pi).max() > 0.02


def _banana_ll(th):
    return -0.5 * th[0] ** 2 / 4.0 - 0.5 * (th[1] - 0.5 * th[0] ** 2) ** 2


def _banana_grad(th):
    r = th[1] - 0.5 * th[0] ** 2
    return np.array([-th[0] / 4.0 + r * th[0], -r])


def _log_prior(th):
    return -0.5 * float(th @ th) / 9.0


def _grad_log_prior(th):
    return -th / 9.0


@pytest.mark.parametrize("current_value", ["exact", "surrogate"])
def test_pointwise_detailed_balance_mh_with_a_real_gp(current_value):
    """pi(x) Q(y|x) a1(x,y) a2(x,y) = pi(y) Q(x|y) a1(y,x) a2(y,x) for a poorly fitted GP."""
    rng = np.random.default_rng(22)
    gp = GPSurrogate(2, lengthscales=0.3, signal_variance=5.0)  # far too short: a bad surrogate
    X = rng.normal(size=(8, 2))
    for x in X:
        gp.add(x, _banana_ll(x))
    Sig_chol = np.linalg.cholesky(np.array([[0.8, 0.3], [0.3, 0.6]]))

    def log_q(to, frm):  # an asymmetric autoregressive proposal N(0.5 frm, Sigma)
        return langevin_log_density(to, 0.5 * frm, np.zeros(2), Sig_chol)

    for k in range(20):
        x = X[k % 8] if k < 8 else rng.normal(size=2)  # training points and fresh points
        y = rng.normal(size=2) * 1.5
        px = surrogate_point(gp, x, _log_prior(x), _banana_ll(x))
        py = surrogate_point(gp, y, _log_prior(y), _banana_ll(y))
        fwd = delayed_acceptance_log_ratios(px, py, log_q(y, x), log_q(x, y), current_value)
        rev = delayed_acceptance_log_ratios(py, px, log_q(x, y), log_q(y, x), current_value)
        assert fwd.log_alpha1_forward == rev.log_alpha1_reverse
        lhs = _banana_ll(x) + _log_prior(x) + log_q(y, x)
        lhs += fwd.log_alpha1_forward + min(0.0, fwd.log_ratio_stage2)
        rhs = _banana_ll(y) + _log_prior(y) + log_q(x, y)
        rhs += rev.log_alpha1_forward + min(0.0, rev.log_ratio_stage2)
        assert lhs == pytest.approx(rhs, abs=1e-10)


@pytest.mark.parametrize("current_value", ["exact", "surrogate"])
def test_pointwise_detailed_balance_mala_with_a_real_gp(current_value):
    rng = np.random.default_rng(23)
    gp = GPSurrogate(2, lengthscales=[0.5, 0.8], signal_variance=3.0, gradients=True)
    X = rng.normal(size=(6, 2))
    for x in X:
        gp.add(x, _banana_ll(x), _banana_grad(x))
    L = np.linalg.cholesky(np.array([[0.5, 0.1], [0.1, 0.4]]))
    for k in range(12):
        x = X[k % 6] if k < 6 else rng.normal(size=2)
        y = x + rng.normal(size=2)
        px = mala_point(gp, x, _log_prior(x), _grad_log_prior(x), _banana_ll(x))
        py = mala_point(gp, y, _log_prior(y), _grad_log_prior(y), _banana_ll(y))
        fwd = mala_delayed_acceptance_log_ratios(px, py, L, current_value)
        rev = mala_delayed_acceptance_log_ratios(py, px, L, current_value)
        assert fwd.log_alpha1_forward == mala_log_alpha1(px, py, L, current_value)
        lhs = (
            _banana_ll(x) + _log_prior(x) + langevin_log_density(y, x, px.drift(), L)
            + fwd.log_alpha1_forward + min(0.0, fwd.log_ratio_stage2)
        )
        rhs = (
            _banana_ll(y) + _log_prior(y) + langevin_log_density(x, y, py.drift(), L)
            + rev.log_alpha1_forward + min(0.0, rev.log_ratio_stage2)
        )
        assert lhs == pytest.approx(rhs, abs=1e-10)


def test_exact_current_value_dominates_at_training_points():
    """At an interpolated current state, "exact" accepts with min(1, e^a, e^b) >= the Christen-Fox form."""
    rng = np.random.default_rng(24)
    for _ in range(200):
        llx, lpx, lqf, lqr = rng.normal(size=4)
        x = DAPoint(lpx, llx, 0.0, llx)  # a training point: mu = LL, var = 0
        y = DAPoint(rng.normal(), rng.normal(0, 2), rng.uniform(0, 3), rng.normal(0, 2))
        a = mh_log_ratio(y.ll + y.log_prior, x.ll + x.log_prior, lqr, lqf)
        b = stage1_log_ratio(y.mu, y.var, x.ll, y.log_prior, x.log_prior, lqr, lqf)
        overall = {}
        for cv in ("exact", "surrogate"):
            r = delayed_acceptance_log_ratios(x, y, lqf, lqr, cv)
            overall[cv] = math.exp(r.log_alpha1_forward) * accept_probability(r.log_ratio_stage2)
        assert overall["exact"] == pytest.approx(min(1.0, math.exp(a), math.exp(b)), rel=1e-12)
        christen_fox = min(1.0, math.exp(b)) * min(1.0, math.exp(a - b))
        assert overall["surrogate"] == pytest.approx(christen_fox, rel=1e-12)
        assert overall["exact"] >= overall["surrogate"] - 1e-15


# ------------------------------------------------------------------------- Proposition 3.1


def _mc_langevin_term(theta_star, theta_prime, mean, cov, glp, L, n, rng):
    """Monte Carlo estimate (and standard error) of E[e^f N(theta'; theta* + Sigma (g + glp) / 2, Sigma)]."""
    Sig = L @ L.T
    z = rng.multivariate_normal(mean, cov, size=n, method="eigh")
    centre = theta_star + 0.5 * (z[:, 1:] + glp) @ Sig.T
    diff = theta_prime - centre
    sol = np.linalg.solve(Sig, diff.T).T
    d = len(theta_star)
    log_norm = -0.5 * d * math.log(2 * math.pi) - np.log(np.diag(L)).sum()
    logq = -0.5 * np.einsum("ij,ij->i", diff, sol) + log_norm
    v = np.exp(z[:, 0] + logq)
    return v.mean(), v.std() / math.sqrt(n)


def test_proposition_3_1_against_monte_carlo_over_gp_draws():
    rng = np.random.default_rng(25)
    gp = GPSurrogate(2, lengthscales=[0.8, 1.2], signal_variance=1.0, gradients=True)
    for x in rng.normal(size=(4, 2)):
        gp.add(x, _banana_ll(x), _banana_grad(x))
    L = np.linalg.cholesky(np.array([[0.5, 0.1], [0.1, 0.3]]))
    cases = [
        (np.array([0.5, 1.5]), np.array([0.2, 1.0])),  # GP variance of f about 0.1 here
        (np.array([-1.5, 1.0]), np.array([-0.8, 0.6])),  # further out: about 0.8
    ]
    for theta_star, theta_prime in cases:
        mean, cov = gp.predict_joint(theta_star)  # jointly (f, grad f) at theta*
        assert cov[0, 0] > 0.02 and np.trace(cov[1:, 1:]) > 0.05  # the GP is genuinely uncertain here
        glp = _grad_log_prior(theta_star)
        closed = math.exp(log_expected_langevin_term(theta_star, theta_prime, mean, cov, glp, L))
        mc, se = _mc_langevin_term(theta_star, theta_prime, mean, cov, glp, L, 200_000, rng)
        assert abs(mc - closed) < 4 * se, (mc, closed, se)
        # Plugging in the mean (ignoring the GP uncertainty) is clearly different.
        plug = math.exp(mean[0] + langevin_log_density(theta_prime, theta_star, mean[1:] + glp, L))
        assert abs(plug - closed) > 10 * se



def _mala_stage1_log_ratio(
    log_expected_reverse, ll_current, log_prior_prop, log_prior_current, log_q_forward
) -> float:
    r"""Reference: the stage-1 log ratio of GP delayed-acceptance MALA (the paper's eq. 9, marginalised),
    in the MH form (the kernel computes it as :func:`mala_log_alpha1`).

    .. math::
        \log r_1 = \log E\big[e^{\tilde\ell(y)} Q_{\tilde\ell}(x \mid y)\big] + \log p(y)
                 - c(x) - \log p(x) - \log Q(y \mid x),

    where the expectation (:func:`log_expected_langevin_term`, with ``theta_star = y`` and
    ``theta_prime = x``) is over the GP's joint law of the log-likelihood and its gradient at
    :math:`y`, and :math:`Q(y \mid x)` is the density of the move actually proposed. The MH
    version is the special case ``log_expected_reverse = mu + var / 2 + log Q(x|y)``.
    """
    return mh_log_ratio(
        float(log_expected_reverse) + float(log_prior_prop),
        float(ll_current) + float(log_prior_current),
        0.0,
        log_q_forward,
    )


def test_proposition_3_1_with_a_general_covariance_and_special_cases():
    rng = np.random.default_rng(26)
    d = 3
    A = rng.normal(size=(d + 1, d + 1)) * 0.4
    K = A @ A.T
    m = rng.normal(size=d + 1) * 0.5
    L = np.linalg.cholesky(np.diag([0.4, 0.6, 0.3]) + 0.05)
    ts, tp, glp = rng.normal(size=d), rng.normal(size=d), rng.normal(size=d) * 0.3
    closed = math.exp(log_expected_langevin_term(ts, tp, m, K, glp, L))
    mc, se = _mc_langevin_term(ts, tp, m, K, glp, L, 200_000, rng)
    assert abs(mc - closed) < 4 * se, (mc, closed, se)
    # K = 0: the deterministic value e^{m_f} N(theta'; theta* + Sigma (m_g + glp) / 2, Sigma).
    det = m[0] + langevin_log_density(tp, ts, m[1:] + glp, L)
    K0 = np.zeros((d + 1, d + 1))
    assert log_expected_langevin_term(ts, tp, m, K0, glp, L) == pytest.approx(det, abs=1e-12)
    # Only the value uncertain: the log-normal factor of GP-MH, m_f + var / 2.
    Kf = np.zeros((d + 1, d + 1))
    Kf[0, 0] = 0.7
    assert log_expected_langevin_term(ts, tp, m, Kf, glp, L) == pytest.approx(det + 0.35, abs=1e-12)
    # and then MALA's stage 1 is MH's stage 1 with log q(x|y) the Langevin density.
    log_q_rev = langevin_log_density(tp, ts, m[1:] + glp, L)
    s_mala = _mala_stage1_log_ratio(log_expected_langevin_term(ts, tp, m, Kf, glp, L), -1.0, 0.2, 0.1, -2.0)
    s_mh = stage1_log_ratio(m[0], 0.7, -1.0, 0.2, 0.1, log_q_rev, -2.0)
    assert s_mala == pytest.approx(s_mh, abs=1e-12)


# ------------------------------------------------------------------------- a whole chain


def test_two_stage_chain_with_a_learning_gp_samples_the_posterior():
    """GP-DA MH on a 1-d Gaussian posterior; the GP learns until its cap, then stays fixed."""
    rng = np.random.default_rng(27)
    # likelihood N(1 | theta, 0.5^2) -> LL = -2 (theta - 1)^2; prior N(0, 2^2)
    # posterior precision 4 + 1/4 = 4.25, mean 4 / 4.25.
    def ll(t):
        return -2.0 * (t - 1.0) ** 2

    def lp(t):
        return -t**2 / 8.0

    post_mean, post_var = 4.0 / 4.25, 1.0 / 4.25
    gp = GPSurrogate(1, lengthscales=0.7, signal_variance=4.0, max_points=25)
    x = np.array([0.0])
    ll_x = ll(x[0])
    gp.add(x, ll_x)
    n_steps, n_exact = 12_000, 0
    draws = np.empty(n_steps)
    for k in range(n_steps):
        y = x + 0.9 * rng.normal(size=1)
        cur = surrogate_point(gp, x, lp(x[0]), ll_x)
        prop = surrogate_point(gp, y, lp(y[0]))
        a1 = log_alpha1(cur, prop, 0.0, 0.0)
        ok, _ = metropolis_accept(a1, rng)
        if ok:
            ll_y = ll(y[0])
            n_exact += 1
            r = delayed_acceptance_log_ratios(cur, prop._replace(ll=ll_y), 0.0, 0.0)
            ok, _ = metropolis_accept(r.log_ratio_stage2, rng)
            gp.add(y, ll_y)  # only after stage 2: the surrogate was fixed within the step
            if ok:
                x, ll_x = y, ll_y
        draws[k] = x[0]
    kept = draws[2000:]
    batches = kept.reshape(50, -1).mean(axis=1)
    mcse = batches.std(ddof=1) / math.sqrt(len(batches))
    assert abs(kept.mean() - post_mean) < 4 * mcse + 1e-3
    assert abs(kept.var() - post_var) < 0.1 * post_var
    assert n_exact < 0.7 * n_steps  # the surrogate screened out a good share of proposals
