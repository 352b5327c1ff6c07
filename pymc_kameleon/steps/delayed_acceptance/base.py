r"""GP-surrogate delayed acceptance in PyMC: what the MH and MALA steps share.

For a posterior :math:`\pi(\theta) \propto e^{\ell(\theta)} p(\theta)` whose log-likelihood
:math:`\ell` (the model's observed terms plus its potentials) is expensive, a Gaussian process
over the exact evaluations of :math:`\ell` screens proposals (Benavoli, Wyse & White, "Gaussian
Processes to speed up MCMC with automatic exploratory-exploitation effect"). With :math:`x` the
current state, :math:`y \sim Q(\cdot \mid x)` the proposal and :math:`\mu, \sigma^2` the GP's
predictive mean and variance:

Stage 1 (paper eq. 4), free: the GP is marginalised (log-normal mean), so

.. math::
    \alpha_1(x, y) = 1 \wedge \frac{e^{\mu(y) + \sigma^2(y)/2}\, p(y)\, Q(x \mid y)}
                                  {e^{\ell(x)}\, p(x)\, Q(y \mid x)},

which rewards proposals where the GP is uncertain (exploration).

Stage 2 (paper eq. 6), paid: only survivors of stage 1 get an exact :math:`\ell(y)`, and

.. math::
    \alpha_2(x, y) = 1 \wedge \frac{e^{\ell(y)} p(y)\, Q(x \mid y)\, \alpha_1(y, x)}
                                  {e^{\ell(x)} p(x)\, Q(y \mid x)\, \alpha_1(x, y)}.

The prior is always exact. Because one surrogate (the GP before the new evaluation is added)
gives both :math:`\alpha_1(x, y)` and :math:`\alpha_1(y, x)`, each step is reversible with respect
to the exact posterior, however poor the GP is. The new evaluation joins the GP only *after*
the step's decision. The ratios live in :mod:`pymc_kameleon.core.delayed_acceptance.ratios`, the GP's
training schedule in :mod:`pymc_kameleon.core.gp.training`, the scale-free base proposal in
:mod:`pymc_kameleon.core.scale_free`; this module runs them inside PyMC.
"""

from __future__ import annotations

import difflib
import inspect
import math
import warnings

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars

from pymc_kameleon.core.delayed_acceptance.ratios import CURRENT_VALUES
from pymc_kameleon.core.gp.options import GPTrainingOptions
from pymc_kameleon.core.gp.surrogate import GPSurrogate
from pymc_kameleon.core.gp.training import (
    MAX_STAGE1_ACCEPT,
    MIN_STAGE1_ACCEPT,
    SCREENING_CHECK_STEPS,
    GPTrainingSchedule,
)
from pymc_kameleon.core.mh import metropolis_accept, mh_log_ratio
from pymc_kameleon.core.proposals import Move
from pymc_kameleon.core.scale_free import ScaleFreeKameleon
from pymc_kameleon.core.validation import check_number, check_probability
from pymc_kameleon.steps.base import AdaptiveStep, continuous_value_vars, coordinate_names
from pymc_kameleon.steps.reporting import StepWarnings, StuckAfterTuning, warn_after_tuning
from pymc_kameleon.steps.target_density import GradientUnavailableError, SplitTargetDensity

__all__ = ["GPDelayedAcceptanceStep"]


