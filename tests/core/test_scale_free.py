"""Scale-free tuning (ScaleFreeAdaptation) and the proposal built from its state (ScaleFreeProposal):
exact Hastings terms, the density by Monte Carlo, the windows, the end-of-tuning report, and affine
equivariance (sampling x and A x + b agree after mapping back), with negative controls."""

import math

import numpy as np
import pytest
from scipy.stats import multivariate_normal, multivariate_t

from pymc_kameleon.core.adaptation.covariance import shrunk_covariance
from pymc_kameleon.core.adaptation.diagnostics import TuningReport, pareto_tail_index
from pymc_kameleon.core.adaptation.independence import (
    BOOSTED_FROM,
    EXAM_DRAWS,
    INDEPENDENCE_MAX_KHAT,
    INDEPENDENCE_PROBE,
    PROBE_CAP,
    IndependenceTuning,
)
from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.adaptation.scales import RobbinsMonro
from pymc_kameleon.core.adaptation.state import TuningDraw
from pymc_kameleon.core.adaptation.whitening import Whitening
from pymc_kameleon.core.kameleon.family import KameleonProposal
from pymc_kameleon.core.kameleon.kernels import GaussianKernel, make_kernel
from pymc_kameleon.core.kameleon.scale_free import INDEPENDENCE_DF, ScaleFreeProposal
from pymc_kameleon.core.kameleon.whitened import WhitenedFamily
from pymc_kameleon.core.mh import metropolis_accept, mh_log_ratio
from pymc_kameleon.core.proposals import IndependenceProposal, Move, standard_t_draw
from pymc_kameleon.testing import mcse_of_mean as ess_mcse

M = np.array([1.0, -2.0])
C = np.array([[4.0, 1.2], [1.2, 0.9]])
ZW = np.random.default_rng(0).normal(size=(30, 2))


def feed(adaptation, y, accept_prob, rng, component="adaptive_metropolis", **draw):
    """One tuning draw, as a step feeds it (``draw``: start, proposal, log_density, gradient)."""
    return adaptation.adapt(TuningDraw(y, accept_prob, component, **draw), rng)


def am_only(dim, **options):
    """Scale-free adaptation without a Kameleon component (the AM walk's whitening and scale)."""
    return ScaleFreeAdaptation(dim, None, **options)


def in_kameleon_phase(am_weight=0.3, lam=0.8, gamma2=0.05, nu2=0.6, bandwidth=1.1):
    """A proposal built from a known tuned state (whitening M, C; Z, kernel and scales fixed)."""
    state = ScaleFreeAdaptation(2, GaussianKernel(1.0)).state
    state.whitening = Whitening.from_moments(M, C)
    state.tune_steps = state.scan_steps
    state.am_scale = RobbinsMonro(lam)
    state.family = KameleonProposal(ZW, GaussianKernel(bandwidth), gamma2, nu2)
    return ScaleFreeProposal(state, am_weight)


def mixture_log_density(x, y, am_weight=0.3, lam=0.8, gamma2=0.05, nu2=0.6, bandwidth=1.1):
    """Written out independently: |L|^-1 [(1 - rho) N(w_x; w_y, Sigma_K(w_y)) + rho N(w_x; w_y, lam^2 I)]."""
    L = np.linalg.cholesky(C)
    w_x, w_y = np.linalg.solve(L, x - M), np.linalg.solve(L, y - M)
    k = np.exp(-np.sum((ZW - w_y) ** 2, axis=1) / (2 * bandwidth**2))
    G = 2.0 / bandwidth**2 * (ZW - w_y).T * k  # d x n, M_y
    H = np.eye(len(ZW)) - 1.0 / len(ZW)
    sigma_k = gamma2 * np.eye(2) + nu2 * G @ H @ G.T
    kam = multivariate_normal(w_y, sigma_k).pdf(w_x)
    am = multivariate_normal(w_y, lam**2 * np.eye(2)).pdf(w_x)
    return math.log((1 - am_weight) * kam + am_weight * am) - np.log(np.diag(L)).sum()


def test_exact_mixture_hastings_terms_and_ratio():
    """Fixed inputs: both Hastings terms and log alpha against the mixture written out with SciPy."""
    prop = in_kameleon_phase()
    y = np.array([0.5, -1.5])
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(20):
        move = prop.propose(y, rng)
        assert move.log_q_forward == pytest.approx(mixture_log_density(move.x, y), rel=1e-9)
        assert move.log_q_reverse == pytest.approx(mixture_log_density(y, move.x), rel=1e-9)
        checked += 1
    x = np.array([1.7, -0.4])

    def log_target(p):
        return -0.5 * p[0] ** 2 - 0.5 * (p[1] - 0.5 * p[0] ** 2) ** 2

    expected = log_target(x) - log_target(y) + mixture_log_density(y, x) - mixture_log_density(x, y)
    got = mh_log_ratio(log_target(x), log_target(y), prop.log_density(y, x), prop.log_density(x, y))
    assert got == pytest.approx(expected, rel=1e-10)
    # The proposal is asymmetric here: the Hastings terms matter.
    assert abs(mixture_log_density(y, x) - mixture_log_density(x, y)) > 0.05
    assert checked == 20


def _density_identity_z(prop, y, log_density, n=10_000, seed=3):
    """z-score of E_q[r(X) / q(X | y)] - 1 for a reference density r (it is 0 when q is right)."""
    rng = np.random.default_rng(seed)
    X = np.array([prop.propose(y, rng).x for _ in range(n)])
    ref = multivariate_normal(y, 0.5 * np.cov(X, rowvar=False))
    ratio = np.exp(ref.logpdf(X) - np.array([log_density(x, y) for x in X]))
    return (ratio.mean() - 1.0) / (ratio.std() / math.sqrt(n))


def test_proposal_density_by_monte_carlo_and_negative_controls():
    prop = in_kameleon_phase()
    y = np.array([0.5, -1.5])
    assert abs(_density_identity_z(prop, y, prop.log_density)) < 4
    # Negative controls: a density that forgets the Jacobian |L|^-1 of the whitening, and one with
    # twice the AM component's scale, do not match the draws.
    log_det = prop.state.whitening.log_det
    assert abs(_density_identity_z(prop, y, lambda x, y: prop.log_density(x, y) + log_det)) > 6
    wrong = in_kameleon_phase(lam=1.6)
    assert abs(_density_identity_z(prop, y, wrong.log_density)) > 6


def test_scan_phase_density_and_moves_are_one_coordinate():
    prop = ScaleFreeProposal(ScaleFreeAdaptation(3, make_kernel("gaussian")).state, 0.1)
    y = np.array([1.0, 2.0, 3.0])
    move = prop.propose(y, np.random.default_rng(0))
    assert np.count_nonzero(move.x != y) == 1 and move.log_q_forward == move.log_q_reverse == 0.0
    # The moved coordinate is N(y_j, s_j^2), as log_density says.
    rng = np.random.default_rng(1)
    steps = np.array([prop.propose(y, rng).x[0] - y[0] for _ in range(20_000)])
    s = prop.state.scan_scales[0]
    assert abs(steps.std() / s - 1) < 0.02
    x = y + np.array([0.3, 0.0, 0.0])
    assert prop.log_density(x, y) == pytest.approx(
        -0.5 * math.log(2 * math.pi) - math.log(s) - 0.5 * (0.3 / s) ** 2
    )
    assert prop.log_density(y + np.array([0.3, 0.1, 0.0]), y) == -math.inf


def test_whitened_family_matches_its_definition():
    fam = WhitenedFamily(KameleonProposal(ZW, GaussianKernel(1.1), 0.05, 0.6), Whitening.from_moments(M, C))
    Y = np.array([[0.5, -1.5], [2.0, -2.5]])
    X = np.array([[1.0, -1.0], [1.5, -2.0]])
    got = fam.log_density_batch(X, Y)
    expected = [multivariate_normal(y, fam.covariance(y)).logpdf(x) for x, y in zip(X, Y)]
    assert np.allclose(got, expected, rtol=1e-10)
    draws, log_q = fam.sample_batch(Y, np.random.default_rng(0))
    assert np.allclose(log_q, fam.log_density_batch(draws, Y), rtol=1e-10)


@pytest.mark.parametrize("order", ["C", "F"])
def test_whitening_of_one_row_is_that_of_the_point(order):
    """One row (a GP's prediction at a proposal) takes the point's fast LAPACK call; the result is the
    point's and SciPy's solve_triangular on that row, bit for bit (the draws of a fixed seed)."""
    from scipy.linalg import solve_triangular

    rng = np.random.default_rng(3)
    A = rng.normal(size=(7, 7))
    whitening = Whitening.from_moments(rng.normal(size=7), A @ A.T + 0.1 * np.eye(7))
    whitening = Whitening(whitening.mean, np.asarray(whitening.chol, order=order), whitening.log_det)
    rows = rng.normal(size=(5, 7)) * 30.0
    many = whitening.whiten(rows)
    for i, row in enumerate(rows):
        one = whitening.whiten(row[None])
        scipy_row = solve_triangular(whitening.chol, (row[None] - whitening.mean).T, lower=True).T
        assert one.shape == (1, 7)
        assert np.array_equal(one, scipy_row) and np.array_equal(one[0], whitening.whiten(row))
        assert np.allclose(one[0], many[i], rtol=1e-12, atol=1e-12)


def test_shrunk_covariance():
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(200, 3)) @ np.array([[1.0, 0.0, 0.0], [0.5, 2.0, 0.0], [0.0, 0.0, 1e-3]])
    mean, cov = shrunk_covariance(pts)
    raw = np.cov(pts, rowvar=False)
    w = 20 / 23  # n_e = 200 / 10, d = 3
    assert np.allclose(mean, pts.mean(0))
    assert np.allclose(np.diag(cov), np.diag(raw)) and np.allclose(cov[0, 1], w * raw[0, 1])
    assert shrunk_covariance(np.ones((5, 2))) is None  # a coordinate that never moved


