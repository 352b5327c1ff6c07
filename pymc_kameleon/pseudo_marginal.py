r"""Pseudo-marginal likelihood terms: a PyMC Potential whose value is a random, unbiased estimate.

A user writes

.. code-block:: python

    with pm.Model():
        theta = pm.Normal("theta", 0, 3, shape=9)
        PseudoMarginalPotential("lik", log_estimator, inputs=[theta])
        idata = pm.sample(step=KameleonMetropolis())

where ``log_estimator(theta_value, rng)`` returns :math:`\log \hat L(\theta)` with
:math:`\mathbb E[\hat L(\theta)] = L(\theta)` and :math:`\hat L \ge 0`. The steps of this
package then run the exact pseudo-marginal chain of Andrieu & Roberts (2009): the estimate at
the current state is kept until a proposal is accepted, and fresh estimates are drawn only at
proposals. The chain targets the extended distribution
:math:`\pi(\theta)\,\hat L(\theta, u)\,m(u)` whose :math:`\theta`-marginal is the exact posterior.

Stock PyMC steps would re-estimate the current state at every step
(Monte-Carlo-within-Metropolis), which targets a different, wrong distribution. They
evaluate the potential through its PyTensor Op, so the Op refuses (or warns, with
``on_misuse="warn"``) when a PyMC step other than ours evaluates it, and it has no
gradient: NUTS and automatic step assignment fail with an error that names the right step.

This module also holds the estimator helpers :func:`log_mean_exp`,
:func:`importance_sampling_estimator` and :func:`log_estimate_spread`.
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.special import logsumexp, ndtr

from pymc_kameleon.core.proposals import crank_nicolson_move
from pymc_kameleon.core.validation import check_number
from pymc_kameleon.executors import as_executor_option

__all__ = [
    "PseudoMarginalEstimatorError",
    "PseudoMarginalMisuseError",
    "PseudoMarginalOp",
    "PseudoMarginalPotential",
    "correlated_importance_sampling_estimator",
    "correlated_particle_filter",
    "importance_sampling_estimator",
    "log_estimate_spread",
    "log_mean_exp",
    "pseudo_marginal_terms",
]

_MISUSE_OPTIONS = ("raise", "warn")
# How far up the call stack to look for the PyMC step that is evaluating the potential.
_STACK_DEPTH = 60


class PseudoMarginalEstimatorError(RuntimeError):
    """The user's log-estimator raised, or returned NaN, +inf or a non-scalar."""


class PseudoMarginalMisuseError(RuntimeError):
    """A sampler that would treat the random estimate inexactly tried to use it."""


def _right_step_advice(name: str) -> str:
    return (
        f"Sample models with PseudoMarginalPotential {name!r} with "
        "pm.sample(step=pymc_kameleon.KameleonMetropolis()) (KameleonMetropolis(kernel='linear') "
        "is the adaptive random-walk baseline) or GPDelayedAcceptanceMH(), and give discrete "
        "variables pymc_kameleon.DiscreteMetropolis() (assigned automatically inside `with model:`); "
        "they keep the estimate at the current state and so target the exact posterior."
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
            + " Pass on_misuse='warn' to PseudoMarginalPotential to run it anyway."
        )
        if self.on_misuse == "raise":
            raise PseudoMarginalMisuseError(message)
        if not self._warned:
            self._warned = True
            warnings.warn(message, UserWarning, stacklevel=2)

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
            raise self._raised(f"{type(err).__name__}: {err}", inputs) from err

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
                f"at {self.describe_inputs(inputs)}. It must return the log of a non-negative, finite "
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