class GPDelayedAcceptanceStep(AdaptiveStep):
    """Base of the GP delayed-acceptance steps: options, the split target, the GP's schedule, the
    scale-free base proposal, the warm-up and the statistics.

    A subclass implements ``_delayed_acceptance_step(x, cur, info)`` (a screened two-stage move)
    and may override ``_exact_step`` (the warm-up move) and ``_base_proposal``. Its ``__init__``
    takes its own options and passes the shared ones (documented in
    :class:`~pymc_kameleon.GPDelayedAcceptanceMH`) through ``**options``.
    """

    stats_dtypes_shapes = {
        **AdaptiveStep.stats_dtypes_shapes,
        # (`accept` is the probability of accepting this proposal given the stage-1 outcome: alpha2
        # if stage 1 passed, else 0; in the exact warm-up, the plain MH probability. Its mean is the
        # overall acceptance rate E[alpha1 alpha2].)
        "stage1_accept": (np.float64, []),
        "stage2_accept": (np.float64, []),
        "exact_eval": (bool, []),
        "n_exact_evals": (np.int64, []),
        "gp_sd": (np.float64, []),
        "gp_points": (np.int64, []),
        "screened": (bool, []),
        "gp_refit": (bool, []),
    }
    _default_target_accept = 0.234
    _default_initial_scale = 1.0
    _uses_prior_gradient = False
    # Derivative observations in the GP (MALA's option; the MH step's GP has values only).
    gradient_observations = False

    def __init__(
        self,
        vars=None,
        *,
        target_accept=None,
        initial_points=None,
        max_points=None,
        fit_hyperparameters=True,
        hyperparameters=None,
        fit_max_points=None,
        noise_variance="auto",
        current_value="exact",
        gp_after_tuning="grow",
        jitter=1e-8,
        initial_scale=None,
        adapt_interval=100,
        learning_rate=1.0,
        history_size=10_000,
        model=None,
        initial_point=None,
        compile_kwargs=None,
        rng=None,
        blocked=True,
    ):
        model = pm.modelcontext(model)
        name = type(self).__name__
        target_accept = self._default_target_accept if target_accept is None else target_accept
        initial_scale = self._default_initial_scale if initial_scale is None else initial_scale
        check_probability("target_accept", target_accept)
        if current_value not in CURRENT_VALUES:
            raise ValueError(f"current_value must be one of {CURRENT_VALUES}, got {current_value!r}.")
        check_number("initial_scale", initial_scale, minimum=0)
        check_number("adapt_interval", adapt_interval, integer=True, minimum=0)
        check_number("learning_rate", learning_rate, minimum=0)
        check_number("history_size", history_size, integer=True, minimum=1)

        if initial_point is None:
            initial_point = model.initial_point()
        vars = continuous_value_vars(vars, model, name)
        self.dim = d = int(sum(np.size(initial_point[v.name]) for v in vars))
        self._coordinate_names = coordinate_names(vars, initial_point)
        target = self._split_target(model, vars, initial_point, compile_kwargs)
        if target.likelihood_outside_vars:
            message = outside_vars_message(name, vars, target.likelihood_outside_vars, model)
            warnings.warn(message, UserWarning, stacklevel=3)
        self._gp_options = GPTrainingOptions.from_user(
            d,
            gradients=self.gradient_observations,
            noisy_likelihood=target.has_estimates,
            initial_points=initial_points,
            max_points=max_points,
            fit_max_points=fit_max_points,
            fit_hyperparameters=fit_hyperparameters,
            hyperparameters=hyperparameters,
            noise_variance=noise_variance,
            jitter=jitter,
            gp_after_tuning=gp_after_tuning,
        )
        options = self._gp_options
        self.loglik_gradient = options.gradients
        self.fit_noise = options.fit_noise
        self.noise_variance_spec = noise_variance
        self.target_accept = float(target_accept)
        self.initial_points = options.initial_points
        self.max_points = options.max_points
        self.fit_max_points = options.fit_max_points
        self.fit_hyperparameters = fit_hyperparameters
        self.hyperparameters = None if hyperparameters is None else dict(hyperparameters)
        self.current_value = current_value
        self.gp_after_tuning = gp_after_tuning
        self.jitter = options.jitter
        self.initial_scale = float(initial_scale)
        self.adapt_interval = int(adapt_interval)
        self.learning_rate = float(learning_rate)
        self.history_size = int(history_size)
        self._join_pymc(vars, target, blocked, rng)

    @classmethod
    def _check_option_names(cls, options):
        """A subclass's ``**options`` must be this class's keywords: a TypeError naming the step the
        user called (not this base class) and the closest of its keywords, for a misspelt one."""
        shared = [n for n in inspect.signature(GPDelayedAcceptanceStep.__init__).parameters if n != "self"]
        own = [n for n, p in inspect.signature(cls.__init__).parameters.items() if p.kind is p.KEYWORD_ONLY]
        for name in options:
            if name not in shared:
                close = difflib.get_close_matches(name, [*shared, *own], n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}{hint}")

    def _split_target(self, model, vars, initial_point, compile_kwargs) -> SplitTargetDensity:
        name = type(self).__name__
        try:
            return SplitTargetDensity(
                model, vars, initial_point, compile_kwargs, name,
                prior_gradient=self._uses_prior_gradient, loglik_gradient=self.gradient_observations,
            )
        except GradientUnavailableError as err:
            # `from None`: the message names PyTensor's error; its chained traceback only buries it.
            if err.what == "prior":
                raise ValueError(
                    f"{name} needs the gradient of the log prior for its Langevin drift: {err} "
                    "Use GPDelayedAcceptanceMH, which needs no gradients."
                ) from None
            raise ValueError(
                f"{name} needs the gradient of the log-likelihood for the GP's derivative "
                f"observations, and this model has none: {err} Use GPDelayedAcceptanceMH, which "
                f"needs no gradients, or {name}(gradient_observations=False), which drives the "
                "Langevin drift by the gradient of a GP fitted to log-likelihood values only."
            ) from None

    # ------------------------------------------------------------------ state
    def _reset_chain_state(self):
        """Forget everything learned in a previous chain (GP, proposal scale, counters)."""
        self._warnings = StepWarnings()
        self._stuck = StuckAfterTuning()
        name = type(self).__name__
        self._schedule = GPTrainingSchedule(
            self._gp_options,
            warn=lambda message, category, stacklevel: self._warnings.warn(
                f"{name}: {message}", category, stacklevel=stacklevel
            ),
        )
        self._seeded = False  # whether the chain's starting point is in the GP
        self._target.reset()
        self._evals_at_reset = self._target.n_evals
        self._proposal = self._base_proposal()
        self.default_tune_steps = self._proposal.required_tune_steps()

    def _base_proposal(self, kernel=None, am_weight=1.0, **kameleon_options) -> ScaleFreeKameleon:
        r"""The scale-free adaptation: a coordinate scan, then windows that learn :math:`m`, :math:`C`
        and :math:`\lambda`. By default its Adaptive Metropolis component :math:`\mathcal N(x, \lambda^2 C)`
        alone (MALA takes :math:`\lambda^2 C` as its Langevin covariance).
        """
        return ScaleFreeKameleon(
            self.dim,
            kernel,
            target_accept=self.target_accept,
            learning_rate=self.learning_rate,
            first_window=self.adapt_interval,
            am_weight=am_weight,
            history_size=self.history_size,
            initial_scan_scale=self.initial_scale,
            **kameleon_options,
        )

    def stop_tuning(self):
        """End of tuning: a last hyperparameter fit if the training set grew, then freeze everything."""
        schedule = self._schedule
        tuned = self.tune and self._proposal.tune_steps > 0
        if tuned and schedule.paused:
            if schedule.pause_reason == "walking":
                why = (
                    "tuning ended while the chain was still walking toward the posterior: its last "
                    "adaptation window ended early, because its draws' spread disagreed with the learned "
                    "covariance by more than a factor 3 in sd, so the step took exact steps and its GP has "
                    f"not screened near the posterior yet ({schedule.n_walking_pauses} such window(s) in "
                    "tuning)"
                )
            else:
                why = (
                    "tuning ended in an exact fallback: the GP's stage 1 had rejected nearly every "
                    f"proposal (acceptance below {MIN_STAGE1_ACCEPT:.0%} over {SCREENING_CHECK_STEPS} "
                    f"steps; {schedule.n_pauses} fallback(s) in tuning), so its fit near the posterior "
                    "is untested"
                )
            self._end_warm_up()  # screen from here on
            self._warnings.warn(
                f"{type(self).__name__}: {why}. Increase `tune`, or start closer to the posterior.",
                UserWarning,
                stacklevel=2,
            )
        if tuned:
            schedule.end_tuning(self.rng)
            if schedule.warm:
                self._warnings.warn(
                    f"{type(self).__name__}: tuning ended after {self._proposal.tune_steps} steps, still in "
                    f"the exact warm-up ({self.gp.n_points} of initial_points={self.initial_points} GP "
                    "points). Every step stays exact until the GP holds initial_points points; it then "
                    "screens with the warm-up's heuristic hyperparameters, never fitted. Increase `tune` "
                    "or lower `initial_points`.",
                    UserWarning,
                    stacklevel=2,
                )
        if tuned and not schedule.warm and schedule.recent_stage1_rate() >= MAX_STAGE1_ACCEPT:
            ell = ", ".join(f"{v:.2g}" for v in self.gp.lengthscales)
            remedy = (
                "Increase `tune`, or pass `hyperparameters=` (with `fit_hyperparameters=False`)."
                if self.fit_hyperparameters
                else "Let them be fitted (`fit_hyperparameters=True`), or pass other `hyperparameters=`."
            )
            self._warnings.warn(
                f"{type(self).__name__}: at the end of tuning the GP's stage 1 passed "
                f"{schedule.recent_stage1_rate():.0%} of the last {SCREENING_CHECK_STEPS} proposals, so it "
                "screens almost nothing and nearly every proposal costs an exact evaluation (the chain "
                f"is still exact). Its length scales are [{ell}] "
                + ("posterior sds" if self.gp.whitening is not None else "(model units)")
                + f" and its signal variance {self.gp.signal_variance:.3g}: length scales far below the "
                f"spread of the training points mean it fits noise. {remedy}",
                UserWarning,
                stacklevel=2,
            )
        super().stop_tuning()
        if tuned:
            names = self._coordinate_names
            warn_after_tuning(type(self).__name__, self._proposal, self.target_accept, self._warnings, names)
        # The window tuning ended in is not ended: a new C would send the proposals where the GP has
        # no points, with no screened tuning steps left to find out (a far-start logistic regression,
        # GP-DA MALA: stage 1 then rejected every proposal after tuning, silently).
        if self._proposal.end_tuning(self.rng, end_window=False):
            schedule.set_whitening(self._proposal.whitening)

    # ------------------------------------------------------------ properties
    @property
    def gp(self) -> GPSurrogate:
        """The GP surrogate of the log-likelihood (of the chain run last)."""
        return self._schedule.gp

    @property
    def gp_schedule(self) -> GPTrainingSchedule:
        """The GP with its training schedule (warm-up, floor, fits, forgetting) of the chain run last."""
        return self._schedule

    @property
    def n_exact_evals(self) -> int:
        """Exact likelihood evaluations in the current chain, including the one at its start."""
        return self._target.n_evals - self._evals_at_reset

    @property
    def scale_free_proposal(self) -> ScaleFreeKameleon:
        """The scale-free adaptation: learned mean and covariance, scan step sizes, scales."""
        return self._proposal

    # ------------------------------------------------------------ the GP's schedule
    def _add_training_point(self, theta, ll, grad=None) -> bool:
        return self._schedule.add(theta, ll, grad, tune=self.tune)

    def _end_warm_up(self) -> bool:
        typical_step = self._proposal.typical_scale
        return self._schedule.end_warm_up(tune=self.tune, typical_step=typical_step, rng=self.rng)

    def _after_exact_evaluation(self) -> bool:
        proposal = self._proposal
        return self._schedule.after_exact_evaluation(
            tune=self.tune,
            scanning=proposal.phase == "scan",
            window=proposal.window,
            typical_step=proposal.typical_scale,
            rng=self.rng,
        )

    def _adapt(self, y_new, adapt_value, component=None) -> bool:
        """Adapt the base proposal; at a window end, update the GP. Returns whether it refitted.

        ``component`` names the scale the step's move used (default: the base proposal's last move).
        """
        if not self.tune:
            return False
        window = self._proposal.window
        target = self._target
        changed = self._proposal.adapt(
            y_new,
            adapt_value,
            self.rng,
            component=component,
            log_density=target.current_exact_logp,  # without estimates, as for KameleonMetropolis
            gradient=target.current_gradient,
        )
        if self._proposal.window == window:
            return False
        if self._proposal.window_ended_early:
            self._schedule.pause_while_walking(self._proposal.window, 2 * self.adapt_interval)
        return self._schedule.window_ended(self._proposal.whitening if changed else None, self.rng)

    # ------------------------------------------------------------ the step
    def _propose(self, x) -> Move:
        """Draw from the base proposal (``move.feasible`` is False if the proposal is invalid)."""
        return self._proposal.propose(x, self.rng)

    def _exact_step(self, x, cur, info):
        """Warm-up: plain MH with the base proposal and an exact evaluation at its proposal."""
        move = self._propose(x)
        y, lq_f, lq_r = move.x, move.log_q_forward, move.log_q_reverse
        if not move.feasible:
            metropolis_accept(-math.inf, self.rng)
            return x, False, 0.0, None
        lp_y = self._target.prior(y)
        ev = self._target.evaluate(y, lp_y)
        accepted, prob = metropolis_accept(mh_log_ratio(ev.logp, cur.logp, lq_r, lq_f), self.rng)
        info["stage2"] = prob
        if accepted:
            self._proposal.accept(move)
        evaluated = (y, ev) if math.isfinite(ev.log_prior) else None
        return self._finish(x, y, accepted, ev), accepted, prob, evaluated

    def _stage1_then_exact(self, x, y, log_alpha1, prior, info):
        """Stage 1 (accept with :math:`\alpha_1`), then the exact evaluation of a survivor.

        Returns ``(evaluation, None)`` for a survivor whose log density is finite, else
        ``(None, result)`` with the step's result, a rejection (a non-finite one costs no stage 2).
        """
        passed, a1 = metropolis_accept(log_alpha1, self.rng)
        info["stage1"] = a1
        if not passed:
            return None, (x, False, 0.0, None)
        ev = self._target.evaluate(y, prior)
        if not (math.isfinite(ev.loglik) and math.isfinite(ev.logp)):
            info["stage2"] = 0.0
            metropolis_accept(-math.inf, self.rng)
            return None, (x, False, 0.0, (y, ev))
        return ev, None

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list]:
        x = q0.data
        schedule = self._schedule
        evals_before = self._target.n_evals
        estimates_before = self._target.n_estimates
        cur = self._target.current(x, q0.point_map_info, self.rng)
        refit = False
        if not self._seeded:
            # The starting point seeds the GP.
            self._seeded = True
            self._add_training_point(x, cur.loglik, cur.grad_exact_loglik)
            refit = self._after_exact_evaluation()
        info = {"stage1": 1.0, "stage2": math.nan, "gp_sd": math.nan, "screened": not schedule.warm}
        if schedule.warm:
            y_new, accepted, accept_prob, evaluated = self._exact_step(x, cur, info)
        else:
            y_new, accepted, accept_prob, evaluated = self._delayed_acceptance_step(x, cur, info)
        if evaluated is not None:
            y, ev = evaluated
            # Only now, after the decision, does the new evaluation join the GP.
            self._add_training_point(y, ev.loglik, ev.grad_exact_loglik)
            refit = self._after_exact_evaluation() or refit
        # The scale adapts to an unbiased estimate of the acceptance probability of plain MH on the
        # exact target (set by the step; the acceptance probability itself in the warm-up).
        refit = bool(self._adapt(y_new, info.get("adapt", accept_prob), info.get("component"))) or refit
        stats = {
            "accept": accept_prob,
            "accepted": float(accepted),
            "stage1_accept": info["stage1"],
            "stage2_accept": info["stage2"],
            "exact_eval": self._target.n_evals > evals_before,
            "n_exact_evals": self.n_exact_evals,
            "gp_sd": info["gp_sd"],
            "gp_points": self.gp.n_points,
            "screened": info["screened"],
            "gp_refit": refit,
            "tune": self.tune,
            "scaling": self._proposal.am_scale.value,
            "model_logp": self._target.current_logp,
        }
        stats.update(self._target.estimate_stats(estimates_before))
        if self.tune and info["screened"]:
            self._schedule.record_stage1(info["stage1"], self._proposal.window)
        self._check_stuck(accepted)
        self._warnings.attach(stats, "accept")  # with cores>1 they travel to the session this way
        return RaveledVars(y_new, q0.point_map_info), [stats]

    def _finish(self, x, y, accepted, evaluation):
        if accepted:
            self._target.accept(y, evaluation)
            return y
        return x

    def _stage2_log_ratios(self, current, proposal, *args):
        """Both stage-1 log probabilities and the stage-2 log ratio (a hook for tests)."""
        raise NotImplementedError


def outside_vars_message(step_name: str, vars, outside: list[str], model) -> str:
    """The warning for a GP-DA step whose likelihood also depends on variables other steps sample."""
    own = [model.values_to_rvs[v].name for v in vars]
    return (
        f"{step_name} samples {own}, but the likelihood also depends on {outside}, which other steps "
        "of the CompoundStep sample. Its GP learns the log-likelihood as a function of its own "
        "variables only, so every move of the others makes the GP's values stale: it fits noise, "
        "screens badly, and the chain can stall (a change-point model with a discrete change point: "
        "R-hat 1.3-1.9, one chain frozen). The draws stay exact but may not mix. Sample those "
        "variables with this step too if they are continuous, or use KameleonMetropolis for "
        f"{own}."
    )
