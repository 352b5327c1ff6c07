"""The last stage's log-likelihood rise of KASS on targets whose evidence error bars cover (decision 0068).

One chain per run on the evidence-calibration targets (``evidence_calibration.py``'s builders: the 20-d and
5-d conjugate regressions, the 5-d prior-data conflict, the 8-d banana), with KASS's defaults: the log Z
error, its standard error and the last stage's ``loglik_rise`` in its standard errors, which
``log_evidence`` warns about beyond 3 (``smc.results.FINAL_RISE_Z``).

    OPENBLAS_NUM_THREADS=1 python benchmarks/kass_final_rise_null.py reg20 1000 12 0
    ... conflict5 1000 12 0; ... banana 2000 8 101; ... reg5 500 12 0   (TARGET N REPS SEED)
"""

from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402


def main(argv=None) -> list[dict]:
    import evidence_calibration as ec

    from pymc_kameleon.problems.banana import banana
    from pymc_kameleon.smc import stage_stats

    target, n, reps, seed = (argv or sys.argv[1:])[:4]
    n, reps, seed = int(n), int(reps), int(seed)
    builders = {
        "banana": lambda rep: (ec.banana_bridge_model(banana(dim=8, b=0.1, v=100.0)), 0.0),
        "reg20": lambda rep: ec.regression20_model(seed + 700 + rep, dim=20),
        "reg5": lambda rep: ec.regression20_model(seed + 900 + rep, dim=5),
        "conflict5": lambda rep: ec.conflict_model(seed + rep),
    }
    var = {"banana": "x", "reg20": "b", "reg5": "b", "conflict5": "b"}[target]
    rows = []
    for rep in range(reps):
        model, exact = builders[target](rep)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = ec.run_smc(model, ec.KERNELS["KASS"], n, seed + 5000 + rep, var)
        rise = np.asarray(stage_stats(r["idata"], "loglik_rise")[0], dtype=float)
        rise_se = np.asarray(stage_stats(r["idata"], "loglik_rise_se")[0], dtype=float)
        rows.append(dict(err=r["log_z"] - exact, se=r["se"], last_z=float(rise[-1] / rise_se[-1])))
        print(f"| {target} | {n} | {rep} | {rows[-1]['err']:+.3f} | {rows[-1]['se']:.3f} | "
              f"{rows[-1]['last_z']:+.2f} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
