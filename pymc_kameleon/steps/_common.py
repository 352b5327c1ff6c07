"""Helpers shared by the PyMC step methods: variable checks and the target density with its current state."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements
from pymc.util import get_value_vars_from_user_vars

from pymc_kameleon.pseudo_marginal import pseudo_marginal_terms

__all__ = ["Evaluation", "TargetDensity", "continuous_value_vars", "describe_point"]


def continuous_value_vars(vars, model, step_name: str):
    """Resolve the value variables a step samples, rejecting discrete ones with a clear error."""
    if vars is None:
        vars = model.continuous_value_vars
        if not vars:
            raise ValueError(
                f"{step_name} samples continuous variables, and this model has none. "
                "Use pm.Metropolis or pm.BinaryGibbsMetropolis for discrete variables."
            )
        return vars
    vars = get_value_vars_from_user_vars(vars, model)
    discrete = [v.name for v in vars if v.dtype in pm.discrete_types]
    if discrete:
        raise ValueError(
            f"{step_name} samples continuous variables only, but {discrete} "
            f"{'is' if len(discrete) == 1 else 'are'} discrete. Give the discrete variables "
            "their own step (e.g. pm.Metropolis or pm.BinaryGibbsMetropolis) and pass "
            f"both steps to pm.sample: step=[{step_name}([...continuous...]), pm.Metropolis([...])]."
        )
    return vars


@dataclass(frozen=True)
class Evaluation:
    """The target's log density at one point, split into its exact and estimated parts.

    ``logp = exact + sum(log_estimates)``. ``estimator_inputs`` holds, per pseudo-marginal term,
    the values its estimator was called with; both are empty for models without such terms.
    """

    logp: float
    exact: float
    log_estimates: tuple = ()
    estimator_inputs: tuple = ()

    @property
    def log_estimate(self) -> float:
        """Sum of the pseudo-marginal log-estimates (NaN if the model has none or they were skipped)."""
        return float(sum(self.log_estimates)) if self.log_estimates else math.nan


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

    def __init__(self, model, vars, initial_point, compile_kwargs=None, step_name: str = "step"):
        self.step_name = step_name
        self.terms = pseudo_marginal_terms(model)
        self.shared = make_shared_replacements(initial_point, vars, model)
        if self.terms:
            estimated = {id(t.potential) for t in self.terms}
            exact_terms = model.free_RVs + model.observed_RVs + [
                p for p in model.potentials if id(p) not in estimated
            ]
            exact_logp = model.logp(vars=exact_terms) if exact_terms else pt.constant(0.0, dtype="float64")
            estimator_inputs = model.replace_rvs_by_values([x for t in self.terms for x in t.inputs])
        else:
            exact_logp, estimator_inputs = model.logp(), []
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
        self._input_counts = [len(t.inputs) for t in self.terms]
        self.n_evals = 0
        self.n_estimates = 0
        self.estimator_rng = None
        self.reset()

    @property
    def has_estimates(self) -> bool:
        return bool(self.terms)

    @property
    def current_log_estimate(self) -> float:
        """Sum of the log-estimates kept at the current state (NaN before the first step)."""
        return math.nan if self._cur is None else self._cur.log_estimate

    def reset(self):
        """Forget the current state and the estimators' generator (at the start of a chain)."""
        self._cur_q = None
        self._cur = None
        self._cur_shared = ()
        # Seeded from the step's generator at the chain's first step (see `current`): PyMC sets
        # each chain's generator after the per-chain reset (or without one, in worker processes).
        self.estimator_rng = None
        for term in self.terms:
            term.op.current.clear()

    # ------------------------------------------------------------- evaluation
    def _exact_and_inputs(self, x):
        self.n_evals += 1
        out = self._fn(np.asarray(x, dtype=self.dtype))
        if not self.terms:
            return float(out), ()
        grouped, start = [], 1
        for count in self._input_counts:
            grouped.append(tuple(np.asarray(v) for v in out[start : start + count]))
            start += count
        return float(out[0]), tuple(grouped)

    def _estimate(self, term, inputs) -> float:
        self.n_estimates += 1
        return term.op.estimate(inputs, self.estimator_rng)

    def evaluate(self, x) -> Evaluation:
        """Log density at a proposal ``x``, with fresh estimates (skipped where the exact part is not finite)."""
        exact, inputs = self._exact_and_inputs(x)
        if not self.terms:
            return Evaluation(exact, exact)
        if not math.isfinite(exact):
            return Evaluation(exact if exact != math.inf else math.nan, exact, (), inputs)
        estimates = tuple(self._estimate(t, v) for t, v in zip(self.terms, inputs))
        return Evaluation(exact + sum(estimates), exact, estimates, inputs)

    def __call__(self, x) -> float:
        """Log density at ``x`` with fresh estimates (see :meth:`evaluate`)."""
        return self.evaluate(x).logp

    # ---------------------------------------------------------- current state
    def accept(self, x, evaluation: Evaluation):
        """Make ``x`` the current state; its estimates become the ones kept from now on."""
        self._cur_q = np.array(x, dtype=float, copy=True)
        self._cur = evaluation
        self._cur_shared = self._snapshot()
        for term, inputs, value in zip(self.terms, evaluation.estimator_inputs, evaluation.log_estimates):
            term.op.current.set(inputs, value)

    def current(self, y, point_map_info, rng) -> Evaluation:
        """Evaluation at the current state ``y``, cached; never a fresh estimate at an unchanged point.

        ``rng`` is the step's generator; at a chain's first step it seeds the estimators' own
        generator, so ``pm.sample(random_seed=...)`` reproduces the estimates.
        """
        if self.terms and self.estimator_rng is None:
            self.estimator_rng = np.random.default_rng(rng.integers(2**63))
        cur = self._cur
        if cur is not None and _same(self._cur_q, y) and self._shared_unchanged():
            return cur
        exact, inputs = self._exact_and_inputs(y)
        estimates = []
        for i, (term, values) in enumerate(zip(self.terms, inputs)):
            if cur is not None and i < len(cur.estimator_inputs) and _same_arrays(cur.estimator_inputs[i], values):
                estimates.append(cur.log_estimates[i])  # inputs unchanged: keep our estimate
            elif term.op.current.matches(values):
                estimates.append(term.op.current.log_estimate)  # written by another of our steps
            elif math.isfinite(exact):
                estimates.append(self._estimate(term, values))  # start of the chain
        evaluation = Evaluation(exact + sum(estimates), exact, tuple(estimates), inputs)
        if not math.isfinite(evaluation.logp):
            raise ValueError(
                f"{self.step_name}: the model log density at the current point is {evaluation.logp} "
                f"({describe_point(y, point_map_info)}"
                + (f"; exact part {exact}, log-estimates {list(estimates)}" if self.terms else "")
                + "). The chain cannot start from a point of zero density: pass finite `initvals` to "
                "pm.sample, or check the model with model.point_logps()."
            )
        self.accept(y, evaluation)
        return evaluation

    def _snapshot(self) -> tuple:
        if not self.shared:
            return ()
        return tuple(np.array(s.get_value(borrow=True), copy=True) for s in self.shared.values())

    def _shared_unchanged(self) -> bool:
        return all(
            np.array_equal(old, s.get_value(borrow=True)) for old, s in zip(self._cur_shared, self.shared.values())
        )


def _same(a, b) -> bool:
    """Exact equality of two arrays (cheaper than np.array_equal in the hot path)."""
    return a is not None and a.shape == b.shape and bool((a == b).all())


def _same_arrays(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b))


def describe_point(q, point_map_info, max_len: int = 200) -> str:
    """Human-readable ``name=value`` listing of a raveled point, for error messages."""
    parts = []
    start = 0
    for name, shape, size, _dtype in point_map_info:
        value = np.asarray(q[start : start + size]).reshape(shape)
        start += size
        parts.append(f"{name}={np.array2string(value, precision=4, threshold=6)}")
    text = ", ".join(parts)
    return text if len(text) <= max_len else text[: max_len - 3] + "..."

