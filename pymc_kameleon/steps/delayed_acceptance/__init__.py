"""GP-surrogate delayed acceptance as PyMC steps: ``GPDelayedAcceptanceMH``, ``GPDelayedAcceptanceMALA``.

:mod:`.base` holds what both share (the warm-up, the GP's schedule, the scale-free base proposal,
the statistics), :mod:`.checks` their warnings at the end of tuning; :mod:`.mh` and :mod:`.mala` each
add their two-stage move.
"""

from pymc_kameleon.steps.delayed_acceptance.base import GPDelayedAcceptanceStep
from pymc_kameleon.steps.delayed_acceptance.mala import GPDelayedAcceptanceMALA
from pymc_kameleon.steps.delayed_acceptance.mh import GPDelayedAcceptanceMH

__all__ = ["GPDelayedAcceptanceMALA", "GPDelayedAcceptanceMH", "GPDelayedAcceptanceStep"]
