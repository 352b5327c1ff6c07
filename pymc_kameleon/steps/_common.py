"""Helpers shared by the PyMC step methods: variable checks and compiled log densities."""

from __future__ import annotations

import numpy as np
import pymc as pm
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements
from pymc.util import get_value_vars_from_user_vars

__all__ = ["LogDensity", "continuous_value_vars", "describe_point"]


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


class LogDensity:
    """Compiled model log density as a function of the raveled sampled block.

    Values of variables outside the block are read from PyTensor shared variables,
    which PyMC's ``ArrayStepShared.step`` sets before each step. :meth:`shared_snapshot`
    lets a step notice when another step in a ``CompoundStep`` changed them.
    """

    def __init__(self, model, vars, initial_point, compile_kwargs=None):
        self.shared = make_shared_replacements(initial_point, vars, model)
        [logp], inarray = join_nonshared_inputs(
            point=initial_point, outputs=[model.logp()], inputs=vars, shared_inputs=self.shared
        )
        compile_kwargs = dict(compile_kwargs or {})
        self._fn = compile_pytensor([inarray], logp, **compile_kwargs)
        self._fn.trust_input = True
        self.dtype = inarray.type.dtype
        self.n_evals = 0

    def __call__(self, x) -> float:
        self.n_evals += 1
        return float(self._fn(np.asarray(x, dtype=self.dtype)))

    def shared_snapshot(self) -> tuple:
        """Current values of the variables outside the block (copies)."""
        return tuple(np.array(s.get_value(borrow=True), copy=True) for s in self.shared.values())

    def shared_unchanged(self, snapshot) -> bool:
        return all(
            np.array_equal(old, s.get_value(borrow=True)) for old, s in zip(snapshot, self.shared.values())
        )


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

