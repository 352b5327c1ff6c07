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
from functools import partial

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars

from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.adaptation.state import TuningDraw
from pymc_kameleon.core.gp.options import GPTrainingOptions
from pymc_kameleon.core.kameleon.scale_free import ScaleFreeProposal
from pymc_kameleon.core.linalg import one_blas_thread, same_array
from pymc_kameleon.core.multilevel import LevelPoint, MultilevelDelayedAcceptance
from pymc_kameleon.core.validation import check_independence_weight, check_number, check_probability
from pymc_kameleon.steps.base import AdaptiveStep
from pymc_kameleon.steps.multilevel_chain import MultilevelChain
from pymc_kameleon.steps.multilevel_checks import (
    FINE_DECISIONS_KEPT,
    LOW_FINE_ACCEPTANCE,
    MultilevelChecks,
    checked_coarse_models,
    checked_gp_positions,
    checked_rates,
)
from pymc_kameleon.steps.multilevel_gp import GPLevel, MultilevelGPLevels, SurrogateLevel
from pymc_kameleon.steps.multilevel_levels import (
    CoarseLevel,
    ErrorModel,
    FineLevel,
    coarse_level,
    correctable_names,
    corrected_names,
    fine_outputs,
    narrower_noise,
)
from pymc_kameleon.steps.multilevel_spread import CoarseSpreadChecks
from pymc_kameleon.steps.reporting import warn_after_tuning
from pymc_kameleon.steps.target_density import Evaluation, TargetDensity
from pymc_kameleon.steps.variables import angle_coordinates, continuous_value_vars, coordinate_names

__all__ = ["LOW_FINE_ACCEPTANCE", "MLDA"]



