r"""Kameleon moves: the Kameleon family as a proposal, with the current state's factor cached.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_kameleon.core.kameleon.family import KameleonProposal, ProposalAtPoint
from pymc_kameleon.core.linalg import SingularCovarianceError, same_array
from pymc_kameleon.core.proposals import Move, Proposal

__all__ = [
    "KameleonMoves",
]


class KameleonMoves(Proposal):
    r"""Kameleon moves :math:`q_Z(\cdot \mid y) = \mathcal N(y, \gamma^2 I + \nu^2 M_y H M_y^\top)`.

    Wraps a :class:`~pymc_kameleon.core.kameleon.family.KameleonProposal` family (fixed :math:`Z`,
    kernel and :math:`\gamma`) and keeps the factorised covariance at the current state, so a
    step builds exactly one new covariance: the one at the proposal, which the reverse density
    needs. :math:`M_y H M_y^\top` at the current state is kept too, so a change of
    :math:`\nu^2` or :math:`\gamma` alone costs a Cholesky factorisation, not a covariance. The
    cached factor is keyed by the family's :math:`(\nu^2, \gamma^2)`, so whoever tunes them
    (:class:`~pymc_kameleon.core.adaptation.state.ScaleFreeState`) may set them on the family.

    Parameters
    ----------
    family : KameleonProposal
    on_jitter : callable, optional
        Called with no argument whenever a covariance needed diagonal jitter or could not be
        factorised at all (steps use it to warn once).
    """

    def __init__(self, family: KameleonProposal, on_jitter=None):
        self.family = family
        self.on_jitter = on_jitter
        self._cur = None  # ((nu2, gamma2), ProposalAtPoint at the current state)
        self._cur_rkhs = None  # (point, M H M^T there)

    @property
    def _scales(self) -> tuple[float, float]:
        return (self.family.nu2, self.family.gamma2)

    def at_current(self, y) -> ProposalAtPoint:
        """The factorised proposal at the current state ``y`` (cached).

        Raises
        ------
        SingularCovarianceError
            If the covariance at ``y`` cannot be factorised even with jitter.
        """
        cached = self._cur
        if cached is not None and cached[0] == self._scales and same_array(cached[1].center, y):
            return cached[1]
        rk = self._cur_rkhs
        if rk is None or not same_array(rk[0], y):
            rk = (np.array(y, copy=True), self.family.rkhs_covariance(y))
            self._cur_rkhs = rk
        try:
            at = ProposalAtPoint.from_covariance(y, self.family.scaled(rk[1]))
        except SingularCovarianceError as err:
            raise SingularCovarianceError(
                f"the Kameleon proposal covariance at the current state is singular even with jitter "
                f"({err}). Use a positive gamma (now {math.sqrt(self.family.gamma2)!r})."
            ) from None
        self._cur = (self._scales, at)
        return at

    def factor_at(self, x):
        """Factorised proposal at ``x`` and its :math:`M H M^\\top` (None, None if singular even with
        jitter)."""
        rkhs = self.family.rkhs_covariance(x)
        try:
            at = ProposalAtPoint.from_covariance(x, self.family.scaled(rkhs))
        except SingularCovarianceError:
            self._report_jitter()
            return None, None
        if at.jitter > 0:
            self._report_jitter()
        return at, rkhs

    def _report_jitter(self):
        if self.on_jitter is not None:
            self.on_jitter()

    def propose(self, y, rng) -> Move:
        at_y = self.at_current(y)
        x, log_q_forward = at_y.sample_with_log_density(rng)
        at_x, rkhs_x = self.factor_at(x)
        if at_x is None:
            return Move(x, log_q_forward, math.nan, None, at_y.jitter, "kameleon")
        cache = self.cache_entry(x, at_x, rkhs_x)
        return Move(x, log_q_forward, at_x.log_density(y), cache, at_y.jitter, "kameleon")

    def cache_entry(self, x, at_x, rkhs_x):
        """What :meth:`accept` needs to make ``x`` the current state."""
        return (self._scales, at_x, np.array(x, copy=True), rkhs_x)

    def accept(self, move: Move) -> None:
        scales, at_x, x, rkhs_x = move.cache
        self._cur = (scales, at_x)
        self._cur_rkhs = (x, rkhs_x)

    def log_density(self, x, y) -> float:
        return self.family.at(y).log_density(x)
