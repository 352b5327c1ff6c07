"""What our steps tell the user: end-of-tuning warnings and progress-bar columns."""

from __future__ import annotations

import math
import warnings

from rich.progress import TextColumn
from rich.table import Column

__all__ = ["progressbar_config", "progressbar_update_functions", "tuning_problems", "warn_after_tuning"]

# Acceptance rates outside [target / 2, (1 + target) / 2] at the end of tuning are reported.
_LOW_ACCEPT_FACTOR = 0.5
# More than this fraction of the last tuning states beyond 3 bandwidths of every point of Z is reported.
_UNCOVERED_LIMIT = 0.1
# A drift (TuningReport.drift) above this many learned sds means tuning ended while the chain was
# still walking toward the posterior (measured: 9-10 from a start 50 sd away in 20-d, 0.5-1.7 settled).
_DRIFT_LIMIT = 3.0


def tuning_problems(report, target_accept: float, required_steps: int, dim: int) -> list[str]:
    """Sentences describing what went wrong in tuning (empty if nothing did).

    ``report`` is a :class:`pymc_kameleon.core.scale_free.TuningReport`.
    """
    problems = []
    if report.tune_steps < required_steps:
        problems.append(
            f"tuning took {report.tune_steps} steps, fewer than the {required_steps} this step needs in "
            f"{dim} dimensions (a coordinate scan, then adaptation windows); pass tune >= {required_steps}"
        )
    if report.phase == "scan" or (report.phase != "kameleon" and report.wants_kameleon):
        problems.append(
            f"tuning ended in the {report.phase.replace('_', ' ')} phase, before the first Kameleon proposal "
            "was built; the chain continues with that proposal. Increase `tune`"
        )
    rate = report.accept_rate
    if math.isfinite(rate) and not (
        _LOW_ACCEPT_FACTOR * target_accept <= rate <= 0.5 * (1.0 + target_accept)
    ):
        problems.append(
            f"the acceptance rate over the last tuning window was {rate:.3f}, far from "
            f"target_accept={target_accept:.3g}; increase `tune` so that the adaptation can settle"
        )
    if math.isfinite(report.uncovered) and report.uncovered > _UNCOVERED_LIMIT:
        problems.append(
            f"{100 * report.uncovered:.0f}% of the last tuning states lie more than 3 bandwidths from every "
            "point of the subsample Z, where the proposal falls back to Adaptive Metropolis; increase "
            "`tune` (Z is drawn from the last adaptation window) or `n_subsample`"
        )
    if math.isfinite(report.drift) and report.drift > _DRIFT_LIMIT:
        problems.append(
            f"the chain was still moving at the end of tuning: the mean of its last tuning states shifted "
            f"by {report.drift:.1f} learned posterior sds (root mean square over coordinates) between their "
            "two halves, so the proposal was learned on the way to the posterior and the draws may not "
            "be from it yet; increase `tune` or start closer to the posterior"
        )
    return problems


def warn_after_tuning(step_name: str, proposal, target_accept: float) -> None:
    """One UserWarning at the end of a chain's tuning, listing every problem found (none: silent)."""
    problems = tuning_problems(proposal.report(), target_accept, proposal.required_tune_steps(), proposal.dim)
    if problems:
        warnings.warn(f"{step_name}: " + "; ".join(problems) + ".", UserWarning, stacklevel=3)


def progressbar_config(n_chains=1):
    """Progress-bar columns: the proposal scale and the acceptance rate, as pm.Metropolis shows them."""
    columns = [
        TextColumn("{task.fields[scaling]:0.2f}", table_column=Column("Scaling", ratio=1)),
        TextColumn("{task.fields[accept_rate]:0.2f}", table_column=Column("Accept Rate", ratio=1)),
    ]
    return columns, {"scaling": [0.0] * n_chains, "accept_rate": [0.0] * n_chains}


def progressbar_update_functions():
    """Map a step's stats to the progress-bar fields of :func:`progressbar_config`."""

    def update_stats(step_stats):
        return {"accept_rate": step_stats["accept"], "scaling": step_stats["scaling"]}

    return (update_stats,)