def test_shrunk_covariance_keeps_a_persistent_strong_correlation():
    """Coordinates 0 and 1 correlated 0.95 here: kept unshrunk if the previous estimate had them at
    least 0.8 (same sign), and their pairs with coordinate 2 shrunk by sqrt(w) (f = 1 x sqrt(w));
    otherwise every pair by w."""
    rng = np.random.default_rng(1)
    z = rng.normal(size=(400, 3))
    pts = np.column_stack([z[:, 0], 0.95 * z[:, 0] + np.sqrt(1 - 0.95**2) * z[:, 1], 1e3 * z[:, 2]])
    raw = np.cov(pts, rowvar=False)
    assert abs(raw[0, 1] / np.sqrt(raw[0, 0] * raw[1, 1])) > 0.9
    w = 40 / 43  # n_e = 400 / 10, d = 3

    def previous(r):
        return np.array([[4.0, 2 * r * 3, 0], [2 * r * 3, 9.0, 0], [0, 0, 1.0]])  # sds 2 and 3

    _, kept = shrunk_covariance(pts, previous(0.85))
    assert np.allclose(np.diag(kept), np.diag(raw)) and np.isclose(kept[0, 1], raw[0, 1])
    assert np.allclose([kept[0, 2], kept[1, 2]], np.sqrt(w) * raw[[0, 1], 2])
    assert np.all(np.linalg.eigvalsh(kept) > 0)
    plain = w * raw
    plain[np.diag_indices(3)] += (1 - w) * np.diag(raw)
    for r in (0.7, -0.85):  # not strong before, or of the other sign: a walk's correlation, shrunk
        _, shrunk = shrunk_covariance(pts, previous(r))
        # bit for bit the plain shrinkage (f_i f_j = sqrt(w) sqrt(w) would differ in the last bit)
        assert np.array_equal(shrunk, plain)
    assert np.sqrt(w) * np.sqrt(w) != w  # the f_i f_j form differs here, so the check above can fail
    assert np.array_equal(shrunk_covariance(pts)[1], plain)  # no previous estimate: as r = 0.7


def _windows_then_partial(partial_steps, partial_sd, am_weight=1.0, shift=0.0):
    """Windows of 50, 100, 200 draws from N(0, I) (ending at steps 50, 150, 350), then
    ``partial_steps`` draws from N(shift, partial_sd^2 I) in the next window, planned to end at 750."""
    rng = np.random.default_rng(8)
    kernel = None if am_weight == 1.0 else make_kernel("gaussian")
    adaptation = ScaleFreeAdaptation(2, kernel, scan_steps=0, first_window=50)
    component = "adaptive_metropolis"  # no moves are proposed here: every draw adapts lambda
    for _ in range(350):
        feed(adaptation, rng.normal(size=2), 0.3, rng, component)
    assert adaptation.window == 3
    adaptation.lambda_at_window_start = adaptation.state.am_scale.value  # for the test below
    for _ in range(partial_steps):
        feed(adaptation, shift + partial_sd * rng.normal(size=2), 0.3, rng, component)
    return adaptation, rng


@pytest.mark.parametrize("partial_steps", [150, 99])
def test_tuning_that_ends_inside_a_window_ends_it_and_carries_lambda_over(partial_steps):
    """Tuning ends 150 steps into a 400-step window (at least half the previous window's 200): that
    window ends, C is its draws' covariance (sd 2, not the earlier windows' 1), and lambda follows
    lambda_new^2 = lambda^2 tr(C_new^-1 C_old) / d. With 99 steps (fewer than half) the window changes
    nothing: C stays, and lambda returns to its value at the window's start (its 99 steps from a
    restarted gain are noise)."""
    prop, rng = _windows_then_partial(partial_steps, 2.0)
    old_cov, old_lambda = prop.state.covariance.copy(), prop.state.am_scale.value
    ended = prop.end_tuning(rng)
    assert ended == (partial_steps == 150)
    if not ended:
        np.testing.assert_array_equal(prop.state.covariance, old_cov)
        assert old_lambda != prop.lambda_at_window_start  # the window's steps had moved lambda
        assert prop.state.am_scale.value == prop.lambda_at_window_start
        return
    assert prop.window == 4
    assert np.sqrt(np.diag(prop.state.covariance)) == pytest.approx([2.0, 2.0], rel=0.25)
    factor = np.trace(np.linalg.solve(prop.state.covariance, old_cov)) / 2
    assert factor == pytest.approx(0.25, rel=0.5)  # about (1/2)^2: C grew 4 times
    assert prop.state.am_scale.value == pytest.approx(old_lambda * math.sqrt(factor), rel=1e-12)
    assert not prop.end_tuning(rng)  # the new window is empty


@pytest.mark.parametrize("shift", [0.0, 30.0], ids=["covered", "beyond-z"])
def test_at_the_end_of_tuning_nu2_follows_lambda_or_is_matched_to_it(shift):
    """nu^2 gets lambda's factor tr(C_new^-1 C_old) / d; but if the window's states lay beyond 3
    bandwidths of the previous Z (here 30 sds away), nu^2 had tuned only gamma there, and on the new
    Z it gets the AM step's average variance lambda^2 per whitened coordinate (nu^2 v (1 + r) =
    lambda^2 with gamma tied to nu^2), as when Z was first drawn."""
    prop, rng = _windows_then_partial(150, 2.0, am_weight=0.5, shift=shift)
    uncovered = prop._uncovered_fraction()
    assert (uncovered > 0.9) if shift else (uncovered < 0.1)
    nu2, probe, old_cov = prop.state.nu2.value, prop.state.probe_variance, prop.state.covariance.copy()
    z_before = prop.state.subsample.copy()
    assert prop.end_tuning(rng)
    assert not np.array_equal(prop.state.subsample, z_before)
    if shift:
        component_variance = prop.state.nu2.value * prop.state.probe_variance * (1.0 + prop.state.gamma_ratio)
        assert component_variance == pytest.approx(prop.state.am_scale.value**2, rel=1e-12)
    else:
        factor = np.trace(np.linalg.solve(prop.state.covariance, old_cov)) / 2
        # (the new Z's probe variance rescales nu^2 first, as at any window's end)
        expected = nu2 * probe / prop.state.probe_variance * factor
        assert prop.state.nu2.value == pytest.approx(expected, rel=1e-9)
    assert prop.state.family.nu2 == pytest.approx(prop.state.nu2.value, rel=1e-12)


# -------------------------------------------------------------------------------- chains
def banana_log_density(x, b=0.5):
    """x1 ~ N(0, 1), x2 = u + b (x1^2 - 1) with u ~ N(0, 1), x3 ~ N(0, 1): mean 0, var (1, 1 + 2b^2, 1)."""
    return -0.5 * x[0] ** 2 - 0.5 * (x[1] - b * (x[0] ** 2 - 1)) ** 2 - 0.5 * x[2] ** 2


EXACT_SD = np.array([1.0, math.sqrt(1.5), 1.0])


def run_chains(log_density, make_adaptation, x0, chains=4, tune=3000, draws=5000, seed=0, am_weight=0.1,
               proposal_class=ScaleFreeProposal, end_tuning=False, adaptations=None):
    """Plain NumPy MH chains with a ScaleFreeProposal on a ScaleFreeAdaptation's state, tuned for
    ``tune`` steps then frozen (``end_tuning``: as a step's stop_tuning ends it); returns draws of
    shape (chains, draws, d), and appends each chain's adaptation to ``adaptations``."""
    out = []
    for c in range(chains):
        rng = np.random.default_rng([seed, c])
        adaptation = make_adaptation()
        if adaptations is not None:
            adaptations.append(adaptation)
        prop = proposal_class(adaptation.state, am_weight)
        x, lx = np.array(x0, dtype=float), log_density(x0)
        kept = []
        for t in range(tune + draws):
            start = x
            move = prop.propose(x, rng)
            ly = log_density(move.x) if move.feasible else -np.inf
            accepted, p = metropolis_accept(mh_log_ratio(ly, lx, move.log_q_reverse, move.log_q_forward), rng)
            if accepted:
                x, lx = move.x, ly
                prop.accept(move)
            if t < tune:
                if adaptation.probe_due(rng):
                    point = prop.independent_point(rng)
                    adaptation.record_probe(x, lx, point, log_density(point))
                feed(adaptation, x, p, rng, move.component, start=start, proposal=move.x,
                     proposal_log_density=ly)
                if end_tuning and t == tune - 1:
                    adaptation.end_tuning(rng)
            else:
                kept.append(x)
        out.append(kept)
    return np.array(out)


DIAG = (np.diag([1e-4, 1e4, 1.0]), np.array([3.0, -7.0, 100.0]))
_Q = np.linalg.qr(np.random.default_rng(5).normal(size=(3, 3)))[0]
DENSE = (_Q @ np.diag([0.1, 1.0, 10.0]) @ _Q.T, np.array([1.0, 2.0, -3.0]))


def transformed_z_scores(A, b, make_adaptation, seed=0):
    """Sample z = A x + b, map back, and return |mean| / MCSE and |sd - exact| / MCSE per coordinate."""
    A_inv = np.linalg.inv(A)

    def log_density(z):
        return banana_log_density(A_inv @ (z - b))

    z0 = A @ np.array([2.0, 2.0, -2.0]) + b  # a start away from the bulk
    Z = run_chains(log_density, make_adaptation, z0, seed=seed)
    X = np.einsum("ij,cdj->cdi", A_inv, Z - b)
    scores = []
    for j in range(3):
        mcse_mean = ess_mcse(X[..., j])
        centred_sq = (X[..., j] - X[..., j].mean()) ** 2
        sd = math.sqrt(centred_sq.mean())
        mcse_sd = ess_mcse(centred_sq) / (2 * sd)
        scores += [abs(X[..., j].mean()) / mcse_mean, abs(sd - EXACT_SD[j]) / mcse_sd]
    return np.array(scores)


@pytest.mark.slow
@pytest.mark.parametrize("transform", ["identity", "diagonal 1e-4..1e4", "dense"])
def test_affine_equivariance(transform):
    """Sampling A x + b (A diagonal over 1e-4..1e4, or dense with condition number 100) gives the
    banana's exact moments after mapping back, as sampling x does: the proposal learns everything
    that depends on units."""
    A, b = {"identity": (np.eye(3), np.zeros(3)), "diagonal 1e-4..1e4": DIAG, "dense": DENSE}[transform]
    scores = transformed_z_scores(
        A, b, lambda: ScaleFreeAdaptation(3, make_kernel("gaussian"), n_subsample=300)
    )
    assert scores.max() < 4.5, scores


class _NotWhitened(ScaleFreeAdaptation):
    """Negative control: the same adaptation without the learned covariance (identity whitening)."""

    def _set_whitening(self, mean, cov):
        changed = self.state.family is None and self.window > 0
        return changed or self.window == 0


@pytest.mark.slow
def test_affine_equivariance_negative_control():
    """Without the learned scales (identity whitening and no coordinate scan), the 1e-4..1e4
    diagonal transform is sampled wrongly: the test above, with its bound of 4.5, would fail (max z
    1.9e6). Without the whitening alone it passes at these seeds (max z 2.8; 6.9 before the scan's
    transit rule): Kameleon moves take their scale from Z too."""
    scores = transformed_z_scores(
        *DIAG, lambda: _NotWhitened(3, make_kernel("gaussian"), n_subsample=300, scan_steps=0)
    )
    assert scores.max() > 4.5, scores


