"""KASS / ASMC inside ``pm.sample_smc``: exactness, evidence, bookkeeping, options.

The statistical tests run R independent SMC chains (one ``pm.sample_smc`` call, so PyMC reuses
one kernel instance) and derive every tolerance from the spread of the R runs: a per-run
statistic (particle mean, variance, quantile coverage, evidence ratio) is averaged over runs
and compared with its exact value in units of its standard error sd/sqrt(R).
"""

import math
import re
import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from pymc.smc.kernels import IMH, SMC_KERNEL
from scipy.stats import multivariate_normal, norm

from pymc_kameleon import ASMC, KASS, PseudoMarginalPotential, log_mean_exp
from pymc_kameleon.core.kameleon.family import KameleonProposal
from pymc_kameleon.core.kameleon.whitened import WhitenedFamily
from pymc_kameleon.core.smc.evidence import evidence_relative_variance
from pymc_kameleon.core.smc.mixtures import GlobalWalkMixture, IndependenceMixture
from pymc_kameleon.smc import (
    LogEvidence,
    evidence_lags,
    log_evidence,
    stage_dataset,
    stage_stats,
    with_stage_dataset,
)
from pymc_kameleon.smc.results import LINEAGES_CHECKED, MIN_DISTINCT_ANCESTORS
from pymc_kameleon.testing import von_mises_model, von_mises_moments

SMC_KW = dict(progressbar=False, compute_convergence_checks=False)
Z_MAX = 4.0

# ----------------------------------------------------------------- a conjugate linear model
# y = X w + e, e ~ N(0, s^2 I), w ~ N(0, tau^2 I): posterior and evidence in closed form.
N_OBS, DIM, NOISE_SD, PRIOR_SD = 20, 2, 0.5, 2.0
_rng = np.random.default_rng(11)
X_DESIGN = _rng.normal(size=(N_OBS, DIM))
Y_OBS = X_DESIGN @ np.array([1.0, -0.5]) + NOISE_SD * _rng.normal(size=N_OBS)
POST_COV = np.linalg.inv(X_DESIGN.T @ X_DESIGN / NOISE_SD**2 + np.eye(DIM) / PRIOR_SD**2)
POST_MEAN = POST_COV @ X_DESIGN.T @ Y_OBS / NOISE_SD**2
LOG_Z = multivariate_normal(
    np.zeros(N_OBS), PRIOR_SD**2 * X_DESIGN @ X_DESIGN.T + NOISE_SD**2 * np.eye(N_OBS)
).logpdf(Y_OBS)


def linear_model():
    with pm.Model() as model:
        w = pm.Normal("w", 0, PRIOR_SD, shape=DIM)
        pm.Normal("y", X_DESIGN @ w, NOISE_SD, observed=Y_OBS)
    return model


def run_smc(model, kernel, chains, draws=500, seed=1, var="w", **kernel_kwargs):
    """Return (particles (chains, draws, dim), final log evidence per chain, idata)."""
    with model:
        idata = pm.sample_smc(
            draws=draws, kernel=kernel, chains=chains, cores=1, random_seed=seed, **SMC_KW, **kernel_kwargs
        )
    particles = idata.posterior[var].values.reshape(chains, draws, -1)
    return particles, log_evidence(idata).log_z, idata


def across_runs_z(per_run, exact):
    """|mean over runs - exact| / (sd over runs / sqrt(R)), per statistic."""
    per_run = np.asarray(per_run, dtype=float)
    se = per_run.std(axis=0, ddof=1) / math.sqrt(per_run.shape[0])
    return np.abs(per_run.mean(axis=0) - exact) / np.maximum(se, 1e-12)


def posterior_z_scores(particles, mean, cov):
    """Z-scores of particle means, variances and marginal quantile coverages (0.1, 0.5, 0.9)."""
    sd = np.sqrt(np.diag(cov))
    out = {
        "mean": across_runs_z(particles.mean(axis=1), mean),
        "var": across_runs_z(particles.var(axis=1), np.diag(cov)),
    }
    for q in (0.1, 0.5, 0.9):
        below = (particles < norm.ppf(q, mean, sd)).mean(axis=1)
        out[f"q{q}"] = across_runs_z(below, np.full(mean.shape, q))
    return {k: float(np.max(v)) for k, v in out.items()}


def evidence_z(log_z, exact):
    """The SMC evidence estimate is unbiased for Z (not log Z): test mean(Z_hat / Z) = 1."""
    ratio = np.exp(np.asarray(log_z) - exact)
    return float(abs(ratio.mean() - 1) / (ratio.std(ddof=1) / math.sqrt(ratio.size)))


class StaleTemperatureKASS(KASS):
    """Negative control: rejuvenates against the previous stage's temperature."""

    def mutate(self):
        beta, self.beta = self.beta, getattr(self, "_previous_beta", 0.0)
        self.tempered_posterior_logp = self.prior_logp + self.beta * self.likelihood_logp
        super().mutate()
        self._previous_beta, self.beta = beta, beta
        self.tempered_posterior_logp = self.prior_logp + beta * self.likelihood_logp

    def setup_kernel(self):
        super().setup_kernel()
        self._previous_beta = 0.0


class PosteriorMovesKASS(KASS):
    """Negative control for the evidence: moves the particles toward the posterior (beta = 1) at every
    stage."""

    def mutate(self):
        beta, self.beta = self.beta, 1.0
        self.tempered_posterior_logp = self.prior_logp + self.likelihood_logp
        super().mutate()
        self.beta = beta
        self.tempered_posterior_logp = self.prior_logp + beta * self.likelihood_logp


# ----------------------------------------------------------------- exactness (slow)
@pytest.mark.slow
@pytest.mark.parametrize(
    "kernel, kwargs",
    [
        (KASS, {}),
        (ASMC, {}),
        (KASS, {"n_steps": 5, "proposal_kernel": "matern32"}),
        (KASS, {"waste_free": True, "chain_length": 10}),
    ],
)
def test_posterior_moments_and_quantiles_on_a_conjugate_model(kernel, kwargs):
    # 16 runs: the run-to-run sd is a t statistic's denominator; with 12 runs the max over the 15
    # statistics reached 4.06 once (KASS, seed 1, whitened proposal), 3.57 with 16.
    particles, _, _ = run_smc(linear_model(), kernel, chains=16, **kwargs)
    z = posterior_z_scores(particles, POST_MEAN, POST_COV)
    assert max(z.values()) < Z_MAX, z


@pytest.mark.slow
def test_moments_negative_control_stale_temperature_fails():
    particles, _, _ = run_smc(linear_model(), StaleTemperatureKASS, chains=12)
    z = posterior_z_scores(particles, POST_MEAN, POST_COV)
    assert z["var"] > 2 * Z_MAX, z


@pytest.mark.slow
@pytest.mark.parametrize("kernel, kwargs", [(KASS, {}), (ASMC, {}), (KASS, {"waste_free": True})])
def test_log_evidence_matches_the_closed_form(kernel, kwargs):
    _, log_z, _ = run_smc(linear_model(), kernel, chains=16, **kwargs)
    assert evidence_z(log_z, LOG_Z) < Z_MAX, (log_z, LOG_Z)
    assert abs(np.mean(log_z) - LOG_Z) < 0.2  # and the spread itself is small


@pytest.mark.slow
def test_evidence_negative_control_posterior_moves_fail():
    _, log_z, _ = run_smc(linear_model(), PosteriorMovesKASS, chains=16)
    assert evidence_z(log_z, LOG_Z) > 2 * Z_MAX, (log_z, LOG_Z)


# ----------------------------------------------------------------- pseudo-marginal (slow)
# z_j ~ N(theta, I), y_j | z_j ~ N(z_j, I): y_j | theta ~ N(theta, 2I); theta ~ N(0, I).
PM_J, PM_D = 8, 2
PM_Y = np.array([0.5, -0.5]) + math.sqrt(2.0) * np.random.default_rng(5).normal(size=(PM_J, PM_D))
PM_POST_MEAN = PM_Y.sum(0) / 2 / (1 + PM_J / 2)
PM_POST_COV = np.eye(PM_D) / (1 + PM_J / 2)
PM_LOG_Z = sum(
    multivariate_normal(np.zeros(PM_J), 2 * np.eye(PM_J) + np.ones((PM_J, PM_J))).logpdf(PM_Y[:, k])
    for k in range(PM_D)
)


class CountingEstimator:
    """Importance-sampling estimate of prod_j N(y_j; theta, 2I) from z ~ p(z | theta); counts its calls."""

    def __init__(self, n_importance=10):
        self.n_importance = n_importance
        self.calls = 0

    def __call__(self, theta, rng):
        self.calls += 1
        z = theta + rng.standard_normal((self.n_importance, PM_J, PM_D))
        log_w = -0.5 * ((PM_Y - z) ** 2).sum(-1) - math.log(2 * math.pi)
        return float(log_mean_exp(log_w, axis=0).sum())


