r"""Starts from a tempered SMC run (``start="smc"``): particles that cover the posterior before tuning.

Where a posterior is a thin curved ridge (a latent GP's tube), chains that walk in from their starts
tune on what they find. A tempered run does not walk in: :class:`~pymc_kameleon.KASS` moves its
particles from the prior to the posterior through intermediate targets, and its last particles cover
the posterior's bulk (decision 0060: on the latent Poisson GP regression 2000 particles got every mean
within 0.07 posterior sd). With
``start=SMCStart()`` (or ``start="smc"``) the step runs ``pm.sample_smc(kernel=KASS)`` once before
tuning; the particles give

- each chain its start (distinct particles, drawn at random), and
- the tuning's first mean, covariance and Kameleon subsample :math:`Z`: they take the coordinate
  scan's place and stay in the first adaptation window
  (:meth:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation.start_from_draws`).

With ``KameleonMetropolis`` the step then proposes through a triangular map fitted to the particles
(``transport_map``), which is what made the latent GP converge; the particles alone did not.

With pooled tuning one run serves the population: chain 0 makes it when PyMC links the chains (in
``pm.sample``'s process, before the chains start), and its evaluations count in chain 0's first
``logp_evals`` (a tuning step's, which PyMC discards by default) and so in its
``cumulative_logp_evals``. Tuning per chain (``tuning="per_chain"``, ``chains=1``), each chain makes its
own run at its first step, counted in its own. The run costs what it costs: about :math:`N` times the
number of tempering stages times a few sweeps (750 000 evaluations on the latent GP at
:math:`N = 2000`, 20 times the chains'; 20 to 50 times on the models tried), so it is an option, not
the default. It says one line in PyMC's log, and ``step.smc_start_result`` keeps it.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
from pymc.pytensorf import join_nonshared_inputs
from pymc.vartypes import discrete_types

from pymc_kameleon.core.validation import unexpected_keyword_error
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.steps.population import _sample_argument, variables_outside_block
from pymc_kameleon.steps.starts import STARTS
from pymc_kameleon.steps.variables import coordinate_names, has_improper_prior, ordered_value_variables

__all__ = [
    "REFERENCES", "SMC_START_PARTICLES", "SMCStart", "SMCStartResult", "SMCStarting", "improper_variables",
    "resolve_start",
]


#: Particles of the SMC run: with 2000 the latent GP's particles had every mean within 0.07 posterior sd
#: and every sd within 11% (decision 0060); with 1000 the map built on them mixed less well (R-hat up to
#: 1.011 against 1.005).
SMC_START_PARTICLES = 2000
#: What a run tempers from (``SMCStart(reference=...)``; None: the prior where it can be drawn from).
REFERENCES = (None, "prior", "mode")
# The one vector variable of the model tempered from the mode (the step's raveled coordinates).
_BRIDGE_VARIABLE = "__smc_start_coordinates"


@dataclass(frozen=True)
class SMCStart:
    """The ``start`` option that starts tuning from a ``pm.sample_smc(kernel=KASS)`` run.

    Parameters
    ----------
    particles : int, default 2000
        Particles of the run (``draws`` of ``pm.sample_smc``); at least 100.
    transport_map : bool, optional
        Propose through a triangular map fitted to the particles
        (:class:`~pymc_kameleon.core.adaptation.transport_map.MapMixtureProposal`: half independent
        draws through the map, half a walk in its reference coordinates whose scale tunes), fixed for
        the whole run, instead of the step's own proposal. It straightens a curved posterior that no
        learned covariance fits (the latent GP's tube, decision 0060), and is what makes the start pay:
        the particles alone (starts and first covariance) left the latent GP and an 8-d banana as
        unconverged as the default. By default (None) on where the step offers it,
        :class:`~pymc_kameleon.KameleonMetropolis`; ``True`` elsewhere is an error.
    kernel_options : dict, optional
        Options of :class:`~pymc_kameleon.KASS` (``n_subsample``, ``waste_free``, ``threshold``, ...),
        checked when the start is made.
    reference : {None, "prior", "mode"}, optional
        What the run tempers from. ``"prior"``: the model's prior (PyMC's SMC). ``"mode"``: a wide
        Gaussian around the density's mode (:func:`~pymc_kameleon.core.smc.reference.mode_reference`:
        Powell's method from the model's initial point, then each coordinate's sd 30 times what its
        curvature there implies), for models whose prior SMC cannot draw from: an improper prior
        (``pm.Flat``, ``pm.HalfFlat``), or a variable with PyMC's ordered transform (whose prior draws are
        out of order). By default (None) the prior where PyMC's SMC can draw from it, else the mode. The
        variables' initvals are set aside for the run from the prior (PyMC's SMC would start every
        particle there; the chains start at particles anyway).
    """

    particles: int = SMC_START_PARTICLES
    transport_map: bool | None = None
    kernel_options: dict = field(default_factory=dict)
    reference: str | None = None

    def __post_init__(self):
        if isinstance(self.particles, bool) or not isinstance(self.particles, int | np.integer):
            raise TypeError(f"SMCStart: particles must be an integer, got {self.particles!r}.")
        if self.particles < 100:
            raise ValueError(
                f"SMCStart: particles={self.particles} is too few to cover a posterior; use at least 100 "
                f"(default {SMC_START_PARTICLES})."
            )
        if not isinstance(self.kernel_options, dict):
            raise TypeError("SMCStart: kernel_options must be a dict of KASS's options.")
        if self.transport_map not in (None, True, False):
            raise TypeError(
                f"SMCStart: transport_map must be True, False or None, got {self.transport_map!r}."
            )
        if self.reference not in REFERENCES:
            raise ValueError(f"SMCStart: reference must be one of {REFERENCES}, got {self.reference!r}.")
        reserved = _RESERVED & set(self.kernel_options)
        if reserved:
            raise ValueError(
                f"SMCStart: {sorted(reserved)} {'is' if len(reserved) == 1 else 'are'} set by the start "
                "itself; give the particles as particles=... and leave the rest to pm.sample."
            )
        known = _kass_options()
        for key in self.kernel_options:
            if key not in known:
                raise unexpected_keyword_error("KASS", key, known, " (in SMCStart's kernel_options)")

    def run(self, model, var_names: list[str], seed: int, step_name: str = "SMCStart") -> SMCStartResult:
        """Run ``pm.sample_smc(kernel=KASS)`` on ``model`` and return the particles in the step's coordinates
        (the raveled value variables of ``var_names``, in that order), the log-density evaluations made and
        the log evidence. PyMC's log and KASS's warnings are the start's business, not the user's: the run
        says one line in PyMC's log instead (what it cost, where that is counted, its log evidence)."""
        from pymc_kameleon.smc import KASS
        from pymc_kameleon.smc.results import log_evidence, stage_stats
        from pymc_kameleon.steps.tuned import value_space_draws

        reference = self.reference_for(model)
        smc_model, found = model, None
        if reference == "mode":
            found, smc_model = _tempering_from_the_mode(model, var_names, step_name)
        pymc_log = logging.getLogger("pymc")
        level = pymc_log.level
        pymc_log.setLevel(logging.WARNING)
        try:
            with warnings.catch_warnings(record=True) as caught, _initvals_set_aside(smc_model):
                warnings.simplefilter("always")
                try:
                    idata = pm.sample_smc(
                        self.particles, kernel=KASS, chains=1, cores=1, random_seed=int(seed),
                        model=smc_model, progressbar=False, compute_convergence_checks=False,
                        **self.kernel_options,
                    )
                except (ValueError, FloatingPointError, np.linalg.LinAlgError) as err:
                    # KASS's own errors say what failed (particles collapsed at a tiny beta, ...); say whose.
                    other = "'mode'" if reference == "prior" else "'prior' if PyMC's SMC can draw from it"
                    raise type(err)(
                        f"{step_name}: the SMC run of start='smc' failed: {err} Try more particles "
                        "(SMCStart(particles=...)), a higher threshold "
                        f"(SMCStart(kernel_options={{'threshold': 0.8}})), SMCStart(reference={other}), or "
                        "start='search'."
                    ) from err
                evidence = log_evidence(idata)
        finally:
            pymc_log.setLevel(level)
        if found is None:
            particles = value_space_draws(idata, 0, model=model, var_names=var_names)
        else:
            particles = np.asarray(idata.posterior[_BRIDGE_VARIABLE].values[0], dtype=float)
        checked = int(idata.sample_stats.attrs.get("batch_check_evals", 0))  # the vectorised graph's check
        evaluations = particles.shape[0] + int(np.sum(stage_stats(idata, "likelihood_evals")[0])) + checked
        if found is not None:
            evaluations += found.n_evals
        stages = len(stage_stats(idata, "beta")[0])
        # KASS's own warnings (on its evidence, its mixing) are kept, not shown: the start uses the particles.
        said = tuple(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, KameleonWarning)))
        result = SMCStartResult(
            particles, evaluations, float(evidence.log_z[0]), float(evidence.std_error[0]), stages, said,
            reference,
        )
        source = "" if found is None else " tempered from a wide Gaussian around the mode,"
        # With an improper prior the run's constant is the integral of the model's density, no evidence.
        constant = "log normalising constant" if improper_variables(model) else "log evidence"
        warned = (
            f"; KASS warned {len(said)} time(s): read step.smc_start_result.warnings before trusting this "
            f"{constant}" if said else ""
        )
        pymc_log.info(
            f"{step_name}: started from an SMC run (KASS, {self.particles} particles,{source} "
            f"{stages} stage{'s' if stages != 1 else ''}, "
            f"{evaluations:,} log-density evaluations, in cumulative_logp_evals; {constant} "
            f"{result.log_evidence:.2f} +- {result.log_evidence_se:.2f}{warned})"
        )
        return result

    def reference_for(self, model) -> str:
        """``"prior"`` or ``"mode"``: what a run on ``model`` tempers from (``reference``, or by default
        the prior where PyMC's SMC can draw from it: not from an improper prior, nor from a variable with
        PyMC's ordered transform, whose elements it draws out of order, where the log prior is NaN; a new
        user's ordinal regression failed with start='smc' at 1915 of 2000 particles)."""
        if self.reference is not None:
            return self.reference
        drawable = not improper_variables(model) and not ordered_value_variables(model.value_vars)
        return "prior" if drawable else "mode"


