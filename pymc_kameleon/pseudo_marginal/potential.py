"""PseudoMarginalPotential, the user's entry point, and how the steps find its terms in a model.

:func:`pseudo_marginal_terms` lists a model's :class:`PseudoMarginalTerm` s (the potential, its
:class:`~pymc_kameleon.pseudo_marginal.op.PseudoMarginalOp` and the Op's inputs); the options are
checked in :mod:`pymc_kameleon.pseudo_marginal.checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pymc as pm
import pytensor.tensor as pt

from pymc_kameleon.pseudo_marginal.checks import (
    _check_auxiliary,
    _check_inputs_depend_on_variables,
    _check_positive_int,
)
from pymc_kameleon.pseudo_marginal.op import PseudoMarginalOp

_MISUSE_OPTIONS = ("raise", "warn")


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
    randomness, so their ratio is far less noisy, and with many observations (hundreds of groups or
    time steps: Deligiannidis et al.'s regime) the chain mixes with far fewer samples per estimate.
    With few (a new user's 20 groups) it gained nothing per sample over plain pseudo-marginal: measure
    both. The move is reversible with respect to :math:`\mathcal N(0, I)`, so the acceptance ratio is
    the same pseudo-marginal ratio, with no :math:`u` term, and the chain
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
        has that attribute
        (:func:`~pymc_kameleon.pseudo_marginal.correlated_importance_sampling_estimator` sets it).
    correlation : float in [0, 1), optional
        :math:`\rho` of the Crank-Nicolson move; default 0.99 with ``auxiliary_shape`` (and only
        allowed with it). 0 draws ``u`` afresh at every proposal: standard pseudo-marginal. The
        best :math:`\rho` grows with the size of ``u``: Deligiannidis et al. take
        :math:`1 - \rho` of order :math:`N / T` (:math:`N` samples for each of :math:`T`
        observations), a guide for many observations: with 5 samples for each of 20 groups that
        reads 0.75, and a new user's chains collapsed at 0.9. Choose with ``correlation`` in
        :func:`~pymc_kameleon.pseudo_marginal.log_estimate_spread`: about the smallest
        :math:`\rho` whose ``"log_ratio_sd"`` is at most 2.4. A :math:`\rho` nearer 1 lowers it
        further but moves ``u`` slowly: on another user's 30 groups with 10 samples each, 0.99
        (sd 0.9) gave a fifth of the ESS of 0.9 (sd 2.5), and 0.67 (sd 3.9) froze.
    replicates : int, default 1
        Split every estimate into this many independent estimates :math:`\hat L_1, \dots, \hat L_R`
        and use their mean, :math:`\log \frac1R \sum_r \hat L_r`, which is still unbiased. Each
        replicate gets its own generator spawned from the sampler's (or its slice ``u[r]`` of the
        auxiliary normals, whose shape gains a leading axis of length ``replicates``), so the value
        is the same wherever the replicates run. For an estimator that is a plain mean of ``n``
        independent weights, ``R`` replicates of ``n / R`` samples have the same variance; for a product
        over groups of such means
        (:func:`~pymc_kameleon.pseudo_marginal.importance_sampling_estimator` over several groups) splitting
        adds variance (a new user's 20 groups: log-estimate sd 1.46 with ``n = 20`` against 2.43 with 4
        replicates of 5, and a third of the ESS): check with
        :func:`~pymc_kameleon.pseudo_marginal.log_estimate_spread`.
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
      NUTS first), raise :class:`~pymc_kameleon.pseudo_marginal.PseudoMarginalMisuseError`.
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
        if isinstance(x, str):
            raise TypeError(
                f"inputs[{i}] is the string {x!r}: pass the model variable itself (inputs=[{x}]), not its "
                "name."
            )
        try:
            tensors.append(pt.as_tensor_variable(x))
        except (TypeError, ValueError, NotImplementedError) as err:
            raise TypeError(f"inputs[{i}] is not a model variable or tensor expression: {err}") from None
    _check_inputs_depend_on_variables(tensors, pm.modelcontext(model))
    input_names = [t.name or f"inputs[{i}]" for i, t in enumerate(tensors)]
    own_shape = getattr(log_estimator, "auxiliary_shape", None)  # set by the helpers in estimators.py
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
