"""The checks of SMC's initial particles (:class:`~pymc_kameleon.smc._batched.BatchedSMCKernel`): discrete
variables, prior draws that do not vary, a prior that is NaN at PyMC's draws of an ordered variable, and the
names of the particle vector's coordinates they report. Separate from :mod:`pymc_kameleon.smc._batched`
(the 500-line rule).
"""

from __future__ import annotations

import numpy as np
from pymc.vartypes import discrete_types

from pymc_kameleon.steps.variables import has_improper_prior, indexed_names, is_angle, ordered_value_variables

__all__ = [
    "angle_columns",
    "check_continuous",
    "improper_prior_error",
    "improper_prior_names",
    "check_prior_draws",
    "constant_draw_causes",
    "coordinate_labels",
    "nan_prior_hint",
    "variable_slices",
]


def check_continuous(model, sampler: str) -> None:
    """A clear error if the model has no free variables (PyMC's was "Empty list of input variables") or
    discrete ones, which the Kameleon moves cannot move."""
    if not model.value_vars:
        raise ValueError(
            f"{sampler}: this model has no free random variables (every variable is observed or "
            "deterministic), so there is nothing to sample. Give the parameters priors without observed=; "
            "for the model's log likelihood at fixed values, use model.compile_logp()."
        )
    discrete = [v.name for v in model.value_vars if v.dtype in discrete_types]
    if discrete:
        raise ValueError(
            f"{sampler} moves continuous variables only, but {discrete} "
            f"{'is' if len(discrete) == 1 else 'are'} discrete. Use pm.smc.kernels.MH or IMH "
            "for models with discrete variables."
        )


def variable_slices(variables, var_info):
    """``(name, slice, shape)`` of each variable in PyMC's flat particle vector, in order."""
    offset = 0
    for v in variables:
        shape, size = var_info[v.name][0], var_info[v.name][1]
        yield v.name, slice(offset, offset + size), shape
        offset += size


def angle_columns(variables, var_info, model) -> np.ndarray:
    """The columns of PyMC's flat particle vector whose variable has PyMC's circular transform
    (``pm.VonMises``): the model reads the angle wrapped, so the density is 2π-periodic in them
    (:func:`~pymc_kameleon.steps.variables.is_angle`; the steps' are ``angle_coordinates``)."""
    columns = []
    for v, (_, part, _) in zip(variables, variable_slices(variables, var_info)):
        rv = model.values_to_rvs.get(v)
        if rv is not None and is_angle(rv, model):
            columns.extend(range(part.start, part.stop))
    return np.array(columns, dtype=int)


def coordinate_labels(variables, var_info) -> list[str]:
    """The name of each coordinate of PyMC's flat particle vector: ``mu``, ``tau_log__``, ``theta[2]``
    (value variables, in the sampler's unconstrained coordinates)."""
    slices = variable_slices(variables, var_info)
    return [label for name, _, shape in slices for label in indexed_names(name, shape)]


def check_prior_draws(X, variables, var_info, causes=None) -> None:
    """A clear error if the initial particles do not vary. SMC starts from prior draws, but PyMC's SMC
    puts every particle at a variable's initial value when the variable has an ``initval=``, and an
    improper prior (``pm.Flat``, ``pm.HalfFlat``) has no draws (PyMC uses its initial value). With the
    ``causes`` (:func:`constant_draw_causes`) the message names the variables with an ``initval=`` and
    those with an improper prior."""
    X = np.asarray(X, dtype=float)
    if X.shape[0] < 2:
        return
    constant = np.all(X == X[0], axis=0)
    if not constant.any():
        return
    names = [name for name, part, _ in variable_slices(variables, var_info) if constant[part].any()]
    start = f"All {X.shape[0]} initial particles are identical in {names}: "
    improper_text = (
        "SMC starts from draws of the prior, and {these} none (an improper prior such as pm.Flat or "
        "pm.HalfFlat, whose 'draws' are its initial value). Give {them} a proper prior (for example a "
        "wide pm.Normal), or sample the model with pm.sample."
    )
    causes = causes or {}
    improper = [causes[n][1] for n in names if causes.get(n, ("",))[0] == "improper"]
    with_initval = [causes[n][1] for n in names if causes.get(n, ("",))[0] == "initval"]
    if not with_initval:  # improper priors, or no model to tell
        raise ValueError(start + improper_text.format(these="these variables have", them="them"))
    plural = len(with_initval) > 1
    message = (
        f"{start}PyMC's SMC starts every particle at a variable's initial value when it has one, instead "
        f"of drawing it from the prior, and {with_initval} {'have' if plural else 'has'} `initval=`. "
        f"Remove `initval=` from {'them' if plural else 'it'}, so that the particles are drawn from the "
        "prior (pm.sample takes a starting point as pm.sample(initvals=...) instead); the priors "
        "themselves need not change."
    )
    if improper:
        these = f"{improper} {'have' if len(improper) > 1 else 'has'}"
        message += " " + improper_text.format(these=these, them="them" if len(improper) > 1 else "it")
    raise ValueError(message + nan_prior_hint([v for v in variables if v.name in names]))