def pseudo_marginal_model(estimator):
    with pm.Model() as model:
        theta = pm.Normal("theta", 0, 1, shape=PM_D)
        PseudoMarginalPotential("lik", estimator, inputs=[theta])
    return model


@pytest.mark.slow
def test_pseudo_marginal_posterior_evidence_and_estimator_bookkeeping():
    estimator = CountingEstimator()
    spread = np.std([estimator(np.zeros(PM_D), np.random.default_rng(i)) for i in range(200)])
    assert 0.3 < spread < 3  # noisy enough for the test to mean something
    estimator.calls = 0
    chains, draws = 12, 400
    particles, log_z, idata = run_smc(
        pseudo_marginal_model(estimator), KASS, chains=chains, draws=draws, var="theta", n_steps=4
    )
    z = posterior_z_scores(particles, PM_POST_MEAN, PM_POST_COV)
    assert max(z.values()) < Z_MAX, z
    assert evidence_z(log_z, PM_LOG_Z) < Z_MAX, (log_z, PM_LOG_Z)
    # One estimate per initial particle, then one per proposal: never one at a current particle.
    proposals = int(sum(chain.sum() for chain in stage_stats(idata, "likelihood_evals")))
    assert estimator.calls == chains * draws + proposals
    assert idata.sample_stats.attrs["batch_logp"] == 0
    with pseudo_marginal_model(estimator):  # its sweep-cap warnings would name the estimates' noise
        assert KASS(draws=50, random_seed=1)._poor_stages.estimated


def test_correlated_estimator_gets_fresh_normals_in_smc():
    """pm.sample_smc runs the Op, which calls a correlated estimator with fresh u ~ N(0, I) of its shape
    (exact, not correlated: the particles keep their likelihoods, not their u)."""
    seen = []

    def estimator(theta, u):
        seen.append(np.array(u, copy=True))
        z = theta + u  # u: (n_importance, J, D)
        return float(log_mean_exp(-0.5 * ((PM_Y - z) ** 2).sum(-1) - math.log(2 * math.pi), axis=0).sum())

    with pm.Model():
        theta = pm.Normal("theta", 0, 1, shape=PM_D)
        PseudoMarginalPotential("lik", estimator, inputs=[theta], auxiliary_shape=(5, PM_J, PM_D))
        idata = pm.sample_smc(draws=50, kernel=KASS, chains=1, random_seed=2, n_steps=2, **SMC_KW)
    assert all(u.shape == (5, PM_J, PM_D) for u in seen)
    pooled = np.stack(seen[:200])
    assert abs(pooled.mean()) < 0.05 and abs(pooled.std() - 1) < 0.05
    assert np.corrcoef(pooled[:-1].ravel(), pooled[1:].ravel())[0, 1] < 0.05  # afresh, not moved
    assert np.all(np.isfinite(idata.posterior["theta"].values))


# ----------------------------------------------------------------- PyMC integration
def test_sample_stats_per_stage():
    _, log_z, idata = run_smc(linear_model(), KASS, chains=1, draws=200, n_steps=3)
    stats = idata.sample_stats
    for name in (
        "beta", "mean_accept_rate", "nu2", "scale", "bandwidth", "gamma", "n_steps", "subsample_size",
        "likelihood_evals", "loglik_rise", "loglik_rise_se",
    ):
        assert name in stats, name
    (beta,) = stage_stats(idata, "beta")
    assert np.all(np.diff(beta) > 0) and beta[-1] == 1
    (n_steps,) = stage_stats(idata, "n_steps")
    assert np.all(n_steps == 3)
    # Batched evaluation: every proposal is evaluated.
    np.testing.assert_array_equal(stage_stats(idata, "likelihood_evals")[0], 3 * 200)
    np.testing.assert_array_equal(stage_stats(idata, "subsample_size")[0], 200)
    (accept,) = stage_stats(idata, "mean_accept_rate")
    assert np.all((accept > 0) & (accept < 1))
    assert stats.attrs["proposal_kernel"] == "gaussian" and stats.attrs["batch_logp"] == 1
    assert stats.attrs["am_weight"] == 0.25 and stats.attrs["independence_weight"] == 0.25  # the defaults
    assert np.isfinite(log_z[0])


def test_stage_stats_with_several_chains():
    _, log_z, idata = run_smc(linear_model(), KASS, chains=3, draws=100, n_steps=1)
    lml = stage_stats(idata, "log_marginal_likelihood")
    assert len(lml) == 3 and all(np.isnan(chain[:-1]).all() for chain in lml)
    np.testing.assert_array_equal(log_z, [chain[-1] for chain in lml])


def test_a_multitrace_and_its_conversion_are_told_where_the_stage_stats_are():
    """pm.sample_smc(return_inferencedata=False) keeps the stage statistics on trace.report, and
    pm.to_inference_data leaves them out: a new user was told the converted result was not from
    pm.sample_smc. Both errors now say where the log evidence is, and it is there."""
    with linear_model():
        trace = pm.sample_smc(kernel=KASS, draws=100, chains=1, random_seed=1, progressbar=False,
                              return_inferencedata=False, n_steps=1)
        converted = pm.to_inference_data(trace)
    for given, error in ((trace, TypeError), (converted, ValueError)):
        with pytest.raises(error, match=r"trace\.report\.log_marginal_likelihood"):
            log_evidence(given)
    assert np.isfinite(np.asarray(trace.report.log_marginal_likelihood, dtype=float).reshape(-1)[-1])


@pytest.mark.parametrize("prior", ["normal", "flat", "normal-from-the-prior"])
def test_log_z_from_given_start_draws_says_what_it_is(prior):
    """From pm.sample_smc(start=...) log Z is the evidence of a model whose prior is the start draws'
    distribution: a new user's warm start came out 3.4 nats high at 250 standard errors, told only to use
    more particles, and a pm.Flat prior (KASS's error had suggested start=) gave a number that moved with
    the draws' spread. log_evidence now says so, and returns NaN where the prior is improper. Control:
    the same model sampled from its prior gets neither warning."""
    y = np.random.default_rng(0).normal(0.8, 1.0, size=20)
    start = {"mu": np.random.default_rng(1).normal(y.mean(), 0.25, 300)}
    with pm.Model(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mu = pm.Flat("mu") if prior == "flat" else pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 1.0, observed=y)
        given = {} if prior == "normal-from-the-prior" else {"start": start}
        idata = pm.sample_smc(draws=300, kernel=KASS, chains=1, random_seed=1, progressbar=False, **given)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        evidence = log_evidence(idata)
    said = [str(w.message) for w in caught if "started from pm.sample_smc(start=...)" in str(w.message)]
    falling = [str(w.message) for w in caught if "falling at the last stage" in str(w.message)]
    assert not falling
    if prior == "normal-from-the-prior":
        assert not said and np.isfinite(evidence.log_z).all()
    elif prior == "flat":
        assert len(said) == 1 and "improper prior" in said[0] and np.isnan(evidence.log_z).all()
    else:
        assert len(said) == 1 and "warm start" in said[0] and np.isfinite(evidence.log_z).all()


@pytest.mark.parametrize("wrapped", [True, False])
def test_angles_are_moved_in_one_period(wrapped, monkeypatch):
    """pm.VonMises's density repeats every 2 pi in the sampler's coordinates: particles that wandered
    into other periods sat in other copies of the posterior, and moves fitted across them accepted 3% at
    the last stages (100 sweeps, a straggler warning that named funnels). Wrapped about their mean
    direction at each stage: a third accepted, and the posterior matches a grid's. The negative control
    (no wrapping) shows the collapse."""
    from pymc_kameleon.smc import kass

    if not wrapped:
        monkeypatch.setattr(kass, "wrap_about_mean_direction", lambda X, columns: X)
    model, obs = von_mises_model()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample_smc(kernel=KASS, draws=600, chains=1, random_seed=1, progressbar=False)
    last_accept = stage_stats(idata, "mean_accept_rate")[0][-1]
    if not wrapped:
        assert last_accept < 0.1
        return
    assert last_accept > 0.2
    direction, mean_kappa, sd_kappa = von_mises_moments(obs)
    draws_mu, draws_kappa = idata.posterior["mu"].values.ravel(), idata.posterior["kappa"].values.ravel()
    assert abs(np.arctan2(np.sin(draws_mu).mean(), np.cos(draws_mu).mean()) - direction) < 0.03
    assert abs(draws_kappa.mean() - mean_kappa) < 0.15 * sd_kappa


def _narrow_mean_model():
    y = np.random.default_rng(0).normal(1.0, 0.3, size=30)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 0.3, observed=y)
    return model


