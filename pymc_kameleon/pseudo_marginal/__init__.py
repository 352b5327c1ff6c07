r"""Pseudo-marginal likelihood terms: a PyMC Potential whose value is a random, unbiased estimate.

A user writes

.. code-block:: python

    with pm.Model():
        theta = pm.Normal("theta", 0, 3, shape=9)
        PseudoMarginalPotential("lik", log_estimator, inputs=[theta])
        idata = pm.sample(step=KameleonMetropolis())

where ``log_estimator(theta_value, rng)`` returns :math:`\log \hat L(\theta)` with
:math:`\mathbb E[\hat L(\theta)] = L(\theta)` and :math:`\hat L \ge 0`. The steps of this
package then run the exact pseudo-marginal chain of Andrieu & Roberts (2009): the estimate at
the current state is kept until a proposal is accepted, and fresh estimates are drawn only at
proposals. The chain targets the extended distribution
:math:`\pi(\theta)\,\hat L(\theta, u)\,m(u)` whose :math:`\theta`-marginal is the exact posterior.

Stock PyMC steps would re-estimate the current state at every step
(Monte-Carlo-within-Metropolis), which targets a different, wrong distribution. They
evaluate the potential through its PyTensor Op, so the Op refuses (or warns, with
``on_misuse="warn"``) when a PyMC step other than ours evaluates it, and it has no
gradient: NUTS and automatic step assignment fail with an error that names the right step.

The subpackage, one concern per module:

- :mod:`.potential`: :func:`PseudoMarginalPotential`, which adds a term to a model, and
  :func:`pseudo_marginal_terms` (:class:`~.potential.PseudoMarginalTerm`), how the steps find the
  terms in a model.
- :mod:`.op`: :class:`PseudoMarginalOp`, which calls the estimator (plain, correlated, or split into
  replicates on an executor) and checks its answer; :class:`~.op.CurrentEstimate`, the estimate kept
  at the current state; the errors :class:`PseudoMarginalEstimatorError` and
  :class:`PseudoMarginalMisuseError`, and the detection of a stock PyMC step evaluating the Op.
- :mod:`.estimators`: the estimator helpers :func:`log_mean_exp`,
  :func:`importance_sampling_estimator`, :func:`correlated_importance_sampling_estimator`,
  :func:`correlated_particle_filter` and :func:`log_estimate_spread`.
- :mod:`.checks`: checks of the options (``auxiliary_shape``, ``correlation``, ``replicates``, the
  inputs), shared by the potential and the estimator helpers.

Every public name is importable from ``pymc_kameleon.pseudo_marginal``.
"""

# CurrentEstimate, PseudoMarginalTerm and DEFAULT_CORRELATION stay outside __all__, as before the split,
# and importable from here.
from pymc_kameleon.pseudo_marginal.checks import DEFAULT_CORRELATION  # noqa: F401
from pymc_kameleon.pseudo_marginal.estimators import (
    correlated_importance_sampling_estimator,
    correlated_particle_filter,
    importance_sampling_estimator,
    log_estimate_spread,
    log_mean_exp,
)
from pymc_kameleon.pseudo_marginal.op import (
    CurrentEstimate,  # noqa: F401
    PseudoMarginalEstimatorError,
    PseudoMarginalMisuseError,
    PseudoMarginalOp,
)
from pymc_kameleon.pseudo_marginal.potential import (
    PseudoMarginalPotential,
    PseudoMarginalTerm,  # noqa: F401
    pseudo_marginal_terms,
)

__all__ = [
    "PseudoMarginalEstimatorError",
    "PseudoMarginalMisuseError",
    "PseudoMarginalOp",
    "PseudoMarginalPotential",
    "correlated_importance_sampling_estimator",
    "correlated_particle_filter",
    "importance_sampling_estimator",
    "log_estimate_spread",
    "log_mean_exp",
    "pseudo_marginal_terms",
]
