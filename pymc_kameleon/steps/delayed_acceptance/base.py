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
the step's decision. The move itself, PyMC-free, is
:class:`~pymc_kameleon.core.delayed_acceptance.kernel.DelayedAcceptanceKernel` (its ratios in
:mod:`pymc_kameleon.core.delayed_acceptance.ratios`, the GP's training schedule in
:mod:`pymc_kameleon.core.gp.training`, the base proposal's tuning in
:mod:`pymc_kameleon.core.adaptation.scale_free`); this module connects it to PyMC: options, the
compiled split target, per-chain state, statistics and warnings.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from dataclasses import dataclass

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars

from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.delayed_acceptance.kernel import DelayedAcceptanceKernel
from pymc_kameleon.core.delayed_acceptance.ratios import CURRENT_VALUES
from pymc_kameleon.core.gp.surrogate import GPSurrogate
from pymc_kameleon.core.gp.training import GPTrainingOptions, GPTrainingSchedule
from pymc_kameleon.core.linalg import one_blas_thread, same_array
from pymc_kameleon.core.validation import check_number, check_probability, unexpected_keyword_error
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.steps.base import AdaptiveStep
from pymc_kameleon.steps.chain import ChainState
from pymc_kameleon.steps.delayed_acceptance.checks import DelayedAcceptanceChecks
from pymc_kameleon.steps.population import TUNINGS
from pymc_kameleon.steps.reporting import (
    StepWarnings,
    delayed_acceptance_progressbar_config,
    delayed_acceptance_progressbar_update_functions,
    warn_after_tuning,
)
from pymc_kameleon.steps.split_density import GradientUnavailableError, SplitTargetDensity
from pymc_kameleon.steps.variables import (
    angle_coordinates,
    continuous_value_vars,
    coordinate_names,
    improper_prior_coordinates,
)

__all__ = ["DelayedAcceptanceChain", "GPDelayedAcceptanceStep"]



