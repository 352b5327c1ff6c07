"""The Pareto k-hat behind the independence component's verdicts: the generalised Pareto's
maximum-likelihood shape by its profile likelihood, against SciPy's own fit."""

import math

import numpy as np
import pytest
from scipy import optimize, stats

from pymc_kameleon.core.adaptation.diagnostics import gpd_shape_mle, pareto_tail_index


def _gpd_log_likelihood(x, k, sigma):
    return float(stats.genpareto.logpdf(x, k, 0.0, sigma).sum())


def _sigma_at(x, k):
    """The scale that goes with shape ``k`` at the profile's optimum: sigma = k / t, with
    k = mean log(1 + t x) solved for t (t -> 0 as k -> 0: sigma = mean x)."""
    if abs(k) < 1e-12:
        return float(np.mean(x))
    f = lambda t: np.log1p(t * x).mean() - k  # noqa: E731
    lo, hi = (1e-12, 1e12) if k > 0 else (-1.0 / x.max() * (1 - 1e-15), -1e-12)
    t = optimize.brentq(f, lo, hi, xtol=1e-15, rtol=1e-14)
    return k / t


def _score(x, k, sigma, h=1e-5):
    """Central differences of the log likelihood in (k, log sigma)."""
    dk = (_gpd_log_likelihood(x, k + h, sigma) - _gpd_log_likelihood(x, k - h, sigma)) / (2 * h)
    up, down = sigma * math.exp(h), sigma * math.exp(-h)
    ds = (_gpd_log_likelihood(x, k, up) - _gpd_log_likelihood(x, k, down)) / (2 * h)
    return dk, ds


def test_the_estimate_solves_the_likelihood_equations():
    # Fixed exceedances (a heavy tail, k near 0.5): at (k-hat, sigma(k-hat)) both partial derivatives of
    # the log likelihood vanish, and one step of 0.01 in k away they do not (the check can fail).
    x = np.array([0.02, 0.05, 0.07, 0.11, 0.16, 0.18, 0.25, 0.31, 0.44, 0.52, 0.83, 1.3, 2.1, 3.7, 6.0])
    k = gpd_shape_mle(x)
    assert 0.0 < k < 2.0
    scaled = x / x.max()
    dk, ds = _score(scaled, k, _sigma_at(scaled, k))
    assert abs(dk) < 1e-4 and abs(ds) < 1e-4
    dk_off, _ = _score(scaled, k + 0.01, _sigma_at(scaled, k))
    assert abs(dk_off) > 1e-2


def test_exponential_exceedances_give_a_shape_near_zero():
    x = np.random.default_rng(3).exponential(2.0, size=4000)
    assert abs(gpd_shape_mle(x)) < 3 * 1 / math.sqrt(x.size)


@pytest.mark.parametrize("k", [-0.3, 0.2, 0.7, 1.5])
def test_it_recovers_the_shape_of_a_large_sample(k):
    x = stats.genpareto.rvs(k, scale=3.0, size=5000, random_state=np.random.default_rng(11))
    # The MLE's asymptotic sd is (1 + k) / sqrt(n).
    assert gpd_shape_mle(x) == pytest.approx(k, abs=4 * (1 + k) / math.sqrt(x.size))


def test_it_agrees_with_scipys_fit_where_the_verdict_is_decided():
    """SciPy's ``genpareto.fit(x, floc=0)`` (the estimate before): within 5e-4 where k-hat is in
    [-0.5, 1.2], and on the same side of 0.7 everywhere, on tails of the sizes the verdicts see."""
    rng = np.random.default_rng(2026)
    compared = 0
    for trial in range(150):
        size = int(rng.choice([30, 50, 100, 200]))
        if trial % 3 == 0:
            log_weights = rng.standard_t(rng.uniform(1.0, 30.0), size=size)
        elif trial % 3 == 1:
            log_weights = rng.normal(0.0, rng.uniform(0.2, 3.0), size=size)
        else:
            log_weights = np.log(rng.pareto(rng.uniform(0.5, 5.0), size=size) + 1e-3)
        ours = pareto_tail_index(log_weights)
        lw = np.sort(log_weights)
        m = int(min(0.2 * size, 3.0 * math.sqrt(size)))
        exceedances = np.exp(lw[-m:] - lw[-1]) - math.exp(lw[-m - 1] - lw[-1])
        theirs = stats.genpareto.fit(exceedances / exceedances.max(), floc=0)[0]
        assert (ours <= 0.7) == (theirs <= 0.7), (trial, ours, theirs)
        if -0.5 <= theirs <= 1.2:
            assert ours == pytest.approx(theirs, abs=5e-4), (trial, ours, theirs)
            compared += 1
    assert compared > 60


def test_degenerate_tails():
    # Too few weights: NaN. All equal: no tail to fit, NaN. One weight far above the rest: very heavy.
    assert math.isnan(pareto_tail_index(np.zeros(10)))
    assert math.isnan(pareto_tail_index(np.zeros(100)))
    lw = np.r_[np.zeros(99), 800.0]
    lw[:99] += np.linspace(0, 1, 99)
    assert pareto_tail_index(lw) > 0.7
