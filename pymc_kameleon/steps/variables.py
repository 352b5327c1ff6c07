"""The variables a step samples: which value variables of the model (continuous ones only, with a clear
error for discrete ones), and the names of their raveled coordinates as the user wrote them, which
the steps' warnings, statistics and plots use."""

from __future__ import annotations

import numpy as np
from pymc.distributions.continuous import FlatRV, HalfFlatRV
from pymc.logprob.transforms import CircularTransform
from pymc.model import modelcontext
from pymc.util import get_value_vars_from_user_vars
from pymc.vartypes import discrete_types
from pytensor.graph.traversal import graph_inputs
from pytensor.tensor.random.type import RandomGeneratorType

__all__ = [
    "angle_coordinates", "continuous_value_vars", "coordinate_names", "has_improper_prior",
    "improper_prior_coordinates", "indexed_names", "is_angle", "minibatch_observed", "model_in_context",
    "refuse_minibatch_data", "step_model",
]


def coordinate_names(vars, initial_point, model=None) -> list[str]:
    """Names of a raveled block's coordinates, in order, as the user wrote the variables: ``mu``,
    ``theta_t[3]``, ``L[1, 0]``; with ``model``, a transformed variable by its transform and name,
    ``log(tau)`` (the step samples its value variable ``tau_log__``), ``logodds(p)[2]``."""
    names = []
    for v in vars:
        label = v.name
        rv = model.values_to_rvs.get(v) if model is not None else None
        if rv is not None:
            transform = model.rvs_to_transforms.get(rv)
            label = rv.name if transform is None else f"{transform.name}({rv.name})"
        names.extend(indexed_names(label, np.shape(initial_point[v.name])))
    return names


def describe_coordinates(x, names=None, max_coordinates: int = 12) -> str:
    """``x`` by its coordinates' names (``log(sigma)=-1.92, x0=1.65``; :func:`coordinate_names`), its
    first ``max_coordinates`` only (a 50-d point filled a warning); the values alone, summarised, where
    ``names`` do not fit ``x``. How warnings and error notes name a point."""
    x = np.asarray(x, dtype=float).ravel()
    names = names or []
    if len(names) != x.size:
        values = np.array2string(x, precision=4, threshold=max_coordinates, edgeitems=3)
        return f"x = {values}"
    shown = ", ".join(f"{name}={value:.4g}" for name, value in zip(names[:max_coordinates], x))
    return shown if x.size <= max_coordinates else f"{shown}, ... ({x.size} coordinates)"


def has_improper_prior(rv) -> bool:
    """Whether ``rv`` is a ``pm.Flat`` or ``pm.HalfFlat``: its prior has no draws (PyMC uses its initial
    value)."""
    return rv.owner is not None and isinstance(rv.owner.op, FlatRV | HalfFlatRV)


def ordered_value_variables(variables) -> list[str]:
    """The names of the value variables with PyMC's ordered transform (named ``*_ordered__``): PyMC's SMC
    draws their elements from the prior one by one, out of order, where the transform gives NaN."""
    return [v.name for v in variables if v.name.endswith("_ordered__")]


def _coordinates_where(vars, initial_point, model, chosen) -> list[int]:
    """The raveled block's coordinates (indices, in :func:`coordinate_names`' order) whose variable's
    random variable ``rv`` has ``chosen(rv)``."""
    found, start = [], 0
    for v in vars:
        size = int(np.prod(np.shape(initial_point[v.name]), dtype=int))
        rv = model.values_to_rvs.get(v)
        if rv is not None and chosen(rv):
            found.extend(range(start, start + size))
        start += size
    return found


def improper_prior_coordinates(vars, initial_point, model) -> frozenset[int]:
    """The raveled block's coordinates whose variable has an improper prior, ``pm.Flat`` or
    ``pm.HalfFlat``: where the data do not identify such a variable the posterior is improper, and no
    sampler converges on it."""
    return frozenset(_coordinates_where(vars, initial_point, model, has_improper_prior))


def is_angle(rv, model) -> bool:
    """Whether ``model`` samples ``rv`` through PyMC's circular transform (``pm.VonMises``): the model
    reads it wrapped, so the density is 2π-periodic in its value variable
    (:mod:`pymc_kameleon.core.angles`)."""
    return isinstance(model.rvs_to_transforms.get(rv), CircularTransform)


