"""The PyMC side of :class:`~pymc_kameleon.smc.KASS`: an SMC kernel base that evaluates the log densities
of all proposals at once (:class:`BatchedSMCKernel`), and checks on the model and its prior draws.

The batched log density is one PyTensor function mapping an (m, D) array of particles to their
(prior, likelihood) log densities, built with ``vectorize_graph``. Where the model does not
vectorise, or the vectorised function disagrees with PyMC's per-particle functions, or PyTensor would
run it as a Python loop over every particle's linear algebra (:func:`looped_core_calls`), the kernel
evaluates the particles one by one (:func:`evaluate_each`).
"""

from __future__ import annotations

import inspect
import logging
import math
from functools import partial

import numpy as np
import pytensor.tensor as pt
from pymc.model import modelcontext
from pymc.pytensorf import compile, floatX, join_nonshared_inputs, make_shared_replacements
from pymc.smc.kernels import SMC_KERNEL
from pytensor import shared
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.op import HasInnerGraph
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.traversal import graph_inputs
from pytensor.link.basic import JITLinker
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.random.type import RandomGeneratorType
from scipy.special import logsumexp

from pymc_kameleon.core.linalg import one_blas_thread
from pymc_kameleon.core.smc.population import refine_tempering_step
from pymc_kameleon.core.validation import check_number, check_smc_threshold, unexpected_keyword_error
from pymc_kameleon.core.warning_categories import KameleonRuntimeWarning, KameleonWarning
from pymc_kameleon.executors import as_executor_option
from pymc_kameleon.pseudo_marginal import PseudoMarginalOp
from pymc_kameleon.smc.particle_checks import (
    angle_columns,
    check_prior_draws,
    constant_draw_causes,
    improper_prior_error,
    improper_prior_names,
    nan_prior_hint,
    variable_slices,
)
from pymc_kameleon.steps.reporting import StepWarnings
from pymc_kameleon.steps.target_density import FLAT_ESTIMATE_CALLS, FLAT_ESTIMATE_NATS
from pymc_kameleon.steps.variables import refuse_minibatch_data

# KASS's logger: its messages name KASS.
_log = logging.getLogger("pymc_kameleon.smc.kass")

# Rows per vectorised log-density call: bounds the memory of models with many observations.
_LOGP_BATCH_ROWS = 1024
_BATCH_CHECK_POINTS = 8  # particles compared between the vectorised and PyMC's log densities (per chain)
# Core calls per particle that PyTensor's Python loop over a Blockwise may add before a loop over the
# particles is faster: one call of PyMC's per-particle functions costs about as much as 8 of them (26
# against 3.2 us: a 3-d MvNormal's likelihood and prior, one SolveTriangular of its loop, PyTensor 2.38).
_LOOPED_CALLS_PER_PARTICLE = 8


