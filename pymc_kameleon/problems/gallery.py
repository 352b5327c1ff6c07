r"""PyMC's own gallery models as a user copies them: the black box written the gallery's way.

:func:`gallery_lotka_volterra` is the model of PyMC's example "ODE Lotka-Volterra With Bayesian
Inference in Multiple Ways" (pymc-examples, ``ode_models/ODE_Lotka_Volterra_multiple_ways``): the
Hudson's Bay hare and lynx pelts of 1900-1920, the ODE solved by ``scipy.integrate.odeint`` (its
default tolerances) inside an ``@as_op`` Op with no gradient, truncated-normal priors centred on a
least-squares fit, and a normal likelihood with one noise sd. It is issue 44's yardstick of the
clock: a solve costs about 1.6 ms here, the cost of a typical user's expensive likelihood.

Its NUTS reference samples a differentiable twin: the same ODE with its forward sensitivities, by
``odeint`` at the same (default) tolerances, inside an Op with a gradient.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.integrate import odeint

from pymc_kameleon.problems.ode import LotkaVolterraSensitivityOp, _lv_rhs_sensitivities
from pymc_kameleon.problems.reference import NutsReference

try:  # as_op's new name (PyTensor >= 2.3x, where as_op warns that it is deprecated); the same Op
    from pytensor.compile.ops import wrap_py as as_op
except ImportError:  # older PyTensor
    from pytensor.compile.ops import as_op

__all__ = [
    "GALLERY_LV_THETA",
    "GALLERY_LV_YEARS",
    "gallery_lotka_volterra",
    "gallery_lotka_volterra_coarse",
    "gallery_lv_solution",
]

#: The gallery's observation times (years; the ODE starts at the first).
GALLERY_LV_YEARS = np.arange(1900.0, 1921.0, 1)
_HARE = np.array([30.0, 47.2, 70.2, 77.4, 36.3, 20.6, 18.1, 21.4, 22.0, 25.4, 27.1, 40.3, 57.0, 76.6, 52.3,
                  19.5, 11.2, 7.6, 14.6, 16.2, 24.7])
_LYNX = np.array([4.0, 6.1, 9.8, 35.2, 59.4, 41.7, 19.0, 13.0, 8.3, 9.1, 7.4, 8.0, 12.3, 19.5, 45.7, 51.1,
                  29.7, 15.8, 9.7, 10.1, 8.6])
#: The gallery's least-squares fit (alpha, beta, gamma, delta, hare and lynx at 1900): the priors'
#: centres and the chains' starts.
GALLERY_LV_THETA = np.array([0.52, 0.026, 0.84, 0.026, 34.0, 5.9])
_PRIOR_SD = (0.1, 0.01, 0.1, 0.01, 1.0, 1.0)
_NAMES = ("alpha", "beta", "gamma", "delta", "xto", "yto")


def _rhs(X, t, theta):
    """The gallery's right-hand side: dx/dt = alpha x - beta x y, dy/dt = -gamma y + delta x y."""
    x, y = X
    alpha, beta, gamma, delta, _, _ = theta
    return [alpha * x - beta * x * y, -gamma * y + delta * x * y]


def gallery_lv_solution(theta, tolerance: float | None = None) -> np.ndarray:
    """Hare and lynx at :data:`GALLERY_LV_YEARS`, shape (21, 2): the gallery's ``odeint`` call (with
    ``rtol = atol = tolerance`` if given: a cheaper, coarser solve)."""
    options = {} if tolerance is None else {"rtol": tolerance, "atol": tolerance}
    return odeint(func=_rhs, y0=theta[-2:], t=GALLERY_LV_YEARS, args=(theta,), **options)


@as_op(itypes=[pt.dvector], otypes=[pt.dmatrix])
def _gallery_forward_model(theta):
    return gallery_lv_solution(theta)


class _GallerySensitivityOp(LotkaVolterraSensitivityOp):
    """The gallery's solve (odeint, default tolerances, from 1900) with its forward sensitivities."""

    def perform(self, node, inputs, outputs):
        a, b, c, d, u0, v0 = (float(p) for p in inputs[0])
        y0 = np.zeros(14)
        y0[:2], y0[2 + 4], y0[8 + 5] = (u0, v0), 1.0, 1.0
        y = odeint(_lv_rhs_sensitivities, y0, GALLERY_LV_YEARS, args=(a, b, c, d))
        n = GALLERY_LV_YEARS.size
        outputs[0][0], outputs[1][0] = y[:, :2].copy(), y[:, 2:].reshape(n, 2, 6).copy()


class _CoarseSolveOp(Op):
    """The gallery's solve at a looser tolerance (a black box, no gradient): the coarse model of MLDA."""

    __props__ = ("tolerance",)

    def __init__(self, tolerance: float):
        self.tolerance = float(tolerance)

    def make_node(self, theta):
        theta = pt.as_tensor_variable(theta, dtype="float64")
        return Apply(self, [theta], [pt.dmatrix()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = gallery_lv_solution(inputs[0], self.tolerance)


def _gallery_model(differentiable: bool, tolerance: float | None = None):
    with pm.Model() as model:
        params = [
            pm.TruncatedNormal(name, mu=mu, sigma=sd, lower=0, initval=mu)
            for name, mu, sd in zip(_NAMES, GALLERY_LV_THETA, _PRIOR_SD, strict=True)
        ]
        sigma = pm.HalfNormal("sigma", 10)
        theta = pm.math.stack(params)
        if differentiable:
            solution = _GallerySensitivityOp()(theta)[0]
        elif tolerance is not None:
            solution = _CoarseSolveOp(tolerance)(theta)
        else:
            solution = _gallery_forward_model(theta)
        pm.Normal("Y_obs", mu=solution, sigma=sigma, observed=np.column_stack([_HARE, _LYNX]))
    return model


_GALLERY_REFERENCE = NutsReference(
    "gallery-lotka-volterra",
    partial(_gallery_model, differentiable=True),
    "a differentiable twin: the same ODE, priors and likelihood, solved by scipy's odeint at the same "
    "(default) tolerances together with its forward sensitivities, which give the gradient",
    tune=1000,
    draws=3000,
)


def gallery_lotka_volterra():
    """PyMC's gallery Lotka-Volterra model, as written there (an ``as_op`` Op around ``odeint``).

    Returns
    -------
    model : pymc.Model
        Seven free variables: ``alpha``, ``beta``, ``gamma``, ``delta``, ``xto``, ``yto``
        (TruncatedNormal at the least-squares fit, ``initval`` there, as the gallery) and ``sigma``.
    reference : NutsReference
    initvals : None
    """
    return _gallery_model(differentiable=False), _GALLERY_REFERENCE, None


def gallery_lotka_volterra_coarse(tolerance: float = 1e-3):
    """The gallery model solved at ``rtol = atol = tolerance`` (odeint's default is about 1.5e-8): a
    cheaper coarse model of the same variables, for :class:`~pymc_kameleon.MLDA` (build it outside
    the fine model's ``with`` block). At 1e-3 a solve takes about half the fine one's time."""
    return _gallery_model(differentiable=False, tolerance=tolerance)
