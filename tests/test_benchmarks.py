"""The benchmark scripts run (tiny budget), so they never rot."""

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from pymc_kameleon.core.adaptation.independence import EXAM_DRAWS
from pymc_kameleon.core.starts import SEARCH_EVALS_PER_DIM
from pymc_kameleon.steps.estimate_noise import NOISE_ESTIMATES
from pymc_kameleon.steps.starts import SEARCH_CANDIDATES

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_kameleon_benchmark_quick_mode(capsys):
    bench = _load("kameleon_nonlinear_targets")
    rows = bench.main(
        ["--quick", "--targets", "banana-strong", "--samplers", "KameleonMetropolis", "DEMetropolisZ"]
    )
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
        # One estimator call per posterior draw, and the end-of-tuning noise check's in the first draw's.
        assert r["calls"] == 2 * (200 + NOISE_ESTIMATES)
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


@pytest.mark.slow
def test_gp_delayed_acceptance_table1_target_accept_option(capsys):
    bench = _load("gp_delayed_acceptance_table1")  # a fresh module: main's change of SAMPLERS stays in it
    rows = bench.main(["--quick", "--targets", "T1", "--samplers", "GP-DA-MH", "--target-accept", "0.15"])
    assert "GP-DA-MH target_accept 0.15" in capsys.readouterr().out
    assert rows["T1"]["GP-DA-MH"]["count_check"]


@pytest.mark.slow
def test_gp_step_cost_runs(capsys):
    bench = _load("gp_step_cost")
    out = bench.main(["--tune", "60", "--steps", "150", "--samplers", "GP-DA-MH", "GP-DA-MALA"])
    text = capsys.readouterr().out
    assert "## GP-DA-MH (max_points 1000, 1 GP row(s) per point)" in text and "bookkeeping µs/step" in text
    assert "## GP-DA-MALA (max_points 166, 6 GP row(s) per point)" in text
    for rows in out.values():
        assert rows.shape == (150, 3) and np.all(rows[:, 1] > 0) and np.all(np.isfinite(rows[:, 1]))


@pytest.mark.slow
def test_step_cost_books_each_steps_evaluations(capsys):
    """The per-step benchmark counts evaluations as the implementations make them: pm.Metropolis two per
    element, DEMetropolisZ two per iteration, KAMH one per draw (its tuning adds the start search)."""
    bench = _load("step_cost")
    out = bench.main(["--dims", "3", "--tune", "40", "--draws", "30", "--chains", "2",
                      "--samplers", "KAMH", "Metropolis", "DEMetropolisZ"])
    text = capsys.readouterr().out
    assert "## d = 3: per chain iteration, likelihood of zero cost" in text and "c = 10 ms" in text
    rows = {row["sampler"]: row for row in out[3]}
    assert rows["Metropolis"]["evals_draws"] == rows["Metropolis"]["evals_tune"] == 6.0
    assert rows["DEMetropolisZ"]["evals_draws"] == 2.0
    assert rows["KAMH"]["evals_draws"] == 1.0 and rows["KAMH"]["evals_tune"] > 1.0
    assert all(row["us_draws"] > 0 for row in rows.values())
    # The last run's (DEMetropolisZ's) iterations: each chain's first draw is booked as tuning's end.
    assert bench.LEDGER.iterations == {"tune": 2 * 40, "end": 2, "draws": 2 * 29}


def test_step_cost_crossover_is_where_the_ess_per_second_cross():
    """Hand-made rows: ours 0.1 ms of overhead and one evaluation per iteration, the peer 0.04 ms and two,
    the same ESS: ours wins from a likelihood of 0.06 ms on (0.1 + c = 0.04 + 2c)."""
    bench = _load("step_cost")
    row = dict(ess=100.0, chains=1, tune=0, draws=1000, us_tune=0.0, evals_tune=0.0, us_end=0.0,
               evals_end=0.0)
    ours = {**row, "us_draws": 100.0, "evals_draws": 1.0}
    peer = {**row, "us_draws": 40.0, "evals_draws": 2.0}
    assert bench.beats_from(ours, peer) == "0.06 ms"
    assert bench.ess_per_second(ours, 0.06) == pytest.approx(bench.ess_per_second(peer, 0.06))
    assert bench.beats_from(peer, ours) == "never"
    assert bench.beats_from({**ours, "ess": 1000.0}, peer) == "always"
    # Tuning's end (the first draw iteration: KAMH's exam) is one iteration's time and evaluations, once.
    exam = {**ours, "us_end": 5000.0, "evals_end": 200.0}
    assert bench.seconds_per_chain(exam, 1.0) == pytest.approx(bench.seconds_per_chain(ours, 1.0) + 0.205)


@pytest.mark.slow
def test_gp_fit_cost_runs(capsys):
    bench = _load("gp_fit_cost")
    out = bench.main(["--repeats", "2", "--chains", "1", "--tune", "200"])
    assert "ms per objective evaluation" in capsys.readouterr().out
    assert len(out["objective"]) == 5 and all(ms > 0 for ms in out["objective"].values())
    per_step, part, fits = out["tuning"][10]
    assert per_step > 0 and 0 < part < 1 and fits >= 1


