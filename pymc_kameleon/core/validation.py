"""Validation of the options our steps and kernels take (no PyMC): a clear ValueError naming the option."""

from __future__ import annotations

import difflib
import inspect

import numpy as np

__all__ = [
    "check_independence_weight", "check_kameleon_options", "check_number", "check_probability",
    "check_smc_threshold", "check_weight", "refuse_unused_options", "unexpected_keyword_error",
]


def unexpected_keyword_error(callee: str, name, known, where: str = "") -> TypeError:
    """The TypeError for a keyword ``name`` that ``callee`` does not take, naming the closest of its
    ``known`` keywords (Python 3.11 names neither); ``where`` says where the keyword was given."""
    close = difflib.get_close_matches(str(name), list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return TypeError(f"{callee}() got an unexpected keyword argument {name!r}{where}{hint}")


def refuse_unused_options(signature_of, given: dict, *, unused_when: str, remedy: str) -> None:
    """Raise a ValueError naming the options in ``given`` that differ from their defaults in the
    signature of ``signature_of`` where another choice (``unused_when``, as the user wrote it) leaves
    them without effect: ignored silently, a typo or a misreading would go unnoticed. ``remedy``
    ends the message, ``{them}`` in it standing for "it" or "them"."""
    parameters = inspect.signature(signature_of).parameters
    changed = [name for name, value in given.items() if not _is_default(value, parameters[name].default)]
    if changed:
        listed = ", ".join(f"{name}={given[name]!r}" for name in changed)
        verb, them = ("has", "it") if len(changed) == 1 else ("have", "them")
        raise ValueError(f"{listed} {verb} no effect with {unused_when}: {remedy.format(them=them)}.")


def _is_default(value, default) -> bool:
    if value is default:
        return True
    plain = (str, int, float, np.number)  # a kernel object, say, is never the default string
    return isinstance(value, plain) and isinstance(default, plain) and value == default


def check_number(name, value, *, integer=False, minimum=None, strict=True):
    """Raise a ValueError naming the option unless ``value`` is valid.

    Valid: a finite number (an integer with ``integer=True``, never a bool) above ``minimum``,
    or equal to it with ``strict=False``.
    """
    ok = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    ok = ok and not isinstance(value, bool) and bool(np.isfinite(value))
    if ok and minimum is not None:
        ok = value > minimum if strict else value >= minimum
    if not ok:
        kind = "an integer" if integer else "a finite number"
        bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum}"
        raise ValueError(f"{name} must be {kind}{bound}, got {value!r}.")


def check_smc_threshold(sampler: str, threshold, draws) -> None:
    """Raise a ValueError naming ``sampler`` unless ``threshold``, an SMC kernel's, is a number in (0, 1)
    with ``int(threshold * draws) >= 1``. PyMC accepts 0 (its target effective sample size is then 0, so
    the first reweighting goes straight to beta = 1: importance sampling from the prior) and 1 (every step
    must keep all N, so beta crawls up by PyMC's resolution, 1e-6)."""
    if not _in_open_unit_interval(threshold):
        raise ValueError(
            f"{sampler}: threshold must be a number in (0, 1), got {threshold!r}. It is the fraction of the "
            "particles' effective sample size each reweighting keeps (default 0.5; higher: more, gentler "
            "stages): 0 would reweight the prior's draws straight to the posterior in one stage, and 1 "
            "would never let beta rise."
        )
    if isinstance(draws, (int, np.integer)) and int(draws * threshold) < 1:
        raise ValueError(
            f"{sampler}: threshold={threshold!r} with draws={draws} asks each reweighting to keep an "
            f"effective sample size of int({threshold!r} * {draws}) = 0, so the first would go straight to "
            f"the posterior. Use a threshold of at least {1 / draws:.3g} (default 0.5), or more draws."
        )


def check_probability(name, value):
    """Raise a ValueError naming the option unless ``value`` is a number strictly between 0 and 1."""
    if not _in_open_unit_interval(value):
        raise ValueError(f"{name} must be in (0, 1), got {value!r}.")


def _in_open_unit_interval(value) -> bool:
    """Whether ``value`` is a number (not a bool) strictly between 0 and 1 (NaN is not)."""
    ok = isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))
    return ok and 0.0 < value < 1.0


def check_weight(name, value, *, one_allowed=True, why=""):
    """Raise a ValueError naming the option unless ``value`` is a number in [0, 1] (or [0, 1) without
    ``one_allowed``); ``why`` says what the bounds mean. One message for every out-of-range value (a new
    user got "a finite number >= 0" for -0.5 and "in [0, 1]" for 2)."""
    ok = isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))
    if not (ok and 0.0 <= value <= 1.0 and (one_allowed or value < 1.0)):
        bounds = "[0, 1]" if one_allowed else "[0, 1)"
        raise ValueError(f"{name} must be a number in {bounds}{f' ({why})' if why else ''}, got {value!r}.")


def check_independence_weight(value):
    """Raise a ValueError naming ``independence_weight`` unless it is a number in [0, 1) (1 would leave
    no walk: an independence sampler alone sticks wherever the Student-t underweights the posterior)."""
    check_weight("independence_weight", value, one_allowed=False, why="0: no independent draws")


def check_kameleon_options(bandwidth, gamma, n_subsample):
    """Validate the Kameleon proposal's options, shared by every step that offers it."""
    if isinstance(bandwidth, str):
        if bandwidth != "median":
            raise ValueError(f'bandwidth must be "median" or a positive number, got {bandwidth!r}.')
    else:
        check_number("bandwidth", bandwidth, minimum=0)
    if isinstance(gamma, str):
        if gamma != "auto":
            raise ValueError(f'gamma must be "auto" or a non-negative number, got {gamma!r}.')
    else:
        check_number("gamma", gamma, minimum=0, strict=False)
    check_number("n_subsample", n_subsample, integer=True, minimum=0)
