"""The benchmark scripts run (tiny budget), so they never rot."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_kameleon_benchmark_quick_mode(capsys):
    bench = _load("kameleon_nonlinear_targets")
    rows = bench.main(["--quick", "--targets", "banana-strong", "--samplers", "KameleonMetropolis", "DEMetropolisZ"])
    out = capsys.readouterr().out
    assert "| KameleonMetropolis |" in out and "per-step overhead vs DEMetropolisZ" in out
    k = rows["banana-strong"]["KameleonMetropolis"]
    assert 0 <= k["qerr"] <= 0.5 and k["ess"] > 0 and k["overhead"] > 0


@pytest.mark.slow
def test_glass_pseudo_marginal_benchmark_quick_mode(capsys):
    bench = _load("pseudo_marginal_gp_glass")
    rows = bench.main(["--quick", "--n-importance", "20"])
    out = capsys.readouterr().out
    assert "| KAMH |" in out and "| AM |" in out and "proposal / estimator" in out
    for name in ("KAMH", "AM"):
        r = rows[name]
        assert r["calls"] == 2 * 200  # one estimator call per posterior draw
        assert r["min_ess"] > 0 and r["dist"] >= 0 and np.isfinite(r["mmd"])
        t = r["timing"]
        assert 0 < t["proposal"] < t["total"] and 0 < t["estimator"] < t["total"]


@pytest.mark.slow
def test_gp_delayed_acceptance_table1_quick_mode(capsys):
    bench = _load("gp_delayed_acceptance_table1")
    samplers = ["GP-DA-MH", "GP-DA-MALA", "DEMetropolisZ"]
    rows = bench.main(["--quick", "--targets", "T2", "T4", "--samplers", *samplers])
    out = capsys.readouterr().out
    assert "| GP-DA-MH |" in out and "| paper GP-MH |" in out and "GP-DA-MH vs best peer" in out
    assert "GP-DA-MALA" in rows["T2"] and "GP-DA-MALA" not in rows["T4"]  # T4 has no gradient
    for target in ("T2", "T4"):
        # DEMetropolisZ evaluates logp(proposal) - logp(current): exactly two counted calls per draw.
        assert rows[target]["DEMetropolisZ"]["Eval%"] == 200.0
        gp = rows[target]["GP-DA-MH"]
        assert gp["count_check"] and 0 <= gp["Eval%"] <= 100 and gp["ESS"] >= 0 and gp["time"] > 0