@pytest.mark.parametrize(
    "chains, cores, seed, stages",
    [
        (1, 1, 1, [6]),
        (1, 2, 1, [6]),
        (2, 1, 4, [6, 6]),
        (2, 1, 2, [5, 6]),  # unequal stages: PyMC stores one list per chain (it used to crash here)
        (2, 2, 2, [5, 6]),
    ],
)
def test_results_helpers_for_any_chains_stages_and_cores(chains, cores, seed, stages, tmp_path):
    """stage_stats and log_evidence undo every layout pm.sample_smc uses, on PyMC 5 and 6: the
    per-chain arrays have each chain's own number of stages, beta ends at 1, and the evidence is
    the last stage's log_marginal_likelihood."""
    with _narrow_mean_model():
        idata = pm.sample_smc(
            draws=60, kernel=KASS, chains=chains, cores=cores, random_seed=seed, n_steps=2, am_weight=0.0,
            independence_weight=0.0, **SMC_KW,
        )  # weights 0: the seeds were chosen for these stage counts before the mixtures became the default
    betas = stage_stats(idata, "beta")
    assert [len(b) for b in betas] == stages
    assert all(b[-1] == 1 and np.all(np.diff(b) > 0) for b in betas)
    assert all(np.all(n == 2) for n in stage_stats(idata, "n_steps"))
    lml = stage_stats(idata, "log_marginal_likelihood")
    log_z, std_error = log_evidence(idata)
    assert log_z.shape == std_error.shape == (chains,) and np.all(np.isfinite(log_z))
    assert np.all((std_error >= 0) & np.isfinite(std_error))
    np.testing.assert_array_equal(log_z, [chain[-1] for chain in lml])
    _check_stage_dataset(idata, stages, tmp_path)


def _netcdf_backend() -> bool:
    try:
        import netCDF4  # noqa: F401
    except ImportError:
        try:
            import h5netcdf  # noqa: F401
        except ImportError:
            return False
    return True


def _check_stage_dataset(idata, stages, tmp_path):
    """stage_dataset holds every statistic as floats on (chain, stage), NaN after each chain's last
    stage; stage_stats and log_evidence read it (and with_stage_dataset's copy) as they read PyMC's
    layout; and, where a netCDF library is installed, the copy saves and loads back unchanged."""
    dataset = stage_dataset(idata)
    names = sorted(idata.sample_stats.data_vars)
    assert sorted(dataset.data_vars) == names
    assert dict(dataset.sizes) == {"chain": len(stages), "stage": max(stages)}
    assert all(dataset[name].dtype == float and dataset[name].dims == ("chain", "stage") for name in names)
    beta = dataset["beta"].values
    assert [int(np.isfinite(row).sum()) for row in beta] == stages
    assert all(np.isnan(row[n:]).all() for row, n in zip(beta, stages, strict=True))
    tidy = with_stage_dataset(idata)
    assert type(tidy) is type(idata)
    loaded = [tidy]
    if _netcdf_backend():
        tidy.to_netcdf(str(tmp_path / "smc.nc"))
        loaded.append(az.from_netcdf(str(tmp_path / "smc.nc")))
    for copy in loaded:
        np.testing.assert_array_equal(copy.posterior["mu"].values, idata.posterior["mu"].values)
        for name in names:
            for ours, theirs in zip(stage_stats(copy, name), stage_stats(idata, name), strict=True):
                np.testing.assert_array_equal(ours, theirs)
        for ours, theirs in zip(log_evidence(copy), log_evidence(idata), strict=True):
            np.testing.assert_array_equal(ours, theirs)


# ----------------------------------------------------------------- the evidence's error bar
class SystematicKASS(KASS):
    """Negative control: KASS with PyMC's systematic resampling, for which the genealogy estimator
    of the evidence's variance does not hold."""

    def resample(self):
        self._evidence = {
            "evidence_relative_variance": evidence_relative_variance(self.weights, self._eve, self.iteration),
            "distinct_ancestors": int(np.unique(self._eve).size),
        }
        SMC_KERNEL.resample(self)
        self._eve = self._eve[self.resampling_indexes]


def evidence_calibration(kernel, runs=60, draws=300, seed=3, **kwargs):
    """(coverage of log Z +- 2 SE, rms SE / spread of log Z over runs) on the conjugate model."""
    _, _, idata = run_smc(linear_model(), kernel, chains=runs, draws=draws, seed=seed, **kwargs)
    log_z, std_error = log_evidence(idata)
    error = log_z - LOG_Z
    coverage = float(np.mean(np.abs(error) <= 2 * std_error))
    return coverage, float(np.sqrt(np.mean(std_error**2)) / error.std(ddof=1))


# Coverage of 60 runs at the nominal 95%: binomial sd sqrt(0.95 * 0.05 / 60) = 0.028.
COVERAGE_MIN = 0.95 - 3 * math.sqrt(0.95 * 0.05 / 60)


@pytest.mark.slow
def test_evidence_error_bar_is_calibrated():
    """Over 60 runs of 300 particles, log Z +- 2 SE covers the exact log Z about 95% of the time (measured:
    95%), and the reported SE matches the spread of log Z over runs (measured: 0.124 against 0.129)."""
    coverage, se_over_spread = evidence_calibration(KASS)
    assert coverage >= COVERAGE_MIN, coverage
    assert 0.7 < se_over_spread < 1.4, se_over_spread


@pytest.mark.slow
def test_evidence_error_bar_negative_control_systematic_resampling():
    """The same check flags the estimator under systematic resampling (measured: coverage 67%, the SE
    half the spread), which is why KASS resamples multinomially."""
    coverage, se_over_spread = evidence_calibration(SystematicKASS)
    assert coverage < COVERAGE_MIN, coverage
    assert se_over_spread < 0.7, se_over_spread


class IndependentStatesKASS(KASS):
    """Negative control for the waste-free error bar: the chains' states taken as independent draws."""

    def _run_chains(self):
        out = super()._run_chains()
        self._n_chains = self.draws
        return out


@pytest.mark.slow
def test_waste_free_evidence_error_bar_is_calibrated():
    """Waste-free, 60 runs of 300 particles in 30 chains of 10: log Z +- 2 SE covers the exact log Z
    about 95% of the time, and the SE matches the spread over runs (measured: coverage 92%, SE / spread
    0.84). Negative control: the same error bar with the chains' states taken as independent is too small
    (measured: coverage 67%, SE / spread 0.49)."""
    coverage, se_over_spread = evidence_calibration(KASS, waste_free=True, chain_length=10)
    assert coverage >= COVERAGE_MIN, coverage
    assert 0.7 < se_over_spread < 1.4, se_over_spread
    coverage, se_over_spread = evidence_calibration(IndependentStatesKASS, waste_free=True, chain_length=10)
    assert se_over_spread < 0.7, se_over_spread


def test_waste_free_stages():
    """105 particles in chains of 10: 11 chains (6 of 10 states, 5 of 9), so every stage after the
    initial draws costs 105 - 11 = 94 evaluations and 9 steps, but the last, whose chains make 5 moves
    (final_thinning's default) between kept states: 470 evaluations, 45 moves; the error bar is there."""
    _, _, idata = run_smc(linear_model(), KASS, chains=1, draws=105, waste_free=True, chain_length=10)
    evals, steps = stage_stats(idata, "likelihood_evals")[0], stage_stats(idata, "n_steps")[0]
    assert np.all(evals[:-1] == 94) and np.all(steps[:-1] == 9)
    assert evals[-1] == 5 * 94 and steps[-1] == 5 * 9
    assert np.isfinite(log_evidence(idata).std_error).all()
    attrs = idata.sample_stats.attrs
    assert attrs["waste_free"] == 1 and attrs["chain_length"] == 10 and attrs["final_thinning"] == 5
    assert attrs["n_steps_rule"] == "waste-free"


def test_waste_free_records_the_chains_it_ran():
    """chain_length=70 with 105 particles: M = 2 chains of 53 and 52 states, recorded as 53 (a new user
    read 600 for chains of 500), each stage but the last 103 evaluations and 52 moves."""
    _, _, idata = run_smc(linear_model(), KASS, chains=1, draws=105, waste_free=True, chain_length=70,
                          final_thinning=1)
    assert idata.sample_stats.attrs["chain_length"] == 53
    assert np.all(stage_stats(idata, "likelihood_evals")[0] == 103)
    assert np.all(stage_stats(idata, "n_steps")[0] == 52)


def test_final_thinning_moves_only_the_posterior_draws():
    """final_thinning changes the last stage alone: the same seed gives the same stages before it and
    the same log Z and error bar (read before the last moves), while the posterior draws differ and the
    last stage costs final_thinning times (N - M) evaluations. Without waste_free it is refused."""
    runs = {
        k: run_smc(linear_model(), KASS, chains=1, draws=105, waste_free=True, chain_length=10,
                   final_thinning=k)[2]
        for k in (1, 3)
    }
    one, three = (stage_stats(runs[k], "likelihood_evals")[0] for k in (1, 3))
    np.testing.assert_array_equal(one[:-1], three[:-1])
    assert one[-1] == 94 and three[-1] == 3 * 94
    z1, z3 = log_evidence(runs[1]), log_evidence(runs[3])
    assert z1.log_z == z3.log_z and z1.std_error == z3.std_error
    assert not np.array_equal(runs[1].posterior["w"].values, runs[3].posterior["w"].values)
    assert runs[1].sample_stats.attrs["final_thinning"] == 1
    with pytest.raises(ValueError, match="final_thinning=3 applies only to waste-free runs"):
        run_smc(linear_model(), KASS, chains=1, draws=105, final_thinning=3)


