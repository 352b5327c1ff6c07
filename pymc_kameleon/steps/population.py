r"""Pooled tuning: our steps as PyMC population steps, whose chains learn from each other while tuning.

A step made with ``tuning="pooled"`` is an instance of a subclass that is also a
:class:`pymc.step_methods.arraystep.PopulationArrayStepShared`, so ``pm.sample`` runs its chains as a
population (``pymc/sampling/population.py``): all chains step once per iteration, and each is given
every chain's state at the start of the iteration. During tuning each chain's adaptation window
records all those states (:meth:`~pymc_kameleon.core.adaptation.windows.AdaptationWindow.record`),
so the learned mean, covariance and Kameleon subsample :math:`Z` come from every chain's tuning
draws; each chain keeps its own random stream, acceptance and scales. After tuning everything is
frozen, as with per-chain tuning, so each chain is an exact Metropolis-Hastings chain.

Every chain of a population records the same states at the same step, so their windows end
together and learn the same covariance whichever process they run in: ``cores=1`` and ``cores>1``
give the same draws.
"""

from __future__ import annotations

import numpy as np
import pymc as pm

from pymc_kameleon.pseudo_marginal import pseudo_marginal_terms

__all__ = ["TUNINGS", "PooledTuning", "pooled_class_for"]

TUNINGS = ("pooled", "per_chain")


class PooledTuning:
    """Mixin of the pooled variant of a step (before the step's class, with
    ``PopulationArrayStepShared`` after it in the bases)."""

    pooled = True

    def link_population(self, population, chain_index):
        """PyMC links the chains' states (refusing fewer than 3 chains; pooling needs 2, and one chain
        tunes alone)."""
        self.population = population
        self.this_chain = chain_index
        self.other_chains = [c for c in range(len(population)) if c != chain_index]

    def _population_states(self) -> np.ndarray | None:
        """Every chain's state at the start of this iteration, in the step's raveled coordinates
        (None with fewer than two chains)."""
        population = getattr(self, "population", None)
        if population is None or len(population) < 2:
            return None
        names = [v.name for v in self.vars]
        rows = [np.concatenate([np.ravel(point[n]) for n in names]) for point in population]
        return np.array(rows, dtype=float)


def pooled_class_for(cls, args, kwargs, default: str):
    """The class ``cls.__new__`` should make: its pooled variant for ``tuning="pooled"``, else ``cls``.

    Models with a :func:`~pymc_kameleon.PseudoMarginalPotential` tune per chain: the population of
    ``cores=1`` runs its chains in one process, where they would share the estimator's kept estimate.
    """
    tuning = kwargs.get("tuning", default)
    pooled = getattr(cls, "_pooled_class", None)
    if tuning != "pooled" or pooled is None or issubclass(cls, PooledTuning):
        return cls
    model = pm.modelcontext(kwargs.get("model"))
    try:
        if pseudo_marginal_terms(model):
            return cls
    except (TypeError, ValueError):  # a misused potential: the step's __init__ says what is wrong
        return cls
    return pooled
