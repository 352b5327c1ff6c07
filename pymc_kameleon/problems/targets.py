r"""Benchmark targets with exact references (Sejdinovic, Strathmann et al. 2014, section 5.2).

Every target here has an unnormalised log density of the form

.. math::
    \log \pi(x) = -\tfrac12\, T(x) + \text{const},

for an explicit *statistic* :math:`T(x) \geq 0` whose distribution under
:math:`\pi` is known exactly. The density is a decreasing function of :math:`T`,
so the highest-density region (HDR) of probability :math:`q` is

.. math::
    R_q = \{x : T(x) \leq t_q\}, \qquad P_\pi(T \leq t_q) = q,

and the paper's quantile measure compares, for :math:`q = 0.1, \dots, 0.9`, the
fraction of a chain's draws inside :math:`R_q` with :math:`q`:

.. math::
    \text{quantile error} = \frac{1}{|Q|} \sum_{q \in Q}
    \Bigl| \tfrac1m \textstyle\sum_{i=1}^m \mathbf 1[T(x_i) \le t_q] - q \Bigr|.

Available targets (factory functions):

:func:`banana`
    :math:`\mathcal B(b, v)` of Haario et al. (1999); :math:`T \sim \chi^2_d` exactly.
:func:`flower`
    :math:`\mathcal F(r_0, A, \omega, \sigma)`; :math:`T \sim \chi^2_{d-1}` up to a
    truncation term of order :math:`\Phi(-(r_0 - A)/\sigma)` that is computed, not ignored.
:func:`ring`
    the flower with :math:`A = 0`.
:func:`correlated_gaussian`
    an equicorrelated Gaussian; :math:`T \sim \chi^2_d` exactly.

Each target gives its NumPy log density (:meth:`Target.logp`), a fresh PyMC
model with the same density (:meth:`Target.model`, gradients included), exact
i.i.d. draws (:meth:`Target.sample`), the exact mean, the log normalising
constant, and the quantile measure (:meth:`Target.quantile_coverage`,
:meth:`Target.quantile_error`).

Examples
--------
>>> import numpy as np
>>> from pymc_kameleon.problems.targets import banana
>>> target = banana(dim=8, b=0.03, v=100.0)
>>> x = target.sample(20_000, rng=1)
>>> float(target.quantile_error(x)) < 0.01
True
>>> with target.model():  # doctest: +SKIP
...     idata = pm.sample(step=KameleonMetropolis())
"""

from pymc_kameleon.problems.banana import BananaTarget, banana
from pymc_kameleon.problems.flower import FlowerTarget, flower, ring
from pymc_kameleon.problems.gaussian import GaussianTarget, correlated_gaussian
from pymc_kameleon.problems.hdr import DEFAULT_QUANTILES, Target, quantile_error

__all__ = [
    "DEFAULT_QUANTILES",
    "BananaTarget",
    "FlowerTarget",
    "GaussianTarget",
    "Target",
    "banana",
    "correlated_gaussian",
    "flower",
    "quantile_error",
    "ring",
]
