"""Test support for this package's own tests, as :mod:`pymc.testing` is PyMC's.

Users who write tests of their own step methods can use it too. It holds

- Monte Carlo comparisons with exact answers: :func:`mcse_of_mean`, :func:`invariance_z_scores`
  (HDR coverages and means of a :class:`~pymc_kameleon.problems.hdr.Target`),
  :func:`latent_gaussian_z_scores`;
- draws: :func:`curved_draws` (a banana whose width changes along it, for fitted transport maps);
- small models: :func:`gaussian_data_model` (smooth, with a likelihood term and a proper prior),
  :func:`von_mises_model` (an angle, with its exact moments from :func:`von_mises_moments`), and a
  latent Gaussian model with a known marginal likelihood whose likelihood is estimated, for
  pseudo-marginal steps (:func:`latent_gaussian_model`, :func:`latent_gaussian_correlated_model`,
  :func:`latent_gaussian_log_estimator`, :func:`latent_gaussian_size_biased_log_estimate`,
  :func:`latent_gaussian_from_stationary_law`, the ``LATENT_*`` constants);
- drivers: :func:`sample_with_seed` (``pm.sample`` with a seed), :func:`start_chain` and
  :func:`run_steps` (a step by hand, prepared per chain as each PyMC version does, see
  :data:`CHAIN_HOOKS`), and :func:`recorded` and :func:`assert_same_records` to compare what two
  runs recorded.

PyMC and ArviZ are imported inside the functions that use them, so importing this module costs
only NumPy.
"""

from __future__ import annotations

import numpy as np

from pymc_kameleon import _testing_latent_gaussian as _latent_gaussian
from pymc_kameleon._testing_latent_gaussian import (
    latent_gaussian_correlated_model,
    latent_gaussian_from_stationary_law,
    latent_gaussian_log_estimator,
    latent_gaussian_model,
    latent_gaussian_size_biased_log_estimate,
)

__all__ = [
    "CHAIN_HOOKS",
    "INVARIANCE_QS",
    "LATENT_D",
    "LATENT_J",
    "LATENT_POST_MEAN",
    "LATENT_POST_VAR",
    "LATENT_Y",
    "RECORDED_GROUPS",
    "SAMPLE_KW",
    "assert_same_records",
    "curved_draws",
    "gaussian_data_model",
    "invariance_z_scores",
    "latent_gaussian_correlated_model",
    "latent_gaussian_from_stationary_law",
    "latent_gaussian_log_estimator",
    "latent_gaussian_model",
    "latent_gaussian_size_biased_log_estimate",
    "latent_gaussian_z_scores",
    "mcse_of_mean",
    "recorded",
    "run_steps",
    "sample_with_seed",
    "start_chain",
    "tuning_refresh_steps",
    "von_mises_model",
    "von_mises_moments",
]

#: HDR coverages that :func:`invariance_z_scores` checks.
INVARIANCE_QS = (0.25, 0.5, 0.75, 0.9)
#: ``pm.sample`` options of every test run: no progress bar, no convergence checks.
SAMPLE_KW = dict(progressbar=False, compute_convergence_checks=False)


def tuning_refresh_steps(accepted, tune: int) -> np.ndarray:
    """Per step, 1 where a step redraws the plain pseudo-marginal estimate kept at its state (decision 0051):
    the :data:`~pymc_kameleon.steps.base.TUNING_REFRESH_REJECTIONS`-th rejection in a row since the last
    acceptance or refresh, within the first ``tune`` steps; 0 elsewhere.

    ``accepted``: each step's ``accepted`` statistic, in order.
    """
    from pymc_kameleon.steps.base import TUNING_REFRESH_REJECTIONS

    out, in_a_row = np.zeros(len(accepted), dtype=int), 0
    for i, a in enumerate(list(accepted)[:tune]):
        in_a_row = 0 if a else in_a_row + 1
        if in_a_row == TUNING_REFRESH_REJECTIONS:
            out[i], in_a_row = 1, 0
    return out