class BatchedSMCKernel(SMC_KERNEL):
    """An SMC kernel whose proposals' log densities are evaluated all at once, where the model allows it.

    With ``batch_logp`` (``"auto"``, True or False) one vectorised PyTensor function evaluates an
    (m, D) array of proposals (:func:`compile_batch_logp`); ``"auto"`` uses it when the model
    vectorises and the function agrees with PyMC's per-particle ones on each chain's first particles,
    and never with pseudo-marginal terms (their estimates are random); ``True`` insists. Otherwise
    :meth:`_evaluate` loops over the proposals. Pseudo-marginal estimators draw from generators
    spawned from the chain's. Each chain starts with a check that the prior draws vary, and with
    fresh :class:`~pymc_kameleon.steps.reporting.StepWarnings` (``_warnings``).

    With an ``executor`` (:class:`~pymc_kameleon.executors.ExecutorOption`) the likelihoods of the
    initial particles and of every sweep's proposals are evaluated on it, one task per worker, and the
    prior in this process; the values, hence the draws and the evidence, are the serial ones.
    """

    @classmethod
    def _check_keywords(cls, kwargs) -> None:
        """A keyword neither this kernel nor PyMC's SMC kernel takes is a TypeError naming the kernel and the
        closest option (``pm.sample_smc(kernel=KASS, learnin_rate=3)`` failed inside PyMC with
        "SMC_KERNEL.__init__() got an unexpected keyword argument", naming neither)."""
        pymc_keywords = inspect.signature(SMC_KERNEL.__init__).parameters
        if any(p.kind is p.VAR_KEYWORD for p in pymc_keywords.values()):
            return
        known = set(pymc_keywords)
        for klass in cls.__mro__:  # every keyword a class between cls and PyMC's takes (executor, ...)
            if "__init__" in vars(klass):
                known |= set(inspect.signature(klass.__init__).parameters)
        known -= {"self", "args", "kwargs"}
        unknown = [k for k in kwargs if k not in known]
        if not unknown:
            return
        where = " (a kernel option of pm.sample_smc)"
        raise unexpected_keyword_error(cls.__name__, unknown[0], sorted(known), where)

    def __init__(self, *args, batch_logp="auto", executor=None, **kwargs):
        name = type(self).__name__
        self._check_keywords(kwargs)
        draws = kwargs.get("draws", args[0] if args else 2000)
        try:  # draws=1 failed deep in PyMC's resampling with "array is 0-dimensional"
            check_number("draws (the number of particles)", draws, integer=True, minimum=2, strict=False)
        except ValueError as err:
            raise ValueError(
                f"{name}: {err} An evidence with an error bar needs a few hundred or more."
            ) from None
        check_smc_threshold(name, kwargs.get("threshold", 0.5), draws)
        self.executor = as_executor_option(executor, name)
        if self.executor is not None:
            self.executor.warm_up()  # the workers load PyTensor's compiled modules while PyMC compiles
        super().__init__(*args, **kwargs)
        self.batch_logp = batch_logp
        self._evaluations = 0  # running count of likelihood evaluations at proposals
        self._check_evaluations = 0  # the batch check's evaluations (setup_kernel)
        self._nan_likelihoods, self._first_nan = 0, None  # (setup_kernel: per chain)
        self._use_batch = False
        self._warnings = StepWarnings()
        self._pseudo_marginal_ops = pseudo_marginal_ops(self.likelihood_logp_func)
        if self.executor is not None and self._pseudo_marginal_ops:
            raise ValueError(
                f"{name}: an executor cannot evaluate a model with a PseudoMarginalPotential particle by "
                "particle (each estimate's random stream must come from this chain). Give the executor to "
                "the potential instead: PseudoMarginalPotential(..., replicates=k, executor=...) splits "
                "every estimate into k independent parts evaluated in parallel."
            )
        model = modelcontext(kwargs.get("model"))
        refuse_minibatch_data(model, name)  # else stages later: "do not vary in every coordinate ..."
        self._draw_causes = constant_draw_causes(model)  # for check_prior_draws's message
        self._improper_prior_error = improper_prior_error(name, model)  # for initialize_population's
        self._improper_priors = improper_prior_names(model)  # for the evidence (KASS's settings)
        self._angle_columns = angle_columns(self.variables, self.var_info, model)  # angles (KASS's tune)
        # variable name -> value variable name, for _complete_start's message
        self._value_names = {rv.name: value.name for value, rv in model.values_to_rvs.items()}
        self._batch_logp_func = None
        self._batch_on_worker = None  # evaluate_batch bound to _batch_logp_func, for the executor
        random = draws_random_numbers(self.prior_logp_func) or draws_random_numbers(self.likelihood_logp_func)
        if random and self.executor is not None:
            raise ValueError(
                f"{name}: an executor cannot evaluate a model whose log density draws random numbers (a "
                "pm.Simulator): the workers' simulations would depend on how the particles are split among "
                "them, so the draws would not be those of the serial run. Sample it without executor=."
            )
        if random and batch_logp is True:
            raise ValueError(
                f"{name}: batch_logp=True, but the model's log density draws random numbers (a "
                "pm.Simulator): a vectorised function would simulate for all particles at once, not as "
                "PyMC's per-particle functions do. Leave batch_logp at 'auto', which evaluates such a "
                "model particle by particle."
            )
        if random:  # a pm.Simulator (ABC): PyMC's per-particle functions, each on this chain's stream
            _log.info("%s: the model's log density draws random numbers; evaluating particles one by one.",
                      name)
        elif batch_logp is True or (batch_logp == "auto" and not self._pseudo_marginal_ops):
            self._batch_logp_func = compile_batch_logp(
                model,
                self.variables,
                kwargs.get("compile_kwargs"),
                strict=batch_logp is True,
            )
        if batch_logp == "auto" and self._batch_logp_func is not None:
            extra = loops_added_per_particle(
                self._batch_logp_func,
                (self.prior_logp_func, self.likelihood_logp_func),
                model,
                self.variables,
                kwargs.get("compile_kwargs"),
            )
            inner = looped_inner_graphs(self._batch_logp_func)
            if inner:
                # An AR(1) likelihood written with pytensor.scan, 1000 particles, PyMC 5: 19 s vectorised,
                # 1.1-3.0 s one by one, the same draws (kass_linear_algebra.py --scan).
                _log.info(
                    "%s: the vectorised log density would run %s once per particle in PyTensor's Python loop "
                    "(Blockwise), where PyMC's per-particle functions run it compiled; evaluating particles "
                    "one by one (faster here; batch_logp=True insists).",
                    name,
                    " and ".join(inner),
                )
                self._batch_logp_func = None
            elif extra > _LOOPED_CALLS_PER_PARTICLE:
                # A 3-d MvNormal with an LKJ Cholesky factor, 100 rows: 68.6 s vectorised, 9.2 s one by one.
                _log.info(
                    "%s: the vectorised log density would make %d more calls per particle of a "
                    "linear-algebra Op in PyTensor's Python loop (Blockwise) than PyMC's per-particle "
                    "functions; evaluating particles one by one (faster here; batch_logp=True insists).",
                    name,
                    extra,
                )
                self._batch_logp_func = None

    def set_rng(self, rng: np.random.Generator):
        """Give this chain's generator to PyMC's functions, the batched function and the estimators."""
        super().set_rng(rng)
        if self._batch_logp_func is not None:
            self._batch_logp_func = with_rng(self._batch_logp_func, rng)
            self._batch_on_worker = partial(evaluate_batch, self._batch_logp_func)  # pickled once per chain
        # The estimators draw from their Op's own generator when PyMC's functions run them.
        self._pseudo_marginal_ops = pseudo_marginal_ops(self.likelihood_logp_func)
        for op, child in zip(
            self._pseudo_marginal_ops, rng.spawn(len(self._pseudo_marginal_ops)), strict=True
        ):
            op.set_rng(child)

    def __call__(self, *args, **kwargs):
        # pm.sample_smc calls its kernel argument to make one kernel per chain: an instance lands here.
        name = type(self).__name__
        raise TypeError(
            f"{name}: pm.sample_smc takes the kernel class, not an instance: write "
            f"pm.sample_smc(kernel={name}, ...) and give the kernel's options as keywords of pm.sample_smc "
            "(for example n_steps=...)."
        )

    @one_blas_thread
    def setup_kernel(self):
        """Check the prior draws, and choose between batched and per-particle evaluation for this chain."""
        if self.start is None:
            check_prior_draws(self.tempered_posterior, self.variables, self.var_info, self._draw_causes)
        self._warnings = StepWarnings()
        self._nan_likelihoods = 0  # proposals inside the prior's support whose log-likelihood was NaN
        self._first_nan = None  # the first of them
        # PyMC reuses one kernel for sequential chains: the NaN warning counts this chain's proposals.
        self._evaluations_before_chain = self._evaluations
        # A model without observed terms has a float32 ``datalogp`` (PyMC's constant 0); float32
        # weights then sum to less than 1 and PyMC's systematic resampling indexes past the end.
        self.prior_logp = np.asarray(self.prior_logp, dtype=np.float64).reshape(self.draws)
        self.likelihood_logp = np.asarray(self.likelihood_logp, dtype=np.float64).reshape(self.draws)
        self._check_initial_densities()
        self._warn_flat_estimates()
        # The check below evaluates the likelihood again at the first particles (KASS's settings say so).
        self._check_evaluations = 0 if self._batch_logp_func is None else batch_check_points(self.draws)
        self._use_batch = self._batch_logp_func is not None and batch_matches(
            self._batch_logp_func,
            self.tempered_posterior,
            self.prior_logp,
            self.likelihood_logp,
            strict=self.batch_logp is True,
            warnings=self._warnings,
        )

    def initialize_population(self):
        """PyMC's prior draws, with a clear error where an improper prior has none."""
        try:
            return super().initialize_population()
        except NotImplementedError as err:
            if self._improper_prior_error is None:
                raise
            raise self._improper_prior_error from err

    @one_blas_thread
    def _initialize_kernel(self):
        """PyMC's initialisation (after :meth:`_complete_start`); with an executor, the initial likelihoods
        are evaluated on it."""
        self._complete_start()
        if self.executor is None:
            return super()._initialize_kernel()
        likelihood = self.likelihood_logp_func
        self.likelihood_logp_func = _not_evaluated  # PyMC's loop is skipped, the values come next
        try:
            super()._initialize_kernel()
        finally:
            self.likelihood_logp_func = likelihood
        self.likelihood_logp = self._likelihoods_on_executor(self.tempered_posterior)

    def _complete_start(self) -> None:
        """A ``start=`` that gives draws of some value variables: the others from the prior's draws, as
        without ``start=`` (PyMC needs every one, and said only ``KeyError: 'beta'`` to a new user who
        gave the sorted draws of an ordered variable, as the NaN-prior error suggests). A name of a
        variable whose value variable is another (``cut`` for ``cut_ordered__``) is an error, and so are
        fewer draws than particles."""
        if not self.start:
            return
        name = type(self).__name__
        names = [v.name for v in self.variables]
        missing = [n for n in names if n not in self.start]
        misnamed = {
            rv: value for rv, value in self._value_names.items() if value in missing and rv in self.start
        }
        if misnamed:
            raise ValueError(
                f"{name}: start= gives {sorted(misnamed)}, which PyMC samples as "
                f"{[misnamed[k] for k in sorted(misnamed)]}: give the draws under that name, in its "
                "transformed coordinates (model.rvs_to_transforms[rv].forward(draws).eval())."
            )
        short = {n: len(self.start[n]) for n in names if n in self.start and len(self.start[n]) < self.draws}
        if short:
            raise ValueError(
                f"{name}: start= gives fewer draws than the {self.draws} particles for {short}: give one "
                "draw per particle (draws=...)."
            )
        if missing:
            prior = self.initialize_population()
            self.start = {**{n: prior[n] for n in missing}, **self.start}

    @one_blas_thread
    def update_beta_and_weights(self):
        """PyMC's next inverse temperature and weights, with its step refined below PyMC's resolution of
        1e-6 where that missed the effective sample size the threshold asks for by more than half
        (:func:`~pymc_kameleon.core.smc.population.refine_tempering_step`); the evidence is updated to
        match."""
        old_beta, old_log_z = self.beta, self.log_marginal_likelihood
        super().update_beta_and_weights()
        target = int(self.draws * self.threshold)
        beta = refine_tempering_step(self.likelihood_logp, old_beta, self.beta, target)
        if beta == self.beta:
            return
        log_weights = (beta - old_beta) * self.likelihood_logp
        total = logsumexp(log_weights)
        self.beta = beta
        self.weights = np.exp(log_weights - total)
        self.weights /= self.weights.sum()
        self.log_marginal_likelihood = old_log_z + total - np.log(self.draws)

    def _likelihoods_on_executor(self, particles) -> np.ndarray:
        """The likelihood log densities of an (m, D) array, evaluated on the executor."""
        rows = [(x,) for x in particles]

        def describe(row):
            return self._describe_particle(row[0])

        values = self.executor.map_rows(self.likelihood_logp_func, rows, describe=describe)
        self.executor.raise_failure(values, rows, describe=describe)
        return np.array(values, dtype=np.float64).reshape(len(rows))

    def _likelihoods_here(self, particles) -> np.ndarray:
        """The likelihood log densities of an (m, D) array, one PyMC call each, in this process."""
        return np.array([float(self.likelihood_logp_func(x)) for x in particles], dtype=np.float64)

    def _check_initial_densities(self) -> None:
        """A clear error if the prior or the likelihood is NaN at initial particles, or the likelihood is
        finite at fewer than two: PyMC's tempering would fail later with 'cannot convert float NaN to
        integer' (or, with one, every particle would be a copy of it), naming nothing."""
        for what, values in (("prior", self.prior_logp), ("likelihood", self.likelihood_logp)):
            bad = np.flatnonzero(np.isnan(values) | (values == np.inf))  # +inf: no density takes it
            if bad.size:
                value = "NaN" if np.isnan(values[bad[0]]) else "+inf"
                first = self._describe_particle(self.tempered_posterior[bad[0]])
                raise ValueError(
                    f"{type(self).__name__}: the log {what} is {value} at {bad.size} of the {self.draws} "
                    f"initial particles (the first: {first}, in the sampler's unconstrained coordinates). "
                    "Make the model return -inf where the density is zero, and check it at those values."
                    + (nan_prior_hint(self.variables) if what == "prior" else "")
                )
        finite = np.isfinite(self.likelihood_logp).sum()
        if finite < 2:
            origin = "draws from the prior" if self.start is None else "from start="
            if finite == 0:
                what = (f"-inf at all {self.draws} initial particles ({origin}; 0 of {self.draws} have a "
                        "finite likelihood), so no reweighting can start (PyMC fails with 'cannot convert "
                        "float NaN to integer')")
            else:
                what = (f"finite at only 1 of the {self.draws} initial particles ({origin}), so the first "
                        "reweighting makes every particle a copy of it and no move can be fitted")
            raise ValueError(
                f"{type(self).__name__}: the log-likelihood is {what}. The first particle: "
                f"{self._describe_particle(self.tempered_posterior[0])}, in the sampler's unconstrained "
                "coordinates. The prior puts little or no mass where the data are possible (a Uniform(0, "
                "theta) observation needs theta above the largest value). Use a prior that covers the data, "
                "more particles (draws=) so that more start where the likelihood is finite, or start= "
                "particles there."
            )

    def _warn_flat_estimates(self) -> None:
        """With a pseudo-marginal likelihood, say if its log-estimates at the initial particles (prior
        draws) spanned less than FLAT_ESTIMATE_NATS or all lay in [0, 1], as likelihoods returned in place
        of their logs do: KAMH and GP-DA say so after tuning, KASS had returned the prior without a word
        (a new user's sd 0.95 against the posterior's 0.63)."""
        values = self.likelihood_logp[np.isfinite(self.likelihood_logp)]
        if not self._pseudo_marginal_ops or values.size < FLAT_ESTIMATE_CALLS:
            return
        low, high = float(values.min()), float(values.max())
        if high - low >= FLAT_ESTIMATE_NATS and not (low >= 0.0 and high <= 1.0):
            return
        self._warnings.warn(
            f"{type(self).__name__}: at the {values.size} initial particles (prior draws) the "
            f"log-likelihood, pseudo-marginal estimates included, lay between {low:.4g} and {high:.4g}: a "
            "likelihood that barely changes over the prior, as an estimator returning the likelihood "
            "estimate in place of its log gives, so the particles stay close to the prior. If log_estimator "
            "returns the likelihood estimate itself, return its log (np.log of a mean of likelihoods, or "
            "scipy.special.logsumexp of log weights minus log N).",
            KameleonWarning,
            stacklevel=1,
        )

    def _describe_particle(self, x) -> str:
        """A particle as ``name=value`` pairs (values of the transformed variables), for error messages."""
        x = np.asarray(x)
        return ", ".join(
            f"{name}={np.array2string(x[part].reshape(shape), precision=4, threshold=8)}"
            for name, part, shape in variable_slices(self.variables, self.var_info)
        )

    def _evaluate(self, proposals):
        """Prior and likelihood log densities at the proposals (likelihood only inside the prior's
        support)."""
        proposals = floatX(np.ascontiguousarray(proposals))
        if self._use_batch:
            if self.executor is None:
                prior, loglik = evaluate_batch(self._batch_logp_func, proposals)
            else:  # the serial arithmetic, block by block
                blocks = self.executor.map_blocks(self._batch_on_worker, proposals)
                self.executor.raise_failure(blocks, proposals, describe=self._describe_particle)
                prior, loglik = (np.concatenate(parts) for parts in zip(*blocks, strict=True))
            self._evaluations += proposals.shape[0]
        else:
            likelihoods = self._likelihoods_here if self.executor is None else self._likelihoods_on_executor
            prior, loglik, n_evals = evaluate_each(self.prior_logp_func, likelihoods, proposals)
            self._evaluations += n_evals
        self._note_nan_likelihoods(proposals, prior, loglik)
        return prior, loglik

    def _note_nan_likelihoods(self, proposals, prior, loglik) -> None:
        # +inf, which no density takes, is rejected as NaN is (mh_log_ratio_batch), and said with it.
        nan = (np.isnan(loglik) | (loglik == np.inf)) & np.isfinite(prior)
        if nan.any():
            if self._first_nan is None:
                self._first_nan = np.array(proposals[np.flatnonzero(nan)[0]], copy=True)
            self._nan_likelihoods += int(nan.sum())

    def _warn_nan_likelihoods(self) -> None:
        """At the chain's end: say once if the log-likelihood was NaN or +inf at proposals inside the prior's
        support. They were rejected, as points of zero density; a model that fails there numerically (an
        ODE solver) cuts that region out of the particles, which nothing else would show."""
        if not self._nan_likelihoods:
            return
        self._warnings.warn(
            f"{type(self).__name__}: the model's log-likelihood was NaN or +inf at {self._nan_likelihoods} "
            f"of this chain's {self._evaluations - self._evaluations_before_chain} proposals (the first: "
            f"{self._describe_particle(self._first_nan)}, in the sampler's unconstrained coordinates); they "
            "were rejected, as points of zero density. If the model fails there for numerical reasons (an "
            "ODE solver, an overflow) rather than having zero density, the particles and the evidence miss "
            "that part of the posterior: make the model finite there, or -inf where the density really is "
            "zero.",
            KameleonWarning,
            stacklevel=1,
        )
        self._nan_likelihoods, self._first_nan = 0, None