@pytest.mark.parametrize("late_sd", [0.1, 1.0], ids=["settled", "control"])
def test_window_ends_early_when_the_whitening_is_off(late_sd):
    """Windows of 50, 100, 200 draws from N(0, I), then draws from N(0, late_sd^2 I). A chain that
    settles into a region 10x narrower than the learned covariance (it was learned while walking
    in) ends its 400-step window after 100 draws (checked on their later half), and the new
    whitening has the new sd; draws that fit the whitening (the control) wait for the schedule.
    The window after the early end is twice as long as that one ran (200 steps, ending at 650), not
    twice the 400 planned (before: 800 steps, which a tuning run may never finish)."""
    rng = np.random.default_rng(5)
    prop = am_only(2, scan_steps=0, first_window=50)
    for _ in range(350):
        feed(prop, rng.normal(size=2), 0.3, rng)
    assert prop.window == 3
    ends = []
    for step in range(351, 751):
        window = prop.window
        feed(prop, late_sd * rng.normal(size=2), 0.3, rng)
        if prop.window != window:
            ends.append(step)
    if late_sd < 1:
        assert ends == [450, 650]
        assert np.sqrt(np.diag(prop.state.covariance)) == pytest.approx([late_sd] * 2, rel=0.3)
    else:
        assert ends == [750]


def test_a_window_in_which_the_chain_never_moved_keeps_the_whitening():
    """Delayed acceptance's adaptation signal is an importance weight: one rare pass (here 50) in a
    window where the chain never moved must not count as movement (it once shrank C to 1e-30)."""
    rng = np.random.default_rng(2)
    prop = am_only(2, scan_steps=0, first_window=50)
    for _ in range(50):
        feed(prop, rng.normal(size=2), 0.3, rng)
    before = prop.state.covariance.copy()
    stuck_at = rng.normal(size=2)
    for i in range(100):
        feed(prop, stuck_at, 50.0 if i == 10 else 0.0, rng)
    assert prop.window == 2
    np.testing.assert_array_equal(prop.state.covariance, before)
    # Control: a window that moves is re-estimated.
    for _ in range(200):
        feed(prop, 3.0 * rng.normal(size=2), 0.3, rng)
    assert prop.window == 3 and np.trace(prop.state.covariance) > 4 * np.trace(before)


@pytest.mark.parametrize("walking", [True, False], ids=["walking", "settled"])
def test_report_drift_flags_a_chain_still_walking_at_the_end_of_tuning(walking):
    """Tuning that ends while the chain still walks toward the posterior (here: a steady drift of
    10 learned sds over the last 1000 states) is reported and warned about; a settled chain is not."""
    from pymc_kameleon.steps.reporting import tuning_problems

    rng = np.random.default_rng(4)
    prop = am_only(2, scan_steps=0, first_window=50)
    for _ in range(350):
        feed(prop, rng.normal(size=2), 0.3, rng)
    ramp = np.linspace(0.0, 20.0 if walking else 0.0, 1000)
    for i in range(1000):
        feed(prop, ramp[i] + 0.1 * rng.normal(size=2), 0.3, rng)
    report = prop.report()
    problems = " ".join(tuning_problems(report, 0.234, 0, 2))
    if walking:
        assert report.drift > 3.0 and "still moving at the end of tuning" in problems
    else:
        assert report.drift < 0.5 and "still moving" not in problems


def test_log_density_climb_is_the_rise_between_halves_in_units_of_sqrt_half_d():
    """Hand-computed: halves with means -10 and -4 in d = 8 give (−4 − (−10)) / sqrt(4) = 3."""
    from pymc_kameleon.core.adaptation.diagnostics import log_density_climb

    lp = np.r_[np.full(150, -10.0), np.full(150, -4.0)]
    assert log_density_climb(lp, 8) == pytest.approx(3.0)
    assert log_density_climb(lp[::-1], 8) == pytest.approx(-3.0)
    assert math.isnan(log_density_climb(lp[:199], 8))  # too few states
    assert math.isnan(log_density_climb(np.r_[lp, -np.inf], 8))  # a rejected -inf is not a climb


def _report_after_walking_in(far, d=20):
    """The tuning report and its warnings after 350 settled steps, then 1000 whose coordinate 0 is
    offset by ``far`` (posterior sds), in 20-d standard normal draws with their log densities."""
    from pymc_kameleon.steps.reporting import tuning_problems

    rng = np.random.default_rng(5)
    prop = am_only(d, scan_steps=0, first_window=50)
    for _ in range(350):
        feed(prop, rng.normal(size=d), 0.3, rng)
    for offset in far:
        y = rng.normal(size=d)
        y[0] += offset
        feed(prop, y, 0.3, rng, log_density=-0.5 * y @ y)
    report = prop.report()
    return report, " ".join(tuning_problems(report, 0.234, 0, d))


@pytest.mark.parametrize("climbing", [True, False], ids=["climbing", "settled"])
def test_report_climb_flags_a_log_density_still_rising_at_the_end_of_tuning(climbing):
    """One of 20 coordinates still walking in: the whitened drift averages it away (RMS over
    coordinates), the log density does not. A settled chain's climb stays near 0 (control)."""
    far = np.linspace(12.0 if climbing else 0.0, 0.0, 1000)  # coordinate 0 walks in from 12 sd
    report, problems = _report_after_walking_in(far)
    assert report.drift < 3.0  # the drift check alone misses it
    if climbing:
        assert report.climb > 3.0 and "still climbing at the end of tuning" in problems
        assert report.late_climb > 1.5 and "over the last half" in problems
    else:
        assert abs(report.climb) < 1.0 and "still climbing" not in problems


@pytest.mark.parametrize("arrival", [100, 800], ids=["arrived-early", "arrived-late"])
def test_a_chain_that_arrived_early_in_the_last_tuning_states_is_not_called_climbing(arrival):
    """The climb between the halves of the last 1000 tuning states counts a walk in that ended in
    their first quarter (a regression from PyMC's start with tune=1000: climb 6.7-15.5, draws
    right). Over the last half the log density is flat, so no warning; a chain that arrives in the
    last half (control) is still climbing there and warns."""
    far = np.clip(np.linspace(40.0, 40.0 - 40.0 * 1000 / arrival, 1000), 0.0, None)  # 40 sd -> 0 at `arrival`
    report, problems = _report_after_walking_in(far)
    assert report.climb > 3.0
    if arrival < 500:
        assert abs(report.late_climb) < 1.0 and "still climbing" not in problems
    else:
        assert report.late_climb > 1.5 and "still climbing at the end of tuning" in problems


def test_a_steady_climb_warns_although_it_rose_less_than_the_limit_over_the_last_half():
    """A steady climb of 3.4 sqrt(d/2) between the halves keeps about half of it over the last half
    (1.7 > 1.5 warns anyway); one of 3.2 keeps 1.4, under 1.5 but more than a quarter of the climb,
    so it still warns: only a chain flat over the last half is taken to have arrived early."""
    import dataclasses

    from pymc_kameleon.steps.reporting import tuning_problems

    base = TuningReport(5000, "adaptive_metropolis", 0.25, False, math.nan)
    cases = [(3.2, 1.4, True), (3.2, 0.5, False), (8.0, 1.4, False), (8.0, 1.6, True)]
    for climb, late, warns in cases:
        report = dataclasses.replace(base, climb=climb, late_climb=late)
        said = "still climbing" in " ".join(tuning_problems(report, 0.234, 0, 20))
        assert said == warns, (climb, late)


def test_a_drift_that_happened_early_in_the_last_tuning_states_is_not_reported():
    """As for the climb: a drift above 3 learned sds between the halves of the last tuning states
    is not reported if over their last half it is at most 1 and a quarter of the drift (the chain
    arrived early in them); a steady walk keeps about half of it and is reported."""
    import dataclasses

    from pymc_kameleon.steps.reporting import tuning_problems

    base = TuningReport(5000, "adaptive_metropolis", 0.25, False, math.nan)
    cases = [(3.4, 0.4, False), (3.4, 1.7, True), (9.0, 1.1, True), (9.0, 0.9, False), (3.4, math.nan, True)]
    for drift, late, warns in cases:
        report = dataclasses.replace(base, drift=drift, late_drift=late)
        said = "still moving" in " ".join(tuning_problems(report, 0.234, 0, 20))
        assert said == warns, (drift, late)


def test_a_drift_without_a_climb_is_not_a_walk_unless_a_prior_is_improper():
    """A chain whose last tuning states drifted by more than 3 learned sds (and not early in them) while
    their log density rose by less than 1 sqrt(d/2) moved within the posterior, not toward it: nothing is
    said. A climb of 1 or more, a climb that arrived early (the drift alone then warns), no log densities
    (NaN), or an improper prior (a walk along an unidentified direction) keep the warning."""
    import dataclasses

    from pymc_kameleon.steps.reporting import tuning_problems

    base = TuningReport(5000, "adaptive_metropolis", 0.25, False, math.nan, drift=6.0, late_drift=2.3)
    cases = [  # climb, late climb, improper, warns
        (-0.4, 0.1, (), False), (0.27, -0.3, (), False), (0.99, 0.5, (), False),
        (1.0, 0.5, (), True), (1.9, 1.3, (), True), (2.2e5, 0.01, (), True), (math.nan, math.nan, (), True),
        (0.27, -0.3, ("mu",), True),
    ]
    for climb, late, improper, warns in cases:
        report = dataclasses.replace(base, climb=climb, late_climb=late)
        said = "still moving" in " ".join(tuning_problems(report, 0.234, 0, 3, improper=improper))
        assert said == warns, (climb, late, improper)


def test_gradient_spread_is_sd_times_root_mean_square_gradient():
    """Hand-computed: states alternating 1 and 3 (sd 1) with gradients alternating 2 and -2 (root mean
    square 2) give 2; states scaled by 1e4 with gradients scaled by 1e-4 give the same (unit-free)."""
    from pymc_kameleon.core.adaptation.diagnostics import gradient_spread

    x = np.tile([1.0, 3.0], 150)[:, None] * np.array([1.0, 1e4])
    g = np.tile([2.0, -2.0], 150)[:, None] * np.array([1.0, 1e-4])
    np.testing.assert_allclose(gradient_spread(x, g), [2.0, 2.0])
    assert np.all(np.isnan(gradient_spread(x[:199], g[:199])))  # too few states
    g_bad = g.copy()
    g_bad[5, 1] = np.nan
    assert np.all(np.isnan(gradient_spread(x, g_bad)))


