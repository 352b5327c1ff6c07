r"""A groundwater-flow inverse problem on a fine and a coarse grid: the MLDA papers' setting (issue 46).

Steady Darcy flow in the unit square,

.. math::
    -\nabla \cdot \big(e^{\kappa(s)} \nabla u(s)\big) = 0, \qquad
    u = 1 \text{ at } s_1 = 0, \quad u = 0 \text{ at } s_1 = 1, \quad
    \partial u / \partial n = 0 \text{ at } s_2 \in \{0, 1\},

with the log-conductivity a truncated Karhunen-Loeve-like expansion
:math:`\kappa(s) = \sum_j \theta_j \sqrt{\lambda_j} \cos(a_j \pi s_1) \cos(b_j \pi s_2)`,
:math:`\theta_j \sim N(0, 1)`, :math:`\lambda_j = \sigma_\kappa^2 (1 + \pi^2 (a_j^2 + b_j^2) \ell^2)^{-2}`.
The constant mode is left out: a constant factor in the conductivity does not change :math:`u`.
The data are the heads at a 5 x 5 grid of wells, with Gaussian noise.

The solver is a cell-centred finite-volume scheme (five-point stencil, harmonic means of the cell
conductivities at the faces, the Dirichlet edges half a cell away) on ``cells x cells`` cells,
solved by SciPy's sparse LU; the heads at the wells are bilinear interpolations of the cell values.
A coarse grid is a cheap, biased forward model of the same parameters: the setting of Dodwell et al.
(2015) and Lykkegaard et al. (2023), with a finite-difference solver in place of their finite elements.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

__all__ = [
    "DATA_CELLS",
    "GROUNDWATER_MODES",
    "GroundwaterHeadsOp",
    "NOISE_SD",
    "groundwater_data",
    "groundwater_model",
    "log_conductivity",
    "log_posterior",
    "solve_heads",
]

#: The expansion's modes (a_j, b_j): the six lowest non-constant cosine pairs.
GROUNDWATER_MODES = ((1, 0), (0, 1), (1, 1), (2, 0), (0, 2), (2, 1))
_SIGMA_KAPPA = 1.5  # marginal sd scale of the log-conductivity
_LENGTH = 0.3  # correlation length of the expansion's spectrum
#: Wells at a 5 x 5 grid strictly inside the square.
_WELLS = np.stack(
    np.meshgrid(np.linspace(0.1, 0.9, 5), np.linspace(0.1, 0.9, 5), indexing="ij"), -1
).reshape(-1, 2)
#: The sd of the measured heads' noise.
NOISE_SD = 0.01  # sd of the measured heads (the heads run from 0 to 1)
_TRUE_SEED = 20261128


def _mode_scales() -> np.ndarray:
    a, b = np.array(GROUNDWATER_MODES, dtype=float).T
    return _SIGMA_KAPPA * (1.0 + np.pi**2 * (a**2 + b**2) * _LENGTH**2) ** -1.0


def log_conductivity(theta, cells: int) -> np.ndarray:
    r""":math:`\kappa` at the centres of ``cells x cells`` cells, shape ``(cells, cells)``, axis 0 along
    :math:`s_1` (the direction of flow)."""
    theta = np.asarray(theta, dtype=float)
    if theta.shape != (len(GROUNDWATER_MODES),):
        raise ValueError(f"theta must have shape ({len(GROUNDWATER_MODES)},), got {theta.shape}.")
    basis1, basis2 = _bases(cells)
    return np.einsum("j,jp,jq->pq", theta * _mode_scales(), basis1, basis2)


@lru_cache(maxsize=8)
def _bases(cells: int):
    centres = (np.arange(cells) + 0.5) / cells
    a, b = np.array(GROUNDWATER_MODES, dtype=float).T
    return np.cos(np.pi * a[:, None] * centres), np.cos(np.pi * b[:, None] * centres)


@lru_cache(maxsize=8)
def _well_interpolation(cells: int) -> sp.csr_matrix:
    """Bilinear interpolation from cell centres to the wells, an (n_wells, cells²) sparse matrix."""
    rows, cols, vals = [], [], []
    for w, (s1, s2) in enumerate(_WELLS):
        g1, g2 = s1 * cells - 0.5, s2 * cells - 0.5  # position in cell-centre index units
        i0, j0 = int(np.clip(np.floor(g1), 0, cells - 2)), int(np.clip(np.floor(g2), 0, cells - 2))
        t1, t2 = g1 - i0, g2 - j0
        for di, wi in ((0, 1 - t1), (1, t1)):
            for dj, wj in ((0, 1 - t2), (1, t2)):
                rows.append(w)
                cols.append((i0 + di) * cells + j0 + dj)
                vals.append(wi * wj)
    return sp.csr_matrix((vals, (rows, cols)), shape=(len(_WELLS), cells * cells))


def solve_heads(theta, cells: int) -> np.ndarray:
    """Heads at the wells, shape ``(25,)``, from the finite-volume solve on ``cells x cells`` cells.

    The transmissibility of an interior face is the harmonic mean :math:`2 k_1 k_2 / (k_1 + k_2)` of
    its cells' conductivities (times 1, the face length over the centre distance on a square grid);
    of a Dirichlet face :math:`2 k` (the edge is half a cell away).
    """
    if cells < 2:
        raise ValueError(f"cells must be at least 2, got {cells}.")
    k = np.exp(log_conductivity(theta, cells))
    n = cells
    index = np.arange(n * n).reshape(n, n)
    t1 = 2.0 * k[:-1, :] * k[1:, :] / (k[:-1, :] + k[1:, :])  # faces between (i, j) and (i + 1, j)
    t2 = 2.0 * k[:, :-1] * k[:, 1:] / (k[:, :-1] + k[:, 1:])  # faces between (i, j) and (i, j + 1)
    diag = np.zeros((n, n))
    diag[:-1, :] += t1
    diag[1:, :] += t1
    diag[:, :-1] += t2
    diag[:, 1:] += t2
    left, right = 2.0 * k[0, :], 2.0 * k[-1, :]
    diag[0, :] += left
    diag[-1, :] += right
    rhs = np.zeros((n, n))
    rhs[0, :] = left  # u = 1 at s1 = 0 (and u = 0 at s1 = 1 adds nothing)
    rows = np.concatenate([index.ravel(), index[:-1, :].ravel(), index[1:, :].ravel(),
                           index[:, :-1].ravel(), index[:, 1:].ravel()])
    cols = np.concatenate([index.ravel(), index[1:, :].ravel(), index[:-1, :].ravel(),
                           index[:, 1:].ravel(), index[:, :-1].ravel()])
    vals = np.concatenate([diag.ravel(), -t1.ravel(), -t1.ravel(), -t2.ravel(), -t2.ravel()])
    A = sp.csc_matrix((vals, (rows, cols)), shape=(n * n, n * n))
    u = spla.spsolve(A, rhs.ravel())
    return _well_interpolation(cells) @ u


class GroundwaterHeadsOp(Op):
    """Black-box PyTensor Op: ``theta`` (6,) -> heads at the 25 wells, on ``cells x cells`` cells; no
    gradient."""

    __props__ = ("cells",)

    def __init__(self, cells: int):
        self.cells = int(cells)

    def make_node(self, theta):
        theta = pt.as_tensor_variable(theta, dtype="float64")
        return Apply(self, [theta], [pt.dvector()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = solve_heads(inputs[0], self.cells)


#: The grid the data are simulated on (finer than any model's, so every model is biased a little).
DATA_CELLS = 96


@lru_cache(maxsize=1)
def groundwater_data() -> tuple[np.ndarray, np.ndarray]:
    """``(theta_true, heads)``: a parameter drawn from the prior (a fixed seed) and its heads on a
    96 x 96 grid plus noise of sd 0.01."""
    rng = np.random.default_rng(_TRUE_SEED)
    theta = rng.standard_normal(len(GROUNDWATER_MODES))
    heads = solve_heads(theta, DATA_CELLS) + rng.normal(0.0, NOISE_SD, len(_WELLS))
    return theta, heads


def log_posterior(theta, cells: int) -> float:
    """The model's log posterior density on ``cells x cells`` cells, up to a constant (for references
    computed outside PyMC, such as importance sampling)."""
    theta = np.asarray(theta, dtype=float)
    _, heads = groundwater_data()
    r = heads - solve_heads(theta, cells)
    return -0.5 * float(theta @ theta) - 0.5 * float(r @ r) / NOISE_SD**2


def groundwater_model(cells: int = 64) -> pm.Model:
    """The inverse problem on ``cells x cells`` cells: ``theta ~ N(0, I_6)``, the observed ``heads``
    normal about the solver's heads with sd 0.01.

    Every grid gives a model with the same free variable and the same observed ``heads``, so a model
    on a coarse grid is a coarse model for ``MLDA``, and its adaptive error model can correct it.
    """
    _, heads = groundwater_data()
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, 1.0, shape=len(GROUNDWATER_MODES))
        pm.Normal("heads", mu=GroundwaterHeadsOp(cells)(theta), sigma=NOISE_SD, observed=heads)
    return model