# ------------------------------------------------------------------ comparisons with exact answers
def mcse_of_mean(values) -> float:
    """Monte Carlo standard error of the mean of MCMC draws, from ArviZ's ESS.

    Works with ArviZ 0.x and 1.x.

    Parameters
    ----------
    values : array_like of shape (chain, draw), or (draw,) for one chain

    Returns
    -------
    float
    """
    import arviz as az

    values = np.atleast_2d(np.asarray(values, dtype=float))
    try:
        return float(az.mcse(values, method="mean"))  # ArviZ 1 takes (chain, draw) arrays
    except TypeError:
        dataset = az.convert_to_dataset({"v": values})  # ArviZ 0.x wants a dataset
        return float(az.mcse(dataset, method="mean")["v"])


def invariance_z_scores(draws, target, qs=INVARIANCE_QS) -> dict:
    """Standardised errors, absolute error over MCSE, for HDR coverages and coordinate means.

    Every statistic is a posterior mean, so its Monte Carlo standard error comes from ArviZ's
    ESS, which accounts for autocorrelation.

    Parameters
    ----------
    draws : array_like of shape (chain, draw, dim)
    target : pymc_kameleon.problems.hdr.Target
        The exact posterior (``in_hdr`` and ``exact_mean``).
    qs : sequence of float
        HDR coverages to check.

    Returns
    -------
    dict
        ``coverage_<q>`` and ``mean_<j>`` -> z-score.
    """
    draws = np.asarray(draws, dtype=float)
    flat = draws.reshape(-1, draws.shape[-1])
    out = {}
    for q in qs:
        inside = target.in_hdr(flat, q).reshape(draws.shape[:2]).astype(float)
        out[f"coverage_{q}"] = abs(inside.mean() - q) / max(mcse_of_mean(inside), 1e-12)
    exact_mean = target.exact_mean
    for j in range(draws.shape[-1]):
        est = draws[..., j]
        out[f"mean_{j}"] = abs(est.mean() - exact_mean[j]) / max(mcse_of_mean(est), 1e-12)
    return out


def curved_draws(n: int = 4000, dim: int = 3, width_slope: float = 0.3, seed: int = 0) -> np.ndarray:
    r"""Draws of a banana whose width changes along it: :math:`x_1 \sim \mathcal N(0, 4)`,
    :math:`x_2 = x_1^2 / 2 + e^{c x_1} \varepsilon_2` (:math:`c` the ``width_slope``), and every further
    coordinate :math:`x_2 / 4 + \varepsilon_k`; shape ``(n, dim)``, ``dim >= 2``."""
    rng = np.random.default_rng(seed)
    X = np.empty((n, dim))
    X[:, 0] = 2.0 * rng.standard_normal(n)
    X[:, 1] = 0.5 * X[:, 0] ** 2 + np.exp(width_slope * X[:, 0]) * rng.standard_normal(n)
    for k in range(2, dim):
        X[:, k] = 0.25 * X[:, 1] + rng.standard_normal(n)
    return X


# ------------------------------------------------------------------------------------ small models
def gaussian_data_model(seed=0, n=30):
    """mu ~ N(0, 10^2 I) in 2-d and n observations y_i ~ N(mu, I).

    A smooth posterior with gradients, a likelihood term (the GP steps need one) and a proper
    prior (SMC starts from prior draws).

    Parameters
    ----------
    seed : int
        Seed of the simulated observations.
    n : int
        Number of observations.

    Returns
    -------
    pymc.Model
        Free variable ``mu`` (shape 2), observed ``y``.
    """
    import pymc as pm

    data = np.random.default_rng(seed).normal([0.5, -1.0], 1.0, size=(n, 2))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10, shape=2)
        pm.Normal("y", mu, 1, observed=data)
    return model