@pytest.mark.parametrize("stuck", [True, False], ids=["stuck", "exploring"])
def test_report_spread_flags_a_coordinate_that_barely_moved(stuck):
    """Draws from N(0, diag(1, 4)) with their exact gradients have a spread of about 1 in both
    coordinates (Cramer-Rao holds with equality for a Gaussian): no problem (control). A chain whose
    coordinate 1 crawls at 1% of its sd while the gradient there is steep (x_1 = 5, far in the tail)
    has a spread of about 0.01 * 5 / 2 and is reported, by name."""
    from pymc_kameleon.steps.reporting import tuning_problems

    sd, rng = np.array([1.0, 2.0]), np.random.default_rng(6)
    prop = am_only(2, scan_steps=0, first_window=50)
    for _ in range(1000):
        y = sd * rng.normal(size=2)
        if stuck:
            y[1] = 5.0 + 0.02 * rng.normal()
        feed(prop, y, 0.3, rng, log_density=math.nan, gradient=-y / sd**2)
    report = prop.report()
    problems = " ".join(tuning_problems(report, 0.234, 0, 2, coordinate_names=["a", "b"]))
    if stuck:
        assert report.spread_coordinate == 1 and report.spread == pytest.approx(0.01 * 5 / 2, rel=0.1)
        assert "the chain barely moved in b at the end of tuning" in problems
    else:
        assert 0.9 < report.spread < 1.1 and "barely moved" not in problems


def test_gradient_slope_is_the_mean_gradient_over_its_root_mean_square():
    """Hand-computed: gradients alternating 3 and -1 (mean 1, root mean square sqrt(5)) give
    1/sqrt(5); the same scaled by 1e-4 give the same (unit-free); a constant gradient gives 1; a
    gradient of 0 throughout, fewer than 200 states or a non-finite value give NaN."""
    from pymc_kameleon.core.adaptation.diagnostics import gradient_slope

    g = np.tile([3.0, -1.0], 150)[:, None] * np.array([1.0, 1e-4])
    np.testing.assert_allclose(gradient_slope(g), [1 / math.sqrt(5), 1 / math.sqrt(5)])
    np.testing.assert_allclose(gradient_slope(np.full((300, 1), -8.0)), [1.0])
    assert np.isnan(gradient_slope(np.zeros((300, 1)))[0])
    assert np.all(np.isnan(gradient_slope(g[:199])))
    g_bad = g.copy()
    g_bad[7, 0] = np.inf
    assert np.all(np.isnan(gradient_slope(g_bad)))


@pytest.mark.parametrize("on_slope", [True, False], ids=["on-a-slope", "settled"])
def test_report_slope_flags_a_chain_still_on_its_way(on_slope):
    """Draws from N(0, diag(1, 4)) with their exact gradients: the mean gradient over 500 draws is
    within a few 1/sqrt(500) of 0 in root-mean-square units, no problem (control). A chain whose
    coordinate 1 crawls down from 40 sds (x_1 = 80 - 0.01 t, as a chain creeping along a ridge does)
    sees a gradient of one sign there: over the last 500 states a slope of |mean| / rms of
    (80 - 0.01 t) / 4, t = 500..999 (0.9998), reported by name."""
    from pymc_kameleon.steps.reporting import tuning_problems

    sd, rng = np.array([1.0, 2.0]), np.random.default_rng(7)
    prop = am_only(2, scan_steps=0, first_window=50)
    for t in range(1000):
        y = sd * rng.normal(size=2)
        if on_slope:
            y[1] = 80.0 - 0.01 * t
        feed(prop, y, 0.3, rng, log_density=math.nan, gradient=-y / sd**2)
    report = prop.report()
    problems = " ".join(tuning_problems(report, 0.234, 0, 2, coordinate_names=["a", "b"]))
    if on_slope:
        late = (80.0 - 0.01 * np.arange(500, 1000)) / 4.0
        expected = abs(late.mean()) / math.sqrt(np.mean(late**2))
        assert report.slope_coordinate == 1 and report.slope == pytest.approx(expected, rel=1e-12)
        assert "the chain was still on a slope at the end of tuning: in b" in problems
    else:
        assert report.slope < 4 / math.sqrt(500) and "on a slope" not in problems


def test_relative_spread_is_the_sd_over_the_mean_absolute_value():
    """Hand-computed: states alternating 1 and 3 (sd 1, mean |x| 2) give 0.5, the same scaled by 1e4
    give the same (unit-free); a coordinate at 0 throughout, fewer than 200 states or a non-finite
    value give NaN."""
    from pymc_kameleon.core.adaptation.diagnostics import relative_spread

    x = np.tile([1.0, 3.0], 150)[:, None] * np.array([1.0, 1e4])
    np.testing.assert_allclose(relative_spread(x), [0.5, 0.5])
    assert np.isnan(relative_spread(np.zeros((300, 1)))[0])
    # A coordinate that never changed (the scan rejected its few proposals) is not frozen: NaN, where its
    # sd is the rounding of its mean; the control moves by 1e-13 of its value, and is.
    constant = np.column_stack([x[:, 0], np.full(300, 0.1 + 0.2)])
    assert 0 < constant[:, 1].std() and np.isnan(relative_spread(constant)[1])
    constant[1::2, 1] *= 1.0 + 1e-13
    assert relative_spread(constant)[1] < 1e-12
    assert np.all(np.isnan(relative_spread(x[:199])))
    x_bad = x.copy()
    x_bad[3, 1] = np.nan
    assert np.all(np.isnan(relative_spread(x_bad)))


@pytest.mark.parametrize("case", ["frozen", "settled", "narrow"])
def test_report_names_a_coordinate_frozen_by_a_collapsed_step(case):
    """A chain whose coordinate 1 moves by 1e-13 of its value (a pseudo-marginal chain whose step
    collapsed while an estimate held it) is reported frozen there, by name, and not as still moving;
    draws from N(5, diag(1, 4)) are not (relative spreads about 0.2 and 0.4), nor draws of sd 0.5 at
    1.7e9 (2.9e-10: a new user's healthy posterior that a limit of 1e-9 called frozen)."""
    from pymc_kameleon.steps.reporting import tuning_problems

    sd, rng = np.array([1.0, 2.0]), np.random.default_rng(8)
    prop = am_only(2, scan_steps=0, first_window=50)
    for _ in range(1000):
        y = 5.0 + sd * rng.normal(size=2)
        if case == "frozen":
            y[1] = 0.04 * (1.0 + 1e-13 * rng.normal())
        elif case == "narrow":
            y[1] = 1.7e9 + 0.5 * rng.normal()
        feed(prop, y, 0.3, rng)
    report = prop.report()
    problems = " ".join(tuning_problems(report, 0.234, 0, 2, coordinate_names=["a", "b"]))
    if case == "frozen":
        assert report.relative_spread_coordinate == 1 and report.relative_spread < 1e-12
        assert "the chain was frozen in b at the end of tuning" in problems
        assert "still moving" not in problems
    elif case == "narrow":
        assert report.relative_spread == pytest.approx(0.5 / 1.7e9, rel=0.1) and "frozen" not in problems
    else:
        assert report.relative_spread > 0.1 and "frozen" not in problems


@pytest.mark.parametrize("drift", [9.0, 3.6e5, 7.2e11])
def test_report_calls_an_absurd_drift_a_collapsed_step_not_a_walk(drift):
    """A new user's correlated particle-filter chains (rho 0.9) ended tuning with drifts of 5.3e6-7.2e11
    learned sds and were told they were still moving; they had collapsed (relative spreads 1e-9 to
    1.6e-4, above the frozen limit). A drift of 9 (a chain walking in) is still a walk (the control)."""
    from pymc_kameleon.core.adaptation.diagnostics import TuningReport
    from pymc_kameleon.steps.reporting import tuning_problems

    report = TuningReport(
        tune_steps=1500, phase="adaptive_metropolis", accept_rate=0.3, wants_kameleon=False,
        uncovered=math.nan, drift=drift, late_drift=drift / 2, relative_spread=1.6e-4,
        relative_spread_coordinate=0,
    )
    problems = " ".join(tuning_problems(report, 0.234, 0, 3, coordinate_names=["phi", "sig", "tau"]))
    if drift < 100:
        assert "still moving" in problems and "collapsed" not in problems
    else:
        assert "step collapsed in tuning" in problems and "still moving" not in problems
        assert "log_ratio_sd" in problems


def test_variance_floor_is_one_over_the_mean_squared_gradient():
    """Hand-computed: gradients (2, 1) and (-4, 1) give mean squares (10, 1), so the floor is (0.1, 1);
    a window with a step that had no gradient gives none."""
    from pymc_kameleon.core.adaptation.windows import AdaptationWindow

    window = AdaptationWindow(2, 100, 10, 10)
    window.record(np.zeros(2), 0.5, gradient=np.array([2.0, 1.0]))
    window.record(np.ones(2), 0.5, gradient=np.array([-4.0, 1.0]))
    np.testing.assert_allclose(window.variance_floor, [0.1, 1.0])
    window.record(np.ones(2), 0.5)
    assert window.variance_floor is None
    window.start_next(20)  # a new window starts afresh
    window.record(np.zeros(2), 0.5, gradient=np.array([1.0, 0.5]))
    np.testing.assert_allclose(window.variance_floor, [1.0, 4.0])


def test_the_acceptance_rate_checked_at_the_end_of_tuning_leaves_independent_draws_out():
    """A new user's 2-d Gaussian was told its acceptance rate, 0.618, was far from target_accept and to
    increase `tune`: the walk accepted 0.287, the independent draws (not tuned to the target) 0.838. Hand-
    computed: walk steps at 0.3 and independent ones at 0.9 give 0.3 (the mixed mean, 0.6, is the
    control); over the recent steps too (tuning ending early in a window), and in a pooled window."""
    from pymc_kameleon.core.adaptation.windows import AdaptationWindow

    window = AdaptationWindow(2, 100, 10, 10)
    for k in range(10):
        window.record(np.full(2, k), 0.3)
        window.record(np.full(2, k), 0.9, tuned=False)
    assert np.mean(window.accept) == pytest.approx(0.6)
    assert window.last_accept_rate == pytest.approx(0.3)
    window.start_next(30)
    window.record(np.zeros(2), 0.9, tuned=False)  # one step into the next window: the recent ones count
    assert window.last_accept_rate == pytest.approx(0.3)
    assert window.merged().last_accept_rate == pytest.approx(0.3)
    only_independent = AdaptationWindow(2, 100, 10, 10)
    only_independent.record(np.zeros(2), 0.9, tuned=False)
    assert math.isnan(only_independent.last_accept_rate)