def PseudoMarginalPotential(
    name: str,
    log_estimator,
    inputs,
    *,
    auxiliary_shape=None,
    correlation: float | None = None,
    replicates: int = 1,
    executor=None,
    on_misuse: str = "raise",
    model=None,
):
    r"""Add the log of an unbiased, random likelihood estimate to a PyMC model.

    The term's value is :math:`\log \hat L(\theta)`, where ``log_estimator(*input_values, rng)``
    returns the log of a non-negative estimate with :math:`\mathbb E[\hat L(\theta)] = L(\theta)`,
    for example an importance-sampling estimate of a marginal likelihood
    :math:`L(\theta) = \int p(y \mid f)\, p(f \mid \theta)\, df`. Sampled with
    :class:`~pymc_kameleon.KameleonMetropolis`, the chain is the exact pseudo-marginal chain of
    Andrieu & Roberts (2009): it keeps the estimate at the current state until a proposal is
    accepted, so its stationary :math:`\theta`-marginal is the exact posterior
    :math:`\propto p(\theta) L(\theta)`, however noisy the estimate.

    **Correlated pseudo-marginal** (Deligiannidis, Doucet and Pitt 2018). If the estimator's
    randomness can be written as a fixed array :math:`u` of standard normals, declare its shape
    with ``auxiliary_shape``; the estimator is then called as ``log_estimator(*input_values, u)``
    and must be a deterministic function of its arguments. The steps keep :math:`(\theta, u,
    \log\hat L(\theta, u))` as the current state and propose :math:`u` jointly with
    :math:`\theta` by a Crank-Nicolson move,
    :math:`u' = \rho u + \sqrt{1 - \rho^2}\,\varepsilon` (:math:`\rho` = ``correlation``).
    The estimates at the current and the proposed :math:`\theta` then share most of their
    randomness, so their ratio is far less noisy and the chain mixes with far fewer samples per
    estimate. The move is reversible with respect to :math:`\mathcal N(0, I)`, so the
    acceptance ratio is the same pseudo-marginal ratio, with no :math:`u` term, and the chain
    stays exact (:func:`~pymc_kameleon.core.proposals.crank_nicolson_move`).

    Parameters
    ----------
    name : str
        Name of the potential in the model.
    log_estimator : callable
        ``log_estimator(*input_values, rng) -> float``, or with ``auxiliary_shape``
        ``log_estimator(*input_values, u) -> float``. ``input_values`` are the current values
        of ``inputs`` as NumPy arrays; ``rng`` is a :class:`numpy.random.Generator` and ``u`` an
        array of standard normals, both derived from the sampler's generator, so
        ``pm.sample(random_seed=...)`` reproduces a run. Return ``-inf`` for a zero estimate.
        Raising, or returning NaN or ``+inf``, stops sampling with an error that names the input
        values.
    inputs : variable or list of variables
        Model variables (or expressions of them) that the estimator depends on.
    auxiliary_shape : int or tuple of int, optional
        Shape of the estimator's auxiliary standard normals ``u``; giving it makes the estimator a
        correlated one (see above). Defaults to ``log_estimator.auxiliary_shape`` if the estimator
        has that attribute (:func:`correlated_importance_sampling_estimator` sets it).
    correlation : float in [0, 1), optional
        :math:`\rho` of the Crank-Nicolson move; default 0.99 with ``auxiliary_shape`` (and only
        allowed with it). 0 draws ``u`` afresh at every proposal: standard pseudo-marginal. The
        best :math:`\rho` grows with the size of ``u``: Deligiannidis et al. take
        :math:`1 - \rho` of order :math:`N / T` (:math:`N` samples for each of :math:`T`
        observations); the sampler statistic ``loglik_estimate`` shows how noisy the kept
        estimate is.
    replicates : int, default 1
        Split every estimate into this many independent estimates :math:`\hat L_1, \dots, \hat L_R`
        and use their mean, :math:`\log \frac1R \sum_r \hat L_r`, which is still unbiased. Each
        replicate gets its own generator spawned from the sampler's (or its slice ``u[r]`` of the
        auxiliary normals, whose shape gains a leading axis of length ``replicates``), so the value
        is the same wherever the replicates run. An estimator of ``n`` samples split into ``R``
        replicates of ``n / R`` samples has the same variance.
    executor : concurrent.futures.Executor or callable, optional
        Evaluate the replicates in parallel on this executor (needs ``replicates >= 2``): Dask's
        ``client.get_executor()``, a ``ProcessPoolExecutor``, ... or a zero-argument callable that
        returns one (an executor instance other than Dask's cannot travel to PyMC's worker processes
        with ``cores > 1``). The estimator is pickled once and cached on each worker, so data it
        closes over travels once per worker on Dask. Draws are identical to ``executor=None`` with
        the same ``replicates``, whatever the number of workers (:mod:`pymc_kameleon.executors`).
    on_misuse : {"raise", "warn"}, default "raise"
        What happens when a PyMC step method other than this package's evaluates the term
        (stock ``pm.Metropolis``, ``pm.Slice``, ...), which would re-estimate it at the current
        state on every step (Monte-Carlo-within-Metropolis, a biased chain).
    model : pymc.Model, optional

    Returns
    -------
    TensorVariable
        The registered potential.

    Notes
    -----
    - The term has no gradient. NUTS, and ``pm.sample()`` without a ``step`` (which tries
      NUTS first), raise :class:`PseudoMarginalMisuseError`.
    - ``model.point_logps()`` and PyMC's check of the initial point get a one-off estimate from
      the Op's own generator; such evaluations do not affect the chain.
    - In a ``CompoundStep`` of several of this package's steps, the current estimate is shared:
      a step that accepts a move writes the new estimate, and the others reuse it while the
      estimator's inputs are unchanged. Only at the start of a chain, or if the inputs were changed
      by something that is not one of our steps (possible only with ``on_misuse="warn"``), is a
      fresh estimate drawn at the current state.
    - ``pm.sample_smc`` keeps each particle's likelihood between moves, so its kernels treat the
      term exactly too. They draw ``u`` afresh for every estimate: a correlated estimator is
      exact there, but not correlated.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from pymc_kameleon import KameleonMetropolis, PseudoMarginalPotential
    >>> from pymc_kameleon import importance_sampling_estimator
    >>> y = np.array([0.3, -1.2, 0.8])
    >>> # y_j = z_j + noise, z_j ~ N(theta, 1): estimate p(y | theta) by sampling z
    >>> log_est = importance_sampling_estimator(
    ...     log_weight=lambda z, theta: -0.5 * ((y - z) ** 2).sum(-1) - 1.5 * np.log(2 * np.pi),
    ...     sample=lambda theta, n, rng: theta + rng.standard_normal((n, 3)),
    ...     n_samples=50)
    >>> with pm.Model():
    ...     theta = pm.Normal("theta", 0, 1)
    ...     lik = PseudoMarginalPotential("lik", log_est, inputs=[theta])
    ...     idata = pm.sample(step=KameleonMetropolis())  # doctest: +SKIP
    """
    if not callable(log_estimator):
        raise TypeError(f"log_estimator must be callable, got {type(log_estimator).__name__}.")
    if on_misuse not in _MISUSE_OPTIONS:
        raise ValueError(f"on_misuse must be one of {_MISUSE_OPTIONS}, got {on_misuse!r}.")
    if not isinstance(inputs, list | tuple):
        inputs = [inputs]
    if len(inputs) == 0:
        raise ValueError("inputs must name at least one model variable the estimator depends on.")
    tensors = []
    for i, x in enumerate(inputs):
        try:
            tensors.append(pt.as_tensor_variable(x))
        except (TypeError, ValueError) as err:
            raise TypeError(f"inputs[{i}] is not a model variable or tensor expression: {err}") from None
    _check_inputs_depend_on_variables(tensors, pm.modelcontext(model))
    input_names = [t.name or f"inputs[{i}]" for i, t in enumerate(tensors)]
    own_shape = getattr(log_estimator, "auxiliary_shape", None)  # set by this module's helpers
    if auxiliary_shape is None:
        auxiliary_shape = own_shape
    auxiliary_shape, correlation = _check_auxiliary(auxiliary_shape, correlation)
    replicates = _check_positive_int("replicates", replicates)
    if executor is not None and replicates < 2:
        raise ValueError(
            f"An executor needs replicates >= 2 (got replicates={replicates}): an estimate is split into "
            "that many independent parts, which are the tasks the executor runs in parallel."
        )
    if own_shape is not None and tuple(own_shape) != auxiliary_shape:
        raise ValueError(
            f"auxiliary_shape={auxiliary_shape} differs from the estimator's own auxiliary_shape "
            f"{tuple(own_shape)}; leave auxiliary_shape out to use the estimator's."
        )
    op = PseudoMarginalOp(
        log_estimator,
        name,
        input_names,
        on_misuse=on_misuse,
        auxiliary_shape=auxiliary_shape,
        correlation=correlation,
        replicates=replicates,
        executor=executor,
    )
    return pm.Potential(name, op(*tensors), model=model)


