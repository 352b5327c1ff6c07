"""The target density a step samples: compiled log densities, the current state and its kept estimate.

:class:`TargetDensity` evaluates the model's joint log density (exact terms plus any
PseudoMarginalPotential estimates) and keeps the state a chain sits at, so that a pseudo-marginal
estimate is never redrawn at the current state;
:class:`~pymc_kameleon.steps.split_density.SplitTargetDensity` splits it into the prior and the
log-likelihood, as GP delayed acceptance needs.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements
from pytensor.graph.traversal import graph_inputs
from pytensor.tensor.random.type import RandomGeneratorType

from pymc_kameleon.core.linalg import same_array
from pymc_kameleon.pseudo_marginal import pseudo_marginal_terms
from pymc_kameleon.steps.variables import describe_coordinates, refuse_minibatch_data

__all__ = [
    "Evaluation",
    "TargetDensity",
    "describe_point",
    "has_gradient",
    "refuse_random_log_density",
]


#: A pseudo-marginal term whose log-estimates, over at least FLAT_ESTIMATE_CALLS of a chain's tuning,
#: span less than FLAT_ESTIMATE_NATS (or lie in [0, 1]) is reported at the end of tuning: a likelihood
#: that informs the parameters varies by at least about d/2 nats over its posterior.
FLAT_ESTIMATE_CALLS = 100
FLAT_ESTIMATE_NATS = 0.01


@dataclass(frozen=True)
class Evaluation:
    """The target's log density at one point, split into its exact and estimated parts.

    ``logp = exact + sum(log_estimates)``. ``estimator_inputs`` holds, per pseudo-marginal term,
    the values its estimator was called with, and ``auxiliaries`` the auxiliary normals ``u`` of
    a correlated estimator (None for the others); all are empty for models without such terms.

    A :class:`SplitTargetDensity` also fills the prior/likelihood split: ``log_prior`` (the free
    variables' terms, Jacobians included), ``exact_loglik`` (observed terms and ordinary
    potentials), so that ``exact = log_prior + exact_loglik``, and optionally the gradients of
    both. They are NaN / None for a plain :class:`TargetDensity`.
    """

    logp: float
    exact: float
    log_estimates: tuple = ()
    estimator_inputs: tuple = ()
    log_prior: float = math.nan
    exact_loglik: float = math.nan
    grad_log_prior: np.ndarray | None = None
    grad_exact_loglik: np.ndarray | None = None
    auxiliaries: tuple = ()

    @property
    def log_estimate(self) -> float:
        """Sum of the pseudo-marginal log-estimates (NaN if the model has none or they were skipped)."""
        return float(sum(self.log_estimates)) if self.log_estimates else math.nan

    @property
    def loglik(self) -> float:
        """Log-likelihood: ``exact_loglik`` plus the pseudo-marginal log-estimates (split densities only)."""
        return self.exact_loglik + float(sum(self.log_estimates))

    @property
    def grad_logp(self) -> np.ndarray | None:
        r""":math:`\nabla \log\pi = \nabla \log p + \nabla \ell_{\text{exact}}` (None unless both
        gradients were computed, which a model with pseudo-marginal terms never has)."""
        if self.grad_log_prior is None or self.grad_exact_loglik is None:
            return None
        return self.grad_log_prior + self.grad_exact_loglik


def refuse_random_log_density(graphs, step_name: str, model) -> None:
    """Raise a ValueError if the log density's ``graphs`` (PyTensor variables) draw random numbers.

    Such a density (a ``pm.Simulator``'s ABC likelihood, a Potential or CustomDist logp that simulates)
    gives another value at every evaluation of the same point, from a generator that ``pm.sample``'s
    ``random_seed`` does not seed: a new user's chains on a ``pm.Simulator`` gave posterior means of 0.75
    and 0.99 in two runs with the same seed. A likelihood known only through an unbiased estimate is
    what :func:`~pymc_kameleon.PseudoMarginalPotential` is for (the steps keep the estimate at the
    current state and draw its random numbers from their own seeded stream).
    """
    if not any(isinstance(v.type, RandomGeneratorType) for v in graph_inputs(graphs)):
        return
    from pymc.distributions.simulator import SimulatorRV

    refuse_minibatch_data(model, step_name)

    simulators = [rv.name for rv in model.observed_RVs if isinstance(rv.owner.op, SimulatorRV)]
    if simulators:
        names = ", ".join(repr(n) for n in simulators)
        what = f"pm.Simulator {names}, an approximate Bayesian computation (ABC) likelihood"
        remedy = (
            "Sample a pm.Simulator with pm.sample_smc(), PyMC's sampler for it (kernel=KASS is one of its "
            "kernels); a likelihood you can compute belongs in observed variables or a pm.Potential."
        )
    else:
        what = "a random variable inside a pm.Potential or a CustomDist's logp"
        remedy = (
            "Make the log density a deterministic function of the parameters; for a likelihood that can "
            "only be estimated without bias, wrap the estimator in PseudoMarginalPotential, which these "
            "steps sample exactly, with random numbers from their own seeded stream."
        )
    raise ValueError(
        f"{step_name}: the model's log density draws random numbers ({what}), so it takes another value "
        "at every evaluation of the same point, from a generator pm.sample's random_seed does not seed: "
        "the draws could not be reproduced, and Metropolis-Hastings on it targets a noisy likelihood "
        f"that this step does not handle as one. {remedy}"
    )


class TargetDensity:
    r"""The model's log density as a function of a step's raveled block, with exact pseudo-marginal terms.

    .. math::
        \log \pi(x) = \underbrace{\log p(x) + \text{observed and ordinary potential terms}}_{\text{exact}}
        + \sum_k \log \hat L_k(x),

    where each :math:`\log \hat L_k` is a :func:`~pymc_kameleon.PseudoMarginalPotential` estimate.
    The exact part is one compiled PyTensor function, which also returns the estimators' input
    values. The estimators are called from Python with the step's generator, and only where the
    exact part is finite.

    The object also keeps the **current state**: its point, its :class:`Evaluation`, and the
    values of the variables outside the block (PyTensor shared variables that
    ``ArrayStepShared.step`` sets before each step). :meth:`current` returns the cached
    evaluation while nothing changed; if another step of a ``CompoundStep`` changed variables
    outside the block it recomputes the exact part, and it reuses each current estimate whose
    inputs are unchanged (or that another of our steps wrote for the present inputs). A fresh
    estimate at the current state is drawn only at the start of a chain. That is what makes the
    pseudo-marginal chain exact.
    """

    #: The coordinates' names, for the note on an error the model raised (set by the step).
    coordinate_names = None

    def __init__(self, model, vars, initial_point, compile_kwargs=None, step_name: str = "step"):
        self.step_name = step_name
        self.terms = pseudo_marginal_terms(model)
        self.shared = make_shared_replacements(initial_point, vars, model)
        self._compile(model, vars, initial_point, compile_kwargs)
        # What a start's error needs to name the block in the model's own units (compiled then).
        self._model_units = (model, list(vars), initial_point)
        self._input_counts = [len(t.inputs) for t in self.terms]
        self.n_evals = 0
        self.n_estimates = 0
        self.estimator_rng = None
        self.reset()

    def _compile(self, model, vars, initial_point, compile_kwargs):
        """Compile the exact part of the log density (and the estimators' inputs) as ``self._fn``."""
        if self.terms:
            estimated = {id(t.potential) for t in self.terms}
            exact_terms = model.free_RVs + model.observed_RVs + [
                p for p in model.potentials if id(p) not in estimated
            ]
            exact_logp = model.logp(vars=exact_terms) if exact_terms else pt.constant(0.0, dtype="float64")
            estimator_inputs = model.replace_rvs_by_values([x for t in self.terms for x in t.inputs])
        else:
            exact_logp, estimator_inputs = model.logp(), []
        refuse_random_log_density([exact_logp], self.step_name, model)
        outputs, inarray = join_nonshared_inputs(
            point=initial_point,
            outputs=[exact_logp, *estimator_inputs],
            inputs=vars,
            shared_inputs=self.shared,
        )
        # One output without pseudo-marginal terms keeps the hot path a plain float.
        self._fn = compile_pytensor(
            [inarray], outputs if self.terms else outputs[0], **dict(compile_kwargs or {})
        )
        self._fn.trust_input = True
        self.dtype = inarray.type.dtype
        self._ask_gradient(None if self.terms else (outputs[0], inarray), model, exact_logp, vars)

    @property
    def has_estimates(self) -> bool:
        return bool(self.terms)

    def _ask_gradient(self, question, model, logp, vars) -> None:
        """Keep ``(log density graph, input)`` for :attr:`differentiable` (None: estimates, no gradient),
        and the log density ``logp`` in the value variables ``vars`` for :meth:`gradient_split`."""
        self._gradient_question, self._differentiable = question, question is not None
        rv_of = model.values_to_rvs
        names = [rv_of[v].name if v in rv_of else v.name for v in vars]
        self._black_box_question = None if question is None else (logp, list(vars), names, model)
        self._split = ([], [], False, False)

    @property
    def differentiable(self) -> bool:
        """Whether the log density has a gradient (:func:`has_gradient`; estimates have none), worked out
        at the first call, not at every step's construction (30-120 ms on the benchmark posteriors)."""
        if self._gradient_question is not None:
            self._differentiable = has_gradient(*self._gradient_question)
            self._gradient_question = None
        return self._differentiable

    def gradient_split(self, gp_likelihood: bool = False) -> tuple[list[str], list[str], bool]:
        """The block's variables (by name) through which the log density has no gradient (those that
        enter a black-box Op), the others, and whether NUTS on the others would run the black box (a
        term that holds the Op depends on one of them: NUTS evaluates it at every leapfrog step).

        With ``gp_likelihood`` (a GP-DA step, whose GP learns the likelihood in its own variables) the
        others are empty where a likelihood term (an observed variable's, a Potential) joins them with
        the black-box variables: moved by NUTS they would make the GP stale (a new user's SIR ODE with a
        negative-binomial dispersion, split so, took 7.5 times as long and still failed). Worked out at
        the first call (one gradient graph per variable and joined term); all empty with pseudo-marginal
        estimates, which have no gradient in any variable."""
        if self._black_box_question is not None:
            logp, values, names, model = self._black_box_question
            has = [has_gradient(logp, v) for v in values]
            black_box = [n for n, h in zip(names, has) if not h]
            rest = [n for n, h in zip(names, has) if h]
            joins = _split_joins(model, values, has) if black_box and rest else (False, False)
            self._split = (black_box, rest, *joins)
            self._black_box_question = None
        black_box, rest, through_black_box, in_likelihood = self._split
        if gp_likelihood and in_likelihood:
            rest = []
        return black_box, rest, bool(rest) and through_black_box

    @property
    def current_logp(self) -> float:
        """The log density kept at the current state, estimates included (NaN before the first step)."""
        return math.nan if self._cur is None else self._cur.logp

    @property
    def current_model_logp(self) -> float:
        """The model's log density at the current state (the ``model_logp`` statistic, PyMC's ``lp``)."""
        return self.current_logp

    @property
    def current_state(self) -> np.ndarray | None:
        """The current state (raveled; None before the first step)."""
        return getattr(self, "_cur_q", None)

    @property
    def current_exact_logp(self) -> float:
        """The log density kept at the current state without the pseudo-marginal log-estimates
        (``current_logp`` for models without them; NaN before the first step)."""
        return math.nan if self._cur is None else self._cur.exact

    @property
    def current_log_estimate(self) -> float:
        """Sum of the log-estimates kept at the current state (NaN before the first step)."""
        return math.nan if self._cur is None else self._cur.log_estimate

    def estimate_stats(self, estimates_before: int) -> dict:
        """Values of the pseudo-marginal statistics after a step (empty without estimates).

        See :data:`pymc_kameleon.steps.base.PSEUDO_MARGINAL_STATS`.
        """
        if not self.terms:
            return {}
        return {
            "loglik_estimate": self.current_log_estimate,
            "estimator_calls": self.n_estimates - estimates_before,
        }

    def fork(self) -> TargetDensity:
        """A copy for another chain: the same compiled functions, a state of its own (reset).

        PyMC's population sampler makes one shallow copy of a step per chain, and in one process
        (``cores=1``) they would otherwise share the current state.
        """
        twin = copy.copy(self)
        twin.reset()
        return twin

    def reset(self):
        """Forget the current state and the estimators' generator (at the start of a chain)."""
        self._cur_q = None
        self._cur = None
        self._cur_shared = ()
        self.nan_at = None  # a proposal whose log density was NaN, until the step has looked (_check_draws)
        self.nan_value = "NaN"  # or "+inf": what it was there
        # per term: lowest and highest finite log-estimate, and their count (flat_estimate_message)
        self._estimates_seen = {}
        self.irreproducible = {}  # term name -> (two values, correlated?) where a same-seed call differed
        self.check_randomness = True  # the chain's first estimate of a term is made twice (tuning only)
        # Seeded from the step's generator at the chain's first step (see `current`): PyMC sets
        # each chain's generator after the per-chain reset (or without one, in worker processes).
        self.estimator_rng = None
        for term in self.terms:
            term.op.current.clear()

    # ------------------------------------------------------------- evaluation
    def _exact_and_inputs(self, x):
        self.n_evals += 1
        try:
            out = self._fn(np.asarray(x, dtype=self.dtype))
        except Exception as err:
            note_model_error(err, self.step_name, x, self.coordinate_names)
            raise
        if not self.terms:
            return float(out), ()
        grouped, start = [], 1
        for count in self._input_counts:
            grouped.append(tuple(np.asarray(v) for v in out[start : start + count]))
            start += count
        return float(out[0]), tuple(grouped)

    def _estimate(self, term, inputs, auxiliary) -> float:
        self.n_estimates += 1
        seen = self._estimates_seen.get(term.name)
        twin = None
        if seen is None and self.check_randomness:  # the chain's first estimate: twice, same randomness
            self.n_estimates += 1
            twin = term.op.estimate(inputs, copy.deepcopy(self.estimator_rng), auxiliary)
        value = term.op.estimate(inputs, self.estimator_rng, auxiliary)
        if twin is not None and not _same_estimate(twin, value):
            self.irreproducible[term.name] = (twin, value, term.op.correlated)
        seen = self._estimates_seen.setdefault(term.name, [math.inf, -math.inf, 0])
        if math.isfinite(value):
            seen[0], seen[1], seen[2] = min(seen[0], value), max(seen[1], value), seen[2] + 1
        return value

    def estimate_noise(self, rng, n: int) -> list[tuple[str, float, bool]]:
        r"""Per pseudo-marginal term, the spread of its log-estimates at the current state: ``(name, sd,
        correlated)``, the sd over ``n`` fresh estimates (a plain term), or over ``n`` log-ratios
        :math:`\log\hat L(\theta, u') - \log\hat L(\theta, u)` with :math:`u'` the term's Crank-Nicolson
        move from the kept :math:`u` (a correlated term: the noise of a proposal's ratio at no move of
        :math:`\theta`). NaN where fewer than two were finite; empty before the first state.

        The estimates draw from ``rng`` (a stream apart from the chain's, so the draws do not change) and
        count in ``n_estimates``."""
        cur = self._cur
        if cur is None or len(cur.log_estimates) != len(self.terms):
            return []
        spreads = []
        for i, term in enumerate(self.terms):
            inputs, kept = cur.estimator_inputs[i], cur.log_estimates[i]
            offset = kept if term.op.correlated else 0.0
            # As at a proposal (_proposal_estimates): the moved u of a correlated term, None for a plain one.
            values = [
                term.op.estimate(inputs, rng, term.op.moved_auxiliary(cur.auxiliaries[i], rng)) - offset
                for _ in range(n)
            ]
            self.n_estimates += n
            finite = np.asarray([v for v in values if math.isfinite(v)])
            sd = float(np.std(finite, ddof=1)) if finite.size > 1 else math.nan
            spreads.append((term.name, sd, term.op.correlated))
        return spreads

    def flat_estimate_message(self, step_name: str) -> str | None:
        """A warning if a pseudo-marginal term's log-estimates, over the :data:`FLAT_ESTIMATE_CALLS` or more
        finite ones of the chain so far, spanned less than :data:`FLAT_ESTIMATE_NATS` or all lay in [0, 1]:
        what an estimator that returns the likelihood estimate instead of its log gives (a new user's
        did, and the chain sampled the prior without a word). None otherwise."""
        for name, (low, high, count) in self._estimates_seen.items():
            if count < FLAT_ESTIMATE_CALLS:
                continue
            flat = high - low < FLAT_ESTIMATE_NATS
            if flat or (low >= 0.0 and high <= 1.0):
                # Values in [0, 1] can be a real log-likelihood (a new user's 0.5 + 0.3 tanh(mu) moved the
                # posterior mean by 0.63): there the text says what they suggest, not what they do.
                consequence = (
                    f"varied by only {high - low:.2g} nats (from {low:.4g} to {high:.4g}), so the term "
                    "barely changes the posterior and the draws follow the rest of the model (the prior, if "
                    "it is the only likelihood)"
                    if flat
                    else f"lay between 0 and 1 (from {low:.4g} to {high:.4g}), as likelihoods returned in "
                    "place of their logs do (then the term barely changes the posterior)"
                )
                return (
                    f"{step_name}: over tuning, the {count} log-likelihood estimates of the pseudo-marginal "
                    f"term {name!r} {consequence}. If log_estimator returns the likelihood estimate itself, "
                    "return its log (np.log of a mean of likelihoods, or scipy.special.logsumexp of log "
                    "weights minus log N)."
                )
        return None

    def irreproducible_estimate_message(self, step_name: str) -> str | None:
        """A warning if a pseudo-marginal term's estimator, called twice with the same inputs and the same
        randomness (a copy of its generator, or the same auxiliary normals ``u``) at the chain's first
        estimate, returned two values: it draws random numbers from elsewhere (``np.random``, a
        Generator of its own), so ``random_seed`` does not reproduce the run (a new user's did so,
        silently). None otherwise."""
        for name, (first, second, correlated) in self.irreproducible.items():
            given = "auxiliary normals u" if correlated else "generator state"
            lost = (
                "; and the correlated move's correlation lives in u, so randomness from elsewhere is "
                "fresh at every estimate and the correlation gains less" if correlated else ""
            )
            return (
                f"{step_name}: the log_estimator of the pseudo-marginal term {name!r}, called twice at the "
                f"chain's first estimate with the same inputs and the same {given}, returned {first:.6g} "
                f"and {second:.6g}: it draws random numbers from somewhere else (np.random, a Generator of "
                f"its own, another library's global state). The draws stay exact, but random_seed does not "
                f"reproduce them{lost}. Draw every random number from the "
                f"{'u' if correlated else 'rng'} argument it is given."
            )
        return None

    def _proposal_estimates(self, inputs) -> tuple[tuple, tuple]:
        """Log-estimates and auxiliary normals at a proposal whose estimators get ``inputs``.

        A term whose inputs equal the current state's keeps its current estimate (a proposal that
        leaves ``u`` unchanged): the step's block does not feed that estimator, and redrawing it
        would only add noise and cost. Every other term gets a fresh estimate, a correlated one
        with ``u`` moved by Crank-Nicolson from the current state's ``u``.
        """
        cur = self._cur
        estimates, auxiliaries = [], []
        for i, (term, values) in enumerate(zip(self.terms, inputs)):
            kept = cur is not None and i < len(cur.log_estimates)
            if kept and _same_arrays(cur.estimator_inputs[i], values):
                estimates.append(cur.log_estimates[i])
                auxiliaries.append(cur.auxiliaries[i])
                continue
            auxiliary = term.op.moved_auxiliary(cur.auxiliaries[i] if kept else None, self.estimator_rng)
            estimates.append(self._estimate(term, values, auxiliary))
            auxiliaries.append(auxiliary)
        return tuple(estimates), tuple(auxiliaries)

    def evaluate(self, x) -> Evaluation:
        """Log density at a proposal ``x``, with fresh estimates (skipped where the exact part is not
        finite; see :meth:`_proposal_estimates`)."""
        exact, inputs = self._exact_and_inputs(x)
        if not math.isfinite(exact):
            self._note_nan(x, exact)
            if self.terms:
                return Evaluation(exact if exact != math.inf else math.nan, exact, (), inputs)
        if not self.terms:
            return Evaluation(exact, exact)
        estimates, auxiliaries = self._proposal_estimates(inputs)
        return Evaluation(exact + sum(estimates), exact, estimates, inputs, auxiliaries=auxiliaries)

    def __call__(self, x) -> float:
        """Log density at ``x`` with fresh estimates (see :meth:`evaluate`)."""
        return self.evaluate(x).logp

    def _note_nan(self, x, value: float) -> None:
        """Keep ``x`` if the log density there is NaN (or +inf, which is rejected as NaN is)."""
        if self.nan_at is None and (math.isnan(value) or value == math.inf):
            self.nan_at = np.array(x, dtype=float, copy=True)
            self.nan_value = "+inf" if value == math.inf else "NaN"

    # ---------------------------------------------------------- current state
    def accept(self, x, evaluation: Evaluation):
        """Make ``x`` the current state; its estimates become the ones kept from now on."""
        self._cur_q = np.array(x, dtype=float, copy=True)
        self._cur = evaluation
        self._cur_shared = self._snapshot()
        for term, inputs, value, auxiliary in zip(
            self.terms, evaluation.estimator_inputs, evaluation.log_estimates, evaluation.auxiliaries
        ):
            term.op.current.set(inputs, value, auxiliary)

    def refresh_estimates(self) -> bool:
        """Redraw the plain (not correlated) estimates kept at the current state; return whether any was.

        Tuning only (:meth:`~pymc_kameleon.steps.base.AdaptiveStep._refresh_sticky_estimate`): the
        chain is then not the exact pseudo-marginal chain, which keeps its estimate, but tuning's draws
        are discarded and after tuning nothing refreshes. A correlated estimate keeps its auxiliary
        normals: they are part of the chain's state, and redrawing them while the chain tunes taught it
        steps that the exact chain, with its ``u`` where the estimates are high, then rejected (the
        latent Gaussian model, 2 importance samples, correlation 0.9, GP-DA-MH: acceptance 0.000-0.006
        after tuning at seeds 12-14, 0.06-0.12 without at seed 12).
        """
        cur = self._cur
        plain = [i for i, term in enumerate(self.terms) if not term.op.correlated]
        if not plain or cur is None or len(cur.log_estimates) != len(self.terms):
            return False
        estimates = list(cur.log_estimates)
        for i in plain:
            estimates[i] = self._estimate(self.terms[i], cur.estimator_inputs[i], None)
        refreshed = dataclasses.replace(cur, logp=cur.exact + sum(estimates), log_estimates=tuple(estimates))
        self.accept(self._cur_q, refreshed)
        return True

    def current(self, y, point_map_info, rng, zero_density_ok: bool = False) -> Evaluation:
        """Evaluation at the current state ``y``, cached; never a fresh estimate at an unchanged point.

        ``rng`` is the step's generator; at a chain's first step it seeds the estimators' own
        generator, so ``pm.sample(random_seed=...)`` reproduces the estimates. A state of zero (or
        undefined) density is an error (:meth:`zero_density_message`), unless ``zero_density_ok`` and the
        density is zero (not NaN, a model's failure): then its evaluation is returned, not kept (a start
        the start search is about to leave).
        """
        if self.terms and self.estimator_rng is None:
            self.estimator_rng = np.random.default_rng(rng.integers(2**63))
        cur = self._cur
        if cur is not None and same_array(self._cur_q, y) and self._shared_unchanged():
            return cur
        exact, inputs, parts = self._current_parts(y)
        estimates, auxiliaries = [], []
        for i, (term, values) in enumerate(zip(self.terms, inputs)):
            if term.op.current.matches(values):
                # The latest estimate any of our steps kept (ours, or one written since by another
                # block of a CompoundStep, which may have changed it while these inputs stood still).
                estimates.append(term.op.current.log_estimate)
                auxiliaries.append(term.op.current.auxiliary)
            elif (
                cur is not None
                and i < len(cur.estimator_inputs)
                and _same_arrays(cur.estimator_inputs[i], values)
            ):
                estimates.append(cur.log_estimates[i])
                auxiliaries.append(cur.auxiliaries[i])
            elif math.isfinite(exact):  # the start of the chain
                auxiliary = term.op.fresh_auxiliary(self.estimator_rng)
                estimates.append(self._estimate(term, values, auxiliary))
                auxiliaries.append(auxiliary)
        evaluation = Evaluation(
            exact + sum(estimates), exact, tuple(estimates), inputs, **parts, auxiliaries=tuple(auxiliaries)
        )
        if evaluation.logp == -math.inf and zero_density_ok and not self.terms:
            return evaluation
        if not math.isfinite(evaluation.logp):
            detail = f"; exact part {exact}, log-estimates {list(estimates)}" if self.terms else ""
            if self.terms and math.isfinite(exact):
                # A new user's estimator returned 0 at its first call: one random estimate, not the density.
                detail += (
                    "; the exact part is finite, so an estimate of 0 made it -inf: a zero estimate at the "
                    "start is chance, or a sign of too few samples per estimate (log_estimate_spread reports "
                    "their zero_fraction)"
                )
            raise ValueError(self.zero_density_message(evaluation.logp, y, point_map_info, detail))
        self.accept(y, evaluation)
        return evaluation

    def zero_density_message(self, logp, y, point_map_info, detail: str = "") -> str:
        """The error for a chain that cannot start at ``y``, whose log density is ``logp`` (-inf or NaN)."""
        where = "a point of zero density" if logp == -math.inf else "a point where the density is undefined"
        return (
            f"{self.step_name}: the model log density at the current point is {logp} "
            f"({self.describe_start(y, point_map_info)}{detail}). The chain cannot start from {where}: pass "
            "`initvals` to pm.sample where the model's log density is finite (finite values can still "
            "give a zero likelihood), or check the model with model.point_logps()."
        )

    def describe_start(self, y, point_map_info) -> str:
        """``y`` by the model's variables in their own units, each transformed one followed by the value
        the step samples: ``N=500 (N_interval__=0)``. A new user's pm.Uniform(0, 1000) read only
        ``N_interval__=0.``, the transformed coordinate, for PyMC's initial point N = 500. The values
        the step samples alone where the model's values cannot be computed."""
        model, vars, initial_point = self._model_units
        rvs = [model.values_to_rvs.get(v) for v in vars]
        if not any(model.rvs_to_transforms.get(rv) for rv in rvs):
            return describe_point(y, point_map_info)
        try:
            outputs, inarray = join_nonshared_inputs(
                point=initial_point, outputs=model.replace_rvs_by_values(rvs), inputs=vars,
                shared_inputs=self.shared,
            )
            values = pytensor.function([inarray], outputs)(np.asarray(y, dtype=inarray.type.dtype))
        except Exception:  # noqa: BLE001 - the error being written matters, not this detail of it
            return describe_point(y, point_map_info)
        own = [(rv.name, value) if model.rvs_to_transforms.get(rv) is not None else None
               for rv, value in zip(rvs, values)]
        return describe_point(y, point_map_info, max_len=300, model_values=own)

    def check_start(self, y, point_map_info, zero_density_ok: bool = False) -> float:
        """The ValueError :meth:`current` raises at a start of zero density, without counting an evaluation
        or keeping a state (pooled tuning checks each chain's start in the main process with
        ``cores>1``, where PyMC turns an error in a chain's process into a bare EOFError). Models with
        pseudo-marginal terms tune per chain and are not checked here. Returns the log density;
        ``zero_density_ok``: as for :meth:`current`."""
        logp = self._exact_quietly(np.asarray(y, dtype=self.dtype))
        if not math.isfinite(logp) and not (zero_density_ok and logp == -math.inf):
            raise ValueError(self.zero_density_message(logp, y, point_map_info))
        return logp

    def _exact_quietly(self, x) -> float:
        try:
            out = self._fn(x)
        except Exception as err:
            note_model_error(err, self.step_name, x, self.coordinate_names)
            raise
        return float(out[0] if self.terms else out)

    def _current_parts(self, y):
        """Exact part, estimator inputs and extra :class:`Evaluation` fields at the current state."""
        exact, inputs = self._exact_and_inputs(y)
        return exact, inputs, {}

    def _snapshot(self) -> tuple:
        if not self.shared:
            return ()
        return tuple(np.array(s.get_value(borrow=True), copy=True) for s in self.shared.values())

    def _shared_unchanged(self) -> bool:
        if not self.shared:  # the step samples every free variable: nothing else can change
            return True
        return all(
            np.array_equal(old, s.get_value(borrow=True))
            for old, s in zip(self._cur_shared, self.shared.values())
        )


def note_model_error(err: Exception, step_name: str, x, names=None, coarse: bool = False) -> None:
    """Add to an error the model's log density raised at ``x`` during sampling, once, what it means and
    the remedy (its type and message stay the user's: code that catches it still does); ``names``: the
    coordinates' names (:func:`~pymc_kameleon.steps.variables.coordinate_names`), if known; ``coarse``:
    the model is an MLDA coarse level, whose remedy differs (a rough value, not -inf)."""
    if any(MODEL_ERROR_NOTE in note for note in getattr(err, "__notes__", ())):
        return
    named = names is not None and len(names) == np.size(x)
    # By name, as the NaN warning gives it (a new user printed a bare array of four numbers).
    point = describe_coordinates(x, names)
    if named:
        # The model's own transformed name as the example (a fixed log(sigma) puzzled a user with no sigma).
        transformed = next((name for name in names if "(" in name), None)
        scale = (
            f" (a transformed variable by its transform, as {transformed.split('[')[0]}, on PyMC's "
            "unconstrained scale)" if transformed else ""
        )
    else:
        scale = " (the free variables on PyMC's unconstrained scale, joined)"
    if coarse:
        # -inf at a coarse level rejects before the fine model is asked: where the fine posterior has mass
        # the chain never goes (a new user's coarse solver: P(r < 0.88) 0 against 0.24).
        remedy = (
            "If the coarse model cannot be evaluated at some parameter values (a coarse solver that fails), "
            "catch the failure in its Op and return a rough value there (from a looser or fallback solver): "
            "a coarse density of -inf rejects the proposal before the fine model sees it, so the chain "
            "never goes where only the coarse model fails. Return -inf only where the fine model fails too."
        )
    else:
        remedy = (
            "If the model cannot be evaluated at some parameter values (an ODE solver that fails, a "
            "simulator that diverges), catch the failure in the Op and return -inf there: every "
            "pymc-kameleon step rejects such a proposal, as it does a NaN."
        )
    err.add_note(f"{step_name}: {MODEL_ERROR_NOTE} at the point {point}{scale}. {remedy}")


MODEL_ERROR_NOTE = "the model's log density raised this error"


def _split_joins(model, values, has) -> tuple[bool, bool]:
    """For the block ``values`` split by ``has`` (a gradient, or an input of a black-box Op): whether a
    term of ``model``'s log density that holds the black box depends on a variable with a gradient, and
    whether a likelihood term (an observed variable's, a Potential) depends on variables of both kinds."""
    with_gradient = {v for v, h in zip(values, has) if h}
    without = {v for v, h in zip(values, has) if not h}
    likelihood = model.logp(vars=[*model.observed_RVs, *model.potentials], sum=False)
    priors = model.logp(vars=model.free_RVs, sum=False)
    through_black_box = in_likelihood = False
    for term, is_likelihood in [*((t, True) for t in likelihood), *((t, False) for t in priors)]:
        inputs = set(graph_inputs([term]))
        if not (inputs & with_gradient and inputs & without):
            continue
        in_likelihood = in_likelihood or is_likelihood
        if not through_black_box:
            through_black_box = any(not has_gradient(term, v) for v in inputs & without)
    return through_black_box, in_likelihood


def has_gradient(graph, wrt) -> bool:
    """Whether PyTensor can differentiate ``graph`` with respect to ``wrt``, as NUTS needs: False for a
    black-box Op such as ``as_op``'s. The check ``pm.sample`` makes to assign NUTS (the gradient's graph
    is built, not compiled)."""
    try:
        pytensor.gradient.grad(graph, wrt, disconnected_inputs="ignore")
    except Exception:  # NotImplementedError, NullTypeGradError, ...: a hint is never worth a failure
        return False
    return True


def _same_arrays(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(same_array(u, v) for u, v in zip(a, b))


def describe_point(q, point_map_info, max_len: int = 200, model_values=None) -> str:
    """Human-readable ``name=value`` listing of a raveled point, for error messages. ``model_values``:
    per variable, ``(name, value)`` in the model's own units to put first (``N=500. (N_interval__=0.)``),
    or None to name the sampled value alone."""
    parts = []
    start = 0
    for i, (name, shape, size, _dtype) in enumerate(point_map_info):
        value = np.asarray(q[start : start + size]).reshape(shape)
        start += size
        part = f"{name}={np.array2string(value, precision=4, threshold=6)}"
        own = None if model_values is None else model_values[i]
        if own is not None:
            part = f"{own[0]}={np.array2string(np.asarray(own[1]), precision=4, threshold=6)} ({part})"
        parts.append(part)
    text = ", ".join(parts)
    return text if len(text) <= max_len else text[: max_len - 3] + "..."


def _same_estimate(a: float, b: float) -> bool:
    """Whether two log-estimates from the same randomness agree (up to a threaded reduction's rounding)."""
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
