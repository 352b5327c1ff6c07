"""The contract every step of ours keeps, parametrised over the steps: discrete variables refused,
invalid options named, a non-finite start a clear error, per-chain state reset (PyMC 5's reset_tuning,
PyMC 6's setup_chain), same seed same draws, a pickled step and cores=2 drawing what sequential chains
draw, on a plain model and on a pseudo-marginal one; and what they share with PyMC's own steps: the
`lp` statistic, options typed as NumPy scalars, warnings from worker processes. DiscreteMetropolis keeps
the contracts that apply to a step of discrete variables, on models of its own (a Poisson variable,
with a likelihood or beside a PseudoMarginalPotential)."""

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable

import cloudpickle
import numpy as np
import pymc as pm
import pytest
from pymc.step_methods.compound import Competence
from scipy.stats import norm

from pymc_kameleon import (
    MLDA,
    DiscreteMetropolis,
    GPDelayedAcceptanceMALA,
    GPDelayedAcceptanceMH,
    KameleonMetropolis,
    KameleonWarning,
    PseudoMarginalPotential,
)
from pymc_kameleon.core.adaptation.scan import scan_steps_for
from pymc_kameleon.core.starts import SEARCH_MAX_EVALS
from pymc_kameleon.steps.estimate_noise import NOISE_ESTIMATES
from pymc_kameleon.steps.reporting import RecentRates
from pymc_kameleon.steps.starts import SEARCH_CANDIDATES
from pymc_kameleon.testing import (
    SAMPLE_KW,
    assert_same_records,
    gaussian_data_model,
    latent_gaussian_model,
    recorded,
    run_steps,
    sample_with_seed,
    start_chain,
    tuning_refresh_steps,
)

STEPS = [KameleonMetropolis, GPDelayedAcceptanceMH, GPDelayedAcceptanceMALA]


def regression_model():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        s = pm.HalfNormal("s", 1.0)  # a transformed variable: lp is in the log-scale coordinates
        pm.Normal("y", b[0] + b[1] * np.arange(4.0), s, observed=[0.1, 0.6, 0.9, 1.7])
    return model


# DiscreteMetropolis's models: one integer k ~ Poisson(20) and observations N(k, 2^2). The posterior
# (sd about 1) lies 20 sds above 0, so no jump leaves the support (where no estimate would be made).
DISCRETE_Y = np.array([19.0, 22.5, 20.5, 18.0])


def discrete_model():
    with pm.Model() as model:
        k = pm.Poisson("k", 20.0)
        pm.Normal("y", k, 2.0, observed=DISCRETE_Y)
    return model


def discrete_log_estimate(k, rng):
    """log p(y | k) plus log-normal noise of mean 1 on the likelihood: unbiased and noisy."""
    return float(norm.logpdf(DISCRETE_Y, k, 2.0).sum() - 0.125 + 0.5 * rng.standard_normal())


def discrete_pseudo_marginal_model():
    with pm.Model() as model:
        k = pm.Poisson("k", 20.0)
        PseudoMarginalPotential("lik", discrete_log_estimate, inputs=[k])
    return model


def _model_for(cls):
    return discrete_model() if cls is DiscreteMetropolis else regression_model()


@pytest.mark.parametrize("cls", STEPS)
def test_lp_is_the_model_log_density_of_each_draw(cls):
    """PyMC's steps report `model_logp`, which InferenceData calls `lp`; ours too, at every draw.
    Negative control: the log density of the previous draw differs wherever the chain moved."""
    model = regression_model()
    with model:
        idata = pm.sample(step=cls(), tune=300, draws=60, chains=1, random_seed=1, **SAMPLE_KW)
    logp = model.compile_logp()
    post = idata.posterior.isel(chain=0)
    expected = np.array(
        [logp({"b": post.b.values[i], "s_log__": np.log(post.s.values[i])}) for i in range(60)]
    )
    lp = idata.sample_stats["lp"].values[0]
    np.testing.assert_allclose(lp, expected, rtol=1e-10, atol=1e-10)
    moved = np.flatnonzero(np.any(np.diff(post.b.values, axis=0) != 0, axis=1)) + 1
    assert moved.size > 0 and np.all(lp[moved] != lp[moved - 1])


def test_lp_in_a_compound_step_is_the_last_steps():
    """PyMC keeps the last step's `model_logp` in a CompoundStep (one column per step that declares
    it; the others are 0); with ours last it is the joint log density after both blocks moved."""
    model = regression_model()
    with model:
        step = [pm.NUTS([model["s"]]), KameleonMetropolis([model["b"]])]
        idata = pm.sample(step=step, tune=300, draws=30, chains=1, random_seed=2, **SAMPLE_KW)
    logp = model.compile_logp()
    post = idata.posterior.isel(chain=0)
    expected = [logp({"b": post.b.values[i], "s_log__": np.log(post.s.values[i])}) for i in range(30)]
    lp = idata.sample_stats["lp"].values[0]
    assert lp.shape == (30, 2)
    np.testing.assert_allclose(lp[:, -1], expected, rtol=1e-10)