class MLDA(MultilevelChecks, CoarseSpreadChecks, MultilevelGPLevels, AdaptiveStep):
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
    adaptive_error_model : bool or "auto", default "auto"
        Correct each coarse level's bias (:mod:`pymc_kameleon.steps.multilevel_levels`): every observed
        ``pm.Normal`` that all levels have under one name and shape gets, at each coarse level, its mean
        :math:`F_\ell(\theta)` moved by :math:`\mu_{B,\ell}`, an estimate of :math:`F_L - F_\ell`
        learned during tuning: the sum over the levels from :math:`\ell` up of the mean difference
        between adjacent models, :math:`F_{k+1} - F_k`, over the last points where the fine model was
        evaluated (:math:`k + 1 = L`) or at the middle level's chain's states (one forward run of each
        of the two models per record, one record per level and iteration, counted in ``logp_evals``
        and ``level{k}_logp_evals``); frozen after tuning, so the chain is exact. ``"auto"`` turns it on
        where every level has such a variable and off where none has (a coarse model's bias of one
        posterior sd already costs an uncorrected MLDA most of its ESS per fine evaluation; one with next
        to no bias costs the correction 14-30%: the multilevel guide).
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
    start : {"search", "initial_point"}, optional
        Search for a start before tuning, on the coarsest level's density (cheap): the default, except
        with a :func:`~pymc_kameleon.PseudoMarginalPotential`, where ``"search"`` is refused.
    model, initial_point, compile_kwargs, rng, blocked
        As for PyMC's steps.

    Notes
    -----
    The model in context may have a :class:`~pymc_kameleon.PseudoMarginalPotential` (the coarse models
    may not): the current state's estimate is kept until a proposal is accepted (pseudo-marginal MH with
    the coarse subchain as its proposal, so exact), and ``loglik_estimate``, ``estimator_calls`` and
    ``cumulative_estimator_calls`` are added to the statistics.

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
    # Options of PyMC 3's and pymc-experimental's MLDA that this one does not take, with what it does
    # instead (a new user's raised a bare "unexpected keyword argument").
    _foreign_options = {
        **dict.fromkeys(
            ("base_sampler", "base_S", "base_proposal_dist", "base_scaling", "base_lamb", "base_tune_target",
             "base_tune_drop_fraction", "base_blocked", "S", "proposal_dist", "scaling", "mu_B", "Sigma_B"),
            "that is an option of PyMC 3's (pymc-experimental's) MLDA. Here the coarsest level moves with "
            "the package's scale-free adaptive proposal, which learns its covariance and scale while "
            "tuning, and adaptive_error_model=True learns the levels' bias; see the multilevel guide.",
        ),
        "base_tune_interval": "PyMC 3's name for adapt_interval (the first adaptation window's length).",
        **dict.fromkeys(
            ("variance_reduction", "store_Q_fine"),
            "PyMC 3's (pymc-experimental's) MLDA estimated a quantity of interest with variance reduction "
            "across levels; this MLDA does not. Compute the quantity from the draws (idata.posterior), "
            "or as a pm.Deterministic.",
        ),
    }

    def __init__(
        self,
        vars=None,
        *,
        coarse_models=None,
        subsampling_rates=5,
        randomize_lengths: bool = False,
        adaptive_error_model: bool | str = "auto",
        error_covariance: bool = False,
        target_accept: float = 0.234,
        independence_weight: float = 0.5,
        adapt_interval: int = 100,
        learning_rate: float = 1.0,
        history_size: int = 10_000,
        start: str | None = None,
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
        has_gp_level = any(isinstance(spec, GPLevel) for spec in specs)
        coarse_models = [spec for spec in specs if isinstance(spec, pm.Model)]
        self.subsampling_rates = checked_rates(subsampling_rates, len(specs))
        if not isinstance(randomize_lengths, bool | np.bool_):
            raise ValueError(f"MLDA: randomize_lengths must be True or False, got {randomize_lengths!r}.")
        if not (isinstance(adaptive_error_model, bool | np.bool_) or adaptive_error_model == "auto"):
            raise ValueError(
                f"MLDA: adaptive_error_model must be True, False or 'auto', got {adaptive_error_model!r}."
            )
        self.randomize_lengths = bool(randomize_lengths)
        if not isinstance(error_covariance, bool):
            raise ValueError(f"MLDA: error_covariance must be True or False, got {error_covariance!r}.")
        correctable = correctable_names(model, coarse_models)
        if adaptive_error_model == "auto":
            # On where it can be (error_covariance asks for it, and gets corrected_names' error if it cannot).
            adaptive_error_model = error_covariance or bool(correctable)
        self.adaptive_error_model = bool(adaptive_error_model)
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
        self._narrower_noise = narrower_noise(model, coarse_models)
        self._warn_narrower_noise()

        if initial_point is None:
            initial_point = model.initial_point()
        vars = continuous_value_vars(vars, model, "MLDA", required=", coarse_models=[...]")
        self.dim = int(sum(np.size(initial_point[v.name]) for v in vars))
        self._coordinate_names = coordinate_names(vars, initial_point, model)
        self._angle_columns = angle_coordinates(vars, initial_point, model)
        target = TargetDensity(model, vars, initial_point, compile_kwargs, "MLDA")
        if target.has_estimates and has_gp_level:
            raise ValueError(
                "MLDA: a GPLevel learns from exact values of the level above it, but the model in context "
                "has a PseudoMarginalPotential (its log density is an estimate). Use the coarse models "
                "alone, or GPDelayedAcceptanceMH, whose GP fits a noise variance."
            )
        corrected = corrected_names(model, coarse_models) if self.adaptive_error_model else ()
        self.corrected_variables = list(corrected)
        # Whether the warnings may suggest the error model (it needs an observed pm.Normal at every level).
        self._error_model_fits = bool(corrected) or bool(correctable)
        self._model_levels = [
            coarse_level(coarse, vars, model, compile_kwargs, k, corrected, error_covariance)
            for k, coarse in enumerate(coarse_models)
        ]
        for level in self._model_levels:
            level.coordinate_names = self._coordinate_names
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
        self._tunes_in_iterations = self.adaptive_error_model or has_gp_level
        if self._tunes_in_iterations:
            # They learn from the fine level, one evaluation an iteration, and each update moves the coarse
            # densities the proposal tunes on: the proposal's steps in iterations (groundwater, 6-d, min
            # ESS 159-382 at a fifth of it, 905-1183 at 500-1000; benchmarks/mlda_groundwater.py --tune).
            self.default_tune_steps = required
        else:
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
            angle_columns=self._angle_columns,
        )
        proposal = ScaleFreeProposal(adaptation.state, 1.0)
        gp_levels = {
            k: SurrogateLevel(k, options, self._warn_from_gp)
            for k, options in enumerate(self._coarse_levels) if isinstance(options, GPTrainingOptions)
        }
        self._fine_level = FineLevel(self._target)
        for level in self._model_levels:
            level.start_chain()
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
        self._warn_costly_coarse_levels()
        adaptation = self._chain.adaptation
        if adaptation.tune_steps > 0:
            budget = (chain.tune_iterations, self.default_tune_steps) if self._tunes_in_iterations else None
            warn_after_tuning(
                "MLDA", adaptation, self.target_accept, self._warnings, self._coordinate_names,
                steps_per_iteration=self._base_steps_per_iteration, iteration_budget=budget,
            )
        adaptation.end_tuning(self.rng)
        if chain.gp_levels:
            self._freeze_gp_levels()
        self._start_coarse_spread_check()

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
    @one_blas_thread
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
            for level in self._model_levels:  # the timing warning compares the levels' time per iteration
                level.timing.count_from_here()
        self._warn_if_untuned()
        chain.tune_iterations += bool(self.tune)
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
        # The progress bar's rate is of moves: `accept` is 1 whenever a subchain did not move, so its mean
        # read 0.73-0.84 for a new user's chains that moved in 0.2-1.4% of their steps.
        self._add_running_stats(stats, target.n_evals - evals_before + output_evals, rate_of="accepted")
        self._add_estimate_stats(stats, target, estimates_before)
        self._check_draws(accepted)
        self._check_coarse_spread()
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

    # ------------------------------------------------------------ the levels
    def _levels_below(self) -> list:
        """The levels below the finest, by position: CoarseLevel or this chain's SurrogateLevel."""
        gp_levels = self._chain.gp_levels
        return [gp_levels.get(k, level) for k, level in enumerate(self._coarse_levels)]

    def _record_middle_state(self, middle_points: dict, level: int, state: LevelPoint) -> None:
        """A middle level stepped (tuning): if it is a model level above another, the error model will
        record their difference at its chain's state (``middle_points``: the step's last one per level)."""
        below = self._model_level_above.get(level)
        if below is not None:
            middle_points[below] = state.x

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

    # The SMC run would temper the finest level alone, whose cost the levels below are there to save.
    _smc_start_supported = False

    @property
    def _search_density(self):
        """The start search runs on the coarsest level, where it is cheap."""
        return self._coarse_levels[0]


def _are_models(value) -> bool:
    """Whether ``value`` is a ``pm.Model`` or a non-empty list or tuple of them and GP levels."""
    if isinstance(value, pm.Model):
        return True
    return (
        isinstance(value, list | tuple) and bool(value)
        and all(isinstance(v, pm.Model | GPLevel) for v in value)
    )