@pytest.mark.parametrize("with_gradient", [True, False], ids=["gradient", "no-gradient"])
def test_a_window_that_barely_moved_cannot_shrink_c_below_the_cramer_rao_floor(with_gradient):
    """Target N(0, I); a window whose coordinate 1 crawls at sd 0.01 around x_1 = 0.5 (a collapsed
    step). Its gradient there is -x, so the floor 1 / mean(x_1^2) is about 4 and the learned variance
    of coordinate 1 is at least that, while coordinate 0 (sd 1, floor about 1) keeps its estimate.
    Without gradients (control) the window shrinks it to about 1e-4."""
    rng = np.random.default_rng(8)
    prop = am_only(2, scan_steps=0, first_window=200)
    for _ in range(200):
        y = np.array([rng.normal(), 0.5 + 0.01 * rng.normal()])
        feed(prop, y, 0.3, rng, gradient=-y if with_gradient else None)
    assert prop.window == 1
    var = np.diag(prop.state.covariance)
    if with_gradient:
        assert var[1] == pytest.approx(4.0, rel=0.05) and 0.7 < var[0] < 1.3
    else:
        assert var[1] < 2e-4


def test_report_spread_needs_a_gradient_at_every_recent_state():
    """A step without gradients (KameleonMetropolis, GP-DA MH) gets no spread check (NaN)."""
    rng = np.random.default_rng(7)
    prop = am_only(2, scan_steps=0, first_window=50)
    for i in range(400):
        y = rng.normal(size=2)
        feed(prop, y, 0.3, rng, gradient=-y if i % 2 else None)
    report = prop.report()
    assert math.isnan(report.spread) and report.spread_coordinate == -1


@pytest.mark.parametrize("rate, shown", [(1.37, "1.000 (estimated as 1.37, capped at 1)"), (0.02, "0.020,")])
def test_report_never_shows_an_acceptance_rate_above_one(rate, shown):
    """GP-DA records an importance-weighted estimate of each step's acceptance probability, whose
    window mean can exceed 1: the warning shows a rate of at most 1 and says what it estimated."""
    from pymc_kameleon.steps.reporting import tuning_problems

    report = TuningReport(5000, "adaptive_metropolis", rate, False, math.nan)
    (problem,) = tuning_problems(report, 0.234, 0, 2)
    assert f"the acceptance rate over the last tuning window was {shown}" in problem


def test_the_sentences_about_one_chain_name_it_and_the_budget_does_not():
    """In a population (pooled tuning) each chain's sentences name it, so that a user can find it in the
    trace; the budget is the same for every chain, and its sentence, unnamed, is shown once."""
    from pymc_kameleon.steps.reporting import tuning_problems

    report = TuningReport(100, "adaptive_metropolis", 0.001, False, math.nan)
    budget, stuck = tuning_problems(report, 0.234, 500, 2, chain=3)
    assert budget.startswith("tuning took 100 steps") and "chain" not in budget
    assert stuck.startswith("chain 3 was stuck at the end of tuning")
    assert tuning_problems(report, 0.234, 500, 2)[1].startswith("the chain was stuck")
    (rate,) = tuning_problems(TuningReport(5000, "adaptive_metropolis", 0.02, False, math.nan), 0.234, 0, 2,
                              chain=1)
    assert rate.startswith("chain 1's acceptance rate over the last tuning window was 0.020")


def test_an_acceptance_rate_far_off_names_the_steps_own_remedy():
    """A step that knows a likelier cause than tuning too short (GP-DA whose likelihood other steps'
    variables change: its GP goes stale, and a new user's change-point model read an estimate of 1.04
    with the advice to tune longer) gives its own advice; without one, the advice is more tuning."""
    from pymc_kameleon.steps.reporting import tuning_problems

    report = TuningReport(5000, "adaptive_metropolis", 1.04, False, math.nan)
    (own,) = tuning_problems(report, 0.234, 0, 2, accept_remedy="the GP gone stale")
    assert own.endswith("target_accept=0.234; the GP gone stale") and "increase `tune`" not in own
    (default,) = tuning_problems(report, 0.234, 0, 2)
    assert default.endswith("increase `tune` so that the adaptation can settle")


def _stopped_at_a_window_boundary():
    """A chain that moved for 300 steps, then stopped, with tuning ending as a window ends."""
    rng = np.random.default_rng(3)
    prop = am_only(2, scan_steps=0, first_window=50)
    y = np.zeros(2)
    for i in range(3000):
        if i < 300:
            y = rng.normal(size=2)
        feed(prop, y, 0.3 if i < 300 else 0.0, rng)
        if i > 600 and len(prop.windows.accept) == 0:
            return prop
    raise AssertionError("no window ended")


def test_acceptance_at_the_end_of_tuning_reads_the_last_steps_when_a_window_just_began():
    """Tuning can end as a window ends: the new window has no steps, and the report reads the last
    first_window tuning steps instead; a stopped chain is reported as stuck."""
    from pymc_kameleon.steps.reporting import tuning_problems

    prop = _stopped_at_a_window_boundary()
    report = prop.report()
    assert report.accept_rate == 0.0
    (problem,) = tuning_problems(report, 0.234, 0, 2)
    assert "the chain was stuck at the end of tuning" in problem and "was 0.000" in problem


def test_negative_control_the_new_window_alone_hides_a_stopped_chain():
    from pymc_kameleon.steps.reporting import tuning_problems

    prop = _stopped_at_a_window_boundary()
    rate = prop.windows.accept_rate  # what the report read before
    assert math.isnan(rate)
    report = TuningReport(prop.tune_steps, prop.phase, rate, False, math.nan)
    assert tuning_problems(report, 0.234, 0, 2) == []


@pytest.mark.parametrize("tuned_steps", [0, 10])
def test_tuning_that_ends_inside_the_scan_leaves_every_coordinate_moving(tuned_steps):
    """A frozen scan moved one coordinate for ever (its coordinate advances only as it adapts)."""
    adaptation = ScaleFreeAdaptation(3, make_kernel("gaussian"))
    prop = ScaleFreeProposal(adaptation.state, 0.1)
    rng = np.random.default_rng(0)
    y = np.zeros(3)
    for _ in range(tuned_steps):
        move = prop.propose(y, rng)
        feed(adaptation, y, 0.5, rng, move.component, start=y, proposal=move.x)
    assert adaptation.phase == "scan"
    assert adaptation.end_tuning(rng) == (tuned_steps > 0)
    assert adaptation.phase == "adaptive_metropolis"
    moves = np.array([prop.propose(y, rng).x for _ in range(50)])
    assert np.all(moves != 0.0)  # every coordinate moves at every step
    move = prop.propose(y, rng)  # a symmetric random walk
    assert prop.log_density(move.x, y) == pytest.approx(prop.log_density(y, move.x))
    assert not adaptation.end_tuning(rng)  # once only


def test_windows_of_several_chains_merge_into_the_window_of_all_their_steps():
    """Mergeable state (for tuning pooled across chains): two chains' windows merged estimate the mean
    and covariance of all their draws, and pool the acceptance rate, the moves and the gradients'
    variance floor; the recent states (end-of-tuning checks) stay the first chain's."""
    from pymc_kameleon.core.adaptation.windows import AdaptationWindow

    rng = np.random.default_rng(9)
    a, b = AdaptationWindow(2, 1000, 50, 100), AdaptationWindow(2, 1000, 50, 100)
    points_a, points_b = rng.normal(size=(60, 2)), 3.0 + 2.0 * rng.normal(size=(40, 2))
    for window, points, p in ((a, points_a, 0.2), (b, points_b, 0.6)):
        for y in points:
            window.record(y, p, gradient=-y)
    b.record(points_b[-1], 0.0, gradient=-points_b[-1])  # one step that did not move
    pooled = a.merged(b)
    both = np.vstack([points_a, points_b, points_b[-1:]])
    mean, cov = shrunk_covariance(both)
    got_mean, got_cov = shrunk_covariance(pooled.draws.points)
    np.testing.assert_array_equal(got_mean, mean)
    np.testing.assert_array_equal(got_cov, cov)
    assert pooled.accept_rate == pytest.approx((60 * 0.2 + 40 * 0.6) / 101)
    assert pooled.moves == a.moves + b.moves == 59 + 39
    np.testing.assert_allclose(pooled.variance_floor, 1.0 / np.mean(both**2, axis=0))
    assert list(pooled.recent) == list(a.recent) and len(a.draws) == 60  # the windows are unchanged
    # Control: the first chain's window alone estimates something else.
    assert not np.allclose(shrunk_covariance(a.draws.points)[1], cov)


def test_a_rescue_restarts_the_states_the_end_of_tuning_checks_read():
    """Pooled windows: when a chain's state becomes another chain's previous state exactly (a rescue),
    the population's recent states restart, so the cross-chain check reads none from before the
    jump; ordinary moves keep them. The rescued chain forgets its own recent states too."""
    from pymc_kameleon.core.adaptation.windows import AdaptationWindow

    rng = np.random.default_rng(0)
    window = AdaptationWindow(dim=2, history_size=100, first_window=50, end=50)
    rows = rng.normal(size=(3, 2))
    for _ in range(5):
        rows = rows + rng.normal(scale=0.1, size=rows.shape)
        window.record(rows[0], 0.3, -1.0, None, rows)
    assert len(window.recent_population) == 5
    jumped = rows + rng.normal(scale=0.1, size=rows.shape)
    jumped[2] = rows[0]  # chain 2 jumps to chain 0's state
    window.record(jumped[0], 0.3, -1.0, None, jumped)
    assert len(window.recent_population) == 1  # the states since the jump: this step's
    window.record(jumped[0], 0.3, -1.0, None, jumped)  # a step where no chain moved: no jump
    assert len(window.recent_population) == 2
    assert len(window.recent) == 7
    window.forget_recent_states()
    assert not window.recent and not window.recent_log_density and not window.recent_gradient


def _tune_gaussian(adaptation, steps, rng):
    """Feed ``steps`` independent N(0, diag(1, 4)) draws, as AM moves accepted with probability 0.25."""
    sd = np.array([1.0, 2.0])
    for _ in range(steps):
        y = sd * rng.standard_normal(2)
        component = "kameleon" if adaptation.state.family is not None else "adaptive_metropolis"
        feed(adaptation, y, 0.25, rng, component=component)