def _not_evaluated(x):
    """Stands in for the likelihood while PyMC sets up the initial particles (evaluated afterwards)."""
    return np.array(0.0)


def _joined_logp(model, variables, data_as_constants: bool = False):
    """The model's (prior, likelihood) log densities as functions of one vector of the ``variables``
    (``outputs, joined``); ``data_as_constants``: its data (``pm.Data``) as constants, of known shapes."""
    point = model.initial_point(random_seed=0)  # only the shapes are used
    replacements = make_shared_replacements(point, variables, model)
    outputs, joined = join_nonshared_inputs(
        point=point,
        outputs=[model.varlogp, model.datalogp],
        inputs=variables,
        shared_inputs=replacements,
    )
    if data_as_constants:
        data = [
            v
            for v in graph_inputs(outputs)
            if isinstance(v, SharedVariable) and not isinstance(v.type, RandomGeneratorType)
        ]
        constants = {v: pt.constant(v.get_value(borrow=True), dtype=v.dtype) for v in data}
        outputs = graph_replace(outputs, constants)
    return outputs, joined


def compile_batch_logp(model, variables, compile_kwargs, strict: bool):
    """One PyTensor function mapping an (m, D) array of particles to their (prior, likelihood) log
    densities; None if the model does not vectorise (a ValueError instead with ``strict``)."""
    try:
        outputs, joined = _joined_logp(model, variables)
        particles = pt.matrix("particles", dtype=joined.dtype)
        batched = vectorize_graph(outputs, replace={joined: particles})
        kwargs = {**(compile_kwargs or {}), "on_unused_input": "ignore"}
        fn = compile([particles], batched, **kwargs)
    except Exception as err:  # the model does not vectorise: loop over particles instead
        if strict:
            raise ValueError(
                f"batch_logp=True, but the model's log density could not be vectorised: {err}"
            ) from err
        _log.info(
            "KASS: the model's log density does not vectorise (%s); evaluating particles one by one.", err
        )
        return None
    fn.trust_input = True
    return fn


