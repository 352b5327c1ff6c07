r"""The one problem abstraction: a posterior with a PyMC model and the exact references it has.

Every problem in :mod:`pymc_kameleon.problems` is a :class:`Problem`:

================================  =====================================  ===============================
class                             model                                  references
================================  =====================================  ===============================
:class:`Target` (banana,          a fresh model per :meth:`pymc_model`   exact draws, mean, normaliser,
flower, ring, Gaussian)           call                                   HDR quantiles; NumPy log density
:class:`Table1Target` (T1-T5 of   built once with its data and its       the values the data were
the GP-DA paper)                  likelihood counter                     simulated from
:class:`SensorNetworkData`        a fresh model per call                 the simulated locations; NumPy
                                                                         log posterior
================================  =====================================  ===============================

They keep their own constructors and attribute names (``Target.model()`` is a method,
``Table1Target.model`` a ``pm.Model`` attribute, ``Table1Target.params`` the reported parameters
rather than the constructor's arguments): the README, notebooks and benchmarks use them. What they
share is written here once, so code that only needs "a model to sample and what to compare with"
(plots, benchmarks) can take any :class:`Problem`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

__all__ = ["Problem"]


class Problem(ABC):
    """A posterior to sample: a name, a dimension, a PyMC model and optional exact references.

    Subclasses provide ``name`` (str) and ``dim`` (int, the number of sampled coordinates) as
    attributes or properties, and :meth:`pymc_model`. The references default to ``None`` (or
    :exc:`NotImplementedError` for :meth:`log_density`) where a problem has none. Posteriors of
    simulated data also have ``true_values``, the parameters the data were simulated from
    (an attribute, not declared here, because :class:`~.table1.Table1Target` is a dataclass whose
    field it is).
    """

    @abstractmethod
    def pymc_model(self):
        """A PyMC model (``pymc.Model``) whose posterior is this problem."""

    def log_density(self, x):
        """The unnormalised log posterior in NumPy at points of shape (..., dim), where there is one."""
        raise NotImplementedError(f"{type(self).__name__} has no NumPy log density; sample pymc_model().")

    @property
    def exact_mean(self) -> np.ndarray | None:
        """The exact posterior mean, shape ``(dim,)``, when it is known; else None."""
        return None

    @property
    def exact_cov(self) -> np.ndarray | None:
        """The exact posterior covariance, shape ``(dim, dim)``, when it is known; else None."""
        return None
