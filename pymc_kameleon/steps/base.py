"""What every PyMC step of ours shares: :class:`AdaptiveStep`, and the variables it may sample.

:class:`AdaptiveStep` is the base of :class:`~pymc_kameleon.KameleonMetropolis` and the GP
delayed-acceptance steps: one block of continuous variables, per-chain state reset for PyMC 5 and
6, the statistics every step reports, its competence, the progress-bar columns, and the
pseudo-marginal statistics when the model has a PseudoMarginalPotential.
"""

from __future__ import annotations

import inspect
import uuid

import numpy as np
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.util import get_random_generator
from pymc.vartypes import discrete_types

from pymc_kameleon.core.validation import unexpected_keyword_error
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.steps.chain import PerChainReset, side_stream
from pymc_kameleon.steps.draw_checks import DrawChecks
from pymc_kameleon.steps.estimate_noise import NOISE_ESTIMATES, estimate_noise_message
from pymc_kameleon.steps.population import pooled_class_for
from pymc_kameleon.steps.reporting import StepWarnings, progressbar_config, progressbar_update_functions
from pymc_kameleon.steps.session_warnings import RunSessions, spawn_key
from pymc_kameleon.steps.smc_start import SMCStart, SMCStarting, resolve_start
from pymc_kameleon.steps.starts import StartSearch
from pymc_kameleon.steps.target_density import Evaluation
from pymc_kameleon.steps.variables import step_model

__all__ = [
    "PSEUDO_MARGINAL_STATS",
    "AdaptiveStep",
    "declare_pseudo_marginal_stats",
]


# During tuning, a chain with a plain pseudo-marginal estimate that rejects this many proposals in a row
# gets a fresh estimate at its state (AdaptiveStep._refresh_sticky_estimate).
TUNING_REFRESH_REJECTIONS = 5

# Extra sampler statistics of a step whose model has a PseudoMarginalPotential.
PSEUDO_MARGINAL_STATS = {
    "loglik_estimate": (np.float64, []),
    "estimator_calls": (np.int64, []),
    "cumulative_estimator_calls": (np.int64, []),
}


def declare_pseudo_marginal_stats(step, target):
    """Declare :data:`PSEUDO_MARGINAL_STATS` on ``step`` if ``target`` has pseudo-marginal terms.

    PyMC reads both ``stats_dtypes_shapes`` and ``stats_dtypes`` from the instance
    (``BlockedStep.__new__`` sets them), so models without estimates keep the class's stats. Stats the
    instance already declared (MLDA's per-level ones) are kept.
    """
    if target.has_estimates:
        step.stats_dtypes_shapes = {**step.stats_dtypes_shapes, **PSEUDO_MARGINAL_STATS}
        step.stats_dtypes = [{name: dtype for name, (dtype, _) in step.stats_dtypes_shapes.items()}]


# Added to the error for a start of zero density where the start search ran.
_NOTHING_FOUND = " The start search found no point of finite density in the prior's draws either."


def _check_keywords(cls, kwargs) -> None:
    """A misspelt option gets :func:`unexpected_keyword_error`; steps with ``**options`` check their
    own."""
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    foreign = getattr(cls, "_foreign_options", {})
    for name in kwargs:
        if name in params:
            continue
        if name in foreign:
            raise TypeError(f"{cls.__name__}() takes no {name!r}: {foreign[name]}")
        raise unexpected_keyword_error(cls.__name__, name, [n for n in params if n != "self"])


# Where PyMC's BlockedStep.__new__ keeps the constructor's arguments (name-mangled).
_NEWARGS = "_BlockedStep__newargs"
# A probe beyond the widened prior box (AdaptiveStep._evaluate_probe): not evaluated, no mass there.
_NOT_EVALUATED = Evaluation(logp=-np.inf, exact=-np.inf, log_prior=-np.inf, exact_loglik=-np.inf)


