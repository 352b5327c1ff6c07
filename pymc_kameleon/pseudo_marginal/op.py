"""The pseudo-marginal Op: a PyTensor Op whose value is a fresh random estimate, and its errors.

:class:`PseudoMarginalOp` calls the user's estimator (plain, correlated or split into replicates)
and checks its answer; :class:`CurrentEstimate` is the estimate kept at the chain's current state;
:func:`_foreign_step_in_stack` detects a PyMC step other than ours evaluating the Op (misuse).
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from pymc_kameleon.core.proposals import crank_nicolson_move
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.executors import as_executor_option
from pymc_kameleon.pseudo_marginal.estimators import log_mean_exp

# How far up the call stack to look for the PyMC step that is evaluating the potential.
_STACK_DEPTH = 60


class PseudoMarginalEstimatorError(RuntimeError):
    """The user's log-estimator raised, or returned NaN, +inf or a non-scalar."""


class PseudoMarginalMisuseError(RuntimeError):
    """A sampler that would treat the random estimate inexactly tried to use it."""

    def __str__(self) -> str:
        # PyTensor re-raises an Op's error with the node's debug print appended (raise_with_op): about
        # 20 lines after the message that names the step and the remedy, which the user reads last.
        return super().__str__().split(_PYTENSOR_NODE_PRINT, 1)[0]


# Where PyTensor's debug print of the node begins in an error it re-raised from an Op's perform.
_PYTENSOR_NODE_PRINT = "\nApply node that caused the error"


def _right_step_advice(name: str) -> str:
    return (
        f"Sample models with PseudoMarginalPotential {name!r} with "
        "pm.sample(step=pymc_kameleon.KameleonMetropolis()) (KameleonMetropolis(kernel='linear') "
        "is the adaptive random-walk baseline) or GPDelayedAcceptanceMH(), and give discrete "
        "variables pymc_kameleon.DiscreteMetropolis() (assigned automatically inside `with model:`); "
        "they keep the estimate at the current state and so target the exact posterior. A step given "
        "some variables (KameleonMetropolis([mu])) leaves the others to PyMC, which tries NUTS: give "
        "every continuous free variable to one of these steps, or let one step take them all."
    )


@dataclass
class CurrentEstimate:
    """The estimate at the chain's current state, shared by this package's steps.

    Within a ``CompoundStep`` several of our steps may share one potential. Whichever step last
    accepted (or initialised) writes the input values and the log-estimate here, so the next
    step reuses that estimate instead of drawing a new one at an unchanged point.
    """

    inputs: tuple | None = None
    log_estimate: float = math.nan
    # The auxiliary normals the estimate was computed with (correlated estimators only).
    auxiliary: np.ndarray | None = None

    def matches(self, inputs) -> bool:
        return self.inputs is not None and all(
            a.shape == b.shape and bool((a == b).all()) for a, b in zip(self.inputs, inputs)
        )

    def set(self, inputs, log_estimate: float, auxiliary=None):
        self.inputs = tuple(np.array(v, copy=True) for v in inputs)
        self.log_estimate = float(log_estimate)
        self.auxiliary = auxiliary

    def clear(self):
        self.inputs = None
        self.log_estimate = math.nan
        self.auxiliary = None


