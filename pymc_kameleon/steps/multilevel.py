r"""Multilevel delayed acceptance as a PyMC step: ``pm.sample(step=MLDA(coarse_models=[coarse]))``.

The user's model (in context) is the finest level; ``coarse_models`` are cheaper models of the same
free variables, coarsest first, as PyMC's removed ``MLDA`` step took them. The move, PyMC-free, is
:class:`~pymc_kameleon.core.multilevel.MultilevelDelayedAcceptance`; its base proposal at the coarsest
level is the package's scale-free one (a coordinate scan, then the Adaptive Metropolis walk with the
independence component where it pays), tuned on the coarsest level's Metropolis-Hastings steps and
frozen after tuning. This module connects it to PyMC: the levels' compiled densities, the checks of
the coarse models, per-chain state and statistics.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars

from pymc_kameleon.core.adaptation.gaussian_fit import bulk_log_density_range
from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.adaptation.state import TuningDraw
from pymc_kameleon.core.gp.options import GPTrainingOptions
from pymc_kameleon.core.kameleon.scale_free import ScaleFreeProposal
from pymc_kameleon.core.linalg import same_array
from pymc_kameleon.core.multilevel import LevelPoint, MultilevelDelayedAcceptance
from pymc_kameleon.core.validation import check_independence_weight, check_number, check_probability
from pymc_kameleon.steps.base import AdaptiveStep, ChainState, continuous_value_vars, coordinate_names
from pymc_kameleon.steps.multilevel_gp import GPLevel, SurrogateLevel
from pymc_kameleon.steps.multilevel_levels import (
    CoarseLevel,
    ErrorModel,
    checked_coarse_models,
    checked_gp_positions,
    checked_rates,
    coarse_level,
    corrected_names,
    fine_outputs,
)
from pymc_kameleon.steps.reporting import STUCK_DRAWS, warn_after_tuning
from pymc_kameleon.steps.target_density import Evaluation, TargetDensity, describe_point

__all__ = ["LOW_FINE_ACCEPTANCE", "MLDA"]

#: Below this share of accepted subchain ends among the finest level's last FINE_DECISIONS_KEPT decisions
#: in tuning, MLDA warns (benchmarks/mlda_bias.py: at 0.16, a coarse posterior 2 sds off, MLDA made a
#: fourteenth of KameleonMetropolis's ESS per fine evaluation; at 0.47, 1 sd off, half).
LOW_FINE_ACCEPTANCE = 0.2
# Fine evaluations a chain spends after tuning where a coarse density was NaN or -inf, to tell a coarse model
# that fails where the fine posterior has mass (a wrong answer, silently) from one that fails only in the
# tails or where the fine density is zero too.
_FAILURE_CHECKS = 10
FINE_DECISIONS_KEPT = 100


class MLDA(AdaptiveStep):
    r"""Multilevel delayed acceptance (Lykkegaard et al. 2023) with the user's coarse models.

    Each iteration runs a subchain of ``subsampling_rates[-1]`` steps on the next coarser level (each
    of them such a step itself, down to the coarsest level, whose steps are Metropolis-Hastings with
    the scale-free adaptive proposal) and accepts its end :math:`y` from :math:`x` with

    .. math::
        \alpha = 1 \wedge \frac{\pi_L(y)\, \pi_{L-1}(x)}{\pi_L(x)\, \pi_{L-1}(y)},

    so the chain is exact for the model in context (:math:`\pi_L`) whatever the coarse models are:
    a biased coarse model costs acceptance, not correctness. Every subchain end that moved costs one
    fine evaluation (accepted or not), so at most one per iteration (in a ``CompoundStep``, one more
    whenever another step changed a variable of the model: the current state's density changes too).

    Parameters
    ----------
    vars : list of variables, optional
        The continuous free variables MLDA samples (default: all of them). The others (discrete
        variables, or ones given to another step) are left to the other steps of PyMC's
        ``CompoundStep``; every level reads their current values.
    coarse_models : list of pm.Model or GPLevel
        Required. Cheaper models with the same free variables as the model in context (all of them:
        names, shapes and transforms), coarsest (cheapest) first.
        A :class:`~pymc_kameleon.GPLevel` above a coarse model (``[coarse, GPLevel()]``) adds a level
        whose density is the coarse one corrected by a GP of the next finer level's excess over it,
        learned during tuning and frozen after (:mod:`pymc_kameleon.steps.multilevel_gp`).
    subsampling_rates : int or list of int, default 5
        Steps of each coarse level's subchain per proposal to the next finer level (one per coarse
        model, or one number for all).
    randomize_lengths : bool, default False
        Draw each subchain's length uniformly from 1 to twice the rate minus 1 (same mean), which
        avoids a periodic subchain; exact either way.
    adaptive_error_model : bool, default False
        Correct each coarse level's bias (:mod:`pymc_kameleon.steps.multilevel_levels`): every observed
        ``pm.Normal`` that all levels have under one name and shape gets, at each coarse level, its mean
        :math:`F_\ell(\theta)` moved by :math:`\mu_{B,\ell}`, an estimate of :math:`F_L - F_\ell`
        learned during tuning: the sum over the levels from :math:`\ell` up of the mean difference
        between adjacent models, :math:`F_{k+1} - F_k`, over the last points where the fine model was
        evaluated (:math:`k + 1 = L`) or at the middle level's chain's states (one forward run of each
        of the two models per record, one record per level and iteration, counted in ``logp_evals``
        and ``level{k}_logp_evals``); frozen after tuning, so the chain is exact.
    error_covariance : bool, default False
        With ``adaptive_error_model``: also add the differences' covariance :math:`\Sigma_{B,\ell}` to
        the corrected observations' noise covariance at each coarse level, as the paper does (all
        corrected observations then form one multivariate normal: a Cholesky factorisation of that
        size per coarse evaluation).
    target_accept : float, default 0.234
        Acceptance rate the coarsest level's Adaptive Metropolis scale is tuned to.
    independence_weight : float, default 0.5
        Weight of independent draws from a Student-t fitted to the coarsest level's tuning in the base
        proposal, used only where tuning measured that they pay (as
        :class:`~pymc_kameleon.KameleonMetropolis`'s); 0 turns them off.
    adapt_interval : int, default 100
        Length of the base proposal's first adaptation window after its coordinate scan, in
        coarsest-level steps; each later window is twice the previous one.
    learning_rate : float, default 1.0
        Robbins-Monro gain :math:`\rho_0` of the base proposal's scale (:math:`\rho_0 (t+1)^{-0.6}` at
        coarsest-level tuning step :math:`t`).
    history_size : int, default 10000
        Most coarsest-level tuning states an adaptation window keeps (evenly thinned beyond that).
    start : {"search", "initial_point"}, default "search"
        Search for a start before tuning, on the coarsest level's density (cheap).
    model, initial_point, compile_kwargs, rng, blocked
        As for PyMC's steps.

    Notes
    -----
    The model in context may have a :class:`~pymc_kameleon.PseudoMarginalPotential` (the coarse models
    may not): the current state's estimate is kept until a proposal is accepted (pseudo-marginal MH with
    the coarse subchain as its proposal, so exact), and ``loglik_estimate`` and ``estimator_calls`` are
    added to the statistics.

    Tuning is per chain. ``accept`` is the finest level's acceptance probability of its proposal, 1
    when the subchain never moved (its end is the current state); ``accepted`` says whether the state
    moved. The statistics ``logp_evals`` and ``cumulative_logp_evals`` count the
    finest level's evaluations (the expensive ones); per coarse level ``k`` (0 the coarsest),
    ``level{k}_logp_evals`` counts its evaluations in the step (those made when tuning ends, in the first
    draw's), ``level{k}_accept_rate`` is the share of
    its steps that moved, and ``level{k}_subchain_length`` the length of its last subchain.
    """

    _default_tuning = "per_chain"
    name = "mlda"

    def __init__(
        self,
        vars=None,
        *,
        coarse_models=None,
        subsampling_rates=5,
        randomize_lengths: bool = False,
        adaptive_error_model: bool = False,
        error_covariance: bool = False,
        target_accept: float = 0.234,
        independence_weight: float = 0.5,
        adapt_interval: int = 100,
        learning_rate: float = 1.0,
        history_size: int = 10_000,
        start: str = "search",
        model=None,
        initial_point=None,
        compile_kwargs=None,
        rng=None,
        blocked: bool = True,
    ):
        # MLDA([coarse]), as PyMC's removed step took it. (PyMC's BlockedStep.__new__ reads the first
        # positional argument as `vars` and pickles it so; this one place reads it as the coarse models.)
        if _are_models(vars) and coarse_models is None:
            vars, coarse_models = None, vars
        model = pm.modelcontext(model)
        check_probability("target_accept", target_accept)
        check_independence_weight(independence_weight)
        check_number("adapt_interval", adapt_interval, integer=True, minimum=1, strict=False)
        check_number("learning_rate", learning_rate, minimum=0)
        check_number("history_size", history_size, integer=True, minimum=2, strict=False)
        specs = checked_coarse_models(coarse_models, model)
        checked_gp_positions(specs)
        coarse_models = [spec for spec in specs if isinstance(spec, pm.Model)]
        self.subsampling_rates = checked_rates(subsampling_rates, len(specs))
        switches = {"randomize_lengths": randomize_lengths, "adaptive_error_model": adaptive_error_model}
        for name, value in switches.items():
            if not isinstance(value, bool | np.bool_):
                raise ValueError(f"MLDA: {name} must be True or False, got {value!r}.")
        self.randomize_lengths = bool(randomize_lengths)
        self.adaptive_error_model = bool(adaptive_error_model)
        if not isinstance(error_covariance, bool):
            raise ValueError(f"MLDA: error_covariance must be True or False, got {error_covariance!r}.")
        if error_covariance and not self.adaptive_error_model:
            raise ValueError(
                "MLDA: error_covariance=True is part of the adaptive error model: pass "
                "adaptive_error_model=True too."
            )
        self.error_covariance = error_covariance
        self.target_accept = float(target_accept)
        self.independence_weight = float(independence_weight)
        self.adapt_interval = int(adapt_interval)
        self.learning_rate = float(learning_rate)
        self.history_size = int(history_size)

        if initial_point is None:
            initial_point = model.initial_point()
        vars = continuous_value_vars(vars, model, "MLDA", required=", coarse_models=[...]")
        self.dim = int(sum(np.size(initial_point[v.name]) for v in vars))
        self._coordinate_names = coordinate_names(vars, initial_point, model)
        target = TargetDensity(model, vars, initial_point, compile_kwargs, "MLDA")
        if target.has_estimates and any(isinstance(spec, GPLevel) for spec in specs):
            raise ValueError(
                "MLDA: a GPLevel learns from exact values of the level above it, but the model in context "
                "has a PseudoMarginalPotential (its log density is an estimate). Use the coarse models "
                "alone, or GPDelayedAcceptanceMH, whose GP fits a noise variance."
            )
        corrected = corrected_names(model, coarse_models) if self.adaptive_error_model else ()
        self.corrected_variables = list(corrected)
        self._model_levels = [
            coarse_level(coarse, vars, model, compile_kwargs, k, corrected, error_covariance)
            for k, coarse in enumerate(coarse_models)
        ]
        # By position, coarsest first: a model's CoarseLevel, or a GP level's options (its GP is per chain).
        models = iter(self._model_levels)
        self._coarse_levels = [
            spec.options(self.dim) if isinstance(spec, GPLevel) else next(models) for spec in specs
        ]
        self._fine_outputs = (
            fine_outputs(model, vars, corrected, compile_kwargs, target.shared) if corrected else None
        )
        # Level position of each model level above the coarsest -> the index of the model level below it.
        positions = [k for k, level in enumerate(self._coarse_levels) if isinstance(level, CoarseLevel)]
        self._model_level_above = {above: j for j, above in enumerate(positions[1:])}
        self.n_levels = len(specs) + 1
        n_coarse = len(specs)
        # Scalar statistics per coarse level (PyMC's default trace keeps scalar statistics only).
        per_level = {}
        for k in range(n_coarse):
            per_level[f"level{k}_logp_evals"] = (np.int64, [])
            per_level[f"level{k}_accept_rate"] = (np.float64, [])
            per_level[f"level{k}_subchain_length"] = (np.int64, [])
        self.stats_dtypes_shapes = {**type(self).stats_dtypes_shapes, **per_level}
        self.stats_dtypes = [{name: dtype for name, (dtype, _) in self.stats_dtypes_shapes.items()}]
        self._join_pymc(vars, target, blocked, rng, model=model, start=start)
        required = self._chain.adaptation.required_tune_steps()
        self.default_tune_steps = max(1, math.ceil(required / self._base_steps_per_iteration))

    # ------------------------------------------------------------------ state
    def _reset_chain_state(self):
        adaptation = ScaleFreeAdaptation(
            self.dim,
            None,
            target_accept=self.target_accept,
            learning_rate=self.learning_rate,
            first_window=self.adapt_interval,
            history_size=self.history_size,
            independence_weight=self.independence_weight,
        )
        proposal = ScaleFreeProposal(adaptation.state, 1.0)
        gp_levels = {
            k: SurrogateLevel(k, options, self._warn_from_gp)
            for k, options in enumerate(self._coarse_levels) if isinstance(options, GPTrainingOptions)
        }
        self._fine_level = FineLevel(self._target)
        levels = [gp_levels.get(k) or level.log_density for k, level in enumerate(self._coarse_levels)]
        levels.append(self._fine_level)
        move = MultilevelDelayedAcceptance(
            levels, self.subsampling_rates, proposal, randomize_lengths=self.randomize_lengths
        )
        error_model = None
        if self._fine_outputs is not None:
            error_model = ErrorModel(self._model_levels, self._fine_outputs)
            error_model.reset()
        middle = {k: deque(maxlen=FINE_DECISIONS_KEPT) for k in range(1, self.n_levels - 1)}
        self._chain = MultilevelChain(
            adaptation=adaptation, proposal=proposal, move=move, error_model=error_model, gp_levels=gp_levels,
            middle_decisions=middle,
        )
        self._target.reset()

    def stop_tuning(self):
        super().stop_tuning()
        chain = self._chain
        if chain.error_model is not None and chain.error_model.update():
            self._relearn_gp_levels()
            if chain.current is not None:
                chain.current = self._reevaluated(chain.current)  # the coarse densities are final now
        self._warn_low_fine_acceptance()
        self._warn_low_middle_acceptance()
        adaptation = self._chain.adaptation
        if adaptation.tune_steps > 0:
            warn_after_tuning(
                "MLDA", adaptation, self.target_accept, self._warnings, self._coordinate_names,
                steps_per_iteration=self._base_steps_per_iteration,
            )
        adaptation.end_tuning(self.rng)
        if chain.gp_levels:
            self._freeze_gp_levels()

    @property
    def _base_steps_per_iteration(self) -> int:
        """The coarsest level's steps in one iteration (the product of the subchain lengths)."""
        return int(np.prod(self.subsampling_rates))

    @property
    def gp_levels(self) -> dict:
        """The GP levels of the chain run last, by level index (:class:`SurrogateLevel`, its GP ``.gp``)."""
        return dict(self._chain.gp_levels)

    @property
    def scale_free_adaptation(self) -> ScaleFreeAdaptation:
        """The base proposal's adaptation (on the coarsest level) of the chain run last."""
        return self._chain.adaptation

    # ------------------------------------------------------------ the step
    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list]:
        chain, target = self._chain, self._target
        y = q0.data
        evals_before, estimates_before = target.n_evals, target.n_estimates
        coarse_before = chain.coarse_counted or [level.n_evals for level in self._levels_below()]
        logp_y = target.current(y, q0.point_map_info, self.rng).logp
        current = chain.current
        first = current is None
        outside = self._follow_outside_variables(evals_before)
        if first or outside or not same_array(current.x, y):
            current = chain.move.point(np.array(y, dtype=float, copy=True), logp_y)
            self._check_coarse_start(current, q0.point_map_info)
        found = self._search_start(current.x, current.at(0))  # on the coarsest level (_search_density)
        if found is not None:
            current = chain.move.point(found[0], found[1].logp)
        if first:  # where the chain starts, after the search: a coarse density of zero holds it there too
            self._check_coarse_start(current, q0.point_map_info, zero_too=True)
        self._warn_if_untuned()
        on_base_step = self._adapt if self.tune else None
        middle_points = {}  # model level -> the last state in this step of the model level above it
        on_evaluation = self._record_for_gp if self.tune and chain.gp_levels else None
        on_state = None
        if self.tune and chain.error_model is not None and self._model_level_above:
            on_state = partial(self._record_middle_state, middle_points)
        new, counts = chain.move.step(current, self.rng, on_base_step, on_evaluation, on_state)
        chain.current = new
        accepted = new is not current
        if on_evaluation is not None and self._learn_gp_levels():
            chain.current = self._with_gp_levels_updated(chain.current)
        self._check_coarse_failure()
        finest = self.n_levels - 1
        output_evals = 0
        if self.tune:
            for k in range(1, finest):
                if counts.evaluations[k]:  # decisions on moved subchain ends, as the finest level's
                    chain.middle_decisions[k].append((counts.accepted[k], counts.evaluations[k]))
        judged = counts.finest_proposal is not None
        chain.judged_since_move = 0 if accepted or self.tune else chain.judged_since_move + judged
        if self.tune and judged:
            chain.fine_decisions.append(accepted)
        if self.tune and chain.error_model is not None:
            # The differences of adjacent model levels at the upper one's state (the fine one's: where it was
            # evaluated), one more forward run of both (tuning only; counted in logp_evals and per level).
            updated = False
            for below, x in sorted(middle_points.items()):
                updated |= chain.error_model.record(x, below)
            if counts.finest_proposal is not None:
                updated |= chain.error_model.record(counts.finest_proposal)
                output_evals = 1
            if updated:
                self._relearn_gp_levels()
                chain.current = self._reevaluated(chain.current)
        if accepted:
            # With a pseudo-marginal term the accepted estimate (and its auxiliaries) is kept from now on.
            evaluation = self._fine_level.evaluation_at(new.x) if target.has_estimates else None
            target.accept(new.x, evaluation or Evaluation(new.at(finest), new.at(finest)))
        if self._refresh_sticky_estimate(accepted):
            # Only the finest level's density holds the estimate; the coarse ones stand.
            chain.current = chain.current.with_level(finest, target.current_logp)
        state = chain.adaptation.state
        stats = {
            "accept": counts.accept_prob[finest],
            "accepted": float(accepted),
            "tune": self.tune,
            "scaling": state.am_scale.value,
            "model_logp": chain.current.at(finest),
        }
        chain.coarse_counted = [level.n_evals for level in self._levels_below()]
        for k, (now, before) in enumerate(zip(chain.coarse_counted, coarse_before)):
            steps = counts.steps[k]
            stats[f"level{k}_logp_evals"] = now - before
            stats[f"level{k}_accept_rate"] = counts.accepted[k] / steps if steps else math.nan
            stats[f"level{k}_subchain_length"] = counts.subchain_lengths[k]
        self._add_running_stats(stats, target.n_evals - evals_before + output_evals)
        stats.update(target.estimate_stats(estimates_before))
        self._check_draws(accepted)
        self._warnings.attach(stats, "accept")
        return RaveledVars(new.x, q0.point_map_info), [stats]

    def _follow_outside_variables(self, evals_before: int) -> bool:
        """In a ``CompoundStep``: if the variables outside this block changed (the target, which PyMC
        has given their values, evaluated the current state afresh: ``n_evals`` passed
        ``evals_before``; so it does at a chain's start), give the coarse levels their values too and
        say so: every level's density at the current state must then be computed afresh."""
        if not self.shared or self._target.n_evals == evals_before:
            return False
        values = {name: variable.get_value(borrow=True) for name, variable in self.shared.items()}
        for level in self._model_levels:
            level.follow(values)
        return True

    def _untuned_message(self) -> str:
        error_model = (
            " The adaptive error model learns during tuning only, so it corrects nothing."
            if self.adaptive_error_model else ""
        )
        return (
            "MLDA: sampling without tuning (tune=0). The coarsest level's proposal keeps its untuned "
            f"unit-scale random walk, whatever the posterior's scale.{error_model} Pass tune >= "
            f"{self.default_tune_steps} to pm.sample (the draws stay exact, but mix slowly)."
        )

    def _warn_low_fine_acceptance(self) -> None:
        """At the end of tuning: warn if the finest level accepted under LOW_FINE_ACCEPTANCE of the last
        coarse subchains' ends it judged (the coarse posterior is too far from the fine one)."""
        decisions = self._chain.fine_decisions
        if len(decisions) < FINE_DECISIONS_KEPT:
            return
        rate = sum(decisions) / len(decisions)
        if rate >= LOW_FINE_ACCEPTANCE:
            return
        last = self.n_levels - 2
        rates = f", or a smaller subsampling_rates[{last}]" if self.subsampling_rates[last] > 1 else ""
        remedy = "" if self.adaptive_error_model else (
            "adaptive_error_model=True (for observed pm.Normal likelihoods), "
        )
        remedy = f"{remedy}a coarse model closer to the fine one{rates}"
        self._warnings.warn(
            f"MLDA: at the end of tuning the finest level accepted {rate:.0%} of the last {len(decisions)} "
            "coarse subchain ends it judged: the coarse posterior is far from the fine one (in posterior "
            f"sds), so the chain will mix slowly (its draws stay exact). Try {remedy}.",
            UserWarning,
            stacklevel=3,
        )

    # ------------------------------------------------------------ GP levels
    def _levels_below(self) -> list:
        """The levels below the finest, by position: CoarseLevel or this chain's SurrogateLevel."""
        gp_levels = self._chain.gp_levels
        return [gp_levels.get(k, level) for k, level in enumerate(self._coarse_levels)]

    def _record_for_gp(self, level: int, point: LevelPoint) -> None:
        """A level was evaluated at a subchain's end (tuning): the GP level below it records its excess."""
        gp_level = self._chain.gp_levels.get(level - 1)
        if gp_level is not None:
            gp_level.record(point)

    def _record_middle_state(self, middle_points: dict, level: int, state: LevelPoint) -> None:
        """A middle level stepped (tuning): if it is a model level above another, the error model will
        record their difference at its chain's state (``middle_points``: the step's last one per level)."""
        below = self._model_level_above.get(level)
        if below is not None:
            middle_points[below] = state.x

    def _learn_gp_levels(self) -> bool:
        """After a step in tuning: the GP levels learn what they recorded (and the whitening, if an
        adaptation window ended with a new one in the step); whether a correction changed."""
        chain = self._chain
        changed = False
        for gp_level in chain.gp_levels.values():
            changed |= gp_level.learn(chain.adaptation, self.rng, chain.whitening_changed)
        chain.whitening_changed = False
        return changed

    def _warn_from_gp(self, message, category, stacklevel) -> None:
        """A GP level's training warning, through the chain's warnings (read when it warns)."""
        self._warnings.warn(f"MLDA: the GP level: {message}", category, stacklevel=stacklevel)

    def _relearn_gp_levels(self) -> None:
        """The error model changed the coarse densities: each GP level relearns its differences."""
        for k, gp_level in self._chain.gp_levels.items():
            gp_level.relearn(self._coarse_levels[k - 1].log_density)

    def _freeze_gp_levels(self) -> None:
        """End of tuning: each GP level's last fit in the final whitening; warn if one never warmed up."""
        chain = self._chain
        for k, gp_level in chain.gp_levels.items():
            gp_level.end_tuning(chain.adaptation, self.rng)
            if not gp_level.ready:
                needed = gp_level.schedule.options.initial_points
                self._warnings.warn(
                    f"MLDA: the GP level (level {k}) saw {gp_level.gp.n_points} of the {needed} values of "
                    "the level above it that it needs before it corrects anything, so it passes the coarse "
                    f"level's proposals on unchanged (the draws stay exact). Pass more tune to pm.sample, "
                    "or GPLevel(initial_points=...) smaller.",
                    UserWarning,
                    stacklevel=3,
                )
        if chain.current is not None:
            chain.current = self._with_gp_levels_updated(chain.current)

    def _with_gp_levels_updated(self, point: LevelPoint) -> LevelPoint:
        """``point`` with its GP levels' log densities recomputed (after their GPs changed)."""
        move = self._chain.move
        for k in sorted(self._chain.gp_levels):
            point = point.with_level(k, move.log_density(k, point))
        return point

    def _warn_low_middle_acceptance(self) -> None:
        """At the end of tuning: warn if a level between the coarsest and the finest (a GP level, a middle
        model) accepted under LOW_FINE_ACCEPTANCE of its last decisions: the finest level then sees few
        proposals, too few for its own check, and the chain mixes slowly."""
        for k, kept in self._chain.middle_decisions.items():
            decisions = sum(steps for _, steps in kept)
            if decisions < FINE_DECISIONS_KEPT:
                continue
            rate = sum(accepted for accepted, _ in kept) / decisions
            if rate >= LOW_FINE_ACCEPTANCE:
                continue
            gp = k in self._chain.gp_levels
            what = "the GP level" if gp else "the middle level"
            why = (
                ": it filters the coarse subchains' ends, but they still walk towards the coarse model's "
                "posterior, far from the fine one"
                if gp else ": the coarse posterior below it is far from its own"
            )
            remedy = "" if self.adaptive_error_model else (
                "adaptive_error_model=True (for observed pm.Normal likelihoods), "
            )
            dropped = (
                # The error model's correction is a constant shift (decision 0056: learned between adjacent
                # levels, which cured a new user's [RK4 with 4 steps, with 16], stalled before at 0-8%).
                f", or without coarse_models[{k - 1}] (the error model corrects a coarse model by a constant "
                "shift: a coarsest model that is wrong by more than a shift keeps the level above it "
                "rejecting)"
                if self.adaptive_error_model and not gp and k == 1 else ""
            )
            smaller = ""
            if self.subsampling_rates[k - 1] > 1:
                smaller = f", or a smaller subsampling_rates[{k - 1}]"
            self._warnings.warn(
                f"MLDA: at the end of tuning {what} (level {k}) accepted {rate:.1%} of the last {decisions} "
                f"subchain ends it judged{why}, so the chain will mix slowly (its draws stay exact). Try "
                f"{remedy}a coarse model closer to the fine one{smaller}{dropped}.",
                UserWarning,
                stacklevel=3,
            )

    def _stuck_remedy(self) -> str:
        """MLDA's likeliest cause of a stuck chain is a coarse posterior far from the fine one, or (when few
        of the stuck iterations reached the fine level) a coarse or middle level that does not move."""
        error_model = "adaptive_error_model=True (for observed pm.Normal likelihoods), "
        error_model = "" if self.adaptive_error_model else error_model
        rates = "" if max(self.subsampling_rates) == 1 else ", or smaller subsampling_rates"
        judged = self._chain.judged_since_move
        if judged < STUCK_DRAWS // 2:
            # A new user's three levels without the error model: 36 fine evaluations in a whole run, the
            # middle level rejecting; "the finest level's acceptance" pointed at the wrong level.
            stopped = "the coarse subchains did not move" if self.n_levels == 2 else (
                "the coarse subchains did not move, or a middle level rejected their ends (its "
                "level{k}_accept_rate statistic)"
            )
            return (
                f"Only {judged} of these iterations reached the fine level: {stopped}, so a coarse posterior "
                f"is far from the one above it. Try {error_model}coarse models closer to the fine one"
                f"{rates}; otherwise increase `tune`."
            )
        return (
            f"With MLDA the likeliest cause is a coarse posterior far from the fine one ({judged} of these "
            f"proposals reached the fine level and it rejected them): try {error_model}a coarse model "
            f"closer to the fine one{rates}; otherwise increase `tune`."
        )

    def _check_coarse_start(self, point: LevelPoint, point_map_info, zero_too: bool = False) -> None:
        """A coarse density NaN at the chain's start (with ``zero_too``, -inf as well: where the chain
        starts after the start search) leaves it frozen there: say so, as for the fine one."""
        for k, level in enumerate(self._model_levels):
            position = self._coarse_levels.index(level)
            value = point.at(position)
            if math.isnan(value) or (zero_too and value == -math.inf):
                raise ValueError(
                    f"MLDA: coarse_models[{k}]'s log density at the current point is {value} "
                    f"({describe_point(point.x, point_map_info)}), where the fine model's is "
                    f"{point.at(self.n_levels - 1):.6g}. The chain cannot move from a point where a coarse "
                    "density is NaN or zero (-inf): pass `initvals` to pm.sample where every model is "
                    "finite, and make the coarse model finite wherever the fine posterior has mass (check it "
                    "with coarse_model.point_logps())."
                )
            level.failed_at = None

    def _check_coarse_failure(self) -> None:
        """After tuning, where a coarse density was NaN or -inf, look at the fine one (up to
        _FAILURE_CHECKS times a chain, one fine evaluation each, counted in ``logp_evals``): if it is
        within the posterior bulk's range of the chain's own (:func:`bulk_log_density_range` below it, or
        above), the draws miss part of the posterior, silently, so warn once a chain.

        Not during tuning: a new user's start search and walk-in met coarse failures in the prior's tails
        (fine log densities -507 to -17 600 against the posterior's +102), and with one warning a chain
        those used it up while a coarse model NaN in 27% of the posterior went unreported."""
        chain = self._chain
        for k, level in enumerate(self._model_levels):
            failed, level.failed_at = level.failed_at, None
            if failed is None or self.tune or chain.failure_checks >= _FAILURE_CHECKS:
                continue
            x, coarse = failed
            chain.failure_checks += 1
            fine = self._target.evaluate(x).logp
            own = chain.current.at(self.n_levels - 1)
            if not fine >= own - bulk_log_density_range(self.dim):  # NaN, -inf or far in the tails
                continue
            chain.failure_checks = _FAILURE_CHECKS  # once a chain
            self._warnings.warn(
                f"MLDA: coarse_models[{k}]'s log density is {coarse} at {self._describe_point(x)}, "
                f"where the fine model's is {fine:.6g}, within the posterior's range of the chain's own "
                f"({own:.6g}). Every proposal there is rejected before the fine model sees it, so the draws "
                "miss that part of the posterior (they are exact only where each coarse density is finite "
                "wherever the fine one is: a coarse model may be as wrong as you like, but not NaN or zero "
                "where the fine posterior has mass). Make the coarse model finite there (a solver that fails "
                "where the fine one does not: loosen its tolerance or catch the failure and return a rough "
                "value).",
                UserWarning,
                stacklevel=3,
            )

    def _reevaluated(self, point: LevelPoint) -> LevelPoint:
        """``point`` with its coarse log densities recomputed (after the error model changed them)."""
        return self._chain.move.point(point.x, point.at(self.n_levels - 1))

    def _adapt(self, mh_step, start: LevelPoint) -> None:
        """A coarsest-level step during tuning: adapt the base proposal (and probe its independence
        component, on the coarsest level)."""
        chain = self._chain
        adaptation, proposal = chain.adaptation, chain.proposal
        evaluation = mh_step.evaluation
        logp0 = start.at(0) if not mh_step.accepted else evaluation.logp
        draw = TuningDraw(
            mh_step.state, mh_step.accept_prob, mh_step.move.component, start.x, mh_step.move.x, logp0,
            None, None, math.nan if evaluation is None else evaluation.logp,
        )
        if adaptation.probe_due(self.rng):
            coarsest = self._coarse_levels[0]
            point = proposal.independent_point(self.rng, adaptation.probe_fitted)
            adaptation.record_probe(mh_step.state, logp0, point, coarsest.log_density(point))
        if adaptation.adapt(draw, self.rng):
            chain.whitening_changed = True

    @property
    def _search_density(self):
        """The start search runs on the coarsest level, where it is cheap."""
        return self._coarse_levels[0]


