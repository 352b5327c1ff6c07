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
(:class:`~pymc_kameleon.core.kameleon.KameleonProposal`). Everything here is NumPy; the
PyMC kernel lives in :mod:`pymc_kameleon.smc`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pymc_kameleon.core.mh import metropolis_accept_batch, mh_log_ratio_batch

__all__ = [
    "PopulationMove",
    "adapt_log_scale",
    "beta_increments",
    "evidence_relative_variance",
    "evidence_lag",
    "genealogy_stats",
    "loglik_rise",
    "population_mh_move",
    "steps_for_acceptance",
    "tempered_log_density",
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
        :meth:`~pymc_kameleon.core.kameleon.KameleonProposal.covariance_batch`).
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


def evidence_relative_variance(weights, eve, n_weightings: int) -> float:
    r"""Single-run estimate of :math:`\operatorname{Var}(\hat Z / Z)` from the particles' genealogy.

    An SMC sampler that starts from :math:`N` independent draws, reweights :math:`n` times (the
    last weights are ``weights``) and resamples in between estimates
    :math:`\hat Z = \prod_{p=1}^{n} \frac1N \sum_i G_p(x_p^i)`. Let :math:`E^i` be the *Eve
    index* of particle :math:`i`: the initial draw it descends from through the resamplings. With
    normalised weights :math:`W^i`, Lee and Whiteley's estimator (2018; Chan and Lai 2013
    without the factor) is

    .. math::
        V = 1 - \left(\frac{N}{N-1}\right)^{n}
            \Bigl(1 - \sum_{k=1}^{N} \Bigl(\sum_{i:\,E^i = k} W^i\Bigr)^2\Bigr),

    unbiased for :math:`\operatorname{Var}(\hat Z)/Z^2` under multinomial resampling (since
    :math:`\hat Z^2 (1 - V)` is unbiased for :math:`Z^2`), and with :math:`N V` consistent for the
    asymptotic relative variance. Particles that share an Eve are correlated through their
    common ancestor; the squared sums over each Eve's descendants measure that. With no
    resampling (:math:`n = 1`) it is the importance-sampling estimate
    :math:`(N \sum_i (W^i)^2 - 1)/(N - 1)`.

    Parameters
    ----------
    weights : array of shape (N,)
        Normalised weights of the current reweighting (non-negative, summing to 1).
    eve : int array of shape (N,)
        Eve index of each particle, in ``0 .. N-1``.
    n_weightings : int
        :math:`n`, the number of reweightings so far, this one included.

    Returns
    -------
    float
        :math:`V`; it can be slightly negative (it is unbiased, not clipped).

    References
    ----------
    Lee, A. and Whiteley, N. (2018). Variance estimation in the particle filter. Biometrika 105(3),
    609-625. Chan, H. P. and Lai, T. L. (2013). A general theory of particle filters in hidden
    Markov models and some applications. Ann. Statist. 41(6), 2877-2904.
    """
    weights = np.asarray(weights, dtype=float).reshape(-1)
    n = weights.size
    if n < 2:
        raise ValueError("The genealogy variance estimate needs at least 2 particles.")
    lineage_mass = np.bincount(np.asarray(eve).reshape(-1), weights=weights, minlength=n)
    same_eve = float(np.sum(lineage_mass**2))
    return 1.0 - math.exp(n_weightings * math.log(n / (n - 1))) * (1.0 - same_eve)


def genealogy_stats(weights, eve, n_weightings: int, multinomial: bool = True) -> dict:
    """The evidence's genealogy statistics at a reweighting, taken before the particles are resampled.

    ``evidence_relative_variance`` is :func:`evidence_relative_variance` (NaN unless the particles are
    resampled multinomially, the only scheme for which it is unbiased); ``distinct_ancestors`` is the
    number of distinct Eve indices, the initial draws that still have descendants.
    """
    return {
        "evidence_relative_variance": (
            evidence_relative_variance(weights, eve, n_weightings) if multinomial else np.nan
        ),
        "distinct_ancestors": int(np.unique(eve).size),
    }


