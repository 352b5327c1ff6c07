"""SMC kernels for ``pm.sample_smc``: :class:`KASS` (Kameleon rejuvenation) and :class:`ASMC`
(linear kernel)."""

from pymc_kameleon.smc.kass import ASMC, KASS
from pymc_kameleon.smc.results import (
    EvidenceLag,
    LogEvidence,
    evidence_lags,
    log_evidence,
    stage_dataset,
    stage_stats,
    with_stage_dataset,
)

__all__ = [
    "ASMC", "KASS", "EvidenceLag", "LogEvidence", "evidence_lags", "log_evidence", "stage_dataset",
    "stage_stats", "with_stage_dataset",
]
