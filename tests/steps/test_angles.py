"""Angles (pm.VonMises): tuning keeps them in one period of the sampler's 2 pi-periodic coordinate
(pymc_kameleon.core.angles)."""

import warnings

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import GPDelayedAcceptanceMH, KameleonMetropolis
from pymc_kameleon.core.angles import AngleFrame, mean_direction, wrap_about
from pymc_kameleon.testing import SAMPLE_KW, mcse_of_mean, von_mises_model, von_mises_moments


# ------------------------------------------------------------------------------------ the core
def test_wrap_about_moves_only_what_is_outside_the_period():
    x = np.array([[3.0, 10.0, -3.0], [9.0, 0.5, -9.5]])
    moved = wrap_about(x, np.array([np.pi, -np.pi]), [0, 2])
    # Column 0 about pi: 3.0 stays (its bits too), 9.0 - 2 pi = 2.7168...; column 2 about -pi: -3.0
    # stays, -9.5 + 2 pi = -3.2168...; column 1 is no angle.
    assert moved[0, 0] == 3.0 and moved[0, 2] == -3.0 and moved[0, 1] == 10.0 and moved[1, 1] == 0.5
    assert moved[1, 0] == pytest.approx(9.0 - 2 * np.pi, abs=1e-15)
    assert moved[1, 2] == pytest.approx(-9.5 + 2 * np.pi, abs=1e-15)
    inside = np.array([1.0, 2.0])
    assert wrap_about(inside, np.array([0.5]), [0]) is inside  # nothing moves: the same array
    assert wrap_about(inside, np.array([0.5]), []) is inside


def test_mean_direction():
    assert mean_direction(np.array([np.pi - 0.1, -np.pi + 0.1])) == pytest.approx(np.pi)
    assert mean_direction(np.array([[0.2, 1.0], [0.4, 1.2]])) == pytest.approx([0.3, 1.1])


def test_the_frame_is_centred_on_the_windows_and_moves_continuously_across_pi():
    frame = AngleFrame([0])
    assert frame.centre is None and frame.wrap(np.array([7.0, 1.0]))[0] == 7.0
    # The first rows set the centre (their mean direction, pi - 0.05): the row at -pi + 0.1 joins them.
    rows = frame.record(np.array([[np.pi - 0.2, 5.0], [-np.pi + 0.1, 5.0]]))
    assert rows[1, 0] == pytest.approx(np.pi + 0.1) and rows[0, 0] == np.pi - 0.2
    assert frame.centre[0] == pytest.approx(np.pi - 0.05)
    # A row just past pi: atan2 says the mean direction is near -pi, the centre stays near +pi.
    frame.record(np.array([[-np.pi + 0.3, 0.0]]))
    assert frame.centre[0] == pytest.approx(np.pi + 0.2 / 3, abs=1e-3)  # offsets -0.2, 0.1, 0.3
    # Windows: the centre reads the current and the previous window's rows only.
    frame.next_window()
    frame.next_window()
    frame.record(np.array([[1.0, 0.0]]))
    assert frame.centre[0] == pytest.approx(1.0)
    assert frame.wrap(np.array([1.0 + 2 * np.pi, 3.0]))[0] == pytest.approx(1.0)


# ------------------------------------------------------------------------------------ the steps
STEPS = {"KameleonMetropolis": KameleonMetropolis, "GPDelayedAcceptanceMH": GPDelayedAcceptanceMH}


@pytest.mark.parametrize(
    "step_name, chains, tuning, kept",
    [
        ("KameleonMetropolis", 4, "pooled", True),
        ("KameleonMetropolis", 4, "pooled", False),  # the negative control
        ("KameleonMetropolis", 2, "per_chain", True),
        pytest.param("GPDelayedAcceptanceMH", 4, "pooled", True, marks=pytest.mark.slow),
    ],
)
def test_a_posterior_across_the_periods_edge(step_name, chains, tuning, kept, monkeypatch):
    """Angles about pi: chains that found the posterior at pi and at -pi learned a covariance 2 pi wide
    in mu, and sampled kappa with 1/10 of its sd (R-hat 2.6); a chain alone, whose period's centre
    jumped from pi to -pi between windows, accepted none of its independent draws. With the angles kept
    in one period the posterior matches the grid's. The negative control (no angle coordinates) shows
    the failure."""
    from pymc_kameleon.steps import kameleon

    if not kept:
        monkeypatch.setattr(kameleon, "angle_coordinates", lambda vars, point, model: ())
    model, obs = von_mises_model(direction=np.pi)
    direction, mean_kappa, sd_kappa = von_mises_moments(obs)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            step=STEPS[step_name](tuning=tuning), tune=1000, draws=1000, chains=chains, cores=1,
            random_seed=1, **SAMPLE_KW,
        )
    kappa, mu = idata.posterior["kappa"].values, idata.posterior["mu"].values
    direction_error = abs(np.angle(np.exp(1j * (mean_direction(mu.ravel()) - direction))))
    right = (
        direction_error < 0.03
        and abs(kappa.mean() - mean_kappa) < 4 * mcse_of_mean(kappa)
        and abs(kappa.std() / sd_kappa - 1) < 0.1
    )
    assert right == kept  # the control: the same checks fail
    if kept:
        independent = idata.sample_stats["independence"].values
        assert idata.sample_stats["accepted"].values[independent].mean() > 0.3