def test_lp_of_the_discrete_step_is_the_model_log_density_of_each_draw():
    """As for the continuous steps: `lp` is the model's log density at every draw (control: the
    previous draw's differs wherever the chain moved)."""
    model = discrete_model()
    with model:
        idata = pm.sample(step=DiscreteMetropolis(), tune=100, draws=60, chains=1, random_seed=1, **SAMPLE_KW)
    logp = model.compile_logp()
    k = idata.posterior["k"].values[0]
    lp = idata.sample_stats["lp"].values[0]
    np.testing.assert_allclose(lp, [logp({"k": k_i}) for k_i in k], rtol=1e-10, atol=1e-10)
    moved = np.flatnonzero(np.diff(k) != 0) + 1
    assert moved.size > 0 and np.all(lp[moved] != lp[moved - 1])


NUMPY_OPTIONS = {
    KameleonMetropolis: dict(
        target_accept=np.float32(0.3),
        n_subsample=np.int64(50),
        am_weight=np.float32(0.2),
        adapt_interval=np.int64(50),
        learning_rate=np.float32(1.0),
        gamma=np.float32(0.1),
        bandwidth=np.float64(1.0),
    ),
    GPDelayedAcceptanceMH: dict(
        proposal="kameleon",
        target_accept=np.float32(0.3),
        n_subsample=np.int64(50),
        initial_scale=np.float32(1.0),
        max_points=np.int64(300),
        adapt_interval=np.int32(50),
    ),
    GPDelayedAcceptanceMALA: dict(
        target_accept=np.float32(0.5), initial_scale=np.float32(0.5), max_points=np.int64(300)
    ),
    DiscreteMetropolis: dict(scaling=np.float32(2.0), target_accept=np.float32(0.4)),
}


@pytest.mark.parametrize("cls", STEPS + [DiscreteMetropolis])
def test_numpy_scalar_options_are_accepted(cls):
    with _model_for(cls):
        step = cls(**NUMPY_OPTIONS[cls])
        assert type(step.target_accept) is float
        pm.sample(step=step, tune=150, draws=10, chains=1, random_seed=3, **SAMPLE_KW)


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        (KameleonMetropolis, {}),
        (GPDelayedAcceptanceMH, {"proposal": "kameleon"}),
    ],
)
@pytest.mark.parametrize("n_subsample", [1, 3])
def test_subsample_smaller_than_d_plus_1_is_refused(cls, kwargs, n_subsample):
    """n_subsample=1 used to be accepted and never build a proposal (the warning blamed `tune`)."""
    with regression_model():
        with pytest.raises(ValueError, match=r"n_subsample must be at least d \+ 1 = 4 \(3 sampled"):
            cls(n_subsample=n_subsample, **kwargs)
        cls(n_subsample=4, **kwargs)  # the smallest valid size


def test_random_walk_gp_da_refuses_a_subsample_it_would_not_use():
    """No Kameleon component, so no subsample: n_subsample=1 was accepted and ignored; now it is refused,
    and the subsample check (at least d + 1) does not run for a proposal without one."""
    with regression_model():
        with pytest.raises(ValueError, match=r"n_subsample=1 has no effect with proposal='random_walk'"):
            GPDelayedAcceptanceMH(n_subsample=1)
        GPDelayedAcceptanceMH()


# ---------------------------------------------------------------- warnings from worker processes
def test_a_carried_warning_is_raised_when_unpickled_and_leaves_a_plain_number():
    import pickle

    from pymc_kameleon.steps.reporting import carry_warnings

    value = carry_warnings(0.25, [("tuning went wrong", UserWarning)])
    assert value == 0.25  # a float to everyone until it is unpickled
    with pytest.warns(UserWarning, match="tuning went wrong"):
        back = pickle.loads(pickle.dumps(value))
    assert type(back) is float and back == 0.25
    count = carry_warnings(3, [("a", RuntimeWarning), ("b", UserWarning)])
    with pytest.warns(RuntimeWarning, match="a"), pytest.warns(UserWarning, match="b"):
        assert type(pickle.loads(pickle.dumps(count))) is int
    assert carry_warnings(1.5, []) == 1.5 and type(carry_warnings(1.5, [])) is float


