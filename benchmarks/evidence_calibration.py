"""When can the SMC evidence's error bar be trusted? Coverage of log Z +- 2 SE against the number of
distinct initial draws the final particles descend from (issue 14).

KASS and ASMC (their defaults, one chain per run) on targets with an exact log Z:

- the 8-d banana bridge B(0.1, 100) from N(0, 50² I) (``kass_smc.banana_bridge_model``, log Z = 0);
- conjugate linear regressions in 20 and 5 dimensions (``kass_smc.regression20_model``);

each at several particle counts, so that the final genealogies range from a few lineages to many;
and, with ``--targets conflict5``, a prior-data conflict: a 5-d conjugate regression whose coefficients lie
about 4 prior sds from the prior mean (``conflict_model``), where the tempering has far to travel.
Prints, per band of ``distinct_ancestors`` at the last stage, the coverage of +-2 SE and the mean
error; then, per target, particle count and kernel, the mean error, the coverage and the
share of runs that ``log_evidence`` warns about (fewer than ``MIN_DISTINCT_ANCESTORS``).

    python benchmarks/evidence_calibration.py --reps 40             # the small particle counts
    python benchmarks/evidence_calibration.py --reps 16 --large     # 300-1000 particles
    python benchmarks/evidence_calibration.py --quick               # smoke test
    python benchmarks/evidence_calibration.py --targets conflict5 --kernels KASS --reps 200
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np
import pymc as pm
from scipy.stats import multivariate_normal

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kass_smc import banana_bridge_model, regression20_model, run_smc  # noqa: E402

from pymc_kameleon import ASMC, KASS  # noqa: E402
from pymc_kameleon.problems import banana  # noqa: E402
from pymc_kameleon.smc import stage_stats  # noqa: E402
from pymc_kameleon.smc.results import MIN_DISTINCT_ANCESTORS  # noqa: E402

KERNELS = {"KASS": KASS, "ASMC": ASMC}
# (target, particle counts) for the default and the --large runs; seeds differ between them.
SMALL = {"banana": (200, 500), "reg20": (200, 400), "reg5": (50, 100), "conflict5": (1000,)}
LARGE = {"banana": (1000,), "reg20": (800,), "reg5": (300,), "conflict5": (1000,)}
DEFAULT_TARGETS = ("banana", "reg20", "reg5")
BANDS = [(0, 10), (10, 20), (20, 30), (30, 50), (50, 80), (80, None)]


def conflict_model(seed: int, dim: int = 5, n: int = 50, shift: float = 4.0):
    """y = X b + e, b ~ N(0, I), e ~ N(0, I), with the data's coefficients near ``shift`` (shift + N(0,
    0.3²) each): the posterior lies about ``shift`` prior sds out. Returns (model, exact log Z)."""
    rng = np.random.default_rng(500 + seed)
    X = rng.normal(size=(n, dim))
    y = X @ (shift + 0.3 * rng.normal(size=dim)) + rng.normal(size=n)
    exact = float(multivariate_normal(np.zeros(n), X @ X.T + np.eye(n)).logpdf(y))
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=dim)
        pm.Normal("y", pm.math.dot(X, b), 1.0, observed=y)
    return model, exact


def one_rep(rep: int, sizes: dict, seed: int, targets=DEFAULT_TARGETS, kernels=tuple(KERNELS)) -> list[dict]:
    """Every target, particle count and kernel once: log Z error, SE, final distinct ancestors."""
    builders = {
        "banana": lambda: (banana_bridge_model(banana(dim=8, b=0.1, v=100.0)), 0.0),
        "reg20": lambda: regression20_model(seed + 700 + rep, dim=20),
        "reg5": lambda: regression20_model(seed + 900 + rep, dim=5),
        "conflict5": lambda: conflict_model(seed + rep),
    }
    variables = {"banana": "x", "reg20": "b", "reg5": "b", "conflict5": "b"}
    rows = []
    for name in targets:
        model, exact = builders[name]()
        var = variables[name]
        for n in sizes[name]:
            for kernel_name in kernels:
                kernel = KERNELS[kernel_name]
                r = run_smc(model, kernel, n, seed + 5000 + rep, var)
                ancestors = int(stage_stats(r["idata"], "distinct_ancestors")[0][-1])
                rows.append(dict(target=name, N=n, kernel=kernel_name, err=r["log_z"] - exact, se=r["se"],
                                 ancestors=ancestors))
    return rows


def coverage(rows) -> float:
    err, se = np.array([r["err"] for r in rows]), np.array([r["se"] for r in rows])
    return float(np.mean(np.abs(err) <= 2 * se))


def band_table(rows) -> str:
    lines = [
        "| distinct ancestors at the end | runs (KASS / ASMC) | ±2 SE coverage: KASS | ASMC | both "
        "| mean log Z error: KASS | ASMC | rms error / rms SE |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for lo, hi in BANDS:
        band = [r for r in rows if r["ancestors"] >= lo and (hi is None or r["ancestors"] < hi)]
        if not band:
            continue
        cells = []
        for kernel in KERNELS:
            mine = [r for r in band if r["kernel"] == kernel]
            mean = f"{np.mean([r['err'] for r in mine]):+.2f}" if mine else "–"
            cells.append((len(mine), f"{coverage(mine):.2f}" if mine else "–", mean))
        err, se = np.array([r["err"] for r in band]), np.array([r["se"] for r in band])
        ratio = np.sqrt(np.mean(err**2)) / np.sqrt(np.mean(se**2))
        label = f"{lo}–{hi - 1}" if hi is not None else f"≥ {lo}"
        lines.append(
            f"| {label} | {cells[0][0]} / {cells[1][0]} | {cells[0][1]} | {cells[1][1]} "
            f"| {coverage(band):.2f} "
            f"| {cells[0][2]} | {cells[1][2]} | {ratio:.1f} |"
        )
    below = [r for r in rows if r["ancestors"] < MIN_DISTINCT_ANCESTORS]
    if below:
        lines.append(f"\nBelow {MIN_DISTINCT_ANCESTORS} lineages (warned): {len(below)} runs, "
                     f"coverage {coverage(below):.2f}")
    return "\n".join(lines)


def case_table(rows) -> str:
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["target"], r["N"], r["kernel"])].append(r)
    lines = [
        "| target | N | kernel | runs | mean log Z error ± SE | ±2 SE coverage "
        "| distinct ancestors: median [min, max] | warned |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (target, n, kernel), group in sorted(groups.items()):
        err = np.array([r["err"] for r in group])
        anc = np.array([r["ancestors"] for r in group])
        se_mean = err.std(ddof=1) / np.sqrt(err.size) if err.size > 1 else float("nan")
        lines.append(
            f"| {target} | {n} | {kernel} | {err.size} | {err.mean():+.3f} ± {se_mean:.3f} "
            f"| {coverage(group):.2f} | {np.median(anc):.0f} [{anc.min()}, {anc.max()}] "
            f"| {np.mean(anc < MIN_DISTINCT_ANCESTORS):.0%} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--large", action="store_true", help="300-1000 particles instead of 50-500")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="one repetition with tiny particle counts")
    parser.add_argument("--save", type=Path, help="write the per-run rows to this JSON file")
    parser.add_argument("--targets", nargs="+", choices=sorted(SMALL), default=list(DEFAULT_TARGETS))
    parser.add_argument("--kernels", nargs="+", choices=sorted(KERNELS), default=list(KERNELS))
    args = parser.parse_args(argv)
    quick_sizes = {"banana": (60,), "reg20": (60,), "reg5": (30,), "conflict5": (100,)}
    sizes = quick_sizes if args.quick else (LARGE if args.large else SMALL)
    seed = args.seed + (1000 if args.large else 0)
    reps = 1 if args.quick else args.reps
    rows = []
    for rep in range(reps):
        rows += one_rep(rep, sizes, seed, args.targets, args.kernels)
        print(f"# repetition {rep + 1} of {reps} done", file=sys.stderr, flush=True)
    if args.save:
        args.save.write_text(json.dumps(rows))
    print(f"## Coverage of log Z ± 2 SE against the final particles' distinct ancestors "
          f"({reps} repetitions)\n")
    print(band_table(rows))
    print()
    print(case_table(rows))
    return rows


if __name__ == "__main__":
    main()