@pytest.mark.parametrize("kameleon_after", [0, 600, 5000])
def test_the_kameleon_component_joins_at_the_first_window_end_after_kameleon_after(kameleon_after):
    """No Z before ``kameleon_after`` tuning steps (the AM walk alone); Z at the first window end after."""
    rng = np.random.default_rng(3)
    adaptation = ScaleFreeAdaptation(2, GaussianKernel(1.0), first_window=50, n_subsample=40,
                                     kameleon_after=kameleon_after)
    first_z = None
    for step in range(1, 1501):
        _tune_gaussian(adaptation, 1, rng)
        if first_z is None and adaptation.state.family is not None:
            first_z = step
    if kameleon_after >= 1500:
        assert first_z is None and adaptation.phase == "adaptive_metropolis"
        assert not adaptation.wants_kameleon  # tuning never reached kameleon_after: no warning due
    else:
        assert first_z is not None and first_z >= kameleon_after
        assert adaptation.phase == "kameleon" and adaptation.wants_kameleon
    if kameleon_after == 600:
        # The windows (scan 100 steps, then 50, 100, 200, 400: ends at 150, 250, 450, 850) decide when.
        assert first_z == 850


def test_tuning_that_ends_inside_the_window_after_kameleon_after_reports_no_missing_kameleon():
    """Tuning past ``kameleon_after`` but ending inside the window that would draw Z leaves the chain with
    the AM walk, as shorter tuning does: the report does not call the Kameleon component due (a new
    user's converged regression warned "increase tune" at tune=10000 and 12000, not at 2000 or 20000).
    Negative control: once that window has ended, Z exists and the phase is "kameleon"."""
    from pymc_kameleon.steps.reporting import tuning_problems

    rng = np.random.default_rng(3)
    adaptation = ScaleFreeAdaptation(
        2, GaussianKernel(1.0), first_window=50, n_subsample=40, kameleon_after=600
    )
    _tune_gaussian(adaptation, 700, rng)  # windows end at 150, 250, 450, 850: 700 is inside the last
    report = adaptation.report()
    assert report.phase == "adaptive_metropolis" and not report.wants_kameleon
    said = tuning_problems(report, 0.234, adaptation.required_tune_steps(), 2)
    assert not any("before the first Kameleon proposal" in p for p in said), said
    _tune_gaussian(adaptation, 200, rng)
    assert adaptation.phase == "kameleon" and adaptation.report().wants_kameleon


def test_before_kameleon_after_the_proposal_is_the_am_walk_alone():
    """The proposal of a state without Z is the symmetric N(y, lambda^2 C) walk, whatever am_weight is;
    negative control: with Z the mixture's density differs."""
    rng = np.random.default_rng(4)
    adaptation = ScaleFreeAdaptation(2, GaussianKernel(1.0), first_window=50, n_subsample=40,
                                     kameleon_after=10_000)
    _tune_gaussian(adaptation, 800, rng)
    prop = ScaleFreeProposal(adaptation.state, 0.1)
    assert prop.symmetric
    y = np.array([0.3, -0.5])
    move = prop.propose(y, rng)
    assert move.component == "adaptive_metropolis"
    state = adaptation.state
    lam = state.am_scale.value
    expected = multivariate_normal(y, lam**2 * state.covariance).logpdf(move.x)
    assert prop.log_density(move.x, y) == pytest.approx(expected, rel=1e-9)
    joined = ScaleFreeAdaptation(2, GaussianKernel(1.0), first_window=50, n_subsample=40, kameleon_after=0)
    _tune_gaussian(joined, 800, np.random.default_rng(4))
    mixture = ScaleFreeProposal(joined.state, 0.1)
    assert not mixture.symmetric
    lam = joined.state.am_scale.value
    walk = multivariate_normal(y, lam**2 * joined.state.covariance).logpdf(move.x)
    assert abs(mixture.log_density(move.x, y) - walk) > 1e-3


# ---------------------------------------------------------------- the independence component
def in_am_phase_with_independence(iota=0.3, lam=0.8):
    """A state after tuning without Z: the AM walk N(y, lam^2 C) and t_10(M, C) draws at weight iota."""
    state = ScaleFreeAdaptation(2, None).state
    state.whitening = Whitening.from_moments(M, C)
    state.tune_steps = state.scan_steps
    state.am_scale = RobbinsMonro(lam)
    state.independence_weight = iota
    return ScaleFreeProposal(state, 1.0)


def _assert_mixture_hastings_terms(prop, t):
    """Both Hastings terms of 30 moves of ``prop`` (iota 0.3, lam 0.8) equal
    log(0.3 t(x) + 0.7 N(x; y, 0.64 C)) written out with SciPy, and both components are drawn.
    Returns that density as a function of (x, y)."""

    def expected(x, y):
        return math.log(0.3 * t.pdf(x) + 0.7 * multivariate_normal(y, 0.64 * C).pdf(x))

    y = np.array([0.5, -1.5])
    rng = np.random.default_rng(2)
    components = set()
    for _ in range(30):
        move = prop.propose(y, rng)
        components.add(move.component)
        assert move.log_q_forward == pytest.approx(expected(move.x, y), rel=1e-9)
        assert move.log_q_reverse == pytest.approx(expected(y, move.x), rel=1e-9)
    assert components == {"adaptive_metropolis", "independence"}
    return expected


def test_exact_independence_hastings_terms_and_ratio():
    """Fixed inputs: q(x|y) = iota t_10(x; M, C) + (1 - iota) N(x; y, lam^2 C), written out with SciPy,
    gives both Hastings terms and log alpha; they differ, so the ratio needs them."""
    prop = in_am_phase_with_independence()
    expected = _assert_mixture_hastings_terms(prop, multivariate_t(M, C, df=INDEPENDENCE_DF))
    y, x = np.array([0.5, -1.5]), np.array([3.0, -0.4])
    log_target = lambda p: -0.5 * p[0] ** 2 - 0.5 * (p[1] - 0.5 * p[0] ** 2) ** 2  # noqa: E731
    want = log_target(x) - log_target(y) + expected(y, x) - expected(x, y)
    got = mh_log_ratio(log_target(x), log_target(y), prop.log_density(y, x), prop.log_density(x, y))
    assert got == pytest.approx(want, rel=1e-10)
    assert abs(expected(y, x) - expected(x, y)) > 0.2


def test_independence_density_by_monte_carlo_and_negative_control():
    """The mixture's draws follow its stated density; one with the independence term left out does not."""
    prop = in_am_phase_with_independence(iota=0.5)
    y = np.array([0.5, -1.5])
    assert abs(_density_identity_z(prop, y, prop.log_density)) < 4
    walk_only = in_am_phase_with_independence(iota=0.0)
    assert abs(_density_identity_z(prop, y, walk_only.log_density)) > 6


# The fitted shape in whitened coordinates: z = B + A u; in model coordinates x = M + L z, so the
# component is t_10(M + L B, L A A' L').
FIT_B = np.array([1.5, -1.0])
FIT_A = np.array([[0.5, 0.0], [0.3, 0.4]])


def in_am_phase_with_fitted_independence(iota=0.3, lam=0.8):
    prop = in_am_phase_with_independence(iota, lam)
    prop.state.independence_fit = IndependenceProposal(FIT_B, FIT_A, INDEPENDENCE_DF)
    prop.state.independence_uses_fit = True
    return prop


def test_exact_fitted_independence_hastings_terms_and_ratio():
    """Fixed inputs: with the fitted shape, q(x|y) = iota t_10(x; M + L B, L A A' L') + (1 - iota)
    N(x; y, lam^2 C), written out with SciPy; the fitted shape's draws are x = M + L (B + A u)."""
    prop = in_am_phase_with_fitted_independence()
    chol = np.linalg.cholesky(C)
    t = multivariate_t(M + chol @ FIT_B, chol @ FIT_A @ FIT_A.T @ chol.T, df=INDEPENDENCE_DF)
    _assert_mixture_hastings_terms(prop, t)
    # a probe of either shape, whatever the component uses
    stream = np.random.default_rng(5)
    u = stream.standard_normal(2)
    u /= math.sqrt(stream.chisquare(INDEPENDENCE_DF) / INDEPENDENCE_DF)
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    assert np.allclose(prop.independent_point(rng_a, fitted=True), M + chol @ (FIT_B + FIT_A @ u), atol=1e-12)
    assert np.allclose(prop.independent_point(rng_b, fitted=False), M + chol @ u, atol=1e-12)


def test_fitted_independence_density_by_monte_carlo_and_negative_control():
    """The mixture with the fitted shape draws what its density states; the learned shape's density
    (the fit forgotten) does not describe those draws."""
    prop = in_am_phase_with_fitted_independence(iota=0.5)
    y = np.array([0.5, -1.5])
    assert abs(_density_identity_z(prop, y, prop.log_density)) < 4
    learned = in_am_phase_with_independence(iota=0.5)
    assert abs(_density_identity_z(prop, y, learned.log_density)) > 6


def test_the_kept_terms_at_an_unchanged_state_follow_the_shape_and_the_whitening():
    """The whitened state and its independence term are kept while the state stays (a rejected
    proposal); a new shape, the fit switched off, or a new whitening is used at the next move."""
    prop = in_am_phase_with_fitted_independence()
    y, rng = np.array([0.5, -1.5]), np.random.default_rng(3)
    first = prop.propose(y, rng)
    assert first.log_q_reverse == pytest.approx(prop.log_density(y, first.x), rel=1e-12)
    changes = (
        lambda state: setattr(state, "independence_fit", IndependenceProposal(-FIT_B, FIT_A, 10.0)),
        lambda state: setattr(state, "independence_uses_fit", False),
        lambda state: setattr(state, "whitening", Whitening.from_moments(M + 1.0, 2.0 * C)),
    )
    for change in changes:
        before = prop.propose(y, rng)
        change(prop.state)
        move = prop.propose(y, rng)
        assert move.log_q_reverse == pytest.approx(prop.log_density(y, move.x), rel=1e-12)
        # the negative control: the reverse term before the change is not the one after it
        assert before.log_q_reverse != pytest.approx(prop.log_density(y, before.x), rel=1e-6)


def test_without_the_independence_weight_no_uniform_is_drawn():
    """independence_weight=0 leaves the random stream as it was before the component existed: the AM
    move is y + lam L eps with the first normals of the stream."""
    prop = in_am_phase_with_independence(iota=0.0)
    assert prop.symmetric
    y = np.array([0.5, -1.5])
    move = prop.propose(y, np.random.default_rng(9))
    eps = np.random.default_rng(9).standard_normal(2)
    assert np.allclose(move.x, y + 0.8 * np.linalg.cholesky(C) @ eps, rtol=0, atol=1e-12)


