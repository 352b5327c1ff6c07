r"""One stage of Kameleon rejuvenation in tempered SMC (KASS), without PyMC.

At stage :math:`t` the resampled particles :math:`x_1, \dots, x_N` target
:math:`\pi_t(x) \propto p(x) L(x)^{\beta_t}`. The stage

1. fits the Kameleon proposal family to the particles, in their whitened coordinates
   (:func:`fit_stage_proposal`), with the proposal scale :math:`s_t^2` carried over from the
   previous stage;
2. sweeps Metropolis-Hastings moves over all particles until its stopping rule says enough
   (:func:`rejuvenate`);
3. adapts :math:`s_t^2` from the stage's mean acceptance probability
   (:func:`~pymc_kameleon.core.smc.population.adapt_log_scale`), and notes a stage whose moves barely mixed
   (:class:`PoorMixingLog`).

Waste-free stages (chains from a few resampled particles, every state kept) are
:mod:`pymc_kameleon.core.smc.waste_free`.

The PyMC kernel that strings the stages together is :class:`pymc_kameleon.smc.KASS`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_kameleon.core.adaptation.whitening import Whitening
from pymc_kameleon.core.kameleon.family import fit_proposal, matched_nu2
from pymc_kameleon.core.kameleon.whitened import WhitenedFamily
from pymc_kameleon.core.linalg import SingularCovarianceError
from pymc_kameleon.core.smc.mixtures import GlobalWalkMixture, IndependenceMixture
from pymc_kameleon.core.smc.population import population_mh_move, steps_for_acceptance
from pymc_kameleon.core.validation import (
    check_kameleon_options,
    check_number,
    check_probability,
    check_weight,
)

__all__ = [
    "CollapsedParticlesError",
    "MIN_STAGE_ACCEPT",
    "PoorMixingLog",
    "RESAMPLING",
    "STEP_RULES",
    "StageProposal",
    "StageSweeps",
    "check_rejuvenation_options",
    "fit_stage_proposal",
    "rejuvenate",
]


STEP_RULES = ("correlation", "acceptance", "moved")
RESAMPLING = ("multinomial", "systematic")
# A stage whose mean acceptance probability is below this has moves that barely mix.
MIN_STAGE_ACCEPT = 0.01


def check_rejuvenation_options(
    *,
    bandwidth,
    gamma,
    n_subsample,
    learning_rate,
    initial_scale,
    target_accept,
    n_steps,
    correlation_threshold,
    move_probability,
    max_steps,
    chunk_size,
    batch_logp,
    resampling,
    am_weight,
    independence_weight=0.0,
) -> None:
    """Raise a ValueError naming the first invalid option of :class:`pymc_kameleon.smc.KASS`."""
    check_kameleon_options(bandwidth, gamma, n_subsample)
    check_number("learning_rate", learning_rate, minimum=0, strict=False)
    check_number("initial_scale", initial_scale, minimum=0)
    check_probability("target_accept", target_accept)
    check_number("correlation_threshold", correlation_threshold, minimum=0)
    check_probability("move_probability", move_probability)
    check_number("max_steps", max_steps, integer=True, minimum=1, strict=False)
    if isinstance(n_steps, str):
        if n_steps not in STEP_RULES:
            raise ValueError(f"n_steps must be a positive integer or one of {STEP_RULES}, got {n_steps!r}.")
    else:
        check_number("n_steps", n_steps, integer=True, minimum=1, strict=False)
    if chunk_size is not None:
        check_number("chunk_size", chunk_size, integer=True, minimum=1, strict=False)
    if not (isinstance(batch_logp, bool) or (isinstance(batch_logp, str) and batch_logp == "auto")):
        raise ValueError(f'batch_logp must be "auto", True or False, got {batch_logp!r}.')
    check_weight("am_weight", am_weight, one_allowed=False, why="1 would never use the Kameleon moves")
    check_weight("independence_weight", independence_weight, one_allowed=False,
                 why="1 would never use the Kameleon moves")
    if resampling not in RESAMPLING:
        raise ValueError(f"resampling must be one of {RESAMPLING}, got {resampling!r}.")


class CollapsedParticlesError(ValueError):
    """The particles do not vary enough to fit a proposal to them (the message says how)."""


@dataclass(frozen=True)
class StageProposal:
    """The proposal family of one stage (see :func:`fit_stage_proposal`) and what it was fitted with."""

    family: WhitenedFamily
    bandwidth: float  # in whitened units; NaN for kernels without a bandwidth
    gamma: float  # in whitened units
    nu2: float
    scale: float  # s^2, relative to the optimal random-walk scale
    subsample_size: int

    def stats(self) -> dict:
        """The per-stage statistics: ``bandwidth``, ``gamma``, ``nu2``, ``scale`` and ``subsample_size``."""
        return {
            "bandwidth": self.bandwidth,
            "gamma": self.gamma,
            "nu2": self.nu2,
            "scale": self.scale,
            "subsample_size": self.subsample_size,
        }


def fit_stage_proposal(
    X,
    kernel,
    bandwidth,
    gamma,
    n_subsample: int,
    scale: float,
    rng,
    am_weight: float = 0.0,
    independence_weight: float = 0.0,
) -> StageProposal:
    r"""Fit the Kameleon proposal family to the particles of a stage, in their whitened coordinates.

    The particles' mean :math:`m` and covariance :math:`C = L L^\top` define
    :math:`w = L^{-1}(x - m)`; the subsample :math:`Z` (all :math:`N` particles, or ``n_subsample``
    of them drawn without replacement), the bandwidth and :math:`\gamma` live there, so the proposal
    does not depend on the model's units. :math:`\nu^2` is set so that the average proposal variance
    is :math:`s^2 \cdot 2.38^2/d` times the average marginal variance of :math:`Z` in whitened
    coordinates (:func:`~pymc_kameleon.core.kameleon.family.matched_nu2`): the optimal random-walk scale
    at :math:`s^2 = 1`.

    Parameters
    ----------
    X : array of shape (N, d)
        The particles.
    kernel : kernel object
        The RKHS kernel (its bandwidth is set here).
    bandwidth, gamma
        ``"median"`` or a number, ``"auto"`` or a number (see
        :func:`~pymc_kameleon.core.kameleon.family.fit_proposal`).
    n_subsample : int
        At most this many particles form :math:`Z`.
    scale : float
        :math:`s^2`, relative to the optimal random-walk scale.
    rng : numpy.random.Generator
        Draws the subsample (only when :math:`N >` ``n_subsample``), then the fit's own draws.
    am_weight : float
        With :math:`\rho` = ``am_weight`` > 0 the family is a :class:`GlobalWalkMixture`: a move
        is, with probability :math:`\rho`, the global random walk of the optimal variance.
    independence_weight : float
        With :math:`\iota` = ``independence_weight`` > 0 those moves are wrapped in an
        :class:`IndependenceMixture`: a move is, with probability :math:`\iota`, an independent draw
        from the Gaussian fitted to the particles, truncated to the particles' largest whitened radius.

    Raises
    ------
    CollapsedParticlesError
        When a coordinate does not vary, the covariance cannot be factored, or all particles are
        identical.
    """
    X = np.asarray(X, dtype=float)
    N, d = X.shape
    cov = np.atleast_2d(np.cov(X, rowvar=False))
    try:
        whitening = Whitening.from_moments(X.mean(axis=0), cov)
    except SingularCovarianceError:
        whitening = None
    if whitening is None or not np.all(np.diag(cov) > 0):
        raise CollapsedParticlesError(f"The {N} particles do not vary in every coordinate")
    Z = X if N <= n_subsample else X[rng.choice(N, size=n_subsample, replace=False)]
    W = whitening.whiten(Z)
    fit = fit_proposal(W, kernel, bandwidth, gamma, 1.0, rng)
    if fit is None:
        raise CollapsedParticlesError(f"All {N} particles are identical")
    mean_variance = float(np.mean(np.var(W, axis=0)))
    rw_variance = scale * 2.38**2 / d * mean_variance
    fit.family.nu2 = matched_nu2(rw_variance, fit.gamma, fit.probe_variance)
    moves = GlobalWalkMixture(fit.family, rw_variance, am_weight) if am_weight > 0 else fit.family
    if independence_weight > 0:
        radius = np.max(np.linalg.norm(whitening.whiten(X), axis=1))  # no draw beyond the particles
        moves = IndependenceMixture(moves, independence_weight, radius)
    family = WhitenedFamily(moves, whitening)
    return StageProposal(family, fit.bandwidth, fit.gamma, fit.family.nu2, scale, Z.shape[0])


@dataclass(frozen=True)
class StageSweeps:
    """What the sweeps of one stage did (see :func:`rejuvenate`)."""

    mean_accept: float  # mean acceptance probability over all the stage's proposals
    sweeps: int
    unmoved: float = np.nan  # expected fraction of particles that never moved: mean_i prod_s (1 - alpha_is)


def rejuvenate(
    X,
    log_prior,
    loglik,
    log_target,
    family,
    evaluate,
    beta: float,
    rng,
    *,
    n_steps,
    max_steps: int,
    move_probability: float,
    correlation=None,
    correlation_threshold: float = 0.01,
    chunk_size=None,
    cache_factors: bool = False,
) -> StageSweeps:
    r"""Metropolis-Hastings sweeps of every particle against :math:`\pi_t`, in place, until the rule stops.

    Each sweep is a :func:`~pymc_kameleon.core.smc.population.population_mh_move`; the accepted proposals and
    their log densities are copied into ``X``, ``log_prior``, ``loglik`` and ``log_target``. The
    family stays fixed over the sweeps, so each leaves :math:`\pi_t` invariant.

    Parameters
    ----------
    X : array of shape (N, d)
        The particles; updated in place, like the three arrays of shape (N,) that follow.
    log_prior, loglik, log_target : arrays of shape (N,)
        :math:`\log p(x_i)`, :math:`\log L(x_i)` and :math:`\log \pi_t(x_i)`.
    family, evaluate, beta, rng, chunk_size
        As in :func:`~pymc_kameleon.core.smc.population.population_mh_move`.
    n_steps : int, "moved", "acceptance" or "correlation"
        An integer fixes the number of sweeps. ``"moved"`` sweeps until the expected fraction of
        particles that have not moved yet,

        .. math::
            u_k = \frac1N \sum_{i=1}^N \prod_{s=1}^{k} (1 - \alpha_{i,s})

        with :math:`\alpha_{i,s}` particle :math:`i`'s acceptance probability at sweep :math:`s`,
        is at most ``1 - move_probability``. ``"acceptance"`` runs one sweep, then
        :func:`~pymc_kameleon.core.smc.population.steps_for_acceptance` sweeps at its mean acceptance rate:
        the same criterion if every particle accepted at the mean rate, which undercounts where
        the acceptance differs between particles (:math:`u_k \ge (1 - \bar\alpha)^k`, by
        Jensen's inequality): in a funnel's neck particles accept far less than the mean.
        ``"correlation"`` sweeps while more than 90% of the coordinates' correlations with the
        starting particles still drop by more than ``correlation_threshold``. All rules stop at
        ``max_steps``.
    max_steps : int
    move_probability : float
        For ``"moved"`` and ``"acceptance"``: the probability that a particle has moved.
    correlation : object, optional
        For ``"correlation"``: ``correlation.get(X)`` gives each coordinate's absolute correlation
        with the starting particles (PyMC's ``Pearson``).
    correlation_threshold : float
    cache_factors : bool
        Keep the proposal factors of the current particles between sweeps (costs :math:`8 N d^2`
        bytes; the draws are the same either way).

    Returns
    -------
    StageSweeps
    """
    planned = n_steps if isinstance(n_steps, int | np.integer) else max_steps
    old_corr = 2.0
    accept_means, sweeps = [], 0
    stay = np.ones(X.shape[0])  # probability that each particle has not moved yet (Rao-Blackwellised)
    factors = family.factor_batch(X, chunk_size=chunk_size) if cache_factors else None
    while sweeps < planned:
        move = population_mh_move(
            X,
            log_target,
            family,
            evaluate,
            beta,
            rng,
            chunk_size=chunk_size,
            current_factors=factors,
            cache_factors=cache_factors,
        )
        acc = move.accepted
        if cache_factors:  # an accepted particle's factor is its proposal's
            factors[0][acc] = move.proposal_factors[0][acc]
            factors[1][acc] = move.proposal_factors[1][acc]
        X[acc] = move.proposals[acc]
        log_prior[acc] = move.log_prior[acc]
        loglik[acc] = move.loglik[acc]
        log_target[acc] = move.log_target[acc]
        accept_means.append(float(np.mean(move.accept_prob)))
        stay *= 1.0 - move.accept_prob
        sweeps += 1
        if n_steps == "moved":
            if np.mean(stay) <= 1.0 - move_probability:
                break
        elif n_steps == "correlation":
            pearson_r = correlation.get(X)
            if np.mean((old_corr - pearson_r) > correlation_threshold) > 0.9:
                old_corr = pearson_r
            else:
                break
        elif n_steps == "acceptance" and sweeps == 1:
            planned = steps_for_acceptance(accept_means[0], move_probability, 1, max_steps)
    return StageSweeps(float(np.mean(accept_means)), sweeps, float(np.mean(stay)))


class PoorMixingLog:
    """The stages of one SMC chain whose rejuvenation moves barely mixed, and what to tell the user.

    A stage barely mixed when its mean acceptance probability is below :data:`MIN_STAGE_ACCEPT`, or
    when an adaptive sweep rule (``adaptive=True``) hit the cap of ``max_steps`` sweeps. ``len()``
    is the number of such stages. A capped stage whose moves were accepted often enough is a
    different failure: most particles moved, a few never did (the ``"moved"`` rule's ``unmoved``
    fraction), so the warning says that instead of calling the whole run unreliable.
    """

    def __init__(self, max_steps: int, adaptive: bool, estimated: bool = False):
        self.max_steps = max_steps
        self.adaptive = adaptive
        self.estimated = estimated  # the likelihood has pseudo-marginal estimates: name their noise too
        self.stages = []  # (stage, beta, mean acceptance, sweeps)
        self.unmoved = {}  # stage -> expected fraction of particles never moved, where known

    def __len__(self) -> int:
        return len(self.stages)

    def record(
        self, stage: int, beta: float, mean_accept: float, sweeps: int, unmoved: float = np.nan
    ) -> None:
        """Note the stage if it barely mixed."""
        capped = self.adaptive and sweeps >= self.max_steps
        if capped or mean_accept < MIN_STAGE_ACCEPT:
            self.stages.append((stage, beta, mean_accept, sweeps))
            self.unmoved[stage] = unmoved

    def worst(self) -> tuple:
        """The (stage, beta, mean acceptance, sweeps) row of the stage that mixed worst."""
        return min(self.stages, key=lambda row: row[2])

    def collapse_cause(self, scale: float) -> str:
        """Why the particles may have collapsed, and the remedy; ``scale`` is the current :math:`s^2`."""
        if not self.stages:
            return "Use more draws, or a higher threshold (more, gentler stages)."
        stage, beta, accept, _ = self.worst()
        return (
            f"The moves had stopped mixing: stage {stage} (beta={beta:.3g}) accepted {accept:.2%} of its "
            f"proposals, with the proposal variance at {scale:.3g} times the optimal "
            "random walk's. Let the scale adapt (learning_rate > 0, initial_scale near 1), or "
            "reparametrise the model; more draws and a higher threshold help too."
        )

    def warning(self, sampler: str, n_stages: int) -> str:
        """The chain's warning after ``n_stages`` stages: the worst stage, the capped ones, the remedies."""
        stage, beta, accept, _ = self.worst()
        if accept >= MIN_STAGE_ACCEPT:  # every flagged stage accepted often enough: it hit the cap
            return self._stragglers_warning(sampler, n_stages)
        n_capped = sum(sweeps >= self.max_steps for *_, sweeps in self.stages)
        capped = ""
        if n_capped and self.adaptive:
            plural = "s" if n_capped > 1 else ""
            capped = f"; {n_capped} stage{plural} hit the cap of max_steps={self.max_steps} sweeps"
        return (
            f"{sampler}: the rejuvenation moves barely mixed in {len(self.stages)} of "
            f"{n_stages} stages (mean acceptance below {MIN_STAGE_ACCEPT:.0%} or the sweep cap "
            f"reached). The worst, stage {stage} (beta={beta:.3g}), accepted {accept:.2%} of its "
            f"proposals{capped}. The particles may be little more than resampled copies of an earlier "
            "stage's (or of the prior draws), so the posterior and the evidence are unreliable. Use more "
            "draws, threshold=0.8 (more, gentler stages) or a larger max_steps, let the proposal scale "
            "adapt (learning_rate > 0, initial_scale near 1), or reparametrise the model."
            + self._estimates_cause()
        )

    def _stragglers_warning(self, sampler: str, n_stages: int) -> str:
        """Stages that hit the sweep cap although their moves were accepted: some particles never moved."""
        known = {stage: u for stage, u in self.unmoved.items() if np.isfinite(u)}
        stage = max(known, key=known.get) if known else self.stages[-1][0]
        beta, accept = next((b, a) for s, b, a, _ in self.stages if s == stage)
        unmoved = f" {known[stage]:.1%} of the particles had never moved," if known else ""
        plural = "s" if n_stages != 1 else ""  # "1 of 15 stages", "1 of 1 stage"
        # Measured where it fired: a mixture with Dirichlet weights (sds 8-24% too wide at R-hat 1.001, the
        # means right); narrow and wide modes (weights 0.29-0.58 at 2000 particles, 0.51 at 5000, exact
        # 0.505); a 4-d mixture of sds 0.3 and 0.9 at 1000 particles, two of six chains' log Z 4.7 and 5.3
        # of their SEs off, which the evidence-lag check did not see.
        return (
            f"{sampler}: {len(self.stages)} of {n_stages} stage{plural} reached the cap of "
            f"max_steps={self.max_steps} sweeps with particles that had not moved: at stage {stage} "
            f"(beta={beta:.3g}){unmoved} although {accept:.1%} of all proposals were accepted. Such "
            "particles sit where the proposals are far too wide for them, as in a funnel's neck (a "
            "hierarchical scale near zero) or a mode much narrower than another, so that region may be "
            "under-explored: the posterior's spread, the modes' weights and a chain's log Z error bar can "
            "be off where R-hat cannot tell. Reparametrise a funnel (for example non-centred); for "
            "separated modes use more particles (draws), which weigh them better, and compare two or more "
            "chains' log Z (log_evidence); or raise max_steps. A KameleonMetropolis run is a check of the "
            "posterior."
            + self._estimates_cause()
        )

    def _estimates_cause(self) -> str:
        """With pseudo-marginal estimates, their noise as a cause of its own (a new user's random-intercept
        model, 10 importance samples per estimate: 70-100 sweeps at the last stages, the cap reached, and
        only funnels and modes named)."""
        if not self.estimated:
            return ""
        return (
            " The likelihood here is estimated, and noisy estimates hold particles as well: near beta=1 a "
            "particle whose estimate came out high accepts only proposals whose estimates come out as high, "
            "so its acceptance falls stage by stage. If the stages that mixed worst are the last ones, use "
            "more samples per estimate (log_estimate_spread: aim for a log-estimate sd of about 1 or less "
            "near the posterior)."
        )
