r"""A Kameleon family fitted in whitened coordinates, used (batched, for SMC) in the model's.
"""

from __future__ import annotations

import numpy as np

from pymc_kameleon.core.adaptation.whitening import Whitening

__all__ = [
    "WhitenedFamily",
]


class WhitenedFamily:
    r"""A Kameleon family fitted in whitened coordinates, used in the model's (batched, for SMC).

    :math:`q(x \mid y) = |L|^{-1} q_w(L^{-1}(x - m) \mid L^{-1}(y - m))`. It has the batch methods of
    :class:`~pymc_kameleon.core.kameleon.family.KameleonProposal` (``factor_batch``, ``sample_batch``,
    ``log_density_batch``), so :func:`pymc_kameleon.core.smc.population.population_mh_move` uses it unchanged.

    Parameters
    ----------
    family : KameleonProposal
        Fitted on whitened points.
    whitening : Whitening
    """

    def __init__(self, family, whitening: Whitening):
        self.family = family
        self.whitening = whitening
        self.dim = family.dim

    @property
    def Z(self) -> np.ndarray:
        """The subsample in the model's coordinates."""
        return self.whitening.to_model(self.family.Z)

    @property
    def nu2(self) -> float:
        return self.family.nu2

    @property
    def gamma2(self) -> float:
        """:math:`\\gamma^2`, in whitened units."""
        return self.family.gamma2

    @property
    def kernel(self):
        return self.family.kernel

    def covariance(self, y) -> np.ndarray:
        r"""Proposal covariance at ``y`` in the model's coordinates, :math:`L \Sigma_w L^\top`."""
        L = self.whitening.chol
        return L @ self.family.covariance(self.whitening.whiten(y)) @ L.T

    def factor_batch(self, Y, chunk_size=None):
        return self.family.factor_batch(self.whitening.whiten(Y), chunk_size=chunk_size)

    def sample_batch(self, Y, rng, chunk_size=None, factors=None):
        W, log_q = self.family.sample_batch(
            self.whitening.whiten(Y), rng, chunk_size=chunk_size, factors=factors
        )
        return self.whitening.to_model(W), log_q - self.whitening.log_det

    def log_density_batch(self, X, Y, chunk_size=None, factors=None):
        w = self.whitening
        out = self.family.log_density_batch(w.whiten(X), w.whiten(Y), chunk_size=chunk_size, factors=factors)
        return out - w.log_det
