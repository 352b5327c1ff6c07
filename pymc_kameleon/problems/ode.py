r"""ODEs behind black-box ``solve_ivp`` Ops, as a user wraps a SciPy solve: no gradient.

- The SIR epidemic of Table 1's T4 (:func:`~pymc_kameleon.problems.table1.sir` builds the model):
  :func:`sir_solution` and :class:`SIRSolveOp`, which counts its solves in a
  :class:`~pymc_kameleon.problems.table1.CallCounter`.
- Lotka-Volterra predator-prey dynamics (real-posteriors catalogue): :func:`lotka_volterra` and
  :func:`lotka_volterra_far_start` return ``(model, reference, initvals)`` (see
  :mod:`~pymc_kameleon.problems.reference`); the model solves the ODE in the black-box
  :class:`LotkaVolterraOp`, and its NUTS reference in :class:`LotkaVolterraSensitivityOp`, which
  also solves the forward sensitivities and so has a gradient.
- The same ODE on real data, the Hudson's Bay Company's lynx and hare pelts of 1900-1920, as in
  posteriordb's ``hudson_lynx_hare-lotka_volterra``: :func:`lotka_volterra_lynx_hare`, with the
  same black-box Op and a differentiable twin for its NUTS reference.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.integrate import odeint, solve_ivp

from pymc_kameleon.problems.reference import NutsReference

if TYPE_CHECKING:
    from pymc_kameleon.problems.table1 import CallCounter

__all__ = [
    "SIR_SOLVER",
    "SIR_TIMES",
    "SIR_Y0",
    "LotkaVolterraOp",
    "LotkaVolterraSensitivityOp",
    "SIRSolveOp",
    "lotka_volterra",
    "lotka_volterra_far_start",
    "lotka_volterra_lynx_hare",
    "sir_solution",
    "solve_lotka_volterra",
]


# --------------------------------------------------------------------------- SIR (Table 1's T4)
#: The observation times of the SIR model (Table 1's T4).
SIR_TIMES = np.arange(0.0, 5.0, 0.25)
#: The SIR model's initial susceptible and infected fractions.
SIR_Y0 = (0.99, 0.01)
#: ``solve_ivp`` options of the SIR solve: LSODA with tight tolerances (the default RK45, rtol 1e-3,
#: would put solver error of the order of the observation noise's effect on the posterior into the
#: likelihood).
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


# --------------------------------------------------------------------------- Lotka-Volterra
_LV_TIMES = np.arange(0.0, 21.0)  # 21 yearly observations, the first at t = 0
_LV_TRUE = (0.55, 0.028, 0.80, 0.024, 33.0, 6.0)  # alpha, beta, gamma, delta, u0, v0
_LV_TOL = {"rtol": 1e-6, "atol": 1e-8}
_LV_FLOOR = 1e-9  # populations are floored here (the log-normal likelihood needs z > 0)
# Right-hand-side evaluations allowed per solve (about 300 near the posterior): beyond this the
# solve counts as failed, as with Stan's max_num_steps, so extreme proposals cost at most ~0.1 s.
_LV_MAX_RHS_EVALS = 20_000


class _SolveBudgetExceeded(Exception):
    pass


class _BudgetedRHS:
    """A right-hand side that raises once ``budget`` evaluations are spent (the exception ends the solve)."""

    def __init__(self, f, budget=_LV_MAX_RHS_EVALS):
        self.f, self.budget, self.n = f, budget, 0

    def __call__(self, *args):
        self.n += 1
        if self.n > self.budget:
            raise _SolveBudgetExceeded
        return self.f(*args)


def _lv_rhs(t, z, a, b, c, d):
    u, v = z
    return [(a - b * v) * u, (d * u - c) * v]


def _lv_rhs_sensitivities(y, t, a, b, c, d):
    """The state and its sensitivities s = dz/dp, p = (a, b, c, d, u0, v0): ds/dt = J_z s + J_p."""
    u, v, s = y[0], y[1], y[2:]
    j00, j01, j10, j11 = a - b * v, -b * u, d * v, d * u - c
    top = [j00 * s[k] + j01 * s[6 + k] for k in range(6)]
    bottom = [j10 * s[k] + j11 * s[6 + k] for k in range(6)]
    top[0] += u
    top[1] -= u * v
    bottom[2] -= v
    bottom[3] += u * v
    return [j00 * u, j11 * v, *top, *bottom]


def solve_lotka_volterra(params, sensitivities=False):
    """Solve the Lotka-Volterra ODE at ``_LV_TIMES`` (LSODA, rtol 1e-6, atol 1e-8).

    Parameters
    ----------
    params : array of shape (6,)
        alpha, beta, gamma, delta (prey growth, predation, predator death, predator growth)
        and the initial populations u0, v0.
    sensitivities : bool
        False: ``scipy.integrate.solve_ivp`` (the black box). True: ``scipy.integrate.odeint``
        on the system augmented with the forward sensitivities dz/dparams (for the gradient of the
        NUTS reference; 2x faster than solve_ivp on the 14-d system, same method and tolerances).

    Returns
    -------
    z : array of shape (21, 2)
        Prey and predator populations, floored at 1e-9; ``inf`` (a rejection) if the solver failed or
        needed more than 20 000 right-hand-side evaluations.
    S : array of shape (21, 2, 6), only with ``sensitivities=True``
        dz/dparams (zero where z is floored).
    """
    a, b, c, d, u0, v0 = (float(p) for p in params)
    n = _LV_TIMES.size
    S = None
    if sensitivities:
        y0 = np.zeros(14)
        y0[:2], y0[2 + 4], y0[8 + 5] = (u0, v0), 1.0, 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # odeint's warnings on failure: the result is checked below
            try:
                y, info = odeint(_BudgetedRHS(_lv_rhs_sensitivities), y0, _LV_TIMES, args=(a, b, c, d),
                                 full_output=True, mxstep=_LV_MAX_RHS_EVALS, **_LV_TOL)
                ok = info["message"] == "Integration successful." and np.all(np.isfinite(y))
            except _SolveBudgetExceeded:
                y, ok = np.zeros((n, 14)), False
        z, S = y[:, :2].copy(), y[:, 2:].reshape(n, 2, 6).copy()
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overflow and LSODA's warnings: the result is checked below
            try:
                sol = solve_ivp(_BudgetedRHS(_lv_rhs), (0.0, _LV_TIMES[-1]), [u0, v0], t_eval=_LV_TIMES,
                                args=(a, b, c, d), method="LSODA", **_LV_TOL)
                ok = sol.status == 0 and sol.y.shape[1] == n and np.all(np.isfinite(sol.y))
            except _SolveBudgetExceeded:
                ok = False
        z = sol.y.T.copy() if ok else None
    if not ok:
        z, S = np.full((n, 2), np.inf), np.zeros((n, 2, 6))
    low = z < _LV_FLOOR
    z[low] = _LV_FLOOR
    if sensitivities:
        S[low] = 0.0
        return z, S
    return z


class LotkaVolterraOp(Op):
    """Black-box PyTensor Op: parameters (6,) -> populations (21, 2), by ``solve_ivp``; no gradient."""

    __props__ = ()

    def make_node(self, params):
        params = pt.as_tensor_variable(params, dtype="float64")
        return Apply(self, [params], [pt.dmatrix()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = solve_lotka_volterra(inputs[0])


class LotkaVolterraSensitivityOp(Op):
    """The same solution plus its forward sensitivities, with a gradient (for the NUTS reference)."""

    __props__ = ()

    def make_node(self, params):
        params = pt.as_tensor_variable(params, dtype="float64")
        return Apply(self, [params], [pt.dmatrix(), pt.tensor3(dtype="float64")])

    def perform(self, node, inputs, outputs):
        z, S = solve_lotka_volterra(inputs[0], sensitivities=True)
        outputs[0][0], outputs[1][0] = z, S

    def L_op(self, inputs, outputs, output_grads):
        gz, gS = output_grads
        if not isinstance(gS.type, DisconnectedType):
            raise NotImplementedError("The sensitivities themselves are not differentiable.")
        return [pt.tensordot(gz, outputs[1], axes=[[0, 1], [0, 1]])]

    def connection_pattern(self, node):
        return [[True, False]]


def _lv_data():
    rng = np.random.default_rng(20250107)
    z = solve_lotka_volterra(_LV_TRUE)
    return z * np.exp(rng.normal(0.0, 0.25, z.shape))


def _lotka_volterra_model(differentiable: bool):
    """8 parameters: 4 rates, 2 initial populations, 2 log-normal noise sds (as Stan's case study)."""
    data = _lv_data()
    with pm.Model() as model:
        # Started at the prior means (PyMC's default initial point would put every rate at 1).
        alpha = pm.TruncatedNormal("alpha", 1.0, 0.5, lower=0.0, initval=1.0)
        beta = pm.TruncatedNormal("beta", 0.05, 0.05, lower=0.0, initval=0.05)
        gamma = pm.TruncatedNormal("gamma", 1.0, 0.5, lower=0.0, initval=1.0)
        delta = pm.TruncatedNormal("delta", 0.05, 0.05, lower=0.0, initval=0.05)
        z0 = pm.LogNormal("z0", np.log(10.0), 1.0, shape=2)
        sigma = pm.LogNormal("sigma", -1.0, 1.0, shape=2)
        params = pt.stack([alpha, beta, gamma, delta, z0[0], z0[1]])
        z = LotkaVolterraSensitivityOp()(params)[0] if differentiable else LotkaVolterraOp()(params)
        pm.LogNormal("y", pt.log(z), sigma, observed=data)
    return model


_LV_REFERENCE = NutsReference(
    "lotka-volterra",
    partial(_lotka_volterra_model, differentiable=True),
    "a differentiable twin of the model: the same ODE, likelihood and priors, solved by scipy's odeint "
    "(LSODA, same tolerances) together with its forward sensitivities dz/dparams, which give the "
    "gradient (its solution agrees with the solve_ivp Op's to about 1e-6 relative)",
    tune=1000,
    draws=2500,
)


def lotka_volterra():
    """Lotka-Volterra with a black-box ``solve_ivp`` Op (no gradient), started at the prior's moments."""
    return _lotka_volterra_model(differentiable=False), _LV_REFERENCE, None


def lotka_volterra_far_start():
    """The same posterior, every rate started at 1 (the posterior has beta and delta near 0.025)."""
    initvals = {"alpha": 1.0, "beta": 1.0, "gamma": 1.0, "delta": 1.0}
    return _lotka_volterra_model(differentiable=False), _LV_REFERENCE, initvals


# --------------------------------------------------------------------------- Hudson's Bay lynx and hare
# Pelts in thousands, one row a year from 1900 (t = 0) to 1920 (t = 20); columns hare (prey) and lynx
# (predator), as the ODE's state. posteriordb's data "hudson_lynx_hare" (Howard 2009, from Hewitt
# 1921), the file hudson-bay-lynx-hare.csv of Carpenter's Stan case study in stan-dev/example-models
# (knitr/lotka-volterra); posteriordb splits off the 1900 row as y_init.
_LYNX_HARE_PELTS = np.array([
    [30.0, 4.0], [47.2, 6.1], [70.2, 9.8], [77.4, 35.2], [36.3, 59.4], [20.6, 41.7], [18.1, 19.0],
    [21.4, 13.0], [22.0, 8.3], [25.4, 9.1], [27.1, 7.4], [40.3, 8.0], [57.0, 12.3], [76.6, 19.5],
    [52.3, 45.7], [19.5, 51.1], [11.2, 29.7], [7.6, 15.8], [14.6, 9.7], [16.2, 10.1], [24.7, 8.6],
])
_THETA_PRIOR_MEAN = np.array([1.0, 0.05, 1.0, 0.05])
_THETA_PRIOR_SD = np.array([0.5, 0.05, 0.5, 0.05])


def _lynx_hare_model(differentiable: bool):
    """posteriordb's lotka_volterra.stan on the lynx-hare pelts: theta (4), z_init (2), sigma (2)."""
    with pm.Model() as model:
        # Stan's real<lower=0> theta with a normal prior: a truncated normal (its normaliser is constant).
        # Started at the prior means, as the simulated-data model is.
        theta = pm.TruncatedNormal("theta", _THETA_PRIOR_MEAN, _THETA_PRIOR_SD, lower=0.0, shape=4,
                                   initval=_THETA_PRIOR_MEAN)
        z_init = pm.LogNormal("z_init", np.log(10.0), 1.0, shape=2)
        sigma = pm.LogNormal("sigma", -1.0, 1.0, shape=2)
        params = pt.concatenate([theta, z_init])
        z = LotkaVolterraSensitivityOp()(params)[0] if differentiable else LotkaVolterraOp()(params)
        # Row 0 of the solution is z_init: Stan's y_init ~ lognormal(log(z_init), sigma) is its first row.
        pm.LogNormal("y", pt.log(z), sigma, observed=_LYNX_HARE_PELTS)
    return model


_LYNX_HARE_REFERENCE = NutsReference(
    "lotka-volterra-lynx-hare",
    partial(_lynx_hare_model, differentiable=True),
    "a differentiable twin of the model: the same ODE, likelihood and priors, solved by scipy's odeint "
    "(LSODA, same tolerances) together with its forward sensitivities dz/dparams, which give the gradient",
    tune=1000,
    draws=3000,
)


def lotka_volterra_lynx_hare():
    """Lotka-Volterra on the Hudson's Bay lynx and hare pelts, 1900-1920 (posteriordb's model and data).

    posteriordb's ``hudson_lynx_hare-lotka_volterra`` (Carpenter's Stan case study "Predator-prey
    population dynamics"): prey (hare) and predator (lynx) follow du/dt = (alpha - beta v) u,
    dv/dt = (-gamma + delta u) v with theta = (alpha, beta, gamma, delta); theta[1], theta[3] ~
    N(1, 0.5) and theta[2], theta[4] ~ N(0.05, 0.05), all > 0; z_init ~ LogNormal(log 10, 1);
    sigma ~ LogNormal(-1, 1); each of the 21 yearly pelt counts (the 1900 one included, around
    z_init) ~ LogNormal(log z(t), sigma) of its species. The data and the Stan model were checked
    against posteriordb (``posterior_database/models/stan/lotka_volterra.stan``) and the case study's
    ``hudson-bay-lynx-hare.csv``. The ODE is solved as :func:`lotka_volterra` solves it (LSODA, rtol
    1e-6, atol 1e-8, floor 1e-9, at most 20 000 right-hand-side evaluations; Stan's file uses RK45 with
    rtol 1e-5, atol 1e-3) inside the black-box :class:`LotkaVolterraOp` (no gradient); the NUTS
    reference samples a twin solved with sensitivities.

    Returns
    -------
    model : pymc.Model
        Free variables ``theta`` (4), ``z_init`` (2) and ``sigma`` (2); theta starts at its prior means.
    reference : NutsReference
    initvals : None
    """
    return _lynx_hare_model(differentiable=False), _LYNX_HARE_REFERENCE, None