@pytest.mark.slow
def test_half_chain_consistency_runs(capsys):
    bench = _load("half_chain_consistency")
    out = bench.main(["--samplers", "KameleonMetropolis", "Metropolis", "--seeds", "1", "2", "--tune", "300",
                      "--draws", "200"])
    assert "| KameleonMetropolis |" in capsys.readouterr().out
    for r in out.values():  # 2 chains x 2 halves x 2 parameters; one R-hat per parameter
        assert r["z"].shape == (8,) and np.all(np.isfinite(r["z"])) and r["rhat"].shape == (2,)


@pytest.mark.slow
def test_evidence_calibration_runs(capsys, tmp_path):
    bench = _load("evidence_calibration")
    rows = bench.main(["--quick", "--save", str(tmp_path / "rows.json")])
    out = capsys.readouterr().out
    assert "| distinct ancestors at the end |" in out and "| banana | 60 | KASS | 1 |" in out
    assert len(rows) == 6 and (tmp_path / "rows.json").exists()  # 3 targets x 2 kernels
    assert all(math.isfinite(r["err"]) and 1 <= r["ancestors"] <= r["N"] for r in rows)
    # The prior-data conflict alone, KASS alone; its exact log Z is the data's Gaussian density.
    rows = bench.main(["--quick", "--targets", "conflict5", "--kernels", "KASS"])
    assert len(rows) == 1 and rows[0]["target"] == "conflict5" and abs(rows[0]["err"]) < 1.0


@pytest.mark.slow
def test_real_posteriors_quick_mode(capsys, tmp_path):
    bench = _load("real_posteriors")
    output = tmp_path / "table.md"
    result = bench.main(["--quick", "--output", str(output)])
    out = capsys.readouterr().out
    header = "| " + " | ".join(bench.COLUMNS) + " |"
    assert header in out and header in output.read_text()
    for column in ("mean err", "log sd err", "min ESS", "max R-hat", "ESS/eval", "ESS/s"):
        assert column in bench.COLUMNS
    # one row per posterior and sampler, in order
    expected = [(p, s) for p in bench.QUICK_POSTERIORS for s in bench.SAMPLERS]
    assert [tuple(row[:2]) for row in result["_table"]] == expected
    for posterior, sampler in expected:
        assert f"| {posterior} | {sampler} |" in out
        runs = result[posterior][sampler]
        if posterior == "two-normals" and sampler == "GPDelayedAcceptanceMH":
            assert runs == [{"skipped": "skipped: no likelihood term"}]  # prior-only model
            continue
        (r,) = runs
        assert "error" not in r, r
        assert r["ess_per_eval"] >= 0 and r["ess_per_s"] >= 0 and r["mean_err"] >= 0
    # evaluation counts: two per scalar element (Metropolis) or per iteration (DEMetropolisZ), one for KAMH
    iters = 2 * (200 + 200)
    assert result["two-normals"]["Metropolis"][0]["evals"] == 2 * 2 * iters
    assert result["two-normals"]["DEMetropolisZ"][0]["evals"] == 2 * iters
    # KAMH: one per iteration, plus (pooled tuning, the default) the checks for stranded chains, each
    # evaluating the other chain's state: every 100 tuning steps and at window ends, plus the start
    # search's runs (at most SEARCH_CANDIDATES runs of 50 d evaluations per chain, d = 2, and Powell may
    # finish a line search), plus the end-of-tuning exam (at most EXAM_DRAWS draws of each of two shapes
    # per chain)
    search = 2 * SEARCH_CANDIDATES * (SEARCH_EVALS_PER_DIM * 2 + 40)
    kamh = result["two-normals"]["KameleonMetropolis"][0]["evals"]
    assert iters + 2 * SEARCH_CANDIDATES <= kamh <= 1.02 * iters + 2 + search + 2 * 2 * EXAM_DRAWS
    assert result["two-normals"]["NUTS"][0]["evals"] > iters


@pytest.mark.slow
def test_real_posteriors_records_our_steps_warnings_and_counts_mala_evaluations():
    """A run whose step warns (tuning far too short) says so in the row's notes; the quiet control
    does not. GP-DA MALA's exact evaluations are counted like GP-DA MH's."""
    from pymc_kameleon.problems.scales import normals_5d_scales

    bench = _load("real_posteriors")
    reference = normals_5d_scales()[1]
    short = bench.run_one("normals-5d-scales", "GPDelayedAcceptanceMALA", 1, chains=1, tune=30, draws=20,
                          cores=1, reference=reference)
    assert short["warned"] and short["evals"] >= 1
    assert "the step warned at 1/1 seeds" in bench.table_row("normals-5d-scales", "MALA", [short])[-1]
    quiet = bench.run_one("normals-5d-scales", "Metropolis", 1, chains=1, tune=30, draws=20, cores=1,
                          reference=reference)
    notes = bench.table_row("normals-5d-scales", "Metropolis", [quiet])[-1]
    assert not quiet["warned"] and "warned" not in notes


