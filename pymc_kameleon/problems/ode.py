r"""ODEs behind black-box ``solve_ivp`` Ops, as a user wraps a SciPy solve: no gradient.

- The SIR epidemic of Table 1's T4 (:func:`~pymc_kameleon.problems.table1.sir` builds the model):
  :func:`sir_solution` and :class:`SIRSolveOp`, which counts its solves in a
  :class:`~pymc_kameleon.problems.table1.CallCounter`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.integrate import solve_ivp

if TYPE_CHECKING:
    from pymc_kameleon.problems.table1 import CallCounter

__all__ = ["SIR_SOLVER", "SIR_TIMES", "SIR_Y0", "SIRSolveOp", "sir_solution"]


# --------------------------------------------------------------------------- SIR (Table 1's T4)
SIR_TIMES = np.arange(0.0, 5.0, 0.25)
SIR_Y0 = (0.99, 0.01)
# LSODA with tight tolerances: the default RK45 (rtol 1e-3) would put solver error of the order
# of the observation noise's effect on the posterior into the likelihood.
SIR_SOLVER = {"method": "LSODA", "rtol": 1e-8, "atol": 1e-10}


def _sir_rhs(t, y, beta, gamma):
    s, i = y
    return [-beta * s * i, beta * s * i - gamma * i]


def sir_solution(beta: float, gamma: float, times=SIR_TIMES, y0=SIR_Y0) -> np.ndarray:
    r"""Solve :math:`S' = -\beta S I,\ I' = \beta S I - \gamma I` by ``scipy.integrate.solve_ivp``.

    Returns the array (len(times), 2) of :math:`(S, I)`; NaN if the solver fails.
    """
    sol = solve_ivp(_sir_rhs, (times[0], times[-1]), list(y0), t_eval=times, args=(beta, gamma), **SIR_SOLVER)
    if not sol.success or sol.y.shape[1] != len(times):
        return np.full((len(times), 2), np.nan)
    return sol.y.T


class SIRSolveOp(Op):
    r"""Black-box Op :math:`(\beta, \gamma) \mapsto (S(t_k), I(t_k))_{k \ge 1}`, solved by ``solve_ivp``.

    ``perform`` only (no gradient): the way a user wraps a SciPy ODE solve. Each call is one ODE
    solve and increments ``counter``. The output excludes :math:`t_0 = 0`, where the state is the
    known initial condition.
    """

    def __init__(self, counter: CallCounter, times=SIR_TIMES, y0=SIR_Y0):
        self.counter = counter
        self.times = np.asarray(times, dtype=float)
        self.y0 = tuple(float(v) for v in y0)

    def make_node(self, beta, gamma):
        inputs = [pt.as_tensor_variable(v, dtype="float64") for v in (beta, gamma)]
        return Apply(self, inputs, [pt.dmatrix()])

    def perform(self, node, inputs, output_storage):
        self.counter.calls += 1
        beta, gamma = (float(v) for v in inputs)
        if not (np.isfinite(beta) and np.isfinite(gamma)):
            curves = np.full((len(self.times), 2), np.nan)
        else:
            curves = sir_solution(beta, gamma, self.times, self.y0)
        output_storage[0][0] = np.ascontiguousarray(curves[1:])