class GPDelayedAcceptanceStep(DelayedAcceptanceChecks, AdaptiveStep):
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
        "gp_sd": (np.float64, []),
        "gp_points": (np.int64, []),
        # The GP's fitted sd of the observation noise, in nats (0 for an exact likelihood): with a
        # PseudoMarginalPotential the noise of the log estimates, which should be about 0.8 or less.
        "gp_noise_sd": (np.float64, []),
        "screened": (bool, []),
        "gp_refit": (bool, []),
        # The share of steps with an exact evaluation over about the last 100 (the progress bar shows it).
        "recent_exact_share": (np.float64, []),
    }
    _progressbar_config = staticmethod(delayed_acceptance_progressbar_config)
    _make_progressbar_update_functions = staticmethod(delayed_acceptance_progressbar_update_functions)
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
        tuning="pooled",
        start=None,
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
        check_number("history_size", history_size, integer=True, minimum=2, strict=False)
        if tuning not in TUNINGS:
            raise ValueError(f"tuning must be one of {TUNINGS}, got {tuning!r}.")

        if initial_point is None:
            initial_point = model.initial_point()
        vars = continuous_value_vars(vars, model, name)
        self.dim = d = int(sum(np.size(initial_point[v.name]) for v in vars))
        self._coordinate_names = coordinate_names(vars, initial_point, model)
        self._improper_coordinates = improper_prior_coordinates(vars, initial_point, model)
        self._angle_columns = angle_coordinates(vars, initial_point, model)
        target = self._split_target(model, vars, initial_point, compile_kwargs)
        if target.likelihood_outside_vars:
            message = outside_vars_message(name, vars, target.likelihood_outside_vars, model)
            warnings.warn(message, KameleonWarning, stacklevel=3)
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
        self.tuning = tuning
        self._join_pymc(vars, target, blocked, rng, model=model, start=start)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            defaults = {"target_accept": cls._default_target_accept,
                        "initial_scale": cls._default_initial_scale}
            cls.__init__.__signature__ = _signature_with_shared_options(cls.__init__, defaults)

    @classmethod
    def _check_option_names(cls, options):
        """A subclass's ``**options`` must be this class's keywords: a TypeError naming the step the
        user called (not this base class) and the closest of its keywords, for a misspelt one."""
        shared = [n for n in inspect.signature(GPDelayedAcceptanceStep.__init__).parameters if n != "self"]
        own = [n for n, p in inspect.signature(cls.__init__).parameters.items() if p.kind is p.KEYWORD_ONLY]
        foreign = getattr(cls, "_foreign_options", {})
        for name in options:
            if name in foreign:
                raise TypeError(f"{cls.__name__}() takes no {name!r}: {foreign[name]}")
            if name not in shared:
                raise unexpected_keyword_error(cls.__name__, name, [*shared, *own])

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
        if self.pooled:  # a population's chains are shallow copies of one step: each its own state
            self._target = self._target.fork()
        chain_warnings = StepWarnings()
        name = type(self).__name__
        schedule = GPTrainingSchedule(
            self._gp_options,
            warn=lambda message, category, level: chain_warnings.warn(f"{name}: {message}", category, level),
        )
        self._target.reset()
        adaptation = self._new_adaptation()
        kernel = self._new_kernel(adaptation, schedule)
        self._chain = DelayedAcceptanceChain(
            kernel=kernel, evals_at_reset=self._target.n_evals, warnings=chain_warnings
        )
        self.default_tune_steps = self._default_tune_steps(adaptation)

    def _default_tune_steps(self, adaptation: ScaleFreeAdaptation) -> int:
        """PyMC 6's ``tune`` where ``pm.sample`` is given none: the minimum, the scan and three windows."""
        return adaptation.required_tune_steps()

    @property
    def _start_adaptation(self) -> ScaleFreeAdaptation:
        return self._chain.kernel.adaptation

    def _new_adaptation(self, kernel=None, **kameleon_options) -> ScaleFreeAdaptation:
        r"""The scale-free adaptation of the base proposal: a coordinate scan, then windows that learn
        :math:`m`, :math:`C` and :math:`\lambda` (and, with a ``kernel``, the Kameleon component's
        :math:`Z`)."""
        return ScaleFreeAdaptation(
            self.dim,
            kernel,
            target_accept=self.target_accept,
            learning_rate=self.learning_rate,
            first_window=self.adapt_interval,
            history_size=self.history_size,
            initial_scan_scale=self.initial_scale,
            angle_columns=self._angle_columns,
            **kameleon_options,
        )

    def _new_kernel(self, adaptation: ScaleFreeAdaptation, schedule: GPTrainingSchedule):
        """The chain's delayed-acceptance kernel (a subclass's move) on ``adaptation`` and ``schedule``."""
        raise NotImplementedError

    def stop_tuning(self):
        """End of tuning: a last hyperparameter fit if the training set grew, then freeze everything."""
        kernel = self._chain.kernel
        schedule, adaptation = kernel.schedule, kernel.adaptation
        tuned = self.tune and adaptation.tune_steps > 0
        if tuned and schedule.paused:
            message = self._paused_message(schedule)  # read before the warm-up ends
            kernel.end_warm_up(tune=self.tune)  # screen from here on
            self._warnings.warn(message, KameleonWarning, stacklevel=2)
        if tuned:
            # Ending tuning ends the scan too: what it was is read before.
            in_scan, planned = adaptation.phase == "scan", adaptation.state.scan_steps
            schedule.end_tuning()
            for message in (
                self._ended_warm_message(adaptation, schedule, in_scan, planned),
                self._screens_nothing_message(schedule),
                self._noisy_estimates_message(schedule),
            ):
                if message is not None:
                    self._warnings.warn(message, KameleonWarning, stacklevel=2)
        super().stop_tuning()
        if tuned:
            names = self._coordinate_names
            outside = self._target.likelihood_outside_vars
            self._chain.draws_agreement = warn_after_tuning(
                type(self).__name__, adaptation, self.target_accept, self._warnings, names,
                across_chains=self._speaks_for_population,
                differentiable=lambda: self._target.differentiable, chain=self._chain_index,
                gradient_split=functools.partial(self._target.gradient_split, gp_likelihood=True),
                improper=self._improper_coordinates, smc_start=self._smc_start is not None,
                # Other steps' moves change the likelihood under the GP, whose stage 1 then misjudges
                # proposals (a change-point model beside a discrete step: an acceptance estimate of 1.04).
                accept_remedy=(
                    f"the likeliest cause is the GP gone stale, since the likelihood depends on {outside}, "
                    "which other steps sample; more tuning does not cure that (see the warning given when "
                    "the step was made)"
                    if outside else None
                ),
            )
            self._start_left_regions_check(adaptation)
        kernel.freeze(self.rng)

    # ------------------------------------------------------------ properties
    @property
    def gp(self) -> GPSurrogate:
        """The GP surrogate of the log-likelihood (of the chain run last)."""
        return self._last_run()._chain.kernel.gp

    @property
    def gp_schedule(self) -> GPTrainingSchedule:
        """The GP with its training schedule (warm-up, floor, fits, forgetting) of the chain run last."""
        return self._last_run()._chain.kernel.schedule

    @property
    def kernel(self) -> DelayedAcceptanceKernel:
        """The delayed-acceptance move of the chain run last (PyMC-free; GP, schedule, base proposal)."""
        return self._last_run()._chain.kernel

    @property
    def n_exact_evals(self) -> int:
        """Exact likelihood evaluations in the current chain, including the one at its start."""
        run = self._last_run()
        return run._target.n_evals - run._chain.evals_at_reset

    @property
    def scale_free_adaptation(self) -> ScaleFreeAdaptation:
        """The base proposal's scale-free adaptation (learned mean and covariance, scan step sizes,
        scales)."""
        return self._last_run()._chain.kernel.adaptation

    @property
    def scale_free_proposal(self):
        """The base proposal of the chain run last, built from the adaptation's learned state."""
        return self._last_run()._chain.kernel.proposal

    # ------------------------------------------------------------ the step
    @one_blas_thread
    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list]:
        current = q0.data
        kernel: DelayedAcceptanceKernel = self._chain.kernel
        target = self._target
        evals_before = target.n_evals
        estimates_before = target.n_estimates
        current, current_eval, moved = self._current_evaluation(current, q0.point_map_info)
        if moved:
            kernel.schedule.add(current, current_eval.loglik, current_eval.grad_exact_loglik, tune=self.tune)
        self._warn_if_untuned(kernel.adaptation)
        result = kernel.step(current, current_eval, target, self.rng, tune=self.tune)
        if result.accepted:
            target.accept(result.state, result.evaluation)
        self._refresh_sticky_estimate(result.accepted)
        # Only now, after the decision, does the new evaluation join the GP, and the base proposal adapt
        # to an unbiased estimate of the acceptance probability of plain MH on the exact target.
        population = self._population_states() if self.tune else None
        window = kernel.adaptation.window
        probe = self._probe_independence(kernel.adaptation, kernel.proposal, result.state)
        if probe is not None and math.isfinite(probe[1].loglik):  # an exact value: the GP learns it too
            point, evaluation = probe
            kernel.schedule.add(point, evaluation.loglik, evaluation.grad_exact_loglik, tune=True)
        refit = kernel.learn(
            current, result, self.rng, tune=self.tune,
            log_density=target.current_exact_logp,  # without estimates, as for KameleonMetropolis
            gradient=target.current_gradient,
            population=population,
        )
        new_state, rescued = result.state, False
        jump = self._rescue(target.current_exact_logp, population, kernel.adaptation, window, self.rng)
        if jump is not None:
            new_state, evaluation = jump
            kernel.schedule.add(new_state, evaluation.loglik, evaluation.grad_exact_loglik, tune=True)
            rescued = True
        moved = result.accepted and not same_array(result.proposed, current)  # as KameleonMetropolis's
        stats = {
            "accept": result.accept_prob,
            "accepted": float(moved),
            "stage1_accept": result.stage1,
            "stage2_accept": result.stage2,
            "exact_eval": target.n_evals > evals_before,
            "gp_sd": result.gp_sd,
            "gp_points": kernel.gp.n_points,
            "gp_noise_sd": math.sqrt(max(kernel.gp.noise_variance, 0.0)),
            "screened": result.screened,
            "gp_refit": bool(result.refit or refit),
            "tune": self.tune,
            "scaling": kernel.adaptation.state.am_scale.value,
            "model_logp": target.current_model_logp,
        }
        self._add_running_stats(stats, target.n_evals - evals_before)
        stats["recent_exact_share"] = self._chain.recent.exact
        self._add_estimate_stats(stats, target, estimates_before)
        stats.update(self._extra_stats(result))
        if self.pooled:
            stats["rescued"] = rescued
        self._check_draws(moved, target.n_estimates > estimates_before)
        self._warnings.attach(stats, "accept")  # with cores>1 they travel to the session this way
        return RaveledVars(new_state, q0.point_map_info), [stats]

    def _extra_stats(self, result) -> dict:
        """A subclass's own statistics after a step whose outcome is ``result``."""
        return {}


