r"""Metropolis-Hastings accept/reject: the one place in the package that decides.

For a proposal :math:`x^* \sim q(\cdot \mid y)` from the current state :math:`y`,

.. math::
    \log \alpha = \log\pi(x^*) - \log\pi(y) + \log q(y \mid x^*) - \log q(x^* \mid y),

and :math:`x^*` is accepted with probability :math:`\min(1, e^{\log\alpha})`.
A proposal whose log target is NaN or :math:`-\infty` is rejected with
probability one; a NaN ratio is treated as :math:`-\infty`. :func:`metropolis_hastings_step` is
one whole step: propose, evaluate, decide.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "MHStep",
    "accept_probability",
    "metropolis_accept",
    "metropolis_accept_batch",
    "metropolis_hastings_step",
    "mh_log_ratio",
    "mh_log_ratio_batch",
]


def mh_log_ratio(logp_proposal, logp_current, log_q_reverse=0.0, log_q_forward=0.0) -> float:
    r"""Metropolis-Hastings log acceptance ratio.

    Parameters
    ----------
    logp_proposal, logp_current : float
        :math:`\log\pi(x^*)` and :math:`\log\pi(y)` (unnormalised).
    log_q_reverse : float
        :math:`\log q(y \mid x^*)`, the density of moving back.
    log_q_forward : float
        :math:`\log q(x^* \mid y)`, the density of the move made.

    Returns
    -------
    float
        :math:`\log\alpha`, or ``-inf`` when the proposal's log density is not finite (NaN,
        :math:`-\infty`, or :math:`+\infty`, which no density takes: a model bug, rejected rather than
        letting a chain run into it and stay), or when any term is NaN.
    """
    logp_proposal = float(logp_proposal)
    if not math.isfinite(logp_proposal):
        return -math.inf
    log_ratio = logp_proposal - float(logp_current) + float(log_q_reverse) - float(log_q_forward)
    if math.isnan(log_ratio):
        return -math.inf
    return log_ratio


def mh_log_ratio_batch(logp_proposal, logp_current, log_q_reverse=0.0, log_q_forward=0.0) -> np.ndarray:
    r""":func:`mh_log_ratio` elementwise, for many independent proposals (SMC populations).

    Returns
    -------
    array of shape (N,)
        :math:`\log\alpha_i`, with ``-inf`` where the proposal's log density is not finite (NaN,
        :math:`\pm\infty`), or where any term is NaN.
    """
    logp_proposal = np.asarray(logp_proposal, dtype=float)
    with np.errstate(invalid="ignore"):
        log_ratio = logp_proposal - np.asarray(logp_current, dtype=float) + log_q_reverse - log_q_forward
    return np.where(np.isnan(log_ratio) | ~np.isfinite(logp_proposal), -np.inf, log_ratio)


def accept_probability(log_ratio) -> float:
    r""":math:`\min(1, e^{\log\alpha})`, with NaN mapped to 0."""
    log_ratio = float(log_ratio)
    if math.isnan(log_ratio):
        return 0.0
    return math.exp(min(0.0, log_ratio))


def metropolis_accept(log_ratio, rng: np.random.Generator, u: float | None = None) -> tuple[bool, float]:
    """Accept with probability :math:`\\min(1, e^{\\log\\alpha})`.

    One uniform is always drawn, so the random stream does not depend on the
    value of the ratio (that keeps runs reproducible and comparable). ``u``: that uniform, if the
    caller drew it already (to compare it with a bound of the ratio first).

    Returns
    -------
    accepted : bool
    accept_prob : float
        :math:`\\min(1, e^{\\log\\alpha})`, the quantity used for adaptation.
    """
    prob = accept_probability(log_ratio)
    if u is None:
        u = rng.random()
    return bool(u < prob), prob


def metropolis_accept_batch(log_ratio, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    r""":func:`metropolis_accept` for many independent proposals at once (SMC populations).

    ``log_ratio`` has shape ``(N,)``; NaN counts as :math:`-\infty`. Exactly ``N`` uniforms are
    drawn whatever the ratios, so the random stream does not depend on them.

    Returns
    -------
    accepted : bool array of shape (N,)
    accept_prob : float array of shape (N,)
        :math:`\min(1, e^{\log\alpha_i})`.
    """
    log_ratio = np.asarray(log_ratio, dtype=float)
    prob = np.exp(np.minimum(np.where(np.isnan(log_ratio), -np.inf, log_ratio), 0.0))
    return rng.random(log_ratio.shape[0]) < prob, prob


class MHStep(NamedTuple):
    """The outcome of :func:`metropolis_hastings_step`.

    Attributes
    ----------
    state : array of shape (d,)
        The state after the step: the proposal if accepted, else the current state.
    accepted : bool
    accept_prob : float
        :math:`\\min(1, e^{\\log\\alpha})` (0 for an infeasible move).
    move : Move
        The proposed move (:class:`~pymc_kameleon.core.proposals.Move`), with the component that drew it.
    evaluation : object or None
        What ``log_density`` returned at the proposal (None for an infeasible move, never evaluated).
    """

    state: np.ndarray
    accepted: bool
    accept_prob: float
    move: Any
    evaluation: Any


def metropolis_hastings_step(proposal, current, current_logp: float, log_density, rng) -> MHStep:
    r"""One Metropolis-Hastings step: propose, evaluate the target at the proposal, accept or reject.

    .. math::
        \log \alpha = \log\pi(x^*) - \log\pi(y) + \log q(y \mid x^*) - \log q(x^* \mid y),
        \qquad x^* \sim q(\cdot \mid y),

    with both Hastings terms from the :class:`~pymc_kameleon.core.proposals.Move`. A move whose
    reverse density is unknown (``move.feasible`` False) is rejected without evaluating the target.
    On acceptance the proposal is told (:meth:`~pymc_kameleon.core.proposals.Proposal.accept`), so
    that what it computed at :math:`x^*` becomes its cache at the current state.

    Parameters
    ----------
    proposal : Proposal
    current : array of shape (d,)
        The current state :math:`y`.
    current_logp : float
        :math:`\log\pi(y)` (kept from the step that accepted it: a pseudo-marginal estimate is never redrawn).
    log_density : callable
        ``log_density(x)``: an object with the attribute ``logp``, :math:`\log\pi(x)`.
    rng : numpy.random.Generator
        Draws the proposal, then one uniform (always, whatever the ratio).
    """
    move = proposal.propose(current, rng)
    evaluation = None
    if move.feasible:
        evaluation = log_density(move.x)
        log_ratio = mh_log_ratio(evaluation.logp, current_logp, move.log_q_reverse, move.log_q_forward)
    else:  # the reverse density cannot be computed (a covariance that cannot be factorised): reject
        log_ratio = -math.inf
    accepted, accept_prob = metropolis_accept(log_ratio, rng)
    if accepted:
        proposal.accept(move)
    return MHStep(move.x if accepted else current, accepted, accept_prob, move, evaluation)
