r"""Acceptance ratios of GP-surrogate delayed acceptance (two-stage MH and MALA).

Notation: :math:`x` is the current state, :math:`y \sim Q(\cdot \mid x)` the proposal,
:math:`\ell = \mathrm{LL}` the exact log-likelihood, :math:`p` the prior,
:math:`\pi \propto e^{\ell} p` the posterior, and :math:`\mu, \sigma^2` the GP predictive mean
and variance of :math:`\ell` (Benavoli, Wyse & White).

Stage 1 (paper eq. 4): marginalising the GP, :math:`E[e^{\tilde\ell(y)}] = e^{\mu(y) + \sigma^2(y)/2}`
(log-normal mean), and

.. math::
    \alpha_1(x, y) = 1 \wedge \frac{e^{\mu(y) + \sigma^2(y)/2}\, p(y)\, Q(x \mid y)}
                                  {e^{c(x)}\, p(x)\, Q(y \mid x)}.

What is :math:`c(x)`, the value used at the *current* state? The paper writes
:math:`\mu(x \mid \mathcal I_t)` and notes that it equals the exact :math:`\ell(x)` because every
current state has been evaluated and the GP interpolates (Assumption 1); DESIGN.md writes
:math:`\ell(x)`. The two agree whenever the current state is a training point. They differ
in the *reverse* ratio :math:`\alpha_1(y, x)` needed by stage 2, because :math:`y` is not a
training point of the surrogate used in this step. Two readings are valid:

``current_value="exact"`` (default)
    :math:`c(x) = \ell(x)`: the exact log-likelihood of whichever point is "current" in the
    ratio. For the reverse ratio that is :math:`\ell(y)`, known once stage 1 has passed.
``current_value="surrogate"``
    :math:`c(x) = \mu(x) + \sigma^2(x)/2`: stage 1 is then the MH ratio for the surrogate target
    :math:`\tilde\pi = e^{\mu + \sigma^2/2} p`, as in the paper's proof of Proposition 2.2, and
    stage 2 reduces to the classical Christen-Fox form
    :math:`\alpha_2 = 1 \wedge \frac{\pi(y)/\tilde\pi(y)}{\pi(x)/\tilde\pi(x)}`.

Stage 2 (paper eq. 6, Christen & Fox 2005): with :math:`\alpha_1` *any* function of
:math:`(x, y)` that is fixed during the step,

.. math::
    \alpha_2(x, y) = 1 \wedge
        \frac{\pi(y)\, Q(x \mid y)\, \alpha_1(y, x)}{\pi(x)\, Q(y \mid x)\, \alpha_1(x, y)}

makes :math:`\pi(x) Q(y|x) \alpha_1(x,y) \alpha_2(x,y) = \min\{\pi(x)Q(y|x)\alpha_1(x,y),\,
\pi(y)Q(x|y)\alpha_1(y,x)\}` symmetric in :math:`(x, y)`, i.e. the two-stage kernel is
reversible with respect to the exact :math:`\pi` however bad the surrogate. Both readings
above are therefore exact. When :math:`x` is a training point (:math:`\mu(x) = \ell(x)`,
:math:`\sigma^2(x) = 0`), write :math:`a` for the exact log MH ratio and :math:`b` for the
stage-1 log ratio. The overall acceptance probability is :math:`\min(1, e^a, e^b)` for
``"exact"`` and :math:`\min(1, e^b)\min(1, e^{a-b})`, never larger, for ``"surrogate"``. So
``"exact"`` dominates in the Peskun order: it does not pay back the exploration bonus
:math:`\sigma^2(y)/2` at stage 2 when the exact move would be accepted anyway.

The one rule the caller must keep is that the *same* surrogate (the GP conditioned on
:math:`\mathcal I_t`, before the new exact evaluation is added) gives both
:math:`\alpha_1(x, y)` and :math:`\alpha_1(y, x)`. Adding :math:`y` to the GP before stage 2
and recomputing the ratios with the updated GP is wrong: with ``"exact"`` it makes
:math:`\alpha_2 \equiv 1`, and the chain then targets the surrogate. The helpers
:func:`log_alpha1` and :func:`delayed_acceptance_log_ratios` (:func:`mala_log_alpha1`,
:func:`mala_delayed_acceptance_log_ratios` for MALA) compute both directions with one
function from values captured once per step.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.linalg import solve_triangular

from pymc_kameleon.core.linalg import gaussian_logpdf_chol, jittered_cholesky
from pymc_kameleon.core.mh import mh_log_ratio
from pymc_kameleon.core.proposals import langevin_log_density

__all__ = [
    "CURRENT_VALUES",
    "DALogRatios",
    "DAPoint",
    "MALAPoint",
    "delayed_acceptance_log_ratios",
    "langevin_log_density",
    "log_alpha1",
    "log_expected_langevin_term",
    "mala_delayed_acceptance_log_ratios",
    "mala_log_alpha1",
    "mala_point",
    "mala_stage1_log_ratio",
    "stage1_log_ratio",
    "stage2_log_ratio",
    "surrogate_point",
]

CURRENT_VALUES = ("exact", "surrogate")


def _check_current_value(current_value):
    if current_value not in CURRENT_VALUES:
        raise ValueError(f"current_value must be one of {CURRENT_VALUES}, got {current_value!r}.")


# ---------------------------------------------------------------------------------- MH


def stage1_log_ratio(
    mu_prop, var_prop, ll_current, log_prior_prop, log_prior_current, log_q_reverse=0.0, log_q_forward=0.0
) -> float:
    r"""Stage-1 log ratio of GP delayed-acceptance MH (paper eq. 4), before the ``min(0, .)``.

    .. math::
        \log r_1 = \mu(y) + \tfrac12\sigma^2(y) - c(x) + \log p(y) - \log p(x)
                   + \log Q(x \mid y) - \log Q(y \mid x).

    Parameters
    ----------
    mu_prop, var_prop : float
        GP predictive mean and variance of the log-likelihood at the proposal :math:`y`.
    ll_current : float
        The value :math:`c(x)` used at the current state: its exact log-likelihood (default
        reading), or :math:`\mu(x) + \sigma^2(x)/2` (see the module docstring).
    log_prior_prop, log_prior_current : float
        :math:`\log p(y)`, :math:`\log p(x)`.
    log_q_reverse, log_q_forward : float
        :math:`\log Q(x \mid y)` and :math:`\log Q(y \mid x)` (0 for a symmetric proposal).

    Returns
    -------
    float
        ``-inf`` if the proposal's prior or the surrogate value is NaN or ``-inf``.
    """
    var_prop = float(var_prop)
    if var_prop < 0:
        raise ValueError(f"stage1_log_ratio: the predictive variance must be >= 0, got {var_prop}.")
    # The surrogate "log target" at y is log E[e^LL~(y)] + log p(y) (log-normal mean).
    return mh_log_ratio(
        float(mu_prop) + 0.5 * var_prop + float(log_prior_prop),
        float(ll_current) + float(log_prior_current),
        log_q_reverse,
        log_q_forward,
    )


def stage2_log_ratio(
    ll_prop,
    ll_current,
    log_prior_prop,
    log_prior_current,
    log_q_reverse,
    log_q_forward,
    log_alpha1_forward,
    log_alpha1_reverse,
) -> float:
    r"""Stage-2 log ratio (paper eq. 6; Christen & Fox 2005), before the ``min(0, .)``.

    .. math::
        \log r_2 = \ell(y) + \log p(y) + \log Q(x \mid y) + \log\alpha_1(y, x)
                 - \ell(x) - \log p(x) - \log Q(y \mid x) - \log\alpha_1(x, y).

    This is an MH ratio whose proposal is the stage-1-filtered kernel
    :math:`Q(y \mid x)\alpha_1(x, y)`; that is why it is reversible for the exact posterior.

    Parameters
    ----------
    ll_prop, ll_current : float
        Exact log-likelihoods :math:`\ell(y)`, :math:`\ell(x)`.
    log_prior_prop, log_prior_current : float
    log_q_reverse, log_q_forward : float
        :math:`\log Q(x \mid y)`, :math:`\log Q(y \mid x)` of the actual proposal kernel.
    log_alpha1_forward, log_alpha1_reverse : float
        :math:`\log\alpha_1(x, y) \le 0` (the probability used at stage 1) and
        :math:`\log\alpha_1(y, x)`, the same function with the arguments swapped.

    Returns
    -------
    float
        ``-inf`` if the exact proposal log density is NaN or ``-inf``.
    """
    if float(log_alpha1_forward) == -math.inf:
        raise ValueError("stage2_log_ratio: log_alpha1_forward is -inf, so stage 1 cannot have accepted.")
    return mh_log_ratio(
        float(ll_prop) + float(log_prior_prop),
        float(ll_current) + float(log_prior_current),
        float(log_q_reverse) + float(log_alpha1_reverse),
        float(log_q_forward) + float(log_alpha1_forward),
    )


class DAPoint(NamedTuple):
    """What is known at one point within one step of GP delayed-acceptance MH.

    Attributes
    ----------
    log_prior : float
        :math:`\\log p(\\theta)`.
    mu, var : float
        GP predictive mean and variance of the log-likelihood, from the surrogate of this step.
    ll : float
        Exact log-likelihood; NaN until evaluated (a proposal before stage 2).
    """

    log_prior: float
    mu: float
    var: float
    ll: float = math.nan


def surrogate_point(gp, theta, log_prior, ll=math.nan) -> DAPoint:
    """Capture the GP prediction at ``theta`` in a :class:`DAPoint` (once per step and point)."""
    mu, var = gp.predict(np.asarray(theta, dtype=float))
    return DAPoint(float(log_prior), float(mu), float(var), float(ll))


def _value_at_current(point, current_value):
    if current_value == "exact":
        if math.isnan(point.ll):
            raise ValueError(
                'current_value="exact" needs the exact log-likelihood of the point the move starts '
                "from; set DAPoint.ll (for the reverse ratio, after the stage-2 evaluation)."
            )
        return point.ll
    return point.mu + 0.5 * point.var


def log_alpha1(frm: DAPoint, to: DAPoint, log_q_there, log_q_back, current_value: str = "exact") -> float:
    r"""Stage-1 log acceptance probability :math:`\log\alpha_1(\text{frm}, \text{to}) \le 0`.

    The single function used for the forward move at stage 1 and for both directions in
    stage 2, so that they cannot disagree.

    Parameters
    ----------
    frm, to : DAPoint
        The point the move starts from and the point it goes to.
    log_q_there : float
        :math:`\log Q(\text{to} \mid \text{frm})`.
    log_q_back : float
        :math:`\log Q(\text{frm} \mid \text{to})`.
    current_value : {"exact", "surrogate"}
        What stands for the log-likelihood at ``frm`` (see the module docstring).
    """
    _check_current_value(current_value)
    c = _value_at_current(frm, current_value)
    return min(0.0, stage1_log_ratio(to.mu, to.var, c, to.log_prior, frm.log_prior, log_q_back, log_q_there))


class DALogRatios(NamedTuple):
    """Both stage-1 log probabilities and the stage-2 log ratio of one step."""

    log_alpha1_forward: float
    log_alpha1_reverse: float
    log_ratio_stage2: float


def delayed_acceptance_log_ratios(
    current: DAPoint, proposal: DAPoint, log_q_forward, log_q_reverse, current_value: str = "exact"
) -> DALogRatios:
    r"""Stage-2 log ratio with both :math:`\alpha_1` computed by :func:`log_alpha1`.

    Parameters
    ----------
    current, proposal : DAPoint
        Both with their exact ``ll`` (the proposal's just evaluated) and the surrogate values
        captured *before* the proposal was added to the GP.
    log_q_forward, log_q_reverse : float
        :math:`\log Q(y \mid x)` and :math:`\log Q(x \mid y)`.
    current_value : {"exact", "surrogate"}

    Returns
    -------
    DALogRatios
        Accept at stage 2 with ``metropolis_accept(result.log_ratio_stage2, rng)``.
        ``log_alpha1_forward`` equals the stage-1 value, which a caller may assert.
    """
    fwd = log_alpha1(current, proposal, log_q_forward, log_q_reverse, current_value)
    rev = log_alpha1(proposal, current, log_q_reverse, log_q_forward, current_value)
    r2 = stage2_log_ratio(
        proposal.ll, current.ll, proposal.log_prior, current.log_prior, log_q_reverse, log_q_forward, fwd, rev
    )
    return DALogRatios(fwd, rev, r2)


# ---------------------------------------------------------------------------------- MALA


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
    u = solve_triangular(Lm, KW.T @ r, lower=True, check_finite=False)
    quad = float(r @ (K @ r)) - float(u @ u)
    return base - float(np.log(np.diagonal(Lm)).sum()) + float(b @ m) - 0.5 * float(Wm @ Wm) + 0.5 * quad


def mala_stage1_log_ratio(
    log_expected_reverse, ll_current, log_prior_prop, log_prior_current, log_q_forward
) -> float:
    r"""Stage-1 log ratio of GP delayed-acceptance MALA (the paper's eq. 9, marginalised).

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
        mean gradient ``joint_mean[1:]`` (DESIGN.md). Whatever is used must be one fixed
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
    _check_current_value(current_value)
    back = _mala_flux(to, frm, proposal_chol)
    if current_value == "exact":
        if math.isnan(frm.ll):
            raise ValueError('current_value="exact" needs MALAPoint.ll of the point the move starts from.')
        there = frm.ll + frm.log_prior + langevin_log_density(to.theta, frm.theta, frm.drift(), proposal_chol)
    else:
        there = _mala_flux(frm, to, proposal_chol)
    return min(0.0, mh_log_ratio(back, there))


def mala_delayed_acceptance_log_ratios(
    current: MALAPoint, proposal: MALAPoint, proposal_chol, current_value: str = "exact"
) -> DALogRatios:
    r"""GP-MALA stage-2 log ratio, with both :math:`\alpha_1` from :func:`mala_log_alpha1`.

    The proposal densities in stage 2 are those of the kernel actually used, with the drift
    :meth:`MALAPoint.drift` at each end.
    """
    fwd = mala_log_alpha1(current, proposal, proposal_chol, current_value)
    rev = mala_log_alpha1(proposal, current, proposal_chol, current_value)
    lq_fwd = langevin_log_density(proposal.theta, current.theta, current.drift(), proposal_chol)
    lq_rev = langevin_log_density(current.theta, proposal.theta, proposal.drift(), proposal_chol)
    r2 = stage2_log_ratio(
        proposal.ll, current.ll, proposal.log_prior, current.log_prior, lq_rev, lq_fwd, fwd, rev
    )
    return DALogRatios(fwd, rev, r2)