def von_mises_model(direction: float = 1.0, seed: int = 0, n: int = 50):
    r"""Angles about one direction: :math:`\mu \sim \mathrm{VonMises}(0, 0.5)`, :math:`\kappa \sim
    \mathrm{HalfNormal}(5)`, ``n`` observations :math:`y_i \sim \mathrm{VonMises}(\mu, \kappa)` simulated
    about ``direction`` with concentration 4.

    PyMC samples :math:`\mu` through its circular transform, in whose coordinate the density repeats
    every :math:`2\pi`; a ``direction`` of :math:`\pi` puts the posterior across the period's edge.
    :func:`von_mises_moments` gives its exact moments.

    Returns
    -------
    model : pymc.Model
        Free variables ``mu`` and ``kappa``, observed ``y``.
    obs : numpy.ndarray
        The observations.
    """
    import pymc as pm

    obs = np.random.default_rng(seed).vonmises(direction, 4.0, size=n)
    with pm.Model() as model:
        mu = pm.VonMises("mu", 0.0, 0.5)
        kappa = pm.HalfNormal("kappa", 5.0)
        pm.VonMises("y", mu, kappa, observed=obs)
    return model, obs


def von_mises_moments(obs) -> tuple[float, float, float]:
    """The exact posterior mean direction of ``mu``, and mean and sd of ``kappa``, of
    :func:`von_mises_model` with observations ``obs`` (a 721 x 1500 grid over (-pi, pi] x (0, 15]).
    """
    from scipy.special import i0e
    from scipy.stats import halfnorm, vonmises

    mu, kappa = np.meshgrid(np.linspace(-np.pi, np.pi, 721), np.linspace(0.01, 15, 1500), indexing="ij")
    log_norm = np.log(2 * np.pi * i0e(kappa)) + kappa
    log_lik = kappa * np.cos(np.asarray(obs)[:, None, None] - mu).sum(0) - len(obs) * log_norm
    log_post = vonmises.logpdf(mu, 0.5, loc=0.0) + halfnorm.logpdf(kappa, scale=5.0) + log_lik
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    mean_kappa = (w * kappa).sum()
    sd_kappa = np.sqrt((w * kappa**2).sum() - mean_kappa**2)
    direction = np.arctan2((w * np.sin(mu)).sum(), (w * np.cos(mu)).sum())
    return float(direction), float(mean_kappa), float(sd_kappa)


# The latent Gaussian model is in pymc_kameleon._testing_latent_gaussian; its constants are assigned here, not
# imported, so that the documentation reads each one's comment in this module.
#: The latent Gaussian model's number of groups :math:`J` and dimension :math:`d`.
LATENT_J, LATENT_D = _latent_gaussian.LATENT_J, _latent_gaussian.LATENT_D
#: Its data, a :math:`J \times d` array.
LATENT_Y = _latent_gaussian.LATENT_Y
#: The exact posterior mean of :math:`\theta`.
LATENT_POST_MEAN = _latent_gaussian.LATENT_POST_MEAN
#: The exact posterior variance of each coordinate of :math:`\theta`.
LATENT_POST_VAR = _latent_gaussian.LATENT_POST_VAR


def latent_gaussian_z_scores(draws) -> dict:
    """Absolute errors over MCSE for the exact posterior mean and variance of each coordinate of theta.

    Parameters
    ----------
    draws : ndarray of shape (chain, draw, 2)
        Draws of theta from the latent Gaussian model.

    Returns
    -------
    dict
        ``mean_<j>`` and ``var_<j>`` -> z-score.
    """
    scores = {}
    for j in range(draws.shape[-1]):
        x = draws[..., j]
        scores[f"mean_{j}"] = abs(x.mean() - LATENT_POST_MEAN[j]) / mcse_of_mean(x)
        sq = (x - LATENT_POST_MEAN[j]) ** 2
        scores[f"var_{j}"] = abs(sq.mean() - LATENT_POST_VAR) / mcse_of_mean(sq)
    return scores


# ------------------------------------------------------------------------ runs and their records
def sample_with_seed(model, step, seed, *, tune, draws, chains=2, cores=1, **kwargs):
    """``pm.sample(step=step, random_seed=seed)`` on ``model``, without progress bar or convergence checks.

    Parameters
    ----------
    model : pymc.Model
    step : step method
    seed : int
        ``random_seed`` of ``pm.sample``.
    tune, draws, chains, cores : int
        As for ``pm.sample``.
    **kwargs
        Further ``pm.sample`` options.

    Returns
    -------
    InferenceData
    """
    import pymc as pm

    with model:
        return pm.sample(
            step=step, tune=tune, draws=draws, chains=chains, cores=cores, random_seed=seed,
            **SAMPLE_KW, **kwargs,
        )


