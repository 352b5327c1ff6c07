"""Models people bring: parameters on scales 1e-3 and 1e3, an unstandardised regression started far
from its posterior. Every sampler that builds a Kameleon proposal must sample them correctly."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import KASS, GPDelayedAcceptanceMH, KameleonMetropolis
from pymc_kameleon.problems.hierarchical import eight_schools_noncentred, eight_schools_noncentred_far_start
from pymc_kameleon.problems.regressions import UNSTANDARDISED_REGRESSION_FAR_START as FAR
from pymc_kameleon.problems.regressions import unstandardised_regression as regression
from pymc_kameleon.problems.regressions import unstandardised_regression_reference
from pymc_kameleon.problems.scales import FLAT_RIDGE_SD, flat_ridge
from pymc_kameleon.problems.scales import TWO_NORMALS_OBSERVED_A_SD as A_SD
from pymc_kameleon.problems.scales import TWO_NORMALS_OBSERVED_B_SD as B_SD
from pymc_kameleon.problems.scales import two_normals_observed as two_normals

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def regression_reference():
    """Exact posterior means and sds, by quadrature over sigma."""
    return unstandardised_regression_reference()


def check(idata, reference, rhat=True, strict=False):
    """Each mean within 0.15 posterior sd of the reference, each sd within 15%, R-hat < 1.02; with
    ``strict`` (issue 16's bar for GP-DA on the regression): 0.1 sd, 10% and R-hat < 1.01."""
    tol, rhat_max = (0.1, 1.01) if strict else (0.15, 1.02)
    for name, (mean, sd) in reference.items():
        draws = idata.posterior[name].values
        assert abs(draws.mean() - mean) / sd < tol, (name, draws.mean(), mean, sd)
        assert abs(draws.std() / sd - 1) < tol, (name, draws.std(), sd)
        if rhat:
            assert float(az.rhat(idata, var_names=[name])[name]) < rhat_max, name


def sample(model, step, tune, draws, chains=4, initvals=None, seed=3):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return pm.sample(
            step=step(), tune=tune, draws=draws, chains=chains, cores=1, random_seed=seed, initvals=initvals,
            progressbar=False, compute_convergence_checks=False,
        )


STEPS = {
    "KameleonMetropolis": (KameleonMetropolis, 3000, 3000),
    # 4000 draws: on the regression's -0.99 ridge its ESS is about 0.05 per draw, and with 2000 draws
    # R-hat(b0) was 1.024 at seed 3 once NumPy 2.5.5 / SciPy 1.18.1 came in (1.011-1.012 at seeds 4, 5);
    # with 4000 it is 1.011 (PyMC 6) and 1.006 (PyMC 5).
    "GPDelayedAcceptanceMH(kameleon)": (lambda: GPDelayedAcceptanceMH(proposal="kameleon"), 3000, 4000),
    # 4000 draws for issue 16's strict bar on the regression (ESS ~0.06 per draw there); from the far
    # start at seeds 3-6: means within 0.06 sd, sds within 6%, R-hat <= 1.007.
    "GPDelayedAcceptanceMH": (GPDelayedAcceptanceMH, 3000, 4000),
}
# Which of them meet issue 16's strict bar on the regression (the Kameleon-proposal variant does not
# reliably: at seed 5 one chain of 4 learned a poor whitening, R-hat 1.03).
STRICT_ON_REGRESSION = {"GPDelayedAcceptanceMH"}


# Two independent normals mix quickly (ESS about 0.1 per draw): 1500 draws give a mean's Monte Carlo
# error of about 0.04 sd, against the 0.15 sd allowed. The steps' longer runs are for the regression;
# 1500 tuning steps are as many as a 2-d target needs (at least 825 in 3-d for the slowest step).
TWO_NORMALS_TUNE, TWO_NORMALS_DRAWS = 1500, 1500


@pytest.mark.parametrize("name", sorted(STEPS))
def test_two_normals_on_scales_1e3_apart(name):
    step, _, _ = STEPS[name]
    idata = sample(two_normals(), step, TWO_NORMALS_TUNE, TWO_NORMALS_DRAWS)
    check(idata, {"a": (0.0, A_SD), "b": (0.0, B_SD)})


@pytest.mark.parametrize("name", sorted(STEPS))
def test_unstandardised_regression_from_a_far_start(name, regression_reference):
    """Before issue 16, GP-DA stuck here from any start: a scan step across the ridge gave the GP a
    value near -1e8, its mean turned pessimistic everywhere and stage 1 rejected every proposal."""
    step, tune, draws = STEPS[name]
    idata = sample(regression(), step, tune, draws, initvals=FAR)
    check(idata, regression_reference, strict=name in STRICT_ON_REGRESSION)


# One run of 2000 particles: a mean's Monte Carlo error is a few hundredths of an sd, against 0.15.
def test_kass_two_normals():
    with two_normals():
        idata = pm.sample_smc(draws=2000, kernel=KASS, chains=1, cores=1, random_seed=4, progressbar=False)
    check(idata, {"a": (0.0, A_SD), "b": (0.0, B_SD)}, rhat=False)


def test_kass_unstandardised_regression(regression_reference):
    with regression():
        idata = pm.sample_smc(draws=2000, kernel=KASS, chains=1, cores=1, random_seed=4, progressbar=False)
    check(idata, regression_reference, rhat=False)


def test_tuning_too_short_warns_with_the_figure_and_the_remedy():
    with two_normals():
        step = KameleonMetropolis()
        with pytest.warns(
            UserWarning, match=r"KameleonMetropolis: tuning took 150 steps, fewer than the \d+"
        ):
            pm.sample(step=step, tune=150, draws=50, chains=1, random_seed=1, progressbar=False,
                      compute_convergence_checks=False)


def test_tune_zero_warns():
    """The warning describes the proposal used (a new user saw every move change all coordinates where it
    said "one-coordinate-at-a-time ... unit steps")."""
    untuned = r"without tuning \(tune=0\). The proposal is an untuned move of all 2 coordinates at once"
    with two_normals():
        with pytest.warns(UserWarning, match=untuned + r", with step sd 1.68 in each.*tune >= \d+"):
            pm.sample(step=KameleonMetropolis(), tune=0, draws=20, chains=1, random_seed=1, progressbar=False,
                      compute_convergence_checks=False)


@pytest.mark.parametrize("name", ["GPDelayedAcceptanceMH", "GPDelayedAcceptanceMALA"])
def test_gp_step_with_tune_zero_says_so(name):
    """A new user's GP-DA run with tune=0 warned only that the chain was stuck and that "its tuning raised no
    warning", pointing at funnels and modes: now it says that it samples untuned, with the remedy, and a
    stuck warning (if any) points to that one instead."""
    import pymc_kameleon

    with two_normals():
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            pm.sample(step=getattr(pymc_kameleon, name)(), tune=0, draws=600, chains=1, random_seed=1,
                      progressbar=False, compute_convergence_checks=False)
    texts = [str(w.message) for w in record]
    untuned = [t for t in texts if t.startswith(f"{name}: sampling without tuning (tune=0)")]
    assert len(untuned) == 1 and "pass tune >= " in untuned[0]
    assert "an untuned move of all 2 coordinates at once" in untuned[0]
    assert not any("its tuning raised no warning" in t for t in texts)


def _one_coordinate_far(expensive):
    """20 independent normals with sds 1e-2..1e2 (for GP-DA as a prior 10x wider plus a potential,
    since it needs a likelihood); the start puts only the widest coordinate 40 sd out."""
    d, sd = 20, np.logspace(-2, 2, 20)
    with pm.Model() as model:
        if expensive:
            x = pm.Normal("x", 0, 10 * sd, shape=d)
            pm.Potential("likelihood", -0.5 * pm.math.sum((x / sd) ** 2))
        else:
            pm.Normal("x", 0, sd, shape=d)
    return model, {"x": np.where(np.arange(d) == d - 1, 40 * sd, 0.0)}


@pytest.mark.parametrize("tune, climbing", [(700, True), (4000, False)], ids=["short", "long"])
@pytest.mark.parametrize("name", ["KameleonMetropolis", "GPDelayedAcceptanceMH"])
def test_a_log_density_still_climbing_at_the_end_of_tuning_warns(name, tune, climbing):
    """The climb check is wired into both steps: tuning that ends with the widest coordinate still
    on its way in warns (log density rising by about 220 x sqrt(d/2)); with tune=4000 the chain has
    arrived and it does not (control). That it catches what the drift check averages away is
    shown on the proposal (tests/core/test_scale_free.py)."""
    model, start = _one_coordinate_far(expensive=name != "KameleonMetropolis")
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # The walk in from a far start is the subject: no start search.
        step = KameleonMetropolis if name == "KameleonMetropolis" else GPDelayedAcceptanceMH
        step = step(start="initial_point")
        pm.sample(step=step, tune=tune, draws=50, chains=1, random_seed=1, initvals=start, progressbar=False,
                  compute_convergence_checks=False)
    messages = " ".join(str(w.message) for w in caught if str(w.message).startswith(name))
    assert ("still climbing at the end of tuning" in messages) == climbing, messages


def test_a_chain_that_arrived_early_in_tuning_is_not_called_climbing():
    """A new user's regression (predictors with sds 1e-3..1e3) from PyMC's start, tune=1000: the
    chain arrives within its first 250 tuning steps and its draws are right (errors <= 0.08 sd, 4
    chains), but the climb between the halves of its tuning states (6.7-15.5 at seeds 1-4) counted
    the arrival, and every chain was told it was still climbing. Over the last half the climb is
    0.4-0.9, below the 1.5 that a chain still walking in exceeds, so nothing is said now. The drift
    between the halves, in learned sds, counts the arrival too (1.2-4.3 at seeds 1-6: seed 5 was
    told it was still moving); over the last half it is 0.38-0.59, and nothing is said either."""
    rng = np.random.default_rng(1)
    sds = np.array([1e-3, 1.0, 1e3, 10.0, 0.1])
    X = rng.normal(size=(100, 5)) * sds
    y = 2.0 + X @ (np.array([1.0, -0.5, 0.8, 0.3, -1.2]) / sds) + rng.normal(0, 0.7, 100)
    with pm.Model(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        alpha = pm.Normal("alpha", 0, 10)
        beta = pm.Normal("beta", 0, 1e4, shape=5)
        sigma = pm.HalfNormal("sigma", 5)
        pm.Normal("y", alpha + pm.math.dot(X, beta), sigma, observed=y)
        pm.sample(step=GPDelayedAcceptanceMH(), tune=1000, draws=50, chains=1, random_seed=1,
                  progressbar=False, compute_convergence_checks=False)
    messages = [str(w.message) for w in caught if str(w.message).startswith("GPDelayedAcceptanceMH")]
    assert not any("still climbing" in m or "still moving" in m for m in messages), messages


@pytest.mark.parametrize("far", [False, True], ids=["search-start", "far-start"])
def test_a_chain_exploring_a_ridge_is_not_called_still_moving(far):
    """A new user's single chain on a ridge (tune=1500): its last tuning states drifted by 10.9 sds of
    the covariance learned in its earlier windows, which were 18 times too narrow along the ridge (0.6
    true sds), at a log density that did not rise (climb -0.32); its draws are right, and it was told it
    was still moving. Control: from a start 3 prior sds out (no start search, tune=1000) the chain
    reaches the ridge but crawls along it (an sd of 11 where the posterior's is 816), and warns."""
    with flat_ridge(np.full(3, 3000.0) if far else None), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = pm.sample(step=KameleonMetropolis(start="initial_point" if far else "search"),
                          tune=1000 if far else 1500, draws=3000, chains=1, random_seed=3 if far else 2,
                          progressbar=False, compute_convergence_checks=False)
    moving = [str(w.message) for w in caught if "still moving at the end of tuning" in str(w.message)]
    sds = idata.posterior["mu"].values.reshape(-1, 3).std(axis=0)
    if far:
        assert sds.min() < 100.0 and moving  # wrong, and says so
    else:
        assert np.all(np.abs(sds / FLAT_RIDGE_SD - 1.0) < 0.1) and not moving, (sds, moving)


# GP-DA MALA (issue 16): the scale-free adaptation (scan, windows, whitened GP) made it right on
# both models from PyMC's start. Before: sd(b) 4% of the truth on two normals, R-hat 1.95.
# 1500 draws: with 750, R-hat(a) at seed 3 was 1.0201 once the 2026-11-25 environment came in (seeds
# 4-6: <= 1.0065); with 1500 it is 1.0061, and <= 1.0064 at seeds 4-6.
MALA_TUNE, MALA_DRAWS = 1500, 1500
MALA_REGRESSION_DRAWS = 2000  # issue 16's strict bar: seeds 3-6 within 0.03 sd, 2%, R-hat <= 1.005


@pytest.mark.parametrize("case", ["two_normals", "regression"])
def test_mala_on_scales_1e3_apart_and_an_unstandardised_regression(case, regression_reference):
    from pymc_kameleon import GPDelayedAcceptanceMALA

    if case == "two_normals":
        idata = sample(two_normals(), GPDelayedAcceptanceMALA, MALA_TUNE, MALA_DRAWS)
        check(idata, {"a": (0.0, A_SD), "b": (0.0, B_SD)})
    else:
        idata = sample(regression(), GPDelayedAcceptanceMALA, MALA_TUNE, MALA_REGRESSION_DRAWS)
        check(idata, regression_reference, strict=True)


def test_mala_from_a_far_start_converges_or_says_so(regression_reference):
    """From the far start MALA's walk in can outlast tuning: its drift is tuned on the transient's
    curvature (1 chain of 4 at seed 4 with 3000 tuning steps; with the cheaper 1000 used here, 1 of 4
    on PyMC 5 and 2 of 4 on PyMC 6). It must not be silent: every chain that ends tuning away from the
    posterior warns, with the figure and the remedy, from the cores=2 workers. Per-chain tuning: pooled,
    stranded chains are rescued and all four arrive at this seed (the next test)."""
    from pymc_kameleon import GPDelayedAcceptanceMALA

    with regression(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = pm.sample(
            step=GPDelayedAcceptanceMALA(tuning="per_chain", start="initial_point"), tune=1000, draws=50,
            chains=4, cores=2,
            random_seed=4, initvals=FAR, progressbar=False, compute_convergence_checks=False,
        )
    messages = [str(w.message) for w in caught if "GPDelayedAcceptanceMALA" in str(w.message)]
    mean, sd = regression_reference["sigma"]
    lost = int(np.sum(np.abs(idata.posterior["sigma"].values.mean(axis=1) - mean) > 5 * sd))
    assert lost >= 1  # this seed has a chain that has not arrived (else the test checks nothing)
    walking = [m for m in messages if "still moving at the end of tuning" in m and "increase `tune`" in m]
    assert len(walking) >= lost, messages


def test_mala_from_a_far_start_pooled_every_chain_arrives_and_no_jump_reads_as_a_walk(regression_reference):
    """The same start and seed with pooled tuning: stranded chains are rescued and all four arrive, and
    the end-of-tuning drift check does not take a rescue's jump for a chain still moving (before the
    rescued chain forgot its earlier states, every chain was told it had moved 151-561 sds)."""
    from pymc_kameleon import GPDelayedAcceptanceMALA

    with regression(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = pm.sample(
            step=GPDelayedAcceptanceMALA(), tune=1000, draws=50, chains=4, cores=1, random_seed=4,
            initvals=FAR, progressbar=False, compute_convergence_checks=False, discard_tuned_samples=False,
        )
    mean, sd = regression_reference["sigma"]
    assert np.all(np.abs(idata.posterior["sigma"].values.mean(axis=1) - mean) < 5 * sd)
    assert idata.warmup_sample_stats["rescued"].values.any()
    messages = [str(w.message) for w in caught if "GPDelayedAcceptanceMALA" in str(w.message)]
    assert not [m for m in messages if "still moving at the end of tuning" in m], messages


# ------------------------------------------------ a correlated regression 100 sds away (GP-DA)
def _correlated_regression():
    """3 coefficients, predictors 1, U(0, 10) and N(50, 5): corr(b0, b2) = -0.985 a posteriori.

    Known noise sd, so the posterior is exactly Gaussian. Returns (model, posterior mean, cov).
    """
    rng = np.random.default_rng(5)
    X = np.column_stack([np.ones(50), rng.uniform(0, 10, 50), rng.normal(50, 5, 50)])
    y = X @ np.array([1.0, 0.5, -0.2]) + rng.normal(0, 1, 50)
    cov = np.linalg.inv(X.T @ X + np.eye(3) / 100.0)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 10, shape=3)
        pm.Normal("y", pm.math.dot(X, b), 1.0, observed=y)
    return model, cov @ X.T @ y, cov


def _arrivals(seeds, tune=3000):
    """How many single chains from 100 posterior sds away get within 4 (Mahalanobis) during tuning."""
    model, mean, cov = _correlated_regression()
    start = {"b": mean + 100 * np.sqrt(np.diag(cov))}
    inv_chol = np.linalg.inv(np.linalg.cholesky(cov))
    arrived = 0
    for seed in seeds:
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(
                # The walk alone: the independence component (GP-DA-MH's default since decision 0040)
                # also brings the chain in without the pause, which the negative control then misses.
                step=GPDelayedAcceptanceMH(start="initial_point", independence_weight=0), tune=tune,
                draws=10, chains=1, cores=1,
                random_seed=seed,
                initvals=start, progressbar=False, compute_convergence_checks=False,
                discard_tuned_samples=False,
            )
        b = idata.warmup_posterior["b"].values[0]
        arrived += bool(np.any(np.linalg.norm((b - mean) @ inv_chol.T, axis=1) < 4.0))
    return arrived


@pytest.mark.parametrize("keep", [True, False], ids=["shipped", "all-shrunk"])
@pytest.mark.parametrize("name", ["KameleonMetropolis", "GPDelayedAcceptanceMH"])
def test_a_strongly_correlated_posterior_is_whitened_in_its_narrow_direction(name, keep, monkeypatch):
    """The correlated regression (corr(b0, b2) = -0.985) from PyMC's start, tune 2000: after tuning,
    L^-1 Sigma L^-T (Sigma the exact posterior covariance, C = L L^T the learned one) has every
    eigenvalue within a factor 3 of 1. Each window's covariance is shrunk toward its diagonal, except
    a strong correlation that persists from the previous window; shrinking it too (the control, as
    shipped before) left the narrow direction's eigenvalue at 0.07-0.15, C 7-15 times too wide there."""
    import pymc_kameleon.core.adaptation.covariance as covariance

    if not keep:
        never = lambda cov, prev: np.zeros(len(cov), bool)  # noqa: E731
        monkeypatch.setattr(covariance, "_persistently_correlated", never)
    model, _, cov = _correlated_regression()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The walk in from a far start is the subject: no start search.
        step = KameleonMetropolis if name == "KameleonMetropolis" else GPDelayedAcceptanceMH
        step = step(start="initial_point")
        pm.sample(step=step, tune=2000, draws=10, chains=1, cores=1, random_seed=1, progressbar=False,
                  compute_convergence_checks=False)
    inv_L = np.linalg.inv(step.scale_free_adaptation.state.chol)
    eig = np.linalg.eigvalsh(inv_L @ cov @ inv_L.T)
    assert bool(eig.min() > 1 / 3 and eig.max() < 3) == keep, eig


def test_gp_da_screening_pauses_while_the_chain_walks_in(monkeypatch):
    """A GP trained on the way in screens with confidence ahead of the chain and rejects the moves
    that would carry it in; each window then learns a smaller covariance from the smaller moves. A
    window that ends early (draws disagreeing with the learned covariance) pauses screening for up to
    2 x adapt_interval exact steps. Measured over seeds 10-19: 7 of 10 chains arrived within 3000
    tuning steps, none without the pause; since the coordinate scan's transit rule 10 of 10; since
    windows after an early end no longer jump ahead in the doubling schedule, 10 of 10 with the pause
    and 7 of 10 without (PyMC 5); since decision 0071's draws 10 of 10 and 6 of 10. Here three seeds
    of those where the pause is what gets the chain there (15, 16, 18): 3 arrive, and without the
    pause (the negative control) none, on PyMC 5 and 6."""
    seeds = (15, 16, 18)
    assert _arrivals(seeds) == 3
    from pymc_kameleon.core.gp.training import GPTrainingSchedule

    monkeypatch.setattr(GPTrainingSchedule, "pause_while_walking", lambda self, window, max_steps: None)
    assert _arrivals(seeds) <= 1


def _eight_schools_non_centred():
    return eight_schools_noncentred()[0]


@pytest.mark.parametrize("floor, seed", [(True, 15), (False, 1)], ids=["shipped", "no-floor"])
def test_a_mala_chain_that_stays_far_away_says_so(floor, seed, monkeypatch):
    """Eight schools (non-centred) from mu = 200, tau = 1000, eta = +-10, GP-DA MALA, one chain (until
    session 107: test_mala_does_not_stick_in_one_coordinate).

    A new user's chain once ended tuning here at mu = 203.4 with sd 0.003 (the posterior: 4.4, sd 3.3)
    and nothing warned; decision 0006 added the Cramér-Rao floor on the learned variances and the
    tuning warnings. Since then most chains arrive with or without the floor: at seeds 2, 3 and 12-17
    with the floor 7 of 8 on PyMC 5 and 6 of 8 on PyMC 6, without it 8 of 8 on both; seed 1 arrives
    with the floor and stays without it (session 107). So this checks what must hold of every run: a
    chain that stays is not silent. Seed 15 with the floor stays (mu 80 on PyMC 5, 51 on PyMC 6), seed 1
    without the floor stays; both must warn (the stuck assertion shows the case is exercised)."""
    from pymc_kameleon import GPDelayedAcceptanceMALA
    from pymc_kameleon.core.adaptation.windows import AdaptationWindow

    if not floor:
        monkeypatch.setattr(AdaptationWindow, "variance_floor", property(lambda self: None))
    model, _, start = eight_schools_noncentred_far_start()
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = GPDelayedAcceptanceMALA(start="initial_point")
        idata = pm.sample(step=step, tune=3000, draws=200, chains=1, random_seed=seed, initvals=start,
                          progressbar=False, compute_convergence_checks=False)
    warned = any(str(w.message).startswith("GPDelayedAcceptanceMALA:") for w in caught)
    assert abs(float(idata.posterior["mu"].mean()) - 4.4) > 10 * 3.3  # the chain stayed
    assert warned


def test_the_gradient_spread_warning_reaches_the_user_and_names_the_coordinate(monkeypatch):
    """The wiring from the tuning report to the user: a report whose gradient spread is 0.03 in
    coordinate 0 (as the stuck chain above had before the floor) gives a warning that names mu;
    the report's own spread comes from the step's gradients (a settled chain: about 1, no warning)."""
    import dataclasses

    from pymc_kameleon import GPDelayedAcceptanceMALA
    from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation

    reports = []
    real_report = ScaleFreeAdaptation.report

    def stuck_report(self):
        report = real_report(self)
        reports.append(report)
        return dataclasses.replace(report, spread=0.03, spread_coordinate=0)

    monkeypatch.setattr(ScaleFreeAdaptation, "report", stuck_report)
    with _eight_schools_non_centred(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm.sample(step=GPDelayedAcceptanceMALA(), tune=1500, draws=20, chains=1, random_seed=1,
                  progressbar=False, compute_convergence_checks=False)
    messages = " ".join(str(w.message) for w in caught if "GPDelayedAcceptanceMALA" in str(w.message))
    assert "the chain barely moved in mu at the end of tuning" in messages, messages
    assert 0.5 < reports[0].spread < 3.0


def test_mala_from_pymcs_start_on_eight_schools_has_no_stuck_warning():
    """Control for the gradient-spread warning: from PyMC's start the chain settles (spread 0.79-1.05
    on 6 chains, seeds 1-3) and nothing is said."""
    from pymc_kameleon import GPDelayedAcceptanceMALA

    with _eight_schools_non_centred(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm.sample(step=GPDelayedAcceptanceMALA(), tune=3000, draws=50, chains=1, random_seed=1,
                  progressbar=False, compute_convergence_checks=False)
    messages = " ".join(str(w.message) for w in caught if "GPDelayedAcceptanceMALA" in str(w.message))
    assert "barely moved" not in messages, messages


# ----------------------------------------- a 20-d Gaussian: the fit at the end of tuning (GP-DA)
def _gaussian_20d():
    """20 correlated normals with sds 1e-2..1e2 (a new user's model, found failing silently)."""
    rng = np.random.default_rng(3)
    d, scales = 20, np.logspace(-2, 2, 20)
    A = rng.normal(size=(d, d))
    W = A @ A.T + 0.5 * np.eye(d)
    R = W / np.sqrt(np.outer(np.diag(W), np.diag(W)))
    S = R * np.outer(scales, scales)
    with pm.Model() as model:
        x = pm.Normal("x", 0, 1e3, shape=d)
        pm.MvNormal("obs", mu=x, cov=S, observed=rng.multivariate_normal(scales, S))
    return model


@pytest.mark.parametrize("check", [True, False], ids=["shipped", "marginal-likelihood-only"])
def test_a_refit_that_predicts_worse_is_not_applied_at_the_end_of_tuning(check, monkeypatch):
    """On the 20-d Gaussian the last fit of tuning, on the latest 300 points, found length scales of
    3-10 posterior sds (from 30-66) that raised the marginal likelihood by 2.6 nats but lowered the
    leave-one-out density by 400 nats: after tuning stage 2 accepted 47% of what stage 1 passed,
    against 95% during tuning, and 4 chains x 5000 draws had R-hat 2.1 and sds 0.62 of the truth,
    with no warning (seeds 11, 21, 22: R-hat 1.29-2.14; with the check 1.25-1.33, sds >= 0.85).
    With the check the fit is not applied (stage 2: 0.97-0.98 at seeds 11, 21, 22); without it
    (the control) 0.47-0.69. Since decision 0071's draws, seed 11: 0.938 / 0.546 on PyMC 5 and 6
    (seed 22, used before, now misses the bad fit: 0.983 without the check; seeds 21, 23-25: 0.92-0.98
    / 0.48-0.63)."""
    from pymc_kameleon.core.gp.surrogate import GPSurrogate

    if not check:
        monkeypatch.setattr(GPSurrogate, "loo_log_predictive_density", lambda self: 0.0)
    with _gaussian_20d(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The walk alone, as measured (with GP-DA-MH's default independence component, decision 0040, the
        # control's stage 2 accepted 0.93: its draws do not depend on the fitted length scales).
        idata = pm.sample(step=GPDelayedAcceptanceMH(independence_weight=0), tune=3000, draws=300, chains=1,
                          cores=1, random_seed=11, progressbar=False, compute_convergence_checks=False)
    stage2 = float(np.nanmean(idata.sample_stats["stage2_accept"].values))
    assert (stage2 > 0.9) if check else (stage2 < 0.6), stage2


def _gaussian_50d_check(monkeypatch, min_rows, exam=True):
    """KAMH with defaults on the catalogue's 50-d Gaussian (AR(1) correlation 0.9, sds 0.1 to 10) at
    4 x (3000 + 4000), with the fitted shape allowed from ``min_rows`` rows per unknown (and, if not
    ``exam``, without the end-of-tuning exam of decision record 0046)."""
    from pymc_kameleon.core.adaptation import gaussian_fit
    from pymc_kameleon.core.adaptation.independence import IndependenceTuning
    from pymc_kameleon.problems.scales import gaussian_50d

    monkeypatch.setattr(gaussian_fit, "_MIN_ROWS", min_rows)
    if not exam:
        monkeypatch.setattr(IndependenceTuning, "exam", lambda self, *args: 0)
    model, reference, _ = gaussian_50d()
    idata = sample(model, KameleonMetropolis, 3000, 4000)
    draws = idata.posterior["x"]
    sds = np.array([reference[f"x[{i}]"][1] for i in range(50)])
    z = draws.mean(("chain", "draw")).values / az.mcse(idata, var_names=["x"])["x"].values
    sd_ratio = draws.std(("chain", "draw")).values / sds
    return np.abs(z).max(), np.abs(sd_ratio - 1).max(), float(az.rhat(idata, var_names=["x"])["x"].max())


def test_a_50d_gaussian_converges_at_3000_tuning_steps(monkeypatch):
    """Decision record 0044: the fitted Gaussian from 1.2 rows per unknown (1592 evaluations at d = 50)
    is there at the window end at step 2000 in every chain, wins the next window and is used from step
    2800 on (from 1.5 rows, 1989 evaluations, some chain got it too late to be judged: R-hat 1.41 and
    1.87 at seeds 2025 and 2026). Every mean within 4 Monte Carlo standard errors of 0, every sd within
    10%, R-hat below 1.01."""
    z, sd_error, rhat = _gaussian_50d_check(monkeypatch, 1.2)
    assert z < 4.0 and sd_error < 0.1 and rhat < 1.01, (z, sd_error, rhat)


def test_negative_control_the_50d_gaussian_fails_with_the_fit_from_1_5_rows(monkeypatch):
    """The same check fails with the rules before 0044 and 0046: some chain still walks when tuning
    ends. (With the exam of 0046 alone it passes: the fit made at tuning's end is examined and used.)"""
    z, sd_error, rhat = _gaussian_50d_check(monkeypatch, 1.5, exam=False)
    assert not (z < 4.0 and sd_error < 0.1 and rhat < 1.01), (z, sd_error, rhat)


def test_start_search_keeps_numpy_error_settings_of_the_user():
    """A new user with np.seterr(over="raise") had the start search crash with FloatingPointError: Powell's
    line search overflows harmlessly on the huge value that stands for a zero density. The search now
    ignores overflow in the optimiser's own arithmetic only (a blocked=False hierarchical model, seed 1,
    where it happened; the model's evaluations keep the user's settings)."""
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(4), 10)
    y = rng.normal(np.array([-1.0, 0.0, 1.0, 2.0])[groups], 1.0)
    with pm.Model():
        mu = pm.Normal("mu", 0, 3)
        tau = pm.HalfNormal("tau", 2)
        theta = pm.Normal("theta", mu, tau, shape=4)
        pm.Normal("y", theta[groups], 1.0, observed=y)
        with np.errstate(over="raise"), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the short tuning's own warnings
            pm.sample(step=KameleonMetropolis(blocked=False), tune=5, draws=5, chains=2, cores=1,
                      random_seed=1, progressbar=False, compute_convergence_checks=False)


def _potential_infinite_above(threshold):
    import pytensor.tensor as pt

    with pm.Model() as model:
        x = pm.Normal("x", 0, 1)
        pm.Potential("p", pt.switch(x > threshold, np.inf, 0.0))
    return model


def test_a_log_density_of_plus_inf_is_rejected_and_named():
    """A new user's Potential was +inf for x > 1.5 (a model bug: no density takes it); KameleonMetropolis
    accepted those proposals and every draw stayed inside, with warnings that called it NaN. Now it is
    rejected like NaN and the warning says +inf; KASS names it at the initial particles (PyMC's tempering
    had failed with 'cannot convert float NaN to integer')."""
    with _potential_infinite_above(1.5), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        idata = pm.sample(step=KameleonMetropolis(), tune=1000, draws=500, chains=2, cores=1, random_seed=1,
                          progressbar=False, compute_convergence_checks=False)
    assert float(idata.posterior["x"].max()) <= 1.5
    assert any("log density was +inf at a proposal" in str(w.message) for w in record)
    with _potential_infinite_above(1.5), pytest.raises(ValueError, match=r"likelihood is \+inf at \d+ of"):
        pm.sample_smc(draws=300, kernel=KASS, chains=1, progressbar=False, random_seed=1)