DEFAULT_CORRELATION = 0.99


def _check_inputs_depend_on_variables(tensors, model) -> None:
    """A ValueError if no input depends on a free variable of ``model``: the estimate could never change
    with the parameters, so it would be a constant random term, not a likelihood (``inputs=[1.0]``)."""
    from pytensor.graph.traversal import ancestors

    free = set(model.free_RVs)
    if not any(v in free for v in ancestors(tensors)):
        raise ValueError(
            "None of the inputs depends on a free variable of the model, so the estimate would never change "
            "with the parameters. Pass the model variables the likelihood depends on, e.g. inputs=[theta] "
            "(data that the estimator needs belongs in its closure, not in inputs)."
        )


def _check_auxiliary(auxiliary_shape, correlation):
    """Validated ``(auxiliary_shape, correlation)``: a tuple of positive ints or None, and a float."""
    if auxiliary_shape is None:
        if correlation not in (None, 0, 0.0):
            raise ValueError(
                f"correlation={correlation!r} needs auxiliary_shape: a correlated estimator takes its "
                "randomness as an array u of standard normals, log_estimator(*inputs, u), and "
                "auxiliary_shape gives u's shape."
            )
        return None, 0.0
    shape = _auxiliary_shape(auxiliary_shape)
    if correlation is None:
        correlation = DEFAULT_CORRELATION
    if isinstance(correlation, np.ndarray) and correlation.ndim == 0:
        correlation = correlation.item()
    check_number("correlation", correlation, minimum=0, strict=False)
    if not correlation < 1:
        raise ValueError(
            f"correlation must be in [0, 1), got {correlation!r}: at 1 the auxiliary variables never "
            "move and the chain targets the likelihood of one fixed u, not the posterior."
        )
    return shape, float(correlation)