def looped_core_calls(fn, particle_axis: bool = False) -> int:
    """How many times one call of the compiled PyTensor function ``fn`` runs the core Op of a ``Blockwise``
    in PyTensor's Python loop (per particle with ``particle_axis``: the first batch axis is the
    particles', which ``vectorize_graph`` adds in front).

    A vectorised Cholesky or triangular solve is such a loop: a 3-d MvNormal's likelihood of 100 rows
    becomes 100 solves per particle, where PyMC's per-particle function makes one solve of 100 columns.
    0 where the linker compiles the loop (Numba, JAX: PyMC 6's default). From the compiled graph's
    static shapes: an axis of unknown length (``pm.Data``) counts once.
    """
    batches = _looped_batches(fn, particle_axis)
    return sum(math.prod(1 if n is None else n for n in batch) for batch in batches)


def _looped_batches(fn, particle_axis: bool) -> list[tuple]:
    """The static batch shapes of the Python-looped ``Blockwise`` nodes of ``fn`` (less the particles')."""
    maker = getattr(fn, "maker", None)
    if maker is None or isinstance(maker.linker, JITLinker):
        return []
    first = int(particle_axis)
    return [
        node.outputs[0].type.shape[first : node.op.batch_ndim(node)]
        for node in maker.fgraph.apply_nodes
        if isinstance(node.op, Blockwise)
    ]


