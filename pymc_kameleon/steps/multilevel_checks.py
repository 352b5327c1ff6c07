"""What :class:`~pymc_kameleon.MLDA` checks and says: the coarse densities at the start and after tuning,
each level's acceptance at the end of tuning, and what a stuck chain should try."""

from __future__ import annotations

import math

from pymc_kameleon.core.adaptation.gaussian_fit import bulk_log_density_range
from pymc_kameleon.core.multilevel import LevelPoint
from pymc_kameleon.steps.reporting import STUCK_DRAWS
from pymc_kameleon.steps.target_density import describe_point

__all__ = ["FAILURE_CHECKS", "FINE_DECISIONS_KEPT", "LOW_FINE_ACCEPTANCE", "MultilevelChecks"]

#: Below this share of accepted subchain ends among the finest level's last FINE_DECISIONS_KEPT decisions
#: in tuning, MLDA warns (benchmarks/mlda_bias.py: at 0.16, a coarse posterior 2 sds off, MLDA made a
#: fourteenth of KameleonMetropolis's ESS per fine evaluation; at 0.47, 1 sd off, half).
LOW_FINE_ACCEPTANCE = 0.2
# Fine evaluations a chain spends after tuning where a coarse density was NaN or -inf, to tell a coarse model
# that fails where the fine posterior has mass (a wrong answer, silently) from one that fails only in the
# tails or where the fine density is zero too.
FAILURE_CHECKS = 10
FINE_DECISIONS_KEPT = 100