def _auxiliary_shape(auxiliary_shape) -> tuple:
    """``auxiliary_shape`` as a tuple of positive ints (an int is a 1-d shape)."""
    shape = (auxiliary_shape,) if isinstance(auxiliary_shape, int | np.integer) else auxiliary_shape
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(
            f"auxiliary_shape must be an int or a tuple of ints, got {auxiliary_shape!r}."
        ) from None
    if not shape or any(not _is_positive_int(n) for n in shape):
        raise ValueError(f"auxiliary_shape must be one or more positive integers, got {auxiliary_shape!r}.")
    return tuple(int(n) for n in shape)


def _is_positive_int(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | np.integer) and value >= 1


def _check_positive_int(name: str, value) -> int:
    """``value`` as an int, or a ValueError naming the option."""
    if not _is_positive_int(value):
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


@dataclass
class PseudoMarginalTerm:
    """A pseudo-marginal potential found in a model, as the steps see it."""

    potential: object
    op: PseudoMarginalOp
    inputs: list = field(default_factory=list)  # the Op's input graphs (in terms of random variables)

    @property
    def name(self) -> str:
        return self.op.potential_name


def pseudo_marginal_terms(model) -> list[PseudoMarginalTerm]:
    """The model's :func:`PseudoMarginalPotential` terms, in the order they were added."""
    terms = []
    for potential in model.potentials:
        owner = potential.owner
        if owner is not None and isinstance(owner.op, PseudoMarginalOp):
            terms.append(PseudoMarginalTerm(potential, owner.op, list(owner.inputs)))
        elif _contains_pseudo_marginal(potential):
            raise ValueError(
                f"Potential {potential.name!r} uses a PseudoMarginalPotential inside a larger expression. "
                "Add estimates only through PseudoMarginalPotential itself, so the sampler can cache them."
            )
    return terms