_RESERVED = frozenset({
    "draws", "kernel", "chains", "cores", "random_seed", "model", "start", "progressbar",
    "compute_convergence_checks", "return_inferencedata",
})


def _kass_options() -> list[str]:
    """The keyword options ``pm.sample_smc(kernel=KASS, ...)`` passes to the kernel: KASS's own, its batched
    base's and PyMC's SMC kernel's."""
    import inspect

    from pymc.smc.kernels import SMC_KERNEL

    from pymc_kameleon.smc import KASS
    from pymc_kameleon.smc._batched import BatchedSMCKernel

    names = set()
    for function in (KASS.__init__, BatchedSMCKernel.__init__, SMC_KERNEL.__init__):
        for name, parameter in inspect.signature(function).parameters.items():
            if parameter.kind is parameter.KEYWORD_ONLY or parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
                names.add(name)
    return sorted(names - {"self"} - _RESERVED)


def improper_variables(model) -> list[str]:
    """The free variables with an improper prior (``pm.Flat``, ``pm.HalfFlat``): PyMC's SMC cannot draw
    them."""
    return [rv.name for rv in model.free_RVs if has_improper_prior(rv)]


def _log_density_of_coordinates(model, var_names):
    """The model's log density (Jacobians included) as a graph of one vector, the raveled value variables
    of ``var_names`` in that order (the step's coordinates): ``(log density, vector)``."""
    values = [model.rvs_to_values[model[name]] for name in var_names]
    [log_density], coordinates = join_nonshared_inputs(model.initial_point(), [model.logp()], values)
    return log_density, coordinates


