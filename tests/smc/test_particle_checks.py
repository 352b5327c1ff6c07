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
    assert "pm.sample_smc(start={name: draws})" in message and "KameleonMetropolis(start='smc')" in message


def test_the_hint_is_only_for_ordered_variables():
    ordered, plain = mixture(None), mixture([-1.0, 1.0], ordered=False)
    assert "mu_ordered__" in nan_prior_hint(ordered.value_vars)
    assert nan_prior_hint(plain.value_vars) == ""  # the control: no ordered transform, nothing added
    with plain, pytest.raises(ValueError, match="identical") as caught:
        pm.sample_smc(100, kernel=KASS, chains=1, progressbar=False, random_seed=1)
    assert "ordered transform" not in str(caught.value)


def test_a_start_for_the_ordered_variable_alone_is_completed_from_the_prior():
    """The remedy the error above gives: start= with sorted prior draws of the ordered variable. PyMC
    needs draws of every variable and said only "KeyError: 'w_simplex__'"; the others now come from the
    prior's draws. A start under the variable's own name (mu, not mu_ordered__) and too few draws are
    errors that say what to give."""
    model = mixture(None)
    sorted_draws = np.sort(np.random.default_rng(0).normal(0, 5, size=(200, 2)), axis=1)
    forward = model.rvs_to_transforms[model["mu"]].forward(sorted_draws).eval()
    kernel = KASS(draws=200, model=model, start={"mu_ordered__": forward}, random_seed=1)
    kernel._initialize_kernel()
    kernel.setup_kernel()
    assert np.isfinite(kernel.prior_logp).all() and np.isfinite(kernel.likelihood_logp).all()
    w, mu = kernel.start["w_simplex__"], kernel.start["mu_ordered__"]
    assert w.shape == (200, 1) and np.std(w) > 0.1  # the prior's draws, not a constant
    assert mu is forward  # the given draws are kept
    with pytest.raises(ValueError, match=r"start= gives \['mu'\], which PyMC samples as \['mu_ordered__'\]"):
        KASS(draws=200, model=model, start={"mu": sorted_draws}, random_seed=1)._initialize_kernel()
    with pytest.raises(ValueError, match=r"fewer draws than the 200 particles for \{'mu_ordered__': 50\}"):
        KASS(draws=200, model=model, start={"mu_ordered__": forward[:50]}, random_seed=1)._initialize_kernel()