def test_waste_free_warns_when_the_chains_are_shorter_than_their_mixing():
    """Chains of 2 states cannot be 2.5 autocorrelation times long: the warning names the figure and the
    remedy. Chains of 25 on the conjugate model mix well within a chain, and say nothing."""
    with pytest.warns(UserWarning, match=r"chains of 2 states were too short.*chain_length of at least"):
        _, _, idata = run_smc(linear_model(), KASS, chains=1, draws=200, waste_free=True, chain_length=2)
    assert np.all(np.isfinite(stage_stats(idata, "autocorrelation_time")[0]))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*waste-free chains")
        _, _, idata = run_smc(linear_model(), KASS, chains=1, draws=500, waste_free=True)
    assert np.nanmax(stage_stats(idata, "autocorrelation_time")[0]) * 2.5 < 25


def test_waste_free_with_few_chains_a_stage_says_a_mode_can_be_lost():
    """Chains of 50 states among 200 particles are 4 chains a stage: a mode none starts in is lost (a new
    user's two equal-mass modes lost one at 5 chains), which the warning says, with the remedies. The
    automatic length keeps about 20 chains, and says nothing."""
    with pytest.warns(UserWarning, match=r"starts only 4 chains a stage.*waste_free=False"):
        run_smc(linear_model(), KASS, chains=1, draws=200, waste_free=True, chain_length=50)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*chains a stage")
        run_smc(linear_model(), KASS, chains=1, draws=500, waste_free=True)


def hierarchical_regression():
    """A new user's non-centred hierarchical regression: 6 groups of 15 rows, 10 parameters, log Z
    -99.543 (importance sampling from a Student-t fitted to NUTS draws, standard error 0.012)."""
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(6), 15)
    x = rng.normal(size=90)
    y = rng.normal(1, 0.5, 6)[groups] + 0.8 * x + rng.normal(0, 0.6, 90)
    with pm.Model() as model:
        mu_a, sa = pm.Normal("mu_a", 0, 2), pm.HalfNormal("sa", 1)
        za = pm.Normal("za", 0, 1, shape=6)
        b, s = pm.Normal("b", 0, 2), pm.HalfNormal("s", 1)
        pm.Normal("y", mu_a + sa * za[groups] + b * x, s, observed=y)
    return model


def test_waste_free_short_chains_are_judged_on_every_coordinate_too():
    """Waste-free chains of 100 (N = 2000) on the hierarchical regression: their log-likelihood's
    autocorrelation time (20 at most) passed the check, yet log Z came out 1.1 below the exact value
    (4.2 of its standard errors) at this seed; a coordinate's time (44) does not pass, and the warning
    names it by its variable (it said "coordinate 1 of the particles"). Before the coordinates counted,
    8 of 10 such runs (seeds 1-10) were silent, with log Z 0.5 low on average."""
    with pytest.warns(UserWarning, match=r"chains of 100 states were too short.*autocorrelation time of "
                      r"(mu_a|sa_log__|za\[\d\]|b|s_log__) was"):
        _, log_z, _ = run_smc(hierarchical_regression(), KASS, chains=1, draws=2000, seed=1, var="mu_a",
                              waste_free=True)
    assert log_z[0] < -99.543 - 1.0


def test_log_evidence_combines_chains():
    """Z_bar = mean of the chains' Z_hat; Var(Z_bar) = sum_c Z_c^2 (e^{s_c^2} - 1) / C^2, on the log scale."""
    result = LogEvidence(np.array([0.0, math.log(3.0)]), np.array([math.sqrt(math.log(2.0)), 0.0]))
    assert result.combined_log_z == pytest.approx(math.log(2.0))
    # Z_1 = 1 with relative variance 1, Z_2 = 3 with none: Var(Z_bar) = 1/4, relative 1/16.
    assert result.combined_std_error == pytest.approx(math.sqrt(math.log1p(1 / 16)))
    log_z, std_error = result  # unpacks as a pair
    assert log_z is result.log_z and std_error is result.std_error


def test_log_evidence_of_a_non_smc_inferencedata_says_so():
    """A user's pm.sample result (no log_marginal_likelihood) gets a ValueError naming pm.sample_smc,
    not xarray's KeyError; a statistic the SMC run does not record is refused with the list of those
    it does."""
    import arviz as az

    from pymc_kameleon.smc import log_evidence, stage_stats

    def inference_data(**groups):
        try:
            return az.from_dict(**groups)  # ArviZ 0.x
        except TypeError:
            return az.from_dict(groups)  # ArviZ 1

    mcmc = inference_data(posterior={"x": np.zeros((2, 5))}, sample_stats={"accept": np.ones((2, 5))})
    with pytest.raises(ValueError, match="not from pm.sample_smc.*hold: accept"):
        log_evidence(mcmc)
    # A new user's MultiTrace (return_inferencedata=False) was called an InferenceData holding nothing.
    with pytest.raises(TypeError, match="got a dict: sample with return_inferencedata=True"):
        log_evidence({"log_marginal_likelihood": np.zeros(3)})
    smc = inference_data(posterior={"x": np.zeros((2, 5))},
                         sample_stats={"log_marginal_likelihood": np.zeros((2, 3)), "beta": np.ones((2, 3))})
    with pytest.raises(ValueError, match="statistic 'bogus'; its sample_stats hold: beta, log_marg"):
        stage_stats(smc, "bogus")
    assert len(stage_stats(smc, "beta")) == 2


def test_log_evidence_of_pymc_kernels_has_no_error_bar():
    """PyMC's kernels record no genealogy: log Z as before, NaN standard errors, and a warning naming KASS."""
    with _narrow_mean_model():
        idata = pm.sample_smc(draws=100, kernel=IMH, chains=2, cores=1, random_seed=1, **SMC_KW)
    with pytest.warns(UserWarning, match="no particle genealogy.*KASS"):
        log_z, std_error = log_evidence(idata)
    assert np.all(np.isfinite(log_z)) and np.all(np.isnan(std_error))


def test_systematic_resampling_has_no_error_bar():
    """resampling="systematic" is PyMC's scheme: log Z as usual, NaN standard errors, and a warning;
    no warning that the (absent) error bar is too small, however few the lineages."""
    with warnings.catch_warnings(record=True) as sampling:
        warnings.simplefilter("always")
        _, _, idata = run_smc(linear_model(), KASS, chains=2, draws=100, n_steps=2, resampling="systematic")
    assert min(int(chain[-1]) for chain in stage_stats(idata, "distinct_ancestors")) < MIN_DISTINCT_ANCESTORS
    with pytest.warns(UserWarning, match="systematically.*resampling='multinomial'") as record:
        log_z, std_error = log_evidence(idata)
    assert np.all(np.isfinite(log_z)) and np.all(np.isnan(std_error))
    assert not [w for w in [*sampling, *record] if "descend from" in str(w.message)]
    with pytest.raises(ValueError, match="resampling must be one of"):
        run_smc(linear_model(), KASS, chains=1, draws=50, resampling="stratified")


def test_genealogy_stats_per_stage():
    """Each stage records the evidence's relative variance so far and its distinct Eve indices (at most N,
    never increasing)."""
    _, _, idata = run_smc(linear_model(), KASS, chains=1, draws=200, n_steps=2)
    ancestors = stage_stats(idata, "distinct_ancestors")[0]
    rel_var = stage_stats(idata, "evidence_relative_variance")[0]
    assert ancestors[0] == 200 and np.all(np.diff(ancestors) <= 0) and ancestors[-1] >= 2
    assert np.all(np.isfinite(rel_var)) and rel_var[-1] > 0


def test_subsample_and_step_rules():
    _, _, idata = run_smc(
        linear_model(), KASS, chains=1, draws=300, n_subsample=50, n_steps="acceptance", max_steps=6
    )
    np.testing.assert_array_equal(stage_stats(idata, "subsample_size")[0], 50)
    (n_steps,) = stage_stats(idata, "n_steps")
    assert np.all((n_steps >= 1) & (n_steps <= 6))


def test_factor_cache_does_not_change_the_draws(monkeypatch):
    """Keeping accepted proposals' factors between sweeps must give the draws of recomputing them."""
    import pymc_kameleon.smc.kass_moves as kass_moves

    cached, _, _ = run_smc(linear_model(), KASS, chains=1, draws=150, n_steps=4)
    monkeypatch.setattr(kass_moves, "_FACTOR_CACHE_BYTES", 0)
    recomputed, _, _ = run_smc(linear_model(), KASS, chains=1, draws=150, n_steps=4)
    np.testing.assert_allclose(cached, recomputed, rtol=1e-10)