def angle_coordinates(vars, initial_point, model) -> tuple[int, ...]:
    """The raveled block's coordinates whose variable :func:`is_angle`."""
    return tuple(_coordinates_where(vars, initial_point, model, lambda rv: is_angle(rv, model)))


def minibatch_observed(model) -> list[str]:
    """Names of the observed variables whose data draw random numbers: a ``pm.Minibatch`` slice (with
    ``total_size`` PyMC wraps the variable in a ``MinibatchRandomVariable``), which takes another random
    batch of the data at every evaluation of the log density."""
    names = []
    for rv in model.observed_RVs:
        data = model.rvs_to_values.get(rv)
        wrapped = rv.owner is not None and type(rv.owner.op).__name__ == "MinibatchRandomVariable"
        random_data = data is not None and any(
            isinstance(v.type, RandomGeneratorType) for v in graph_inputs([data])
        )
        if wrapped or random_data:
            names.append(rv.name)
    return names


def refuse_minibatch_data(model, name: str) -> None:
    """Raise a ValueError, naming the variables and the remedy, if ``model`` observes ``pm.Minibatch``
    data (:func:`minibatch_observed`): the steps and KASS alike."""
    observed = minibatch_observed(model)
    if not observed:
        return
    quoted = ", ".join(repr(n) for n in observed)
    raise ValueError(
        f"{name}: the data of {quoted} come from pm.Minibatch, which draws another random batch at every "
        "evaluation of the log density, so the posterior a sampler sees changes from one step to the next. "
        "pm.Minibatch is for variational inference (pm.fit); to sample, pass the full data (the arrays "
        "themselves, or pm.Data to change them later) and drop total_size."
    )


def indexed_names(label: str, shape) -> list[str]:
    """``[label]`` for a scalar, else ``label[i, j]`` for each index of ``shape`` in C order (ravel's)."""
    if tuple(shape) == ():
        return [label]
    return [f"{label}[{', '.join(map(str, index))}]" for index in np.ndindex(*shape)]


def continuous_value_vars(vars, model, step_name: str, required: str = ""):
    """Resolve the value variables a step samples, rejecting discrete ones with a clear error.

    ``required`` completes the call the error suggests with the step's required arguments (MLDA's
    ``", coarse_models=[...]"``), so that the suggestion runs as written.
    """
    if vars is None:
        vars = model.continuous_value_vars
        if not vars:
            raise ValueError(
                f"{step_name} samples continuous variables, and this model has none. Let pm.sample() "
                "assign PyMC's discrete steps, or use pymc_kameleon.DiscreteMetropolis next to a "
                "PseudoMarginalPotential."
            )
        return vars
    vars = get_value_vars_from_user_vars(vars, model)
    repeated = sorted({v.name for v in vars if sum(w is v for w in vars) > 1})
    if repeated:
        # Raveled twice, a variable's coordinates would be two that the model reads as one (PyTensor's
        # "index out of bounds" when the step maps its state back).
        raise ValueError(
            f"{step_name}: {repeated} {'is' if len(repeated) == 1 else 'are'} given more than once in vars; "
            "give each variable once."
        )
    discrete = [v.name for v in vars if v.dtype in discrete_types]
    if discrete:
        raise ValueError(
            f"{step_name} samples continuous variables only, but {discrete} "
            f"{'is' if len(discrete) == 1 else 'are'} discrete. Give the discrete variables "
            "their own step and pass both steps to pm.sample, this one last (the trace's lp comes from "
            f"the last step): step=[pymc_kameleon.DiscreteMetropolis([...]), {step_name}([...continuous...]"
            f"{required})] (or pm.Metropolis instead, if the model has no PseudoMarginalPotential)."
        )
    return vars


def model_in_context(model, message: str):
    """``model``, or the model in context; outside one, a TypeError saying ``message`` (PyMC's own, "No
    model on context stack.", names neither what needed the model nor how to give it)."""
    try:
        return modelcontext(model)
    except TypeError:
        raise TypeError(message) from None


def step_model(model, step_name: str):
    """The model a step ``step_name`` samples (:func:`model_in_context`): ``model``, or the one in context."""
    return model_in_context(
        model,
        f"{step_name}() needs the model it will sample: create it inside the model's context, "
        f"`with model: step = {step_name}()`, or pass it, `{step_name}(model=model)` (a step made "
        "outside the model's context does not find it, even when pm.sample(model=...) is given one).",
    )