@contextmanager
def _initvals_set_aside(model):
    """PyMC's SMC starts every particle of a variable with an ``initval`` there: the run sets them aside
    (the chains start at particles, so they would not be used), and puts them back after."""
    kept = dict(model.rvs_to_initial_values)
    try:
        for rv in kept:
            model.rvs_to_initial_values[rv] = None
        yield
    finally:
        model.rvs_to_initial_values.update(kept)


def _reference_log_density(found, coordinates):
    """The reference's log density at ``coordinates`` (a graph), which the tempered model's Potential
    subtracts."""
    return pm.logp(pm.Normal.dist(found.mean, found.sd), coordinates).sum()


def _tempering_from_the_mode(model, var_names, step_name: str):
    r"""The reference around the mode (:func:`~pymc_kameleon.core.smc.reference.mode_reference`, searched
    from the model's initial point) and the model ``pm.sample_smc`` tempers from it: one vector variable
    :math:`x` with the reference as its prior and the log density minus the reference's as a Potential,
    so that its tempered targets run from the reference to the model's posterior, in the step's
    coordinates."""
    from pymc.blocking import DictToArrayBijection
    from pytensor.graph.replace import graph_replace

    from pymc_kameleon.core.smc import reference as references

    point = model.initial_point()
    values = [model.rvs_to_values[model[name]] for name in var_names]
    x0 = DictToArrayBijection.map({v.name: point[v.name] for v in values}).data
    log_density, x = _log_density_of_coordinates(model, var_names)
    # PyMC's compilation, so that a parameter outside its support (a scale of 0) is -inf, not an error.
    density = model.compile_fn(log_density, inputs=[x], point_fn=False)
    try:
        found = references.mode_reference(lambda v: float(density(v)), x0, references.REFERENCE_WIDTH)
    except references.NoModeError as err:
        labels = coordinate_names(values, point, model)
        along = ", ".join(labels[i] for i in err.coordinates)
        raise ValueError(
            f"{step_name}: start='smc' tempers from the density's mode (reference='mode'), and {err} "
            f"(along {along}). Give the variables proper priors and temper from them (reference='prior', "
            "the default then), or use start='search'."
        ) from None
    except ValueError as err:
        raise ValueError(f"{step_name}: start='smc' with reference='mode': {err}.") from None
    # A model of its own, never a submodel of the one in context.
    with pm.Model(model=None) as tempered:
        coordinates = pm.Normal(_BRIDGE_VARIABLE, found.mean, found.sd, shape=found.mean.shape[0])
        density_graph = graph_replace(log_density, {x: coordinates}, strict=False)
        pm.Potential("log_density_over_reference", density_graph - _reference_log_density(found, coordinates))
    return found, tempered


