"""KameleonMetropolis as a PyMC step: statistics, caching, non-finite proposals, kernels, adaptation.

The contract it shares with the other steps (discrete variables, invalid options, a non-finite start,
per-chain reset, seeds, pickling, cores=2) is in test_step_contract.py.
"""

import copy
import warnings

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import KameleonMetropolis
from pymc_kameleon.core.adaptation.independence import EXAM_DRAWS
from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.kameleon.moves import KameleonMoves
from pymc_kameleon.core.kameleon.scale_free import ScaleFreeProposal
from pymc_kameleon.steps.chain import side_stream
from pymc_kameleon.testing import SAMPLE_KW


def banana_model(b=0.5, dim=2):
    with pm.Model() as model:
        x = pm.Flat("x", shape=dim)
        pm.Potential(
            "lp", -0.5 * x[0] ** 2 - 0.5 * (x[1] - b * x[0] ** 2) ** 2 - 0.5 * pm.math.sum(x[2:] ** 2)
        )
    return model


def test_samples_with_defaults_and_reports_stats():
    with banana_model():
        idata = pm.sample(
            step=KameleonMetropolis(kameleon_after=0), draws=300, tune=800, chains=1, random_seed=1,
            **SAMPLE_KW,
        )
    stats = idata.sample_stats
    declared = KameleonMetropolis.stats_dtypes_shapes
    for name in [
        "accept", "accepted", "scaling", "nu2", "bandwidth", "tune", "gamma", "kameleon", "independence",
        "logp_evals",
    ]:
        assert name in declared, name
        # PyMC consumes `tune` itself to split warm-up from posterior draws.
        assert name == "tune" or name in stats, name
    # Of the moves the independence component leaves, the Kameleon component draws 90% after tuning,
    # the AM fallback the rest.
    walk = ~stats["independence"].values
    assert walk.any() and not (stats["kameleon"].values & ~walk).any()
    assert 0.85 < stats["kameleon"].values[walk].mean() < 0.95
    # The current log density is cached; the first draw counts the end-of-tuning exam too.
    assert (stats["logp_evals"].values[:, 1:] == 1).all()
    assert (stats["logp_evals"].values[:, 0] - 1) % EXAM_DRAWS == 0
    for name in ("scaling", "nu2", "bandwidth"):
        assert np.isfinite(stats[name].values).all(), name
        # Frozen after tuning: one Z, one bandwidth, one nu2, one AM scale.
        assert np.unique(stats[name].values).size == 1, name
    assert 0.05 < stats["accepted"].values.mean() < 0.8


def test_arviz_diagnostics_work_on_output():
    import arviz as az

    with banana_model():
        idata = pm.sample(
            step=KameleonMetropolis(), draws=300, tune=300, chains=2, random_seed=2, **SAMPLE_KW
        )
    summary = az.summary(idata)
    assert {"ess_bulk", "r_hat"} <= set(summary.columns)
    assert np.all(np.isfinite(az.ess(idata)["x"].values))
    assert np.all(np.isfinite(az.rhat(idata)["x"].values))


# --------------------------------------------------------------------- caching
class _Audit:
    """For every step: the Hastings terms the step used, against a fresh computation on a snapshot."""

    def __init__(self, monkeypatch):
        self.rows = []
        self._moves = []
        original = ScaleFreeProposal.propose

        def propose(proposal, y, rng):
            # The proposal as it proposes (a step may change it before: the end-of-tuning exam runs at the
            # first draw). Its jitter callback is a bound method, and copying it copied the whole step
            # with its compiled functions (20 s per test).
            snapshot = copy.deepcopy(proposal, memo={id(proposal.on_jitter): None})
            move = original(proposal, y, rng)
            self._moves.append((np.array(y, copy=True), move, snapshot))
            return move

        monkeypatch.setattr(ScaleFreeProposal, "propose", propose)

    def record(self):
        y, move, snapshot = self._moves.pop()
        if move.feasible and snapshot.state.phase == "kameleon":
            fwd, rev = snapshot.log_density(move.x, y), snapshot.log_density(y, move.x)
            self.rows.append((move.log_q_forward, fwd, move.log_q_reverse, rev))

    def mismatches(self):
        return sum(
            not (np.isclose(got_f, fwd, rtol=1e-8) and np.isclose(got_r, rev, rtol=1e-8))
            for got_f, fwd, got_r, rev in self.rows
        )