def test_batched_and_looped_log_densities_agree():
    model = linear_model()
    batched = KASS(draws=50, model=model, random_seed=1)
    looped = KASS(draws=50, model=model, random_seed=1, batch_logp=False)
    for kernel in (batched, looped):
        kernel.initialize(None, np.random.default_rng(2))
    assert batched._use_batch and not looped._use_batch
    points = np.random.default_rng(3).normal(size=(1500, DIM)) * 3  # more than one batch of rows
    prior_b, lik_b = batched._evaluate(points)
    prior_l, lik_l = looped._evaluate(points)
    np.testing.assert_allclose(prior_b, prior_l, rtol=1e-10)
    np.testing.assert_allclose(lik_b, lik_l, rtol=1e-10)


def first_stage_family(kernel_class, draws, **options):
    """The proposal family a kernel fits at its first stage (run by hand, as pm.sample_smc does)."""
    kernel = kernel_class(draws=draws, model=linear_model(), random_seed=1, **options)
    kernel.initialize(None, np.random.default_rng(2))
    kernel.update_beta_and_weights()
    kernel.resample()
    kernel.tune()
    return kernel, kernel._family


def test_proposals_are_the_single_point_kameleon_proposals():
    """The stage's family (Kameleon in the particles' whitened coordinates) gives each particle the
    Gaussian density N(x_i, L Sigma_w(w_i) L^T) of the single-point proposal (the Kameleon component
    alone; the mixture with the global walk is tested in tests/core/test_smc_rejuvenation.py)."""
    default = first_stage_family(KASS, 100)[1].family
    assert isinstance(default, IndependenceMixture) and isinstance(default.family, GlobalWalkMixture)
    assert isinstance(first_stage_family(KASS, 100, independence_weight=0.0)[1].family, GlobalWalkMixture)
    kernel, family = first_stage_family(KASS, 100, am_weight=0.0, independence_weight=0.0)
    assert isinstance(family, WhitenedFamily) and isinstance(family.family, KameleonProposal)
    X = kernel.tempered_posterior[:5]
    P = X + np.random.default_rng(4).normal(size=X.shape)
    batch_logq = family.log_density_batch(P, X)
    for i in range(5):
        expected = multivariate_normal(X[i], family.covariance(X[i])).logpdf(P[i])
        assert batch_logq[i] == pytest.approx(expected, rel=1e-10)


def test_linear_kernel_is_a_global_covariance():
    """ASMC: gamma^2 C + 4 n nu^2 Cov(Z), with C the particles' covariance (gamma in whitened units)."""
    kernel, family = first_stage_family(ASMC, 200)
    X = kernel.tempered_posterior
    expected = family.gamma2 * np.cov(X, rowvar=False) + family.nu2 * 4 * len(X) * np.cov(
        X, rowvar=False, ddof=0
    )
    for x in X[:3]:
        np.testing.assert_allclose(family.covariance(x), expected, rtol=1e-8)


def test_non_vectorisable_model_falls_back_and_runs():
    """A black-box likelihood (perform only) still works; PyTensor loops over it if needed."""
    import pytensor.tensor as pt
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class BlackBoxLogLik(Op):
        def make_node(self, w):
            w = pt.as_tensor_variable(w)
            return Apply(self, [w], [pt.dscalar()])

        def perform(self, node, inputs, outputs):
            (w,) = inputs
            resid = Y_OBS - X_DESIGN @ w
            outputs[0][0] = np.asarray(norm.logpdf(resid, 0, NOISE_SD).sum())

    with pm.Model() as model:
        w = pm.Normal("w", 0, PRIOR_SD, shape=DIM)
        pm.Potential("lik", BlackBoxLogLik()(w))
    particles, log_z, _ = run_smc(model, KASS, chains=1, draws=300, n_steps=4)
    assert abs(log_z[0] - LOG_Z) < 1.0
    assert np.all(np.abs(particles[0].mean(0) - POST_MEAN) < 5 * np.sqrt(np.diag(POST_COV)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_nan_likelihood_at_proposals_is_said_once_and_minus_inf_is_not(bad):
    """A model whose likelihood is NaN in a small box inside the posterior (a failing ODE solver): the
    proposals there are rejected, which cuts the box out of the particles; KASS says so once, naming a
    point. +inf, rejected as NaN is, is said with it (it was not counted); -inf there (a zero density) is
    not reported."""
    import pytensor.tensor as pt

    with pm.Model() as model:
        w = pm.Normal("w", 0, PRIOR_SD, shape=DIM)
        pm.Normal("y", X_DESIGN @ w, NOISE_SD, observed=Y_OBS)
        box = (pt.abs(w[0] - POST_MEAN[0]) < 0.05) & (pt.abs(w[1] - POST_MEAN[1]) < 0.05)
        pm.Potential("solver", pt.switch(box, bad, 0.0))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        run_smc(model, KASS, chains=2, draws=300, n_steps=4)
    said = [str(w.message) for w in record if "log-likelihood was NaN or +inf at" in str(w.message)]
    if bad != -np.inf:
        assert len(said) == 2 and all("(the first: w=[" in s for s in said), said
        # Each chain counts its own proposals (one kernel serves both chains in turn: the second chain's
        # count once included the first's).
        counts = [int(re.search(r"of this chain's (\d+) proposals", s).group(1)) for s in said]
        assert max(counts) < 1.5 * min(counts), counts
    else:
        assert said == []


# ----------------------------------------------------------------- errors
# (invalid options, discrete variables, reproducibility and cores=2: tests/test_contract_smc.py)
def test_improper_prior_gives_a_clear_error():
    """With an initval, PyMC 'draws' a pm.Flat prior as that value (without one it raises), so every
    particle was the same point and KASS failed later: 'do not vary in every coordinate after
    resampling at beta=1'."""
    with pm.Model() as model:
        x = pm.Flat("x", shape=2, initval=np.zeros(2))
        pm.Normal("w", 0, 1)
        pm.Potential("lik", -0.5 * (x**2).sum())
    with pytest.raises(ValueError, match=r"identical in \['x'\].*improper prior such as pm.Flat"):
        run_smc(model, KASS, chains=1, draws=50, var="x")


def test_improper_prior_without_initval_gives_a_clear_error():
    """Without an initval PyMC's prior draw raised 'Cannot sample from flat variable' (a
    NotImplementedError from inside PyTensor); KASS names the variable and the remedies. Control: the
    same model with a proper prior samples."""
    def model(flat):
        with pm.Model() as m:
            x = pm.Flat("x") if flat else pm.Normal("x", 0, 10)
            pm.Normal("y", x, 1, observed=np.array([0.1, 0.2, 0.5]))
        return m

    message = r"KASS: SMC starts from draws of the prior, and \['x'\] has an improper prior.*start='smc'"
    with pytest.raises(ValueError, match=message):
        run_smc(model(True), KASS, chains=1, draws=50, var="x")
    run_smc(model(False), KASS, chains=1, draws=50, var="x")


def test_a_model_without_free_variables_gives_a_clear_error():
    """PyMC's message was 'Empty list of input variables'."""
    with pm.Model() as model:
        pm.Normal("y", 0, 1, observed=np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="KASS: this model has no free random variables"):
        KASS(draws=50, model=model)


def test_initval_on_a_proper_prior_is_named_as_the_cause():
    """PyMC's SMC starts every particle at a variable's initval (its gallery ODE examples set them): the
    error blamed an improper prior although the priors are proper, and told the user to change them."""
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1, initval=0.5)
        s = pm.HalfNormal("s", 1, initval=1.0)
        pm.Normal("b", 0, 1)  # no initval: drawn from its prior
        pm.Normal("y", a, s, observed=np.array([0.1, 0.3]))
    with pytest.raises(ValueError) as err:
        run_smc(model, KASS, chains=1, draws=50, var="a")
    message = str(err.value)
    assert "identical in ['a', 's_log__']" in message
    assert "['a', 's'] have `initval=`" in message and "Remove `initval=`" in message
    assert "improper" not in message and "proper prior" not in message


def test_initval_and_improper_prior_are_both_named():
    with pm.Model() as model:
        x = pm.Flat("x", initval=0.0)
        w = pm.Normal("w", 0, 1, initval=0.0)
        pm.Potential("lik", -0.5 * (x**2 + w**2))
    with pytest.raises(ValueError, match=r"\['w'\] has `initval=`.*\['x'\] has none \(an improper prior"):
        run_smc(model, KASS, chains=1, draws=50, var="x")


def test_collapsed_particles_give_a_clear_error():
    kernel = KASS(draws=30, model=linear_model(), random_seed=1)
    kernel.initialize(None, np.random.default_rng(2))
    kernel.tempered_posterior[:] = kernel.tempered_posterior[0]
    with pytest.raises(ValueError, match="identical after resampling"):
        kernel.tune()


# ----------------------------------------------------------------- models without a likelihood term
def prior_only_models():
    """PyMC's sampler-fixture model types, without observed data (``datalogp`` is a float32 0)."""
    with pm.Model() as uniform:
        pm.Uniform("x", 0, 1, shape=2)
    with pm.Model() as normal:
        pm.Normal("x", 0, 1, shape=3)
    with pm.Model() as student_t:
        pm.StudentT("x", nu=4, mu=0, sigma=1, shape=2)
    with pm.Model() as lkj:
        pm.LKJCholeskyCov("c", n=3, eta=2, sd_dist=pm.Exponential.dist(1.0), compute_corr=True)
    return {"uniform": uniform, "normal": normal, "student_t": student_t, "lkj": lkj}


@pytest.mark.parametrize("kernel", [KASS, ASMC])
def test_prior_only_model_samples_the_prior(kernel):
    """5000 particles with float32 weights made PyMC's systematic resampling index past the end
    (IndexError); in float64 they sum to 1. The particles are then exact prior draws: one stage at
    beta = 1 and log Z = 0."""
    with pm.Model() as model:
        pm.Normal("x", 0, 1, shape=2)
    particles, log_z, idata = run_smc(model, kernel, chains=1, draws=5000, var="x")
    assert idata.sample_stats["beta"].values.ravel()[-1] == 1
    assert log_z[0] == pytest.approx(0.0, abs=1e-12)
    se = 1 / math.sqrt(5000)
    assert np.all(np.abs(particles[0].mean(0)) < Z_MAX * 3 * se)  # resampled copies: a loose bound
    assert np.all(np.abs(particles[0].std(0) - 1) < 0.1)


@pytest.mark.parametrize("name", ["uniform", "normal", "student_t", "lkj"])
def test_vectorised_log_density_is_used_on_fixture_model_types(name, recwarn):
    """The vectorised datalogp of a model without observed terms is a scalar 0; it used to fail the
    shape check against PyMC's per-particle values and warn 'disagrees' on every run."""
    model = prior_only_models()[name]
    kernel = KASS(draws=40, model=model, random_seed=1)
    kernel.initialize(None, np.random.default_rng(2))
    assert kernel._use_batch
    assert not [w for w in recwarn if "vectorised" in str(w.message)]
    prior, loglik = kernel._evaluate(kernel.tempered_posterior[:5])
    assert prior.shape == loglik.shape == (5,) and np.all(loglik == 0)
    np.testing.assert_allclose(prior, kernel.prior_logp[:5], rtol=1e-10)


def test_a_parameter_check_that_the_vectorised_graph_pools_falls_back_and_says_why():
    """sigma = sqrt(mu + 1) is NaN for mu < -1: PyMC's check (sigma > 0) over a vectorised batch sets every
    particle to -inf when one is outside, so the kernel evaluates particle by particle; a new user was told
    'a random term?', which the model did not have."""
    import pytensor.tensor as pt

    y = np.random.default_rng(0).normal(1.0, 1.0, 20)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 3)
        pm.Normal("y", mu, pt.sqrt(mu + 1.0), observed=y)
    with pytest.warns(RuntimeWarning, match="parameter check such as sigma > 0"):
        _, log_z, _ = run_smc(model, KASS, chains=1, draws=200, var="mu")
    assert np.isfinite(log_z[0])


