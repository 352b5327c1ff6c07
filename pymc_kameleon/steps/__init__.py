"""PyMC step methods: the only code that talks to PyMC's step machinery."""

from pymc_kameleon.steps.delayed_acceptance import GPDelayedAcceptanceMALA, GPDelayedAcceptanceMH
from pymc_kameleon.steps.discrete import DiscreteMetropolis
from pymc_kameleon.steps.kameleon import KameleonMetropolis
from pymc_kameleon.steps.multilevel import MLDA
from pymc_kameleon.steps.multilevel_gp import GPLevel
from pymc_kameleon.steps.smc_start import SMCStart
from pymc_kameleon.steps.tuned import rebuild_proposal, value_space_draws

__all__ = [
    "DiscreteMetropolis",
    "GPDelayedAcceptanceMALA",
    "GPDelayedAcceptanceMH",
    "GPLevel",
    "KameleonMetropolis",
    "MLDA",
    "SMCStart",
    "rebuild_proposal",
    "value_space_draws",
]
