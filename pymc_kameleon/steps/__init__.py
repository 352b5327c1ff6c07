"""PyMC step methods: the only code that talks to PyMC's step machinery."""

from pymc_kameleon.steps.delayed_acceptance import GPDelayedAcceptanceMALA, GPDelayedAcceptanceMH
from pymc_kameleon.steps.kameleon import KameleonMetropolis

__all__ = ["GPDelayedAcceptanceMALA", "GPDelayedAcceptanceMH", "KameleonMetropolis"]