@pytest.mark.slow
@pytest.mark.parametrize(
    ("posterior", "sampler"),
    [("lotka-volterra-lynx-hare", "KameleonMetropolis"), ("lotka-volterra-lynx-hare", "NUTS"),
     ("gp-poisson-latent", "GPDelayedAcceptanceMH")],
)
def test_real_posteriors_frontier_posteriors_run(posterior, sampler):
    """The frontier posteriors (issue 43) sample against their cached references at a tiny budget;
    NUTS is skipped on the black-box ODE."""
    bench = _load("real_posteriors")
    model, reference, _ = bench.POSTERIORS[posterior]()
    ref, source = bench.ReferenceStore(bench.REFERENCE_FILE).get(posterior, model, reference)
    assert source.startswith("NUTS 4 x")
    r = bench.run_one(posterior, sampler, 1, chains=1, tune=40, draws=40, cores=1, reference=ref)
    if sampler == "NUTS":
        assert r == {"skipped": "skipped: no gradient"}
        return
    assert "error" not in r, r
    assert r["evals"] >= 1 and math.isfinite(r["mean_err"]) and r["min_ess"] >= 0


def test_real_posteriors_verdict_is_left_out_without_ours_and_a_peer():
    """Issue 12's verdict compares KameleonMetropolis with a gradient-free peer; a run without
    both (e.g. GP-DA alone) prints no '0/0 posteriors' line."""
    bench = _load("real_posteriors")
    run = {"mean_err": 0.05, "max_rhat": 1.005, "ess_per_eval": 0.02}
    assert bench.verdict({"p": {"GPDelayedAcceptanceMH": [run]}}) == []
    lines = bench.verdict({"p": {"KameleonMetropolis": [run], "Metropolis": [{**run, "ess_per_eval": 0.01}]}})
    assert lines[-1].startswith("KameleonMetropolis: ESS/eval >= best gradient-free peer on 1/1 posteriors")


@pytest.mark.slow
def test_real_posteriors_metropolis_count_matches_pymc():
    """The Metropolis count (two evaluations per scalar element) matches PyMC's delta_logp calls."""
    import pymc as pm

    bench = _load("real_posteriors")
    with pm.Model() as model:
        pm.Normal("a", 0, 1)
        pm.Normal("b", 0, 1, shape=3)
        step = pm.Metropolis()
        calls = []

        def counting(f):
            def wrapped(*args):
                calls.append(1)
                return f(*args)

            return wrapped

        for method in step.methods:  # one Metropolis per variable; b is updated element by element
            method.delta_logp = counting(method.delta_logp)
        idata = pm.sample(
            tune=20, draws=10, chains=2, cores=1, step=step, progressbar=False, random_seed=1,
            discard_tuned_samples=False, compute_convergence_checks=False,
        )
    # each delta_logp call evaluates logp(proposal) and logp(current)
    assert bench.log_density_evaluations("Metropolis", idata, model) == 2 * len(calls) == 2 * 4 * 2 * 30


@pytest.mark.slow
def test_correlated_pseudo_marginal_quick_mode(capsys):
    bench = _load("correlated_pseudo_marginal")
    rows = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert "| standard | 8 |" in out and "| correlated | 2 | 0.99 |" in out and "goal >= 5x" in out
    correlated = rows[("correlated", 2, 0.99)]
    assert correlated["corr"] > 0.9 and abs(rows[("standard", 8, None)]["corr"]) < 0.3
    for row in rows.values():
        median = row["median"]
        assert median["ESS/1e6 samples"] > 0 and median["min ESS"] > 0 and np.isfinite(median["mean err"])


@pytest.mark.slow
def test_pseudo_marginal_tuning_quick_mode(capsys):
    bench = _load("pseudo_marginal_tuning")
    bench.main(["--quick"])
    out = capsys.readouterr().out
    assert "| 20 | never |" in out and "| 20 | 5 |" in out and "of 8 |" in out


@pytest.mark.slow
def test_pseudo_marginal_tuning_exact_posterior_is_resolved():
    """The quadrature reference of the frozen-chain benchmark: a grid twice as fine gives the same
    posterior means and sds to 1e-3 of an sd, and mu is within a posterior sd of what the counts' mean
    says (E y = exp(mu + sigma^2 / 2))."""
    bench = _load("pseudo_marginal_tuning")
    coarse, fine = bench.exact_posterior(151), bench.exact_posterior(301)
    for name, (mean, sd) in coarse.items():
        assert abs(mean - fine[name][0]) < 1e-3 * sd and abs(sd - fine[name][1]) < 1e-3 * sd
    moment = np.log(bench.COUNTS.mean()) - coarse["sigma"][0] ** 2 / 2
    assert abs(coarse["mu"][0] - moment) < coarse["mu"][1]


