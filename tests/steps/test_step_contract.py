"""What every step of ours shares with PyMC's own steps: the `lp` statistic, and options typed as
NumPy scalars."""

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import GPDelayedAcceptanceMALA, GPDelayedAcceptanceMH, KameleonMetropolis

SAMPLE_KW = dict(progressbar=False, compute_convergence_checks=False)
STEPS = [KameleonMetropolis, GPDelayedAcceptanceMH, GPDelayedAcceptanceMALA]


def regression_model():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        s = pm.HalfNormal("s", 1.0)  # a transformed variable: lp is in the log-scale coordinates
        pm.Normal("y", b[0] + b[1] * np.arange(4.0), s, observed=[0.1, 0.6, 0.9, 1.7])
    return model


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
}


@pytest.mark.parametrize("cls", STEPS)
def test_numpy_scalar_options_are_accepted(cls):
    with regression_model():
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


def test_random_walk_gp_da_ignores_n_subsample():
    with regression_model():
        GPDelayedAcceptanceMH(n_subsample=1)  # no Kameleon component, so no subsample


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


@pytest.mark.parametrize(
    "cls, kwargs, message",
    [
        (KameleonMetropolis, {}, "tuning took 100 steps"),
        (GPDelayedAcceptanceMH, {}, "tuning took 100 steps"),
        (GPDelayedAcceptanceMALA, {"initial_points": 150}, "still in the exact warm-up"),
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
    assert len([w for w in caught if message in str(w.message)]) == 2
    assert idata.sample_stats["accept"].dtype == np.float64