def looped_inner_graphs(fn) -> list[str]:
    """The names of the Ops with an inner graph (``pytensor.scan``, ``OpFromGraph``) that the compiled
    function ``fn`` runs in PyTensor's Python loop over a ``Blockwise`` (none for a JIT linker)."""
    maker = getattr(fn, "maker", None)
    if maker is None or isinstance(maker.linker, JITLinker):
        return []
    names = []
    for node in maker.fgraph.apply_nodes:
        if isinstance(node.op, Blockwise) and isinstance(node.op.core_op, HasInnerGraph):
            name = type(node.op.core_op).__name__
            if name not in names:
                names.append(name)
    return names


def loops_added_per_particle(batch_fn, per_particle_fns, model, variables, compile_kwargs) -> int:
    """:func:`looped_core_calls` per particle of the vectorised function less those of PyMC's per-particle
    functions. Where a looped axis has no static length (the model's data in ``pm.Data``), both counts come
    from the model compiled again with its data as constants (vectorised, and for one particle)."""
    if any(None in batch for batch in _looped_batches(batch_fn, particle_axis=True)):
        try:
            outputs, joined = _joined_logp(model, variables, data_as_constants=True)
            particles = pt.matrix("particles", dtype=joined.dtype)
            kwargs = {**(compile_kwargs or {}), "on_unused_input": "ignore"}
            batch_fn = compile([particles], vectorize_graph(outputs, replace={joined: particles}), **kwargs)
            per_particle_fns = (compile([joined], outputs, **kwargs),)
        except Exception:  # counted from the static shapes, as they are
            pass
    added = looped_core_calls(batch_fn, particle_axis=True)
    return added - sum(looped_core_calls(fn) for fn in per_particle_fns)


