"""The report of ``real_posteriors.py``: its markdown table and issue 12's verdict.

Split from ``real_posteriors.py``, which re-exports every name here: :func:`table_row` makes one row
of medians over seeds (the worst seed in brackets) from :func:`~_references.compare`'s metrics,
:func:`markdown_table` the table under :data:`COLUMNS`, :func:`verdict` the comparison with the
gradient-free peers.
"""

import math

import numpy as np

__all__ = [
    "COLUMNS", "GRADIENT_FREE_PEERS", "LEGEND", "completed_runs", "markdown_table", "table_row", "verdict",
]


# ============================================================================ table
COLUMNS = ["posterior", "sampler", "mean err", "log sd err", "min ESS", "max R-hat", "ESS/eval", "ESS/s",
           "evals/iter", "notes"]
LEGEND = (
    "Cells: median over seeds (worst seed). mean err: max over scalar parameters of "
    "|mean - ref mean| / ref sd; log sd err: max |log(sd / ref sd)|; min ESS: bulk, chains pooled "
    "(0 if a chain never moved); max R-hat: NaN if a chain never moved; ESS/eval and evals/iter count "
    "log-density evaluations over tuning and draws: Metropolis 2 per scalar element per iteration "
    "(elementwise updates), DEMetropolisZ 2 per iteration, KameleonMetropolis its logp_evals stat, "
    "GPDelayedAcceptanceMH and GPDelayedAcceptanceMALA their exact likelihood evaluations "
    "(cumulative_logp_evals; prior evaluations not counted), NUTS its n_steps (gradient evaluations). "
    "ESS/s: "
    "per second of sampling wall time (tuning + draws, chains in parallel; machine shared). notes: "
    "'the step warned' counts the seeds at which one of our steps raised its own warning (PyMC's "
    "convergence checks are off)."
)
# metric -> (worst is the max, format)
_METRICS = {
    "mean err": ("mean_err", True, "{:.2f}"),
    "log sd err": ("log_sd_err", True, "{:.2f}"),
    "min ESS": ("min_ess", False, "{:.0f}"),
    "max R-hat": ("max_rhat", True, "{:.3f}"),
    "ESS/eval": ("ess_per_eval", False, "{:.2e}"),
    "ESS/s": ("ess_per_s", False, "{:.1f}"),
}


def completed_runs(results: list[dict]) -> list[dict]:
    """The seeds' results that ran (neither skipped nor failed)."""
    return [r for r in results if "skipped" not in r and "error" not in r]


def _median_worst(values, worst_is_max, fmt) -> str:
    values = np.asarray(values, dtype=float)
    if np.isnan(values).any():  # a NaN R-hat: some chain never moved, the worst case
        worst = math.nan
        median = float(np.median(values)) if np.isnan(values).all() else float(np.nanmedian(values))
    else:
        median = float(np.median(values))
        worst = float(values.max() if worst_is_max else values.min())
    if len(values) == 1:
        return fmt.format(median)
    return f"{fmt.format(median)} ({fmt.format(worst)})"


def table_row(name: str, sampler_name: str, results: list[dict]) -> list[str]:
    """One markdown row: medians over seeds with the worst seed in brackets."""
    done = completed_runs(results)
    notes = []
    if not done:
        reason = results[0].get("skipped") or f"failed: {results[0]['error']}"
        return [name, sampler_name] + ["-"] * (len(COLUMNS) - 3) + [reason.replace("|", "/")]
    cells = [_median_worst([r[key] for r in done], worst_is_max, fmt)
             for key, worst_is_max, fmt in _METRICS.values()]
    cells.append(f"{np.median([r['evals_per_iter'] for r in done]):.2f}")
    if len(done) < len(results):
        notes.append(f"{len(results) - len(done)} seed(s) failed")
    warned = sum(bool(r.get("warned")) for r in done)
    if warned:
        notes.append(f"the step warned at {warned}/{len(done)} seeds")
    if any(r.get("divergences", 0) > 0 for r in done):
        notes.append(f"divergences {'/'.join(str(r['divergences']) for r in done)}")
    worst = max(done, key=lambda r: r["mean_err"])
    if worst["mean_err"] >= 0.1:
        notes.append(f"worst mean: {worst['worst_mean']}")
    return [name, sampler_name, *cells, "; ".join(notes)]


GRADIENT_FREE_PEERS = ("Metropolis", "DEMetropolisZ")


def _median(results: list[dict], key: str) -> float:
    done = [r[key] for r in completed_runs(results)]
    return float(np.median(done)) if done else math.nan


def verdict(results: dict, ours: str = "KameleonMetropolis") -> list[str]:
    """Issue 12's done-when, per posterior, from the medians over seeds.

    *Right* means largest standardised mean error below 0.1 and max R-hat below 1.01. ``ours`` must
    be right wherever a gradient-free PyMC peer (:data:`GRADIENT_FREE_PEERS`) is, and have at least
    the best peer's ESS per evaluation on 70% of the posteriors.
    """
    lines, wins, total, wrong = [], 0, 0, []
    for name, by_sampler in results.items():
        if ours not in by_sampler:
            continue
        peers = {p: by_sampler[p] for p in GRADIENT_FREE_PEERS if p in by_sampler}
        if not peers:
            continue

        def right(rs):
            return _median(rs, "mean_err") < 0.1 and _median(rs, "max_rhat") < 1.01

        best_peer, best = max(((p, _median(rs, "ess_per_eval")) for p, rs in peers.items()),
                              key=lambda t: -math.inf if math.isnan(t[1]) else t[1])
        mine = _median(by_sampler[ours], "ess_per_eval")
        total += 1
        won = mine >= best or math.isnan(best)
        wins += won
        right_peers = [p for p, rs in peers.items() if right(rs)]
        if right_peers and not right(by_sampler[ours]):
            wrong.append(name)
        lines.append(
            f"- {name}: ESS/eval {mine:.2e} vs best peer {best_peer} {best:.2e} "
            f"({mine / best if best > 0 else math.inf:.2f}x)"
            f"{'' if won else ' LOSES'}; right: {'yes' if right(by_sampler[ours]) else 'no'}"
            f" (peers right: {', '.join(right_peers) or 'none'})"
        )
    if total == 0:  # no posterior ran ours beside a peer: nothing to judge
        return lines
    lines.append(
        f"{ours}: ESS/eval >= best gradient-free peer on {wins}/{total} posteriors "
        f"({wins / total:.0%}; goal 70%); wrong where a peer is right: {', '.join(wrong) or 'none'}"
    )
    return lines


def markdown_table(rows: list[list[str]]) -> str:
    """A markdown table with :data:`COLUMNS` as header."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