#: The InferenceData groups that :func:`recorded` keeps.
RECORDED_GROUPS = ("posterior", "sample_stats", "warmup_posterior", "warmup_sample_stats")


def recorded(idata) -> dict:
    """Every draw and statistic a ``pm.sample`` run kept (ArviZ 0.x and 1.x).

    Parameters
    ----------
    idata : InferenceData or DataTree

    Returns
    -------
    dict
        ``"group/name"`` -> ndarray, over :data:`RECORDED_GROUPS`.
    """
    out = {}
    for group in RECORDED_GROUPS:
        data = getattr(idata, group, None)
        if data is not None:
            out.update({f"{group}/{name}": np.asarray(var.values) for name, var in data.data_vars.items()})
    return out


def assert_same_records(a: dict, b: dict) -> None:
    """Assert equal names and equal arrays (NaN equals NaN).

    Parameters
    ----------
    a, b : dict
        Records from :func:`recorded` or :func:`run_steps`.

    Raises
    ------
    AssertionError
        If the names or any array differ.
    """
    if sorted(a) != sorted(b):
        raise AssertionError(f"recorded names differ: {sorted(a)} != {sorted(b)}")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _set_rng(step, rng):
    if hasattr(step, "set_rng"):
        step.set_rng(rng)
    else:
        step.rng = rng  # what PyMC 6's BlockedStep.setup_chain does


#: Per-chain set-up of a step as each PyMC calls it before a chain, and a negative control:
#: name -> ``hook(step, rng, tune)``.
CHAIN_HOOKS = {
    # PyMC 5 (cores=1): the chain's generator, then reset_tuning(). (PyMC 6 steps have no set_rng.)
    "reset_tuning": lambda step, rng, tune: (_set_rng(step, rng), step.reset_tuning()),
    # PyMC 6: setup_chain(rng, tune, draws), alone here (pm.sample calls reset_tuning after it too).
    "setup_chain": lambda step, rng, tune: step.setup_chain(rng, tune, 0),
    # PyMC 5's worker processes: set_rng alone (our steps reset there too).
    "set_rng": lambda step, rng, tune: _set_rng(step, rng),
    # Negative control: a new generator and nothing else (no hook of ours runs).
    "rng_only": lambda step, rng, tune: setattr(step, "rng", rng),
}


def start_chain(step, seed, hook="setup_chain", tune=1) -> None:
    """Prepare ``step`` for a chain with ``np.random.default_rng(seed)``, as ``pm.sample`` does.

    Parameters
    ----------
    step : step method
    seed : int
    hook : str
        A key of :data:`CHAIN_HOOKS`: which PyMC's per-chain call to make.
    tune : int
        Tuning steps of the chain (nonzero: the step starts tuning).
    """
    step.tune = bool(tune)
    CHAIN_HOOKS[hook](step, np.random.default_rng(seed), tune)


def run_steps(step, point, n_steps, stop_tuning_at=None):
    """Take ``n_steps`` steps from ``point`` by hand.

    Parameters
    ----------
    step : step method
    point : dict
        The start, value variable name -> value.
    n_steps : int
    stop_tuning_at : int, optional
        Call ``step.stop_tuning()`` before this step.

    Returns
    -------
    point : dict
        The last point.
    record : dict
        ``"draw/<name>"`` and ``"stat/<name>"`` -> array with one row per step (as :func:`recorded`).
    """
    draws, stats = [], []
    for i in range(n_steps):
        if i == stop_tuning_at:
            step.stop_tuning()
        point, step_stats = step.step(point)
        draws.append({name: np.array(value, copy=True) for name, value in point.items()})
        stats.append(step_stats[0])
    record = {f"draw/{name}": np.array([d[name] for d in draws]) for name in draws[0]}
    record.update({f"stat/{name}": np.array([s[name] for s in stats]) for name in stats[0]})
    return point, record
