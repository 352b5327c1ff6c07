"""start="smc" (SMCStart): tuning starts from a KASS run's particles. One run serves a pooled population
(counted once, in chain 0's first logp_evals) and the same draws come out with cores=1 and cores=2;
tuning per chain, each chain runs its own. The map shape (transport_map=True) samples the right
posterior. Bad options and models the start cannot serve are named."""

import warnings

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import MLDA, GPDelayedAcceptanceMH, KameleonMetropolis, PseudoMarginalPotential, SMCStart
from pymc_kameleon.core.adaptation.transport_map import MapMixtureProposal
from pymc_kameleon.steps.smc_start import SMC_START_PARTICLES, resolve_start
from pymc_kameleon.testing import (
    SAMPLE_KW,
    assert_same_records,
    gaussian_data_model,
    latent_gaussian_log_estimator,
    mcse_of_mean,
    recorded,
)

PARTICLES = 200


def _sample(model, step, *, tune=120, draws=100, chains=3, cores=1, seed=5):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(step=step(), tune=tune, draws=draws, chains=chains, cores=cores, random_seed=seed,
                         discard_tuned_samples=False, **SAMPLE_KW)


def _flat_banana() -> pm.Model:
    """x ~ Flat(2) with log density -x0^2 / 2 - (x1 - x0^2)^2 / (2 * 0.25): x0 ~ N(0, 1), x1 | x0 ~ N(x0^2,
    0.25), so E x = (0, 1), sd = (1, 1.5), and the density integrates to 2 pi * 0.5."""
    with pm.Model() as model:
        x = pm.Flat("x", shape=2)
        pm.Potential("banana", -0.5 * x[0] ** 2 - 0.5 * (x[1] - x[0] ** 2) ** 2 / 0.25)
    return model


def _first_evals(idata) -> np.ndarray:
    return idata.warmup_sample_stats["logp_evals"].values[:, 0]


@pytest.mark.parametrize("cls", [KameleonMetropolis, GPDelayedAcceptanceMH])
def test_one_run_serves_the_population_and_is_counted_once(cls):
    """Pooled: chain 0's first step counts the run's evaluations (the particles and every sweep); the
    other chains start at particles without evaluating anything more than a step does."""
    captured = {}
    def step():
        return captured.setdefault("step", cls(start=SMCStart(PARTICLES)))

    idata = _sample(gaussian_data_model(), step)
    first = _first_evals(idata)
    assert first[0] > PARTICLES and (first[1:] <= 3).all(), first
    adaptation = captured["step"]._last_run()._start_adaptation
    assert adaptation.state.scan_steps == 0  # the particles took the coordinate scan's place
    starts = idata.warmup_posterior["mu"].values[:, 0]
    assert len({tuple(row) for row in starts}) == 3
    result = captured["step"].smc_start_result
    assert result.particles.shape == (PARTICLES, 2) and first[0] >= result.evaluations
    # The map where the step offers it (SMCStart's default), the step's own proposal elsewhere.
    uses_map = isinstance(captured["step"]._last_run()._chain.__dict__.get("proposal"), MapMixtureProposal)
    assert uses_map == (cls is KameleonMetropolis)


def test_the_run_says_what_it_cost_and_its_log_evidence(caplog):
    """One line in PyMC's log: particles, stages, evaluations, where they are counted, the log evidence;
    exp(log Z) of the conjugate model is known: y_i ~ N(mu, I), mu ~ N(0, 10^2 I)."""
    from scipy.stats import multivariate_normal

    made = []

    def step():
        made.append(KameleonMetropolis(start=SMCStart(500)))
        return made[-1]

    with caplog.at_level("INFO", logger="pymc"):
        _sample(gaussian_data_model(), step, tune=20, draws=10)
    said = [r.getMessage() for r in caplog.records if "SMC run" in r.getMessage()]
    assert len(said) == 1 and "500 particles" in said[0] and "cumulative_logp_evals" in said[0], said
    result = made[0].smc_start_result
    y = np.random.default_rng(0).normal([0.5, -1.0], 1.0, size=(30, 2))
    exact = sum(multivariate_normal(np.zeros(30), np.eye(30) + 100.0).logpdf(y[:, k]) for k in range(2))
    assert abs(result.log_evidence - exact) < 4 * result.log_evidence_se + 0.1, (result, exact)
    assert f"{result.evaluations:,}" in said[0]
    assert result.warnings == () and "KASS warned" not in said[0]


