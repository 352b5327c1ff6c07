"""MLDA as a PyMC step: invariance for the fine model with a coarse model whose posterior is 2 sds off,
seeds, cores=2, a step reused by a second pm.sample, the statistics, and clear errors for bad input.

The coarse level 3 sds off and the negative control (a ratio without the coarse terms) are the core's,
tests/core/test_multilevel.py: there, with a fixed base proposal, the chain mixes well enough for an
MCSE-sized test; through the step the tuned walk (tuned to the coarse posterior) leaves 20-40 effective
draws of 20 000 at 3 sds, 100-200 at 2 sds. A biased coarse model costs that much: see the guide.)"""

import math
import re
import time
import warnings
from collections import deque

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from pymc_kameleon import MLDA, PseudoMarginalPotential
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.steps.multilevel_checks import FINE_DECISIONS_KEPT
from pymc_kameleon.steps.multilevel_spread import COARSE_SPREAD_DRAWS, coarse_probe_steps
from pymc_kameleon.testing import SAMPLE_KW, assert_same_records, mcse_of_mean, recorded

N_OBS = 20
DATA = np.random.default_rng(7).normal([0.5, -1.0], 1.0, size=(N_OBS, 2))
POST_VAR = 1.0 / (N_OBS + 1.0 / 100.0)  # mu ~ N(0, 10^2 I), y_i ~ N(mu, I)
POST_MEAN = DATA.sum(0) * POST_VAR
POST_SD = math.sqrt(POST_VAR)