class PseudoMarginalOp(Op):
    """PyTensor Op whose output is ``log_estimator(*inputs, rng)``: a random scalar, no gradient.

    This package's steps never run this Op; they call :meth:`estimate` directly with a generator
    derived from the step's own, and cache the current estimate. The Op's :meth:`perform` is what
    other code sees: ``model.point_logps()`` and PyMC's initial-point check get a one-off
    estimate, and other PyMC step methods get a :class:`PseudoMarginalMisuseError`.
    """

    # No __props__: two potentials are never the same Op, even with equal estimators, so
    # PyTensor's graph merging can never fuse them.

    def __init__(
        self,
        log_estimator,
        name: str,
        input_names,
        on_misuse: str = "raise",
        seed=None,
        auxiliary_shape=None,
        correlation: float = 0.0,
        replicates: int = 1,
        executor=None,
    ):
        self.log_estimator = log_estimator
        self.potential_name = name
        self.input_names = tuple(input_names)
        self.on_misuse = on_misuse
        # An estimate is the mean of this many independent estimates (evaluated on the executor).
        self.replicates = int(replicates)
        self.executor = as_executor_option(executor, f"PseudoMarginalPotential {name!r}")
        if self.executor is not None:
            self.executor.warm_up()  # the workers load PyTensor's compiled modules while PyMC compiles
        # Correlated estimators take standard normals u of this shape instead of a generator; with
        # replicates, each replicate takes one slice u[r] of the leading axis.
        if auxiliary_shape is not None and self.split:
            auxiliary_shape = (self.replicates, *auxiliary_shape)
        self.auxiliary_shape = auxiliary_shape
        self.correlation = float(correlation)
        self.current = CurrentEstimate()
        self._fallback_rng = np.random.default_rng(seed)
        self._warned = False

    def set_rng(self, rng) -> None:
        """Seed the generator used when PyTensor itself runs this Op (``pm.sample_smc``, ``point_logps``)."""
        self._fallback_rng = np.random.default_rng(rng)

    def make_node(self, *inputs):
        inputs = [pt.as_tensor_variable(x) for x in inputs]
        return Apply(self, inputs, [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        step = _foreign_step_in_stack()
        if step is not None:
            self._misuse(step)
        rng = self._fallback_rng
        auxiliary = self.fresh_auxiliary(rng)  # one-off estimates (and SMC) draw u afresh
        output_storage[0][0] = np.asarray(self.estimate(inputs, rng, auxiliary), dtype="float64")

    def grad(self, inputs, output_grads):
        self._no_gradient()

    def pullback(self, inputs, outputs, output_grads):  # PyTensor >= 3 name for L_op
        self._no_gradient()

    def _no_gradient(self):
        raise PseudoMarginalMisuseError(
            f"PseudoMarginalPotential {self.potential_name!r} is a random likelihood estimate and "
            "has no gradient, so gradient-based samplers (NUTS, HMC, and PyMC's automatic step "
            "assignment, which tries NUTS first) cannot use it, and stock Metropolis-type steps "
            "would re-estimate it at the current state, which is biased. "
            + _right_step_advice(self.potential_name)
        )

    def _misuse(self, step):
        message = (
            f"{type(step).__name__} evaluated PseudoMarginalPotential {self.potential_name!r}. "
            "PyMC's own step methods re-estimate a random likelihood at the current state on every "
            "step (Monte-Carlo-within-Metropolis), which samples the wrong distribution. "
            + _right_step_advice(self.potential_name)
            + ("" if self.on_misuse == "warn" else
               " Pass on_misuse='warn' to PseudoMarginalPotential to run it anyway.")
        )
        if self.on_misuse == "raise":
            raise PseudoMarginalMisuseError(message)
        if not self._warned:
            self._warned = True
            warnings.warn(message, KameleonWarning, stacklevel=2)

    def describe_inputs(self, inputs, max_len: int = 300) -> str:
        parts = [
            f"{name}={np.array2string(np.asarray(v), precision=4, threshold=8)}"
            for name, v in zip(self.input_names, inputs)
        ]
        text = ", ".join(parts)
        return text if len(text) <= max_len else text[: max_len - 3] + "..."

    @property
    def split(self) -> bool:
        """Whether an estimate is split into replicates (``replicates > 1`` or an executor)."""
        return self.replicates > 1 or self.executor is not None

    @property
    def correlated(self) -> bool:
        """Whether the estimator takes auxiliary normals ``u`` (``auxiliary_shape`` was given)."""
        return self.auxiliary_shape is not None

    def fresh_auxiliary(self, rng):
        """Independent standard normals of ``auxiliary_shape`` (None for an ``rng`` estimator)."""
        return rng.standard_normal(self.auxiliary_shape) if self.correlated else None

    def moved_auxiliary(self, auxiliary, rng):
        """The proposal's auxiliary normals: a Crank-Nicolson move from ``auxiliary``
        (:func:`~pymc_kameleon.core.proposals.crank_nicolson_move`); None for an ``rng`` estimator."""
        if not self.correlated:
            return None
        if auxiliary is None:
            return self.fresh_auxiliary(rng)
        return crank_nicolson_move(auxiliary, self.correlation, rng)

    def estimate(self, inputs, rng, auxiliary=None) -> float:
        r"""Call the estimator and check its answer.

        A correlated estimator is called as ``log_estimator(*inputs, auxiliary)``, any other as
        ``log_estimator(*inputs, rng)``. Returns the log-estimate as a float; ``-inf`` (a zero
        estimate) is allowed and makes a proposal be rejected. Raises
        :class:`PseudoMarginalEstimatorError`, naming the input values, if the estimator raises or
        returns NaN, +inf or something that is not a scalar.

        With ``replicates`` :math:`R > 1` (or an executor) the estimate is
        :math:`\log \frac1R \sum_r \hat L_r`, the mean of :math:`R` independent estimates, still
        unbiased for :math:`L`. Replicate :math:`r` gets the generator ``rng.spawn(R)[r]`` (or the
        auxiliary normals ``auxiliary[r]``), made here, so the value does not depend on where, or on
        how many workers, the replicates run.
        """
        if self.split:
            return self._replicated_estimate(inputs, rng, auxiliary)
        return self._checked(self._call(inputs, auxiliary if self.correlated else rng), inputs)

    def _call(self, inputs, randomness):
        """``log_estimator(*inputs, randomness)``; an error naming the inputs if it raises."""
        try:
            return self.log_estimator(*inputs, randomness)
        except Exception as err:
            hint = ""
            if self.correlated and isinstance(err, AttributeError) and "numpy.ndarray" in str(err):
                # A new user gave auxiliary_shape to an estimator written for rng (helper-70).
                hint = (
                    f"with auxiliary_shape the estimator's last argument is u, standard normals of shape "
                    f"{self.auxiliary_shape}, not a Generator: draw its randomness from u (or leave out "
                    "auxiliary_shape and correlation to be given rng)"
                )
            raise self._raised(f"{type(err).__name__}: {err}", inputs, hint) from err

    def _replicated_estimate(self, inputs, rng, auxiliary) -> float:
        """The log of the mean of ``replicates`` estimates, on the executor if there is one."""
        inputs = [np.asarray(x) for x in inputs]
        randomness = auxiliary if self.correlated else rng.spawn(self.replicates)
        if self.executor is None:
            values = [self._call(inputs, randomness[r]) for r in range(self.replicates)]
        else:
            rows = [(*inputs, randomness[r]) for r in range(self.replicates)]
            values = self.executor.map_rows(self.log_estimator, rows)
            failure = self.executor.first_failure(values)
            if failure is not None:
                where = f"replicate {failure.index}, on a worker; its traceback:\n{failure.traceback}"
                raise self._raised(failure.error, inputs, where)
        return float(log_mean_exp([self._checked(v, inputs) for v in values]))

    def _raised(self, error: str, inputs, where: str = "") -> PseudoMarginalEstimatorError:
        """The error for an estimator that raised ``error`` (``"TypeName: message"``) at ``inputs``."""
        where = f"; {where}" if where else ""
        return PseudoMarginalEstimatorError(
            f"The log_estimator of PseudoMarginalPotential {self.potential_name!r} raised "
            f"{error} (at {self.describe_inputs(inputs)}{where})."
        )

    def _checked(self, value, inputs) -> float:
        """``value`` as a float log-estimate, or a :class:`PseudoMarginalEstimatorError` naming the inputs."""
        if isinstance(value, float):
            array = None
        else:
            try:  # None, strings and complex numbers are not log-estimates: say what came back
                if value is None or np.iscomplexobj(value):
                    raise TypeError(f"a {type(value).__name__}")
                array = np.asarray(value, dtype="float64")
            except (TypeError, ValueError) as err:
                raise PseudoMarginalEstimatorError(
                    f"The log_estimator of PseudoMarginalPotential {self.potential_name!r} returned "
                    f"{value!r} ({err}) at {self.describe_inputs(inputs)}; it must return a real number, "
                    "the log of a non-negative estimate."
                ) from None
        if array is not None:
            if array.size != 1:
                raise PseudoMarginalEstimatorError(
                    f"The log_estimator of PseudoMarginalPotential {self.potential_name!r} must return "
                    f"a scalar log-estimate, got shape {array.shape} (at {self.describe_inputs(inputs)})."
                )
            value = float(array.reshape(()))
        if math.isnan(value) or value == math.inf:
            raise PseudoMarginalEstimatorError(
                f"The log_estimator of PseudoMarginalPotential {self.potential_name!r} returned {value} "
                f"(at {self.describe_inputs(inputs)}). It must return the log of a non-negative, finite "
                "estimate (-inf, a zero estimate, is allowed and rejects the proposal)."
            )
        return value

    def __str__(self):
        return f"PseudoMarginal{{{self.potential_name}}}"


def _foreign_step_in_stack():
    """The PyMC step method (not one of ours) that is running, if any."""
    from pymc.step_methods.compound import BlockedStep

    frame = sys._getframe(2)
    for _ in range(_STACK_DEPTH):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, BlockedStep) and not getattr(candidate, "exact_pseudo_marginal", False):
            return candidate
        frame = frame.f_back
    return None
