r"""Population moves for SMC samplers with Kameleon rejuvenation (KASS; Schuster, Strathmann et al.).

At stage :math:`t` of a tempered SMC sampler the particles :math:`x_1, \dots, x_N` target

.. math::
    \pi_t(x) \propto p(x)\, L(x)^{\beta_t},

with :math:`p` the prior, :math:`L` the likelihood and :math:`0 < \beta_t \le 1`. A rejuvenation
sweep proposes :math:`x_i^* \sim q(\cdot \mid x_i)` for every particle at once and accepts with

.. math::
    \log \alpha_i = \log \pi_t(x_i^*) - \log \pi_t(x_i)
                  + \log q(x_i \mid x_i^*) - \log q(x_i^* \mid x_i),

where :math:`q` is the Kameleon proposal built from the particle system
(:class:`~pymc_kameleon.core.kameleon.family.KameleonProposal`). Everything here is NumPy; the
PyMC kernel lives in :mod:`pymc_kameleon.smc`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from pymc_kameleon.core.angles import mean_direction
from pymc_kameleon.core.mh import metropolis_accept_batch, mh_log_ratio_batch

__all__ = [
    "PopulationMove",
    "adapt_log_scale",
    "effective_sample_size",
    "population_mh_move",
    "refine_tempering_step",
    "steps_for_acceptance",
    "tempered_log_density",
    "wrap_about_mean_direction",
]


def tempered_log_density(log_prior, loglik, beta: float) -> np.ndarray:
    r""":math:`\log p(x) + \beta \log L(x)`, elementwise, with every invalid value mapped to :math:`-\infty`.

    A point outside the prior's support (:math:`\log p = -\infty`) stays at :math:`-\infty` whatever
    its likelihood (even at :math:`\beta = 0`, where :math:`0 \cdot (-\infty)` would be NaN), and
    NaN or :math:`+\infty` gives :math:`-\infty`, so such proposals are always rejected.
    """
    log_prior = np.asarray(log_prior, dtype=float)
    loglik = np.asarray(loglik, dtype=float)
    with np.errstate(invalid="ignore"):
        out = log_prior + (beta * loglik if beta != 0 else 0.0)
    invalid = np.isnan(out) | (out == np.inf) | (log_prior == -np.inf)
    return np.where(invalid, -np.inf, out)


@dataclass(frozen=True)
class PopulationMove:
    """Result of one Metropolis-Hastings sweep over all particles (see :func:`population_mh_move`)."""

    proposals: np.ndarray  # (N, d)
    log_prior: np.ndarray  # (N,) at the proposals
    loglik: np.ndarray  # (N,) at the proposals (-inf where not evaluated)
    log_target: np.ndarray  # (N,) tempered log density at the proposals
    log_ratio: np.ndarray  # (N,) log alpha, -inf for invalid proposals
    accept_prob: np.ndarray  # (N,) min(1, alpha)
    accepted: np.ndarray  # (N,) bool
    proposal_factors: tuple | None = None  # factor_batch at the proposals, when factors are cached


def population_mh_move(
    X,
    log_target,
    family,
    evaluate,
    beta: float,
    rng,
    chunk_size=None,
    current_factors=None,
    cache_factors=False,
) -> PopulationMove:
    r"""Propose from the Kameleon family at every particle and accept or reject each one.

    Parameters
    ----------
    X : array of shape (N, d)
        Current particles.
    log_target : array of shape (N,)
        :math:`\log \pi_t(x_i)` at the current particles (kept, never recomputed: with a
        pseudo-marginal likelihood this is the particle's current estimate).
    family : KameleonProposal
        Proposal family; :math:`q(\cdot \mid x_i)` for each particle comes from
        ``family.sample_batch`` and the reverse density from ``family.log_density_batch``.
    evaluate : callable
        ``evaluate(proposals) -> (log_prior, loglik)``, arrays of shape (N,).
    beta : float
        Inverse temperature :math:`\beta_t`.
    rng : numpy.random.Generator
        Source of the proposals and of exactly N uniforms (so the random stream does not
        depend on the acceptance outcomes).
    chunk_size : int, optional
        Rows per chunk of the batched proposal algebra (bounds memory; see
        :meth:`~pymc_kameleon.core.kameleon.family.KameleonProposal.covariance_batch`).
    current_factors : tuple, optional
        ``family.factor_batch(X)``, if known (from the previous sweep).
    cache_factors : bool
        Compute the proposals' factors once, for the reverse density, and return them in
        ``proposal_factors``; the caller keeps those of the accepted proposals for the next
        sweep, which halves the proposal algebra. Costs :math:`8 N d^2` bytes.

    Returns
    -------
    PopulationMove
        The caller copies ``proposals[accepted]`` and their densities into its particle arrays.
    """
    X = np.asarray(X, dtype=float)
    if cache_factors and current_factors is None:
        current_factors = family.factor_batch(X, chunk_size=chunk_size)
    proposals, log_q_forward = family.sample_batch(X, rng, chunk_size=chunk_size, factors=current_factors)
    proposal_factors = family.factor_batch(proposals, chunk_size=chunk_size) if cache_factors else None
    log_q_reverse = family.log_density_batch(X, proposals, chunk_size=chunk_size, factors=proposal_factors)
    log_prior, loglik = evaluate(proposals)
    log_prior = np.asarray(log_prior, dtype=float).reshape(-1)
    loglik = np.asarray(loglik, dtype=float).reshape(-1)
    proposal_log_target = tempered_log_density(log_prior, loglik, beta)
    log_ratio = mh_log_ratio_batch(proposal_log_target, log_target, log_q_reverse, log_q_forward)
    accepted, accept_prob = metropolis_accept_batch(log_ratio, rng)
    return PopulationMove(
        proposals, log_prior, loglik, proposal_log_target, log_ratio, accept_prob, accepted, proposal_factors
    )


def adapt_log_scale(
    log_scale: float, mean_accept: float, target_accept: float, learning_rate: float
) -> float:
    r"""One stochastic-approximation step of the KASS scale (the paper's eq. 4, on the log scale).

    .. math::
        \log s^2_{t+1} = \log s^2_t + \lambda_t (\hat\alpha_t - \alpha_{\mathrm{opt}}),

    where :math:`\hat\alpha_t` is the Rao-Blackwellised acceptance (the mean acceptance
    *probability* over the stage's proposals). The paper writes the update on :math:`\nu^2`
    itself; on the log scale it is the same rule to first order and :math:`\nu^2` stays positive
    whatever :math:`\lambda_t`. A NaN ``mean_accept`` (no proposals) leaves the scale unchanged.
    """
    if not math.isfinite(mean_accept):
        return float(log_scale)
    return float(log_scale) + float(learning_rate) * (float(mean_accept) - float(target_accept))


def steps_for_acceptance(mean_accept: float, move_probability: float, min_steps: int, max_steps: int) -> int:
    r"""Number of MH sweeps after which a particle has moved with probability ``move_probability``.

    With per-sweep acceptance rate :math:`\bar\alpha`, a particle is still stuck after :math:`k`
    sweeps with probability :math:`(1 - \bar\alpha)^k`, so

    .. math::
        k = \left\lceil \frac{\log(1 - p_{\mathrm{move}})}{\log(1 - \bar\alpha)} \right\rceil,

    clipped to ``[min_steps, max_steps]`` (the rule of PyMC 3's SMC). :math:`\bar\alpha = 0` or NaN
    gives ``max_steps``; :math:`\bar\alpha = 1` gives ``min_steps``.
    """
    if not (math.isfinite(mean_accept) and mean_accept > 0):
        return int(max_steps)
    if mean_accept >= 1:
        return int(min_steps)
    k = math.ceil(math.log1p(-move_probability) / math.log1p(-mean_accept))
    return int(min(max(k, min_steps), max_steps))


def effective_sample_size(loglik, step: float) -> float:
    r"""The effective sample size :math:`1 / \sum_i W_i^2` of the weights :math:`W_i \propto L(x_i)^{\delta}`
    of a tempering step :math:`\delta` = ``step`` (particles with :math:`\log L = -\infty` weigh 0).

    NaN when no particle has a finite log-likelihood.
    """
    with np.errstate(invalid="ignore"):
        log_w = step * np.asarray(loglik, dtype=float)
        log_w = log_w - logsumexp(log_w)
        return float(np.exp(-logsumexp(2.0 * log_w)))


# The refinement's resolution: the step is found to this relative precision.
_RELATIVE_STEP_TOLERANCE = 1e-6


def refine_tempering_step(loglik, old_beta: float, beta: float, target_ess: float) -> float:
    r"""The next inverse temperature, refined where PyMC's choice missed its effective sample size badly.

    PyMC bisects :math:`\beta` on :math:`[\beta_{t-1}, 2]` down to an absolute width of :math:`10^{-6}`, so
    no step is smaller than about :math:`9.5 \times 10^{-7}`. When :math:`\log L` varies by many millions
    of nats over the particles (a regression on income in dollars with vague priors: the prior's draws
    miss the data by :math:`10^{12}` nats), even that step leaves an effective sample size of 1-3 of
    1000 where the threshold asked for 500; log Z then came out 2-66 nats low with an error bar of 0.7
    (``benchmarks/results/kass_unstandardised_regression.md``). Where the effective sample size of
    PyMC's step is below half ``target_ess``, this bisects the step :math:`\delta = \beta - \beta_{t-1}`
    on the log scale, to a relative precision of :math:`10^{-6}`, for the largest step whose effective
    sample size is at least ``target_ess``; elsewhere PyMC's :math:`\beta` is returned unchanged (so
    runs whose steps PyMC could resolve are not changed).

    Parameters
    ----------
    loglik : array of shape (N,)
        The particles' log-likelihoods (:math:`-\infty` allowed).
    old_beta, beta : float
        :math:`\beta_{t-1}` and PyMC's :math:`\beta_t`.
    target_ess : float
        The effective sample size PyMC aims at (``int(threshold * N)``).

    Returns
    -------
    float
        :math:`\beta_t`, at most ``beta``. PyMC's own when no smaller step reaches ``target_ess``
        either (too few particles with a finite likelihood).
    """
    loglik = np.asarray(loglik, dtype=float)
    step = beta - old_beta
    finite = loglik[np.isfinite(loglik)]
    if step <= 0 or finite.size < 2 or not effective_sample_size(loglik, step) < target_ess / 2:
        return beta
    spread = float(np.ptp(finite))
    if spread == 0:
        return beta
    # At a step of 1e-3 / spread every finite weight is within a factor e^0.001 of the others.
    low, high = math.log(min(step, 1e-3 / spread)), math.log(step)
    if effective_sample_size(loglik, math.exp(low)) < target_ess:
        return beta  # no step does better: too few particles have a finite likelihood
    while high - low > _RELATIVE_STEP_TOLERANCE:
        middle = 0.5 * (low + high)
        if effective_sample_size(loglik, math.exp(middle)) < target_ess:
            high = middle
        else:
            low = middle
    return old_beta + math.exp(low)


def wrap_about_mean_direction(X, columns) -> np.ndarray:
    r"""The particles ``X`` with each angle in ``columns`` moved by a multiple of :math:`2\pi` into the
    period centred on the particles' mean direction :math:`c = \operatorname{atan2}(\overline{\sin x},
    \overline{\cos x})`: :math:`c + ((x - c + \pi) \bmod 2\pi) - \pi`.

    Where the density is :math:`2\pi`-periodic in those coordinates (PyMC's circular transform, whose
    model value is the angle wrapped), every particle keeps its density, and so the particle system is
    the same on the circle. In the sampler's coordinates, particles that had wandered into other
    periods sat in other copies of the posterior, and moves fitted across the copies accepted 3% of
    their proposals (a von Mises model; the straggler warning named funnels). Returns ``X`` itself
    where ``columns`` is empty, else a copy.
    """
    columns = np.asarray(columns, dtype=int)
    if columns.size == 0:
        return X
    X = np.array(X, dtype=float, copy=True)
    angles = X[:, columns]
    centre = mean_direction(angles)
    X[:, columns] = centre + np.mod(angles - centre + np.pi, 2.0 * np.pi) - np.pi
    return X