def with_rng(fn, rng: np.random.Generator):
    """``fn``, drawing its random variables from generators spawned from ``rng`` (a copy if it has any)."""
    rngs = _generators(fn)
    swaps = {old: shared(new, borrow=True) for old, new in zip(rngs, rng.spawn(len(rngs)), strict=True)}
    return fn.copy(swap=swaps) if swaps else fn


def _generators(fn) -> list:
    """The random generators (shared variables) of the compiled PyTensor function ``fn``."""
    return [v for v in fn.get_shared() if isinstance(v.type, RandomGeneratorType)]


def draws_random_numbers(fn) -> bool:
    """Whether the compiled PyTensor function ``fn`` draws random numbers (a ``pm.Simulator``'s)."""
    return bool(_generators(fn))


def pseudo_marginal_ops(fn) -> list:
    """The pseudo-marginal Ops inside a compiled PyTensor function, in graph order."""
    ops = []
    for node in fn.maker.fgraph.toposort():
        if isinstance(node.op, PseudoMarginalOp) and all(node.op is not op for op in ops):
            ops.append(node.op)
    return ops


def batch_logp(fn, particles):
    """The vectorised (prior, likelihood) log densities of an (m, D) array, each of shape (m,).

    A term that does not depend on the particles (``datalogp`` of a model without observed
    variables is the constant 0) comes out of ``vectorize_graph`` as a scalar: broadcast it.
    """
    m = particles.shape[0]
    outputs = fn(particles)
    return tuple(np.broadcast_to(np.asarray(out, dtype=np.float64), (m,)) for out in outputs)