def _contains_pseudo_marginal(var) -> bool:
    from pytensor.graph.traversal import ancestors

    return any(v.owner is not None and isinstance(v.owner.op, PseudoMarginalOp) for v in ancestors([var]))


# ----------------------------------------------------------------- estimator helpers
def log_mean_exp(log_values, axis=None):
    r"""Numerically stable :math:`\log\big(\tfrac1N \sum_{i=1}^N e^{a_i}\big)`.

    The log of an importance-sampling estimate from log-weights :math:`a_i`. Computed as
    ``scipy.special.logsumexp(a) - log N``, so it neither overflows nor underflows. All
    :math:`a_i = -\infty` gives :math:`-\infty` (a zero estimate).

    Parameters
    ----------
    log_values : array_like
    axis : int, optional
        Axis to average over (all entries by default).
    """
    log_values = np.asarray(log_values, dtype=float)
    n = log_values.size if axis is None else log_values.shape[axis]
    if n == 0:
        raise ValueError("log_mean_exp needs at least one value.")
    with np.errstate(divide="ignore"):
        return logsumexp(log_values, axis=axis) - math.log(n)


def importance_sampling_estimator(log_weight, sample, n_samples: int = 100):
    r"""Build ``log_estimator(*params, rng)`` for an importance-sampling likelihood estimate.

    For a latent-variable likelihood :math:`L(\theta) = \int p(y, f \mid \theta)\, df` and a
    proposal :math:`g(f \mid \theta)`, the estimate

    .. math::
        \hat L(\theta) = \frac1N \sum_{i=1}^N w(f_i, \theta), \qquad f_i \sim g(\cdot \mid \theta),
        \qquad w = \frac{p(y, f \mid \theta)}{g(f \mid \theta)},

    is unbiased whenever :math:`g > 0` wherever :math:`p(y, f \mid \theta) > 0`. The returned
    function computes :math:`\log \hat L` with :func:`log_mean_exp`.

    Parameters
    ----------
    log_weight : callable
        ``log_weight(f, *params) -> array (N,)``: :math:`\log p(y, f_i \mid \theta) - \log g(f_i \mid \theta)`
        for the ``N`` draws stacked along axis 0 of ``f``. For a product of independent
        per-group likelihoods return shape ``(N, T)``: the estimate is then
        :math:`\prod_t \frac1N \sum_i w_{ti}`, unbiased when the groups' draws are independent.
    sample : callable
        ``sample(*params, n, rng) -> f``: ``n`` draws from :math:`g(\cdot \mid \theta)`, stacked along axis 0.
    n_samples : int, default 100
        :math:`N`. The variance of :math:`\log\hat L` falls roughly like :math:`1/N`; pseudo-marginal
        chains mix well when its standard deviation is about 1-1.7 (Doucet et al. 2015).

    Returns
    -------
    callable
        ``log_estimator(*params, rng) -> float``, ready for :func:`PseudoMarginalPotential`.
    """
    if not (callable(log_weight) and callable(sample)):
        raise TypeError("log_weight and sample must be callables.")
    n_samples = _check_positive_int("n_samples", n_samples)

    def log_estimator(*args):
        *params, rng = args
        return _log_importance_estimate(log_weight(sample(*params, n_samples, rng), *params), n_samples)

    log_estimator.n_samples = n_samples
    return log_estimator


def _log_importance_estimate(log_weights, n_samples: int) -> float:
    """log of prod_t mean_i w_ti for log-weights of shape (N,) or (N, T...)."""
    log_w = np.asarray(log_weights, dtype=float)
    if log_w.ndim == 0 or log_w.shape[0] != n_samples:
        raise ValueError(
            f"log_weight must return an array of shape ({n_samples},) or ({n_samples}, ...) "
            f"(one row per importance sample), got {log_w.shape}."
        )
    return float(np.sum(log_mean_exp(log_w, axis=0)))