def _run_audited(step_cls, monkeypatch, n_steps=600):
    audit = _Audit(monkeypatch)

    class Audited(step_cls):
        def astep(self, q0):
            out = super().astep(q0)
            audit.record()
            return out

    with banana_model():
        step = Audited(adapt_interval=30, n_subsample=60, kameleon_after=0)
        point = pm.modelcontext(None).initial_point()
        step.tune = True
        step.reset_tuning()
        for i in range(n_steps):
            if i == n_steps // 2:
                step.stop_tuning()
            point, _ = step.step(point)
    return audit


def test_cached_current_proposal_is_rebuilt_after_adaptation(monkeypatch):
    """Regression test for the original code's bug: after Z, sigma or nu2 change, q(.|y) must be rebuilt."""
    audit = _run_audited(KameleonMetropolis, monkeypatch)
    assert len(audit.rows) > 300
    assert audit.mismatches() == 0


def test_cache_audit_negative_control(monkeypatch):
    """A step that keeps a stale current-state proposal (the original bug) is caught by the audit."""

    original = KameleonMoves.at_current

    def stale(self, y):
        cached = self._cur
        if cached is not None and np.array_equal(cached[1].center, y):
            return cached[1]  # ignores that nu2 changed
        return original(self, y)

    monkeypatch.setattr(KameleonMoves, "at_current", stale)
    audit = _run_audited(KameleonMetropolis, monkeypatch)
    assert audit.mismatches() > 0


def test_current_logp_recomputed_when_other_block_changes():
    """Inside a CompoundStep the other block moves; the cached log density must not be reused."""
    with pm.Model():
        a = pm.Normal("a", 0, 1)
        pm.Normal("b", a, 1)
        step_b = KameleonMetropolis([pm.modelcontext(None)["b"]])
        step_a = pm.Metropolis([a])
        idata = pm.sample(step=[step_b, step_a], draws=400, tune=300, chains=1, random_seed=3, **SAMPLE_KW)
    evals = idata.sample_stats["logp_evals"].values[0]
    a_moved = idata.sample_stats["accepted"].values[0, :, 1].astype(bool)  # Metropolis' flag
    # After the Metropolis step accepted a move of `a`, Kameleon re-evaluates (2 evals), else 1.
    assert 50 < a_moved.sum() < 390
    assert np.all(evals[1:][a_moved[:-1]] == 2)
    assert np.all(evals[1:][~a_moved[:-1]] == 1)