def test_stalled_moves_warn_once_per_chain_naming_the_stage():
    """A proposal scale frozen 1000x too wide accepts nothing: one warning per chain, naming the
    worst stage's acceptance and the sweep cap. Control: the default adapts and stays silent.
    (Without the independent draws, which do not depend on the scale and would still move.)"""
    message = r"barely mixed in \d+ of \d+ stages.*accepted 0\.00%.*max_steps=20"
    with pytest.warns(RuntimeWarning, match=message):
        run_smc(linear_model(), KASS, chains=1, draws=100, initial_scale=1e6, learning_rate=0.0, max_steps=20,
                independence_weight=0.0)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*barely mixed")
        run_smc(linear_model(), KASS, chains=2, draws=200)


@pytest.mark.slow
def test_particles_that_collapse_because_moves_stalled_say_so():
    """A frozen, 1e6-times too wide proposal on a thin ridge: no move is ever accepted, resampling
    collapses the particles, and the error names the stalled stage and the scale options.
    (Systematic resampling collapses them to one point; multinomial keeps a few distinct ones, and
    the run ends with the poor-mixing warning instead.) The ridge is 1e-6 wide: at 1e-3 the tempering
    steps refined below PyMC's 1e-6 resolution keep 81 distinct particles through the 12 stages, and the
    run ends with the poor-mixing warning."""
    with pm.Model() as model:
        u = pm.Normal("u", 0, 10)
        v = pm.Normal("v", 0, 10)
        pm.Normal("obs", u + v, 1e-6, observed=0.0)
    message = r"identical after resampling.*stopped mixing.*accepted 0\.00%.*learning_rate"
    with pytest.raises(ValueError, match=message):
        run_smc(
            model, KASS, chains=1, draws=1000, var="u", initial_scale=1e6, learning_rate=0.0,
            resampling="systematic", independence_weight=0.0,
        )


def test_stalled_moves_warn_in_the_session_with_parallel_chains():
    """cores=2 runs chains in worker processes, whose warnings never reach the session; the
    message travels back with the chain's results and is raised on arrival, once per chain."""
    with linear_model(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = pm.sample_smc(
            draws=100, kernel=KASS, chains=2, cores=2, random_seed=4, initial_scale=1e6,
            learning_rate=0.0, max_steps=10, independence_weight=0.0, **SMC_KW,
        )
    assert len([w for w in caught if "barely mixed" in str(w.message)]) == 2
    poor = idata.sample_stats.attrs["poorly_mixing_stages"]
    assert type(poor) is int and poor >= 1


def test_numpy_scalar_options_are_accepted_and_small_subsamples_refused():
    kernel = KASS(
        draws=20,
        model=linear_model(),
        target_accept=np.float32(0.3),
        learning_rate=np.float32(2.0),
        n_subsample=np.int64(50),
        max_steps=np.int64(10),
        move_probability=np.float64(0.9),
    )
    assert kernel.target_accept == pytest.approx(0.3) and type(kernel.target_accept) is float
    with pytest.raises(ValueError, match=r"n_subsample must be at least d \+ 1 = 3"):
        KASS(draws=20, model=linear_model(), n_subsample=2)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(correlation_threshold=0.05), r"correlation_threshold=0\.05 has no effect with n_steps='moved'"),
        (dict(n_steps=5, max_steps=10, move_probability=0.9),
         r"move_probability=0\.9, max_steps=10 have no effect with n_steps=5 \(a fixed number of sweeps\)"),
        (dict(waste_free=True, move_probability=0.9),
         r"move_probability=0\.9 has no effect with waste_free=True"),
        (dict(n_steps="correlation", move_probability=0.9), r"move_probability=0\.9 has no effect"),
    ],
)
def test_the_options_of_a_sweep_rule_not_in_use_are_refused(options, message):
    """KASS(correlation_threshold=0.05) with the default rule "moved" ignored the threshold silently."""
    with pytest.raises(ValueError, match=message + r".*drop (it|them), or choose the rule they set"):
        KASS(draws=200, model=linear_model(), **options)


@pytest.mark.parametrize(
    "options",
    [dict(n_steps="correlation", correlation_threshold=0.05, max_steps=20),
     dict(move_probability=0.9, max_steps=20), dict(n_steps=5, correlation_threshold=0.01)],
)
def test_the_options_of_the_sweep_rule_in_use_are_accepted(options):
    """Controls: a rule's own options, and another rule's at their defaults."""
    KASS(draws=200, model=linear_model(), **options)


def test_a_misspelt_option_names_the_kernel_and_the_closest_option():
    """pm.sample_smc(kernel=KASS, learnin_rate=3) failed inside PyMC, naming SMC_KERNEL and no option."""
    with linear_model():
        message = (r"KASS\(\) got an unexpected keyword argument 'learnin_rate' \(a kernel option of "
                   r"pm.sample_smc\); did you mean 'learning_rate'\?")
        with pytest.raises(TypeError, match=message):
            pm.sample_smc(kernel=KASS, draws=20, learnin_rate=3, progressbar=False)
        with pytest.raises(TypeError, match=r"unexpected keyword argument 'tresh'.*did you mean 'threshold'"):
            KASS(draws=20, tresh=0.5)  # PyMC's own SMC options are known too
        with pytest.raises(TypeError, match=r"argument 'executer'.*did you mean 'executor'"):
            KASS(draws=20, executer=None)
        KASS(draws=20, executor=None, threshold=0.6)  # a base class's option and PyMC's pass


@pytest.mark.parametrize("mixture, option", [("GlobalWalkMixture", "am_weight"),
                                             ("IndependenceMixture", "independence_weight")])
