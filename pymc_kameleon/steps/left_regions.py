"""The warning of a region a chain settled in during tuning that the draws never reach (decision record
0059; the rule is :mod:`pymc_kameleon.core.adaptation.left_regions`'s)."""

from __future__ import annotations

import numpy as np

from pymc_kameleon.core.adaptation.left_regions import regions_left_behind
from pymc_kameleon.steps.agreement import CROSS_CHAIN_MORE_DRAWS

#: Draws after which a chain compares its tuning with the draws: PyMC's default number of draws. At 500
#: draws a chain of its own (per-chain tuning) on the 8-d banana or flower had not yet come back to an arm
#: its tuning had crossed (seed 2027, 2026), and was said to miss it; the draws of runs with fewer are
#: not judged.
LEFT_REGION_DRAWS = CROSS_CHAIN_MORE_DRAWS

__all__ = ["LEFT_REGION_DRAWS", "LeftRegionsCheck"]


class LeftRegionsCheck:
    """One chain's settled tuning blocks, compared with the first :data:`LEFT_REGION_DRAWS` draws.

    Parameters
    ----------
    step_name : str
    blocks : sequence of Block
        The chain's settled tuning blocks
        (:attr:`~pymc_kameleon.core.adaptation.left_regions.TuningBlocks.blocks`).
    chain : int or None
        The chain's index in a pooled population (None: per-chain tuning, where the step does not know
        it).
    """

    def __init__(self, step_name: str, blocks, chain: int | None = None):
        self.step_name = step_name
        self.blocks = list(blocks)
        self.chain = chain
        self.draws = None  # (LEFT_REGION_DRAWS, rows, d), filled in place: appending cost 2 us a draw
        self.log_density = np.empty(LEFT_REGION_DRAWS)
        self.n = 0
        self.done = not self.blocks

    def record(self, draws, log_density: float) -> str | None:
        """Add one draw iteration: the draws' states (rows: every chain's, pooled, or this chain's one) and
        this chain's exact log density. At the :data:`LEFT_REGION_DRAWS`-th, the warning's text if a region
        was left behind (else None); then nothing more."""
        if self.done:
            return None
        rows = np.atleast_2d(draws)
        if self.draws is None:
            self.draws = np.empty((LEFT_REGION_DRAWS, *rows.shape))
        self.draws[self.n] = rows
        self.log_density[self.n] = log_density
        self.n = n = self.n + 1
        if n < LEFT_REGION_DRAWS:
            return None
        self.done = True
        draws = self.draws.reshape(-1, self.draws.shape[-1])
        regions = regions_left_behind(self.blocks, draws, self.log_density)
        self.draws, self.log_density, self.blocks = None, None, []
        if not regions:
            return None
        pooled = self.chain is not None
        who, whose = (f"chain {self.chain}", "the chains'") if pooled else ("this chain", "this chain's")
        missed = (
            "the draws probably miss part of the posterior (another mode, or the narrow neck of a funnel), "
            "which R-hat cannot see when no chain is there"
            if pooled
            else "this chain's draws probably miss part of the posterior (another mode, or the narrow neck "
            "of a funnel), which R-hat sees only if another chain is there"
        )
        region = max(regions, key=lambda r: r.mass_nats)
        steps = sum(r.end - r.start for r in regions)
        share = float(np.exp(region.mass_nats))
        mass = f"about {share:.2g} times" if share < 10 else "more than 10 times"
        others = " and others" if len(regions) > 1 else ""
        return (
            f"{self.step_name}: during tuning {who} settled for {steps} steps (tuning steps {region.start}-"
            f"{region.end}{others}) in a region that none of {whose} first {n} draws reaches (the nearest is "
            f"{region.distance:.3g} of that region's sds away), yet from its log density and spread the "
            f"region holds {mass} the mass of where those draws are: {missed}, and more tuning rarely helps "
            "(a proposal adapted to where the chains are does not reach it). For separated modes sample with "
            "pm.sample_smc(kernel=KASS), whose tempering finds and weighs them if their widths are similar "
            "(it too can lose a mode much narrower than the others); for a funnel (a hierarchy's "
            "scale near zero) try a non-centred parameterisation; or start chains in that region with "
            'initvals and start="initial_point" (the default start search moves every chain to the highest '
            "density it finds) to see what they find."
        )