@dataclass(frozen=True)
class SMCStartResult:
    """What an :class:`SMCStart` run gave.

    Attributes
    ----------
    particles : array of shape (N, d)
        The last stage's particles in the step's coordinates.
    evaluations : int
        Log-density evaluations of the run (the initial particles', every sweep's and those of KASS's check
        of the vectorised log density).
    log_evidence, log_evidence_se : float
        The run's estimate of the log marginal likelihood and its single-run standard error
        (:func:`~pymc_kameleon.smc.log_evidence`).
    stages : int
        Tempering stages.
    warnings : tuple of str
        What KASS warned during the run (a biased evidence, stages that barely mixed, ...), which the
        start keeps from the user's session; empty if nothing.
    reference : str
        What the run tempered from: ``"prior"`` or ``"mode"`` (``SMCStart(reference=...)``). From the mode
        with an improper prior, ``log_evidence`` is the log of the model density's integral.
    """

    particles: np.ndarray
    evaluations: int
    log_evidence: float
    log_evidence_se: float
    stages: int
    warnings: tuple = ()
    reference: str = "prior"

    def starts(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` distinct particles (with repeats only if there are fewer distinct ones), drawn at random."""
        distinct = np.unique(self.particles, axis=0)
        rows = rng.choice(distinct.shape[0], size=n, replace=n > distinct.shape[0])
        return distinct[rows]


class SMCStarting:
    """Mixin of :class:`~pymc_kameleon.steps.base.AdaptiveStep`: what a step does with ``start="smc"``
    (its checks when it is made, the run, and the chain's start and first tuning from its particles).
    The step keeps the option in ``self.start`` and, with ``start="smc"``, the model and the run in the
    dict ``self._smc_start`` (else None)."""

    #: Whether the step can start from an SMC run (``start="smc"``).
    _smc_start_supported = True

    def _check_smc_start(self, model, vars, target) -> None:
        """``start="smc"`` runs ``pm.sample_smc`` on the whole model: the step must sample every free
        variable, and no likelihood may be an estimate."""
        name = type(self).__name__
        if not self._smc_start_supported:
            raise ValueError(f"{name}: start='smc' is not available for this step; use 'search'.")
        discrete = [rv.name for rv in model.free_RVs if rv.dtype in discrete_types]
        if discrete:
            raise ValueError(
                f"{name}: start='smc' runs pm.sample_smc on the whole model, which samples continuous "
                f"variables only, and {discrete} {'is' if len(discrete) == 1 else 'are'} discrete; use "
                "start='search'."
            )
        outside = variables_outside_block(model, vars, name)
        if outside:
            raise ValueError(
                f"{name}: start='smc' runs pm.sample_smc on the whole model, but {outside} "
                f"{'is' if len(outside) == 1 else 'are'} sampled by another step; give this step every "
                "free variable, or use start='search'."
            )
        if self.start.reference == "prior":
            improper = improper_variables(model)
            if improper:
                raise ValueError(
                    f"{name}: start=SMCStart(reference='prior') tempers from draws of the prior, and "
                    f"{improper} {'has' if len(improper) == 1 else 'have'} an improper prior (pm.Flat, "
                    "pm.HalfFlat) with none; use reference='mode' (the default for such models), or "
                    "start='search'."
                )
        offers_map = type(self)._propose_through_map is not SMCStarting._propose_through_map
        if self.start.transport_map and not offers_map:
            raise ValueError(f"{name}: SMCStart(transport_map=True) is offered by KameleonMetropolis only.")
        # None: on where the step offers it.
        self._use_map = offers_map if self.start.transport_map is None else self.start.transport_map
        if target.has_estimates:
            raise ValueError(
                f"{name}: start='smc' is not available with a PseudoMarginalPotential (the chains keep their "
                "estimates from their own starts); use start='initial_point', or pm.sample_smc(kernel=KASS) "
                "itself, which handles estimated likelihoods."
            )

    def _smc_start_result(self):
        """The SMC run's result for this chain: the population's (made by chain 0 when PyMC linked the
        chains), else a run of this chain's own, seeded from its stream."""
        shared = self._smc_start
        # Linked into PyMC's population (pooled tuning, any number of chains, in any process): chain 0
        # ran it there. (A population of one chain ran it too: a second run here doubled the cost.)
        if getattr(self, "population", None) is not None and "result" in shared:
            return shared["result"], False
        seed = int(self.rng.integers(2**31))
        result = self.start.run(shared["model"], shared["var_names"], seed, type(self).__name__)
        shared["last"] = result
        return result, True

    def _say_initvals_unused(self) -> None:
        """Say that ``pm.sample``'s ``initvals`` are not used when they were given: each chain starts at
        a particle (a new user's initvals were set aside with nothing said). Said once for the same
        initvals."""
        shared = self._smc_start
        initvals = _sample_argument("initvals")
        if initvals is None or shared.get("initvals_said") is initvals:
            return
        shared["initvals_said"] = initvals
        warnings.warn(
            f"{type(self).__name__}: start='smc' starts each chain at one of the SMC run's particles, so "
            "pm.sample's initvals are not used; to start the chains there, pass start='initial_point' (or "
            "start='search' to search from them).",
            KameleonWarning,
            stacklevel=2,
        )

    def _start_from_smc(self, y):
        """``start="smc"``, at the chain's first tuning step: seed the tuning with the run's particles and,
        tuning alone, move to one of them. Returns the new state and its evaluation, or None if the chain
        keeps ``y`` (a pooled chain: PyMC's population already starts at its particle)."""
        result, own = self._smc_start_result()
        if own or self._speaks_for_population:
            self._target.n_evals += result.evaluations
        adaptation = self._start_adaptation
        use_map = self._use_map
        if adaptation.start_from_draws(result.particles, self.rng, use_map) and use_map:
            self._propose_through_map(adaptation.state)
        if not own:
            return None
        self._say_initvals_unused()
        state = result.starts(1, self.rng)[0]
        evaluation = self._target.evaluate(state)
        self._target.accept(state, evaluation)
        return state, evaluation

    @property
    def smc_start_result(self):
        """With ``start="smc"``: the last SMC run's :class:`~pymc_kameleon.steps.smc_start.SMCStartResult`
        (its particles, evaluations and log evidence), the population's with pooled tuning, else that of
        the chain run last; None before a run (or with another start)."""
        shared = self._smc_start
        if shared is None:
            return None
        return shared.get("last")

    @property
    def _start_adaptation(self):
        """The chain's scale-free adaptation, which an SMC start seeds."""
        raise NotImplementedError

    def _propose_through_map(self, state) -> None:
        """After an SMC start with ``transport_map=True``: make the chain's proposal the map's (only
        KameleonMetropolis offers it; the others refuse the option when they are made)."""


def resolve_start(start, step_name: str = "start", smc_supported: bool = True, estimated: bool = False):
    """``start`` as the step keeps it: ``"search"``, ``"initial_point"`` or an :class:`SMCStart`
    (``"smc"`` is ``SMCStart()``); anything else raises a ValueError naming the choices ``step_name``
    offers (without ``"smc"`` where ``smc_supported`` is False; the step refuses it later, saying why).

    None (the steps' default) is ``"search"``, or ``"initial_point"`` where the model has a
    PseudoMarginalPotential (``estimated``): a noisy estimate is no objective for a search, so asking
    for one there is refused rather than silently not made."""
    if start is None:
        return "initial_point" if estimated else "search"
    if isinstance(start, SMCStart):
        return start
    if start == "smc":
        return SMCStart()
    if start == "search" and estimated:
        raise ValueError(
            f"{step_name}: start='search' is not available with a PseudoMarginalPotential (a noisy estimate "
            "is no objective for a search); leave start unset or use start='initial_point', and pass "
            "initvals near the posterior if the prior's are far from it."
        )
    if start in STARTS:
        return start
    choices = f"one of {(*STARTS, 'smc')} or an SMCStart(...)" if smc_supported else f"one of {STARTS}"
    raise ValueError(f"{step_name}: start must be {choices}, got {start!r}.")
