"""KASS's check of its vectorised log density under ``floatX=float32`` (a new user's trial, PyMC 6).

The check compares the vectorised function's values with PyMC's per-particle ones at the first particles.
With float64's tolerance (1e-8) a float32 model's two sums of the same terms in another order disagreed,
and KASS warned of "a random term, or a parameter check" the model did not have, then evaluated the
particles one by one.
"""

import warnings

import numpy as np
import pymc as pm
import pytensor

from pymc_kameleon import KASS, KameleonRuntimeWarning
from pymc_kameleon.smc._batched import same_values


def test_the_tolerance_follows_the_float_type():
    x = np.array([-123.456, -7.5, 0.25, -np.inf])
    rounded = x * (1 + 3e-7)  # float32's rounding of a sum of ~100 terms
    with pytensor.config.change_flags(floatX="float32"):
        assert same_values(x, rounded)
        assert not same_values(x, x + 0.01)  # a real disagreement still is one
    with pytensor.config.change_flags(floatX="float64"):
        assert not same_values(x, rounded)  # the control: float64's tolerance is unchanged
        assert same_values(x, x * (1 + 1e-12))


def test_a_float32_model_is_evaluated_vectorised_without_a_warning():
    rng = np.random.default_rng(8)
    x = rng.normal(0, 1, 50)
    y = 1.0 + 2.0 * x + rng.normal(0, 0.7, 50)
    with pytensor.config.change_flags(floatX="float32"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pm.Model():
            a = pm.Normal("a", 0, 5)
            b = pm.Normal("b", 0, 5)
            s = pm.HalfNormal("s", 2)
            pm.Normal("y", a + b * x, s, observed=y)
            idata = pm.sample_smc(draws=300, kernel=KASS, chains=1, random_seed=1, progressbar=False,
                                  compute_convergence_checks=False)
    said = [str(w.message) for w in caught if issubclass(w.category, KameleonRuntimeWarning)]
    assert not any("disagrees" in m for m in said), said
    assert abs(float(idata.posterior["b"].mean()) - 2.0) < 0.3
