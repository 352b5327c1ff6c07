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
current state has been evaluated and the GP interpolates (Assumption 1); our original design
wrote :math:`\ell(x)`. The two agree whenever the current state is a training point. They differ
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

from pymc_kameleon.core.mh import mh_log_ratio

__all__ = [
    "CURRENT_VALUES",
    "DALogRatios",
    "DAPoint",
    "delayed_acceptance_log_ratios",
    "log_alpha1",
    "stage1_log_ratio",
    "stage2_log_ratio",
    "surrogate_point",
]


CURRENT_VALUES = ("exact", "surrogate")


def _check_current_value(current_value):
    if current_value not in CURRENT_VALUES:
        raise ValueError(f"current_value must be one of {CURRENT_VALUES}, got {current_value!r}.")


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
