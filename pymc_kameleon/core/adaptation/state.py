r"""What scale-free tuning has learned: the state every tuned proposal is built from.

:class:`ScaleFreeState` holds the learned mean :math:`m` and covariance :math:`C = L L^\top`
(a :class:`~pymc_kameleon.core.adaptation.whitening.Whitening`), the coordinate scan's step
sizes, the Adaptive Metropolis scale :math:`\lambda`, and, once the first window after the scan
has ended, the Kameleon family on the whitened subsample :math:`Z_w` with its :math:`\nu^2`,
bandwidth and :math:`\gamma`. :class:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation`
changes it as tuning draws come in; proposals
(:class:`~pymc_kameleon.core.kameleon.scale_free.ScaleFreeProposal`, GP-DA MALA's Langevin move)
read it and never change it. :class:`TuningDraw` is what one step feeds the adaptation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pymc_kameleon.core.adaptation.scales import RobbinsMonro
from pymc_kameleon.core.adaptation.scan import CoordinateScan
from pymc_kameleon.core.adaptation.transport_map import TriangularMap
from pymc_kameleon.core.adaptation.whitening import WhitenedCoordinates, Whitening
from pymc_kameleon.core.kameleon.family import KameleonProposal
from pymc_kameleon.core.kameleon.whitened import WhitenedFamily
from pymc_kameleon.core.proposals import IndependenceProposal

__all__ = ["PHASES", "ScaleFreeState", "TuningDraw"]

#: The phases of tuning, in order: one coordinate per step, then the AM walk alone, then the mixture.
PHASES = ("scan", "adaptive_metropolis", "kameleon")


class TuningDraw(NamedTuple):
    r"""What one step tells the adaptation.

    Attributes
    ----------
    state : array of shape (d,)
        The chain's state after the step.
    accept_prob : float
        The step's acceptance probability, or an unbiased estimate of it (delayed acceptance, where
        it can exceed 1).
    component : str
        The scale the move used: ``"scan"``, ``"kameleon"`` (:math:`\nu^2`) or
        ``"adaptive_metropolis"`` (:math:`\lambda`, also for any other move whose covariance is
        :math:`\lambda^2 C`, such as GP-DA MALA's Langevin move).
    start : array of shape (d,), optional
        The state the move started from, and ``proposal`` the point proposed: the coordinate scan
        reads its move's direction from them.
    proposal : array of shape (d,), optional
    log_density : float
        The target's log density at ``state`` (NaN if unknown), for the end-of-tuning climb check;
        the steps pass its exact part (a pseudo-marginal log-estimate's slow wandering is not a climb).
    gradient : array of shape (d,), optional
        The log density's gradient at ``state``, if the step has it, for the gradient-spread check
        and the Cramér-Rao floor of the learned variances.
    population : array of shape (n_chains, d), optional
        Pooled tuning: every chain's state at the start of the step, this chain's among them; the
        adaptation window records these rows instead of ``state``
        (:meth:`~pymc_kameleon.core.adaptation.windows.AdaptationWindow.record`).
    proposal_log_density : float
        The target's log density at ``proposal`` (NaN if not evaluated): the importance weights of
        the independence component's draws, whose tail decides whether it is kept.
    """

    state: np.ndarray
    accept_prob: float
    component: str
    start: np.ndarray | None = None
    proposal: np.ndarray | None = None
    log_density: float = math.nan
    gradient: np.ndarray | None = None
    population: np.ndarray | None = None
    proposal_log_density: float = math.nan


@dataclass(eq=False)
class ScaleFreeState(WhitenedCoordinates):
    r"""The learned state of scale-free tuning (see the module docstring).

    Its ``mean``, ``chol``, ``covariance``, ``whiten`` and ``to_model`` are those of ``whitening``.

    Attributes
    ----------
    dim : int
    whitening : Whitening
        :math:`w = L^{-1}(x - m)`; the identity until the scan ends.
    scan : CoordinateScan
        Per-coordinate step sizes of the scan, and the coordinate that moves next.
    am_scale : RobbinsMonro
        :math:`\lambda` of the Adaptive Metropolis walk :math:`\mathcal N(y, \lambda^2 C)`.
    scan_steps : int
        Length of the coordinate scan (set to the tuning steps taken if tuning ends inside it).
    tune_steps : int
        Tuning steps taken.
    nu2 : RobbinsMonro or None
        :math:`\nu^2` of the Kameleon component (None before its first :math:`Z`).
    family : KameleonProposal or None
        The Kameleon family on the whitened subsample :math:`Z_w` (None before the first window
        after the scan ends, after a whitening change until :math:`Z` is redrawn, or when no
        Kameleon component is learned).
    bandwidth, gamma : float
        The family's bandwidth and :math:`\gamma`, in whitened units (NaN before the first).
    probe_variance : float
        :math:`\bar v`, the kernel term's mean variance per whitened coordinate at :math:`Z`
        for :math:`\nu^2 = 1` (:func:`~pymc_kameleon.core.kameleon.family.mean_rkhs_variance`).
    gamma_ratio : float or None
        :math:`\gamma^2 / (\nu^2 \bar v)`, fixed at the first :math:`Z` when ``gamma="auto"``.
    independence_weight : float
        :math:`\iota`, the weight of independent draws from :math:`t_\nu(m, C)` in the proposal
        (0: none; the adaptation sets it).
    independence_fit : IndependenceProposal or None
        The Student-t shape of the Gaussian fitted to the evaluated log densities, in whitened coordinates
        (:mod:`~pymc_kameleon.core.adaptation.gaussian_fit`; None before there is one).
    independence_uses_fit : bool
        Whether the independence component draws from ``independence_fit`` (else from the learned
        :math:`m, C`: :math:`t_\nu(0, I)` in whitened coordinates).
    transport_map : TriangularMap or None
        The map fitted to the draws tuning started from (``start_from_draws(..., transport_map=True)``),
        fixed; the step's proposal is then :class:`~.transport_map.MapMixtureProposal` on it.
    """

    dim: int
    whitening: Whitening
    scan: CoordinateScan
    am_scale: RobbinsMonro
    scan_steps: int
    tune_steps: int = 0
    nu2: RobbinsMonro | None = None
    family: KameleonProposal | None = None
    bandwidth: float = math.nan
    gamma: float = math.nan
    probe_variance: float = math.nan
    gamma_ratio: float | None = None
    independence_weight: float = 0.0
    independence_fit: IndependenceProposal | None = None
    independence_uses_fit: bool = False
    transport_map: TriangularMap | None = None

    # ------------------------------------------------------------------ phase
    @property
    def phase(self) -> str:
        """``"scan"``, ``"adaptive_metropolis"`` (AM only) or ``"kameleon"`` (the mixture)."""
        if self.tune_steps < self.scan_steps:
            return "scan"
        return "adaptive_metropolis" if self.family is None else "kameleon"

    # ------------------------------------------------------------------ derived figures
    @property
    def scan_scales(self) -> np.ndarray:
        """Per-coordinate step sizes of the coordinate scan."""
        return self.scan.scales

    @property
    def typical_scale(self) -> float:
        """Root mean proposal variance per coordinate, in the model's units (for GP length-scale defaults)."""
        if self.phase == "scan":
            return float(self.scan.scales.mean())
        return self.am_scale.value * math.sqrt(float(np.sum(self.chol**2)) / self.dim)

    @property
    def kernel_variance(self) -> float:
        r""":math:`\nu^2 \bar v`: the kernel term's average variance per whitened coordinate at :math:`Z`
        (NaN before the first Kameleon proposal). It, not :math:`\nu^2`, is what carries over to a new
        :math:`Z`."""
        return math.nan if self.nu2 is None else self.nu2.value * self.probe_variance

    @property
    def subsample(self) -> np.ndarray | None:
        """:math:`Z` in the model's coordinates (None before the first window ends)."""
        return None if self.family is None else self.to_model(self.family.Z)

    @property
    def model_family(self) -> WhitenedFamily | None:
        """The Kameleon component in the model's coordinates (None before the first window ends)."""
        return None if self.family is None else WhitenedFamily(self.family, self.whitening)

    def set_kameleon_scales(self) -> None:
        r"""Give the family the current :math:`\nu^2`, and :math:`\gamma^2` tied to it when ``gamma="auto"``:
        a fixed fraction of the kernel term's average variance :math:`\nu^2 \bar v` at :math:`Z`."""
        family = self.family
        family.nu2 = float(self.nu2.value)
        if self.gamma_ratio is not None:
            family.gamma2 = float(self.gamma_ratio * self.nu2.value * self.probe_variance)
        self.gamma = math.sqrt(family.gamma2)