def evaluate_batch(fn, proposals):
    """:func:`batch_logp` over blocks of at most ``_LOGP_BATCH_ROWS`` rows, concatenated."""
    priors, logliks = [], []
    for s in range(0, proposals.shape[0], _LOGP_BATCH_ROWS):
        prior, loglik = batch_logp(fn, proposals[s : s + _LOGP_BATCH_ROWS])
        priors.append(prior)
        logliks.append(loglik)
    return np.concatenate(priors), np.concatenate(logliks)


def evaluate_each(prior_fn, likelihoods, proposals):
    """Prior log densities of the proposals one by one, and their likelihood log densities where the
    prior is finite, with the number of likelihood evaluations.

    ``likelihoods(points)`` maps an (m, D) array to its m likelihood log densities (here, one call
    each, or on an executor).
    """
    prior = np.array([float(prior_fn(x)) for x in proposals])
    loglik = np.full(proposals.shape[0], -np.inf)
    # Never ask an expensive (or estimated) likelihood about a point the prior rules out.
    inside = np.flatnonzero(np.isfinite(prior))
    if inside.size:
        loglik[inside] = likelihoods(proposals[inside])
    return prior, loglik, inside.size


def batch_check_points(particles: int) -> int:
    """How many of the first particles :func:`batch_matches` evaluates."""
    return min(_BATCH_CHECK_POINTS, particles)


