"""Checks of PseudoMarginalPotential's options, shared with the estimator builders.

The default ``correlation``, the check that the inputs depend on the model's free variables,
``auxiliary_shape`` and ``correlation``, and positive integers (``replicates``, ``n_samples``, ...).
"""

from __future__ import annotations

import numpy as np

from pymc_kameleon.core.validation import check_number

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
            f"correlation must be in [0, 1), got {correlation!r}: it is the rho of the Crank-Nicolson move "
            "u' = rho u + sqrt(1 - rho^2) e, and at 1 the auxiliary variables never move (the chain targets "
            "the likelihood of one fixed u, not the posterior)."
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
