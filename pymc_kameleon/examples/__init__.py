"""Worked examples from the papers, as NumPy/SciPy building blocks (no PyMC imports).

- :mod:`pymc_kameleon.examples.gp_classification`: the UCI Glass data and the unbiased
  importance-sampling estimator of the GP-classification marginal likelihood used for
  pseudo-marginal MCMC in section 5.1 of the KAMH paper.

:mod:`pymc_kameleon.examples.table1` (import it explicitly; it builds PyMC models) has the five
targets of Table 1 of the GP delayed-acceptance paper, with simulated data and counted
likelihood evaluations.
"""

from pymc_kameleon.examples.gp_classification import (
    GLASS_FEATURES,
    GLASS_WINDOW_TYPES,
    GPClassificationLikelihood,
    LaplaceApproximation,
    load_glass,
)

__all__ = [
    "GLASS_FEATURES",
    "GLASS_WINDOW_TYPES",
    "GPClassificationLikelihood",
    "LaplaceApproximation",
    "load_glass",
]