def batch_matches(fn, X, prior_logp, likelihood_logp, strict: bool, warnings) -> bool:
    """Whether the vectorised function reproduces PyMC's per-particle log densities at the first particles.

    ``warnings`` (a :class:`~pymc_kameleon.steps.reporting.StepWarnings`) gets a disagreement; with
    ``strict`` (``batch_logp=True``) a failure or disagreement raises instead.
    """
    k = batch_check_points(X.shape[0])
    try:
        prior, loglik = batch_logp(fn, floatX(X[:k]))
    except Exception as err:
        if strict:
            raise
        _log.info("KASS: the vectorised log density failed (%s); evaluating particles one by one.", err)
        return False
    same = same_values(prior, prior_logp[:k]) and same_values(loglik, likelihood_logp[:k])
    if not same:
        message = (
            "KASS: the vectorised model log density disagrees with PyMC's per-particle one (a random "
            "term, or a parameter check such as sigma > 0 that the vectorised graph applies to all "
            "particles at once, so one particle outside it sets every one to -inf); evaluating particles "
            "one by one (correct, slower)."
        )
        if strict:
            raise ValueError(message)
        warnings.warn(message, KameleonRuntimeWarning, stacklevel=2)
    return same


def same_values(a, b) -> bool:
    """Equal up to the rounding of the model's float type (1e3 eps, at least 1e-8); equal infinities too."""
    tol = max(1e-8, 1e3 * float(np.finfo(floatX(np.zeros(1)).dtype).eps))  # float32 sums: 1e-4 apart
    a, b = np.asarray(a, dtype=float).reshape(-1), np.asarray(b, dtype=float).reshape(-1)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))
