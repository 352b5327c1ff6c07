"""pymc-kameleon: gradient-free, locally adaptive samplers for PyMC.

The public API::

    from pymc_kameleon import KameleonMetropolis, PseudoMarginalPotential
    from pymc_kameleon import GPDelayedAcceptanceMH, GPDelayedAcceptanceMALA
    from pymc_kameleon import KASS, ASMC              # pm.sample_smc(kernel=KASS)
    from pymc_kameleon import KameleonWarning         # the category of every warning we raise

``pymc_kameleon.core`` holds the NumPy math (no PyMC imports), ``pymc_kameleon.problems`` the
benchmark targets with exact references, the papers' problems (GP classification on UCI Glass,
Table 1 of the GP-DA paper, sensor-network localisation) and the catalogue of posteriors real users
bring, ``pymc_kameleon.plots`` plotting helpers, and ``pymc_kameleon.testing`` the helpers of
this package's tests (models, MCSE z-scores, seeded runs and their records).
"""

from pymc_kameleon import _fork
from pymc_kameleon.core.warning_categories import KameleonRuntimeWarning, KameleonWarning
from pymc_kameleon.pseudo_marginal import (
    PseudoMarginalEstimatorError,
    PseudoMarginalMisuseError,
    PseudoMarginalPotential,
    correlated_importance_sampling_estimator,
    correlated_particle_filter,
    importance_sampling_estimator,
    log_estimate_spread,
    log_mean_exp,
)
from pymc_kameleon.smc import ASMC, KASS
from pymc_kameleon.steps import (
    MLDA,
    DiscreteMetropolis,
    GPDelayedAcceptanceMALA,
    GPDelayedAcceptanceMH,
    GPLevel,
    KameleonMetropolis,
    SMCStart,
    rebuild_proposal,
)

#: The package version.
__version__ = "0.1.0"

_fork.install()  # PyMC forks its chains: LLVM's lock must not be copied while another thread holds it

__all__ = [
    "ASMC",
    "DiscreteMetropolis",
    "GPDelayedAcceptanceMALA",
    "GPDelayedAcceptanceMH",
    "GPLevel",
    "KASS",
    "KameleonMetropolis",
    "KameleonRuntimeWarning",
    "KameleonWarning",
    "MLDA",
    "PseudoMarginalEstimatorError",
    "PseudoMarginalMisuseError",
    "PseudoMarginalPotential",
    "SMCStart",
    "__version__",
    "correlated_importance_sampling_estimator",
    "correlated_particle_filter",
    "importance_sampling_estimator",
    "log_estimate_spread",
    "log_mean_exp",
    "rebuild_proposal",
]
