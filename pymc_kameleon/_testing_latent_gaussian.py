r"""The latent Gaussian model of :mod:`pymc_kameleon.testing`: a model with a known marginal likelihood whose
likelihood is estimated, for pseudo-marginal steps (its data and exact posterior, its estimators, the model
plain and with a correlated estimator, and copies of a tuned chain started at its stationary law).

Separate from ``testing.py`` (the 500-line rule) as one model with everything built on its data; import its
names from :mod:`pymc_kameleon.testing`, which re-exports them. Like ``testing``, this module imports PyMC
only inside the functions that use it.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "LATENT_D", "LATENT_J", "LATENT_POST_MEAN", "LATENT_POST_VAR", "LATENT_Y",
    "latent_gaussian_correlated_model", "latent_gaussian_from_stationary_law",
    "latent_gaussian_log_estimator", "latent_gaussian_model", "latent_gaussian_size_biased_log_estimate",
]

# A latent Gaussian model with a known marginal likelihood, for pseudo-marginal samplers:
# z_j ~ N(theta, I), y_j | z_j ~ N(z_j, I), so y_j | theta ~ N(theta, 2I), and with the prior
# theta ~ N(0, I) the posterior is N(sum(y) / (2 + J), I / (1 + J/2)). The likelihood is estimated
# by importance sampling from p(z | theta), deliberately noisily (sd of the log-estimate ~1-1.4).
#: The latent Gaussian model's number of groups :math:`J` and dimension :math:`d`.
LATENT_J, LATENT_D = 10, 2
#: Its data, a :math:`J \times d` array.
LATENT_Y = np.array([0.5, -0.5]) + math.sqrt(2.0) * np.random.default_rng(2024).normal(
    size=(LATENT_J, LATENT_D)
)
#: The exact posterior mean of :math:`\theta`.
LATENT_POST_MEAN = LATENT_Y.sum(0) / 2 / (1 + LATENT_J / 2)
#: The exact posterior variance of each coordinate of :math:`\theta`.
LATENT_POST_VAR = 1 / (1 + LATENT_J / 2)


def latent_gaussian_log_estimator(n_importance=20):
    """The latent Gaussian model's log-likelihood estimator: importance sampling from p(z | theta).

    Parameters
    ----------
    n_importance : int
        Importance samples per group.

    Returns
    -------
    callable
        ``log_est(*thetas, rng) -> float``, the thetas raveled and joined into one vector.
    """
    def log_est(*args):
        *thetas, rng = args
        theta = np.hstack([np.ravel(t) for t in thetas])
        z = theta + rng.standard_normal((n_importance, LATENT_J, LATENT_D))  # z ~ p(z | theta)
        return _latent_log_estimate(z)

    return log_est


def _latent_log_estimate(z) -> float:
    """log prod_j mean_i p(y_j | z_ij) for importance samples ``z`` of shape (N, J, D)."""
    from pymc_kameleon import log_mean_exp

    log_w = -0.5 * ((LATENT_Y - z) ** 2).sum(-1) - math.log(2 * math.pi)  # log p(y_j | z_ij)
    return float(log_mean_exp(log_w, axis=0).sum())


def latent_gaussian_size_biased_log_estimate(theta, n_importance, rng) -> float:
    r"""A log-estimate at ``theta`` drawn from its size-biased law: what a pseudo-marginal chain keeps.

    At stationarity a pseudo-marginal chain on the latent Gaussian model is at :math:`\theta` from the
    exact posterior with a kept estimate :math:`\hat L` whose law is the estimator's law weighted
    by :math:`\hat L / L(\theta)`. For :func:`latent_gaussian_log_estimator`,
    :math:`\hat L = \prod_j \frac1N \sum_i p(y_j \mid z_{ij})` with :math:`z_{ij} \sim p(z \mid \theta)`,
    that law is exact to draw: in each group one sample, chosen uniformly, comes from
    :math:`p(z \mid \theta, y_j) = \mathcal N((\theta + y_j)/2, I/2)` and the others from
    :math:`p(z \mid \theta)`. Starting chains there tests a pseudo-marginal kernel's invariance
    without Monte Carlo standard errors of long, sticky chains.

    Parameters
    ----------
    theta : array of shape (2,)
    n_importance : int
        Importance samples per group, as given to the estimator.
    rng : numpy.random.Generator

    Returns
    -------
    float
    """
    theta = np.asarray(theta, dtype=float)
    z = theta + rng.standard_normal((n_importance, LATENT_J, LATENT_D))
    chosen = rng.integers(n_importance, size=LATENT_J)
    z[chosen, np.arange(LATENT_J)] = (theta + LATENT_Y) / 2 + math.sqrt(0.5) * rng.standard_normal(
        (LATENT_J, LATENT_D)
    )
    return _latent_log_estimate(z)


def latent_gaussian_model(split=False, n_importance=20):
    """The latent Gaussian model with a ``PseudoMarginalPotential`` named "lik".

    Parameters
    ----------
    split : bool
        False: one free variable ``theta`` of shape 2. True: the scalars ``theta0`` and
        ``theta1`` (for two-block CompoundSteps).
    n_importance : int
        Importance samples per group of the estimator.

    Returns
    -------
    pymc.Model
    """
    import pymc as pm

    from pymc_kameleon import PseudoMarginalPotential

    with pm.Model() as model:
        if split:
            inputs = [pm.Normal("theta0", 0, 1), pm.Normal("theta1", 0, 1)]
        else:
            inputs = [pm.Normal("theta", 0, 1, shape=LATENT_D)]
        PseudoMarginalPotential("lik", latent_gaussian_log_estimator(n_importance), inputs=inputs)
    return model


def latent_gaussian_correlated_model(n_importance=2, correlation=0.9):
    """The latent Gaussian model with a correlated estimator: z = theta + u, u of shape (N, J, D).

    Parameters
    ----------
    n_importance : int
        Importance samples N per group.
    correlation : float
        Correlation of the estimator's auxiliary variables between successive proposals.

    Returns
    -------
    pymc.Model
        Free variable ``theta`` (shape 2) and the ``PseudoMarginalPotential`` "lik".
    """
    import pymc as pm

    from pymc_kameleon import PseudoMarginalPotential, correlated_importance_sampling_estimator

    def log_weight(z, theta):  # log p(y_j | z_j) per importance sample and group: shape (N, J)
        return -0.5 * ((LATENT_Y - z) ** 2).sum(-1) - math.log(2 * math.pi)

    estimator = correlated_importance_sampling_estimator(
        log_weight, lambda u, theta: theta + u, n_importance, latent_shape=(LATENT_J, LATENT_D)
    )
    with pm.Model() as model:
        theta = pm.Normal("theta", 0, 1, shape=LATENT_D)
        PseudoMarginalPotential("lik", estimator, inputs=[theta], correlation=correlation)
    return model


def latent_gaussian_from_stationary_law(step, n_importance, copies, steps, rng, refresh=False):
    r"""Run copies of a tuned pseudo-marginal chain of :func:`latent_gaussian_model`, each started at the
    chain's stationary law: :math:`\theta` from the exact posterior, the kept estimate from its
    size-biased law (:func:`latent_gaussian_size_biased_log_estimate`).

    Whatever the chain's mixing, :math:`\theta` after ``steps`` steps must follow the exact posterior,
    and the copies are independent: an invariance check without the Monte Carlo error of long, sticky
    chains (:func:`latent_gaussian_z_scores` of ``ends[None]``).

    Parameters
    ----------
    step : KameleonMetropolis or GPDelayedAcceptanceMH
        Tuned (its ``stop_tuning`` called) on the model, with the model's ``PseudoMarginalPotential``
        as its only estimated term. Each copy starts from a copy of the chain state it had then (an
        adaptive GP grows within a copy, not across copies).
    n_importance : int
        Importance samples per group of the model's estimator.
    copies, steps : int
    rng : numpy.random.Generator
        For the starts (the step keeps its own generator).
    refresh : bool
        Redraw the kept estimate before every step (Monte Carlo within Metropolis, not exact): a
        negative control.

    Returns
    -------
    ends : ndarray of shape (copies, 2)
        :math:`\theta` after the last step of each copy.
    moves : int
        Accepted moves over all copies.
    """
    import copy

    tuned, op = copy.deepcopy(step._chain), step._target.terms[0].op
    ends, moves = np.empty((copies, LATENT_D)), 0
    for r in range(copies):
        step._chain = copy.deepcopy(tuned)
        theta = LATENT_POST_MEAN + math.sqrt(LATENT_POST_VAR) * rng.standard_normal(LATENT_D)
        # What another step of a CompoundStep would have left: this state and its kept estimate.
        op.current.set((theta,), latent_gaussian_size_biased_log_estimate(theta, n_importance, rng))
        point = {"theta": theta}
        for _ in range(steps):
            if refresh:
                step._target.refresh_estimates()
            point, stats = step.step(point)
            moves += stats[0]["accepted"]
        ends[r] = point["theta"]
    return ends, int(moves)

