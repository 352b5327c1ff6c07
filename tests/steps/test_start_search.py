"""start="search" (the default): before tuning each chain searches from prior draws and starts in the
best plausible basin it reached; the evaluations are counted; flat priors, priors that cannot be
drawn, pseudo-marginal models and funnels keep a sensible start."""

import warnings

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import GPDelayedAcceptanceMH, KameleonMetropolis
from pymc_kameleon.core.starts import SEARCH_EVALS_PER_DIM
from pymc_kameleon.steps.starts import SEARCH_CANDIDATES
from pymc_kameleon.testing import SAMPLE_KW, gaussian_data_model, latent_gaussian_model


def _minor_mode_start():
    """N(0, 10^2) priors; the likelihood has its major mode at (5, 5) and a narrow minor one at
    (-5, -5), 60 nats lower; every chain starts in the minor one."""
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 10.0, shape=2, initval=np.array([-5.0, -5.0]))
        major = -0.5 * pm.math.sum((x - 5.0) ** 2)
        minor = -60.0 - 0.5 * pm.math.sum(((x + 5.0) / 0.2) ** 2)
        pm.Potential("lik", pm.math.logaddexp(major, minor))
    return model


def _sample(model, step, *, tune=400, draws=200, chains=2, seed=3, **kwargs):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(step=step(), tune=tune, draws=draws, chains=chains, cores=1, random_seed=seed,
                         discard_tuned_samples=False, **SAMPLE_KW, **kwargs)


@pytest.mark.parametrize("cls", [KameleonMetropolis, GPDelayedAcceptanceMH])
def test_chains_started_in_a_minor_mode_find_the_posterior(cls):
    """Per-chain tuning, so no rescue can help: the search alone moves each chain to the major mode.
    The control (start="initial_point") stays in the minor mode, 60 nats down."""
    idata = _sample(_minor_mode_start(), lambda: cls(tuning="per_chain"))
    assert np.abs(idata.posterior["x"].values - 5.0).max() < 5.0
    control = _sample(_minor_mode_start(), lambda: cls(tuning="per_chain", start="initial_point"))
    assert np.abs(control.posterior["x"].values + 5.0).max() < 1.0


def test_the_search_evaluations_are_counted_at_the_first_step():
    idata = _sample(_minor_mode_start(), KameleonMetropolis)
    first = idata.warmup_sample_stats["logp_evals"].values[:, 0]
    budget = SEARCH_CANDIDATES * SEARCH_EVALS_PER_DIM * 2
    assert ((first > 20) & (first <= budget + SEARCH_CANDIDATES * 20 + 2)).all(), first
    plain = _sample(_minor_mode_start(), lambda: KameleonMetropolis(start="initial_point"))
    assert (plain.warmup_sample_stats["logp_evals"].values[:, 0] <= 2).all()


def _centred_funnel():
    """Eight-schools-like centred hierarchy: the joint density is unbounded as tau -> 0."""
    y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    s = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, shape=8)
        pm.Normal("y", theta, s, observed=y)
    return model


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_search_never_starts_a_chain_in_a_funnels_neck(seed):
    """Powell runs into the neck (log tau -> -inf, the density growing without bound); the plausible box
    (the range of 100 prior draws) keeps every chain's start out of it."""
    idata = _sample(_centred_funnel(), KameleonMetropolis, tune=50, draws=10, chains=4, seed=seed)
    first_tau = idata.warmup_posterior["tau"].values[:, 0]
    assert (first_tau > 1e-3).all(), first_tau


def _groups_beside_nuts():
    """A new user's model: five groups of six observations (sd 0.5) under a centred N(0, s) prior,
    s ~ HalfNormal(1); group 1's mean is -2.74. The step samples the group effects, NUTS the scale."""
    rng = np.random.default_rng(3)
    y = rng.normal(np.repeat(rng.normal(0.0, 1.0, 5), 6), 0.5)
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        th = pm.Normal("th", 0.0, s, shape=5)
        pm.Normal("y", th[np.repeat(np.arange(5), 6)], 0.5, observed=y)
    return model


@pytest.mark.parametrize("box_draws", [1000, 100], ids=["shipped", "100-draws"])
def test_a_block_beside_other_steps_may_start_in_its_priors_tail(box_draws, monkeypatch):
    """The search's runs agree on the effects' conditional mode, th[1] = -2.64, beyond the range of 100
    prior draws of th[1] (down to -1.95; the control refuses it, and the chain keeps th = 0, where a
    NUTS step on s can dive into the funnel's neck and stay) and inside that of 1000 (a block's box)."""
    import pymc_kameleon.steps.starts as starts

    monkeypatch.setattr(starts, "BLOCK_BOX_DRAWS", box_draws)
    model = _groups_beside_nuts()
    step = lambda: [KameleonMetropolis([model["th"]]), pm.NUTS([model["s"]])]  # noqa: E731
    first = _sample(model, step, tune=3, draws=1, seed=1).warmup_posterior["th"].values[:, 0]
    if box_draws == 1000:
        assert np.abs(first[:, 1] + 2.635).max() < 0.01, first
    else:
        assert (first[:, 1:] == 0.0).all(), first