def test_mixture_weights_reach_every_stage(mixture, option, monkeypatch):
    """KASS(am_weight=0.3) moves with the GlobalWalkMixture, and KASS(independence_weight=0.3) with the
    IndependenceMixture, at every stage, and still finds the conjugate model's posterior and evidence;
    a weight of 1 is refused (it would never make a Kameleon move)."""
    from pymc_kameleon.core.smc import mixtures as smc_mixtures

    weights = []
    cls = getattr(smc_mixtures, mixture)
    real = cls.__init__

    def spy(self, family, *args):
        weights.append(args[0] if cls is smc_mixtures.IndependenceMixture else args[-1])
        real(self, family, *args)

    monkeypatch.setattr(cls, "__init__", spy)
    particles, log_z, idata = run_smc(linear_model(), KASS, chains=1, draws=1000, seed=3, **{option: 0.3})
    assert len(weights) == len(stage_stats(idata, "beta")[0]) and set(weights) == {0.3}
    assert np.all(np.abs(particles[0].mean(axis=0) - POST_MEAN) < 4 * np.sqrt(np.diag(POST_COV) / 100))
    assert abs(log_z[0] - LOG_Z) < 1.0
    with linear_model(), pytest.raises(ValueError, match=option):
        KASS(draws=200, **{option: 1.0})


def test_log_evidence_warns_when_the_genealogy_has_collapsed():
    """With fewer than 50 lineages the SE is too small (with a single one V is exactly 1, SE
    sqrt(log 2), whatever the true error): the warning names the chain, its count and a particle
    count that would give about 100 lineages; chains with many ancestors do not warn."""
    _, _, idata = run_smc(linear_model(), KASS, chains=1, draws=400, n_steps=2)
    assert stage_stats(idata, "distinct_ancestors")[0][-1] >= MIN_DISTINCT_ANCESTORS
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # many ancestors: no warning
        log_evidence(idata)
    collapsed = idata.copy()
    collapsed.sample_stats["distinct_ancestors"] = collapsed.sample_stats["distinct_ancestors"] * 0 + 20
    del collapsed.sample_stats.attrs[LINEAGES_CHECKED]  # samples that KASS did not check when sampled
    message = r"fewer than 50 of the initial draws \(chain 0: 20 of 400\).*about draws=2000 would give 100"
    with pytest.warns(UserWarning, match=message):
        log_evidence(collapsed)


def test_sampling_warns_when_the_final_particles_have_few_ancestors():
    """KASS warns at the end of sampling, naming the count, when the final particles descend from
    fewer than 50 initial draws (40 particles), and log_evidence does not repeat it; 400 particles with
    2 sweeps per stage do not warn."""
    expected = r"KASS: With draws=40 particles the final particles cannot descend from 50 distinct"
    with linear_model(), pytest.warns(UserWarning, match=expected) as record:
        idata = pm.sample_smc(draws=40, kernel=KASS, chains=1, cores=1, random_seed=2, **SMC_KW)
    (final,) = [int(chain[-1]) for chain in stage_stats(idata, "distinct_ancestors")]
    shown = [w for w in record if "of 40; each chain below 50 warns)" in str(w.message)]
    assert len(shown) == 1 and f"(in this chain {final} of 40;" in str(shown[0].message)
    # once per run: log_evidence does not say it again (it printed twice)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*descend from")
        log_evidence(idata)
    with linear_model(), warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*descend from")
        pm.sample_smc(draws=400, kernel=KASS, chains=1, cores=1, random_seed=2, n_steps=2, **SMC_KW)


def test_log_evidence_warns_when_chains_disagree_beyond_their_error_bars():
    """Chi-squared test of the chains' log Z against their SEs. Fixed inputs: log Z = (0, 0, 1) with
    SE 0.1 each gives chi-squared ((1/3)^2 + (1/3)^2 + (2/3)^2) / 0.01 = 66.7 on 2 degrees of
    freedom (reported); (0, 0.1, -0.1) gives 2.0 (p = 0.37, silent), as do NaN SEs. Four chains of
    one KASS run agree."""
    from pymc_kameleon.smc.results import _warn_disagreeing_chains

    with pytest.warns(UserWarning, match=r"chi-squared 66.7 on 2 degrees of freedom, p = 3.3e-15.*n_steps="):
        _warn_disagreeing_chains(np.array([0.0, 0.0, 1.0]), np.full(3, 0.1))
    # Waste-free runs have no n_steps (a new user followed that advice into an error).
    with pytest.warns(UserWarning, match=r"chain_length=.*waste_free=False") as record:
        _warn_disagreeing_chains(np.array([0.0, 0.0, 1.0]), np.full(3, 0.1), waste_free=True)
    assert "n_steps" not in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_disagreeing_chains(np.array([0.0, 0.1, -0.1]), np.full(3, 0.1))
        _warn_disagreeing_chains(np.array([0.0, 5.0]), np.full(2, np.nan))
        _, _, idata = run_smc(linear_model(), KASS, chains=4, draws=400, n_steps=2)
        log_evidence(idata)


def test_nan_likelihood_at_initial_particles_is_a_clear_error():
    """PyMC's tempering failed with 'cannot convert float NaN to integer' (found by a new-user check)."""
    import pytensor.tensor as pt

    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        pm.Potential("lik", pt.switch(mu > 1.0, np.nan, -0.5 * mu**2))
        message = r"log likelihood is NaN at \d+ of the 200 initial particles.*mu="
        with pytest.raises(ValueError, match=message):
            pm.sample_smc(200, kernel=KASS, chains=1, random_seed=1, progressbar=False)


def test_no_initial_particle_with_a_finite_likelihood_is_a_clear_error():
    """y ~ Uniform(0, theta) with a prior on theta far below the largest observation: every prior draw has
    likelihood 0, and PyMC's tempering failed with 'cannot convert float NaN to integer' (a new user's
    HalfNormal(3) prior, 0.15% of its mass above 9.5, had none of 1000 draws there at some seeds)."""
    y = np.array([1.2, 3.4, 9.5, 0.3, 5.5])
    with pm.Model():
        theta = pm.HalfNormal("theta", 0.5)  # P(theta > 9.5) is about 1e-80
        pm.Uniform("y", 0, theta, observed=y)
        message = (r"log-likelihood is -inf at all 200 initial particles \(draws from the prior; 0 of 200 "
                   r"have a finite likelihood\).*theta_log__=.*prior that covers the data.*draws=.*start=")
        with pytest.raises(ValueError, match=message):
            pm.sample_smc(200, kernel=KASS, chains=1, random_seed=1, progressbar=False)


def test_one_initial_particle_with_a_finite_likelihood_is_a_clear_error():
    """With one, the first reweighting made every particle a copy of it, and the run failed with 'All 1000
    particles are identical after resampling at beta=9.537e-07 ... Use more draws, or a higher threshold'
    (a higher threshold does not help); two are allowed."""
    y = np.array([1.2, 3.4, 9.5])
    with pm.Model() as model:
        theta = pm.HalfNormal("theta", 3.0)
        pm.Uniform("y", 0, theta, observed=y)
    for finite, raises in ((1, True), (2, False)):
        values = np.full(100, 1.0)
        values[:finite] = 12.0  # above max(y): a finite likelihood
        kernel = KASS(draws=100, model=model, start={"theta_log__": np.log(values)}, random_seed=1)
        kernel._initialize_kernel()
        if raises:
            message = r"finite at only 1 of the 100 initial particles \(from start=\).*prior that covers"
            with pytest.raises(ValueError, match=message):
                kernel.setup_kernel()
        else:
            kernel.setup_kernel()


def test_few_lineages_warning_says_log_z_can_be_far_off():
    """Below 10 lineages the warning says log Z can be off by many nats and names the measured remedies
    (1-7 lineages of 1000: errors to -66 nats; 4000 particles, 10-17 lineages: within 0.5); from 10 on
    it is the general one."""
    from pymc_kameleon.smc.results import FEW_LINEAGES, collapsed_genealogy_message

    severe = collapsed_genealogy_message("chain 0: 3 of 1000", 1000, 3)
    assert severe.startswith("The final particles descend from fewer than 50 of the initial draws (chain 0:")
    assert "off by many nats" in severe and "Rescale the predictors" in severe and "draws=4000" in severe
    general = collapsed_genealogy_message("chain 0: 10 of 1000", 1000, FEW_LINEAGES)
    assert "many nats" not in general and "draws=10000 would give 100" in general
    # Too few particles is no collapse: 2 particles, both surviving, had been blamed on the prior.
    too_few = collapsed_genealogy_message("chain 0: 2 of 2", 2, 2)
    assert too_few.startswith("With draws=2 particles the final particles cannot descend from 50")
    assert "draws=500 or more" in too_few and "Rescale" not in too_few
    assert "Rescale" in collapsed_genealogy_message("chain 0: 3 of 50", 50, 3)  # from 50 on, a collapse


