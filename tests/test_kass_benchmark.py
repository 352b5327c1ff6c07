"""The KASS benchmark script runs in quick mode, and its evaluation counts for PyMC's kernels are honest."""

import importlib.util
from pathlib import Path

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon.smc import stage_stats

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load():
    spec = importlib.util.spec_from_file_location("kass_smc", BENCHMARKS / "kass_smc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _load()


def _gaussian_model():
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 3.0, shape=2)
        pm.Potential("likelihood", pm.logp(pm.Normal.dist(1.0, 0.5), x).sum())
    return model


def test_counted_kernels_count_every_likelihood_call(bench):
    """The counters see exactly PyMC's calls: a fixed-sweep MH makes draws x sweeps per stage."""
    model = _gaussian_model()
    draws, sweeps = 100, 3
    for kernel in (bench.FixedSweepsMH, bench.FixedSweepsIMH):
        r = bench.run_smc(model, kernel, draws, 1, "x", n_sweeps=sweeps)
        assert r["evals"] == draws + draws * sweeps * r["stages"]
        assert np.all(stage_stats(r["idata"], "likelihood_evals")[0] == draws * sweeps)
    # The unmodified MH kernel: a multiple of draws, at least one sweep per stage.
    r = bench.run_smc(model, bench.CountedMH, draws, 1, "x")
    per_stage = stage_stats(r["idata"], "likelihood_evals")[0]
    assert np.all(per_stage % draws == 0) and np.all(per_stage >= draws)


@pytest.mark.slow
def test_kass_benchmark_quick_mode(bench, capsys):
    experiments = ["banana", "sensor", "glass", "regression20"]
    variants = ["--am-weights", "0", "--independence-weights", "0"]
    out = bench.main(["--quick", "--experiments", *experiments, *variants])
    text = capsys.readouterr().out
    rows = (
        "| KASS |", "| ASMC |", "| PyMC MH |", "| PyMC IMH |", "| KAMH (1 chain) |",
        "| KASS, am_weight=0 (variant) |", "| KASS, independence_weight=0 (variant) |",
    )
    for row in rows:
        assert row in text
    assert "Goal, quantile error" in text and "Goal, abs(log Z)" in text
    banana = out["banana"]["means"]
    for name in ("KASS", "ASMC", "PyMC MH", "PyMC IMH"):
        assert (
            0 <= banana[name]["qerr"] <= 1
            and np.isfinite(banana[name]["log_z"])
            and banana[name]["evals"] > 0
        )
    sensor = out["sensor"]
    assert sensor["significant"] and 0 < sensor["reference"]["ess"]
    # Equal budgets, capped in quick mode.
    kass_evals = sensor["results"]["KASS"][0]["evals"]
    assert sensor["results"]["KAMH (1 chain)"][0]["evals"] == min(kass_evals, bench.QUICK_KAMH_STEPS)
    glass = out["glass"]["runs"]
    assert all(np.isfinite(r["log_z"]) for rs in glass.values() for r in rs)
    regression = out["regression20"]["runs"]
    budget = f"PyMC IMH, {bench.kass_budget_sweeps(regression['KASS'], 200)} sweeps/stage (KASS budget)"
    assert set(regression) == {"KASS", "ASMC", "PyMC IMH", "KASS, independence_weight=0 (variant)", budget}
    assert all(np.isfinite(r["log_z"]) and r["evals"] > 0 for rs in regression.values() for r in rs)