def test_a_warning_another_chain_gave_with_other_figures_is_shown_in_short():
    """One sampling run's chains: the first warning of a kind in full, the same kind with other figures as
    its first sentence (its own figures kept); an identical text and another run's warning in full. The
    control: without a run (session None) every text is shown in full."""
    import pickle

    from pymc_kameleon.steps.session_warnings import StepWarnings, carry_warnings, shown_text

    def said(chain_noise):
        return (f"Step: the estimates are noisy: a noise sd of {chain_noise} nats (above 1.0). Make the "
                "estimator more precise (pm.sample's draws stay exact).")

    assert shown_text(said(1.1), "run a") == said(1.1)
    assert shown_text(said(1.1), "run a") == said(1.1)
    short = shown_text(said(1.25), "run a")
    assert short == ("Step: the estimates are noisy: a noise sd of 1.25 nats (above 1.0). (Another chain "
                     "said the same above, with its remedy.)")
    assert shown_text(said(1.25), "run b") == said(1.25)
    assert shown_text(said(1.3), None) == said(1.3)
    # A chain that showed this kind in the run already is in a new run that kept the session (a step
    # sampled again with the same seed on workers): in full, and the next chain's in short again.
    assert shown_text(said(1.5), "run c", (0,)) == said(1.5)
    assert "(Another chain" in shown_text(said(1.6), "run c", (1,))
    assert shown_text(said(1.7), "run c", (0,)) == said(1.7)
    assert "(Another chain" in shown_text(said(1.8), "run c", (1,))
    # Carried from a worker process: shortened where the session shows it.
    worker = StepWarnings("run a")
    value = carry_warnings(0.5, [(said(1.4), UserWarning, worker.session)])
    with pytest.warns(UserWarning) as caught:
        pickle.loads(pickle.dumps(value))
    assert "1.4 nats (above 1.0). (Another chain" in str(caught[0].message)
    value = carry_warnings(0.5, [(said(1.9), UserWarning, "run c", (0,))])  # with the chain: run c again
    with pytest.warns(UserWarning) as caught:
        pickle.loads(pickle.dumps(value))
    assert str(caught[0].message) == said(1.9)


def test_a_sampling_run_is_known_by_its_chains_generators():
    """``pm.sample`` spawns a run's chain generators from one seed sequence: chains of one run share a
    session; the same ``random_seed`` again (a chain's spawn key seen already) and another seed start
    new ones; a generator PyMC did not spawn keeps the session there is; another step object has its own."""
    from pymc_kameleon.steps.session_warnings import RunSessions

    runs = RunSessions("made with the step")
    first = [runs.join(g) for g in np.random.default_rng(7).spawn(3)]
    assert len(set(first)) == 1 and first[0] != "made with the step"
    again = [runs.join(g) for g in np.random.default_rng(7).spawn(3)]
    assert len(set(again)) == 1 and again[0] != first[0]
    other = runs.join(np.random.default_rng(8).spawn(1)[0])
    assert other not in (first[0], again[0])
    assert runs.join(object()) == other
    # Another step object sampled with the same seed: a session of its own.
    assert RunSessions("another step").join(np.random.default_rng(7).spawn(1)[0]) != first[0]


@pytest.mark.parametrize("tuning", ["per_chain", "pooled"])
@pytest.mark.parametrize("join", [True, False], ids=["shipped", "one-session"])
def test_a_step_sampled_again_warns_in_a_session_of_its_own(tuning, join, monkeypatch):
    """A step object sampled twice with one ``random_seed`` (a notebook cell run again), 2 chains: the
    second run's chains share a session that is not the first run's, so that their warnings are not cut
    short as if another chain of the run had said them (a new user's second run read "Another chain said
    the same above", its remedy dropped). Per-chain tuning runs both chains on the step object itself,
    pooled tuning on PyMC's copies of it. The control: one session for the step object, as before."""
    from pymc_kameleon.steps.session_warnings import RunSessions

    if not join:
        monkeypatch.setattr(RunSessions, "join", lambda self, rng: self.session)
    model = gaussian_data_model()
    with model:
        step = KameleonMetropolis(tuning=tuning)

    def sessions():
        seen = []
        start = type(step)._start_chain
        monkeypatch.setattr(type(step), "_start_chain",
                            lambda self: start(self) or seen.append(self._chain.warnings.session))
        sample_with_seed(model, step, 5, tune=20, draws=5, chains=2, cores=1)
        monkeypatch.setattr(type(step), "_start_chain", start)
        return set(seen)

    first, second = sessions(), sessions()
    assert len(first) == 1 and len(second) == 1
    assert (first != second) == join