class AdaptiveStep(PerChainReset, SMCStarting, DrawChecks, ArrayStepShared):
    """Base of our steps: a continuous block sampled with an exact (kept) pseudo-marginal estimate.

    A subclass builds its target density (:class:`~pymc_kameleon.steps.target_density.TargetDensity`)
    and calls :meth:`_join_pymc`; it implements ``_reset_chain_state``, which puts the chain's state
    (a :class:`~pymc_kameleon.steps.chain.ChainState`) in ``self._chain``, and ``astep``. The
    statistics below mean the same in every step; subclasses add their own.
    """

    default_blocked = True
    # Keeps the pseudo-marginal estimate at the current state (see pseudo_marginal.py).
    exact_pseudo_marginal = True
    # Pooled tuning (steps/population.py): a subclass sets its pooled variant and default.
    pooled = False
    _pooled_class = None
    _default_tuning = "pooled"
    # Whether the step measures its pseudo-marginal estimates' noise when tuning ends (_check_estimate_noise).
    _checks_estimate_noise = True
    stats_dtypes_shapes = {
        "accept": (np.float64, []),
        # float64 like pm.Metropolis, which PyMC pairs with our steps for discrete variables:
        # stats of one name must share a dtype across the steps of a CompoundStep.
        "accepted": (np.float64, []),
        "tune": (bool, []),
        "scaling": (np.float64, []),
        # The model log density at the state returned (PyMC's name; ArviZ's InferenceData calls it `lp`).
        "model_logp": (np.float64, []),
        # Log-density (likelihood) evaluations: this step's, and the chain's so far with its tuning (the
        # draws' sum misses the tuning, which PyMC discards; the last draw's running count does not).
        "logp_evals": (np.int64, []),
        "cumulative_logp_evals": (np.int64, []),
        # The mean of `accept` over about the last 100 steps (what the progress bar shows).
        "recent_accept_rate": (np.float64, []),
    }

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # help(Step) would otherwise show PyMC's ArrayStepShared.__init__ text for our constructors.
        init = cls.__dict__.get("__init__")
        if init is not None and init.__doc__ is None:
            init.__doc__ = f"Make the step; its parameters are in ``help({cls.__name__})``."

    def __new__(cls, *args, **kwargs):
        _check_keywords(cls, kwargs)
        step_model(kwargs.get("model"), cls.__name__)  # before PyMC's __new__, whose error names no remedy
        # tuning="pooled" makes the step's population variant (steps/population.py).
        new_cls = pooled_class_for(cls, args, kwargs, cls._default_tuning)
        return super(AdaptiveStep, new_cls).__new__(new_cls, *args, **kwargs)

    def __getnewargs_ex__(self):
        # PyMC's BlockedStep keeps the constructor's arguments for unpickling, where they only choose the
        # class. An executor instance among them (Dask's client.get_executor()) cannot be pickled, while
        # the step's state carries it as a factory (ExecutorOption); with it there, PyMC's population
        # sampler (cores>1) could not send the step to its workers and ran the chains one by one.
        args, kwargs = super().__getnewargs_ex__()
        if kwargs.get("executor") is not None:
            kwargs = {**kwargs, "executor": None}
        return args, kwargs

    def __getstate__(self):
        state = dict(self.__dict__)
        if _NEWARGS in state:  # the same arguments, kept in the state too
            state[_NEWARGS] = self.__getnewargs_ex__()
        return state

    def _add_estimate_stats(self, stats: dict, target, estimates_before: int) -> None:
        """Put the pseudo-marginal statistics in ``stats`` (none without estimates): the kept estimate,
        this step's estimator calls and the chain's so far (the last draw's value is the whole count,
        without keeping the warm-up)."""
        estimates = target.estimate_stats(estimates_before)
        if estimates:
            estimates["estimator_calls"] += self._chain.pending_estimator_calls
            self._chain.pending_estimator_calls = 0
            self._chain.cumulative_estimator_calls += estimates["estimator_calls"]
            estimates["cumulative_estimator_calls"] = self._chain.cumulative_estimator_calls
        stats.update(estimates)

    def _add_running_stats(self, stats: dict, evals: int, rate_of: str = "accept") -> None:
        """Put this step's log-density evaluations, the chain's running count and its recent acceptance rate
        in ``stats``, which already holds ``accept``; ``recent.exact`` follows whether the step evaluated
        (GP-DA reports it). ``rate_of``: the statistic the recent rate averages (MLDA: ``accepted``)."""
        evals += self._chain.pending_logp_evals
        self._chain.pending_logp_evals = 0
        self._chain.cumulative_logp_evals += evals
        stats["logp_evals"] = evals
        stats["cumulative_logp_evals"] = self._chain.cumulative_logp_evals
        recent = self._chain.recent
        recent.update(stats[rate_of], evals > 0)
        stats["recent_accept_rate"] = recent.accept

    def _population_states(self) -> np.ndarray | None:
        """Every chain's state at the start of this iteration (pooled tuning only; else None)."""
        return None

    def _rescue(self, own_logp: float, population, adaptation, window_before: int, rng):
        """The state and evaluation a stranded chain jumps to (pooled tuning only; else None)."""
        return None

    def _last_run(self):
        """The step object whose chain ran last: this one (pooled tuning: the copy PyMC made for the
        last chain, with ``cores=1``)."""
        return self

    @property
    def _chain_index(self) -> int | None:
        """This chain's index in a population of several (pooled tuning), which warnings about it name;
        else None (one chain; and PyMC does not tell a per-chain step which chain it runs)."""
        several = self.pooled and bool(getattr(self, "other_chains", None))
        return getattr(self, "this_chain", None) if several else None

    @property
    def _chain_named(self) -> int | None:
        """The chain a warning about one chain names: its index in a pooled population of several, else,
        where chains tune apart, its index in PyMC's run, the last entry of its generator's spawn key
        (``pm.sample`` spawns chain i's as ``(..., i)``); None where neither is known. Chains that tune
        apart (a PseudoMarginalPotential, ``tuning="per_chain"``) are told apart by it; the checks'
        logic reads :attr:`_chain_index`."""
        if self.pooled:
            return self._chain_index  # one chain alone (chains=1) is "the chain"
        key = spawn_key(getattr(self, "rng", None))
        return None if key is None else int(key[-1])

    @property
    def _speaks_for_population(self) -> bool:
        """Whether this chain reports what the population's chains share (pooled tuning: chain 0)."""
        return self.pooled and getattr(self, "this_chain", None) == 0

    def _join_pymc(self, vars, target, blocked, rng, *, model, start) -> None:
        """Finish ``__init__``: keep the target and the start option, declare the statistics, set up
        PyMC's step, reset."""
        if not isinstance(blocked, bool | np.bool_):  # "yes" passed as truthy, without a word
            raise ValueError(f"blocked must be True or False, got {blocked!r}.")
        if rng is not None:
            try:
                get_random_generator(rng, copy=True)  # what PyMC makes of it, on a copy
            except (TypeError, ValueError) as err:  # NumPy's "SeedSequence expects int ..." named no option
                raise ValueError(
                    f"rng must be None, an integer seed or a numpy.random.Generator, got {rng!r} ({err})."
                ) from None
        start = resolve_start(start, type(self).__name__, self._smc_start_supported, target.has_estimates)
        self.start = start
        # Only a searching step, or one that probes an independence component (whose probes stay in the
        # search's prior box widened: probe_box), keeps the model (pickled with the step to every worker).
        probes = getattr(self, "independence_weight", 0.0) > 0 and not target.has_estimates
        self._start_search = StartSearch(model, vars) if start == "search" or probes else None
        self._target = target
        target.coordinate_names = getattr(self, "_coordinate_names", None)
        self._smc_start = None
        if isinstance(start, SMCStart):
            self._check_smc_start(model, vars, target)
            # The model and the names in the step's order, for the run; shared by PyMC's copies of the
            # step, so that chain 0's run (made when the population is linked) reaches every chain.
            self._smc_start = {"model": model, "var_names": [model.values_to_rvs[v].name for v in vars]}
        if self.pooled:
            self._population_steps = {}  # chain -> PyMC's copy of this step (steps/population.py)
        declare_pseudo_marginal_stats(self, target)
        self.tune = True
        # Not from the random stream: the draws stay as they were.
        self._warning_session = uuid.uuid4().hex
        self._run_sessions = RunSessions(self._warning_session)  # shared by PyMC's copies of the step
        super().__init__(vars, target.shared, blocked=blocked, rng=rng)
        self._start_chain()

    @property
    def _independence_weight_in_use(self) -> float:
        """The independence component's weight for a chain's adaptation (``independence_weight``, on the
        steps that offer it): the user's, but 0 with a pseudo-marginal term, whose estimates' noise would
        pass for the importance weights' tail (and a lucky kept estimate makes an independence sampler
        sticky)."""
        return 0.0 if self._target.has_estimates else self.independence_weight

    def _probe_independence(self, adaptation, proposal, state):
        """At a tuning step, if the adaptation says one is due: evaluate the target at one independent
        draw of ``proposal`` without moving, and record it with the chain's ``state``
        (:meth:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation.record_probe`). The
        evaluation counts in ``logp_evals``. Returns ``(point, evaluation)``, or None."""
        if not (self.tune and adaptation.probe_due(self.rng)):
            return None
        point = proposal.independent_point(self.rng, adaptation.probe_fitted)
        evaluation = self._evaluate_probe(point)
        adaptation.record_probe(state, self._target.current_logp, point, evaluation.logp)
        return point, evaluation

    def _evaluate_probe(self, point) -> Evaluation:
        """The target at a probe or exam draw of the independence component; beyond the widened prior
        box (:meth:`~pymc_kameleon.steps.starts.StartSearch.probe_box`) a log density of -inf, not
        evaluated: an extrapolated shape's draw there says nothing the adaptation needs, and an ODE
        solver asked for such values may never return."""
        box = self._start_search.probe_box() if self._start_search is not None else None
        if box is not None and not box.contains(point):
            return _NOT_EVALUATED
        return self._target.evaluate(point)

    def _examine_independence(self, adaptation) -> None:
        """When tuning has ended: the independence component's exam
        (:meth:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation.examine_independence`), on a
        stream of its own (:func:`side_stream`), so the chain's draws come from its stream as before;
        the evaluations count in the next step's ``logp_evals``."""
        target = self._target
        before = target.n_evals
        adaptation.examine_independence(lambda x: self._evaluate_probe(x).logp, side_stream(self.rng))
        self._chain.pending_logp_evals += target.n_evals - before

    def _search_elsewhere(self):
        """``run_elsewhere`` of the start search (:func:`~pymc_kameleon.core.starts.search_start`): None,
        or a step's way to run candidates on other workers."""
        return None

    @property
    def _search_density(self):
        """What the start search evaluates (an object with ``evaluate(x).logp``): the target; MLDA's
        coarsest level."""
        return self._target

    def _start_search_due(self) -> bool:
        """Whether the chain's start may still move: its first tuning step, with ``start="search"`` or
        ``"smc"``."""
        return (
            not self._chain.searched and self.tune
            and (self._smc_start is not None or self.start == "search")
        )

    def _current_evaluation(self, y, point_map_info):
        """The current state and its evaluation, after the start search of a chain's first tuning step
        (:meth:`_search_start`), or with its angles put in tuning's period (``on_circle`` of
        :class:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation`): ``(state, evaluation,
        moved)``. A given start of zero density is an error
        unless the search moves the chain: PyMC's initial point of pm.Uniform(0, 1000) is 500, where data
        up to 620 give zero density, and NUTS refuses it too; the search finds the support. A NaN there
        (a model's failure, such as a solver's) stays an error."""
        target = self._target
        evaluation = target.current(y, point_map_info, self.rng, zero_density_ok=self._start_search_due())
        found = self._search_start(y, evaluation.logp)
        if found is not None:
            return found[0], found[1], True
        if not np.isfinite(evaluation.logp):
            raise ValueError(target.zero_density_message(evaluation.logp, y, point_map_info) + _NOTHING_FOUND)
        # Angles (pm.VonMises) into the period tuning keeps them in: the same density, so the same
        # evaluation (core.angles).
        wrapped = self._start_adaptation.on_circle(y, tuning=self.tune)
        if wrapped is not None:
            target.accept(wrapped, evaluation)
            return wrapped, evaluation, True
        return y, evaluation, False

    def _check_population_start(self, y, point_map_info) -> None:
        """In the main process, before PyMC's chain processes start (where an error reaches the user as
        a bare EOFError): the error of a chain's start of zero or undefined density, unless the density
        is zero, a start search will move the chain, and the prior's draws include a point of finite
        density."""
        searching = self.tune and self.start == "search" and self._start_search is not None
        logp = self._target.check_start(y, point_map_info, zero_density_ok=searching)
        if logp == -np.inf and not self._start_search.finds_finite(self._search_density):
            raise ValueError(self._target.zero_density_message(logp, y, point_map_info) + _NOTHING_FOUND)

    def _search_start(self, y, log_density: float):
        """At the chain's first tuning step with ``start="search"``: move to the start the search finds
        (:mod:`pymc_kameleon.steps.starts`) and return it with its evaluation, or None if the chain
        keeps ``y``. Models with a PseudoMarginalPotential keep their start: a noisy estimate is no
        objective for a search. The search's evaluations count in the step's evaluation statistics.
        With ``start="smc"``, the start from the SMC run instead (:meth:`_start_from_smc`).
        """
        due = self._start_search_due()
        self._chain.searched = True
        if not due:  # with a PseudoMarginalPotential never "search" (resolve_start)
            return None
        if self._smc_start is not None:
            return self._start_from_smc(y)
        elsewhere = self._search_elsewhere()
        found = self._start_search.run(self._search_density, y, log_density, self.rng, elsewhere)
        if found is None or not found.moved:
            return None
        evaluation = self._target.evaluate(found.state)
        self._target.accept(found.state, evaluation)
        return found.state, evaluation

    @property
    def _warnings(self) -> StepWarnings:
        return self._chain.warnings

    def _refresh_sticky_estimate(self, accepted: bool) -> bool:
        """During tuning, with a plain (not correlated) pseudo-marginal term: redraw the estimate kept at the
        state once the chain has rejected :data:`TUNING_REFRESH_REJECTIONS` proposals in a row. Returns
        whether it did (:meth:`~.target_density.TargetDensity.refresh_estimates`).

        An estimate far above the likelihood makes the chain reject every proposal, whatever its size,
        and tuning reads those rejections as steps too long: the coordinate scan (gain 0.7 per
        rejection) shrank both step sizes 1e6-fold in 40 steps, and every window's covariance was then
        learned from moves too small to leave the point (a Poisson-lognormal model, 12 groups, 20
        importance samples: one chain in four frozen for good, without a warning that named it).
        Tuning's draws are discarded, so it need not be the exact chain; after tuning nothing refreshes.
        GP delayed acceptance's stage-1 rejections count too: the kept estimate enters stage 1, and
        counting only stage-2 rejections left 8 of 80 chains frozen on that model (0 of 80 counting all).
        """
        if not (self.tune and self._target.has_estimates):
            return False
        chain = self._chain
        chain.tuning_rejections = 0 if accepted else chain.tuning_rejections + 1
        if chain.tuning_rejections < TUNING_REFRESH_REJECTIONS:
            return False
        chain.tuning_rejections = 0
        return self._target.refresh_estimates()

    def stop_tuning(self):
        super().stop_tuning()
        # Said here, so checked only in tuning (with tune=0 PyMC stops tuning before the first step).
        self._target.check_randomness = False
        self._check_estimate_noise()
        # A flat or irreproducible estimate is the model's, not a chain's: said by the first chain of a
        # process that has it.
        if getattr(self, "_said_estimate_warning", False):
            return
        name = type(self).__name__
        target = self._target
        messages = (target.flat_estimate_message(name), target.irreproducible_estimate_message(name))
        for message in filter(None, messages):
            self._said_estimate_warning = True
            self._warnings.warn(message, KameleonWarning, stacklevel=3)

    def _check_estimate_noise(self) -> None:
        """When tuning ends, with pseudo-marginal terms: measure their log-estimates' spread at the chain's
        state (:data:`NOISE_ESTIMATES` estimates from a stream apart from the chain's, counted in the first
        draw's ``estimator_calls``) and warn where it is above its limit
        (:mod:`~pymc_kameleon.steps.estimate_noise`): each chain its own figure (chains of one run that
        say it after the first are shown in short, ``session_warnings.shown_text``), since the noise
        differs from state to state (a new user's first chain said sd 3.5 while another's state had 14)."""
        target = self._target
        if not (target.has_estimates and self._checks_estimate_noise):
            return
        before = target.n_estimates
        spreads = target.estimate_noise(side_stream(self.rng, jumps=2), NOISE_ESTIMATES)
        self._chain.pending_estimator_calls += target.n_estimates - before
        message = estimate_noise_message(type(self).__name__, spreads, self._chain_named)
        if message is not None:
            self._warnings.warn(message, KameleonWarning, stacklevel=3)

    @staticmethod
    def competence(var, has_grad):
        if var.dtype in discrete_types:
            return Competence.INCOMPATIBLE
        return Competence.COMPATIBLE

    _progressbar_config = staticmethod(progressbar_config)
    _make_progressbar_update_functions = staticmethod(progressbar_update_functions)