def test_correlated_benchmark_exact_posterior_matches_monte_carlo():
    """The quadrature reference of the correlated pseudo-marginal benchmark against a brute-force
    importance-sampling check from the prior (mean of mu within 4 MC standard errors)."""
    bench = _load("correlated_pseudo_marginal")
    y = bench.make_data(50)
    exact = bench.exact_posterior(y)
    rng = np.random.default_rng(0)
    mu = rng.normal(y.mean(), 0.5, 200_000)
    sigma = np.abs(rng.normal(1.0, 0.6, 200_000))
    var = sigma**2 + 1
    log_w = -0.5 * (y.size * np.log(var) + ((y[:, None] - mu) ** 2).sum(0) / var)
    log_w += -0.5 * (mu / bench.PRIOR_MU_SD) ** 2 - 0.5 * (sigma / bench.PRIOR_SIGMA_SD) ** 2
    # minus the proposal's log density up to a constant: normal mu, folded-normal sigma
    log_w += 0.5 * ((mu - y.mean()) / 0.5) ** 2 + 0.5 * ((sigma - 1.0) / 0.6) ** 2
    log_w -= np.log1p(np.exp(-2 * sigma / 0.36))
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    for name, values in (("mu", mu), ("sigma", sigma)):
        mean = float((w * values).sum())
        se = math.sqrt(float((w**2 * (values - mean) ** 2).sum()))
        assert abs(mean - exact[name][0]) < 4 * se + 1e-3, (name, mean, exact[name])


@pytest.mark.slow
def test_scale_out_quick_mode(capsys):
    pytest.importorskip("distributed")
    bench = _load("scale_out")
    rows = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert "| 2 workers | parallel (s) |" in out
    assert len(rows) == 3 and all(r.rstrip().endswith("| yes |") for r in rows)  # identical draws
    assert [r.split("|")[5].strip() for r in rows] == ["Dask", "Dask", "ProcessPoolExecutor"]


@pytest.mark.slow
def test_kass_unstandardised_regression_quick_mode(capsys):
    bench = _load("kass_unstandardised_regression")
    rows, exact = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert "| KASS | 1 |" in out and "| pm MH | 1 |" in out
    assert exact == pytest.approx(-150.096, abs=1e-3)
    assert math.isfinite(rows["KASS"][0]["se"]) and rows["KASS"][0]["evals"] > 200


def test_kass_unstandardised_regression_exact_log_z_matches_importance_sampling():
    """The quadrature log Z against importance sampling over sigma from a log-normal around the
    posterior of sigma, the coefficients integrated out analytically (y's Gaussian marginal)."""
    from scipy.special import logsumexp
    from scipy.stats import halfnorm, multivariate_normal, norm

    bench = _load("kass_unstandardised_regression")
    X, y = bench.make_data()
    log_s = np.random.default_rng(0).normal(-0.1, 0.15, 4000)  # the posterior's log sigma: -0.11 +- 0.07
    s = np.exp(log_s)
    cov0 = (X * bench.PRIOR_SDS**2) @ X.T
    eye = np.eye(y.size)
    log_lik = np.array([multivariate_normal(np.zeros(y.size), v * v * eye + cov0).logpdf(y) for v in s])
    # the proposal's density of s is N(log s; -0.1, 0.15) / s
    log_q = norm(-0.1, 0.15).logpdf(log_s) - log_s
    log_w = log_lik + halfnorm(scale=bench.SIGMA_PRIOR_SD).logpdf(s) - log_q
    estimate = logsumexp(log_w) - math.log(s.size)
    w = np.exp(log_w - log_w.max())
    se = w.std() / w.mean() / math.sqrt(w.size)  # of the log estimate, to first order
    exact = bench.exact_log_z(X, y)
    assert abs(estimate - exact) < 4 * se + 1e-3 and se < 0.02, (estimate, exact, se)


@pytest.mark.slow
def test_speculative_da_quick_mode(capsys):
    """benchmarks/speculative_da.py runs, speculates (3 ms per likelihood) and finds the serial draws.

    The share of evaluations guessed ahead depends on the machine's load (one worker shared by two
    chains: 0.37-0.7 on an idle machine, 0.27 on PyMC 6 and 0.10 on PyMC 5 with both cores busy in CI),
    so it is only asked to show that speculation happened (a serial run's share is 0)."""
    from pymc_kameleon import GPDelayedAcceptanceMH

    stop_tuning = GPDelayedAcceptanceMH.stop_tuning
    _load("speculative_da").main(["--quick"])
    assert GPDelayedAcceptanceMH.stop_tuning is stop_tuning  # its timing hook is undone
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith("| gallery LV + 3 ms | 1 |")]
    assert len(rows) == 1 and rows[0].endswith("| yes |")
    prefetched = float(rows[0].split("|")[8].split()[0])
    assert prefetched > 0.0


@pytest.mark.slow
def test_speculation_pays_quick_mode():
    """benchmarks/speculation_pays.py runs serially, on a process pool and on a Dask LocalCluster, and the
    draws equal the serial ones (whether the step warns depends on the machine's load)."""
    rows = _load("speculation_pays").main(["--quick"])
    assert len(rows) == 3 and all("| True |" in row for row in rows[1:])