def test_kass_warnings_are_kept_and_the_log_line_says_so(caplog):
    """KASS's warnings are not shown in the session (the start needs the particles), but the log line that
    prints the log evidence says there were some, and the result keeps them: a new user read a log evidence
    2.9 combined SEs off a second run's while KASS's bias warning had been silenced."""
    few_chains = SMCStart(PARTICLES, kernel_options={"waste_free": True, "chain_length": 100})
    with caplog.at_level("INFO", logger="pymc"), warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        result = few_chains.run(gaussian_data_model(), ["mu"], seed=1)
    assert any("waste-free" in w for w in result.warnings), result.warnings
    assert not [w for w in shown if "waste-free" in str(w.message)]
    said = [r.getMessage() for r in caplog.records if "SMC run" in r.getMessage()]
    assert len(said) == 1 and f"KASS warned {len(result.warnings)} time(s)" in said[0], said


@pytest.mark.parametrize("through_map", [True, False])
def test_map_moves_are_marked_and_have_no_kameleon_proposal_to_plot(through_map):
    """The transport_map statistic marks the map's moves (its independence draws are independence moves
    too); such a chain has no Kameleon proposal, and rebuilding or plotting one says why."""
    from pymc_kameleon import rebuild_proposal
    from pymc_kameleon.plots import plot_proposal_contours

    captured = {}
    idata = _sample(gaussian_data_model(), lambda: captured.setdefault(
        "step", KameleonMetropolis(start=SMCStart(PARTICLES, transport_map=through_map))), chains=2)
    stats = idata.sample_stats
    assert bool(stats["transport_map"].values.all()) is through_map
    assert not stats["transport_map"].values.any() or 0.3 < stats["independence"].values.mean() < 0.7
    if through_map:
        refused = r"Chain 1 moved through the transport map .* \(start='smc'\)"
        with gaussian_data_model(), pytest.raises(ValueError, match=refused):
            rebuild_proposal(idata, chain=1)
        with pytest.raises(ValueError, match="KameleonMetropolis's chain moved through the transport map"):
            plot_proposal_contours(captured["step"])
    else:
        assert captured["step"].transport_map is None


def test_the_run_counts_every_evaluation():
    """A black-box likelihood counts its calls: the run's evaluations are all of them (KASS's check of its
    vectorised log density at 8 particles was missing)."""
    import pytensor.tensor as pt
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    calls = []

    class CountedLikelihood(Op):
        def make_node(self, x):
            x = pt.as_tensor_variable(x)
            return Apply(self, [x], [pt.dscalar()])

        def perform(self, node, inputs, outputs):
            calls.append(1)
            outputs[0][0] = np.asarray(-2.0 * np.sum((inputs[0] - 1.0) ** 2))

    with pm.Model() as model:
        x = pm.Normal("x", 0, 3, shape=2)
        pm.Potential("likelihood", CountedLikelihood()(x))
    result = SMCStart(PARTICLES).run(model, ["x"], seed=3)
    assert result.evaluations == len(calls) > PARTICLES


@pytest.mark.parametrize("cls", [KameleonMetropolis, GPDelayedAcceptanceMH])
def test_one_chain_runs_once(cls, caplog):
    """Found by a new user: with chains=1 PyMC still links a population (of one), whose chain 0 ran the
    SMC, and the chain's first step ran a second one, of which alone the cost was counted."""
    made = []

    def step():
        made.append(cls(start=SMCStart(PARTICLES)))
        return made[-1]

    with caplog.at_level("INFO", logger="pymc"):
        idata = _sample(gaussian_data_model(), step, chains=1)
    said = [r.getMessage() for r in caplog.records if "SMC run" in r.getMessage()]
    assert len(said) == 1, said
    evaluations = made[0].smc_start_result.evaluations
    assert evaluations <= _first_evals(idata)[0] <= evaluations + 3


