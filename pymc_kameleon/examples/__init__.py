"""Old import path of :mod:`pymc_kameleon.problems` (re-exported; use the new path).

``pymc_kameleon.examples.gp_classification``, ``.table1`` and ``.sensor_network`` re-export the
modules of the same names in :mod:`pymc_kameleon.problems`.
"""

from pymc_kameleon.problems.gp_classification import (
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