class FineLevel:
    """The finest level's log density (the model in context), keeping its last evaluation: with a
    pseudo-marginal term, the estimate of an accepted proposal is the one the chain keeps."""

    def __init__(self, target: TargetDensity):
        self.target = target
        self._last = None  # (x, Evaluation)

    def __call__(self, x) -> float:
        evaluation = self.target.evaluate(x)
        self._last = (x, evaluation)
        return evaluation.logp

    def evaluation_at(self, x) -> Evaluation | None:
        """The last evaluation, if it was at ``x`` (None otherwise)."""
        if self._last is None or not same_array(self._last[0], x):
            return None
        return self._last[1]


@dataclass(eq=False, kw_only=True)
class MultilevelChain(ChainState):
    """One chain's state in :class:`MLDA`.

    Attributes
    ----------
    adaptation : ScaleFreeAdaptation
        The base proposal's tuning (coarsest level).
    proposal : ScaleFreeProposal
    move : MultilevelDelayedAcceptance
    current : LevelPoint or None
        The current state with every level's log density.
    error_model : ErrorModel or None
        The adaptive error model's differences and corrections (``adaptive_error_model=True``).
    fine_decisions : deque of bool
        Whether the finest level accepted each of its last decisions on a moved subchain's end in
        tuning (for the end-of-tuning check).
    middle_decisions : dict of int to deque
        Per level between the coarsest and the finest, ``(accepted, decisions)`` of its recent tuning
        iterations, counting decisions on moved subchain ends only (for the end-of-tuning check).
    judged_since_move : int
        The finest level's decisions since the chain last moved (for the stuck warning's text).
    coarse_counted : list of int or None
        Each coarse level's evaluations as counted in the statistics so far (evaluations made between
        steps, when tuning ends, go into the next step's).
    gp_levels : dict of int to SurrogateLevel
        The chain's GP levels by level index (``GPLevel`` in ``coarse_models``).
    whitening_changed : bool
        Whether an adaptation window ended with a new whitening in the current step (the GP levels then
        move to it).
    """

    adaptation: ScaleFreeAdaptation
    proposal: ScaleFreeProposal
    move: MultilevelDelayedAcceptance
    current: LevelPoint | None = None
    error_model: ErrorModel | None = None
    fine_decisions: deque = field(default_factory=lambda: deque(maxlen=FINE_DECISIONS_KEPT))
    gp_levels: dict = field(default_factory=dict)
    whitening_changed: bool = False
    middle_decisions: dict = field(default_factory=dict)
    failure_checks: int = 0  # fine evaluations where a coarse density failed (MLDA._check_coarse_failure)
    judged_since_move: int = 0
    coarse_counted: list | None = None


def _are_models(value) -> bool:
    """Whether ``value`` is a ``pm.Model`` or a non-empty list or tuple of them and GP levels."""
    if isinstance(value, pm.Model):
        return True
    return (
        isinstance(value, list | tuple) and bool(value)
        and all(isinstance(v, pm.Model | GPLevel) for v in value)
    )