@pytest.mark.slow
def test_mlda_benchmarks_quick_mode(capsys):
    """benchmarks/mlda_bias.py, mlda_ode.py and mlda_three_levels.py run end to end and print their
    tables."""
    _load("mlda_bias").main(["--quick"])
    out = capsys.readouterr().out
    assert "| MLDA(adaptive_error_model=True) | 3 sd |" in out
    assert "KameleonMetropolis (fine model only)" in out
    _load("mlda_ode").main(["--quick"])
    out = capsys.readouterr().out
    assert "| MLDA-AEM |" in out and "| KAMH |" in out
    (row,) = _load("mlda_three_levels").main(["--quick"])
    assert len(row["fine"]) == 2 and len(row["middle"]) == 2 and np.all(row["fine"] > 0)
    assert "| MLDA-AEM-3 | 1 |" in capsys.readouterr().out


@pytest.mark.slow
def test_gpda_noisy_estimates_quick_mode(capsys):
    """benchmarks/gpda_noisy_estimates.py runs end to end and reports the GP's fitted noise sd."""
    rows = _load("gpda_noisy_estimates").main(["--quick", "--samples", "3"])
    assert rows.shape == (1, 8) and np.all(np.isfinite(rows))
    assert 100 < rows[0, 6] < 1200  # the estimator calls of 2 x (300 + 300) screened steps, tuning's included
    assert "| seed | GP noise sd |" in capsys.readouterr().out


@pytest.mark.slow
def test_banana_tips_quick_mode(capsys):
    """benchmarks/banana_tips.py runs end to end and reports the tips' mass and the tail ESS."""
    (row,) = _load("banana_tips").main(["--quick", "--kameleon-after", "0"])
    assert 0 <= row["P(y>8)"] <= 1 and row["tail ESS y"] > 0 and row["kameleon"] > 0
    assert "| seed | sd(y) |" in capsys.readouterr().out
    ((_, row),) = _load("banana_tips").main(["--quick", "--kameleon-after", "0", "--frozen-chain", "300"])
    assert 0 <= row["P(abs(x)>2.5)"] <= 1 and row["claimed rel. SE"] > 0
    ((_, row),) = _load("banana_tips").main(["--quick", "--stationary", "20"])
    assert 0 <= row["P(abs(x)>2.5)"] <= 1 and np.isfinite(row["z"])


@pytest.mark.slow
def test_pseudo_marginal_stationary_start_quick_mode(capsys):
    """benchmarks/pseudo_marginal_stationary_start.py runs end to end, GP-DA-MH and the negative control."""
    bench = _load("pseudo_marginal_stationary_start")
    (row,) = bench.main(["--quick"])
    assert 0 <= row["moves per copy"] <= 20 and np.isfinite(row["var z 1"])
    (row,) = bench.main(["--quick", "--step", "KAMH", "--refresh"])
    assert row["moves per copy"] > 0
    assert "| seed | moves per copy |" in capsys.readouterr().out


