r"""Pooled tuning: our steps as PyMC population steps, whose chains learn from each other while tuning.

A step made with ``tuning="pooled"`` is an instance of a subclass that is also a
:class:`pymc.step_methods.arraystep.PopulationArrayStepShared`, so ``pm.sample`` runs its chains as a
population (``pymc/sampling/population.py``): all chains step once per iteration, and each is given
every chain's state at the start of the iteration. During tuning each chain's adaptation window
records all those states (:meth:`~pymc_kameleon.core.adaptation.windows.AdaptationWindow.record`),
so the learned mean, covariance and Kameleon subsample :math:`Z` come from every chain's tuning
draws; each chain keeps its own random stream, acceptance and scales. After tuning everything is
frozen, as with per-chain tuning, so each chain is an exact Metropolis-Hastings chain.

Every chain of a population records the same states at the same step, so their windows end
together and learn the same covariance whichever process they run in: ``cores=1`` and ``cores>1``
give the same draws.

**Stranded chains are rescued during tuning.** At each adaptation window's end, and every
:data:`RESCUE_EVERY` tuning steps (a chain may find the posterior late in a long window, and the others
should follow it before tuning ends), a chain compares its log density with the other chains'
(evaluated at their states: ``chains - 1`` evaluations per check, counted in ``logp_evals``). If it
is more than :data:`RESCUE_NATS` :math:`+` :data:`RESCUE_SDS` :math:`\sqrt{d/2}` nats below one of
them (:math:`\sqrt{d/2}` is the spread of the log density over a :math:`d`-dimensional Gaussian
posterior), besides what its wider region makes up for, it is stuck in a local mode or still far out,
and it jumps to the state of one of the chains that far above it (its own random stream chooses
which): one chain that has found the posterior is enough. A log density compares modes' peaks, not
their masses: a mode :math:`k`-fold wider in each of :math:`d` coordinates holds the same mass
:math:`d \log k` nats lower. So the chains' spreads over their recent tuning states (at least
:data:`RESCUE_EVERY` steps, so from the first check on) are compared too: the difference of their half
log-volumes, :math:`\tfrac12 \log|S_c|` (:func:`~pymc_kameleon.core.adaptation.mode_mass.half_log_volumes`),
is added to the threshold where this chain's region is the wider, unless this chain is still climbing
toward that chain (walking in: its path is no mode's width; decision record 0057). A chain that barely
moved is no destination for one that moves: a funnel's neck has the highest log density and little
mass, and a chain sent there sticks (decision record 0062). The statistic ``rescued`` records a
jump.
"""

from __future__ import annotations

import inspect
import math
import warnings

import cloudpickle
import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection, RaveledVars

from pymc_kameleon.core.adaptation.diagnostics import log_density_climb
from pymc_kameleon.core.adaptation.mode_mass import half_log_volumes
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.pseudo_marginal import pseudo_marginal_terms
from pymc_kameleon.steps.reporting import CLIMB_LIMIT
from pymc_kameleon.steps.variables import continuous_value_vars

__all__ = [
    "RESCUE_EVERY", "RESCUE_NATS", "RESCUE_SDS", "TUNINGS", "PooledTuning", "pooled_class_for",
    "variables_outside_block",
]

TUNINGS = ("pooled", "per_chain")
#: A chain this many nats, plus RESCUE_SDS sqrt(d/2), below another chain's log density at a check
#: during tuning jumps to its state. At d = 8 that is 20 nats: a mode whose log density is 20 nats
#: below another's holds about e^-20 of its mass unless it is far wider.
RESCUE_NATS = 10.0
RESCUE_SDS = 5.0
#: Tuning steps between two checks for stranded chains (besides each window's end).
RESCUE_EVERY = 100