def test_tuning_per_chain_each_chain_runs_and_counts_its_own():
    def step():
        return KameleonMetropolis(start=SMCStart(PARTICLES), tuning="per_chain")

    idata = _sample(gaussian_data_model(), step, chains=2)
    first = _first_evals(idata)
    assert (first > PARTICLES).all(), first
    assert resolve_start("smc") == SMCStart(particles=SMC_START_PARTICLES) and SMC_START_PARTICLES == 2000


@pytest.mark.slow
def test_the_population_gives_the_same_draws_with_cores_1_and_2():
    """The run is made where PyMC links the chains, before they go to their processes."""
    def step():
        return KameleonMetropolis(start=SMCStart(PARTICLES, transport_map=True))

    one = recorded(_sample(gaussian_data_model(), step, tune=60, draws=40, cores=1))
    two = recorded(_sample(gaussian_data_model(), step, tune=60, draws=40, cores=2))
    assert_same_records(one, two)


@pytest.mark.slow
def test_the_map_shape_samples_the_exact_posterior():
    """mu ~ N(0, 10^2 I), 30 observations y_i ~ N(mu, I): the posterior is N(sum(y) / 30.01, I / 30.01).
    Through the map fitted to the particles, 4 chains x (500 + 3000): every mean within 4 MCSE of the
    exact one and every variance within 10%; the proposal is the map's."""
    model = gaussian_data_model()
    captured = {}
    idata = _sample(model, lambda: captured.setdefault("step", KameleonMetropolis(
        start=SMCStart(1000, transport_map=True))), tune=500, draws=3000, chains=4, seed=11)
    assert isinstance(captured["step"].scale_free_proposal, MapMixtureProposal)
    y = np.random.default_rng(0).normal([0.5, -1.0], 1.0, size=(30, 2))  # gaussian_data_model()'s data
    precision = 30 + 1 / 100
    exact_mean = y.sum(axis=0) / precision
    draws = idata.posterior["mu"].values
    for k in range(2):
        z = (draws[..., k].mean() - exact_mean[k]) / mcse_of_mean(draws[..., k])
        assert abs(z) < 4, (k, z)
        assert draws[..., k].var() * precision == pytest.approx(1.0, rel=0.1)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="at least 100"):
        SMCStart(particles=50)
    with pytest.raises(TypeError, match="integer"):
        SMCStart(particles=2000.0)
    with pytest.raises(ValueError, match="draws"):
        SMCStart(kernel_options={"draws": 10})
    with pytest.raises(TypeError, match="dict"):
        SMCStart(kernel_options=[("n_steps", 2)])
    misspelt = r"KASS\(\) got .* 'n_subsampel' \(in SMCStart's kernel_options\); did you mean 'n_subsample'\?"
    with pytest.raises(TypeError, match=misspelt):
        SMCStart(kernel_options={"n_subsampel": 100})
    with pytest.raises(TypeError, match="True, False or None"):
        SMCStart(transport_map="yes")
    with pytest.raises(ValueError, match=r"reference must be one of \(None, 'prior', 'mode'\)"):
        SMCStart(reference="laplace")
    with gaussian_data_model():
        with pytest.raises(ValueError, match="'smc'"):
            KameleonMetropolis(start="smc-start")
        with pytest.raises(ValueError, match="KameleonMetropolis only"):
            GPDelayedAcceptanceMH(start=SMCStart(transport_map=True))


