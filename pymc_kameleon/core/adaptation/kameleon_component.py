r"""How :class:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation` learns its Kameleon
component: the subsample :math:`Z` drawn from a window's draws and fitted (bandwidth, :math:`\gamma`, the
probe variance), :math:`\nu^2` started matched to the walk's scale :math:`\lambda` or carried over to the
new :math:`Z`, and the share of a window's states that :math:`Z` does not cover.

:class:`KameleonComponentTuning` is a mixin of ``ScaleFreeAdaptation``, apart from the schedule it serves
(the scan, the windows, the Robbins-Monro scales: :mod:`~pymc_kameleon.core.adaptation.scale_free`): its
methods read the adaptation's options (``kernel``, ``n_subsample``, ``bandwidth_spec``, ``gamma_spec``,
``nu2_initial``, ``target_accept``, ``learning_rate``), its ``state`` and its current window.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_kameleon.core.adaptation.scales import RobbinsMonro
from pymc_kameleon.core.kameleon.family import fit_proposal, matched_nu2

__all__ = ["KameleonComponentTuning"]


class KameleonComponentTuning:
    r"""The Kameleon component's :math:`Z`, its fit and :math:`\nu^2`, learned at a window's end."""

    def _refresh_kameleon(self, points, rng) -> None:
        if self.kernel is None:
            return
        state = self.state
        Z = points
        if Z.shape[0] > self.n_subsample:
            idx = np.sort(rng.choice(Z.shape[0], size=self.n_subsample, replace=False))
            Z = Z[idx]
        probe_nu2 = 1.0 if state.nu2 is None else state.nu2.value
        fit = fit_proposal(state.whiten(Z), self.kernel, self.bandwidth_spec, self.gamma_spec, probe_nu2, rng)
        if fit is None:
            return
        if state.nu2 is None:
            nu2 = self.nu2_initial
            if nu2 is None:
                nu2 = matched_nu2(state.am_scale.value**2, fit.gamma, fit.probe_variance)
            state.nu2 = RobbinsMonro(nu2, self.target_accept, self.learning_rate)
        elif fit.probe_variance > 0 and state.probe_variance > 0:
            state.nu2.rescale(state.probe_variance / fit.probe_variance)
        state.probe_variance = fit.probe_variance
        state.bandwidth = fit.bandwidth
        # With gamma="auto", gamma^2 is tied to nu^2: where the kernel term vanishes (far from Z, or
        # nearly constant weights in high dimension) the component is still a tuned random walk.
        if self.gamma_spec == "auto" and state.gamma_ratio is None:
            state.gamma_ratio = fit.gamma**2 / (state.nu2.value * fit.probe_variance)
        state.family = fit.family
        state.set_kameleon_scales()

    def _uncovered_fraction(self) -> float:
        """Fraction of the window's (last 500) states beyond 3 bandwidths (whitened) of every point of
        Z, where the Kameleon term vanishes (NaN before the first Z or with no draws)."""
        state, windows = self.state, self._windows
        if state.family is None or not math.isfinite(state.bandwidth) or len(windows.draws) == 0:
            return math.nan
        W = state.whiten(windows.draws.points[-500:])
        Zw = state.family.Z
        sq = (W * W).sum(1)[:, None] - 2.0 * W @ Zw.T + (Zw * Zw).sum(1)[None, :]
        nearest = np.sqrt(np.maximum(sq.min(axis=1), 0.0))
        return float(np.mean(nearest > 3.0 * state.bandwidth))

    def _matched_nu2(self) -> float:
        r""":math:`\nu^2` whose Kameleon component has the AM step's average variance :math:`\lambda^2`
        per whitened coordinate at Z (:func:`~pymc_kameleon.core.kameleon.family.matched_nu2`).

        With ``gamma="auto"``, :math:`\gamma^2 = r \nu^2 \bar v` is tied to :math:`\nu^2`, so
        :math:`\nu^2 \bar v (1 + r) = \lambda^2`.
        """
        state = self.state
        s2 = state.am_scale.value**2
        if state.gamma_ratio is not None:
            return s2 / (state.probe_variance * (1.0 + state.gamma_ratio))
        return matched_nu2(s2, state.gamma, state.probe_variance)