@pytest.mark.slow
def test_no_chain_sticks_in_the_neck_when_nuts_samples_the_scale():
    """The same model, 2 chains x (1000 + 300), seeds 1-5: every chain's scale stays away from 0 (NUTS
    alone: s about 1.5, 94% in 0.89-2.18). With a block's box of 100 prior draws 6 of 10 chains stuck
    with every effect at 0 and s near 1e-162; with start="initial_point" none did."""
    model = _groups_beside_nuts()
    step = lambda: [KameleonMetropolis([model["th"]]), pm.NUTS([model["s"]])]  # noqa: E731
    for seed in range(1, 6):
        idata = _sample(model, step, tune=1000, draws=300, seed=seed)
        chain_means = idata.posterior["s"].mean("draw").values
        assert (chain_means > 0.5).all(), (seed, chain_means)


def test_flat_priors_and_priors_without_a_generator_are_handled():
    """A flat prior's candidates are the start jittered (its coordinates unbounded); a prior PyMC cannot
    draw from (a CustomDist with a logp only) leaves the chain at its start, without an error."""
    with pm.Model() as flat:
        x = pm.Flat("x", shape=2)
        pm.Potential("lik", -0.5 * pm.math.sum((x - 3.0) ** 2))
    idata = _sample(flat, KameleonMetropolis)
    assert np.abs(idata.warmup_posterior["x"].values[:, 0] - 3.0).max() < 0.5
    with pm.Model() as custom:
        pm.CustomDist("x", logp=lambda value: -0.5 * (value - 3.0) ** 2, initval=0.0)
    idata = _sample(custom, KameleonMetropolis)
    assert (idata.warmup_sample_stats["logp_evals"].values[:, 0] <= 2).all()


def test_pseudo_marginal_models_keep_their_start():
    """A noisy estimate is no objective for a search."""
    idata = _sample(latent_gaussian_model(), KameleonMetropolis, tune=20, draws=10)
    assert (idata.warmup_sample_stats["logp_evals"].values[:, 0] <= 2).all()


def test_a_nonsensical_start_option_is_refused():
    with gaussian_data_model(), pytest.raises(ValueError, match="Metropolis: start must be one of.*smc"):
        KameleonMetropolis(start="optimise")
    with gaussian_data_model(), pytest.raises(ValueError, match="MH: start must be one of"):
        GPDelayedAcceptanceMH(start=3)


def test_a_search_asked_for_with_a_pseudo_marginal_term_is_refused():
    """The default keeps the start without a word (above); asking for the search there is refused, not
    silently ignored, and so is it for MLDA."""
    with latent_gaussian_model():
        assert KameleonMetropolis().start == "initial_point"
        with pytest.raises(ValueError, match="start='search' is not available with a Pseudo"):
            KameleonMetropolis(start="search")
        with pytest.raises(ValueError, match="MH: start='search' is not available"):
            GPDelayedAcceptanceMH(start="search")
    with gaussian_data_model():
        assert KameleonMetropolis().start == "search"


def test_a_prior_draw_that_raises_leaves_the_chain_at_its_start(monkeypatch):
    """Whatever a model's prior draw raises, sampling goes on from the given start (the control: the
    same model searches when drawing works)."""
    from pymc_kameleon.steps import starts

    def broken(**kwargs):
        def draw(seed):
            raise RuntimeError("a simulator that cannot run at this prior draw")
        return draw

    searched = _sample(_minor_mode_start(), KameleonMetropolis, tune=20, draws=5)
    assert (searched.warmup_sample_stats["logp_evals"].values[:, 0] > 20).all()
    monkeypatch.setattr(starts, "make_initial_point_fn", broken)
    idata = _sample(_minor_mode_start(), KameleonMetropolis, tune=20, draws=5)
    assert (idata.warmup_sample_stats["logp_evals"].values[:, 0] <= 2).all()


class _PriorDrawWarning(UserWarning):
    pass


def _warning_prior_model():
    """A pm.CustomDist whose random warns at every draw, started 50 prior sds out."""
    def random(mu, rng=None, size=None):
        warnings.warn("a simulator's note at every draw", _PriorDrawWarning, stacklevel=2)
        return rng.normal(mu, 1.0, size=size)

    with pm.Model() as model:
        a = pm.CustomDist("a", 0.0, random=random, logp=lambda v, mu: -0.5 * (v - mu) ** 2, initval=50.0)
        pm.Normal("y", a, 1.0, observed=[0.1, -0.2])
    return model