def test_models_the_start_cannot_serve_are_named():
    with pm.Model():
        a = pm.Normal("a")
        b = pm.Normal("b")
        pm.Normal("y", a + b, 1.0, observed=[0.1, 0.2])
        with pytest.raises(ValueError, match=r"\['b'\] is sampled by another step"):
            KameleonMetropolis([a], start="smc")
    with pm.Model():
        theta = pm.Normal("theta", 0.0, 1.0, shape=2)
        PseudoMarginalPotential("lik", latent_gaussian_log_estimator(), [theta])
        with pytest.raises(ValueError, match="PseudoMarginalPotential"):
            KameleonMetropolis(start="smc")
    with pm.Model():
        k = pm.Poisson("k", 3.0)
        mu = pm.Normal("mu")
        pm.Normal("y", mu + k, 1.0, observed=[3.1])
        with pytest.raises(ValueError, match=r"\['k'\] is discrete"):
            KameleonMetropolis([mu], start="smc")
    # From the prior, as asked, where it cannot be drawn from (by default these temper from the mode).
    from_prior = SMCStart(reference="prior")
    with _flat_banana():
        with pytest.raises(ValueError, match=r"\['x'\] has an improper prior.*reference='mode'"):
            KameleonMetropolis(start=from_prior)
    coarse = gaussian_data_model(n=3)
    with gaussian_data_model():
        with pytest.raises(ValueError, match="not available for this step"):
            MLDA(coarse_models=[coarse], start="smc")


def test_a_failed_run_says_whose_it_was_and_what_to_try():
    """An observation that no prior draw allows (y = 10 under Uniform(0, theta), theta ~ HalfNormal(0.01)):
    KASS's own error (no initial particle with a finite likelihood), which the step passes on with its
    name and the remedies. (PyMC's start, theta = 20, is finite: the run draws from the prior.)"""
    with pm.Model() as model:
        theta = pm.HalfNormal("theta", 0.01, initval=20.0)
        pm.Uniform("y", 0.0, theta, observed=10.0)
    failed = (r"KameleonMetropolis: the SMC run of start='smc' failed: .*finite likelihood.* "
              r"Try.*SMCStart\(reference='mode'\)")
    with pytest.raises(ValueError, match=failed):
        _sample(model, lambda: KameleonMetropolis(start=SMCStart(PARTICLES)), tune=10, draws=5)


def test_a_posterior_a_million_times_narrower_than_its_prior_starts():
    """A posterior sd of 1e-4 under a N(0, 10^6) prior (the benchmarks' normals-5d-scales): the particles
    collapsed at PyMC's smallest tempering step (9.5e-7, an ESS of a few), and the run failed; KASS now
    refines that step, and the chains start at the posterior (mean 0.3, sd 1e-4, in x[0])."""
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 1e6, shape=2)
        pm.Normal("y", x, np.array([1e-4, 1.0]), observed=np.array([0.3, 0.1]))
    idata = _sample(model, lambda: KameleonMetropolis(start=SMCStart(PARTICLES)), tune=10, draws=5)
    assert np.abs(idata.posterior["x"].values[..., 0] - 0.3).max() < 1e-3


@pytest.mark.parametrize("tuning", ["pooled", "per_chain"])
def test_initvals_the_start_does_not_use_are_said(tuning):
    """Each chain starts at a particle, so pm.sample's initvals are not used: a new user's were set aside
    with nothing said. Said once, naming the remedy; the first draws are particles, not the initvals.
    Without initvals (the control) nothing is said."""
    starts = {"mu": np.array([5.0, 5.0])}
    for initvals in (starts, None):
        with gaussian_data_model(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            idata = pm.sample(step=KameleonMetropolis(start=SMCStart(PARTICLES), tuning=tuning), tune=60,
                              draws=10, chains=2, cores=1, random_seed=3, initvals=initvals,
                              discard_tuned_samples=False, **SAMPLE_KW)
        said = [str(w.message) for w in caught if "initvals are not used" in str(w.message)]
        assert len(said) == (1 if initvals else 0), said
        if initvals:
            assert "pass start='initial_point'" in said[0]
            assert (np.abs(idata.warmup_posterior["mu"].values[:, 0] - 5.0) > 1e-6).all()


def test_without_tuning_there_is_no_run():
    """tune=0: the chains sample from where PyMC starts them, and no SMC run is made or counted."""
    made = []

    def step():
        made.append(KameleonMetropolis(start=SMCStart(PARTICLES)))
        return made[-1]

    idata = _sample(gaussian_data_model(), step, tune=0, draws=5)
    assert (idata.sample_stats["logp_evals"].values <= 3).all()
    assert "result" not in made[0]._smc_start  # with tune=1 it is there (the pooled test above)


def test_an_improper_prior_tempers_from_the_mode(caplog):
    """pm.Flat: the run tempers from a wide Gaussian around the mode, says so, names its constant (no
    evidence under an improper prior), and counts the mode search's evaluations with the run's. An initval
    on a proper prior is set aside for a run from the prior (PyMC's SMC would start every particle at it)
    and put back after."""
    made = []

    def step():
        made.append(KameleonMetropolis(start=SMCStart(PARTICLES)))
        return made[-1]

    with caplog.at_level("INFO", logger="pymc"):
        idata = _sample(_flat_banana(), step, tune=20, draws=10)
    said = [r.getMessage() for r in caplog.records if "SMC run" in r.getMessage()]
    assert len(said) == 1 and "tempered from a wide Gaussian around the mode" in said[0], said
    assert "log normalising constant" in said[0] and "log evidence" not in said[0]
    result = made[0].smc_start_result
    assert result.reference == "mode" and result.particles.shape == (PARTICLES, 2)
    assert _first_evals(idata)[0] >= result.evaluations > PARTICLES
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0, shape=2, initval=np.array([-0.5, 0.5]))
        pm.Normal("y", mu.sum(), 1.0, observed=[0.3])
    assert SMCStart().reference_for(model) == "prior" and SMCStart().reference_for(_flat_banana()) == "mode"
    result = SMCStart(PARTICLES).run(model, ["mu"], seed=2)
    assert result.reference == "prior" and len(np.unique(result.particles, axis=0)) > PARTICLES // 2
    np.testing.assert_array_equal(model.rvs_to_initial_values[model["mu"]], [-0.5, 0.5])


