"""The problems the samplers are tested and benchmarked on, with one abstraction (:class:`Problem`).

- :mod:`~pymc_kameleon.problems.targets`: the KAMH paper's benchmark targets with exact references
  (banana, flower, ring, correlated Gaussian; families in ``banana.py``, ``flower.py``,
  ``gaussian.py``, the shared :class:`Target` base and the quantile measure in ``hdr.py``).
- :mod:`~pymc_kameleon.problems.gp_classification`: the UCI Glass data and the unbiased
  importance-sampling estimator of the GP-classification marginal likelihood (KAMH paper,
  section 5.1; NumPy/SciPy only).
- :mod:`~pymc_kameleon.problems.sensor_network`: the KASS paper's sensor-network localisation.
- :mod:`~pymc_kameleon.problems.table1` (import it explicitly; it builds PyMC models and Ops): the
  five targets of Table 1 of the GP delayed-acceptance paper, with simulated data and counted
  likelihood evaluations.
- :mod:`~pymc_kameleon.problems.real_posteriors` (import it explicitly, as ``table1``): the
  posteriors real users bring (``benchmarks/real_posteriors.py``), in themed modules with their
  references: ``regressions.py``, ``hierarchical.py``, ``time_series.py``, ``ode.py`` (also the SIR
  solve of Table 1's T4), ``scales.py``; ``reference.py`` says what a reference holds.

The targets, the Table 1 posteriors and the sensor network are :class:`Problem` s (see
:mod:`~pymc_kameleon.problems.base`); the real posteriors are builders of ``(model, reference,
initvals)``, as the benchmark samples them.
"""

from pymc_kameleon.problems.base import Problem
from pymc_kameleon.problems.gp_classification import (
    GLASS_FEATURES,
    GLASS_WINDOW_TYPES,
    GPClassificationLikelihood,
    LaplaceApproximation,
    load_glass,
)
from pymc_kameleon.problems.sensor_network import SensorNetworkData, sensor_network_data
from pymc_kameleon.problems.targets import (
    DEFAULT_QUANTILES,
    BananaTarget,
    FlowerTarget,
    GaussianTarget,
    Target,
    banana,
    correlated_gaussian,
    flower,
    quantile_error,
    ring,
)

__all__ = [
    "DEFAULT_QUANTILES",
    "GLASS_FEATURES",
    "GLASS_WINDOW_TYPES",
    "BananaTarget",
    "FlowerTarget",
    "GPClassificationLikelihood",
    "GaussianTarget",
    "LaplaceApproximation",
    "Problem",
    "SensorNetworkData",
    "Target",
    "banana",
    "correlated_gaussian",
    "flower",
    "load_glass",
    "quantile_error",
    "ring",
    "sensor_network_data",
]