def improper_prior_names(model) -> list[str]:
    """The names of the model's free variables with an improper prior (``pm.Flat``, ``pm.HalfFlat``)."""
    return [rv.name for rv in model.free_RVs if has_improper_prior(rv)]


def improper_prior_error(sampler: str, model) -> ValueError | None:
    """The error for a model whose free variables include an improper prior (``pm.Flat``,
    ``pm.HalfFlat``), from which SMC cannot draw its initial particles (PyMC raised "Cannot sample from
    flat variable"); None for a model without one."""
    improper = improper_prior_names(model)
    if not improper:
        return None
    these = f"{improper} {'have' if len(improper) > 1 else 'has'}"
    return ValueError(
        f"{sampler}: SMC starts from draws of the prior, and {these} an improper prior (pm.Flat or "
        "pm.HalfFlat), which has no draws. Give "
        f"{'them' if len(improper) > 1 else 'it'} a proper prior (for example a wide pm.Normal or "
        "pm.HalfNormal); or sample with pm.sample(step=KameleonMetropolis(start='smc')), whose SMC run "
        "tempers from a wide Gaussian around the mode for such a model; or pass the initial particles "
        "as pm.sample_smc(start=...), for the posterior only: a model with an improper prior has no "
        "evidence (log_evidence then returns NaN)."
    )


def constant_draw_causes(model) -> dict[str, tuple[str, str]]:
    """Why a variable's initial particles may all be equal, by value-variable name: ``("improper",
    rv name)`` for an improper prior (pm.Flat, pm.HalfFlat), ``("initval", rv name)`` for a variable with
    an ``initval=`` (PyMC's SMC starts every particle there)."""
    causes = {}
    for value, rv in model.values_to_rvs.items():
        if has_improper_prior(rv):
            causes[value.name] = ("improper", rv.name)
        elif model.rvs_to_initial_values.get(rv) is not None:
            causes[value.name] = ("initval", rv.name)
    return causes


def nan_prior_hint(variables) -> str:
    """What to add to the NaN-prior error when the model has a variable with PyMC's ordered transform (its
    value variable is named ``*_ordered__``): PyMC's SMC draws its elements from the prior independently, so
    they are out of order and the transform gives NaN (a new user's ``pm.NormalMixture`` with ordered means
    and an ``OrderedLogistic``'s cutpoints, PyMC 5 and 6); else ``""``."""
    ordered = ordered_value_variables(variables)
    if not ordered:
        return ""
    return (
        f" {ordered} {'has' if len(ordered) == 1 else 'have'} PyMC's ordered transform, which is NaN at "
        "PyMC's SMC prior draws (each element drawn on its own, out of order): start the particles from "
        "sorted prior draws (pm.sample_smc(start={name: draws}) for these alone, in their unconstrained "
        "coordinates; KASS draws the other variables from the prior), or sample with "
        "KameleonMetropolis(start='smc'), whose run tempers from around the mode for such a model."
    )