def correlated_importance_sampling_estimator(log_weight, transform, n_samples: int, latent_shape=()):
    r"""Build ``log_estimator(*params, u)``: an importance-sampling estimate driven by normals ``u``.

    The correlated version of :func:`importance_sampling_estimator`. The proposal draws are a
    deterministic transform of standard normals, :math:`f_i = T(u_i, \theta)` with
    :math:`u_i \sim \mathcal N(0, I)` (for a Gaussian proposal :math:`T(u, \theta) = m(\theta) +
    S(\theta) u`; other laws through their quantile function of :math:`\Phi(u)`), and

    .. math::
        \hat L(\theta, u) = \frac1N \sum_{i=1}^N w(T(u_i, \theta), \theta)

    is unbiased for :math:`L(\theta)` when :math:`u` is standard normal. Passed to
    :func:`PseudoMarginalPotential`, the estimator's ``auxiliary_shape`` (an attribute of the
    returned function, ``(n_samples, *latent_shape)``) is picked up automatically, and the sampler
    moves ``u`` by Crank-Nicolson steps.

    Correlation pays most for a likelihood that is a product over many independent groups, each
    estimated on its own, :math:`\hat L = \prod_t \frac1N \sum_i w_t(f_{ti}, \theta)` (random
    effects, latent variables per observation): use ``latent_shape=(T, ...)`` and return the
    log-weights with shape ``(N, T)``.

    Parameters
    ----------
    log_weight : callable
        ``log_weight(f, *params) -> array (N,) or (N, T)``, as for :func:`importance_sampling_estimator`.
    transform : callable
        ``transform(u, *params) -> f``: the ``N`` proposal draws from ``u`` of shape
        ``(n_samples, *latent_shape)``.
    n_samples : int
        :math:`N`.
    latent_shape : tuple of int, default ()
        Shape of one draw's normals.

    Returns
    -------
    callable
        ``log_estimator(*params, u) -> float`` with attribute ``auxiliary_shape``.
    """
    if not (callable(log_weight) and callable(transform)):
        raise TypeError("log_weight and transform must be callables.")
    n_samples = _check_positive_int("n_samples", n_samples)
    latent = (latent_shape,) if isinstance(latent_shape, int | np.integer) else tuple(latent_shape)
    auxiliary_shape = _auxiliary_shape((n_samples, *latent))

    def log_estimator(*args):
        *params, u = args
        return _log_importance_estimate(log_weight(transform(u, *params), *params), n_samples)

    log_estimator.n_samples = n_samples
    log_estimator.auxiliary_shape = auxiliary_shape
    return log_estimator


