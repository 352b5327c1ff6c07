"""KASS's errors about its initial particles on a model with PyMC's ordered transform (a new user's trial of
PyMC's distribution zoo, PyMC 5 and 6): with an ``initval`` every particle starts there, and without one
PyMC's SMC draws the elements out of order, where the transform is NaN. Both errors used to end in advice
that led nowhere for a built-in transform ("Remove initval=", then "make the model return -inf"); they now
name the ordered variable and the two ways that work."""

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import KASS
from pymc_kameleon.smc.particle_checks import nan_prior_hint

RNG = np.random.default_rng(1)
DATA = np.concatenate([RNG.normal(-2, 1, 60), RNG.normal(2.2, 0.8, 40)])


def mixture(initval, ordered=True):
    with pm.Model() as model:
        w = pm.Dirichlet("w", np.ones(2))
        transform = {"transform": pm.distributions.transforms.ordered} if ordered else {}
        mu = pm.Normal("mu", 0, 5, shape=2, initval=initval, **transform)
        sigma = pm.HalfNormal("sigma", 2, shape=2)
        pm.NormalMixture("y", w=w, mu=mu, sigma=sigma, observed=DATA)
    return model


@pytest.mark.parametrize("initval", [[-1.0, 1.0], None])
def test_an_ordered_variable_is_named_with_the_remedies(initval):
    with mixture(initval), pytest.raises(ValueError) as caught:
        pm.sample_smc(100, kernel=KASS, chains=1, progressbar=False, random_seed=1)
    message = str(caught.value)
    assert ("identical" in message) == (initval is not None)
    assert "['mu_ordered__'] has PyMC's ordered transform" in message
    assert "pm.sample_smc(start=...)" in message and "KameleonMetropolis(start='smc')" in message


def test_the_hint_is_only_for_ordered_variables():
    ordered, plain = mixture(None), mixture([-1.0, 1.0], ordered=False)
    assert "mu_ordered__" in nan_prior_hint(ordered.value_vars)
    assert nan_prior_hint(plain.value_vars) == ""  # the control: no ordered transform, nothing added
    with plain, pytest.raises(ValueError, match="identical") as caught:
        pm.sample_smc(100, kernel=KASS, chains=1, progressbar=False, random_seed=1)
    assert "ordered transform" not in str(caught.value)