def loglik_rise(loglik_start, loglik_end, parents) -> tuple[float, float]:
    r"""How far a stage's sweeps raised the particles' log-likelihood, and the standard error of that rise.

    After reweighting to :math:`\beta_t` and resampling, particles that had reached
    :math:`\pi_{t-1}` are distributed as :math:`\pi_t`, and :math:`\pi_t`-invariant sweeps leave the
    mean of :math:`\log L` where it is: the expected rise

    .. math::
        D_t = \frac1N \sum_i \left(\log L(x_i^{\mathrm{end}}) - \log L(x_i^{\mathrm{start}})\right)

    is zero. Particles that lagged behind (too few at high likelihood) rise towards
    :math:`\mathbb E_{\pi_t}[\log L]`, so :math:`D_t > 0` measures (at least) how far they lagged when
    they were reweighted. The standard error is cluster-robust: copies of one resampled parent start
    from the same value, so the :math:`N` differences are not independent, but the parents are:

    .. math::
        \widehat{\mathrm{se}}(D_t) = \frac1N \Bigl(\sum_{p} \bigl(\textstyle\sum_{i:\,a_i = p}
            (d_i - D_t)\bigr)^2\Bigr)^{1/2},

    with :math:`d_i` the particles' rises and :math:`a_i` their parents' indices.

    Parameters
    ----------
    loglik_start, loglik_end : arrays of shape (N,)
        :math:`\log L` of each particle before the stage's first sweep and after its last.
    parents : int array of shape (N,)
        The index each particle was resampled from (PyMC's ``resampling_indexes``).

    Returns
    -------
    (float, float)
        :math:`D_t` and its standard error; (NaN, NaN) if any value is not finite.
    """
    rise = np.asarray(loglik_end, dtype=float) - np.asarray(loglik_start, dtype=float)
    if rise.size == 0 or not np.all(np.isfinite(rise)):
        return math.nan, math.nan
    mean = float(rise.mean())
    _, cluster = np.unique(np.asarray(parents).reshape(-1), return_inverse=True)
    cluster_sums = np.bincount(cluster, weights=rise - mean)
    return mean, float(math.sqrt(np.sum(cluster_sums**2)) / rise.size)


def beta_increments(beta) -> np.ndarray:
    r""":math:`\beta_t - \beta_{t-1}` for the stages' inverse temperatures :math:`\beta_1, \dots, \beta_T`,
    with :math:`\beta_0 = 0`."""
    beta = np.asarray(beta, dtype=float).reshape(-1)
    return np.diff(np.concatenate([[0.0], beta]))


def evidence_lag(beta, rise, rise_se) -> tuple[float, float]:
    r"""An estimate of how far the evidence is too low because the particles lagged their tempered targets.

    Since :math:`\frac{d}{d\beta} \log Z(\beta) = \mathbb E_{\pi_\beta}[\log L]`, an SMC sampler whose
    particles' mean :math:`\log L` falls :math:`\delta_t` short of :math:`\mathbb E_{\pi_t}[\log L]`
    when it reweights from :math:`\beta_{t-1}` to :math:`\beta_t` underestimates that stage's
    increment of :math:`\log Z` by about :math:`(\beta_t - \beta_{t-1})\,\delta_t`. The rise
    :math:`D_t` of :func:`loglik_rise` is the part of :math:`\delta_t` that the stage's sweeps made
    up, so

    .. math::
        \Lambda = \sum_t (\beta_t - \beta_{t-1})\, D_t,
        \qquad \mathrm{se}(\Lambda) = \Bigl(\sum_t (\beta_t - \beta_{t-1})^2\,
            \mathrm{se}(D_t)^2\Bigr)^{1/2}

    estimates the low bias of :math:`\log \hat Z` (a lower bound when the sweeps do not close the
    whole gap). It is zero in expectation when every stage's particles had reached their target.

    Parameters
    ----------
    beta : array of shape (T,)
        :math:`\beta_1, \dots, \beta_T`, the stages' inverse temperatures (:math:`\beta_0 = 0`).
    rise, rise_se : arrays of shape (T,)
        :math:`D_t` and its standard error per stage; stages with NaN are left out.

    Returns
    -------
    (float, float)
        :math:`\Lambda` and its standard error.
    """
    step = beta_increments(beta)
    rise, rise_se = np.asarray(rise, dtype=float), np.asarray(rise_se, dtype=float)
    known = np.isfinite(rise) & np.isfinite(rise_se)
    lag = float(np.sum(step[known] * rise[known]))
    return lag, float(math.sqrt(np.sum((step[known] * rise_se[known]) ** 2)))