def conjugate_model(shift: float = 0.0):
    """The fine model (shift 0), or a coarse one whose posterior is ``shift`` posterior sds off in mu[0]."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10, shape=2)
        pm.Normal("y", mu, 1, observed=DATA + np.array([shift * POST_SD, 0.0]))
    return model


def sample(step_kwargs=None, *, seed=1, tune=300, draws=300, chains=2, cores=1, shift=1.0, **kwargs):
    """MLDA with a coarse model ``shift`` posterior sds off, uncorrected unless ``step_kwargs`` turn the
    error model on (these tests are of the levels' mechanics, which it would hide)."""
    fine, coarse = conjugate_model(), conjugate_model(shift)  # coarse models are built outside `with fine`
    with fine:
        step = MLDA(coarse_models=[coarse], **{"adaptive_error_model": False, **(step_kwargs or {})})
        return pm.sample(draws=draws, tune=tune, chains=chains, cores=cores, step=step, random_seed=seed,
                         **SAMPLE_KW, **kwargs)


def assert_exact_moments(idata, z_max=4.0):
    """Each coordinate's mean and second central moment within ``z_max`` MCSE of the exact posterior's."""
    draws = idata.posterior["mu"].values  # (chain, draw, 2)
    for j in range(2):
        x = draws[..., j]
        z_mean = abs(x.mean() - POST_MEAN[j]) / mcse_of_mean(x)
        second = ((x - POST_MEAN[j]) / POST_SD) ** 2
        z_var = abs(second.mean() - 1.0) / mcse_of_mean(second)
        assert z_mean < z_max and z_var < z_max, (j, z_mean, z_var)


@pytest.mark.slow
@pytest.mark.parametrize("kwargs", [{}, {"subsampling_rates": 3, "randomize_lengths": True}],
                         ids=["default", "random-lengths"])
def test_invariant_for_the_fine_posterior_with_a_coarse_posterior_2_sds_away(kwargs):
    idata = sample(kwargs, tune=1000, draws=5000, chains=4, shift=2.0)
    assert_exact_moments(idata)


def test_statistics_count_each_level():
    idata = sample({"subsampling_rates": 4})
    stats = idata.sample_stats
    fine = stats["logp_evals"].values
    assert set(np.unique(fine)) <= {0, 1}  # at most one fine evaluation per iteration
    assert np.all(stats["level0_subchain_length"].values == 4)
    coarse = stats["level0_logp_evals"].values
    # One per coarsest step, none for an infeasible move; the first draw's also counts the coarsest level's
    # run when tuning ended (coarse_probe_steps: at most tuning's 300 x 4 coarsest steps).
    assert np.all((coarse[:, 1:] >= 0) & (coarse[:, 1:] <= 4))
    probe = coarse_probe_steps(2, 300 * 4)
    assert probe == 1200 and np.all((coarse[:, 0] >= probe) & (coarse[:, 0] <= probe + 4))
    rate = stats["level0_accept_rate"].values
    assert np.all((rate >= 0) & (rate <= 1))
    assert 0.0 < stats["accepted"].values.mean() < 1.0
    # The running count is the sum of the per-step counts (the tuning's too).
    last = stats["cumulative_logp_evals"].values[:, -1]
    assert np.all(last >= fine.sum(axis=1))


def test_the_progress_bars_rate_is_of_moves():
    """`recent_accept_rate` averages `accepted` (whether the chain moved), as RecentRates does, not
    `accept`, which is 1 whenever a subchain did not move: with a coarse posterior 6 sds off, `accept`
    averages far above the share of steps that moved."""
    from pymc_kameleon.steps.reporting import RecentRates

    idata = sample({"subsampling_rates": 1}, shift=6.0, discard_tuned_samples=False)
    for chain in range(2):
        moved = np.concatenate([idata.warmup_sample_stats["accepted"].values[chain],
                                idata.sample_stats["accepted"].values[chain]])
        recent = RecentRates()
        for m in moved:
            recent.update(float(m))
        assert idata.sample_stats["recent_accept_rate"].values[chain, -1] == recent.accept
    stats = idata.sample_stats
    assert stats["accept"].values.mean() > stats["accepted"].values.mean() + 0.2


def test_random_subchain_lengths_are_uniform_on_1_to_2j_minus_1():
    idata = sample({"subsampling_rates": 3, "randomize_lengths": True})
    lengths = idata.sample_stats["level0_subchain_length"].values
    assert set(np.unique(lengths)) == {1, 2, 3, 4, 5}
    assert abs(lengths.mean() - 3.0) < 0.2


def test_three_levels_and_their_statistics():
    fine, coarse = conjugate_model(), [conjugate_model(3.0), conjugate_model(1.0)]
    with fine:
        step = MLDA(coarse_models=coarse, subsampling_rates=[2, 3])
        idata = pm.sample(draws=100, tune=100, chains=1, step=step, random_seed=2, **SAMPLE_KW)
    stats = idata.sample_stats
    assert np.all(stats["level0_subchain_length"].values == 2)
    assert np.all(stats["level1_subchain_length"].values == 3)
    # The first draw's count also has the coarsest level's run at the end of tuning.
    assert np.all(stats["level0_logp_evals"].values[:, 1:] <= 6)


def test_same_seed_same_draws_and_cores_2_equals_sequential():
    a = recorded(sample(seed=5))
    assert_same_records(a, recorded(sample(seed=5)))
    assert_same_records(a, recorded(sample(seed=5, cores=2)))


def test_a_step_reused_by_a_second_pm_sample_starts_afresh():
    fine, coarse = conjugate_model(), conjugate_model(3.0)
    with fine:
        step = MLDA(coarse_models=[coarse])
        first = pm.sample(draws=100, tune=100, chains=1, step=step, random_seed=3, **SAMPLE_KW)
        second = pm.sample(draws=100, tune=100, chains=1, step=step, random_seed=3, **SAMPLE_KW)
    np.testing.assert_array_equal(first.posterior["mu"].values, second.posterior["mu"].values)


def test_the_start_search_runs_on_the_coarsest_level():
    """The search costs coarse evaluations only: the fine model's evaluations in the first step are the
    start's and the new start's, plus at most the step's own."""
    idata = sample({"start": "search"}, tune=10, draws=10, chains=1, discard_tuned_samples=False)
    assert idata.sample_stats["logp_evals"].values.sum() <= 10
    assert int(idata.warmup_sample_stats["logp_evals"].values[0, 0]) <= 3
    assert int(idata.warmup_sample_stats["level0_logp_evals"].values[0, 0]) > 50


# ------------------------------------------------------------------------------- adaptive error model
def offset_model(offset: float = 0.0):
    """The fine model (offset 0), or a coarse one whose forward model is off by ``offset`` posterior sds
    in mu[0]: y_i ~ N(mu + (offset sd, 0), I), so its posterior is as far off."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10, shape=2)
        pm.Normal("y", mu + np.array([offset * POST_SD, 0.0]), 1, observed=DATA)
    return model


def sample_with_error_model(*, tune, draws, chains, seed=1, offset=3.0):
    fine, coarse = offset_model(), offset_model(offset)
    with fine:
        step = MLDA(coarse_models=[coarse], adaptive_error_model=True)
        idata = pm.sample(draws=draws, tune=tune, chains=chains, step=step, random_seed=seed, **SAMPLE_KW)
    return step, idata


def test_the_error_model_learns_the_coarse_offset_and_restores_acceptance():
    """F_fine - F_coarse = -(offset, 0) at every state: the correction learns it, and the coarse level
    3 sds off becomes exact, so nearly every subchain end is accepted (0.04 without the model)."""
    step, idata = sample_with_error_model(tune=600, draws=300, chains=1)
    assert step.corrected_variables == ["y"]
    bias = step._chain.error_model.levels[0].bias.get_value().reshape(N_OBS, 2)
    np.testing.assert_allclose(bias, np.tile([-3.0 * POST_SD, 0.0], (N_OBS, 1)), atol=1e-12)
    assert idata.sample_stats["accepted"].values.mean() > 0.9


@pytest.mark.slow
def test_invariant_with_the_error_model():
    _, idata = sample_with_error_model(tune=1000, draws=4000, chains=4)
    assert_exact_moments(idata)


class _Level:
    """A stand-in for a coarse level: fixed outputs per point, a shared bias and covariance."""

    def __init__(self, outputs, covariance=False):
        import pytensor

        self._outputs = outputs
        self.bias = pytensor.shared(np.zeros(2))
        self.covariance = pytensor.shared(np.zeros((2, 2))) if covariance else None

    def outputs(self, x):
        return np.asarray(self._outputs(x), dtype=float)


def test_the_error_model_telescopes_adjacent_differences():
    """Hand-computed: F_0 = x, F_1 = 2x, F_2 (fine) = 2x + (1, -1). D_0 = F_1 - F_0 = x is recorded where
    level 1 was evaluated (x = (1, 0), (3, 2): mean (2, 1)), D_1 = F_2 - F_1 = (1, -1) where the fine one was.
    Level 1 is corrected by mean D_1, level 0 by mean D_0 + mean D_1; the covariances add likewise."""
    from pymc_kameleon.steps.multilevel_levels import ErrorModel

    levels = [_Level(lambda x: x, True), _Level(lambda x: 2 * x, True)]
    model = ErrorModel(levels, lambda x: 2 * x + np.array([1.0, -1.0]))
    for x in ([1.0, 0.0], [3.0, 2.0]):
        assert not model.record(np.array(x), 0)
    for x in ([5.0, 5.0], [7.0, -1.0]):
        assert not model.record(np.array(x))
    assert model.update()
    np.testing.assert_array_equal(levels[1].bias.get_value(), [1.0, -1.0])
    np.testing.assert_array_equal(levels[0].bias.get_value(), [3.0, 0.0])
    np.testing.assert_array_equal(levels[1].covariance.get_value(), np.zeros((2, 2)))
    np.testing.assert_array_equal(levels[0].covariance.get_value(), [[2.0, 2.0], [2.0, 2.0]])
    # A forward run that failed (NaN) is not kept, where the level above is the fine one or a coarse one.
    for level in levels:
        level._outputs = lambda x: np.full(2, np.nan)
    assert not model.record(np.array([1.0, 1.0]), 0) and not model.record(np.array([1.0, 1.0]))
    assert [len(kept) for kept in model.differences] == model.n_recorded == [2, 2]


def three_level_error_model(*, tune, draws, chains, seed=1, offsets=(8.0, 1.0)):
    """The fine model with coarse models whose forward models are ``offsets`` posterior sds off (coarsest
    first), sampled with the error model."""
    fine, coarse = offset_model(), [offset_model(offset) for offset in offsets]
    with fine:
        step = MLDA(coarse_models=coarse, subsampling_rates=[2, 3], adaptive_error_model=True)
        idata = pm.sample(draws=draws, tune=tune, chains=chains, step=step, random_seed=seed, **SAMPLE_KW)
    return step, idata


def test_with_three_levels_the_middle_level_teaches_the_coarsest():
    """The coarsest model 8 sds off, the middle one 1: the middle level rejects the coarsest subchains'
    ends until corrected, so the fine model is rarely evaluated; the coarsest level learns from the middle
    level's chain, at its state in each iteration (F_1 - F_0 = -7 sds in mu[0]), and, with the middle
    one's own correction (-1 sd), ends corrected by -8 sds exactly, and the middle level accepts most ends
    in the draws. (Learned at the fine evaluations alone, the correction left a new user's middle level
    rejecting 92-99% in 6 of 8 chains: benchmarks/results/mlda_three_levels.md.)"""
    step, idata = three_level_error_model(tune=600, draws=300, chains=1)
    error_model = step._chain.error_model
    # One record of F_1 - F_0 per tuning iteration (the middle level's state), of F_2 - F_1 per fine
    # evaluation in tuning (not every iteration evaluates the fine model).
    assert error_model.n_recorded[0] == 600 > error_model.n_recorded[1]
    for level, offset in zip(error_model.levels, (8.0, 1.0)):
        bias = level.bias.get_value().reshape(N_OBS, 2)
        np.testing.assert_allclose(bias, np.tile([-offset * POST_SD, 0.0], (N_OBS, 1)), atol=1e-12)
    assert idata.sample_stats["level1_accept_rate"].values.mean() > 0.7
    assert idata.sample_stats["accepted"].values.mean() > 0.7


@pytest.mark.slow
def test_invariant_with_the_error_model_on_three_levels():
    _, idata = three_level_error_model(tune=1000, draws=4000, chains=4, offsets=(3.0, 1.0))
    assert_exact_moments(idata)


def test_the_error_model_corrects_during_tuning_so_the_proposal_tunes_on_the_corrected_model():
    """5 posterior sds off: without a correction before the end of tuning the fine level accepted 47
    moves in tuning and the base proposal tuned on the uncorrected coarse model (a new user's report).
    The correction now comes after the first 10 fine evaluations: the draws accept most subchain ends."""
    step, idata = sample_with_error_model(tune=500, draws=300, chains=1, offset=5.0)
    assert step._chain.error_model.n_updates > 1  # during tuning, not only at its end
    assert idata.sample_stats["accepted"].values.mean() > 0.8


def test_the_error_model_needs_a_normal_likelihood_at_every_level():
    with pm.Model() as coarse:
        mu = pm.Normal("mu", 0, 10, shape=2)
        pm.StudentT("y", nu=5, mu=mu, sigma=1, observed=DATA)
    student = r"'y' \(20, 2\) in the model, a StudentT, not a pm.Normal, in coarse_models\[0\]"
    with offset_model(), pytest.raises(ValueError, match=student):
        MLDA(coarse_models=[coarse], adaptive_error_model=True)
    with pm.Model() as renamed:
        mu = pm.Normal("mu", 0, 10, shape=2)
        pm.Normal("z", mu, 1, observed=DATA)
    with offset_model(), pytest.raises(ValueError, match=r"'y' \(20, 2\) in the model, none in coarse"):
        MLDA(coarse_models=[renamed], adaptive_error_model=True)
    with pm.Model() as fewer:  # a new user's coarse model observed half the data: the shapes are named
        mu = pm.Normal("mu", 0, 10, shape=2)
        pm.Normal("y", mu, 1, observed=DATA[:10])
    with offset_model(), pytest.raises(ValueError, match=r"'y' \(20, 2\) in the model, \(10, 2\) in coarse"):
        MLDA(coarse_models=[fewer], adaptive_error_model=True)


def test_an_observed_variable_the_error_model_cannot_correct_is_named():
    """A new user's fine model observed y and z, the coarse one y and z_coarse: only y was corrected, in
    silence, 0.5% of iterations moved and the warnings blamed the coarse model's distance. The control:
    both named alike, no warning."""

    def model(second):
        with pm.Model() as m:
            mu = pm.Normal("mu", 0, 10, shape=2)
            pm.Normal("y", mu, 1, observed=DATA)
            pm.Normal(second, mu, 1, observed=DATA)
        return m

    skipped = r"corrects \['y'\] but not \['z'\].*'z' \(20, 2\) in the model, none in coarse_models\[0\]"
    renamed, alike = model("z_coarse"), model("z")
    with model("z"):
        with pytest.warns(KameleonWarning, match=skipped):
            MLDA(coarse_models=[renamed], adaptive_error_model=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", KameleonWarning)
            MLDA(coarse_models=[alike], adaptive_error_model=True)


def test_data_that_differ_between_levels_are_named():
    """pm.set_data on the fine model only: the acceptance fell to 0 and the warnings blamed the coarse
    model's distance (a new user's). The control: the same data at both levels, no warning."""

    def model(data):
        with pm.Model() as m:
            y_obs = pm.Data("y_obs", data)
            mu = pm.Normal("mu", 0, 10, shape=2)
            pm.Normal("y", mu, 1, observed=y_obs)
        return m

    coarse, fine = model(DATA), model(DATA)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KameleonWarning)
        with fine:
            MLDA(coarse_models=[coarse])
    with fine:
        pm.set_data({"y_obs": DATA + 1.0})
        other = r"data observed by 'y' differ .* coarse_models\[0\] \(40 of 40"
        with pytest.warns(KameleonWarning, match=other):
            MLDA(coarse_models=[coarse])


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("base_sampler", r"an option of PyMC 3's \(pymc-experimental's\) MLDA.*scale-free adaptive proposal"),
        ("variance_reduction", r"quantity of interest.*Compute the quantity from the draws"),
        ("base_tune_interval", r"PyMC 3's name for adapt_interval"),
    ],
)
def test_options_of_pymc3s_mlda_say_what_this_one_does_instead(option, says):
    """A new user coming from pymc-experimental's MLDA got a bare 'unexpected keyword argument'. A
    misspelt option of ours still gets the closest name (the control)."""
    coarse = conjugate_model()
    with conjugate_model():
        with pytest.raises(TypeError, match=rf"^MLDA\(\) takes no '{option}': .*{says}"):
            MLDA(coarse_models=[coarse], **{option: 1})
        with pytest.raises(TypeError, match=r"did you mean 'subsampling_rates'"):
            MLDA(coarse_models=[coarse], subsampling_rate=2)


# ------------------------------------------------------------------------------------ bad input
def test_coarse_models_with_other_variables_are_refused():
    with pm.Model() as other:
        pm.Normal("nu", 0, 1, shape=2)
        pm.Normal("y", 0, 1, observed=DATA)
    with conjugate_model(), pytest.raises(ValueError, match=r"same free variables.*\['mu'\].*\['nu'\]"):
        MLDA(coarse_models=[other])


def test_a_coarse_model_with_another_shape_or_transform_is_refused():
    with pm.Model() as wrong_shape:
        mu = pm.Normal("mu", 0, 10, shape=3)
        pm.Normal("y", mu[:2], 1, observed=DATA)
    with conjugate_model(), pytest.raises(ValueError, match=r"'mu' has shape \(3,\)"):
        MLDA(coarse_models=[wrong_shape])
    with pm.Model() as wrong_transform:
        mu = pm.HalfNormal("mu", 10, shape=2)
        pm.Normal("y", mu, 1, observed=DATA)
    with conjugate_model(), pytest.raises(ValueError, match="transformed differently"):
        MLDA(coarse_models=[wrong_transform])


def test_a_coarse_model_without_likelihood_is_refused():
    with pm.Model() as prior_only:
        pm.Normal("mu", 0, 10, shape=2)
    with conjugate_model(), pytest.raises(ValueError, match="no likelihood"):
        MLDA(coarse_models=[prior_only])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"coarse_models": []}, "at least one coarse model"),
        ({"coarse_models": ["model"]}, "must be a pm.Model"),
        ({"subsampling_rates": 0}, "integers >= 1"),
        ({"subsampling_rates": 1.5}, "integers >= 1"),
        ({"subsampling_rates": [2, 2]}, "one per coarse model"),
        ({"subsampling_rates": "5"}, "subsampling_rates must be an integer"),
        ({"subsampling_rates": None}, "subsampling_rates must be an integer"),
        ({"subsampling_rates": [None]}, "integers >= 1"),
        ({"target_accept": 1.5}, "target_accept"),
        ({"independence_weight": 2.0}, "independence_weight"),
        ({"subsampling_rates": 10**9}, r"run 1e\+09 steps on the coarsest level"),
        ({"start": "bogus"}, r"MLDA: start must be one of \('search', 'initial_point'\), got 'bogus'"),
    ],
)
def test_nonsensical_options_are_named(kwargs, match):
    options = {"coarse_models": [conjugate_model(1.0)], **kwargs}  # built before the `with` below
    with conjugate_model(), pytest.raises((ValueError, TypeError), match=match):
        MLDA(**options)


def test_coarse_models_first_and_positional_as_pymcs_removed_step_took_them():
    """MLDA([coarse]) is MLDA(coarse_models=[coarse]): the same draws, with cores=2 too."""
    fine, coarse = conjugate_model(), conjugate_model(1.0)
    with fine:
        runs = [
            pm.sample(draws=100, tune=100, chains=2, cores=cores, step=step, random_seed=4, **SAMPLE_KW)
            for step, cores in ((MLDA([coarse]), 1), (MLDA(coarse_models=[coarse]), 1), (MLDA(coarse), 2))
        ]
    for other in runs[1:]:
        assert_same_records(recorded(runs[0]), recorded(other))


def test_a_variable_with_other_bounds_in_a_coarse_model_is_refused():
    """Uniform(0, 10) against Uniform(0, 20): one transform name, two maps (a new user's report)."""

    def bounded(upper):
        with pm.Model() as model:
            s = pm.Uniform("s", 0, upper)
            mu = pm.Normal("mu", 0, 10, shape=2)
            pm.Normal("y", mu, s, observed=DATA)
        return model

    coarse = bounded(20.0)
    with bounded(10.0), pytest.raises(ValueError, match="'s' maps the same sampled value"):
        MLDA(coarse_models=[coarse])
    same = bounded(10.0)
    with bounded(10.0):
        MLDA(coarse_models=[same])


@pytest.mark.parametrize("coarse_data", ["all", "a fifth"])
def test_a_coarse_posterior_far_off_is_named_at_the_end_of_tuning(coarse_data):
    """5 posterior sds off, no error model: the fine level accepts almost nothing; the step says so and
    names the remedies (a new user saw only a generic "stuck" message, after tuning). The error model is
    among them only where it could correct something: a new user's coarse model on a tenth of the data was
    told to turn it on, and got the error that no observed variable matches."""
    fine = offset_model()
    if coarse_data == "all":
        coarse = offset_model(5.0)
    else:
        with pm.Model() as coarse:
            mu = pm.Normal("mu", 0, 10, shape=2)
            pm.Normal("y", mu + np.array([5.0 * POST_SD, 0.0]), 1, observed=DATA[::5])
    with fine, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = MLDA(coarse_models=[coarse], adaptive_error_model=False)
        pm.sample(draws=50, tune=500, chains=1, step=step, random_seed=1, **SAMPLE_KW)
    said = [str(w.message) for w in caught if "end of tuning the finest level accepted" in str(w.message)]
    assert len(said) == 1, [str(w.message)[:100] for w in caught]
    assert ("adaptive_error_model=True" in said[0]) == (coarse_data == "all"), said[0]
    assert "subchain ends it judged (chain 0)" in said[0]  # chains tune apart: it names which (a new user's)


class BusyZero(Op):
    """A log-density term of 0 that busy-waits ``ms`` milliseconds: a model made costlier."""

    __props__ = ("ms",)

    def __init__(self, ms: float):
        self.ms = float(ms)

    def make_node(self, x):
        return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        end = time.perf_counter() + self.ms / 1000.0
        while time.perf_counter() < end:
            pass
        output_storage[0][0] = np.asarray(0.0)


def costly_model(ms: float, shift: float = 0.0):
    """:func:`conjugate_model` whose evaluations take ``ms`` milliseconds more."""
    model = conjugate_model(shift)
    with model:
        pm.Potential("cost", BusyZero(ms)(model["mu"]))
    return model


COSTLY = (r"MLDA: in tuning an evaluation of coarse_models\[0\] took [\d.]+ ms \(the median\), [\d.]+ times "
          r"one of")
CHEAPER = r" the fine model .*a coarse model cheaper than the fine one"
REVERSE = r" coarse_models\[1\].*reverse coarse_models"


@pytest.mark.parametrize(
    "coarse, fine_ms, message",
    [
        ([costly_model(2.0, 1.0)], 0.0, COSTLY + CHEAPER),
        ([costly_model(2.0, 1.0), conjugate_model(0.5)], 0.0, COSTLY + REVERSE),
        ([conjugate_model(1.0), costly_model(2.0, 0.5)], 5.0, None),  # the right order: no warning
    ],
    ids=["costlier-than-fine", "wrong-order", "right-order"],
)
def test_a_coarse_model_costlier_than_the_level_above_it_is_named(coarse, fine_ms, message):
    """A new user passed three levels finest coarse model first and got no hint; the end of tuning now
    compares each level's time per evaluation with the one above it (a 2 ms model against a free one)."""
    fine = costly_model(fine_ms) if fine_ms else conjugate_model()
    with fine, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm.sample(draws=5, tune=60, chains=1, step=MLDA(coarse_models=coarse), random_seed=1, **SAMPLE_KW)
    costly = [str(w.message) for w in caught if "in tuning an evaluation of" in str(w.message)]
    if message is None:
        assert costly == []
    else:
        assert len(costly) == 1 and re.search(message, costly[0]), costly


def test_every_coarse_level_costlier_than_the_one_above_it_is_named():
    """Both levels of a wrongly ordered pair and a costly finest coarse level: one warning each (the
    total-time check added after them must not end the comparison at the first)."""
    coarse = [costly_model(4.0, 1.0), costly_model(1.5, 0.5)]
    with conjugate_model(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm.sample(draws=5, tune=60, chains=1, step=MLDA(coarse_models=coarse), random_seed=1, **SAMPLE_KW)
    costly = [str(w.message) for w in caught if "in tuning an evaluation of" in str(w.message)]
    assert len(costly) == 2 and re.search(COSTLY + REVERSE, costly[0]), costly
    assert "coarse_models[1] took" in costly[1] and "the fine model" in costly[1], costly


class PreemptedZero(Op):
    """A log-density term of 0 whose ``at``-th call busy-waits ``ms`` milliseconds: a free model whose
    process the scheduler preempted once (a loaded machine)."""

    __props__ = ("ms", "at")

    def __init__(self, ms: float, at: int):
        self.ms, self.at = float(ms), int(at)
        self.calls = 0

    def make_node(self, x):
        return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        self.calls += 1
        if self.calls == self.at:
            BusyZero(self.ms).perform(node, inputs, [[None]])
        output_storage[0][0] = np.asarray(0.0)


@pytest.mark.parametrize("at", [10, 0])
def test_a_coarse_call_preempted_once_does_not_make_the_coarse_model_costly(at):
    """Under load one coarse call in hundreds took a time slice longer, and the mean of the calls made a
    free coarse model cost more than the fine one (a warning that fired once on the groundwater example
    and was not reproduced): the levels are compared by their median call. The control: a coarse model
    slow at every call is still named (``at=0`` marks it)."""
    with conjugate_model(0.5) as coarse:
        cost = PreemptedZero(300.0, at) if at else BusyZero(2.0)
        pm.Potential("cost", cost(coarse["mu"]))
    with conjugate_model(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = MLDA(coarse_models=[coarse], subsampling_rates=5)
        pm.sample(draws=5, tune=60, chains=1, step=step, random_seed=1, **SAMPLE_KW)
    said = [str(w.message) for w in caught if "MLDA: in tuning" in str(w.message)]
    if at:
        assert said == [], said
    else:
        assert len(said) == 1 and re.search(COSTLY + CHEAPER, said[0]), said


@pytest.mark.parametrize("coarse_ms", [1.5, 0.0])
def test_coarse_models_that_take_more_time_than_the_fine_one_are_said(coarse_ms):
    """A new user's ODE: a coarse solve a quarter of the fine one, five per fine evaluation, took 2.2 times
    the fine model's time; MLDA saved fine solves and lost on the clock (5.1 ESS per second against
    KameleonMetropolis's 6.7), without a word. The end of tuning now compares the levels' total times.
    The control: a coarse model of no cost is not named."""
    coarse = costly_model(coarse_ms, 0.5) if coarse_ms else conjugate_model(0.5)
    with costly_model(2.0), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = MLDA(coarse_models=[coarse], subsampling_rates=5)
        pm.sample(draws=5, tune=60, chains=1, step=step, random_seed=1, **SAMPLE_KW)
    said = [str(w.message) for w in caught if "times the fine model's time" in str(w.message)]
    if not coarse_ms:
        assert said == []
        return
    message = (r"MLDA: in tuning the coarse models took [\d.]+ times the fine model's time "
               r"\(coarse_models\[0\]: \d+ evaluations of [\d.]+ ms; "
               r"against \d+ fine evaluations of [\d.]+ ms; medians; chain 0\)"
               r".*GPDelayedAcceptanceMH")
    assert len(said) == 1 and re.search(message, said[0]), said


def test_each_chain_times_its_own_coarse_evaluations():
    """With cores=1 PyMC samples the chains one after another with one coarse level object: a new user's
    second chain said 25 514 coarse evaluations in tuning (6.4 times the fine model's time) where it had
    made about 5800, its count and times including the first chain's tuning and draws. Each chain's
    warning counts its own tuning's evaluations, as its warm-up statistics do (less each level's first,
    compiling, call, and the start search's, one-off, in the first iteration's count: a new user's tune=150
    was told 1406 coarse evaluations, 750 of them the subchains')."""
    coarse = costly_model(1.5, 0.5)
    with costly_model(2.0), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = MLDA(coarse_models=[coarse], subsampling_rates=5)
        idata = pm.sample(draws=50, tune=60, chains=2, cores=1, step=step, random_seed=1,
                          discard_tuned_samples=False, **SAMPLE_KW)
    said = [str(w.message) for w in caught if "times the fine model's time" in str(w.message)]
    counted = [int(re.search(r"coarse_models\[0\]: (\d+) evaluations", message).group(1)) for message in said]
    made = idata.warmup_sample_stats["level0_logp_evals"].isel(draw=slice(1, None)).sum("draw").values
    first = idata.warmup_sample_stats["level0_logp_evals"].isel(draw=0).values
    assert np.all(first > 50)  # the start search
    assert len(counted) == 2 and all(m - 3 <= c <= m + 10 for c, m in zip(counted, made)), (counted, made)


def test_default_tune_counts_iterations_where_the_fine_level_teaches_the_coarse_ones():
    """PyMC 6's tune=None: the proposal's tuning steps in coarsest-level steps, so divided by the subchain
    length, unless the error model or a GP level learns from the fine level (one evaluation an
    iteration); then in iterations (a fifth of them halved the groundwater example's ESS per second)."""
    from pymc_kameleon import GPLevel

    fine, coarse = conjugate_model(), conjugate_model(1.0)
    with fine:
        plain = MLDA(coarse_models=[coarse], subsampling_rates=5, adaptive_error_model=False)
        corrected = MLDA(coarse_models=[coarse], subsampling_rates=5, adaptive_error_model=True)
        gp = MLDA(coarse_models=[coarse, GPLevel()], subsampling_rates=[2, 3])
    required = plain._chain.adaptation.required_tune_steps()
    assert required > 5
    assert plain.default_tune_steps == math.ceil(required / 5)
    assert corrected.default_tune_steps == required
    assert gp.default_tune_steps == gp._chain.adaptation.required_tune_steps() == required


def test_the_tuning_warning_counts_in_pm_samples_iterations():
    with pytest.warns(UserWarning, match=r"coarsest-level steps \(5 per iteration\).*pass tune >= \d+"):
        sample(tune=20, draws=10, chains=1)


def test_the_tuning_warning_with_the_error_model_asks_for_the_iterations_its_default_takes():
    """With the error model the proposal needs its tuning steps in iterations (its default tune); the
    check had divided them by the subchain length, so tune=150 said "pass tune >= 165" against a default
    of 825, and a new user's tune=300 (min ESS 69, R-hat 1.04 against 217 and 1.00 at 825) was silent."""
    fine, coarse = conjugate_model(), conjugate_model(1.0)
    with fine:
        step = MLDA(coarse_models=[coarse], subsampling_rates=5, adaptive_error_model=True)
    needed = step.default_tune_steps
    short = needed // 2  # more than required / 5, so the old check said nothing
    assert short * 5 > needed
    pattern = rf"tuning took {short} iterations, fewer than the {needed} .*pass tune >= {needed}"
    with pytest.warns(UserWarning, match=pattern):
        sample({"subsampling_rates": 5, "adaptive_error_model": True}, tune=short, draws=5, chains=1)
    with warnings.catch_warnings(record=True) as caught:  # negative control: its default budget is enough
        warnings.simplefilter("always")
        sample({"subsampling_rates": 5, "adaptive_error_model": True}, tune=needed, draws=5, chains=1)
    assert not [w for w in caught if "tuning took" in str(w.message)]


def test_sampling_without_tuning_says_so_once_per_chain_and_names_the_error_model():
    """tune=0: a new user got only a later "stuck" warning blaming a funnel; now the step says up front
    that its proposal is untuned (and that the error model learned nothing), and draws the same."""
    import warnings

    message = r"MLDA: sampling without tuning \(tune=0\).*error model.*Pass tune >= \d+"
    with pytest.warns(UserWarning, match=message) as record:
        untuned = sample({"adaptive_error_model": True}, tune=0, draws=20, chains=1)
    assert sum("without tuning" in str(w.message) for w in record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = sample({"adaptive_error_model": True}, tune=0, draws=20, chains=1)
    np.testing.assert_array_equal(untuned.posterior["mu"].values, again.posterior["mu"].values)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        try:
            sample(tune=400, draws=5, chains=1)
        except UserWarning as w:  # other tuning warnings may appear; not this one
            assert "without tuning" not in str(w)


def test_a_coarse_model_built_inside_the_fine_models_with_block_is_named():
    with conjugate_model() as fine:
        with pm.Model("coarse") as coarse:
            mu = pm.Normal("mu", 0, 10, shape=2)
            pm.Normal("y", mu, 1, observed=DATA)
    with fine, pytest.raises(ValueError, match="built inside another model's `with` block"):
        MLDA(coarse_models=[coarse])


def test_the_same_coarse_model_twice_is_refused():
    """A new user's [coarse, coarse] ran 6x the coarse solves for nothing, silently."""
    coarse, other = conjugate_model(1.0), conjugate_model(0.5)
    with conjugate_model(), pytest.raises(ValueError, match=r"coarse_models\[2\] is the same model as coarse_"
                                                            r"models\[0\]"):
        MLDA(coarse_models=[coarse, other, coarse])
    with conjugate_model():
        assert MLDA(coarse_models=[coarse, other]).n_levels == 3  # the control: two different models


def test_the_model_itself_as_coarse_model_is_refused():
    model = conjugate_model()
    with model, pytest.raises(ValueError, match="model in context itself"):
        MLDA(coarse_models=[model])


def test_a_coarse_model_with_a_pseudo_marginal_term_is_refused():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1, observed=[0.0])
    with pm.Model() as coarse:
        mu = pm.Normal("mu", 0, 1)
        PseudoMarginalPotential("lik", lambda m, rng: float(-0.5 * m**2), inputs=[mu])
    with model, pytest.raises(ValueError, match=r"coarse_models\[0\] has a PseudoMarginalPotential"):
        MLDA(coarse_models=[coarse])


# ------------------------------------------------------------------------- the error's covariance
def curved_model(offset: float = 0.0, curve: float = 0.0):
    """The fine model (0, 0), or a coarse one whose forward model for y[:, 0] is off by ``offset`` sds plus
    ``curve`` (mu[0] - posterior mean)^2: a state-dependent bias, so the differences vary."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10, shape=2)
        bias = pm.math.stack([offset * POST_SD + curve * (mu[0] - POST_MEAN[0]) ** 2, 0.0])
        pm.Normal("y", mu + bias, 1, observed=DATA)
    return model


def test_with_zero_error_covariance_the_coarse_density_is_the_mean_only_one():
    from pymc_kameleon.steps.multilevel_levels import coarse_level

    fine, coarse = curved_model(), curved_model(1.0, 0.5)
    vars = fine.value_vars
    mean_only = coarse_level(coarse, vars, fine, None, 0, ["y"])
    joint = coarse_level(coarse, vars, fine, None, 0, ["y"], covariance=True)
    assert mean_only.covariance is None and joint.covariance.get_value().shape == (2 * N_OBS, 2 * N_OBS)
    for level in (mean_only, joint):
        level.bias.set_value(np.linspace(-0.3, 0.3, 2 * N_OBS))
    for x in ([0.1, -1.0], [0.4, -0.7], [-2.0, 3.0]):
        assert joint.log_density(np.array(x)) == pytest.approx(mean_only.log_density(np.array(x)), rel=1e-10)


def test_the_error_covariance_is_learned_and_widens_the_coarse_likelihood():
    fine, coarse = curved_model(), curved_model(2.0, 2.0)
    with fine:
        step = MLDA(coarse_models=[coarse], adaptive_error_model=True, error_covariance=True)
        idata = pm.sample(draws=200, tune=600, chains=1, step=step, random_seed=2, **SAMPLE_KW)
    level = step._chain.error_model.levels[0]
    cov = level.covariance.get_value()
    differences = np.array(step._chain.error_model.differences[0])
    np.testing.assert_allclose(cov, np.cov(differences, rowvar=False), rtol=1e-12, atol=1e-15)
    assert np.all(np.linalg.eigvalsh(cov) > -1e-12)
    first = cov.reshape(N_OBS, 2, N_OBS, 2)[:, 0, :, 0]
    assert first.min() > 0 and np.allclose(cov.reshape(N_OBS, 2, N_OBS, 2)[:, 1, :, 1], 0.0)
    assert idata.sample_stats["accepted"].values.mean() > 0.3


def test_with_three_levels_a_state_dependent_error_is_learned_where_the_middle_chain_is():
    """The coarsest model's error is quadratic in mu[0] (curve 0.3), the start far out. The coarsest
    level's correction is learned at the middle level's chain states, which follow the middle posterior;
    learned at the middle level's evaluations (the coarsest subchains' ends, which follow the coarsest
    posterior) it left chain 0 of this seed with its middle level rejecting every end."""
    fine, coarse = curved_model(), [curved_model(2.0, 0.3), curved_model(0.5, 0.0)]
    with fine:
        step = MLDA(coarse_models=coarse, subsampling_rates=[3, 5], adaptive_error_model=True)
        idata = pm.sample(draws=300, tune=300, chains=2, step=step, random_seed=4,
                          initvals={"mu": np.array([15.0, 15.0])}, **SAMPLE_KW)
    middle = np.nanmean(idata.sample_stats["level1_accept_rate"].values, axis=1)
    assert np.all(middle > 0.5), middle


@pytest.mark.slow
def test_invariant_with_the_error_covariance():
    fine, coarse = curved_model(), curved_model(3.0, 1.0)
    with fine:
        step = MLDA(coarse_models=[coarse], adaptive_error_model=True, error_covariance=True)
        idata = pm.sample(draws=4000, tune=1000, chains=4, step=step, random_seed=1, **SAMPLE_KW)
    assert_exact_moments(idata)


def test_the_error_model_is_on_by_default_where_every_level_observes_the_same_normal():
    """A new user's coarse-grid model with MLDA's defaults (the error model was off): 0.1% of iterations
    moved, R-hat 3.7, where adaptive_error_model=True gave min ESS 1280. "auto" turns it on where it can
    correct something (the draws of True) and off where no observed pm.Normal matches (those of False);
    the control: off, the chain behind a coarse model 3 sds off hardly moves."""
    def run(option):
        fine, coarse = offset_model(), offset_model(3.0)
        with fine:
            step = MLDA(coarse_models=[coarse], adaptive_error_model=option)
            assert step.corrected_variables == (["y"] if option else [])
            return pm.sample(draws=200, tune=800, chains=1, step=step, random_seed=1, **SAMPLE_KW)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the control's low acceptance
        on, off = run("auto"), run(False)
        assert_same_records(recorded(on), recorded(run(True)))
    assert on.sample_stats["accepted"].values.mean() > 0.5 > 5 * off.sample_stats["accepted"].values.mean()

    def counts_model():
        with pm.Model() as m:
            mu = pm.Normal("mu", 0, 1)
            pm.Poisson("y", pt.exp(mu), observed=[3, 1, 4])
        return m

    fine, coarse = counts_model(), counts_model()
    with fine, warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to correct is no reason to warn
        step = MLDA(coarse_models=[coarse])
        assert not step.adaptive_error_model and step.corrected_variables == []
        with pytest.raises(ValueError, match="no observed pm.Normal"):
            MLDA(coarse_models=[coarse], adaptive_error_model="auto", error_covariance=True)


def test_a_coarse_noise_sd_below_the_fine_ones_is_named_when_the_step_is_built():
    """A new user's coarse models with a noise sd 0.5 and 0.6 times the fine one's: chains stuck, and the
    warnings named only "a coarse model closer to the fine one". The step names the figure when it is
    built and among the stuck chain's remedies. Controls: the same or a wider sd, and sds that are free
    variables (not compared), give no warning."""

    def model(sd, free=False):
        with pm.Model() as m:
            mu = pm.Normal("mu", 0, 10, shape=2)
            sigma = pm.HalfNormal("sigma", sd) if free else sd
            pm.Normal("y", mu, sigma, observed=DATA)
        return m

    narrow, same, wider = model(0.5), model(1.0), model(1.5)
    with model(1.0):
        said = r"coarse_models\[0\]'s observed 'y' has a noise sd 0.5 times the fine model's.*at least"
        with pytest.warns(KameleonWarning, match=said):
            step = MLDA(coarse_models=[narrow])
        assert "a coarse noise sd at least the fine one's (coarse_models[0]'s" in step._stuck_remedy()
        with warnings.catch_warnings():
            warnings.simplefilter("error", KameleonWarning)
            plain = MLDA(coarse_models=[same])
            MLDA(coarse_models=[wider])
    assert "noise sd" not in plain._stuck_remedy()
    free_narrow = model(0.5, free=True)
    with model(1.0, free=True), warnings.catch_warnings():
        warnings.simplefilter("error", KameleonWarning)
        MLDA(coarse_models=[free_narrow])


def test_error_covariance_needs_the_error_model():
    fine, coarse = conjugate_model(), conjugate_model(1.0)
    with fine, pytest.raises(ValueError, match="pass adaptive_error_model=True too"):
        MLDA(coarse_models=[coarse], adaptive_error_model=False, error_covariance=True)
    with fine, pytest.raises(ValueError, match="error_covariance must be True or False"):
        MLDA(coarse_models=[coarse], adaptive_error_model=True, error_covariance="yes")
    with fine, pytest.raises(ValueError, match="randomize_lengths must be True or False"):
        MLDA(coarse_models=[coarse], randomize_lengths="yes")
    with fine, pytest.raises(ValueError, match="adaptive_error_model must be True, False or 'auto'"):
        MLDA(coarse_models=[coarse], adaptive_error_model="no")


def _failing_model(threshold: float, value: float, shift: float = 0.0):
    """conjugate_model(shift) whose log density is ``value`` (NaN or -inf) where mu[0] > ``threshold``."""
    import pytensor.tensor as pt

    with conjugate_model(shift) as model:
        pm.Potential("fails", pt.switch(pt.gt(model["mu"][0], threshold), value, 0.0))
    return model


@pytest.mark.parametrize("fine_fails", [False, True], ids=["fine-finite-there", "fine-zero-there-too"])
def test_a_coarse_model_that_fails_where_the_fine_posterior_has_mass_is_named(fine_fails):
    """A coarse density NaN over mu[0] > the posterior mean + 0.5 sd (31% of the posterior) makes MLDA
    reject every proposal there, so the draws miss it (a new user's ODE: ω's draws missed a third of the
    posterior, R-hat 1.00, silently). The step looks at the fine density where a coarse one failed and warns,
    once a chain, naming the point and both values; where the fine density is zero too (the control) the
    draws lose nothing and nothing is said."""
    threshold = POST_MEAN[0] + 0.5 * POST_SD
    fine = _failing_model(threshold, -np.inf) if fine_fails else conjugate_model()
    coarse = _failing_model(threshold, np.nan, shift=0.5)
    with fine, warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        idata = pm.sample(draws=300, tune=300, chains=1, step=MLDA(coarse_models=[coarse]), random_seed=3,
                          **SAMPLE_KW)
    said = [str(w.message) for w in record if "coarse_models[0]'s log density is nan" in str(w.message)]
    assert not (idata.posterior["mu"].values[..., 0] > threshold).any()  # the region is missing
    if fine_fails:
        assert said == []
    else:
        assert len(said) == 1 and "where the fine model's is" in said[0] and "mu[0]=" in said[0], said


def test_coarse_failures_in_the_tails_alone_are_not_reported(monkeypatch):
    """A coarse density NaN only far out (mu[0] more than 3 above the posterior mean, 14 posterior sds):
    the start search's prior draws meet it (a new user's warning came in every run, naming points whose
    fine log densities were -500 to -17 600, and used up the one warning a chain, so a coarse model NaN
    in a quarter of the posterior went unreported), the draws after tuning do not; nothing is said."""
    from pymc_kameleon.steps.multilevel_levels import CoarseLevel

    failures = []
    log_density = CoarseLevel.log_density

    def counted(self, x):
        value = log_density(self, x)
        failures.append(not value > -np.inf)
        return value

    monkeypatch.setattr(CoarseLevel, "log_density", counted)
    coarse = _failing_model(POST_MEAN[0] + 3.0, np.nan, shift=0.5)
    with conjugate_model(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        pm.sample(draws=300, tune=300, chains=1, step=MLDA(coarse_models=[coarse]), random_seed=3,
                  **SAMPLE_KW)
    assert sum(failures) > 0  # the coarse model did fail, in the tails
    assert not [w for w in record if "log density is nan" in str(w.message)]


def test_a_coarse_density_of_zero_where_the_chain_starts_is_a_clear_error():
    """A coarse density of -inf holds the chain where it starts as NaN does (the fine decision's ratio has
    pi_coarse(x) = 0 above): refused where the chain starts after the start search; with the search the
    chain moves to a start where the coarse model is finite."""
    threshold = POST_MEAN[0] + 0.5 * POST_SD
    coarse = _failing_model(threshold, -np.inf, shift=0.5)
    start = {"mu": np.array([threshold + 1.0, 0.0])}
    with conjugate_model(), pytest.raises(ValueError, match=r"log density at the current point is -inf"):
        pm.sample(draws=10, tune=10, chains=1, step=MLDA(coarse_models=[coarse], start="initial_point"),
                  random_seed=3, initvals=start, **SAMPLE_KW)
    with conjugate_model():
        idata = pm.sample(draws=50, tune=50, chains=1, step=MLDA(coarse_models=[coarse]), random_seed=3,
                          initvals=start, **SAMPLE_KW)
    assert (idata.posterior["mu"].values[..., 0] < threshold).all()


def test_a_coarse_density_nan_at_the_start_is_a_clear_error():
    """A chain starting where a coarse density is NaN cannot move (a new user's chain stayed at its start,
    told only that it was stuck); it is refused, as a NaN fine density is."""
    threshold = POST_MEAN[0] + 0.5 * POST_SD
    coarse = _failing_model(threshold, np.nan, shift=0.5)
    match = r"coarse_models\[0\]'s log density at the current point is nan"
    with conjugate_model(), pytest.raises(ValueError, match=match):
        pm.sample(draws=10, tune=10, chains=1, step=MLDA(coarse_models=[coarse]), random_seed=3,
                  initvals={"mu": np.array([threshold + 1.0, 0.0])}, **SAMPLE_KW)


def test_the_coarse_start_error_names_the_point_in_the_models_units():
    """A new user's coarse model was NaN at PyMC's initial point, and the error named the point by the
    sampled coordinate alone (``r_log__=0.125``) where the fine model's error says ``r=1.133
    (r_log__=0.125)``: both now give the model's own value first."""

    def model(coarse):
        with pm.Model() as m:
            r = pm.LogNormal("r", 0.0, 1.0)
            pm.Normal("y", r, 1.0, observed=[1.0, 1.2])
            if coarse:
                pm.Potential("fails_above_1", pt.switch(r > 1.0, np.nan, 0.0))
        return m

    coarse = model(coarse=True)
    with model(coarse=False), pytest.raises(ValueError, match=r"point is nan \(r=2\. \(r_log__=0\.6931\)\)"):
        pm.sample(draws=10, tune=10, chains=1, step=MLDA(coarse_models=[coarse]), random_seed=3,
                  initvals={"r": 2.0}, **SAMPLE_KW)


def test_a_stuck_chain_is_told_mldas_own_remedies():
    """A new user's chain stuck behind a biased coarse model was told to tune longer or start closer (and
    about pseudo-marginal estimates); MLDA names the coarse model, the error model and the rates."""
    fine, coarse = conjugate_model(), conjugate_model(3.0)
    with fine:
        plain = MLDA(coarse_models=[coarse], adaptive_error_model=False)
        corrected = MLDA(coarse_models=[coarse], adaptive_error_model=True)
    said = plain._stuck_remedy()
    assert "adaptive_error_model=True" in said and "subsampling_rates" in said
    assert "adaptive_error_model" not in corrected._stuck_remedy()
    # Stuck where few iterations reached the fine level (a new user's three levels: 36 fine evaluations in
    # a run): the text says so and names the middle level, not the finest level's acceptance.
    coarsest = conjugate_model(6.0)
    with fine:
        three = MLDA(coarse_models=[coarsest, coarse], subsampling_rates=1, adaptive_error_model=False)
    three._chain.judged_since_move = 3
    said = three._stuck_remedy()
    assert "Only 3 of these iterations reached the fine level" in said and "a middle level" in said
    assert "subsampling_rates" not in said  # they are 1 already
    three._chain.judged_since_move = 400
    assert "400 of these proposals reached the fine level" in three._stuck_remedy()


def test_every_coarse_evaluation_is_counted_also_when_tuning_ends():
    """The error model's last update at the end of tuning re-evaluates the coarse density at the current
    state, between two steps; a new user counted one coarse call per chain more than the statistics."""
    fine, coarse = offset_model(), offset_model(1.0)
    with fine:
        step = MLDA(coarse_models=[coarse], adaptive_error_model=True)
        idata = pm.sample(draws=50, tune=120, chains=2, step=step, random_seed=3, discard_tuned_samples=False,
                          **SAMPLE_KW)
    counted = sum(int(group["level0_logp_evals"].values.sum())
                  for group in (idata.warmup_sample_stats, idata.sample_stats))
    assert counted == step._model_levels[0].n_evals


def test_a_middle_level_judges_only_the_subchain_ends_that_moved():
    """At subsampling rate 1 most coarsest steps are rejected, so most middle-level steps have no end to
    judge: a new user's middle level was reported as accepting 14% where it accepted 61% of the ends that
    moved. Its end-of-tuning record counts the decisions it made (its evaluations), as the finest level's."""
    fine, coarse = conjugate_model(), [conjugate_model(0.5), conjugate_model(0.2)]
    with fine:
        step = MLDA(coarse_models=coarse, subsampling_rates=1, adaptive_error_model=False)
        idata = pm.sample(draws=10, tune=300, chains=1, step=step, random_seed=2, discard_tuned_samples=False,
                          **SAMPLE_KW)
    kept = step._chain.middle_decisions[1]
    evaluations = idata.warmup_sample_stats["level1_logp_evals"].values.ravel()
    evaluations = evaluations[evaluations > 0][-len(kept):]
    assert [decisions for _, decisions in kept] == list(evaluations)
    assert sum(accepted for accepted, _ in kept) / sum(evaluations) > 0.5
    moved = idata.warmup_sample_stats["level0_accept_rate"].values.ravel()[-len(kept):]
    assert moved.mean() < 0.6  # most middle steps had nothing to judge


def test_a_middle_level_that_rejects_with_the_error_model_names_the_coarsest_model():
    """With the error model, a middle level that rejects most of the coarsest subchains' ends is told it
    may do better without the coarsest model (the error model corrects by a constant shift); without the
    error model the warning names the error model instead, as before."""
    fine, middle, coarsest = conjugate_model(), conjugate_model(0.5), conjugate_model(8.0)
    said = {}
    for error_model in (True, False):
        with fine:
            step = MLDA(coarse_models=[coarsest, middle], subsampling_rates=[2, 2],
                        adaptive_error_model=error_model)
        step._chain.middle_decisions = {1: [(0, 200)]}
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            step._warn_low_middle_acceptance()
        (said[error_model],) = [str(w.message) for w in record]
    assert "the middle level (level 1) accepted 0.0%" in said[True] and "subsampling_rates[0]" in said[True]
    assert "without coarse_models[0]" in said[True] and "adaptive_error_model=True" not in said[True]
    assert "without coarse_models[0]" not in said[False] and "adaptive_error_model=True" in said[False]
    assert "the coarse posterior below it (coarse_models[0]'s)" in said[False]


def test_the_finest_levels_warning_names_the_coarse_model_below_it():
    """With three levels the finest level's low-acceptance warning named no model (a new user's run, whose
    middle model was the biased one); two levels keep the plain wording (the control)."""
    fine = conjugate_model()
    three, two = [conjugate_model(0.1), conjugate_model(8.0)], [conjugate_model(8.0)]
    for coarse_models, named in ((three, True), (two, False)):
        with fine:
            step = MLDA(coarse_models=coarse_models, subsampling_rates=2)
        step._chain.fine_decisions = deque([0] * FINE_DECISIONS_KEPT, maxlen=FINE_DECISIONS_KEPT)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            step._warn_low_fine_acceptance()
        (message,) = [str(w.message) for w in record]
        assert ("coarse posterior (coarse_models[1]'s) is far" in message) == named, message
        assert "coarse posterior" in message


def _rounded_data_models():
    y = np.random.default_rng(0).normal(1.0, 2.0, size=50)

    def build(data):
        with pm.Model() as model:
            mu = pm.Normal("mu", 0, 10)
            sigma = pm.HalfNormal("sigma", 5)
            pm.Normal("y", mu, sigma, observed=data)
        return model

    return build(y), build(np.round(y))


@pytest.mark.parametrize("start", ["initial_point", "search"])
def test_a_chain_trapped_in_the_tails_is_told_to_start_elsewhere(start):
    """A new user's chain from far initvals (start="initial_point") stopped where the coarse model (rounded
    data) lies 49 nats below the fine one, against 2 in the posterior: the fine level rejected every end, and
    the warnings named the error model and longer tuning, which changed nothing. They now name the tails and
    the start search; with the search (the control) the chains find the posterior and nothing is said."""
    fine, coarse = _rounded_data_models()
    with fine, warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        idata = pm.sample(
            step=MLDA(coarse_models=[coarse], subsampling_rates=3, start=start),
            initvals=[{"mu": -3.0, "sigma": 1.0}, {"mu": 4.0, "sigma": 6.0}],
            tune=1000, draws=600, chains=2, random_seed=2, **SAMPLE_KW,
        )
    told = [str(w.message) for w in record if "in the tails" in str(w.message)]
    sigma = idata.posterior["sigma"].mean("draw").values
    if start == "search":
        assert not told and np.all(np.abs(sigma - 1.89) < 0.15), (told, sigma)
    else:
        assert sigma.min() < 1.0  # the trap (NUTS: 1.885)
        assert len(told) == 2 and all("start='search', the default" in message for message in told), told
        assert any(m.startswith("MLDA: at the end of tuning the finest level accepted") for m in told)


def _normal_mean(obs_sd: float) -> pm.Model:
    """mu ~ N(0, 10^2), 20 observations y_i ~ N(mu, obs_sd): a coarse model with obs_sd r has a posterior
    about r times as wide as the fine one's (obs_sd 1)."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, obs_sd, observed=DATA[:, 0])
    return model


def _said_narrower(coarse, fine, seed=1):
    with fine, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = MLDA(coarse_models=[coarse])
        idata = pm.sample(draws=4 * COARSE_SPREAD_DRAWS, tune=600, chains=2, step=step, random_seed=seed,
                          **SAMPLE_KW)
    said = [str(w.message) for w in caught if "coarsest model's posterior is narrower" in str(w.message)]
    return said, idata


def test_a_coarse_posterior_narrower_than_the_fine_one_is_said():
    """A coarse observation sd half the fine one: each chain says so once its draws can tell, naming
    the coordinate and its figure (about 0.5), the second chain in short. Controls: a coarse model as wide
    as the fine one but 1 sd off (2-d), and a wider one, say nothing; and the run's evaluations at the end
    of tuning are the first draw's."""
    said, idata = _said_narrower(_normal_mean(0.5), _normal_mean(1.0))
    assert len(said) == 2
    assert "along mu the coarsest level alone (2700 steps after tuning) spreads 0." in said[0]
    assert "(Another chain said the same above" in said[1]
    assert "a fixed noise sd no smaller than the fine model's" in said[0]
    assert int(idata.sample_stats["level0_logp_evals"].values[0, 0]) >= coarse_probe_steps(1, 600 * 5) == 3000
    assert not _said_narrower(_normal_mean(1.3), _normal_mean(1.0))[0]
    assert not _said_narrower(conjugate_model(1.0), conjugate_model(), seed=2)[0]