@pytest.mark.parametrize("threshold", [0, 0.0, 1, 1.0, -0.1, 1.5, np.nan, "0.5", True, None])
def test_a_threshold_outside_0_1_is_refused(threshold):
    """threshold=0 ran one importance-sampling stage from the prior to the posterior without a word (PyMC
    accepts it; its target effective sample size is 0), and 1 never lets beta rise."""
    with linear_model():
        with pytest.raises(ValueError, match=r"KASS: threshold must be a number in \(0, 1\), got"):
            pm.sample_smc(200, kernel=KASS, chains=1, threshold=threshold, progressbar=False)


def test_a_threshold_that_keeps_no_particle_is_refused():
    """int(threshold * draws) = 0 is threshold 0 again."""
    with pytest.raises(ValueError, match=r"int\(0.001 \* 200\) = 0.*at least 0.005"):
        KASS(draws=200, model=linear_model(), threshold=0.001)
    KASS(draws=200, model=linear_model(), threshold=0.005)  # keeps 1: allowed


def _unstandardised_regression():
    """The benchmark's regression (intercept, age in years, income in dollars, an indicator; exact log Z)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "kass_unstandardised_regression.py"
    spec = importlib.util.spec_from_file_location("kass_unstandardised_regression", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    X, y = bench.make_data()
    return bench.build_model(X, y), bench.exact_log_z(X, y)


@pytest.mark.slow
def test_evidence_lag_warning_names_the_shortfall():
    """Too few sweeps on a funnel-shaped tempered target (n_steps=4 on the unstandardised regression, 500
    particles): log Z is about 6.7 low, and the particles' log-likelihood rises during the sweeps; the chain
    warns with the integrated rise and the remedy, and the per-stage rises are statistics. Control: the
    defaults on the conjugate model, whose particles keep up, stay silent."""
    model, exact = _unstandardised_regression()
    with pytest.warns(UserWarning, match="log Z is probably too low") as record:
        _, log_z, idata = run_smc(model, KASS, chains=1, draws=500, var="coef", n_steps=4)
    message = next(str(w.message) for w in record if "lagged behind" in str(w.message))
    assert "n_steps=50" in message and "independence_weight=0" in message
    assert log_z[0] < exact - 3
    rise, rise_se = stage_stats(idata, "loglik_rise")[0], stage_stats(idata, "loglik_rise_se")[0]
    step = np.diff(np.concatenate([[0.0], stage_stats(idata, "beta")[0]]))
    lag, lag_se = float(np.sum(step * rise)), math.sqrt(np.sum((step * rise_se) ** 2))
    assert lag > 3 * lag_se
    per_chain = evidence_lags(idata)  # the same, read per chain
    assert per_chain.lag == pytest.approx([lag]) and per_chain.std_error == pytest.approx([lag_se])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        run_smc(linear_model(), KASS, chains=1, draws=500)
    assert not [w for w in record if "lagged behind" in str(w.message)]


def test_evidence_lag_warning_rule():
    """Warn when the lag is beyond 3 of its SEs, half log Z's SE and 0.05 nats (hand-checked cases)."""
    from pymc_kameleon.smc.results import evidence_lag_message, lag_is_material

    assert lag_is_material(0.28, 0.08, 0.45)  # a new user's n_steps=1 run, 1.7 nats low in truth
    assert not lag_is_material(0.28, 0.1, 0.45)  # within 3 SE of nothing
    assert not lag_is_material(0.1, 0.01, 0.45)  # small beside the error bar
    assert lag_is_material(0.06, 0.01, np.nan) and not lag_is_material(0.04, 0.001, np.nan)
    assert not lag_is_material(np.nan, 0.1, 0.1)
    message = evidence_lag_message("KASS", 0.42, 0.08, 0.06, 5, 0.0123)
    assert message.startswith("KASS: log Z is probably too low by at least 0.42 +- 0.08; its standard error")
    assert "stage 5 (beta=0.0123)" in message


def test_final_climb_rule_pools_the_chains_last_rises():
    """The last stage's rises of the chains pooled (hand-computed): a new user's 43-parameter random-intercept
    model rose 0.66 +- 0.19 and 0.64 +- 0.24 at beta=1 with log Z 0.6 nats low: 4.4 pooled SEs, warned.
    One such chain alone (3.5 SEs) warns, and so does a fall beyond 3 SEs (200 particles on that model:
    survivors of a harsh reweighting ahead of their target, log Z 2 nats low). Controls: rises or falls of
    2 SEs do not, NaN is no rise."""
    from pymc_kameleon.smc.results import FINAL_RISE_Z, _warn_final_climb, final_climb

    rises = [np.array([2.6, 0.1, 0.66]), np.array([0.5, 0.2, 0.64])]
    ses = [np.array([4.0, 0.2, 0.19]), np.array([4.0, 0.2, 0.24])]
    rise, se = final_climb(rises, ses)
    assert rise == pytest.approx(0.65) and se == pytest.approx(math.hypot(0.19, 0.24) / 2)
    assert rise / se == pytest.approx(4.24, abs=0.01) and FINAL_RISE_Z == 3.0
    with pytest.warns(UserWarning, match=r"still climbing at the last stage.*0\.65 \+- 0\.15") as record:
        _warn_final_climb(rises, ses, np.array([0.096, 0.094]))
    assert "standard error (0.096) says" in str(record[0].message) and "n_steps=50" in str(record[0].message)
    with pytest.warns(UserWarning, match="still climbing"):
        _warn_final_climb(rises[:1], ses[:1], np.array([0.096]))
    with pytest.warns(UserWarning, match=r"falling at the last stage.*fell by 0\.79 \+- 0\.24"):
        _warn_final_climb([np.array([-0.79])], [np.array([0.24])], np.array([0.26]))
    assert final_climb([np.array([0.4])], [np.array([0.2])]) == (0.4, 0.2)
    assert np.isnan(final_climb([np.array([np.nan])], [np.array([0.2])])[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_final_climb([np.array([0.4])], [np.array([0.2])], np.array([0.1]))  # 2 SEs
        _warn_final_climb([np.array([-0.4])], [np.array([0.2])], np.array([0.1]))  # a fall of 2 SEs
        _warn_final_climb([np.array([np.nan])], [np.array([0.2])], np.array([0.1]))


def test_tempering_steps_below_pymcs_beta_resolution():
    """A slope on income in dollars (x about 36 000) with a N(0, 10^2) prior: log L varies by about 1e12
    nats over the prior draws, so PyMC's smallest step, beta = 2**-20 = 9.5e-7 (its bisection stops at a
    width of 1e-6), kept 1 of 300 particles and KASS failed with "All 300 particles are identical after
    resampling at beta=9.537e-07" (on the 3-d regression of a new user, with 1000 particles, log Z came
    out 2-66 nats low instead). The refined first step is about 1e-12, and log Z matches the conjugate
    evidence (measured errors 0.25, 0.33, 0.08 at seeds 0-2)."""
    rng = np.random.default_rng(3)
    x = rng.lognormal(10.5, 0.5, 20)
    y = 2e-5 * x + rng.normal(0, 1, 20)
    precision = x @ x + 1 / 100
    exact = -10 * math.log(2 * math.pi) - 0.5 * y @ y + 0.5 * (x @ y) ** 2 / precision - 0.5 * math.log(
        100 * precision
    )
    with pm.Model() as model:
        slope = pm.Normal("slope", 0, 10)
        pm.Normal("y", slope * x, 1, observed=y)
    _, log_z, idata = run_smc(model, KASS, chains=1, draws=300, seed=0, var="slope")
    assert stage_stats(idata, "beta")[0][0] < 1e-9
    assert abs(log_z[0] - exact) < 1.0


def test_evidence_lags_needs_the_statistics():
    """PyMC's own kernels record no loglik_rise: a clear error that names KASS."""
    with _narrow_mean_model():
        idata = pm.sample_smc(draws=100, kernel=IMH, chains=1, cores=1, random_seed=1, **SMC_KW)
    with pytest.raises(ValueError, match="no loglik_rise.*KASS"):
        evidence_lags(idata)


@pytest.mark.parametrize("returns_log", [False, True])
def test_an_estimator_returning_the_likelihood_not_its_log_is_named(returns_log):
    """A new user's estimator returned exp(log-likelihood): KAMH and GP-DA say so after tuning, KASS gave the
    prior (sd 0.95 against 0.63) without a word. The control returns the log, and nothing is said."""
    y = np.array([0.3, -1.2, 0.8])

    def log_lik(th):
        return -0.25 * ((y - th) ** 2).sum() - 1.5 * np.log(4 * np.pi)

    def estimator(th, rng):
        return float(log_lik(th) if returns_log else np.exp(log_lik(th)))

    with pm.Model():
        th = pm.Normal("th", 0, 1)
        PseudoMarginalPotential("lik", estimator, inputs=[th])
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            pm.sample_smc(draws=300, kernel=KASS, chains=1, random_seed=1, progressbar=False)
    said = [str(w.message) for w in record if "return its log" in str(w.message)]
    assert len(said) == (0 if returns_log else 1), said