class MultilevelChecks:
    """The checks and warnings of :class:`~pymc_kameleon.MLDA` (a mixin: it reads the step's levels, chain
    state and options)."""

    def _error_model_remedy(self) -> str:
        """The error model as a remedy, where it is off (the warnings' first suggestion)."""
        if self.adaptive_error_model:
            return ""
        return "adaptive_error_model=True (for observed pm.Normal likelihoods), "

    def _smaller_rate_remedy(self, k: int) -> str:
        """A smaller ``subsampling_rates[k]`` as a remedy, where it is above 1."""
        return f", or a smaller subsampling_rates[{k}]" if self.subsampling_rates[k] > 1 else ""

    def _untuned_message(self) -> str:
        error_model = (
            " The adaptive error model learns during tuning only, so it corrects nothing."
            if self.adaptive_error_model else ""
        )
        return (
            "MLDA: sampling without tuning (tune=0). The coarsest level's proposal keeps its untuned "
            f"unit-scale random walk, whatever the posterior's scale.{error_model} Pass tune >= "
            f"{self.default_tune_steps} to pm.sample (the draws stay exact, but mix slowly)."
        )

    def _warn_low_fine_acceptance(self) -> None:
        """At the end of tuning: warn if the finest level accepted under LOW_FINE_ACCEPTANCE of the last
        coarse subchains' ends it judged (the coarse posterior is too far from the fine one)."""
        decisions = self._chain.fine_decisions
        if len(decisions) < FINE_DECISIONS_KEPT:
            return
        rate = sum(decisions) / len(decisions)
        if rate >= LOW_FINE_ACCEPTANCE:
            return
        remedy = (
            f"{self._error_model_remedy()}a coarse model closer to the fine one"
            f"{self._smaller_rate_remedy(self.n_levels - 2)}"
        )
        self._warnings.warn(
            f"MLDA: at the end of tuning the finest level accepted {rate:.0%} of the last {len(decisions)} "
            "coarse subchain ends it judged: the coarse posterior is far from the fine one (in posterior "
            f"sds), so the chain will mix slowly (its draws stay exact). Try {remedy}.",
            UserWarning,
            stacklevel=3,
        )

    def _warn_low_middle_acceptance(self) -> None:
        """At the end of tuning: warn if a level between the coarsest and the finest (a GP level, a middle
        model) accepted under LOW_FINE_ACCEPTANCE of its last decisions: the finest level then sees few
        proposals, too few for its own check, and the chain mixes slowly."""
        for k, kept in self._chain.middle_decisions.items():
            decisions = sum(steps for _, steps in kept)
            if decisions < FINE_DECISIONS_KEPT:
                continue
            rate = sum(accepted for accepted, _ in kept) / decisions
            if rate >= LOW_FINE_ACCEPTANCE:
                continue
            gp = k in self._chain.gp_levels
            what = "the GP level" if gp else "the middle level"
            why = (
                ": it filters the coarse subchains' ends, but they still walk towards the coarse model's "
                "posterior, far from the fine one"
                if gp else ": the coarse posterior below it is far from its own"
            )
            dropped = (
                # The error model's correction is a constant shift (decision 0056: learned between adjacent
                # levels, which cured a new user's [RK4 with 4 steps, with 16], stalled before at 0-8%).
                f", or without coarse_models[{k - 1}] (the error model corrects a coarse model by a constant "
                "shift: a coarsest model that is wrong by more than a shift keeps the level above it "
                "rejecting)"
                if self.adaptive_error_model and not gp and k == 1 else ""
            )
            self._warnings.warn(
                f"MLDA: at the end of tuning {what} (level {k}) accepted {rate:.1%} of the last {decisions} "
                f"subchain ends it judged{why}, so the chain will mix slowly (its draws stay exact). Try "
                f"{self._error_model_remedy()}a coarse model closer to the fine one"
                f"{self._smaller_rate_remedy(k - 1)}{dropped}.",
                UserWarning,
                stacklevel=3,
            )

    def _stuck_remedy(self) -> str:
        """MLDA's likeliest cause of a stuck chain is a coarse posterior far from the fine one, or (when few
        of the stuck iterations reached the fine level) a coarse or middle level that does not move."""
        error_model = self._error_model_remedy()
        rates = "" if max(self.subsampling_rates) == 1 else ", or smaller subsampling_rates"
        judged = self._chain.judged_since_move
        if judged < STUCK_DRAWS // 2:
            # A new user's three levels without the error model: 36 fine evaluations in a whole run, the
            # middle level rejecting; "the finest level's acceptance" pointed at the wrong level.
            stopped = "the coarse subchains did not move" if self.n_levels == 2 else (
                "the coarse subchains did not move, or a middle level rejected their ends (its "
                "level{k}_accept_rate statistic)"
            )
            return (
                f"Only {judged} of these iterations reached the fine level: {stopped}, so a coarse posterior "
                f"is far from the one above it. Try {error_model}coarse models closer to the fine one"
                f"{rates}; otherwise increase `tune`."
            )
        return (
            f"With MLDA the likeliest cause is a coarse posterior far from the fine one ({judged} of these "
            f"proposals reached the fine level and it rejected them): try {error_model}a coarse model "
            f"closer to the fine one{rates}; otherwise increase `tune`."
        )

    def _check_coarse_start(self, point: LevelPoint, point_map_info, zero_too: bool = False) -> None:
        """A coarse density NaN at the chain's start (with ``zero_too``, -inf as well: where the chain
        starts after the start search) leaves it frozen there: say so, as for the fine one."""
        for k, level in enumerate(self._model_levels):
            position = self._coarse_levels.index(level)
            value = point.at(position)
            if math.isnan(value) or (zero_too and value == -math.inf):
                raise ValueError(
                    f"MLDA: coarse_models[{k}]'s log density at the current point is {value} "
                    f"({describe_point(point.x, point_map_info)}), where the fine model's is "
                    f"{point.at(self.n_levels - 1):.6g}. The chain cannot move from a point where a coarse "
                    "density is NaN or zero (-inf): pass `initvals` to pm.sample where every model is "
                    "finite, and make the coarse model finite wherever the fine posterior has mass (check it "
                    "with coarse_model.point_logps())."
                )
            level.failed_at = None

    def _check_coarse_failure(self) -> None:
        """After tuning, where a coarse density was NaN or -inf, look at the fine one (up to
        FAILURE_CHECKS times a chain, one fine evaluation each, counted in ``logp_evals``): if it is
        within the posterior bulk's range of the chain's own (:func:`bulk_log_density_range` below it, or
        above), the draws miss part of the posterior, silently, so warn once a chain.

        Not during tuning: a new user's start search and walk-in met coarse failures in the prior's tails
        (fine log densities -507 to -17 600 against the posterior's +102), and with one warning a chain
        those used it up while a coarse model NaN in 27% of the posterior went unreported."""
        chain = self._chain
        for k, level in enumerate(self._model_levels):
            failed, level.failed_at = level.failed_at, None
            if failed is None or self.tune or chain.failure_checks >= FAILURE_CHECKS:
                continue
            x, coarse = failed
            chain.failure_checks += 1
            fine = self._target.evaluate(x).logp
            own = chain.current.at(self.n_levels - 1)
            if not fine >= own - bulk_log_density_range(self.dim):  # NaN, -inf or far in the tails
                continue
            chain.failure_checks = FAILURE_CHECKS  # once a chain
            self._warnings.warn(
                f"MLDA: coarse_models[{k}]'s log density is {coarse} at {self._describe_point(x)}, "
                f"where the fine model's is {fine:.6g}, within the posterior's range of the chain's own "
                f"({own:.6g}). Every proposal there is rejected before the fine model sees it, so the draws "
                "miss that part of the posterior (they are exact only where each coarse density is finite "
                "wherever the fine one is: a coarse model may be as wrong as you like, but not NaN or zero "
                "where the fine posterior has mass). Make the coarse model finite there (a solver that fails "
                "where the fine one does not: loosen its tolerance or catch the failure and return a rough "
                "value).",
                UserWarning,
                stacklevel=3,
            )
