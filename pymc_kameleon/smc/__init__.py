"""SMC kernels for ``pm.sample_smc``: :class:`KASS` (Kameleon rejuvenation) and :class:`ASMC` (linear kernel)."""

from pymc_kameleon.smc.kass import ASMC, KASS

__all__ = ["ASMC", "KASS"]