# Not DiscreteMetropolis: its tuning (one Robbins-Monro scale per element) has no warnings to carry.
@pytest.mark.parametrize(
    "cls, kwargs, message",
    [
        (KameleonMetropolis, {}, "tuning took 100 steps"),
        (GPDelayedAcceptanceMH, {}, "tuning took 100 steps"),
        (GPDelayedAcceptanceMALA, {"initial_points": 150}, "ended after 100 steps, inside the coordinate"),
    ],
)
def test_tuning_warnings_reach_the_session_from_worker_processes(cls, kwargs, message):
    """pm.sample(cores=2), PyMC's default on this machine, tunes each chain in a worker process
    whose warnings used to be lost (neither shown nor catchable): each chain's now arrives with its
    first draw's statistics. The recorded statistic stays a plain float64."""
    import warnings

    with regression_model(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = pm.sample(
            step=cls(**kwargs), tune=100, draws=20, chains=2, cores=2, random_seed=4, **SAMPLE_KW
        )
    ours = [w for w in caught if message in str(w.message)]
    assert len(ours) == 2
    assert all(w.category is KameleonWarning for w in ours)  # the category survives the trip back
    assert idata.sample_stats["accept"].dtype == np.float64


def test_a_chains_warnings_know_its_spawn_key_as_pymc_hands_it_over():
    """Where PyMC's workers never tell the step of a run (cores>1), a chain's warnings carry its generator's
    spawn key, which shown_text reads: set by the per-chain hooks, here as in a worker (PyMC 5 set_rng,
    PyMC 6 setup_chain); None for a generator PyMC did not spawn (the control)."""
    model = regression_model()
    with model:
        step = KameleonMetropolis(tuning="per_chain")
    hook = step.setup_chain if hasattr(pm.step_methods.arraystep.BlockedStep, "setup_chain") else None
    for i, rng in enumerate(np.random.default_rng(4).spawn(2)):
        hook(rng, 10, 10) if hook is not None else step.set_rng(rng)
        assert step._chain.warnings.chain == (i,)
    step.set_rng(np.random.Generator(np.random.PCG64()))
    assert step._chain.warnings.chain is None


# ======================================================================== the step contract
# Both contract models are 2-d, so every step's coordinate scan takes SCAN steps.
SCAN = scan_steps_for(2)


def _kameleon_chain_start(adapt_interval):
    """KameleonMetropolis starts each chain afresh: the coordinate scan and one Adaptive Metropolis
    window, then its first Z, drawn from that chain's own window."""
    first_z = SCAN + adapt_interval - 1  # stats are reported after the step's adaptation

    def check(stats):
        kameleon, size = stats["kameleon"], stats["subsample_size"]
        assert not kameleon[:, : first_z + 1].any()
        assert (size[:, :first_z] == 0).all()
        if kameleon.shape[1] > first_z:
            # Z holds the first window's draws: of both chains, with pooled tuning (the default)
            n_chains = kameleon.shape[0]
            assert ((size[:, first_z] > 0) & (size[:, first_z] <= n_chains * adapt_interval)).all()
        if kameleon.shape[1] > first_z + 50:
            assert kameleon[:, first_z + 1 :].mean() > 0.8  # the Kameleon component draws 90%

    return check


def _gp_da_chain_start(stats):
    """A GP-DA step starts each chain afresh: a GP and a count of exact evaluations holding the start (with
    the start search's evaluations and the point it found) and the first proposal, and exact steps until
    the step after the coordinate scan."""
    search = SEARCH_CANDIDATES * (SEARCH_MAX_EVALS + 40) + 1
    first = stats["cumulative_logp_evals"][:, 0]
    assert ((first >= 2) & (first <= 2 + search)).all()
    assert np.isin(stats["gp_points"][:, 0], (2, 3)).all()
    assert not stats["screened"][:, : SCAN + 1].any()
    assert stats["screened"][:, SCAN + 1 :].all()


def _discrete_chain_start(stats):
    """DiscreteMetropolis starts each chain afresh: k's scale from `scaling` (1), so after the first
    step log(scaling) = accept - target_accept, the Robbins-Monro step of gain 1."""
    np.testing.assert_allclose(np.log(stats["scaling"][:, 0]), stats["accept"][:, 0] - 0.44, rtol=1e-12)


@dataclass(frozen=True)
class StepCase:
    id: str
    cls: type
    options: dict  # given in every contract test (a GP cap below the tuning run's evaluations keeps runs
    # short and has the GP drop its older half during tuning)
    tune: int  # tuning steps that show check_chain_start a chain's whole warm-up
    check_chain_start: Callable  # (name -> (chain, step) statistics) -> None, or AssertionError
    exact_evals: Callable  # exact log-density evaluations per step, from the statistics
    estimates_per_draw: set  # estimator calls per step after tuning, with a PseudoMarginalPotential
    bad_options: list  # (options, the option its error names)
    pseudo_marginal_options: dict = field(default_factory=dict)
    models: dict | None = None  # "plain" and "pseudo_marginal" model builders, if not MODELS

    def model(self, name):
        return (self.models or MODELS)[name]()

    def make(self, model, vars=None, *, pseudo_marginal=False, **options):
        options = {**self.options, **(self.pseudo_marginal_options if pseudo_marginal else {}), **options}
        with model:
            return self.cls(vars, **options)


KAMELEON_PROPOSAL_BAD = [
    (dict(kernel="poly"), "kernel"),
    (dict(bandwidth=-1.0), "bandwidth"),
    (dict(bandwidth="mean"), "bandwidth"),
    (dict(n_subsample=0), "n_subsample"),
    (dict(n_subsample=2.5), "n_subsample"),
    (dict(gamma=-0.1), "gamma"),
    (dict(gamma="big"), "gamma"),
]
GP_DA_BAD = [  # options every GP-DA step shares
    (dict(target_accept=1.5), "target_accept"),
    (dict(initial_points=0), "initial_points"),
    (dict(max_points=0), "max_points"),
    (dict(initial_points=20, max_points=10), "max_points"),
    (dict(fit_hyperparameters="yes"), "fit_hyperparameters"),
    (dict(hyperparameters={"lengthscale": 1.0}), "hyperparameters"),
    (dict(hyperparameters={"lengthscales": [1.0, 2.0, 3.0]}), "lengthscales"),
    (dict(hyperparameters={"signal_variance": -1.0}), "signal_variance"),
    (dict(fit_max_points=1), "fit_max_points"),
    (dict(noise_variance=-1.0), "noise_variance"),
    (dict(noise_variance="estimate"), "noise_variance"),
    (dict(current_value="mean"), "current_value"),
    (dict(gp_after_tuning="stop"), "gp_after_tuning"),
    (dict(jitter=-1e-8), "jitter"),
    (dict(initial_scale=0.0), "initial_scale"),
    (dict(adapt_interval=0), "adapt_interval"),
    (dict(learning_rate=np.nan), "learning_rate"),
    (dict(history_size=0), "history_size"),
]
GP_DA = dict(
    tune=SCAN + 20,
    check_chain_start=_gp_da_chain_start,
    exact_evals=lambda stats: stats["logp_evals"],
    estimates_per_draw={0, 1},
)
CASES = [
    StepCase(
        "kameleon",
        KameleonMetropolis,
        # The Kameleon component from the first window on (by default it joins after 10 000 steps).
        dict(adapt_interval=50, kameleon_after=0),
        tune=SCAN + 150,
        check_chain_start=_kameleon_chain_start(50),
        exact_evals=lambda stats: stats["logp_evals"],
        estimates_per_draw={1},  # one per proposal, never one at the current state
        bad_options=KAMELEON_PROPOSAL_BAD + [
            (dict(nu2=0.0), "nu2"),
            (dict(target_accept=1.5), "target_accept"),
            (dict(adaptation="forever"), "adaptation"),
            (dict(vanishing_decay=2.0), "decay"),
            (dict(adapt_interval=0), "adapt_interval"),
            (dict(kameleon_after=-1), "kameleon_after"),
            (dict(learning_rate=np.nan), "learning_rate"),
            (dict(history_size=1), "history_size"),
        ],
    ),
    StepCase(
        "gp_da_mh", GPDelayedAcceptanceMH, dict(max_points=40),
        bad_options=GP_DA_BAD + [(dict(proposal="hmc"), "proposal")], **GP_DA,
    ),
    StepCase(
        "gp_da_kameleon", GPDelayedAcceptanceMH, dict(proposal="kameleon", max_points=40),
        bad_options=KAMELEON_PROPOSAL_BAD, **GP_DA,
    ),
    StepCase(
        "gp_da_mala", GPDelayedAcceptanceMALA, dict(max_points=40),
        # The shared options are checked once, above; MALA has its own defaults for these two.
        bad_options=[
            (dict(gradient_observations="yes"), "gradient_observations"),
            (dict(target_accept=1.5), "target_accept"),
            (dict(initial_scale=0.0), "initial_scale"),
        ],
        # A PseudoMarginalPotential has no gradient: the GP is fitted to values (the prior's gradient
        # still drives the Langevin moves).
        pseudo_marginal_options=dict(gradient_observations=False),
        **GP_DA,
    ),
    StepCase(
        "discrete", DiscreteMetropolis, {},
        tune=30,
        check_chain_start=_discrete_chain_start,
        exact_evals=lambda stats: stats["logp_evals"],  # no jump leaves the support: each is estimated
        estimates_per_draw={1},  # one element, one proposal per step
        bad_options=[
            (dict(scaling=0.0), "scaling"),
            (dict(scaling="wide"), "scaling"),
            (dict(target_accept=1.5), "target_accept"),
        ],
        models={"plain": discrete_model, "pseudo_marginal": discrete_pseudo_marginal_model},
    ),
]
MODELS = {"plain": gaussian_data_model, "pseudo_marginal": latent_gaussian_model}
INVALID_OPTIONS = [
    pytest.param(case, options, option, id=f"{case.id}-{option}-{i}")
    for case in CASES
    for i, (options, option) in enumerate(case.bad_options)
]
CHAIN_START = 40  # steps compared at the start of a chain
DRAWS = 10

each_step = pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
# Not DiscreteMetropolis: it refuses continuous variables instead (test_discrete_step.py), and an integer
# variable holds no NaN or inf.
each_continuous_step = pytest.mark.parametrize(
    "case", [c for c in CASES if c.cls is not DiscreteMetropolis], ids=lambda case: case.id
)
each_model = pytest.mark.parametrize("model_name", list(MODELS))
# The contract runs tune only as long as the start of each step's schedule, shorter than they ask for.
short_tuning = pytest.mark.filterwarnings("ignore:.*tuning took:UserWarning")


def _make(case, model_name):
    model = case.model(model_name)
    return model, case.make(model, pseudo_marginal=model_name == "pseudo_marginal")


def _per_chain(record):
    """A by-hand record's statistics as one chain: name -> (1, step) arrays."""
    return {name[len("stat/"):]: values[None] for name, values in record.items() if name.startswith("stat/")}


def _roundtrip(step):
    # PyMC ships steps to worker processes with cloudpickle (plain pickle fails for stock steps too).
    return cloudpickle.loads(cloudpickle.dumps(step))


def _settings(step):
    return {k: v for k, v in vars(step).items() if isinstance(v, (bool, int, float, str, type(None)))}


@each_continuous_step
def test_discrete_variables_are_refused_with_a_clear_error(case):
    with pm.Model() as model:
        k = pm.Poisson("k", 3.0)
        x = pm.Normal("x", 0, 1)
        pm.Normal("y", x, 1, observed=[0.5])
    with pytest.raises(ValueError, match=r"continuous variables only.*\['k'\]"):
        case.make(model, [k])
    assert case.cls.competence(k, False) == Competence.INCOMPATIBLE
    assert case.cls.competence(x, True) == Competence.COMPATIBLE
    # Without vars it takes the continuous ones, and PyMC assigns a step to `k`.
    step = case.make(model)
    assert [v.name for v in step.vars] == ["x"]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*tuning (took|ended)", UserWarning)  # 20 tuning steps
        idata = sample_with_seed(model, step, 1, tune=20, draws=10, chains=1)
    assert "k" in idata.posterior and "x" in idata.posterior
    with pm.Model() as discrete_only:
        pm.Poisson("k", 3.0)
    with pytest.raises(ValueError, match="has none"):
        case.make(discrete_only)


@each_continuous_step
def test_a_variable_given_twice_is_refused_with_a_clear_error(case):
    """A new user's KameleonMetropolis([a, a, b, c]) failed deep in PyTensor ("index out of bounds")."""
    with pm.Model() as model:
        a = pm.Normal("a")
        b = pm.Normal("b")
        pm.Normal("y", a + b, 1, observed=[0.5])
    with pytest.raises(ValueError, match=r"\['a'\] is given more than once in vars"):
        case.make(model, [a, a, b])


@pytest.mark.parametrize("case, options, option", INVALID_OPTIONS)
def test_invalid_options_name_the_option(case, options, option):
    with pytest.raises(ValueError, match=option):
        case.make(case.model("plain"), **options)


@each_continuous_step
@each_model
def test_nonfinite_start_is_a_clear_error(case, model_name):
    """A start of undefined density (NaN, a model's failure) is an error; so is one of zero density (-inf)
    where no start search leaves it: start='initial_point', or an estimated likelihood (never searched)."""
    model, step = _make(case, model_name)
    start = model.initial_point()
    (name,) = start
    kept = case.make(model, pseudo_marginal=model_name == "pseudo_marginal", start="initial_point")
    for bad, tried in ((math.nan, step), (-math.inf, kept)):
        start_chain(tried, 1)
        with pytest.raises(ValueError, match=rf"log density at the current point is {bad}.*{name}="):
            tried.step({name: np.full_like(start[name], bad)})
    # Control: from a finite start the same step moves on; so does it from -inf, searched from.
    zero = {name: np.full_like(start[name], -np.inf)}
    starts = [start] + ([] if model_name == "pseudo_marginal" else [zero])
    for first in starts:
        start_chain(step, 1)
        _, record = run_steps(step, first, 3)
        assert np.isfinite(record["stat/model_logp"]).all()


@each_step
# Every hook on the plain model (set_rng alone is PyMC 5's in worker processes, and PyMC 6 has no
# set_rng); the pseudo-marginal state (the kept estimate, the estimators' generator) is reset by the
# same call in all.
@pytest.mark.parametrize(
    "model_name, hook",
    [("plain", "reset_tuning"), ("plain", "setup_chain"), ("pseudo_marginal", "setup_chain")]
    + ([("plain", "set_rng")] if int(pm.__version__.split(".")[0]) < 6 else []),
)
@short_tuning
def test_a_new_chain_starts_afresh(case, model_name, hook):
    """After PyMC's per-chain hook a step that ran a whole chain draws exactly what it drew fresh from
    the same generator. Negative control: a new generator alone leaves the previous chain's state."""
    model, step = _make(case, model_name)
    start = model.initial_point()
    start_chain(step, 2, hook)
    _, fresh = run_steps(step, start, CHAIN_START)
    start_chain(step, 1, hook)
    run_steps(step, start, case.tune + 10, stop_tuning_at=case.tune)
    start_chain(step, 2, "rng_only")
    _, stale = run_steps(step, start, CHAIN_START)
    with pytest.raises(AssertionError):
        assert_same_records(stale, fresh)
    with pytest.raises(AssertionError):
        case.check_chain_start(_per_chain(stale))
    start_chain(step, 2, hook)
    _, again = run_steps(step, start, CHAIN_START)
    assert_same_records(again, fresh)
    case.check_chain_start(_per_chain(again))


@each_step
@each_model
def test_a_pickled_step_draws_what_the_original_draws(case, model_name):
    """Pickled fresh or in mid-chain (the state, the generator and any kept estimate travel with it),
    a step goes on exactly as the original. Negative control: the clone with another generator."""
    model, step = _make(case, model_name)
    clone = _roundtrip(step)
    assert type(clone) is type(step) and _settings(clone) == _settings(step)
    assert clone._target.has_estimates == (model_name == "pseudo_marginal")
    assert [t.name for t in clone._target.terms] == (["lik"] if model_name == "pseudo_marginal" else [])
    start, half = model.initial_point(), case.tune // 2
    start_chain(step, 3)
    start_chain(clone, 3)
    point, first = run_steps(step, start, half)
    _, clone_first = run_steps(clone, start, half)
    assert_same_records(clone_first, first)
    middle, control = _roundtrip(step), _roundtrip(step)
    _, rest = run_steps(step, point, case.tune - half)
    _, middle_rest = run_steps(middle, point, case.tune - half)
    assert_same_records(middle_rest, rest)
    case.check_chain_start(_per_chain({k: np.concatenate([first[k], middle_rest[k]]) for k in first}))
    start_chain(control, 99, "rng_only")
    _, control_rest = run_steps(control, point, 10)
    with pytest.raises(AssertionError):
        assert_same_records(control_rest, {k: v[:10] for k, v in rest.items()})


# ------------------------------------------------------------------ through pm.sample, by seed
@dataclass(frozen=True)
class SampledRuns:
    case: StepCase
    model_name: str
    var: str
    step: object
    first: object  # seed 11, two sequential chains on one step object, tuning kept
    again: object  # seed 11 and the same step object again, one chain (chain 0 has the same generator)
    other: object  # seed 12, one chain
    parallel: object  # seed 11, cores=2, a fresh step (each worker unpickles its copy)


# On the pseudo-marginal model the two GP-DA MH variants differ only in the base proposal, which the
# plain model covers: proposal="kameleon" is checked there by hand only.
SAMPLED = [(c, m) for c in CASES for m in MODELS if (c.id, m) != ("gp_da_kameleon", "pseudo_marginal")]


@pytest.fixture(scope="module", params=SAMPLED, ids=lambda p: f"{p[0].id}-{p[1]}")
def sampled(request):
    case, model_name = request.param
    model, pseudo_marginal = case.model(model_name), model_name == "pseudo_marginal"
    step = case.make(model, pseudo_marginal=pseudo_marginal)
    kw = dict(tune=case.tune, draws=DRAWS, discard_tuned_samples=False)
    runs = dict(
        first=sample_with_seed(model, step, 11, **kw),
        # Pooled tuning: chain 0 of two learns from chain 1, so the rerun has both chains.
        again=sample_with_seed(model, step, 11, chains=2 if step.pooled else 1, **kw),
        other=sample_with_seed(model, step, 12, chains=1, **kw),
        parallel=sample_with_seed(
            model, case.make(model, pseudo_marginal=pseudo_marginal), 11, cores=2, **kw
        ),
    )
    return SampledRuns(case, model_name, model.value_vars[0].name, step, **runs)


@short_tuning
def test_same_seed_same_draws_sequential(sampled):
    """One seed, one step object, two pm.sample calls: the same draws and statistics, tuning included
    (per-chain tuning: a one-chain run draws the first chain of a two-chain one). Negative control:
    another seed draws otherwise."""
    again = recorded(sampled.again)
    first = recorded(sampled.first)
    chains = next(iter(again.values())).shape[0]
    assert_same_records(again, {name: values[:chains] for name, values in first.items()})
    other, first = sampled.other.posterior[sampled.var].values, sampled.first.posterior[sampled.var].values
    assert not np.array_equal(other[0], first[0])


@short_tuning
def test_cores_2_gives_the_draws_of_sequential_chains(sampled):
    """Chains in worker processes (each unpickles the step and gets its chain's generator) record what
    sequential chains on one step object record. Negative control: the two chains differ."""
    assert_same_records(recorded(sampled.parallel), recorded(sampled.first))
    draws = sampled.parallel.posterior[sampled.var].values
    assert draws.shape[:2] == (2, DRAWS) and not np.array_equal(draws[0], draws[1])


@short_tuning
def test_per_chain_state_is_reset_between_chains(sampled):
    """pm.sample(chains=2, cores=1) runs both chains on one step object (PyMC 5 calls reset_tuning before
    each, PyMC 6 setup_chain): the second starts its whole warm-up afresh, as the first did."""
    case, idata = sampled.case, sampled.first
    warm, post = idata.warmup_sample_stats, idata.sample_stats
    stats = {name: warm[name].values for name in warm.data_vars}
    assert stats["accept"].shape == (2, case.tune)
    case.check_chain_start(stats)
    # Each chain's running count is the sum of its own steps' evaluations, tuning included.
    counts = {name: np.concatenate([warm[name].values, post[name].values], 1)
              for name in ("logp_evals", "cumulative_logp_evals")}
    np.testing.assert_array_equal(counts["cumulative_logp_evals"], np.cumsum(counts["logp_evals"], axis=1))
    assert (counts["logp_evals"][:, 0] >= 1).all()  # the start's evaluation
    # The progress bar's recent rates are each chain's own: recomputed from its accept (and exact_eval).
    chain = {name: np.concatenate([warm[name].values, post[name].values], 1) for name in post.data_vars}
    for c in range(chain["accept"].shape[0]):
        recent, rates, shares = RecentRates(), [], []
        for i, accept in enumerate(chain["accept"][c]):
            recent.update(accept, chain["exact_eval"][c, i] if "exact_eval" in chain else True)
            rates.append(recent.accept)
            shares.append(recent.exact)
        np.testing.assert_allclose(chain["recent_accept_rate"][c], rates, rtol=1e-12)
        if "recent_exact_share" in chain:
            np.testing.assert_allclose(chain["recent_exact_share"][c], shares, rtol=1e-12)
    if sampled.model_name == "pseudo_marginal":
        chain = {name: np.concatenate([warm[name].values, post[name].values], 1) for name in post.data_vars}
        assert chain["loglik_estimate"].shape == (2, case.tune + DRAWS)
        assert np.isfinite(chain["loglik_estimate"]).all()
        # An estimate at the start and at each evaluated proposal; one at the current state only in
        # tuning, after TUNING_REFRESH_REJECTIONS rejections in a row (decision 0051).
        refreshes = np.array([tuning_refresh_steps(row, case.tune) for row in chain["accepted"]])
        randomness_check = np.zeros_like(refreshes)
        randomness_check[:, 0] = 1  # in tuning the chain's first estimate is made twice (same randomness)
        noise_check = np.zeros_like(refreshes)
        if case.cls._checks_estimate_noise:  # when tuning ends, counted in the first draw's calls
            noise_check[:, case.tune] = NOISE_ESTIMATES
        expected = case.exact_evals(chain) + refreshes + randomness_check + noise_check
        np.testing.assert_array_equal(chain["estimator_calls"], expected)
        after_first = post["estimator_calls"].values[:, 1:]
        assert set(np.unique(after_first)) <= case.estimates_per_draw
    else:  # models without a PseudoMarginalPotential do not get its statistics
        assert "loglik_estimate" not in sampled.step.stats_dtypes_shapes and "loglik_estimate" not in post


@pytest.mark.parametrize("cls", [KameleonMetropolis, GPDelayedAcceptanceMH, DiscreteMetropolis])
def test_a_step_reused_by_another_pm_sample_starts_afresh_in_worker_processes(cls):
    """PyMC 5's worker processes call only set_rng before a chain, PyMC 6's only setup_chain; neither
    calls reset_tuning or sets `tune`. A step object that has already sampled once must still start
    each parallel chain afresh, tuning included: it draws what a fresh step draws. (It used to go on
    from its old state: Kameleon moves from the first step on PyMC 5, and no tuning at all on PyMC 6.)"""
    model = discrete_model() if cls is DiscreteMetropolis else gaussian_data_model()
    # PyMC's parallel sampler (pooled tuning runs its own population, of copies of the step).
    options = {} if cls is DiscreteMetropolis else {"tuning": "per_chain"}
    with model:
        used, fresh = cls(**options), cls(**options)
    kw = dict(tune=250, draws=10, cores=2, discard_tuned_samples=False)
    sample_with_seed(model, used, 5, **{**kw, "cores": 1})
    assert not used.tune  # the first run ended its tuning
    assert_same_records(recorded(sample_with_seed(model, used, 11, **kw)),
                        recorded(sample_with_seed(model, fresh, 11, **kw)))


def test_coordinate_names_follow_the_raveled_order():
    """Warnings name a coordinate as the user's variable: scalars by name, arrays with their index."""
    from pymc_kameleon.steps.variables import coordinate_names

    with pm.Model() as model:
        pm.Normal("mu", 0, 1)
        pm.HalfNormal("tau", 1)
        pm.Normal("L", 0, 1, shape=(2, 2))
    point = model.initial_point()
    names = coordinate_names(model.value_vars, point, model)
    assert names == ["mu", "log(tau)", "L[0, 0]", "L[0, 1]", "L[1, 0]", "L[1, 1]"]
    assert len(names) == sum(np.size(v) for v in point.values())
    # Without the model, the value variables' own names (tau is sampled as tau_log__).
    assert coordinate_names(model.value_vars, point)[1] == "tau_log__"


@pytest.mark.parametrize("cls", STEPS + [DiscreteMetropolis, MLDA])
def test_help_on_a_constructor_points_to_the_steps_own_docstring(cls):
    """Our constructors have no docstring of their own; without one, help() and IDEs showed PyMC's
    ArrayStepShared.__init__ text ("Create the ArrayStepShared object...")."""
    import inspect

    doc = inspect.getdoc(cls.__init__)
    assert f"help({cls.__name__})" in doc and "ArrayStepShared" not in doc, doc
