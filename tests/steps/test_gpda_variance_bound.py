"""GP-DA after tuning: stage 1 compares its uniform with a bound of alpha_1 first, for MH from an O(t)
bound of the GP's variance (``DelayedAcceptanceMH``, decision record 0045), for MALA from a bound of the
GP's joint covariance given its first rows (``DelayedAcceptanceMALA``, 0055). The decisions, so the
draws, must be those of the plain computation; only the statistics of the steps the bound decided
change (``gp_sd`` NaN, ``stage1_accept`` the bound)."""

import numpy as np
import pymc as pm

from pymc_kameleon import GPDelayedAcceptanceMALA, GPDelayedAcceptanceMH
from pymc_kameleon.core.gp.surrogate import GPSurrogate
from pymc_kameleon.testing import SAMPLE_KW


def _model():
    """A 3-d regression-like target: a Gaussian prior and a likelihood with some correlation."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 3))
    y = X @ np.array([1.0, -0.5, 0.3]) + rng.normal(0, 0.5, 30)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Normal("y", X @ b, 0.5, observed=y)
    return model


def _sample(step_class=GPDelayedAcceptanceMH):
    with _model():
        return pm.sample(
            step=step_class(), tune=600, draws=800, chains=2, cores=1, random_seed=4, **SAMPLE_KW
        )


def test_the_bound_decides_many_rejections_and_changes_no_draw(monkeypatch):
    bounded = _sample()
    original = GPSurrogate.predict_with_variance_bound

    def no_bound(self, theta):  # the plain computation: the variance at every proposal
        mean, _, row = original(self, theta)
        return mean, np.inf, row

    monkeypatch.setattr(GPSurrogate, "predict_with_variance_bound", no_bound)
    plain = _sample()
    # Here 81% of the draws' proposals fail stage 1 and the bound decides all of them.
    _check_the_bound_changed_no_decision(bounded, plain, 0.5)


def _check_the_bound_changed_no_decision(bounded, plain, decided_at_least):
    np.testing.assert_array_equal(bounded.posterior["b"].values, plain.posterior["b"].values)
    for name in ("accept", "accepted", "exact_eval", "stage2_accept"):
        np.testing.assert_array_equal(bounded.sample_stats[name].values, plain.sample_stats[name].values)
    decided = np.isnan(bounded.sample_stats["gp_sd"].values) & bounded.sample_stats["screened"].values
    assert decided.mean() > decided_at_least, decided.mean()
    assert not bounded.sample_stats["accepted"].values[decided].any()  # only ever rejections
    stage1 = bounded.sample_stats["stage1_accept"].values
    assert np.all(stage1[decided] >= plain.sample_stats["stage1_accept"].values[decided])


def test_mala_s_bound_decides_many_rejections_and_changes_no_draw(monkeypatch):
    bounded = _sample(GPDelayedAcceptanceMALA)
    original = GPSurrogate.predict_joint_with_bound

    def no_bound(self, theta):  # a covariance bound that cannot screen: the plain computation
        mean, cov_bound, parts = original(self, theta)
        return mean, np.full_like(cov_bound, np.inf), parts

    monkeypatch.setattr(GPSurrogate, "predict_joint_with_bound", no_bound)
    plain = _sample(GPDelayedAcceptanceMALA)
    # Here 69% of the draws' proposals fail stage 1 and the bound decides all of them.
    _check_the_bound_changed_no_decision(bounded, plain, 0.4)