class _IndependenceAsSymmetric(ScaleFreeProposal):
    """Negative control: independence moves proposed, but the ratio treats every move as symmetric."""

    def propose(self, y, rng):
        move = super().propose(y, rng)
        return Move(move.x, 0.0, 0.0, move.cache, move.jitter, move.component)


def _gaussian_log_density(x):
    return -0.5 * float(x @ x) / 4.0  # N(0, 4 I): mean 0, sd 2


def _independence_z_scores(proposal_class, seed=0):
    """|mean| / MCSE and |sd - 2| / MCSE per coordinate of N(0, 4 I_3), sampled by the AM walk with the
    independence component (iota_max 0.5) after tuning; also each chain's final iota."""
    adaptations = []
    X = run_chains(
        _gaussian_log_density, lambda: ScaleFreeAdaptation(3, None, independence_weight=0.5), np.full(3, 6.0),
        tune=2000, draws=4000, seed=seed, am_weight=1.0, proposal_class=proposal_class, end_tuning=True,
        adaptations=adaptations,
    )
    scores = []
    for j in range(3):
        centred_sq = (X[..., j] - X[..., j].mean()) ** 2
        sd = math.sqrt(centred_sq.mean())
        mcse_sd = ess_mcse(centred_sq) / (2 * sd)
        scores += [abs(X[..., j].mean()) / ess_mcse(X[..., j]), abs(sd - 2.0) / mcse_sd]
    shapes = [(a.state.independence_weight, a.state.independence_uses_fit) for a in adaptations]
    return np.array(scores), shapes


@pytest.mark.slow
def test_independence_component_leaves_the_target_invariant():
    """On N(0, 4 I_3) from a far start the independence component wins tuning (iota 0.5 in every chain;
    the shapes are both right here, and the last window's verdict gives two chains each), and the draws
    have the exact mean and sd within 4.5 MCSE."""
    scores, shapes = _independence_z_scores(ScaleFreeProposal)
    assert [weight for weight, _ in shapes] == [0.5] * 4
    assert {fitted for _, fitted in shapes} == {False, True}  # both shapes' draws are checked
    assert scores.max() < 4.5, scores


class _FittedIndependenceAsSymmetric(ScaleFreeProposal):
    """Negative control: the fitted shape's draws proposed, the ratio without its Hastings terms."""

    def propose(self, y, rng):
        move = super().propose(y, rng)
        return Move(move.x, 0.0, 0.0, move.cache, move.jitter, move.component)


def _fitted_shape_z_scores(proposal_class, n=40_000, seed=4):
    """|mean - M| / MCSE and |sd - sd_M| / MCSE per coordinate of N(M, C), sampled by the frozen AM walk
    (lam 0.8) with the fitted shape (t_10 of FIT_B, FIT_A in the whitening of M, C; shifted and
    narrower than the target) at weight 0.5."""
    prop = in_am_phase_with_fitted_independence(iota=0.5)
    prop = proposal_class(prop.state, 1.0)
    target = multivariate_normal(M, C)
    rng = np.random.default_rng(seed)
    y = M.copy()
    ly = target.logpdf(y)
    draws = np.empty((n, 2))
    for k in range(n):
        move = prop.propose(y, rng)
        lx = target.logpdf(move.x)
        accepted, _ = metropolis_accept(mh_log_ratio(lx, ly, move.log_q_reverse, move.log_q_forward), rng)
        if accepted:
            y, ly = move.x, lx
        draws[k] = y
    scores = []
    for j in range(2):
        centred_sq = (draws[:, j] - M[j]) ** 2
        sd = math.sqrt(centred_sq.mean())
        scores += [abs(draws[:, j].mean() - M[j]) / ess_mcse(draws[:, j]),
                   abs(sd - math.sqrt(C[j, j])) / (ess_mcse(centred_sq) / (2 * sd))]
    return np.array(scores)


@pytest.mark.slow
def test_the_fitted_shape_leaves_the_target_invariant():
    """With the fitted shape (off the target's centre and too narrow: its Hastings terms matter) the
    draws have the exact mean and sd within 4.5 MCSE; without its Hastings terms they do not."""
    assert _fitted_shape_z_scores(ScaleFreeProposal).max() < 4.5
    assert _fitted_shape_z_scores(_FittedIndependenceAsSymmetric).max() > 4.5


@pytest.mark.slow
def test_independence_invariance_negative_control():
    """The same run with the independence moves' Hastings terms dropped is wrong by far more."""
    scores, _ = _independence_z_scores(_IndependenceAsSymmetric)
    assert scores.max() > 4.5, scores


def _tuned_adaptations(log_density, dim, seed=1):
    adaptations = []
    run_chains(log_density, lambda: ScaleFreeAdaptation(dim, None, independence_weight=0.5),
               np.zeros(dim), chains=2, tune=2000, draws=1, seed=seed, am_weight=1.0, end_tuning=True,
               adaptations=adaptations)
    return adaptations


def _final_verdicts(adaptation, fitted: bool):
    """Whether the last verdict on each shape ("learned" or "fitted") turned the component on."""
    decisions = adaptation.independence_decisions
    last = decisions[-1].tune_step
    return [d.on for d in decisions if d.tune_step == last and d.fitted == fitted]


def test_independence_weight_is_kept_where_it_jumps_further_and_dropped_where_not():
    """A Gaussian keeps iota_max after tuning. On twenty independent Gumbel coordinates the learned
    shape loses: each coordinate is skewed, so the Student-t's importance weights multiply into a
    spread that rejects nearly every independent draw, while the walk moves as on a Gaussian.
    (Strongly twisted bananas in 2 and 8 dimensions keep it: there the walk moves little too. The
    fitted shape, a Gaussian matched to the Gumbels' log densities, jumps 3-5 times further than the
    walk there and passes or fails by its k-hat, 0.7-2.7.)"""
    gaussian = _tuned_adaptations(lambda x: -0.5 * float(x @ x), 2)
    assert [a.state.independence_weight for a in gaussian] == [0.5, 0.5]
    gumbel = _tuned_adaptations(lambda x: float(np.sum(-x - np.exp(-x))), 20)
    assert [_final_verdicts(a, fitted=False) for a in gumbel] == [[False], [False]]


def test_independence_is_probed_without_moving_from_the_first_window_after_the_scan():
    """No probes in the scan; after it about INDEPENDENCE_PROBE of the steps probe, and
    the proposal draws no independent moves until a window says they pay."""
    adaptation = ScaleFreeAdaptation(2, None, first_window=50, independence_weight=0.5)
    rng = np.random.default_rng(0)
    probes = []
    for _ in range(adaptation.state.scan_steps):
        probes.append(adaptation.probe_due(rng))
        _tune_gaussian(adaptation, 1, rng)
    assert not any(probes)
    assert adaptation.state.independence_weight == 0.0
    due = [adaptation.probe_due(rng) for _ in range(4000)]
    assert abs(np.mean(due) - INDEPENDENCE_PROBE) < 0.02
    assert adaptation.state.independence_weight == 0.0
    assert not ScaleFreeAdaptation(2, None).probe_due(rng)  # without the component: no uniform drawn


def test_probes_per_shape_raise_the_probe_rate_in_short_windows():
    """With ``independence_probes`` a window of n steps, from the BOOSTED_FROM-th after the scan, probes
    at max(INDEPENDENCE_PROBE, min(PROBE_CAP, shapes * probes / n)): each shape measured gets about that
    many probes however short the window (GP-DA-MH, which has no exam). Earlier windows, and any
    window without the option (the control), probe at the fixed rate."""
    adaptation = ScaleFreeAdaptation(
        2, None, first_window=50, independence_weight=0.5, independence_probes=40
    )
    rng = np.random.default_rng(3)
    _tune_gaussian(adaptation, adaptation.state.scan_steps, rng)
    state, tuning = adaptation.state, adaptation.independence

    def rate(length, tuning=tuning, window=BOOSTED_FROM):
        return np.mean([tuning.probe_due(state, window, rng, length) for _ in range(4000)])

    assert adaptation.state.independence_weight == 0.0
    state.independence_fit = None  # off without a fit: one shape probed
    assert rate(800) == pytest.approx(INDEPENDENCE_PROBE, abs=0.02)
    assert rate(200) == pytest.approx(0.2, abs=0.02)
    assert rate(40) == pytest.approx(PROBE_CAP, abs=0.03)
    assert rate(40, window=BOOSTED_FROM - 1) == pytest.approx(INDEPENDENCE_PROBE, abs=0.02)
    # The first window after the scan (first_window = 50 steps) keeps the fixed rate.
    first = np.mean([adaptation.probe_due(rng) for _ in range(4000)])
    assert first == pytest.approx(INDEPENDENCE_PROBE, abs=0.02)
    state.independence_fit = object()  # off with a fit: the two shapes take turns
    assert rate(400) == pytest.approx(0.2, abs=0.02)
    assert rate(800) == pytest.approx(INDEPENDENCE_PROBE, abs=0.02)
    state.independence_weight = 0.5  # on: its moves measure its shape, probes the other one
    assert rate(200) == pytest.approx(0.2, abs=0.02)
    fixed = IndependenceTuning(0.5, 2)
    assert rate(200, fixed) == pytest.approx(INDEPENDENCE_PROBE, abs=0.02)


def test_a_probe_records_the_independence_samplers_jump_and_weight():
    """record_probe adds min(1, w(x') / w(y)) |w_x' - w_y|^2 with w = pi / t_10, written out here."""
    adaptation = ScaleFreeAdaptation(2, None, independence_weight=0.5)
    state = adaptation.state
    state.whitening = Whitening.from_moments(M, C)
    y, x = np.array([0.5, -1.5]), np.array([2.0, -1.0])
    t = multivariate_t(np.zeros(2), np.eye(2), df=INDEPENDENCE_DF)
    w_y, w_x = state.whiten(y), state.whiten(x)
    lw_y, lw_x = -1.0 - t.logpdf(w_y), -3.0 - t.logpdf(w_x)
    adaptation.record_probe(y, -1.0, x, -3.0)
    expected = min(1.0, math.exp(lw_x - lw_y)) * float((w_x - w_y) @ (w_x - w_y))
    assert adaptation.independence._jumps[0] == pytest.approx([expected, 1.0], rel=1e-10)
    assert adaptation.independence._log_weights[0] == [pytest.approx(lw_x, rel=1e-10)]
    adaptation.record_probe(y, -1.0, x, -math.inf)  # outside the support: no jump
    assert adaptation.independence._jumps[0] == pytest.approx([expected, 2.0], rel=1e-10)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5])
