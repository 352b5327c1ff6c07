r"""GP-surrogate delayed-acceptance MALA (Benavoli, Wyse and White, section 3): its ratios and its move.

The proposal is a Langevin move whose drift is the GP mean gradient; stage 1 marginalises the
GP's joint law of the log-likelihood and its gradient at the proposal
(:func:`log_expected_langevin_term`, the paper's Proposition 3.1 in a corrected closed form), and
stage 2 is the delayed-acceptance correction of :mod:`pymc_kameleon.core.delayed_acceptance.ratios`,
whose notation this module shares. :class:`DelayedAcceptanceMALA` makes the move
(:mod:`pymc_kameleon.core.delayed_acceptance.kernel`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from pymc_kameleon.core.delayed_acceptance.kernel import DelayedAcceptanceKernel, DelayedAcceptanceResult
from pymc_kameleon.core.delayed_acceptance.ratios import DALogRatios, _check_current_value, stage2_log_ratio
from pymc_kameleon.core.linalg import (
    gaussian_logpdf_chol,
    jittered_cholesky,
    same_array,
    solve_lower_as_scipy,
)
from pymc_kameleon.core.mh import accept_probability, metropolis_accept, mh_log_ratio
from pymc_kameleon.core.proposals import LangevinProposal, langevin_log_density

# Margin of log_expected_langevin_bound over rounding, relative to its terms' size.
_BOUND_MARGIN = 1e-6

__all__ = [
    "DelayedAcceptanceMALA",
    "MALAPoint",
    "log_expected_langevin_bound",
    "log_expected_langevin_term",
    "mala_delayed_acceptance_log_ratios",
    "mala_log_alpha1",
    "mala_log_alpha1_bound",
    "mala_point",
]


def log_expected_langevin_term(
    theta_star, theta_prime, joint_mean, joint_cov, grad_log_prior_star, proposal_chol
) -> float:
    r"""Closed form of the paper's Proposition 3.1: the GP expectation behind GP-MALA's stage 1.

    For :math:`(f, g) = (\tilde\ell(\theta^*), \nabla\tilde\ell(\theta^*)) \sim \mathcal N(m, K)`
    (the joint GP predictive at :math:`\theta^*`, :math:`m = (m_f, m_g)`), returns

    .. math::
        \log E\Big[e^{f}\, \mathcal N\big(\theta';\,
            \theta^* + \tfrac12\Sigma(g + \nabla\log p(\theta^*)),\, \Sigma\big)\Big].

    **Derivation.** Put :math:`c = \theta' - \theta^* - \tfrac12\Sigma\nabla\log p(\theta^*)`. Expanding
    the square,

    .. math::
        \mathcal N(\theta'; \theta^* + \tfrac12\Sigma(g + \nabla\log p), \Sigma)
        = \mathcal N(\theta'; \theta^* + \tfrac12\Sigma\nabla\log p, \Sigma)\,
          \exp\big(\tfrac12 c^\top g - \tfrac18 g^\top \Sigma g\big),

    so with :math:`z = (f, g)`, :math:`b = (1, \tfrac12 c)` and
    :math:`Q = \operatorname{diag}(0, \tfrac14\Sigma) = W W^\top`, :math:`W = (0;\, \tfrac12 L_\Sigma)`,
    the expectation is that of :math:`\exp(b^\top z - \tfrac12 z^\top Q z)` under
    :math:`\mathcal N(m, K)`. Completing the square in
    :math:`-\tfrac12 (z - m)^\top K^{-1} (z - m) + b^\top z - \tfrac12 z^\top Q z` gives the Gaussian integral

    .. math::
        E = |I + W^\top K W|^{-1/2}
            \exp\Big(b^\top m - \tfrac12 m^\top Q m + \tfrac12 r^\top (K^{-1} + Q)^{-1} r\Big),
        \qquad r = b - Q m,

    with :math:`(K^{-1} + Q)^{-1} = K - K W (I + W^\top K W)^{-1} W^\top K` (Woodbury), which needs
    no :math:`K^{-1}` and so holds for singular :math:`K` too (e.g. at training points). It is finite
    for every PSD :math:`K`, because :math:`Q \succeq 0`. Checks: for :math:`K = 0` it is the
    deterministic value
    :math:`e^{m_f}\mathcal N(\theta'; \theta^* + \tfrac12\Sigma(m_g + \nabla\log p), \Sigma)`.
    Without gradient uncertainty (:math:`K_{gg} = K_{fg} = 0`) it is the log-normal factor
    :math:`e^{m_f + K_{ff}/2}` of stage 1 for MH.

    The formula printed in the paper's Proposition 3.1 has no determinant factor, and at
    :math:`K = 0` it does not reduce to the deterministic value, so it is not used here. This
    expression is checked against Monte Carlo over GP draws in the tests.

    Parameters
    ----------
    theta_star : array of shape (d,)
        Where the GP is uncertain (the point the reverse Langevin move starts from).
    theta_prime : array of shape (d,)
        Where the reverse move lands.
    joint_mean : array of shape (d + 1,)
    joint_cov : array of shape (d + 1, d + 1)
        Joint predictive of :math:`(f, \nabla f)` at ``theta_star``
        (:meth:`GPSurrogate.predict_joint`).
    grad_log_prior_star : array of shape (d,)
    proposal_chol : array of shape (d, d)
        Lower Cholesky factor of the proposal covariance :math:`\Sigma`.

    Returns
    -------
    float
    """
    base, half_log_det, bm, half_mqm, quad = _langevin_expectation_terms(
        theta_star, theta_prime, joint_mean, joint_cov, grad_log_prior_star, proposal_chol
    )
    return base - half_log_det + bm - half_mqm + 0.5 * quad


def log_expected_langevin_bound(
    theta_star, theta_prime, joint_mean, joint_cov_bound, grad_log_prior_star, proposal_chol
) -> float:
    r"""An upper bound of :func:`log_expected_langevin_term` for every joint covariance :math:`K` below
    ``joint_cov_bound`` :math:`K_S` in the Loewner order (the GP's covariance given a subset of its
    observations, :meth:`GPSurrogate.predict_joint_with_bound`); the mean is the same.

    Of the closed form's terms, :math:`-\tfrac12\log|I + W^\top K W| \le 0` is dropped, and
    :math:`r^\top (K^{-1} + Q)^{-1} r` only grows with :math:`K` (:math:`K \preceq K_S` gives
    :math:`K^{-1} + Q \succeq K_S^{-1} + Q`), so it is taken at :math:`K_S`. A margin of
    :math:`10^{-6}(1 + |\cdot|)` of the terms covers rounding. Same parameters as
    :func:`log_expected_langevin_term`.
    """
    base, _, bm, half_mqm, quad = _langevin_expectation_terms(
        theta_star, theta_prime, joint_mean, joint_cov_bound, grad_log_prior_star, proposal_chol
    )
    margin = _BOUND_MARGIN * (1.0 + abs(base) + abs(bm) + half_mqm + abs(quad))
    return base + bm - half_mqm + 0.5 * quad + margin


def _langevin_expectation_terms(theta_star, theta_prime, joint_mean, joint_cov, grad_log_prior_star,
                                proposal_chol):
    r"""The terms of :func:`log_expected_langevin_term`: the Langevin density without the GP's
    gradient, :math:`\tfrac12 \log|I + W^\top K W|`, :math:`b^\top m`, :math:`\tfrac12 m^\top Q m` and
    :math:`r^\top (K^{-1} + Q)^{-1} r`."""
    L = np.asarray(proposal_chol, dtype=float)
    d = L.shape[0]
    theta_star = np.asarray(theta_star, dtype=float)
    m = np.asarray(joint_mean, dtype=float)
    K = np.asarray(joint_cov, dtype=float)
    if m.shape != (d + 1,) or K.shape != (d + 1, d + 1):
        raise ValueError(
            f"log_expected_langevin_term: joint_mean/joint_cov must have shapes ({d + 1},) and "
            f"({d + 1}, {d + 1}), got {m.shape} and {K.shape}."
        )
    prior_mean = theta_star + 0.5 * (L @ (L.T @ np.asarray(grad_log_prior_star, dtype=float)))
    base = gaussian_logpdf_chol(np.asarray(theta_prime, dtype=float), prior_mean, L)
    c = np.asarray(theta_prime, dtype=float) - prior_mean
    b = np.concatenate([[1.0], 0.5 * c])
    W = np.zeros((d + 1, d))
    W[1:] = 0.5 * L  # Q = W W^T = diag(0, Sigma / 4)
    KW = K @ W
    M = np.eye(d) + W.T @ KW
    Lm, _ = jittered_cholesky(0.5 * (M + M.T), what="Langevin expectation")
    Wm = W.T @ m
    r = b - W @ Wm
    # (K^-1 + Q)^-1 r by Woodbury, without inverting K.
    u = solve_lower_as_scipy(Lm, KW.T @ r)
    quad = float(r @ (K @ r)) - float(u @ u)
    return base, float(np.log(np.diagonal(Lm)).sum()), float(b @ m), 0.5 * float(Wm @ Wm), quad


class MALAPoint(NamedTuple):
    """What is known at one point within one step of GP delayed-acceptance MALA.

    Attributes
    ----------
    theta : array of shape (d,)
    log_prior : float
    grad_log_prior : array of shape (d,)
    joint_mean, joint_cov : arrays of shapes (d + 1,), (d + 1, d + 1)
        GP joint predictive of (log-likelihood, gradient) at ``theta``.
    ll : float
        Exact log-likelihood; NaN until evaluated.
    drift_gradient : array of shape (d,), optional
        The log-likelihood gradient used in the proposal drift at ``theta``. Default: the GP
        mean gradient ``joint_mean[1:]``. Whatever is used must be one fixed
        function of ``theta`` for both points of a step.
    """

    theta: np.ndarray
    log_prior: float
    grad_log_prior: np.ndarray
    joint_mean: np.ndarray
    joint_cov: np.ndarray
    ll: float = math.nan
    drift_gradient: np.ndarray | None = None

    def drift(self):
        """Gradient of the log target used in the Langevin drift at ``theta``."""
        g = self.joint_mean[1:] if self.drift_gradient is None else self.drift_gradient
        return np.asarray(g, dtype=float) + np.asarray(self.grad_log_prior, dtype=float)


def mala_point(gp, theta, log_prior, grad_log_prior, ll=math.nan, drift_gradient=None) -> MALAPoint:
    """Capture the GP joint prediction at ``theta`` in a :class:`MALAPoint` (once per step and point)."""
    theta = np.asarray(theta, dtype=float)
    mean, cov = gp.predict_joint(theta)
    return MALAPoint(
        theta, float(log_prior), np.asarray(grad_log_prior, dtype=float), mean, cov, float(ll), drift_gradient
    )


def _mala_flux(frm: MALAPoint, to: MALAPoint, proposal_chol) -> float:
    """Surrogate log flux: log p(frm) + log E[e^f(frm) Q_f(to | frm)] over the GP at ``frm``."""
    return frm.log_prior + log_expected_langevin_term(
        frm.theta, to.theta, frm.joint_mean, frm.joint_cov, frm.grad_log_prior, proposal_chol
    )


def mala_log_alpha1(frm: MALAPoint, to: MALAPoint, proposal_chol, current_value: str = "exact") -> float:
    r"""Stage-1 log acceptance probability of GP-MALA, :math:`\log\alpha_1(\text{frm}, \text{to}) \le 0`.

    Numerator: the GP expectation of :math:`e^{\tilde\ell(\text{to})} p(\text{to})\,
    Q_{\tilde\ell}(\text{frm} \mid \text{to})` (Proposition 3.1). Denominator: with
    ``"exact"``, :math:`e^{\ell(\text{frm})} p(\text{frm})\, Q(\text{to} \mid \text{frm})` with the
    actual drift; with ``"surrogate"``, the same GP expectation taken at ``frm``.
    """
    back = _mala_flux(to, frm, proposal_chol)
    return min(0.0, mh_log_ratio(back, _mala_there(frm, to, proposal_chol, current_value)))


def _mala_there(frm: MALAPoint, to: MALAPoint, proposal_chol, current_value: str) -> float:
    """Stage 1's denominator: the exact or the surrogate log flux from ``frm`` to ``to``."""
    _check_current_value(current_value)
    if current_value == "exact":
        if math.isnan(frm.ll):
            raise ValueError('current_value="exact" needs MALAPoint.ll of the point the move starts from.')
        return frm.ll + frm.log_prior + langevin_log_density(to.theta, frm.theta, frm.drift(), proposal_chol)
    return _mala_flux(frm, to, proposal_chol)


def mala_log_alpha1_bound(frm: MALAPoint, to_bound: MALAPoint, proposal_chol,
                          current_value: str = "exact") -> float:
    r"""An upper bound of :func:`mala_log_alpha1` ``(frm, to)``, where ``to_bound`` is ``to`` with an
    upper bound of its joint covariance (:meth:`GPSurrogate.predict_joint_with_bound`): the numerator
    from :func:`log_expected_langevin_bound`, the denominator as there."""
    back = to_bound.log_prior + log_expected_langevin_bound(
        to_bound.theta, frm.theta, to_bound.joint_mean, to_bound.joint_cov, to_bound.grad_log_prior,
        proposal_chol,
    )
    return min(0.0, mh_log_ratio(back, _mala_there(frm, to_bound, proposal_chol, current_value)))


def mala_delayed_acceptance_log_ratios(
    current: MALAPoint, proposal: MALAPoint, proposal_chol, current_value: str = "exact",
    log_alpha1_forward: float | None = None,
) -> DALogRatios:
    r"""GP-MALA stage-2 log ratio, with both :math:`\alpha_1` from :func:`mala_log_alpha1`.

    The proposal densities in stage 2 are those of the kernel actually used, with the drift
    :meth:`MALAPoint.drift` at each end. ``log_alpha1_forward``: stage 1's
    :func:`mala_log_alpha1` ``(current, proposal)`` if it is known already (the same number).
    """
    fwd = log_alpha1_forward
    if fwd is None:
        fwd = mala_log_alpha1(current, proposal, proposal_chol, current_value)
    rev = mala_log_alpha1(proposal, current, proposal_chol, current_value)
    lq_fwd = langevin_log_density(proposal.theta, current.theta, current.drift(), proposal_chol)
    lq_rev = langevin_log_density(current.theta, proposal.theta, proposal.drift(), proposal_chol)
    r2 = stage2_log_ratio(
        proposal.ll, current.ll, proposal.log_prior, current.log_prior, lq_rev, lq_fwd, fwd, rev
    )
    return DALogRatios(fwd, rev, r2)


def _finite_prediction(point) -> bool:
    """Whether a MALAPoint's GP joint prediction is finite (it can overflow far from the data)."""
    return bool(np.all(np.isfinite(point.joint_mean)) and np.all(np.isfinite(point.joint_cov)))


class _ExactDrift:
    """The exact drift gradient: at the current state the one already known, elsewhere from an
    exact evaluation of the target there (``evaluation``; the warm-up's MH ratio needs it anyway)."""

    def __init__(self, density, current, current_eval, gradient_of):
        self.density, self.current, self.current_eval = density, current, current_eval
        self.gradient_of = gradient_of
        self.evaluation = None

    def __call__(self, theta):
        if same_array(theta, self.current):
            return self.gradient_of(self.current_eval)
        self.evaluation = self.density.evaluate(theta, self.density.prior(theta))
        if not math.isfinite(self.evaluation.logp):
            return np.full(np.shape(theta), math.nan)
        return self.gradient_of(self.evaluation)


class _SurrogateDrift:
    """The GP's drift gradient (mean gradient plus the exact prior gradient), keeping the joint
    predictions it made: at the current state (``current_point``, cached by the schedule) and at
    the proposal (``proposed_point``; None where the prior or its gradient is not finite).

    With ``bounded``, the proposal's joint covariance is first only an upper bound
    (:meth:`GPSurrogate.predict_joint_with_bound`; the drift needs the mean alone) and
    :meth:`exact_proposed_point` solves for the covariance itself."""

    def __init__(self, gp, density, current, current_point, bounded: bool = False):
        self.gp, self.density, self.current, self.current_point = gp, density, current, current_point
        self.bounded = bounded
        self.proposed_point = None
        self.prior = None
        self._parts = None  # what joint_cov_given needs, while proposed_point holds a bound

    def __call__(self, theta):
        if same_array(theta, self.current):
            return self.current_point.drift()
        self.prior = lp, glp = self.density.prior(theta)
        if not (math.isfinite(lp) and np.all(np.isfinite(glp))):
            return np.full(np.shape(theta), math.nan)
        theta = np.asarray(theta, dtype=float)
        if self.bounded:
            mean, cov_bound, self._parts = self.gp.predict_joint_with_bound(theta)
            self.proposed_point = MALAPoint(theta, float(lp), np.asarray(glp, dtype=float), mean, cov_bound)
        else:
            self.proposed_point = mala_point(self.gp, theta, lp, glp)
        if not np.all(np.isfinite(self.proposed_point.joint_mean)):
            return np.full(np.shape(theta), math.nan)
        if self._parts is None and not _finite_prediction(self.proposed_point):
            return np.full(np.shape(theta), math.nan)
        return self.proposed_point.drift()

    @property
    def holds_bound(self) -> bool:
        """Whether ``proposed_point``'s joint covariance is the bound (not yet solved for)."""
        return self._parts is not None

    def exact_proposed_point(self) -> MALAPoint:
        """``proposed_point`` with its joint covariance solved for (the bound replaced)."""
        if self._parts is not None:
            cov = self.gp.joint_cov_given(self._parts)
            self.proposed_point, self._parts = self.proposed_point._replace(joint_cov=cov), None
        return self.proposed_point


class DelayedAcceptanceMALA(DelayedAcceptanceKernel):
    r"""GP delayed-acceptance MALA: a Langevin move with covariance :math:`\lambda^2 C` (the base
    adaptation's AM scale and learned covariance), drifted by the GP's mean gradient.

    The warm-up is the base proposal's coordinate scan, then plain MALA with the exact gradient
    (the prior's alone without gradient observations). Stage 1 is :func:`mala_log_alpha1`, stage 2
    :func:`mala_delayed_acceptance_log_ratios`; a GP prediction that overflowed (far from every
    training point) cannot screen: :math:`\alpha_1 = 0` if either end's is not finite, a rule
    symmetric in :math:`(x, y)`, so the chain stays exact.

    After tuning, as :class:`~pymc_kameleon.core.delayed_acceptance.kernel.DelayedAcceptanceMH` does
    with the variance, stage 1 draws its uniform :math:`u` first and compares it with
    :math:`\bar\alpha_1 \ge \alpha_1` (:func:`mala_log_alpha1_bound`, from the GP's joint covariance
    given its first 64 rows or 16 points, an :math:`O(m^2 d)` solve): :math:`u \ge \bar\alpha_1`
    rejects without the :math:`O(t^2 d)` solve for the covariance, made only otherwise. The decisions,
    and so the draws, are those of the plain computation (decision record 0055).

    Parameters
    ----------
    gradient_observations : bool
        Whether the GP carries the exact log-likelihood gradients (then the exact drift is the whole
        log density's gradient); otherwise the exact drift is the prior's gradient.
    *args, **kwargs
        As for :class:`~pymc_kameleon.core.delayed_acceptance.kernel.DelayedAcceptanceKernel`.
    """

    def __init__(self, *args, gradient_observations: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.gradient_observations = bool(gradient_observations)

    def langevin_chol(self) -> np.ndarray:
        r"""Factor :math:`\lambda L` of the Langevin covariance :math:`\lambda^2 C`, :math:`C = L L^\top`."""
        state = self.adaptation.state
        return state.am_scale.value * state.chol

    def _exact_gradient(self, evaluation):
        return evaluation.grad_logp if self.gradient_observations else evaluation.grad_log_prior

    def _exact_step(self, current, current_eval, density, rng) -> DelayedAcceptanceResult:
        if self.adaptation.phase == "scan":
            return super()._exact_step(current, current_eval, density, rng)
        drift = _ExactDrift(density, current, current_eval, self._exact_gradient)
        move = LangevinProposal(self.langevin_chol(), drift).propose(current, rng)
        proposed, proposed_eval = move.x, drift.evaluation
        log_ratio = -math.inf
        if math.isfinite(proposed_eval.logp):
            lq_f, lq_r = move.log_q_forward, move.log_q_reverse
            log_ratio = mh_log_ratio(proposed_eval.logp, current_eval.logp, lq_r, lq_f)
        accepted, prob = metropolis_accept(log_ratio, rng)
        return DelayedAcceptanceResult(
            proposed if accepted else current, accepted, prob, move.component, proposed,
            stage2=prob, adapt_prob=prob, evaluation=proposed_eval,
            gp_learns=math.isfinite(proposed_eval.log_prior),
        )

    def _screened_step(self, current, current_eval, density, rng) -> DelayedAcceptanceResult:
        L = self.langevin_chol()
        ll_current, lp_current = current_eval.loglik, current_eval.log_prior
        current_point = self.schedule.cached(
            current, current_eval,
            lambda: mala_point(self.gp, current, lp_current, current_eval.grad_log_prior, ll_current),
        )
        drift = _SurrogateDrift(self.gp, density, current, current_point, bounded=self.bounded_stage1)
        move = LangevinProposal(L, drift).propose(current, rng)
        proposed, component = move.x, move.component
        gp_sd, la1, u = math.nan, -math.inf, None
        bounded = drift.holds_bound and _finite_prediction(current_point)
        if bounded and _finite_prediction(drift.proposed_point):
            # After tuning: stage 1's uniform, drawn where metropolis_accept would draw it, against an
            # upper bound of alpha_1 first; the covariance's O(t^2 d) solve only if it cannot reject.
            a1_bound = accept_probability(
                mala_log_alpha1_bound(current_point, drift.proposed_point, L, self.current_value)
            )
            u = rng.random()
            if not u < a1_bound:
                return DelayedAcceptanceResult(
                    current, False, 0.0, component, proposed, stage1=a1_bound, screened=True, adapt_prob=0.0
                )
        proposed_point = drift.exact_proposed_point()
        if proposed_point is not None:
            gp_sd = math.sqrt(max(float(proposed_point.joint_cov[0, 0]), 0.0))
            if _finite_prediction(current_point) and _finite_prediction(proposed_point):
                la1 = mala_log_alpha1(current_point, proposed_point, L, self.current_value)
        proposed_eval, a1, rejected = self._stage1_then_exact(
            current, proposed, la1, drift.prior, density, rng, component, gp_sd, u=u
        )
        if proposed_eval is None:
            return rejected
        ll_proposed = proposed_eval.loglik
        proposed_point = proposed_point._replace(ll=ll_proposed)
        ratios = mala_delayed_acceptance_log_ratios(
            current_point, proposed_point, L, self.current_value, log_alpha1_forward=la1
        )
        accepted, a2 = metropolis_accept(ratios.log_ratio_stage2, rng)
        if accepted:
            self.schedule.remember(proposed, proposed_eval, proposed_point)  # the next step's current state
        # Stage 1 passed with probability a1, so this is unbiased for the acceptance probability of
        # plain MH with this (GP-drift) Langevin proposal.
        lq_f, lq_r = move.log_q_forward, move.log_q_reverse
        log_ratio = mh_log_ratio(ll_proposed + proposed_eval.log_prior, ll_current + lp_current, lq_r, lq_f)
        return DelayedAcceptanceResult(
            proposed if accepted else current, accepted, a2, component, proposed, stage1=a1, stage2=a2,
            gp_sd=gp_sd, screened=True, adapt_prob=accept_probability(log_ratio) / a1,
            evaluation=proposed_eval, gp_learns=True,
        )