class PooledTuning:
    """Mixin of the pooled variant of a step: ``class PooledX(PooledTuning, X, PopulationArrayStepShared)``.

    Defining the variant is all it takes: it adds the ``rescued`` statistic to ``X``'s, takes ``X``'s
    name (messages and PyMC's step listing name the step the user made; pickling finds the class by
    its qualified name, which stays ``PooledX``) and becomes ``X``'s pooled class
    (:func:`pooled_class_for`).
    """

    pooled = True
    # Whether a stranded chain jumped to another chain's state at this step (tuning only).
    _pooled_stats = {"rescued": (bool, [])}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        step = cls.__bases__[1]
        cls.stats_dtypes_shapes = {**step.stats_dtypes_shapes, **PooledTuning._pooled_stats}
        cls.__name__ = step.__name__
        step._pooled_class = cls

    def link_population(self, population, chain_index):
        """PyMC links the chains' states (refusing fewer than 3 chains; pooling needs 2, and one chain
        tunes alone).

        Each chain's step is PyMC's shallow copy of the step the user made; the copy registers itself
        with it, so that after ``pm.sample(cores=1)`` the user's step shows the last chain's state
        (its GP, its learned covariance, its proposal), as it does with per-chain tuning.
        """
        parallel = len(population) > 1 and (_sample_argument("cores") or 1) > 1
        if chain_index == 0 and self._smc_start is not None and _sample_argument("tune") != 0:
            self._start_population_from_smc(population)
        if parallel:
            # In PyMC's chain processes this error would reach the user as a bare EOFError.
            start = DictToArrayBijection.map({v.name: population[chain_index][v.name] for v in self.vars})
            self._check_population_start(start.data, start.point_map_info)
        if chain_index == 0 and parallel:
            self._warn_if_population_cannot_travel()
        if chain_index == 0 and _sample_callback() is not None:
            warnings.warn(
                f"{type(self).__name__}: pm.sample's callback is never called: PyMC's population sampler, "
                "which pooled tuning runs on, does not call it (with any number of chains). Make the step "
                "with tuning='per_chain' to have it called; the chains then tune alone.",
                KameleonWarning,
                stacklevel=2,
            )
        self.population = population
        self.this_chain = chain_index
        self.other_chains = [c for c in range(len(population)) if c != chain_index]
        self._population_member = True
        registry = self.__dict__.get("_population_steps")
        if registry is not None:
            registry[chain_index] = self

    def _start_population_from_smc(self, population) -> None:
        """``start="smc"``: run the SMC once, here in ``pm.sample``'s process before the chains start
        (so ``cores=1`` and ``cores>1`` give the same draws), keep its result where every chain's copy of
        the step finds it, and start each chain at a distinct particle (PyMC's population is the chains'
        first states)."""
        self._say_initvals_unused()
        shared = self._smc_start
        seed = int(self.rng.integers(2**31))
        result = self.start.run(shared["model"], shared["var_names"], seed, type(self).__name__)
        shared["result"] = shared["last"] = result
        starts = result.starts(len(population), self.rng)
        names = [v.name for v in self.vars]
        info = DictToArrayBijection.map({name: population[0][name] for name in names}).point_map_info
        for point, row in zip(population, starts, strict=True):
            point.update(DictToArrayBijection.rmap(RaveledVars(row, info)))

    def _warn_if_population_cannot_travel(self) -> None:
        """With ``cores>1`` PyMC's population sampler cloudpickles each chain's step into its own process,
        and when that fails it steps the chains one after another in this process, saying why only in a
        debug log (a new user's ``as_op`` made inside a function: the 4 chains ran on one core). Try it
        first (once), and say what failed and what to do."""
        try:
            cloudpickle.dumps(self, protocol=4)
        except Exception as err:  # whatever PyMC's attempt will meet
            said = str(err).strip().splitlines()[0][:300] if str(err).strip() else "no message"
            warnings.warn(
                f"{type(self).__name__}: with cores>1 pooled tuning runs the chains as PyMC's population, "
                f"one process each, which needs the step and the model picklable; here it is not "
                f"({type(err).__name__}: {said}), so PyMC will step the chains one after another in this "
                "process, on one core. Define the model's Ops (as_op, custom Ops, the functions they call) "
                "at the top level of an importable module, not inside a function, or make the step with "
                "tuning='per_chain' (each chain tunes alone, in its own process).",
                KameleonWarning,
                stacklevel=3,
            )

    def __repr__(self):
        # PyMC's messages show the step's repr (a step reused in another model: "mu assigned to <...>
        # sampler is not a value variable"): the class the user made, not its pooled variant's qualname.
        return f"<{type(self).__module__}.{type(self).__name__} object at {id(self):#x}>"

    def _last_run(self):
        if self.__dict__.get("_population_member"):
            return self
        registry = self.__dict__.get("_population_steps")
        return registry[max(registry)] if registry else self

    def __copy__(self):
        # PyMC's population copies share the registry with the step the user made (see link_population).
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

    def __getstate__(self):
        # A pickled step (cores>1 sends one to each worker) carries no other chain's step.
        state = super().__getstate__()
        state["_population_steps"] = {}
        state.pop("_population_member", None)
        return state

    def _population_states(self) -> np.ndarray | None:
        """Every chain's state at the start of this iteration, in the step's raveled coordinates
        (None with fewer than two chains)."""
        population = getattr(self, "population", None)
        if population is None or len(population) < 2:
            return None
        names = [v.name for v in self.vars]
        if len(names) == 1:  # one variable: its values are the rows (the common case, every step)
            name = names[0]
            return np.array([point[name] for point in population], dtype=float).reshape(len(population), -1)
        rows = [np.concatenate([np.ravel(point[n]) for n in names]) for point in population]
        return np.array(rows, dtype=float)

    def _rescue(self, own_logp: float, population, adaptation, window_before: int, rng):
        """At a check during tuning (a window's end, or every :data:`RESCUE_EVERY` steps): if this chain
        is stranded (see the module docstring), jump to another chain's state and return that state
        and its evaluation, else None.

        A jump makes the state the target's current one and restarts the recent states the
        end-of-tuning checks read (the walk before it is no part of this chain's).
        """
        if population is None:
            return None
        if adaptation.window == window_before and adaptation.tune_steps % RESCUE_EVERY:
            return None
        others = [k for k in range(population.shape[0]) if k != self.this_chain]
        evaluations = {k: self._target.evaluate(population[k]) for k in others}
        exact = {k: evaluations[k].exact for k in others}
        gap = RESCUE_NATS + RESCUE_SDS * np.sqrt(self.dim / 2.0)
        above = [k for k in others if np.isfinite(exact[k]) and exact[k] > own_logp + gap]
        if not above:
            return None
        # The widths only where a chain is that far above: 1-2 ms a check (1000 steps of 4 chains, d = 10-50).
        deficits = np.array([exact[k] - own_logp for k in above])
        wider = self._wider_by(adaptation.windows, above, deficits)
        far_above = [k for k, credit in zip(above, wider, strict=True) if exact[k] > own_logp + credit + gap]
        if not far_above:
            return None
        k = far_above[int(rng.integers(len(far_above)))]
        state, evaluation = np.array(population[k], copy=True), evaluations[k]
        self._target.accept(state, evaluation)
        adaptation.windows.forget_recent_states()
        adaptation.blocks.restart()
        return state, evaluation

    def _wider_by(self, windows, others, deficits) -> np.ndarray:
        """Per other chain, how many nats of mass this chain's region holds beyond what its log density
        shows, against that chain's: the difference of their half log-volumes when this one is wider, else
        0 (and 0 where either width is unmeasured). Infinite where that chain is no destination: it moved
        in fewer than MIN_MOVED of the recent steps and this one, not walking in toward it, moved in more
        (a stuck chain's log density is one point's, whose region nobody measured, and a chain sent there
        sticks too: a funnel's neck).

        ``deficits``: how far each other chain's log density is above this chain's. A chain still
        climbing (its log density rose by more than CLIMB_LIMIT sqrt(d/2) between the halves of its
        recent states, or fewer than RESCUE_EVERY of them) is walking in, not sampling a wide mode: its
        path's spread earns nothing against a chain whose deficit it rose by more than. One that rose by
        less is not closing the deficit at that pace: a chain drifting in a funnel's mouth, whose log
        density moves by many sqrt(d/2), against one in its neck.
        """
        climb = log_density_climb(windows.recent_log_density, self.dim, min_states=RESCUE_EVERY)
        if climb > CLIMB_LIMIT:  # toward the chains less far above than it rose
            walking = np.asarray(deficits) < climb * np.sqrt(self.dim / 2.0)
        else:  # NaN: unknown, no credit
            walking = np.full(len(others), math.isnan(climb))
        if walking.all() or not windows.recent_population:
            return np.zeros(len(others))
        volumes = half_log_volumes(np.array(windows.recent_population), RESCUE_EVERY)
        if volumes is None:
            return np.zeros(len(others))
        wider = volumes[self.this_chain] - volumes[others]
        credit = np.where(np.isfinite(wider) & ~walking, np.maximum(wider, 0.0), 0.0)
        # A width is NaN exactly where its chain moved in fewer than MIN_MOVED of the steps.
        stuck = np.isnan(volumes[others]) & np.isfinite(volumes[self.this_chain]) & ~walking
        return np.where(stuck, np.inf, credit)