def test_independence_weight_must_be_a_probability_below_one(bad):
    with pytest.raises(ValueError, match="independence_weight"):
        ScaleFreeAdaptation(2, None, independence_weight=bad)


def test_every_verdict_on_the_independence_component_is_recorded():
    """``independence_decisions`` holds each window's figures; the last one is what tuning ended with."""
    adaptations = []
    run_chains(lambda x: -0.5 * float(x @ x), lambda: ScaleFreeAdaptation(2, None, independence_weight=0.5),
               np.zeros(2), chains=1, tune=2000, draws=1, seed=1, am_weight=1.0, end_tuning=True,
               adaptations=adaptations)
    decisions = adaptations[0].independence_decisions
    assert len(decisions) >= 2
    final = [d for d in decisions if d.tune_step == decisions[-1].tune_step]
    (last,) = [d for d in final if d.on]
    assert last.khat <= 0.7 and last.independent_jump > last.walk_jump and last.draws >= 20
    # the shape that won jumped furthest of those judged at the end
    assert adaptations[0].state.independence_uses_fit == last.fitted
    assert [d.tune_step for d in decisions] == sorted(d.tune_step for d in decisions)


# ---------------------------------------------------------------- the end-of-tuning exam
def _adaptation_after_tuning(fit=None, walk_jump=0.5):
    """A state past the scan with the learned shape t_10(M, C) (and ``fit``, whitened), whose last window
    set the walk's jump to ``walk_jump``."""
    adaptation = ScaleFreeAdaptation(2, None, independence_weight=0.5)
    state = adaptation.state
    state.whitening = Whitening.from_moments(M, C)
    state.tune_steps = state.scan_steps + 1
    state.independence_fit = fit
    adaptation.independence._walk_jump = walk_jump
    return adaptation


def _whitened_fit(sd):
    """A fitted shape t_10(0, sd^2 I) in the whitened coordinates."""
    return IndependenceProposal(np.zeros(2), sd * np.eye(2), INDEPENDENCE_DF)


def _gaussian(mean, cov):
    return multivariate_normal(mean, cov).logpdf


def test_the_exam_pairs_its_draws_with_the_last_states_as_a_probe_would():
    """Each of EXAM_DRAWS t_10 draws w_i (in the learned whitening), evaluated at x_i = M + L w_i, jumps
    min(1, w(x_i) / w(y_j)) |w_i - w_yj|^2 from the recent state j = i mod 3, with w = pi / t_10: the
    recorded jump is their mean (written out here) and k-hat that of the log weights; the exam makes
    EXAM_DRAWS evaluations and leaves the component on with the learned shape, which jumped further."""
    adaptation = _adaptation_after_tuning()
    state = adaptation.state
    log_density = _gaussian(M, C)
    recent = [M + np.array([0.5, 0.1]), M - np.array([1.0, 0.3]), M + np.array([0.0, 0.8])]
    recent_values = [log_density(y) for y in recent]
    evals = []
    made = adaptation.independence.exam(
        state, lambda x: evals.append(x) or log_density(x), recent, recent_values, np.random.default_rng(7)
    )
    assert made == len(evals) == EXAM_DRAWS
    t = multivariate_t(np.zeros(2), np.eye(2), df=INDEPENDENCE_DF)
    rng = np.random.default_rng(7)
    chol = np.linalg.cholesky(C)
    jumps, log_weights = [], []
    for i in range(EXAM_DRAWS):
        w = standard_t_draw(2, INDEPENDENCE_DF, rng)
        np.testing.assert_allclose(evals[i], M + chol @ w, rtol=1e-12)
        w_y = np.linalg.solve(chol, recent[i % 3] - M)
        lw, lw_y = log_density(M + chol @ w) - t.logpdf(w), recent_values[i % 3] - t.logpdf(w_y)
        jumps.append(min(1.0, math.exp(lw - lw_y)) * float((w - w_y) @ (w - w_y)))
        log_weights.append(lw)
    (decision,) = adaptation.independence_decisions
    assert decision.exam and not decision.fitted and decision.draws == EXAM_DRAWS
    assert decision.independent_jump == pytest.approx(np.mean(jumps), rel=1e-9)
    assert decision.khat == pytest.approx(pareto_tail_index(log_weights), rel=1e-9)
    assert decision.on and decision.walk_jump == 0.5
    assert state.independence_weight == 0.5 and not state.independence_uses_fit


def test_the_exam_keeps_a_shape_that_covers_the_target_and_drops_one_that_does_not():
    """Target N(M, C): the learned shape (its mean and covariance) passes; the same target moved 4 sds
    along the first whitened axis, where both shapes put little mass, gives weights with a tail too
    heavy (k-hat > 0.7 at 90% of seeds here): both fail and the component is off for the draws,
    whatever the last window said (negative control). A fitted shape matching the target where the
    learned one is too narrow wins."""
    moved = M + np.linalg.cholesky(C) @ np.array([4.0, 0.0])
    for mean, on in ((M, True), (moved, False)):
        target = _gaussian(mean, C)
        # A low bar for the walk's jump, so that both shapes' k-hat is computed and decides.
        adaptation = _adaptation_after_tuning(fit=_whitened_fit(0.9), walk_jump=0.01)
        adaptation.state.independence_weight = 0.0 if on else 0.5  # the last window said the opposite
        recent = multivariate_normal(mean, C).rvs(size=300, random_state=1)
        adaptation.independence.exam(adaptation.state, target, recent, [target(y) for y in recent],
                                     np.random.default_rng(2))
        exam = {d.fitted: d for d in adaptation.independence_decisions if d.exam}
        assert set(exam) == {False, True}
        if on:  # the learned shape covers the target
            assert exam[False].khat <= INDEPENDENCE_MAX_KHAT and exam[False].on, exam
        else:  # it misses it; the fitted one (narrower) does not even jump further than the bar
            assert exam[False].khat > INDEPENDENCE_MAX_KHAT and not any(d.on for d in exam.values()), exam
        assert adaptation.state.independence_weight == (0.5 if on else 0.0)
    wide = _gaussian(M, 9.0 * C)
    adaptation = _adaptation_after_tuning(fit=_whitened_fit(3.0))
    recent = multivariate_normal(M, 9.0 * C).rvs(size=300, random_state=1)
    values = [wide(y) for y in recent]
    adaptation.independence.exam(adaptation.state, wide, recent, values, np.random.default_rng(2))
    assert adaptation.state.independence_weight == 0.5 and adaptation.state.independence_uses_fit


def test_no_exam_without_the_component_in_the_scan_without_a_bar_or_without_states():
    log_density = _gaussian(M, C)
    recent = [M]
    cases = {
        "disabled": ScaleFreeAdaptation(2, None),
        "no bar": ScaleFreeAdaptation(2, None, independence_weight=0.5),
    }
    in_scan = ScaleFreeAdaptation(2, None, independence_weight=0.5)
    in_scan.independence._walk_jump = 0.5
    cases["scan"] = in_scan
    for name, adaptation in cases.items():
        rng = np.random.default_rng(0)
        made = adaptation.independence.exam(adaptation.state, log_density, recent, [0.0], rng)
        assert made == 0 and adaptation.independence_decisions == [], name
    adaptation = _adaptation_after_tuning()
    assert adaptation.examine_independence(log_density, np.random.default_rng(0)) == 0  # no recent states


def test_tuning_that_starts_from_draws_has_no_scan_and_learns_their_moments_and_z():
    """start_from_draws (start="smc"): no coordinate scan, m and C the draws' shrunk moments, Z drawn from
    them at once, and the draws in the first window, whose end (at first_window steps) re-estimates from
    them and the steps together; then the windows double from there."""
    rng = np.random.default_rng(4)
    draws = rng.multivariate_normal(M, C, size=500)
    adaptation = ScaleFreeAdaptation(2, GaussianKernel(1.0), n_subsample=100, first_window=50)
    assert adaptation.phase == "scan"
    assert adaptation.start_from_draws(draws, rng)
    mean, cov = shrunk_covariance(draws)
    np.testing.assert_allclose(adaptation.state.whitening.mean, mean)
    np.testing.assert_allclose(adaptation.state.chol @ adaptation.state.chol.T, cov, rtol=1e-10)
    assert adaptation.phase == "kameleon" and adaptation.state.subsample.shape == (100, 2)
    nearest = np.abs(adaptation.state.subsample[:, None, :] - draws[None]).max(axis=2).min(axis=1)
    assert nearest.max() < 1e-10  # Z's points are draws (through the whitening and back)
    assert adaptation.window == 1 and adaptation.windows.end == 50 and len(adaptation.windows.draws) == 500
    for t in range(50):
        changed = feed(adaptation, draws[t], 0.3, rng, component="adaptive_metropolis")
        assert changed == (t == 49)
    assert adaptation.window == 2 and adaptation.windows.end == 150 and adaptation.windows.seeded == 0
    assert adaptation.required_tune_steps() == 7 * 50


def test_tuning_that_starts_from_draws_through_a_map_learns_only_the_walks_scale():
    """With transport_map=True the map is fitted to the draws and kept; no Z and no independence
    component are learned, and the map shape's moves tune lambda (walk) or nothing (independence)."""
    from pymc_kameleon.testing import curved_draws

    rng = np.random.default_rng(5)
    draws = curved_draws(n=1000, dim=3)
    adaptation = ScaleFreeAdaptation(3, GaussianKernel(1.0), independence_weight=0.5)
    assert adaptation.start_from_draws(draws, rng, transport_map=True)
    assert adaptation.state.transport_map is not None and adaptation.state.family is None
    assert not adaptation.independence.enabled and not adaptation.wants_kameleon
    before = adaptation.state.am_scale.value
    feed(adaptation, draws[0], 0.0, rng, component="map_independence")
    assert adaptation.state.am_scale.value == before
    feed(adaptation, draws[1], 0.0, rng, component="map_walk")
    assert adaptation.state.am_scale.value < before


def test_tuning_from_singular_draws_starts_with_the_scan_as_usual():
    rng = np.random.default_rng(6)
    adaptation = ScaleFreeAdaptation(2, GaussianKernel(1.0))
    flat = np.column_stack([np.arange(10.0), np.zeros(10)])  # no spread in the second coordinate
    assert not adaptation.start_from_draws(flat, rng)
    assert adaptation.phase == "scan" and adaptation.window == 0 and len(adaptation.windows.draws) == 0
    feed(adaptation, np.zeros(2), 0.5, rng, component="scan", start=np.zeros(2), proposal=np.zeros(2))
    with pytest.raises(RuntimeError, match="before the first tuning step"):
        adaptation.start_from_draws(rng.normal(size=(50, 2)), rng)