def test_an_ordered_variable_tempers_from_the_mode_by_default():
    """PyMC's SMC draws an ordered variable's elements out of order, where its transform is NaN: a new
    user's ordinal regression failed with start='smc' (NaN log prior at 1915 of 2000 particles). Its run
    now tempers from around the mode, and the cutpoints come out in order. Control: reference='prior' on
    the same model is the error that names the ordered variable."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=150)
    y = np.searchsorted(np.array([-1.5, -0.3, 0.8, 2.0]), 1.2 * x + rng.logistic(size=150))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2)
        cutpoints = pm.Normal("cutpoints", 0, 3, shape=4, transform=pm.distributions.transforms.ordered,
                              initval=np.array([-2.0, -0.5, 0.5, 2.0]))
        pm.OrderedLogistic("y", eta=beta * x, cutpoints=cutpoints, observed=y)
    assert SMCStart().reference_for(model) == "mode"
    result = SMCStart(PARTICLES).run(model, ["beta", "cutpoints"], seed=2)
    assert result.reference == "mode" and np.all(np.isfinite(result.particles))
    with pytest.raises(ValueError, match=r"\['cutpoints_ordered__'\] has PyMC's ordered transform"):
        SMCStart(PARTICLES, reference="prior").run(model, ["beta", "cutpoints"], seed=2)


def test_a_density_without_a_mode_is_an_error_that_says_why():
    """The mode search of an improper model can run where the density is unbounded: a centred hierarchy's
    funnel (Flat mu), or a HalfFlat scale with data that a location fits exactly (a parameter check there
    is -inf, not PyMC's error). A new user's funnel sampled a collapsed posterior (tau 1e-7 against NUTS's
    1.7) with only a mixing warning; now the step says which coordinates and what to do."""
    with pm.Model() as funnel:
        mu = pm.Flat("mu")
        tau = pm.HalfNormal("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, shape=8)
        pm.Normal("y", theta, 15.0, observed=np.array([28.0, 8, -3, 7, -1, 1, 18, 12]))
    with pm.Model() as exact_fit:
        mu = pm.Flat("mu")
        s = pm.HalfFlat("s")
        pm.Normal("y", mu, s, observed=[1.0, 1.0, 1.0])
    for model, names in ((funnel, ["mu", "tau", "theta"]), (exact_fit, ["mu", "s"])):
        with pytest.raises(ValueError, match=r"KameleonMetropolis: start='smc' tempers from the density's "
                           r"mode .*\(along .*\)\. Give the variables proper priors"):
            SMCStart(PARTICLES).run(model, names, seed=1, step_name="KameleonMetropolis")


def test_the_tempered_model_has_the_model_s_log_density_in_the_step_s_coordinates():
    """Transformed variables (a HalfNormal's log), a vector and a scalar, raveled in the step's order: the
    graph of the coordinates equals the model's log density (Jacobians included) at the same point."""
    import pytensor
    from pymc.blocking import DictToArrayBijection

    from pymc_kameleon.steps.smc_start import _log_density_of_coordinates

    with pm.Model() as model:
        s = pm.HalfNormal("s", 2.0)
        b = pm.Normal("b", 0.0, 1.0, shape=3)
        a = pm.Flat("a")
        pm.Normal("y", a + b.sum(), s, observed=[0.4, 1.1])
    names = ["b", "s", "a"]
    log_density, x = _log_density_of_coordinates(model, names)
    density = pytensor.function([x], log_density)
    logp = model.compile_logp()
    rng = np.random.default_rng(0)
    for _ in range(3):
        point = {"b": rng.normal(size=3), "s_log__": np.array(rng.normal()), "a": np.array(rng.normal())}
        raveled = DictToArrayBijection.map({k: point[k] for k in ["b", "s_log__", "a"]}).data
        assert float(density(raveled)) == pytest.approx(float(logp(point)), rel=1e-12)


def _flat_gaussian(mean, sd) -> pm.Model:
    with pm.Model() as model:
        x = pm.Flat("x", shape=len(mean))
        pm.Potential("gaussian", pm.logp(pm.Normal.dist(mean, sd), x).sum())
    return model


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True])
def test_particles_tempered_from_the_mode_follow_the_posterior(broken, monkeypatch):
    """x ~ N((3, -1), diag(0.01, 100)^2) under a Flat prior: the 1000 particles' means are within 0.15 sd
    and their variances within 15% (about 3 standard errors of a variance at an ESS of 1000). Negative
    control: a reference as narrow as the posterior that the tempered model forgets to divide out, so
    that the particles follow posterior x reference (half the variance): the same checks fail."""
    from pymc_kameleon.core.smc import reference as references
    from pymc_kameleon.steps import smc_start

    if broken:
        monkeypatch.setattr(references, "REFERENCE_WIDTH", 1.0)
        monkeypatch.setattr(smc_start, "_reference_log_density", lambda found, coordinates: 0.0)
    mean, sd = np.array([3.0, -1.0]), np.array([0.01, 100.0])
    result = SMCStart(1000).run(_flat_gaussian(mean, sd), ["x"], seed=4)
    particles = result.particles
    mean_ok = np.all(np.abs(particles.mean(axis=0) - mean) < 0.15 * sd)
    var_ok = np.all(np.abs(particles.var(axis=0) / sd**2 - 1) < 0.15)
    assert (mean_ok and var_ok) is not broken, (particles.mean(axis=0), particles.std(axis=0))
    if not broken:
        # The density integrates to 1: the run's log normalising constant is 0.
        assert abs(result.log_evidence) < 3 * result.log_evidence_se + 0.05, result


@pytest.mark.slow
def test_a_flat_banana_from_the_mode_samples_the_exact_posterior():
    """KAMH with start="smc" (from the mode, through the map) on the Flat banana, 4 chains x (500 + 3000):
    every mean within 4 MCSE of (0, 1), every variance within 10% of (1, 2.25), and the run's log
    normalising constant within 4 SE (+0.1) of log(pi)."""
    captured = {}
    idata = _sample(_flat_banana(), lambda: captured.setdefault("step", KameleonMetropolis(
        start=SMCStart(1000))), tune=500, draws=3000, chains=4, seed=12)
    result = captured["step"].smc_start_result
    assert abs(result.log_evidence - np.log(np.pi)) < 4 * result.log_evidence_se + 0.1, result
    draws = idata.posterior["x"].values
    for k, (mean, var) in enumerate([(0.0, 1.0), (1.0, 2.25)]):
        z = (draws[..., k].mean() - mean) / mcse_of_mean(draws[..., k])
        assert abs(z) < 4, (k, z)
        assert draws[..., k].var() == pytest.approx(var, rel=0.1), k