def _sample_erroring_on(category, model):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", category)
        return pm.sample(step=KameleonMetropolis(), tune=20, draws=5, chains=1, random_seed=1,
                         discard_tuned_samples=False, **SAMPLE_KW)


@pytest.mark.parametrize("quiet", [True, False])
def test_a_warnings_filter_that_raises_leaves_the_search_as_it_was(quiet, monkeypatch):
    """The search's prior draws ignore warnings: a user's filter that makes a prior draw's warning an
    error (``-W error``) switched the search off silently (the chain stayed at 50, other draws).
    The negative control (quiet=False) puts the user's filter back in force."""
    import contextlib

    from pymc_kameleon.steps import starts

    if not quiet:
        monkeypatch.setattr(starts, "_quietly", contextlib.nullcontext)
    plain = _sample_erroring_on(RuntimeWarning, _warning_prior_model())
    strict = _sample_erroring_on(_PriorDrawWarning, _warning_prior_model())
    assert plain.warmup_sample_stats["logp_evals"].values[0, 0] > 20
    searched = strict.warmup_sample_stats["logp_evals"].values[0, 0] > 20
    same = np.array_equal(plain.posterior["a"].values, strict.posterior["a"].values)
    assert (searched and same) == quiet


@pytest.mark.parametrize("cls", [KameleonMetropolis, GPDelayedAcceptanceMH])
@pytest.mark.parametrize("start", ["search", "initial_point"])
def test_probes_beyond_the_widened_prior_box_are_not_evaluated(cls, start):
    """A new user's SIR ODE: a probe of an extrapolated fitted shape asked the likelihood for
    gamma = 3.3e6 (33 prior sds out) and the solver never returned. A probe or exam draw beyond the
    prior box widened PROBE_BOX_WIDENING times counts as -inf without an evaluation (the likelihood
    would raise here); control: one at 8 prior sds is evaluated and counted."""
    import pytensor.tensor as pt
    from pytensor.compile.ops import as_op

    from pymc_kameleon.steps.starts import PROBE_BOX_WIDENING

    asked = []

    @as_op(itypes=[pt.dvector], otypes=[pt.dscalar])
    def likelihood(x):
        asked.append(np.array(x))
        if np.abs(x).max() > 20:
            raise RuntimeError("a solver that never returns")
        return np.asarray(-0.5 * float(x @ x))

    with pm.Model():
        x = pm.Normal("x", 0.0, 1.0, shape=2)
        pm.Potential("lik", likelihood(x))
        step = cls(start=start)
    far, near = np.array([33.0, 0.0]), np.array([8.0, 0.0])
    box = step._start_search.probe_box()  # 100 prior draws reach about 2.5 sds, so about 10 sds here
    assert 2.0 * PROBE_BOX_WIDENING < box.upper[0] < 3.0 * PROBE_BOX_WIDENING
    assert not box.contains(far) and box.contains(near)
    before = step._target.n_evals
    assert step._evaluate_probe(far).logp == -np.inf and not asked
    assert step._target.n_evals == before
    assert np.isfinite(step._evaluate_probe(near).logp) and len(asked) == 1
    assert step._target.n_evals == before + 1


@pytest.mark.parametrize("forget", [True, False], ids=["shipped", "kept-box"])
def test_a_step_sampled_again_after_set_data_changed_its_prior_searches_as_a_new_one(forget, monkeypatch):
    """A prior sd held in ``pm.Data`` goes from 1 to 1000 between two runs of one step object (and the
    data to about 50): the second run's box must be the new prior's, so its draws equal a new step's
    (PyMC 5 and 6; a new user's re-used step kept the old box, which refused the search's start and every
    probe: R-hat 1.28 against 1.001). The control keeps the old box and differs."""
    from pymc_kameleon.steps.starts import StartSearch

    if not forget:
        monkeypatch.setattr(StartSearch, "forget_if_prior_data_changed", lambda self: None)
    y_new = np.random.default_rng(1).normal(50.0, 10.0, 5)
    with pm.Model() as model:
        prior_sd = pm.Data("prior_sd", 1.0)
        y = pm.Data("y", np.random.default_rng(0).normal(0.3, 1.0, 5))
        mu = pm.Normal("mu", 0.0, prior_sd, shape=3)
        pm.Normal("obs", mu.sum(), 10.0, observed=y)
    kw = dict(tune=300, draws=50, chains=2, cores=1, random_seed=2, **SAMPLE_KW)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = KameleonMetropolis()
        pm.sample(step=step, **kw)
        pm.set_data({"prior_sd": 1000.0, "y": y_new})
        again = pm.sample(step=step, **kw).posterior["mu"].values
        new = pm.sample(step=KameleonMetropolis(), **kw).posterior["mu"].values
    assert np.array_equal(again, new) == forget