def test_kass_waste_free_and_ode_benchmarks_quick_mode(capsys):
    """benchmarks/kass_waste_free.py and kass_ode.py run end to end: waste-free KASS spends N - M
    evaluations per stage and reports an error bar."""
    _load("kass_waste_free").main(["--quick"])
    out = capsys.readouterr().out
    assert "| PyMC IMH | 125 |" in out and "| KASS waste-free, P=20 | 1000 |" in out
    _load("kass_ode").main(["--quick"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| KASS waste-free, P=10 |"))
    assert "n/a" not in row.split("|")[5] and "nan" not in row.split("|")[5]


@pytest.mark.slow
def test_mlda_groundwater_and_subsample_benchmarks_quick_mode(capsys):
    """benchmarks/mlda_groundwater.py (tiny grids and budget, its own reference; the tinyDA rows only
    where tinyDA is installed) and mlda_subsample.py run end to end and print their tables."""
    _load("mlda_groundwater").main(["--quick", "--samplers", "MLDA-AEM", "MLDA-GP", "DEMetropolisZ"])
    out = capsys.readouterr().out
    assert "| MLDA-AEM |" in out and "| MLDA-GP |" in out and "| DEMetropolisZ |" in out
    assert "importance draws" in out
    _load("mlda_subsample").main(["--quick", "--fractions", "0.5"])
    out = capsys.readouterr().out
    assert "| MLDA, 50% subsample |" in out and "| KAMH (all data) |" in out


@pytest.mark.slow
def test_mlda_gp_level_noise_benchmark_quick_mode():
    """benchmarks/mlda_gp_level_noise.py runs its three experiments with both GPs; MLDA's GP level fits a
    noise variance by default, GP-DA-MH's GP (a likelihood that is not estimated) does not."""
    rows = _load("mlda_gp_level_noise").main(["--quick"])
    gpda = "GP-DA-MH, rough fine model, amp 0.3"
    assert {(r["experiment"], r["variant"]) for r in rows} == {
        (e, v) for e in ("rough, amp 0.3", "compound")
        for v in ("noise fitted (default)", "noise-free (noise_variance=0)")
    } | {(gpda, "GP-DA noise-free (default)"), (gpda, 'GP-DA noise_variance="fit"')}
    for r in rows:
        assert ("noise 0," in r["gp"]) == ("noise-free" in r["variant"]), r
        assert np.isfinite(r["z"]) and r["ess"] > 0 and 0 < r["fine"] <= 2


def test_scale_out_fixed_cost_likelihood_is_the_gaussian_after_its_work():
    cloudpickle = pytest.importorskip("cloudpickle")  # as Dask sends it (the script is no module)
    bench = _load("scale_out")
    op = bench.FixedCostLoglik(5)
    a, b = 0.6, 0.025
    expected = -0.5 * (np.log(a / bench.TRUE_A) / 0.02) ** 2 - 0.5 * (np.log(b / bench.TRUE_B) / 0.05) ** 2
    out = [[None]]
    op.perform(None, [a, b], out)
    assert float(out[0][0]) == pytest.approx(expected, rel=1e-12)
    copy = cloudpickle.loads(cloudpickle.dumps(op))  # the work a worker process does is the caller's
    assert copy.work == 5 and np.array_equal(copy._matrix, op._matrix)
    # The matrix is orthogonal: its powers stay of norm 1, never subnormal (which would change the cost).
    assert np.allclose(op._matrix @ op._matrix.T, np.eye(op._size))


@pytest.mark.slow
def test_scale_out_fixed_cost_quick_mode(capsys):
    pytest.importorskip("distributed")
    bench = _load("scale_out")
    rows = bench.main(["--quick", "--runs", "kass", "--cost-ms", "0.5"])
    out = capsys.readouterr().out
    assert "Fixed-cost likelihood:" in out
    assert len(rows) == 1 and rows[0].rstrip().endswith("| yes |")


def test_map_shape_probe_samples_a_gaussian_through_the_package_map():
    """The probe's chains in a map fitted to draws of a correlated 2-d Gaussian: the independent draws
    are mostly accepted (the map is the whitening, to sampling error) and the means are right."""
    bench = _load("map_shape_probe")
    rng = np.random.default_rng(0)
    chol = np.array([[2.0, 0.0], [1.5, 0.5]])
    precision = np.linalg.inv(chol @ chol.T)
    tuning = (chol @ rng.standard_normal((2, 4 * 400))).T.reshape(4, 400, 2)
    states, acceptance = bench.map_chains(lambda x: -0.5 * x @ precision @ x, tuning, tuning.reshape(-1, 2),
                                          seed=1, tune=100, draws=500)
    assert states.shape == (4, 500, 2) and acceptance > 0.6
    assert np.all(np.abs(states.reshape(-1, 2).mean(axis=0)) < 0.3 * np.array([2.0, 1.6]))
    refitted, acceptance = bench.map_chains(lambda x: -0.5 * x @ precision @ x, tuning,
                                            tuning[:, :50].reshape(-1, 2), seed=1, tune=200, draws=300,
                                            refit_every=50)
    assert refitted.shape == (4, 300, 2) and acceptance > 0.6


def test_transport_map_probe_inverts_and_reports_its_jacobian():
    bench = _load("transport_map_probe")
    rng = np.random.default_rng(0)
    # A banana with a funnel's changing width: the map's quadratic shift and linear log-width both act.
    u = rng.standard_normal(4000)
    v = 0.5 * u**2 + np.exp(0.3 * u) * rng.standard_normal(4000)
    w = u - v + rng.standard_normal(4000)
    X = np.column_stack([u, v, w])
    tmap = bench.TriangularMap(X, quadratic=True, scale=True)
    log_det_chol = np.sum(np.log(np.diag(tmap.chol)))
    for x in X[:5]:
        y = tmap.to_y(x)
        back, log_jacobian = tmap.to_x(y)
        np.testing.assert_allclose(back, x, atol=1e-10)
        eps = 1e-6
        jacobian = np.column_stack([(tmap.to_x(y + eps * e)[0] - tmap.to_x(y - eps * e)[0]) / (2 * eps)
                                    for e in np.eye(3)])
        assert np.linalg.slogdet(jacobian)[1] == pytest.approx(log_jacobian + log_det_chol, abs=1e-6)
    # The map straightens the banana: v's shift on u is learned (the residual's spread is near 1, not
    # the 0.5 u^2 term's), so the y draws are far closer to uncorrelated Gaussian than the whitened ones.
    Y = np.array([tmap.to_y(x) for x in X[:1000]])
    z = np.linalg.solve(tmap.chol, (X[:1000] - tmap.mean).T).T
    assert abs(np.corrcoef(Y[:, 0] ** 2, Y[:, 1])[0, 1]) < 0.1 < abs(np.corrcoef(z[:, 0] ** 2, z[:, 1])[0, 1])


@pytest.mark.slow
def test_angles_runs(capsys):
    """benchmarks/angles.py runs end to end (tiny budget) and prints a row per sampler with finite figures."""
    _load("angles").main(["--targets", "pi", "axial", "--seeds", "1", "--samplers", "KAMH", "DEMetropolisZ",
                          "--tune", "300", "--draws", "100"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| KAMH", "| DEMetropolisZ"))]
    assert len(rows) == 4 and "nan" not in out, out
    assert all(row.count("|") == 9 for row in rows[2:]), rows  # axial: the mode crossings too


@pytest.mark.slow
def test_rescue_mode_width_runs(capsys):
    """benchmarks/rescue_mode_width.py runs end to end (tiny budget) and prints its row: two equal-mass modes
    10-fold apart in width in 10-d keep their two chains each."""
    _load("rescue_mode_width").main(["--seeds", "1", "--cases", "10:10", "--tune", "400", "--draws", "100"])
    out = capsys.readouterr().out
    assert "| 10 | 10 | 6 | 23.0 | 21.2 | 1 | 0.500 | none |" in out, out


@pytest.mark.slow
def test_left_regions_sweep_runs(capsys):
    """benchmarks/left_regions_sweep.py runs end to end (one posterior, tiny tuning) and prints its row: the
    income regression's draws are right, and no chain says it left a region."""
    _load("left_regions_sweep").main(["--posteriors", "regression-income", "--seeds", "1", "--tune", "400"])
    out = capsys.readouterr().out
    assert "| regression-income | 1 | silent | -" in out, out


@pytest.mark.slow
def test_smc_real_posteriors_quick_mode(capsys):
    """benchmarks/smc_real_posteriors.py runs end to end (200 particles, the latent GP, one seed): a row
    per sampler with its evaluations and KASS's log Z with an error bar; a posterior with a flat prior
    (the 8-d banana: a Potential on a Flat variable) is skipped with the reason, not sampled from a
    prior SMC cannot draw."""
    bench = _load("smc_real_posteriors")
    bench.main(["--quick", "--samplers", "PyMC IMH (default kernel)", "KASS"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| gp-poisson")]
    assert [row.split("|")[2].strip() for row in rows] == ["PyMC IMH (default kernel)", "KASS"], rows
    assert "±" in rows[1].split("|")[7] and "±" not in rows[0].split("|")[7], rows  # KASS's error bar
    assert all(float(row.split("|")[5]) > 200 for row in rows), rows  # evaluations beyond the particles
    bench.main(["--quick", "--posteriors", "banana-8d"])
    assert "| banana-8d | every sampler | skipped: a flat prior on ['x']" in capsys.readouterr().out


@pytest.mark.slow
def test_population_cores_quick_mode(capsys):
    """benchmarks/population_cores.py runs and finds the same draws with cores=1 and cores=2."""
    rows = _load("population_cores").main(["--quick"])
    assert [(cost, tuning) for cost, tuning, *_ in rows] == [(0.0, "pooled"), (0.0, "per_chain")]
    assert all(same for *_, same in rows)
    assert "| cores=2 / cores=1 |" in capsys.readouterr().out


@pytest.mark.slow
def test_rescue_survey_runs(capsys):
    """benchmarks/rescue_survey.py prints a row per rescue (the income regression, seed 2027: three chains
    walking in are rescued at tuning step 100) and puts the pooled step's methods back."""
    from pymc_kameleon.steps.population import PooledTuning

    before = (PooledTuning._rescue, PooledTuning._wider_by)
    _load("rescue_survey").main(["--posteriors", "regression-income", "--seeds", "2027", "--tune", "150"])
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith("| regression-income | 2027 |")]
    assert [row.split(" | ")[2:4] for row in rows] == [["1", "100"], ["2", "100"], ["3", "100"]], rows
    assert (PooledTuning._rescue, PooledTuning._wider_by) == before


@pytest.mark.slow
def test_kass_random_intercepts_runs(capsys):
    """benchmarks/kass_random_intercepts.py runs end to end (200 particles, one seed): the quadrature
    reference, a KASS run scored against it, and the pooled last-stage rise."""
    bench = _load("kass_random_intercepts")
    x, sign = bench.make_data()
    u = np.array([[-0.3, 0.86, np.log(0.44)]])  # near the posterior mean
    assert np.isfinite(bench.marginal_log_density(u, x, sign)).all()
    (row,) = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert "| KASS | 1 |" in out and "exact log Z -20" in out
    assert row["err"].shape == (2,) and np.isfinite(row["climb"]).all()


@pytest.mark.slow
def test_kass_logz_decay_runs(capsys):
    """benchmarks/kass_logz_decay.py runs end to end (tiny budget): the reference, two KASS runs and the
    summary."""
    z = _load("kass_logz_decay").main(["--seeds", "2", "--particles", "200", "--is-draws", "2000"])
    out = capsys.readouterr().out
    assert "reference log Z" in out and "within +-2 SE" in out
    assert z.shape == (2,) and np.isfinite(z).all()


@pytest.mark.slow
def test_kass_linear_algebra_quick_mode(capsys):
    rows = _load("kass_linear_algebra").main(["--quick"])
    assert "| KASS (auto) | 1 |" in capsys.readouterr().out
    (auto,), (vectorised,) = rows["KASS (auto)"], rows["KASS (vectorised)"]
    # On PyMC 5's C backend "auto" loops over the particles; Numba (PyMC 6) compiles the vectorised loop.
    assert vectorised["batch"] == 1 and auto["evals"] == vectorised["evals"]
    assert auto["log_z"] == pytest.approx(vectorised["log_z"], abs=1e-6)
    crossover = _load("kass_linear_algebra").main(["--crossover", "--quick"])["crossover"]
    from pytensor.compile.mode import get_default_mode
    from pytensor.link.basic import JITLinker

    compiled = isinstance(get_default_mode().linker, JITLinker)  # PyMC 6's Numba compiles the loops
    expected = [(1, 0), (8, 0)] if compiled else [(1, 2), (8, 9)]
    assert [(row["rows"], row["added"]) for row in crossover] == expected
    scan = _load("kass_linear_algebra").main(["--scan", "--quick"])["scan"]
    (auto,), (vectorised,) = scan["KASS (auto)"], scan["KASS (vectorised)"]
    assert auto["batch"] == int(compiled) and vectorised["batch"] == 1  # a Scan in the loop: one by one
    assert (auto["evals"], auto["phi"], auto["log_z"]) == pytest.approx(
        (vectorised["evals"], vectorised["phi"], vectorised["log_z"]), abs=1e-6)


@pytest.mark.slow
def test_gpda_default_tune_benchmark_smoke(capsys):
    bench = _load("gpda_default_tune")
    rows = bench.main(["--models", "normal2", "--seeds", "1", "--chains", "2", "--draws", "100"])
    assert "| normal2 | one window more (4) | 1600 | 1 |" in capsys.readouterr().out
    assert [r["tune"] for r in rows] == [800, 1600]
    assert all(r["evals"] > 0 and r["ess"] > 0 for r in rows)
    rows = bench.main(["--models", "normal2", "--seeds", "1", "--chains", "2", "--draws", "100",
                       "--lengths", "PyMC 5's default"])
    assert [r["tune"] for r in rows] == [1000]


@pytest.mark.slow
def test_mlda_narrow_coarse_benchmark_smoke(capsys):
    bench = _load("mlda_narrow_coarse")
    rows = bench.main(["--ratios", "0.8", "--seeds", "1", "--tune", "300", "--draws", "200"])
    assert "| 0.8 | 1.56 | 1 |" in capsys.readouterr().out
    assert 0.5 < rows[0]["sd"] < 1.5 and rows[0]["accept"] > 0


def test_compare_runs_pairs_posteriors_and_ratios(tmp_path):
    bench = _load("compare_runs")
    run = {"ess_per_eval": 0.1, "min_ess": 100.0, "max_rhat": 1.01, "mean_err": 0.1}
    before = {"a": {"S": [run, run]}, "b": {"S": [{"skipped": "no likelihood"}]}}
    after = {"a": {"S": [dict(run, ess_per_eval=0.3, min_ess=300.0)] * 2}, "b": {"S": []}}
    (tmp_path / "b.json").write_text(json.dumps(before))
    (tmp_path / "a.json").write_text(json.dumps(after))
    lines = bench.main([str(tmp_path / "b.json"), str(tmp_path / "a.json"), "--sampler", "S"])
    assert "| a | 100–100 | 300–300 | 1.010 | 1.010 | 0.10 | 0.10 | 0.1 | 0.3 | 3.00 |" in lines
    assert "| b | skipped | | | | | | | | |" in lines
    assert lines[-1].endswith("geometric mean 3.00, smallest 3.00, largest 3.00 over 1 posteriors")


@pytest.mark.slow
def test_drift_without_climb_quick_mode(capsys):
    """benchmarks/drift_without_climb.py runs end to end: one chain on the ridge, its drift and climb, and
    draws whose sds are near the posterior's."""
    _load("drift_without_climb").main(["--quick"])
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("| search |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[5].split()[0]) > 0 and cells[7] in ("yes", "no")
    assert all(0.5 < float(s) < 1.5 for s in cells[8].split())


@pytest.mark.slow
def test_pseudo_marginal_noise_check_runs(capsys):
    """benchmarks/pseudo_marginal_noise_check.py runs end to end (tiny budget): at one importance sample per
    group (log-estimate sd about 7) the step's noise warning speaks."""
    _load("pseudo_marginal_noise_check").main(["--n", "1", "--seeds", "1", "--tune", "300", "--draws", "100"])
    out = capsys.readouterr().out
    row = [line for line in out.splitlines() if line.startswith("| 1 |")]
    assert len(row) == 1 and "| 1 of 1 |" in row[0], out



def test_mlda_guide_examples_read_the_guides_own_models():
    """mlda_guide_examples.py samples the multilevel guide's code blocks as they stand: each gives a coarse
    and a fine model of the same free variables (building them samples nothing)."""
    bench = _load("mlda_guide_examples")
    for marker in ("euler_step=0.1", "build(rtol=1e-2)"):
        coarse, fine = bench.guide_models(marker)
        assert coarse is not fine
        assert [v.name for v in coarse.free_RVs] == [v.name for v in fine.free_RVs] == ["a", "k"]