# ------------------------------------------ non-finite densities, singular covariances
@pytest.mark.parametrize("bad", [np.nan, -np.inf])
def test_nonfinite_log_density_at_proposal_is_rejected(bad):
    """The region x > 1 has NaN / -inf density; the chain must never enter it. A NaN there after
    tuning is said once per chain, naming the point (a model that fails inside the posterior, an ODE
    solver, cuts that region out of the draws; a new user's MLDA run did so at R-hat 1.00 with no
    word); -inf, a zero density, is not."""
    with pm.Model(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        x = pm.Normal("x", 0, 1)
        pm.Potential("wall", pm.math.switch(x > 1.0, bad, 0.0))
        idata = pm.sample(
            step=KameleonMetropolis(kameleon_after=0), draws=1500, tune=500, chains=1, random_seed=4,
            **SAMPLE_KW,
        )
    draws = idata.posterior["x"].values
    assert np.all(np.isfinite(draws)) and draws.max() <= 1.0
    assert draws.min() < -1.0  # it did move
    said = [str(w.message) for w in record if "log density was NaN at a proposal" in str(w.message)]
    if np.isnan(bad):
        assert len(said) == 1 and "(x=" in said[0], said
    else:
        assert said == []


def test_a_point_in_a_warning_shows_its_first_coordinates_by_name():
    """A 50-d point filled a warning: the first 12 coordinates are named, then how many there are."""
    with pm.Model():
        pm.Normal("x", 0, 1, shape=50)
        pm.Normal("s", 0, 1)
        step = KameleonMetropolis()
    names = step._coordinate_names
    text = step._describe_point(np.arange(51.0))
    assert text.startswith(f"{names[0]}=0, {names[1]}=1") and f"{names[11]}=11," in text
    assert f"{names[12]}=" not in text and text.endswith("... (51 coordinates)")
    short = step._describe_point(np.arange(3.0))  # names do not fit: the values, summarised
    assert short.startswith("x = [0. 1. 2.]")


def test_singular_covariance_gets_jitter_and_never_crashes():
    """gamma = 0 and a bandwidth 100x below the whitened spread: the kernel gradients at most points
    underflow, so the covariance is (numerically) zero: jitter, warn, carry on. (Seed 4: every draw
    needed jitter; at seed 5, since the scan's transit rule, tuning did but no draw did.)"""
    with pm.Model():
        pm.Normal("x", 0, 1, shape=3)
        with pytest.warns(RuntimeWarning, match="jitter"):
            idata = pm.sample(
                step=KameleonMetropolis(gamma=0.0, bandwidth=0.01, adapt_interval=20, kameleon_after=0),
                draws=100, tune=300, chains=1, random_seed=4, **SAMPLE_KW,
            )
    assert np.all(np.isfinite(idata.posterior["x"].values))
    assert idata.sample_stats["jitter"].values.max() > 0


# ------------------------------------------------- compound steps, kernels, adaptation
def test_compound_step_with_nuts():
    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        z = pm.Normal("z", mu, 1, shape=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(
                step=[KameleonMetropolis([z]), pm.NUTS([mu])],
                draws=300, tune=300, chains=2, random_seed=10, **SAMPLE_KW,
            )
    assert idata.posterior["z"].shape == (2, 300, 2)
    assert "scaling" in idata.sample_stats and "step_size" in idata.sample_stats


@pytest.mark.parametrize("kernel", ["gaussian", "matern32", "matern52", "linear"])
def test_every_kernel_samples(kernel):
    with banana_model():
        idata = pm.sample(
            step=KameleonMetropolis(kernel=kernel, n_subsample=200, kameleon_after=0),
            draws=200, tune=800, chains=1, random_seed=11, **SAMPLE_KW,
        )
    walk = ~idata.sample_stats["independence"].values  # the moves the independence component leaves
    assert idata.sample_stats["kameleon"].values[walk].mean() > 0.8
    assert 0.02 < idata.sample_stats["accepted"].values.mean() < 0.9


def test_vanishing_adaptation_keeps_adapting_after_tuning():
    with banana_model():
        idata = pm.sample(
            # Without the independence component, whose moves adapt no scale.
            step=KameleonMetropolis(adaptation="vanishing", vanishing_decay=0.5, kameleon_after=0,
                                    independence_weight=0),
            draws=2000, tune=800, chains=1, random_seed=12, **SAMPLE_KW,
        )
    stats = idata.sample_stats
    # p_t = t^-0.5: about 2 sqrt(2000) ~ 90 adaptation steps after tuning, front-loaded; each moves
    # one of the two Robbins-Monro scales.
    changes = (np.diff(stats["nu2"].values.ravel()) != 0) | (np.diff(stats["scaling"].values.ravel()) != 0)
    assert 40 < changes.sum() < 150
    assert changes[:200].sum() > changes[-200:].sum()


def test_tuning_shorter_than_the_scan_warns_and_still_moves_every_coordinate():
    with pm.Model():
        pm.Normal("x", 0, [1.0, 10.0, 100.0], shape=3)
        with pytest.warns(UserWarning, match="tuning took 20 steps"):
            idata = pm.sample(
                step=KameleonMetropolis(), tune=20, draws=300, chains=1, random_seed=5, **SAMPLE_KW
            )
    x = idata.posterior["x"].values[0]
    assert np.all(np.ptp(x, axis=0) > 0), np.ptp(x, axis=0)
    assert np.all(np.ptp(x, axis=0) > 0.5 * np.array([1.0, 10.0, 100.0]))


def test_stuck_after_tuning_counts_rejections_in_a_row_and_says_so_once():
    from pymc_kameleon.steps.reporting import STUCK_DRAWS, StuckAfterTuning

    watch = StuckAfterTuning()
    assert all(watch.message("S", False, tune=True) is None for _ in range(2 * STUCK_DRAWS))  # tuning
    for _ in range(STUCK_DRAWS - 1):
        assert watch.message("S", False, tune=False) is None
    assert watch.message("S", True, tune=False) is None  # an acceptance starts the count again
    said = [watch.message("S", False, tune=False) for _ in range(3 * STUCK_DRAWS)]
    assert said[STUCK_DRAWS - 1].startswith(f"S: after tuning the chain rejected {STUCK_DRAWS} proposals")
    assert sum(m is not None for m in said) == 1
    assert "pseudo-marginal" not in said[STUCK_DRAWS - 1]  # that case has its own text
    fresh = StuckAfterTuning()
    own = [fresh.message("S", False, False, remedy="Try R.") for _ in range(STUCK_DRAWS)][-1]
    assert own.endswith("Try R.") and "Increase `tune`" not in own  # a step's own advice (MLDA's)


@pytest.mark.parametrize("warned_before", [True, False])
def test_the_stuck_warning_points_to_earlier_warnings_only_if_there_were_any(warned_before):
    """A new user's centred hierarchical model stuck after a tuning that raised no warning, and the text
    sent them to "the end-of-tuning warnings", which did not exist."""
    from pymc_kameleon.steps.reporting import STUCK_DRAWS, StuckAfterTuning

    watch = StuckAfterTuning()
    said = [watch.message("S", False, False, warned_before) for _ in range(STUCK_DRAWS)][-1]
    assert ("earlier warning" in said) == warned_before, said
    assert ("raised no warning" in said) != warned_before, said


@pytest.mark.parametrize("pseudo_marginal", [True, False])
def test_the_stuck_warning_of_a_pseudo_marginal_chain_names_the_estimate(pseudo_marginal):
    """A new user's GP-DA chains sat inside the posterior on estimates 2 nats too high for 500-1200 draws,
    and the warning blamed a funnel's neck; with an estimated likelihood it names the kept estimate and
    the remedies (more samples per estimate, a correlated estimator). Control: without one, the funnel."""
    from pymc_kameleon.steps.reporting import STUCK_DRAWS, StuckAfterTuning

    watch = StuckAfterTuning()
    said = [watch.message("S", False, False, False, pseudo_marginal) for _ in range(STUCK_DRAWS)][-1]
    assert ("likelihood estimate it keeps" in said and "correlated" in said) == pseudo_marginal, said
    assert ("funnel" in said) != pseudo_marginal, said


def test_a_stuck_pseudo_marginal_chain_whose_proposals_drew_no_estimate_is_not_told_to_blame_it():
    """A new user's GP-DA chain rejected 1349 proposals in a row, 7 of which drew an estimate (its GP's
    stage 1 rejected the rest), and was told its kept estimate was too high and to use more samples per
    estimate. Under a tenth of the rejections with an estimate: the text names what else rejects."""
    from pymc_kameleon.steps.reporting import STUCK_DRAWS, StuckAfterTuning

    said = {}
    for estimated_every in (1, 100):
        watch = StuckAfterTuning()
        for i in range(STUCK_DRAWS):
            if watch.count(False, False, estimated=i % estimated_every == 0):
                said[estimated_every] = watch.text("S", False, True)
    assert "likelihood estimate it keeps is probably far above" in said[1], said[1]
    assert "only 5 of them drew a likelihood estimate" in said[100], said[100]
    assert "probably far above" not in said[100] and "stage 1" in said[100]


def test_a_proposal_equal_to_the_state_counts_as_not_moved(monkeypatch):
    """A chain whose proposal scale collapsed proposes its own state: the MH ratio is 1, but nothing moves.
    A new user's frozen chain reported accepted = 1 at every draw and no stuck warning; now accepted is 0
    there (accept, the probability, stays 1) and the stuck warning comes. Here every proposal is the
    state, from the first draw (tune=0)."""
    import pymc_kameleon.steps.kameleon as kameleon_module
    from pymc_kameleon.core.proposals import Move

    original = kameleon_module.metropolis_hastings_step

    class Frozen:
        def propose(self, y, rng):
            return Move(np.array(y, dtype=float, copy=True), component="adaptive_metropolis")

        def accept(self, move):
            pass

    def frozen_step(proposal, y, logp_y, log_density, rng):
        return original(Frozen(), y, logp_y, log_density, rng)

    monkeypatch.setattr(kameleon_module, "metropolis_hastings_step", frozen_step)
    with pm.Model(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = pm.Normal("x", 0, 1, shape=2)
        pm.Normal("y", x, 1.0, observed=np.zeros(2))
        idata = pm.sample(step=KameleonMetropolis(), tune=0, draws=600, chains=1, random_seed=3, **SAMPLE_KW)
    stats = idata.sample_stats
    assert (stats["accept"].values == 1.0).all() and (stats["accepted"].values == 0.0).all()
    assert [w for w in caught if "proposals in a row" in str(w.message)]


def _blow_up_scales_as_tuning_ends(monkeypatch):
    """Every proposal lands far out after tuning: the scales grow 1e6-fold as tuning ends."""
    original = ScaleFreeAdaptation.end_tuning

    def end_tuning(self, rng, **kwargs):
        changed = original(self, rng, **kwargs)
        self.state.am_scale.rescale(1e6)
        if self.state.nu2 is not None:
            self.state.nu2.rescale(1e12)
            self.state.set_kameleon_scales()
        return changed

    monkeypatch.setattr(ScaleFreeAdaptation, "end_tuning", end_tuning)


def _stuck_warnings(step, chains):
    """The stuck-after-tuning warnings of 900 + 600 iterations on a 2-d normal, and the draws."""
    with pm.Model(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = pm.Normal("x", 0, 1, shape=2)
        pm.Normal("y", x, 1.0, observed=np.zeros(2))
        idata = pm.sample(step=step(), tune=900, draws=600, chains=chains, cores=1, random_seed=3,
                          **SAMPLE_KW)
    return sorted(str(w.message) for w in caught if "proposals in a row" in str(w.message)), idata


@pytest.mark.parametrize("broken", [True, False], ids=["scales-blown-up", "control"])
@pytest.mark.parametrize("step_name", ["KameleonMetropolis", "GPDelayedAcceptanceMH"])
def test_a_chain_stuck_after_tuning_warns(step_name, broken, monkeypatch):
    """Tuning's checks read the tuning states; a chain that sticks after them (here its scales are
    blown up 1e6 times as tuning ends, so every proposal lands far out) used to repeat one point
    without a word. The control (scales as tuned) says nothing."""
    import pymc_kameleon

    if broken:
        _blow_up_scales_as_tuning_ends(monkeypatch)
    # Without the independence component, whose draws ignore the blown-up scales.
    stuck, idata = _stuck_warnings(lambda: getattr(pymc_kameleon, step_name)(independence_weight=0), chains=1)
    assert len(stuck) == (1 if broken else 0), stuck
    if broken:
        assert stuck[0].startswith(f"{step_name}: after tuning the chain rejected 500 proposals in a row")
        assert "its tuning raised no warning" in stuck[0], stuck[0]  # nothing was wrong until tuning ended
        assert idata.sample_stats["accepted"].values.sum() == 0


def test_warnings_about_one_chain_of_a_population_name_it(monkeypatch):
    """Pooled tuning, 3 chains whose scales are blown up as tuning ends: each says it is stuck, naming
    itself (chains=1, above, says "the chain")."""
    _blow_up_scales_as_tuning_ends(monkeypatch)
    stuck, _ = _stuck_warnings(lambda: KameleonMetropolis(independence_weight=0), chains=3)
    assert [m[: m.index(" rejected")] for m in stuck] == [
        f"KameleonMetropolis: after tuning chain {k}" for k in range(3)
    ], stuck


def test_with_default_options_short_tuning_runs_the_am_walk_alone():
    """Below kameleon_after tuning steps the chain is am_weight=1's bit for bit: every move is the AM
    walk, the Kameleon statistics are NaN, and tuning raises no 'before the first Kameleon proposal'
    warning. Negative control: kameleon_after=0 builds a Kameleon proposal at the same budget."""
    runs = {}
    for label, options in (("default", {}), ("am", {"am_weight": 1.0}), ("mixture", {"kameleon_after": 0})):
        with banana_model(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runs[label] = pm.sample(
                step=KameleonMetropolis(**options), draws=200, tune=1000, chains=1, random_seed=6, **SAMPLE_KW
            )
        assert not any("before the first Kameleon proposal" in str(w.message) for w in caught), label
    stats = runs["default"].sample_stats
    assert not stats["kameleon"].values.any()
    assert np.isnan(stats["nu2"].values).all() and (stats["subsample_size"].values == 0).all()
    for name in runs["default"].posterior.data_vars:
        np.testing.assert_array_equal(
            runs["default"].posterior[name].values, runs["am"].posterior[name].values
        )
    mixture = runs["mixture"].sample_stats
    walk = ~mixture["independence"].values  # the moves the independence component leaves
    assert mixture["kameleon"].values[walk].mean() > 0.5 and np.isfinite(mixture["nu2"].values).all()


@pytest.mark.parametrize("bad", [-1, 2.5, "soon", True])
def test_kameleon_after_must_be_a_non_negative_integer(bad):
    with banana_model(), pytest.raises(ValueError, match="kameleon_after"):
        KameleonMetropolis(kameleon_after=bad)


def _regression():
    model = pm.Model()
    with model:
        x = np.linspace(-1.0, 1.0, 30)
        a = pm.Normal("a", 0, 10)
        b = pm.Normal("b", 0, 10)
        y = 1.0 + 2.0 * x + 0.5 * np.random.default_rng(0).normal(size=30)
        pm.Normal("y", a + b * x, 0.5, observed=y)
    return model


def test_the_independence_component_is_measured_in_tuning_and_used_where_it_pays():
    """On a Gaussian posterior: tuning evaluates probes (steps with 2 evaluations, counted), the exam at
    the end of tuning evaluates EXAM_DRAWS draws of each shape (counted in the first draw), then the
    component draws about half the moves, and the draws are one evaluation per step. With
    independence_weight=0 there are no independent moves."""
    with _regression():
        step = KameleonMetropolis()
        idata = pm.sample(step=step, tune=1500, draws=600, chains=2, random_seed=5,
                          discard_tuned_samples=False, **SAMPLE_KW)
    warm, stats = idata.warmup_sample_stats, idata.sample_stats
    assert (warm["logp_evals"].values[:, 1:] == 2).any()  # probes, counted
    assert (stats["logp_evals"].values[:, 0] == 1 + 2 * EXAM_DRAWS).all()  # both shapes examined
    assert (stats["logp_evals"].values[:, 1:] == 1).all()
    assert 0.4 < stats["independence"].values.mean() < 0.6
    iotas = [p._chain.adaptation.state.independence_weight for p in step._population_steps.values()]
    assert iotas == [0.5, 0.5]
    with _regression():
        idata = pm.sample(step=KameleonMetropolis(independence_weight=0), tune=1500, draws=600, chains=2,
                          random_seed=5, discard_tuned_samples=False, **SAMPLE_KW)
    assert not idata.sample_stats["independence"].values.any()
    assert not idata.warmup_sample_stats["independence"].values.any()


def test_each_chains_independence_shape_is_in_the_sample_stats():
    """On the 17-d mixed-scale regression (a walk cannot learn C in 3000 steps there) both chains end
    tuning with the fitted shape at seed 3; ``independence_fitted`` says so in every draw of each chain,
    as each chain's state does, and the component draws about half the moves."""
    from pymc_kameleon.problems.regressions import regression_mixed_scales

    model, _, _ = regression_mixed_scales()
    with model:
        step = KameleonMetropolis()
        idata = pm.sample(step=step, tune=3000, draws=100, chains=2, random_seed=3, **SAMPLE_KW)
    fitted = idata.sample_stats["independence_fitted"].values
    states = [step._population_steps[c]._chain.adaptation.state for c in range(2)]
    assert [bool(row.all()) for row in fitted] == [s.independence_uses_fit for s in states] == [True, True]
    assert [s.independence_weight for s in states] == [0.5, 0.5]


def test_pseudo_marginal_models_keep_the_independence_component_off():
    from pymc_kameleon.testing import latent_gaussian_model

    with latent_gaussian_model():
        step = KameleonMetropolis()
    assert step.scale_free_adaptation.independence_weight == 0.0


@pytest.mark.parametrize("bad", [-0.1, 1.0, "half"])
def test_independence_weight_is_checked(bad):
    with _regression(), pytest.raises((ValueError, TypeError), match="independence_weight"):
        KameleonMetropolis(independence_weight=bad)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(am_weight=-0.5), r"am_weight must be a number in \[0, 1\], got -0.5"),
        (dict(am_weight=2), r"am_weight must be a number in \[0, 1\], got 2"),
        (dict(vanishing_decay=1.5), r"vanishing_decay must be in \(0, 1\]"),
        (dict(blocked="yes"), r"blocked must be True or False, got 'yes'"),
        # NumPy's "SeedSequence expects int or sequence of ints for entropy not seed" named no option.
        (dict(rng="seed"), r"rng must be None, an integer seed or a numpy.random.Generator, got 'seed'"),
        # Ignored before: a decay only the vanishing adaptation reads.
        (dict(vanishing_decay=0.5), r"vanishing_decay=0.5 has no effect with adaptation='freeze'.*"
                                    r"pass adaptation='vanishing' as well, or drop it\."),
    ],
)
def test_bad_options_get_one_message_that_names_them(kw, match):
    """A new user got "a finite number >= 0" for am_weight=-0.5 but "in [0, 1]" for 2, "vanishing decay"
    for vanishing_decay, and nothing for blocked="yes"."""
    with _regression(), pytest.raises(ValueError, match=match):
        KameleonMetropolis(**kw)


def test_the_end_of_tuning_exam_judges_the_shapes_the_draws_use():
    """On the 17-d mixed-scale regression at seed 2027 (4 chains, tune=3000: a benchmark seed) chain 0's
    last window judged the fit made 1025 steps before tuning ended (k-hat 0.83 from 51 probes) and
    turned the component off, and chain 3's used the learned shape; the exam judges the fits each
    chain has when tuning ends, on EXAM_DRAWS draws each, and every chain samples with the fitted
    shape. Negative control: what the last window said differs from the exam in those two chains."""
    from pymc_kameleon.problems.regressions import regression_mixed_scales

    model, _, _ = regression_mixed_scales()
    with model:
        step = KameleonMetropolis()
        pm.sample(step=step, tune=3000, draws=10, chains=4, random_seed=2027, **SAMPLE_KW)
    window_said, exam_said = [], []
    for c in range(4):
        adaptation = step._population_steps[c]._chain.adaptation
        decisions = [d for d in adaptation.independence_decisions if d.tune_step == 3000]
        window_said.append({d.fitted: d.on for d in decisions if not d.exam})
        exam = [d for d in decisions if d.exam]
        assert [d.draws for d in exam] == [EXAM_DRAWS, EXAM_DRAWS]
        exam_said.append({d.fitted: d.on for d in exam})
        assert adaptation.state.independence_weight == 0.5 and adaptation.state.independence_uses_fit
    assert exam_said == [{False: False, True: True}] * 4
    assert window_said[0] == {False: False, True: False} and window_said[3] == {False: True, True: False}


def test_the_exam_draws_from_a_stream_of_its_own():
    """side_stream leaves the chain's generator where it was and gives different numbers."""
    rng = np.random.default_rng(4)
    before = rng.bit_generator.state
    side = side_stream(rng)
    assert rng.bit_generator.state == before
    assert side.random() != np.random.default_rng(4).random()
    spawning = np.random.Generator(np.random.SFC64(4))  # no jumped(): a child of its seed
    side_stream(spawning).random()
    assert spawning.random() == np.random.Generator(np.random.SFC64(4)).random()


def test_the_exam_reads_the_other_steps_current_values(monkeypatch):
    """Beside another step, the end-of-tuning exam of the independence component evaluates the model with
    the other block's current values: run at stop_tuning it read them as this step last saw them, an
    iteration old in one process and current in a worker's, so a new user's draws differed between
    cores=1 and cores=2. At seed 4 pm.Metropolis moved c at the last tuning step: every evaluation from
    the end of tuning on reads the last tuning draw's c (the old code: 200 read the one before)."""
    import pytensor.tensor as pt
    from pytensor.compile.ops import as_op

    seen_c = []

    @as_op(itypes=[pt.dscalar, pt.dscalar], otypes=[pt.dscalar])
    def likelihood(a, c):
        seen_c.append(float(c))
        return np.asarray(-2.0 * (a - c) ** 2)

    ended_at = []
    stop_tuning = KameleonMetropolis.stop_tuning
    monkeypatch.setattr(KameleonMetropolis, "stop_tuning",
                        lambda self: (ended_at.append(len(seen_c)), stop_tuning(self))[1])
    with pm.Model():
        a = pm.Normal("a", 0, 1)
        c = pm.Normal("c", 0, 1)
        pm.Potential("lik", likelihood(a, c))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            steps = [KameleonMetropolis([a]), pm.Metropolis([c])]
            idata = pm.sample(tune=600, draws=2, chains=1, cores=1, step=steps, random_seed=4,
                              discard_tuned_samples=False, progressbar=False,
                              compute_convergence_checks=False)
    c_tune = idata.warmup_posterior["c"].values[0]
    assert c_tune[-1] != c_tune[-2]
    after = np.array(seen_c[ended_at[0]:])
    assert idata.sample_stats["logp_evals"].values[0, 0] > 100  # the exam's, in the first draw
    assert np.sum(after == c_tune[-2]) == 0 and np.sum(after == c_tune[-1]) > 100


def test_the_kameleon_component_does_not_join_when_tuning_ends():
    """Tuning that ends inside the first window past kameleon_after ends that window, and used to draw the
    first Z there: the draws then had a Kameleon component whose nu^2 never adapted (a new user's 24-d
    model at tune=10 000: 45% of the moves, acceptance 0.16 against 0.234), where the guide says such
    tuning keeps the Adaptive Metropolis walk. 2-d, kameleon_after=1000: the window 800-1600 cut at 1500
    keeps the walk, without the warning that a window passed kameleon_after without a Kameleon proposal;
    the control, tuned to 1700, has the component from the window that ended at 1600."""
    def run(tune):
        with pm.Model(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = pm.Normal("x", 0, 1)
            pm.Normal("y", x**2, 0.5)
            idata = pm.sample(step=KameleonMetropolis(kameleon_after=1000), chains=2, tune=tune, draws=200,
                              random_seed=1, progressbar=False, compute_convergence_checks=False)
        said = [str(w.message) for w in caught if "first Kameleon proposal" in str(w.message)]
        return float(idata.sample_stats["kameleon"].mean()), said

    share, said = run(1500)
    assert share == 0.0 and said == [], (share, said)
    share, said = run(1700)
    assert share > 0.2 and said == [], (share, said)


def test_a_stuck_pseudo_marginal_chain_gives_its_kept_estimate_and_names_a_far_start():
    """A new user's chain started far off sat at a kept log-likelihood estimate of -809 against the
    others' -124 and was told only to use more samples per estimate: the text now gives the kept
    estimate, to compare across chains, and names a start nearer the posterior (initvals). Without an
    estimate (the control) neither appears."""
    from pymc_kameleon.steps.reporting import STUCK_DRAWS, StuckAfterTuning

    watch = StuckAfterTuning()
    assert [watch.count(False, False) for _ in range(STUCK_DRAWS)][-1]  # every rejection drew an estimate
    said = watch.text("S", False, True, chain=2, kept_estimate=-809.34)
    assert "chain 2 rejected" in said and "kept log-likelihood estimate: -809.3" in said, said
    assert "initvals" in said and "correlation=0.99" not in said, said
    plain = watch.text("S", False, True)
    assert "kept log-likelihood estimate" not in plain, plain
