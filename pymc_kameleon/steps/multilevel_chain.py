"""One chain's state in :class:`~pymc_kameleon.MLDA`: :class:`MultilevelChain`, what
``MLDA._reset_chain_state`` makes afresh for each chain (the base proposal and its tuning, the multilevel
move, the current state at every level, the error model, the GP levels, and the decisions and counts that
the checks read).

Separate from :mod:`pymc_kameleon.steps.multilevel` (the 500-line rule), as
:mod:`~pymc_kameleon.steps.kameleon_chain` is from :mod:`~pymc_kameleon.steps.kameleon`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.kameleon.scale_free import ScaleFreeProposal
from pymc_kameleon.core.multilevel import LevelPoint, MultilevelDelayedAcceptance
from pymc_kameleon.steps.chain import ChainState
from pymc_kameleon.steps.multilevel_checks import FINE_DECISIONS_KEPT
from pymc_kameleon.steps.multilevel_levels import ErrorModel
from pymc_kameleon.steps.multilevel_spread import CoarseSpreadCheck

__all__ = ["MultilevelChain"]


@dataclass(eq=False, kw_only=True)
class MultilevelChain(ChainState):
    """One chain's state in :class:`~pymc_kameleon.MLDA`.

    Attributes
    ----------
    adaptation : ScaleFreeAdaptation
        The base proposal's tuning (coarsest level).
    proposal : ScaleFreeProposal
    move : MultilevelDelayedAcceptance
    current : LevelPoint or None
        The current state with every level's log density.
    error_model : ErrorModel or None
        The adaptive error model's differences and corrections (``adaptive_error_model=True``).
    fine_decisions : deque of bool
        Whether the finest level accepted each of its last decisions on a moved subchain's end in
        tuning (for the end-of-tuning check).
    middle_decisions : dict of int to deque
        Per level between the coarsest and the finest, ``(accepted, decisions)`` of its recent tuning
        iterations, counting decisions on moved subchain ends only (for the end-of-tuning check).
    tune_iterations : int
        Tuning iterations so far (the short-tuning check with the error model or a GP level).
    judged_since_move : int
        The finest level's decisions since the chain last moved (for the stuck warning's text).
    coarse_counted : list of int or None
        Each coarse level's evaluations as counted in the statistics so far (evaluations made between
        steps, when tuning ends, go into the next step's).
    gp_levels : dict of int to SurrogateLevel
        The chain's GP levels by level index (``GPLevel`` in ``coarse_models``).
    whitening_changed : bool
        Whether an adaptation window ended with a new whitening in the current step (the GP levels then
        move to it).
    coarse_spread : CoarseSpreadCheck or None
        The coarsest level's run at the end of tuning, until the draws have been compared with it.
    """

    adaptation: ScaleFreeAdaptation
    proposal: ScaleFreeProposal
    move: MultilevelDelayedAcceptance
    current: LevelPoint | None = None
    error_model: ErrorModel | None = None
    fine_decisions: deque = field(default_factory=lambda: deque(maxlen=FINE_DECISIONS_KEPT))
    gp_levels: dict = field(default_factory=dict)
    whitening_changed: bool = False
    middle_decisions: dict = field(default_factory=dict)
    failure_checks: int = 0  # fine evaluations where a coarse density failed (MLDA._check_coarse_failure)
    judged_since_move: int = 0
    tune_iterations: int = 0
    coarse_counted: list | None = None
    coarse_spread: CoarseSpreadCheck | None = None
