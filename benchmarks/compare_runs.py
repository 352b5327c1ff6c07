"""Two runs of ``real_posteriors.py --json`` side by side, for one sampler: before and after a change.

Per posterior: the range over seeds of the min bulk ESS, the worst R-hat, the median mean error (in
reference sds) and the median ESS per evaluation (tuning included) of each run, and the ratio of the
medians; then the geometric mean, smallest and largest ratio. Both runs must have the same seeds and
budget (the script does not check; their headers say).

    python benchmarks/compare_runs.py BEFORE.json AFTER.json [--sampler GPDelayedAcceptanceMH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _posterior_tables import completed_runs  # noqa: E402


def compare(before: dict, after: dict, sampler: str) -> list[str]:
    """The markdown lines of the comparison (see the module docstring)."""
    lines = [
        "| posterior | min ESS before | after | max R-hat before | after | mean err (sd) before | after "
        "| ESS/eval before | after | ratio of medians |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for name, runs in before.items():
        if name not in after:
            continue
        old, new = (completed_runs(rs[sampler]) for rs in (runs, after[name]))
        if not old or not new:
            lines.append(f"| {name} | skipped | | | | | | | | |")
            continue
        old_eff, new_eff = (float(np.median([r["ess_per_eval"] for r in rs])) for rs in (old, new))
        ratio = new_eff / old_eff if old_eff > 0 else math.nan
        ratios.append(ratio)
        ess = ["–".join(f"{v:.0f}" for v in (min(x), max(x))) for x in
               ([r["min_ess"] for r in rs] for rs in (old, new))]
        rhat = [max(r["max_rhat"] for r in rs) for rs in (old, new)]
        err = [float(np.median([r["mean_err"] for r in rs])) for rs in (old, new)]
        lines.append(f"| {name} | {ess[0]} | {ess[1]} | {rhat[0]:.3f} | {rhat[1]:.3f} | {err[0]:.2f} | "
                     f"{err[1]:.2f} | {old_eff:.3g} | {new_eff:.3g} | {ratio:.2f} |")
    finite = [r for r in ratios if r > 0 and math.isfinite(r)]
    if finite:
        lines.append(f"\nratio of medians: geometric mean {math.exp(np.mean(np.log(finite))):.2f}, "
                     f"smallest {min(finite):.2f}, largest {max(finite):.2f} over {len(finite)} posteriors")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--sampler", default="GPDelayedAcceptanceMH")
    args = parser.parse_args(argv)
    lines = compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()), args.sampler)
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