@dataclass(eq=False, kw_only=True)
class DelayedAcceptanceChain(ChainState):
    """One chain's state in a GP delayed-acceptance step (and the ``warnings`` and ``stuck`` of every step).

    Attributes
    ----------
    kernel : DelayedAcceptanceKernel
        The move with its GP, training schedule and base adaptation (PyMC-free).
    evals_at_reset : int
        The target's likelihood evaluations when the chain started (``n_exact_evals`` counts from there).
    """

    kernel: DelayedAcceptanceKernel
    evals_at_reset: int


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


def _signature_with_shared_options(init, defaults: dict) -> inspect.Signature:
    """A step's ``__init__(vars=None, *, own..., **options)`` with ``**options`` spelt out as the shared
    keywords of :class:`GPDelayedAcceptanceStep` it passes on, so that ``help()`` and the API pages list
    every option with its default (``defaults``: the step's own, where the shared signature's None
    stands for it)."""
    signature = inspect.signature(init)
    own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    if len(own) == len(signature.parameters):
        return signature
    names = {p.name for p in own}
    shared = [
        p.replace(default=defaults.get(p.name, p.default))
        for p in inspect.signature(GPDelayedAcceptanceStep.__init__).parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.name not in names
    ]
    return signature.replace(parameters=[*own, *shared])
