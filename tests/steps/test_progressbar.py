"""The progress bar shows each chain's acceptance rate over its recent steps (and, for GP-DA, the share
of steps that evaluated the likelihood), not the last step's acceptance probability, which jumps
between 0 and 1."""

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import GPDelayedAcceptanceMH, KameleonMetropolis
from pymc_kameleon.steps.reporting import RECENT_STEPS, RecentRates


def test_recent_rates_are_a_mean_then_an_exponential_average():
    recent = RecentRates()
    for accept, exact in [(1.0, True), (0.0, False), (0.5, True)]:
        recent.update(accept, exact)
    assert recent.accept == pytest.approx(0.5) and recent.exact == pytest.approx(2 / 3)
    recent = RecentRates()
    for _ in range(RECENT_STEPS):
        recent.update(1.0)
    recent.update(0.0, False)
    assert recent.accept == pytest.approx(1 - 1 / RECENT_STEPS)
    assert recent.exact == pytest.approx(1 - 1 / RECENT_STEPS)
    recent.update(float("nan"))  # a NaN acceptance probability leaves the rate as it was
    assert recent.accept == pytest.approx(1 - 1 / RECENT_STEPS)


@pytest.mark.parametrize("cls, fields", [
    (KameleonMetropolis, {"scaling", "accept_rate"}),
    (GPDelayedAcceptanceMH, {"scaling", "accept_rate", "exact_share"}),
])
def test_the_progress_bar_reads_the_recent_rates(cls, fields):
    with pm.Model():
        x = pm.Normal("x", 0, 1, shape=2)
        pm.Normal("y", x.sum(), 1, observed=[0.5, -0.2])
        step = cls()
        # PyMC builds its progress bar from these; a run with it shown must not fail.
        pm.sample(draws=20, tune=20, chains=1, step=step, random_seed=1, progressbar=True,
                  compute_convergence_checks=False)
    columns, initial = step._progressbar_config(n_chains=2)
    assert set(initial) == fields and len(columns) == len(fields)
    (update,) = step._make_progressbar_update_functions()
    stats = {name: np.float64(0.25) for name in cls.stats_dtypes_shapes}
    stats.update(accept=1.0, recent_accept_rate=0.3, recent_exact_share=0.2)
    shown = update(stats)
    assert set(shown) == fields and shown["accept_rate"] == 0.3
    assert shown.get("exact_share", 0.2) == 0.2
