"""How a :class:`~pymc_kameleon.KASS` stage moves its particles, once ``tune`` has fitted the stage's
proposal: sweeps of Metropolis-Hastings moves over every particle
(:func:`~pymc_kameleon.core.smc.rejuvenation.rejuvenate`) or, waste-free, chains from a few resampled
particles with every state kept (:func:`~pymc_kameleon.core.smc.waste_free.run_chains`).

:class:`KASSMoves` is a mixin of KASS (as :class:`~pymc_kameleon.smc.kass_checks.KASSChecks` is), apart from
:mod:`pymc_kameleon.smc.kass` (the 500-line rule): ``KASS.mutate`` calls these methods and records the
stage. They move the kernel's particles in place and read its options and the stage's proposal family.
"""

from __future__ import annotations

import numpy as np
from pymc.smc.kernels import Pearson

from pymc_kameleon.core.smc.rejuvenation import rejuvenate
from pymc_kameleon.core.smc.waste_free import run_chains, waste_free_chains

__all__ = ["KASSMoves"]

# The proposal factors of the current particles are kept between sweeps below this size.
_FACTOR_CACHE_BYTES = 256 * 2**20


class KASSMoves:
    """The two ways a KASS stage moves its particles: sweeps over all of them, or waste-free chains."""

    def _sweep(self, N: int, d: int):
        """The stage's sweeps over all particles, in place
        (:func:`~pymc_kameleon.core.smc.rejuvenation.rejuvenate`)."""
        rule = self.n_steps_rule
        return rejuvenate(
            self.tempered_posterior,
            self.prior_logp,
            self.likelihood_logp,
            self.tempered_posterior_logp,
            self._family,
            self._evaluate,
            self.beta,
            self.rng,
            n_steps=rule,
            max_steps=self.max_steps,
            move_probability=self.move_probability,
            correlation=Pearson(self.tempered_posterior) if rule == "correlation" else None,
            correlation_threshold=self.correlation_threshold,
            chunk_size=self.chunk_size,
            cache_factors=N * d * d * 8 <= _FACTOR_CACHE_BYTES,
        )

    def _run_chains(self):
        """Waste-free: :math:`M = \\lceil N/P \\rceil` chains from the first resampled particles, all states
        kept (:func:`~pymc_kameleon.core.smc.waste_free.run_chains`). Returns the chains, and each
        state's chain-start log-likelihood and chain index (for the log-likelihood rise)."""
        N, d = self.tempered_posterior.shape
        M = waste_free_chains(N, self.chain_length)
        chains = run_chains(
            self.tempered_posterior[:M], self.prior_logp[:M], self.likelihood_logp[:M],
            self.tempered_posterior_logp[:M], N, self._family, self._evaluate, self.beta, self.rng,
            chunk_size=self.chunk_size, cache_factors=M * d * d * 8 <= _FACTOR_CACHE_BYTES,
            thin=self.final_thinning if self.beta >= 1 else 1,
        )
        chain = np.arange(N) % M
        loglik_start = self.likelihood_logp[:M][chain]
        self.tempered_posterior, self.prior_logp = chains.X, chains.log_prior
        self.likelihood_logp, self.tempered_posterior_logp = chains.loglik, chains.log_target
        self._eve = self._eve[:M][chain]
        self._n_chains = M
        return chains, loglik_start, chain