def pooled_class_for(cls, args, kwargs, default: str):
    """The class ``cls.__new__`` should make: its pooled variant for ``tuning="pooled"``, else ``cls``.

    Two kinds of model tune per chain, because the population of ``cores=1`` runs its chains in one
    process:

    - models with a :func:`~pymc_kameleon.PseudoMarginalPotential`, whose chains would share the
      estimator's kept estimate;
    - models with free variables outside the step's block. Other steps sample them, and PyMC's
      population sampler gives each chain a shallow copy of those steps (``copy(m)`` in
      ``pymc/sampling/population.py``), so the chains share their tuning state: a ``pm.Metropolis``
      on a change point counted every chain's acceptances, its scaling went to 1e9, and the change
      point froze (pymc-devs/pymc#3731 reported the same sharing for DEMetropolis's own scaling). An
      explicit ``tuning="pooled"`` there warns that the step tunes per chain;
    - ``blocked=False`` with several variables, which PyMC splits into one step per variable, each with
      the others outside its block (pooled, each chain's end-of-tuning exam read the other chains'
      values of the other variables, and ``cores=1`` and ``cores=2`` gave different draws).
    """
    tuning = kwargs.get("tuning", default)
    pooled = getattr(cls, "_pooled_class", None)
    # A subclass of a step (a user's, a test's) keeps its own class: its pooled variant is its own to make.
    if tuning != "pooled" or pooled is None or issubclass(cls, PooledTuning) or not issubclass(pooled, cls):
        return cls
    model = pm.modelcontext(kwargs.get("model"))  # AdaptiveStep.__new__ has checked that there is one
    try:
        if pseudo_marginal_terms(model):
            return cls
        outside = variables_outside_block(model, args[0] if args else kwargs.get("vars"), cls.__name__)
        if kwargs.get("blocked") is False and not outside and len(model.value_vars) > 1:
            # PyMC splits the block (here every variable) into one step per variable.
            outside = [model.values_to_rvs[v].name for v in model.value_vars]
    except (TypeError, ValueError, KeyError):  # misused input: the step's __init__ says what is wrong
        return cls
    if outside:
        if kwargs.get("tuning") == "pooled":
            warnings.warn(
                f"{cls.__name__}: {outside} {'is' if len(outside) == 1 else 'are'} sampled by another step, "
                "so this step tunes per chain (tuning='per_chain'): PyMC's population sampler, which "
                "pooled tuning runs on, would give the chains shallow copies of the other steps at "
                "cores=1, sharing their tuning state.",
                KameleonWarning,
                stacklevel=3,
            )
        return cls
    return pooled


def _sample_callback():
    """The ``callback`` of the ``pm.sample`` call that is linking the population, or None (PyMC's
    population sampler takes it and never calls it; no hook tells a step, so its frame is read)."""
    return _sample_argument("callback")


def _sample_argument(name: str):
    """The local ``name`` (an argument) of the ``pm.sample`` call running now, or None outside one."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if frame.f_code.co_name == "sample" and frame.f_globals.get("__name__") == "pymc.sampling.mcmc":
                return frame.f_locals.get(name)
            frame = frame.f_back
        return None
    finally:
        del frame


def variables_outside_block(model, vars, step_name: str) -> list[str]:
    """Names of the model's free variables that a step given ``vars`` (None: every continuous one) leaves
    to other steps. The block is resolved as the step's ``__init__`` resolves it, whose errors (a discrete
    variable in ``vars``, no continuous variable) :func:`pooled_class_for` leaves to ``__init__``."""
    inside = {v.name for v in continuous_value_vars(vars, model, step_name)}
    return [model.values_to_rvs[v].name for v in model.value_vars if v.name not in inside]
