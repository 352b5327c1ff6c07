r"""The GP delayed-acceptance move without PyMC: exact warm-up steps, screened two-stage steps, and
what the GP and the base adaptation learn after each.

A :class:`DelayedAcceptanceKernel` owns one chain's GP (with its training schedule,
:class:`~pymc_kameleon.core.gp.training.GPTrainingSchedule`), the scale-free adaptation of its base
proposal (:class:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation`) and the proposal
built from it. A step asks it for one move (:meth:`~DelayedAcceptanceKernel.step`, which returns a
:class:`DelayedAcceptanceResult`), keeps the accepted state's evaluation, then hands the result back
(:meth:`~DelayedAcceptanceKernel.learn`): only then, after the decision, does the new exact
evaluation join the GP, so each step's two stages use one fixed surrogate and the chain is exact
(:mod:`pymc_kameleon.core.delayed_acceptance.ratios`).

The target is any object with the two methods of :class:`SplitDensity`. In the code the states are
``current`` and ``proposed`` (as in the whole package); the docstrings' equations write :math:`x` for
the current state and :math:`y` for the proposal (the GP-DA paper's notation).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.adaptation.state import TuningDraw
from pymc_kameleon.core.delayed_acceptance.ratios import (
    CURRENT_VALUES,
    DAPoint,
    delayed_acceptance_log_ratios,
    log_alpha1,
    surrogate_point,
)
from pymc_kameleon.core.delayed_acceptance.speculation import Prefetch, Scout, predicted_guess
from pymc_kameleon.core.gp.training import GPTrainingSchedule
from pymc_kameleon.core.mh import accept_probability, metropolis_accept, mh_log_ratio

__all__ = ["DelayedAcceptanceKernel", "DelayedAcceptanceMH", "DelayedAcceptanceResult", "SplitDensity"]


class SplitDensity(Protocol):
    """The target as delayed acceptance needs it: the (cheap) prior apart from the (expensive) likelihood.

    ``prior(theta)`` returns ``(log_prior, grad_log_prior or None)``. ``evaluate(theta, prior)``
    evaluates the likelihood at ``theta`` given the prior already computed there and returns an
    evaluation with the attributes ``logp`` (the log posterior density), ``loglik``, ``log_prior``,
    ``grad_log_prior``, ``grad_exact_loglik`` and ``grad_logp`` (gradients None where unknown).
    :class:`pymc_kameleon.steps.split_density.SplitTargetDensity` is one.
    """

    def prior(self, theta) -> tuple[float, Any]: ...

    def evaluate(self, theta, prior=None) -> Any: ...


@dataclass(frozen=True)
class DelayedAcceptanceResult:
    r"""One delayed-acceptance (or exact warm-up) step.

    Attributes
    ----------
    state : array of shape (d,)
        The state after the step.
    accepted : bool
    accept_prob : float
        The probability of accepting the proposal given the stage-1 outcome: :math:`\alpha_2` if
        stage 1 passed, 0 if it failed; in an exact step, the plain MH probability.
    stage1, stage2 : float
        :math:`\alpha_1` (1 in an exact step) and :math:`\alpha_2` (NaN where stage 2 was not reached).
    gp_sd : float
        The GP's predictive sd of the log-likelihood at the proposal (NaN if not predicted).
    screened : bool
        Whether the GP screened this proposal (False in the warm-up and its pauses).
    adapt_prob : float
        What the base proposal's scale adapts to: an unbiased estimate of the plain MH acceptance
        probability on the exact target (the acceptance probability itself in an exact step).
    component : str
        The scale the move used (:class:`~pymc_kameleon.core.adaptation.state.TuningDraw`).
    proposed : array of shape (d,)
        The proposed point.
    evaluation : object or None
        The exact evaluation at the proposal (None if it was not evaluated).
    gp_learns : bool
        Whether that evaluation joins the GP after the decision.
    refit : bool
        Whether the GP's hyperparameters were fitted before the move (the chain's first step).
    """

    state: np.ndarray
    accepted: bool
    accept_prob: float
    component: str
    proposed: np.ndarray
    stage1: float = 1.0
    stage2: float = math.nan
    gp_sd: float = math.nan
    screened: bool = False
    adapt_prob: float = math.nan
    evaluation: Any = None
    gp_learns: bool = False
    refit: bool = False


class DelayedAcceptanceKernel:
    r"""One chain of GP delayed acceptance: its base proposal, the adaptation that tunes it, and its GP.

    Subclasses give the screened two-stage move (:meth:`_screened_step`); this class gives the exact
    warm-up step (plain MH with the base proposal), the GP's seeding and training, and the adaptation.

    Parameters
    ----------
    adaptation : ScaleFreeAdaptation
        Learns the base proposal's whitening and scales.
    proposal : Proposal
        The base proposal, built from ``adaptation.state``.
    schedule : GPTrainingSchedule
        The GP and when it learns.
    current_value : {"exact", "surrogate"}
        What stands for the log-likelihood at the current state in :math:`\alpha_1`
        (:mod:`pymc_kameleon.core.delayed_acceptance.ratios`).
    pause_steps : int
        Exact steps at most in a screening pause after a window that ended early
        (:meth:`~pymc_kameleon.core.gp.training.GPTrainingSchedule.pause_while_walking`).
    """

    def __init__(
        self,
        adaptation: ScaleFreeAdaptation,
        proposal,
        schedule: GPTrainingSchedule,
        current_value: str = "exact",
        pause_steps: int = 200,
    ):
        # Speculative evaluations on idle workers (DelayedAcceptanceMH after tuning; set by the step).
        self.prefetch: Prefetch | None = None
        if current_value not in CURRENT_VALUES:
            raise ValueError(f"current_value must be one of {CURRENT_VALUES}, got {current_value!r}.")
        self.adaptation = adaptation
        self.proposal = proposal
        self.schedule = schedule
        self.current_value = current_value
        self.pause_steps = int(pause_steps)
        self.seeded = False  # whether the chain's starting point is in the GP
        # After tuning (DelayedAcceptanceMH): stage 1 first compares its uniform with a bound of alpha_1
        # from an O(t) bound of the GP's variance, and solves for the variance only if that does not decide.
        self.bounded_stage1 = False

    @property
    def gp(self):
        """The GP surrogate of the log-likelihood."""
        return self.schedule.gp

    # ------------------------------------------------------------------ the move
    def step(self, current, current_eval, density: SplitDensity, rng, *, tune: bool):
        """One move from the state ``current``, whose evaluation is ``current_eval``: exact while the GP
        warms up, else screened. At a chain's first step the starting point seeds the GP first.
        Returns a :class:`DelayedAcceptanceResult`."""
        refit = False
        if not self.seeded:
            self.seeded = True
            self.schedule.add(current, current_eval.loglik, current_eval.grad_exact_loglik, tune=tune)
            refit = self._after_exact_evaluation(tune)
        if self.schedule.warm:
            result = self._exact_step(current, current_eval, density, rng)
        else:
            result = self._screened_step(current, current_eval, density, rng)
        return replace(result, refit=True) if refit else result

    def _exact_step(self, current, current_eval, density, rng) -> DelayedAcceptanceResult:
        """Warm-up: plain MH with the base proposal and an exact evaluation at its proposal."""
        move = self.proposal.propose(current, rng)
        proposed = move.x
        if not move.feasible:
            metropolis_accept(-math.inf, rng)
            return DelayedAcceptanceResult(current, False, 0.0, move.component, proposed, adapt_prob=0.0)
        proposed_eval = density.evaluate(proposed, density.prior(proposed))
        lq_f, lq_r = move.log_q_forward, move.log_q_reverse
        log_ratio = mh_log_ratio(proposed_eval.logp, current_eval.logp, lq_r, lq_f)
        accepted, prob = metropolis_accept(log_ratio, rng)
        if accepted:
            self.proposal.accept(move)
        return DelayedAcceptanceResult(
            proposed if accepted else current, accepted, prob, move.component, proposed,
            stage2=prob, adapt_prob=prob, evaluation=proposed_eval,
            gp_learns=math.isfinite(proposed_eval.log_prior),
        )

    def _screened_step(self, current, current_eval, density, rng) -> DelayedAcceptanceResult:
        raise NotImplementedError

    def _stage1_then_exact(self, current, proposed, log_alpha1, prior, density, rng, component, gp_sd,
                           before_exact=None, u=None):
        """Stage 1 (accept with :math:`\\alpha_1`), then the exact evaluation of a survivor.

        Returns ``(evaluation, alpha1, None)`` for a survivor whose log density is finite, else
        ``(None, alpha1, result)``: a rejection (a non-finite one costs no stage 2).
        ``before_exact(rng)``, if given, runs just before the exact evaluation (speculation); ``u``
        is stage 1's uniform if it was drawn already.
        """
        passed, a1 = metropolis_accept(log_alpha1, rng, u)
        if not passed:
            return None, a1, DelayedAcceptanceResult(
                current, False, 0.0, component, proposed, stage1=a1, gp_sd=gp_sd, screened=True,
                adapt_prob=0.0,
            )
        if before_exact is not None:
            before_exact(rng)
        proposed_eval = density.evaluate(proposed, prior)
        if not (math.isfinite(proposed_eval.loglik) and math.isfinite(proposed_eval.logp)):
            metropolis_accept(-math.inf, rng)
            return None, a1, DelayedAcceptanceResult(
                current, False, 0.0, component, proposed, stage1=a1, stage2=0.0, gp_sd=gp_sd, screened=True,
                adapt_prob=0.0, evaluation=proposed_eval, gp_learns=True,
            )
        return proposed_eval, a1, None

    # ------------------------------------------------------------------ learning
    def learn(self, current, result: DelayedAcceptanceResult, rng, *, tune: bool, log_density=math.nan,
              gradient=None, population=None) -> bool:
        """After the decision on a move from ``current``: the new evaluation joins the GP, then the
        base proposal adapts.

        ``log_density`` and ``gradient`` are the target's (exact) log density and its gradient at
        ``result.state``, for the end-of-tuning checks, and ``population`` every chain's state at the
        start of the step (pooled tuning; :class:`~pymc_kameleon.core.adaptation.state.TuningDraw`).
        Returns whether the GP's hyperparameters were fitted.
        """
        refit = False
        if result.gp_learns:
            evaluation = result.evaluation
            self.schedule.add(result.proposed, evaluation.loglik, evaluation.grad_exact_loglik, tune=tune)
            refit = self._after_exact_evaluation(tune)
        if tune:
            evaluation = result.evaluation
            draw = TuningDraw(
                result.state, result.adapt_prob, result.component, current, result.proposed,
                log_density, gradient, population,
                math.nan if evaluation is None else evaluation.logp,
            )
            refit = self._adapt(draw, rng) or refit
            if result.screened:
                self.schedule.record_stage1(result.stage1, self.adaptation.window)
        return refit

    def _after_exact_evaluation(self, tune: bool) -> bool:
        adaptation = self.adaptation
        return self.schedule.after_exact_evaluation(
            tune=tune,
            scanning=adaptation.phase == "scan",
            window=adaptation.window,
            typical_step=adaptation.state.typical_scale,
        )

    def _adapt(self, draw: TuningDraw, rng) -> bool:
        """Adapt the base proposal; at a window end, update the GP. Returns whether it refitted."""
        adaptation = self.adaptation
        window = adaptation.window
        changed = adaptation.adapt(draw, rng)
        if adaptation.window == window:
            return False
        if adaptation.window_ended_early:
            self.schedule.pause_while_walking(adaptation.window, self.pause_steps)
        return self.schedule.window_ended(adaptation.state.whitening if changed else None)

    def end_warm_up(self, *, tune: bool) -> bool:
        """Screen from now on (the warm-up's heuristic hyperparameters, fitted if tuning)."""
        return self.schedule.end_warm_up(tune=tune, typical_step=self.adaptation.state.typical_scale)

    def freeze(self, rng) -> None:
        """Tuning is over: freeze the base proposal (ending the coordinate scan if tuning ended in it),
        and screen with the bound of :class:`DelayedAcceptanceMH` from now on.

        The window tuning ended in is not ended: a new :math:`C` would send the proposals where the
        GP has no points, with no screened tuning steps left to find out (a far-start logistic
        regression, GP-DA MALA: stage 1 then rejected every proposal after tuning, silently).
        """
        if self.adaptation.end_tuning(rng, end_window=False):
            self.schedule.set_whitening(self.adaptation.state.whitening)
        self.bounded_stage1 = True


class DelayedAcceptanceMH(DelayedAcceptanceKernel):
    r"""GP delayed-acceptance MH: stage 1 on the GP marginalised at the proposal (paper eq. 4), stage 2
    exact (eq. 6), with the base proposal's asymmetric :math:`Q` terms in both stages.

    With a :class:`~pymc_kameleon.core.delayed_acceptance.speculation.Prefetch` as ``prefetch`` (after
    tuning only), each stage-2 evaluation first sends the likely next ones to idle workers
    (:mod:`~pymc_kameleon.core.delayed_acceptance.speculation`); the draws do not change.

    The scale adapts to :math:`\alpha_{MH}(x, y) / \alpha_1(x, y)` for a proposal that passed stage 1
    (0 otherwise): stage 1 passes with probability :math:`\alpha_1`, so this is an unbiased
    estimate of the plain MH acceptance probability, and a poor surrogate cannot shrink the scale.

    After tuning, stage 1 draws its uniform :math:`u` first and compares it with
    :math:`\bar\alpha_1 \ge \alpha_1`, computed with an :math:`O(t)` upper bound of the GP's
    variance at the proposal (``GPSurrogate.predict_with_variance_bound``; :math:`\alpha_1` grows
    with the variance): :math:`u \ge \bar\alpha_1` rejects without the :math:`O(t^2)` solve for the
    variance, which is made only otherwise. The decisions, and so the draws, are those of the plain
    computation; such a rejection reports :math:`\bar\alpha_1` as ``stage1`` and NaN as ``gp_sd``.
    """

    def _screened_step(self, current, current_eval, density, rng) -> DelayedAcceptanceResult:
        move = self.proposal.propose(current, rng)
        proposed, lq_f, lq_r, component = move.x, move.log_q_forward, move.log_q_reverse, move.component
        if not move.feasible:  # Kameleon covariance at the proposal singular even with jitter: reject
            metropolis_accept(-math.inf, rng)
            return DelayedAcceptanceResult(
                current, False, 0.0, component, proposed, stage1=0.0, screened=True, adapt_prob=0.0
            )
        gp, schedule, exact = self.gp, self.schedule, self.current_value == "exact"
        lp_proposed, _ = density.prior(proposed)
        ll_current, lp_current = current_eval.loglik, current_eval.log_prior

        def predicted_at_current():
            return surrogate_point(gp, current, lp_current, ll_current)

        if exact:
            current_point = DAPoint(lp_current, math.nan, math.nan, ll_current)
        else:
            current_point = schedule.cached(current, current_eval, predicted_at_current)
        gp_sd, u = math.nan, None
        if math.isfinite(lp_proposed):
            if self.bounded_stage1:
                mu, var_bound, row = gp.predict_with_variance_bound(np.asarray(proposed, dtype=float))
                bound = DAPoint(float(lp_proposed), mu, var_bound, math.nan)
                la1_bound = log_alpha1(current_point, bound, lq_f, lq_r, self.current_value)
                a1_bound = accept_probability(la1_bound)
                u = rng.random()  # stage 1's uniform, drawn where metropolis_accept would draw it
                if not u < a1_bound:
                    return DelayedAcceptanceResult(
                        current, False, 0.0, component, proposed, stage1=a1_bound, screened=True,
                        adapt_prob=0.0,
                    )
                proposed_point = bound._replace(var=gp.variance_given(row))
            else:
                proposed_point = surrogate_point(gp, proposed, lp_proposed)
            gp_sd = math.sqrt(proposed_point.var)
            la1 = log_alpha1(current_point, proposed_point, lq_f, lq_r, self.current_value)
        else:
            proposed_point, la1 = None, -math.inf
        prior = (lp_proposed, None)
        before_exact = None
        if self.prefetch is not None:
            def before_exact(rng_now):
                prefetch, start = self.prefetch, time.perf_counter()
                self._speculate(current, current_eval, proposed, proposed_point, lq_f, lq_r, density, rng_now)
                prefetch.seconds_spent += time.perf_counter() - start
        proposed_eval, a1, rejected = self._stage1_then_exact(
            current, proposed, la1, prior, density, rng, component, gp_sd, before_exact, u
        )
        if proposed_eval is None:
            return rejected
        ll_proposed = proposed_eval.loglik
        if exact:
            # The GP's prediction at the current state (the proposal is not in it yet), for alpha1 back.
            current_point = schedule.cached(current, current_eval, predicted_at_current)
        proposed_point = proposed_point._replace(ll=ll_proposed)
        ratios = self._stage2_log_ratios(current_point, proposed_point, lq_f, lq_r)
        accepted, a2 = metropolis_accept(ratios.log_ratio_stage2, rng)
        # Stage 1 passed with probability a1, so this is unbiased for the plain MH acceptance probability.
        log_ratio = mh_log_ratio(ll_proposed + lp_proposed, ll_current + lp_current, lq_r, lq_f)
        if accepted:
            self.proposal.accept(move)
            schedule.remember(proposed, proposed_eval, proposed_point)  # the next step's current state
        return DelayedAcceptanceResult(
            proposed if accepted else current, accepted, a2, component, proposed, stage1=a1, stage2=a2,
            gp_sd=gp_sd, screened=True, adapt_prob=accept_probability(log_ratio) / a1,
            evaluation=proposed_eval, gp_learns=True,
        )

    def _speculate(self, current, current_eval, proposed, proposed_point, lq_f, lq_r, density, rng) -> None:
        """Evaluate the likely next exact evaluation ahead, on a worker or here (draws unchanged)."""
        where = self.prefetch.begin_round(proposed)
        if where is None:
            return
        schedule = self.schedule
        # The prediction at the current state that stage 2 makes next (cached as stage 2 would cache it);
        # the dry run's own predictions must not stay in the cache.
        current_point = schedule.cached(
            current, current_eval,
            lambda: surrogate_point(self.gp, current, current_eval.log_prior, current_eval.loglik),
        )
        with schedule.cache_kept():
            predicted = proposed_point._replace(ll=proposed_point.mu)
            ratios = self._stage2_log_ratios(current_point, predicted, lq_f, lq_r)
            # The predicted branch's guess: the stage-2 uniform is known, so the prediction misses only
            # where the GP's error straddles it.
            guess = predicted_guess(
                self, current, current_eval, proposed, proposed_point.log_prior, proposed_point.mu,
                ratios.log_ratio_stage2, Scout(density), rng,
            )
        if guess is not None:
            self.prefetch.add(guess, where)

    def screened_step_without_speculation(self, current, current_eval, density, rng):
        """:meth:`_screened_step` as the chain runs it, without speculating (a dry run's step)."""
        prefetch, self.prefetch = self.prefetch, None
        try:
            return self._screened_step(current, current_eval, density, rng)
        finally:
            self.prefetch = prefetch

    def _stage2_log_ratios(self, current_point, proposed_point, log_q_forward, log_q_reverse):
        """Both stage-1 log probabilities and the stage-2 log ratio, from one surrogate (a hook for the
        negative controls of the tests)."""
        return delayed_acceptance_log_ratios(
            current_point, proposed_point, log_q_forward, log_q_reverse, self.current_value
        )