def correlated_particle_filter(
    initial, transition, log_observation, n_particles: int, n_steps: int, *, sort_particles: bool = True
):
    r"""Build ``log_estimator(*params, u)``: a bootstrap particle filter driven by standard normals.

    For a state-space model :math:`x_0 \sim \mu_\theta`, :math:`x_t \mid x_{t-1} \sim
    f_\theta(\cdot \mid x_{t-1})`, :math:`y_t \mid x_t \sim g_\theta(y_t \mid x_t)`,
    :math:`t = 0, \dots, T-1` (zero-based, as the callbacks receive ``t``), the bootstrap filter's
    estimate

    .. math::
        \hat L(\theta, u) = \prod_{t=0}^{T-1} \frac1N \sum_{i=1}^N g_\theta(y_t \mid x_t^i)

    is unbiased for :math:`p(y_{1:T} \mid \theta)`. All its randomness comes from ``u`` of shape
    ``(T, N + 1)``: ``u[t, :N]`` drive the particles (``initial`` at :math:`t = 0`, then
    ``transition``), and :math:`\Phi(u[t, N])` is the single uniform of a systematic resampling
    after step :math:`t`. Before resampling the particles are **sorted by their state**, so
    that a small change of :math:`\theta` or :math:`u` moves the resampled particles only a
    little and the estimates at the current and the proposed point stay correlated; without
    sorting, resampling breaks the correlation (Deligiannidis, Doucet and Pitt 2018, section 4,
    who sort along a Hilbert curve for multivariate states; here the states are scalar).
    Systematic resampling keeps the estimate unbiased.

    Parameters
    ----------
    initial : callable
        ``initial(v, *params) -> x``: :math:`N` draws from :math:`\mu_\theta` (shape ``(N,)``)
        from standard normals ``v`` of shape ``(N,)``.
    transition : callable
        ``transition(x, v, t, *params) -> x'``: one draw from :math:`f_\theta(\cdot \mid x^i)` per
        particle, from standard normals ``v`` (``t`` = 1 .. T-1).
    log_observation : callable
        ``log_observation(x, t, *params) -> array (N,)``: :math:`\log g_\theta(y_t \mid x^i)`.
    n_particles : int
        :math:`N`.
    n_steps : int
        :math:`T`, the number of observations.
    sort_particles : bool, default True
        Sort before resampling. ``False`` gives the plain filter (still unbiased, but resampling
        then decorrelates successive estimates: for comparison only).

    Returns
    -------
    callable
        ``log_estimator(*params, u) -> float`` with attribute ``auxiliary_shape = (T, N + 1)``,
        for :func:`PseudoMarginalPotential`.
    """
    if not (callable(initial) and callable(transition) and callable(log_observation)):
        raise TypeError("initial, transition and log_observation must be callables.")
    n = _check_positive_int("n_particles", n_particles)
    steps = _check_positive_int("n_steps", n_steps)
    offsets = np.arange(n)

    def log_estimator(*args):
        *params, u = args
        u = np.asarray(u, dtype=float)
        total = 0.0
        x = np.asarray(initial(u[0, :n], *params), dtype=float)
        for t in range(steps):
            if t > 0:
                x = np.asarray(transition(x, u[t, :n], t, *params), dtype=float)
            log_w = np.asarray(log_observation(x, t, *params), dtype=float)
            if log_w.shape != (n,) or x.shape != (n,):
                raise ValueError(
                    f"The particle filter needs scalar states: x and log_observation must have shape ({n},), "
                    f"got {x.shape} and {log_w.shape} at step {t}."
                )
            top = log_w.max()
            if not top > -math.inf:  # every particle has zero weight: a zero estimate
                return -math.inf
            weights = np.exp(log_w - top)  # log_mean_exp by hand: SciPy's costs more than the filter
            total += float(top + math.log(weights.mean()))
            if t == steps - 1:
                break
            # sorted, so that resampling keeps the correlation
            order = np.argsort(x, kind="stable") if sort_particles else offsets
            cumulative = np.cumsum(weights[order] / weights.sum())
            positions = (offsets + ndtr(u[t, n])) / n  # systematic: one uniform per step
            x = x[order][np.minimum(np.searchsorted(cumulative, positions), n - 1)]
        return total

    log_estimator.auxiliary_shape = (steps, n + 1)
    log_estimator.n_particles = n
    return log_estimator


def log_estimate_spread(log_estimator, *params, n_repeats: int = 100, rng=None) -> dict:
    r"""Mean and standard deviation of repeated log-estimates at fixed parameters.

    The standard deviation of :math:`\log\hat L(\theta)` decides how well a pseudo-marginal chain
    mixes: near 1 is efficient, above about 3 the chain sticks (Doucet et al. 2015). Check it
    at a few typical posterior values before a long run.

    Returns
    -------
    dict
        ``{"mean": ..., "sd": ..., "n_repeats": ..., "log_values": array}``.
    """
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, int | np.integer) or n_repeats < 2:
        raise ValueError(f"n_repeats must be an integer >= 2, got {n_repeats!r}.")
    rng = np.random.default_rng(rng)
    values = np.array([log_estimator(*params, rng) for _ in range(int(n_repeats))], dtype=float)
    finite = values[np.isfinite(values)]
    return {
        "mean": float(np.mean(finite)) if finite.size else -math.inf,
        "sd": float(np.std(finite, ddof=1)) if finite.size > 1 else math.nan,
        "n_repeats": int(n_repeats),
        "log_values": values,
    }
