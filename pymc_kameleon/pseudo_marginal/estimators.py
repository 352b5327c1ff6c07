"""Estimator helpers: build unbiased log-likelihood estimators and measure their noise.

:func:`log_mean_exp`; the importance-sampling estimators, plain
(:func:`importance_sampling_estimator`, ``log_estimator(*params, rng)``) and correlated
(:func:`correlated_importance_sampling_estimator`, ``log_estimator(*params, u)``); the correlated
bootstrap particle filter (:func:`correlated_particle_filter`); and :func:`log_estimate_spread`,
the standard deviation of repeated log-estimates.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp, ndtr

from pymc_kameleon.pseudo_marginal.checks import _auxiliary_shape, _check_auxiliary, _check_positive_int


def log_mean_exp(log_values, axis=None):
    r"""Numerically stable :math:`\log\big(\tfrac1N \sum_{i=1}^N e^{a_i}\big)`.

    The log of an importance-sampling estimate from log-weights :math:`a_i`. Computed as
    ``scipy.special.logsumexp(a) - log N``, so it neither overflows nor underflows. All
    :math:`a_i = -\infty` gives :math:`-\infty` (a zero estimate).

    Parameters
    ----------
    log_values : array_like
    axis : int, optional
        Axis to average over (all entries by default).
    """
    log_values = np.asarray(log_values, dtype=float)
    n = log_values.size if axis is None else log_values.shape[axis]
    if n == 0:
        raise ValueError("log_mean_exp needs at least one value.")
    with np.errstate(divide="ignore"):
        return logsumexp(log_values, axis=axis) - math.log(n)


def importance_sampling_estimator(log_weight, sample, n_samples: int = 100):
    r"""Build ``log_estimator(*params, rng)`` for an importance-sampling likelihood estimate.

    For a latent-variable likelihood :math:`L(\theta) = \int p(y, f \mid \theta)\, df` and a
    proposal :math:`g(f \mid \theta)`, the estimate

    .. math::
        \hat L(\theta) = \frac1N \sum_{i=1}^N w(f_i, \theta), \qquad f_i \sim g(\cdot \mid \theta),
        \qquad w = \frac{p(y, f \mid \theta)}{g(f \mid \theta)},

    is unbiased whenever :math:`g > 0` wherever :math:`p(y, f \mid \theta) > 0`. The returned
    function computes :math:`\log \hat L` with :func:`log_mean_exp`.

    Parameters
    ----------
    log_weight : callable
        ``log_weight(f, *params) -> array (N,)``: :math:`\log p(y, f_i \mid \theta) - \log g(f_i \mid \theta)`
        for the ``N`` draws stacked along axis 0 of ``f``. For a product of independent
        per-group likelihoods return shape ``(N, T)``: the estimate is then
        :math:`\prod_t \frac1N \sum_i w_{ti}`, unbiased when the groups' draws are independent.
    sample : callable
        ``sample(*params, n, rng) -> f``: ``n`` draws from :math:`g(\cdot \mid \theta)`, stacked along axis 0.
    n_samples : int, default 100
        :math:`N`. The variance of :math:`\log\hat L` falls roughly like :math:`1/N`; pseudo-marginal
        chains mix well when its standard deviation is about 1-1.7 (Doucet et al. 2015).

    Returns
    -------
    callable
        ``log_estimator(*params, rng) -> float``, ready for
        :func:`~pymc_kameleon.pseudo_marginal.PseudoMarginalPotential`.
    """
    if not (callable(log_weight) and callable(sample)):
        raise TypeError("log_weight and sample must be callables.")
    n_samples = _check_positive_int("n_samples", n_samples)

    def log_estimator(*args):
        *params, rng = args
        return _log_importance_estimate(log_weight(sample(*params, n_samples, rng), *params), n_samples)

    log_estimator.n_samples = n_samples
    return log_estimator


def _log_importance_estimate(log_weights, n_samples: int) -> float:
    """log of prod_t mean_i w_ti for log-weights of shape (N,) or (N, T...)."""
    log_w = np.asarray(log_weights, dtype=float)
    if log_w.ndim == 0 or log_w.shape[0] != n_samples:
        raise ValueError(
            f"log_weight must return an array of shape ({n_samples},) or ({n_samples}, ...) "
            f"(one row per importance sample), got {log_w.shape}."
        )
    return float(np.sum(log_mean_exp(log_w, axis=0)))


def correlated_importance_sampling_estimator(log_weight, transform, n_samples: int, latent_shape=()):
    r"""Build ``log_estimator(*params, u)``: an importance-sampling estimate driven by normals ``u``.

    The correlated version of :func:`importance_sampling_estimator`. The proposal draws are a
    deterministic transform of standard normals, :math:`f_i = T(u_i, \theta)` with
    :math:`u_i \sim \mathcal N(0, I)` (for a Gaussian proposal :math:`T(u, \theta) = m(\theta) +
    S(\theta) u`; other laws through their quantile function of :math:`\Phi(u)`), and

    .. math::
        \hat L(\theta, u) = \frac1N \sum_{i=1}^N w(T(u_i, \theta), \theta)

    is unbiased for :math:`L(\theta)` when :math:`u` is standard normal. Passed to
    :func:`~pymc_kameleon.pseudo_marginal.PseudoMarginalPotential`, the estimator's
    ``auxiliary_shape`` (an attribute of the returned function, ``(n_samples, *latent_shape)``) is
    picked up automatically, and the sampler moves ``u`` by Crank-Nicolson steps.

    Correlation pays most for a likelihood that is a product over many independent groups, each
    estimated on its own, :math:`\hat L = \prod_t \frac1N \sum_i w_t(f_{ti}, \theta)` (random
    effects, latent variables per observation): use ``latent_shape=(T, ...)`` and return the
    log-weights with shape ``(N, T)``.

    Parameters
    ----------
    log_weight : callable
        ``log_weight(f, *params) -> array (N,) or (N, T)``, as for :func:`importance_sampling_estimator`.
    transform : callable
        ``transform(u, *params) -> f``: the ``N`` proposal draws from ``u`` of shape
        ``(n_samples, *latent_shape)``.
    n_samples : int
        :math:`N`.
    latent_shape : tuple of int, default ()
        Shape of one draw's normals.

    Returns
    -------
    callable
        ``log_estimator(*params, u) -> float`` with attribute ``auxiliary_shape``.
    """
    if not (callable(log_weight) and callable(transform)):
        raise TypeError("log_weight and transform must be callables.")
    n_samples = _check_positive_int("n_samples", n_samples)
    latent = (latent_shape,) if isinstance(latent_shape, int | np.integer) else tuple(latent_shape)
    auxiliary_shape = _auxiliary_shape((n_samples, *latent))

    def log_estimator(*args):
        *params, u = args
        return _log_importance_estimate(log_weight(transform(u, *params), *params), n_samples)

    log_estimator.n_samples = n_samples
    log_estimator.auxiliary_shape = auxiliary_shape
    return log_estimator


def correlated_particle_filter(
    initial, transition, log_observation, n_particles: int, n_steps: int, *, sort_particles: bool = True
):
    r"""Build ``log_estimator(*params, u)``: a bootstrap particle filter driven by standard normals.

    For a state-space model :math:`x_0 \sim \mu_\theta`, :math:`x_t \mid x_{t-1} \sim
    f_\theta(\cdot \mid x_{t-1})`, :math:`y_t \mid x_t \sim g_\theta(y_t \mid x_t)`,
    :math:`t = 0, \dots, T-1` (zero-based, as the callbacks receive ``t``), the bootstrap filter's
    estimate

    .. math::
        \hat L(\theta, u) = \prod_{t=0}^{T-1} \frac1N \sum_{i=1}^N g_\theta(y_t \mid x_t^i)

    is unbiased for :math:`p(y_{1:T} \mid \theta)`. All its randomness comes from ``u`` of shape
    ``(T, N + 1)``: ``u[t, :N]`` drive the particles (``initial`` at :math:`t = 0`, then
    ``transition``), and :math:`\Phi(u[t, N])` is the single uniform of a systematic resampling
    after step :math:`t`. Before resampling the particles are **sorted by their state**, so
    that a small change of :math:`\theta` or :math:`u` moves the resampled particles only a
    little and the estimates at the current and the proposed point stay correlated; without
    sorting, resampling breaks the correlation (Deligiannidis, Doucet and Pitt 2018, section 4,
    who sort along a Hilbert curve for multivariate states; here the states are scalar).
    Systematic resampling keeps the estimate unbiased.

    A particle whose state is not finite (``initial`` or ``transition`` degenerate where a parameter
    reaches its bound in floating point, such as :math:`\sigma / \sqrt{1 - \phi^2}` at
    :math:`\phi = 1`) has weight zero. A NaN or :math:`+\infty` from ``log_observation`` at a finite
    state is an error naming the step: a fault in the function, which would otherwise zero the estimate.

    Parameters
    ----------
    initial : callable
        ``initial(v, *params) -> x``: :math:`N` draws from :math:`\mu_\theta` (shape ``(N,)``)
        from standard normals ``v`` of shape ``(N,)``, one per particle. Where the first observed state
        needs more (a prior draw, then a transition), make step 0 unobserved: ``n_steps`` one more
        than the observations, and ``log_observation`` zeros at ``t = 0``.
    transition : callable
        ``transition(x, v, t, *params) -> x'``: one draw from :math:`f_\theta(\cdot \mid x^i)` per
        particle, from standard normals ``v`` (``t`` = 1 .. T-1).
    log_observation : callable
        ``log_observation(x, t, *params) -> array (N,)``: :math:`\log g_\theta(y_t \mid x^i)`.
    n_particles : int
        :math:`N`.
    n_steps : int
        :math:`T`, the number of observations.
    sort_particles : bool, default True
        Sort before resampling. ``False`` gives the plain filter (still unbiased, but resampling
        then decorrelates successive estimates: for comparison only).

    Returns
    -------
    callable
        ``log_estimator(*params, u) -> float`` with attribute ``auxiliary_shape = (T, N + 1)``,
        for :func:`~pymc_kameleon.pseudo_marginal.PseudoMarginalPotential`.
    """
    if not (callable(initial) and callable(transition) and callable(log_observation)):
        raise TypeError("initial, transition and log_observation must be callables.")
    n = _check_positive_int("n_particles", n_particles)
    steps = _check_positive_int("n_steps", n_steps)
    offsets = np.arange(n)

    def log_estimator(*args):
        *params, u = args
        u = np.asarray(u, dtype=float)
        total = 0.0
        x = np.asarray(initial(u[0, :n], *params), dtype=float)
        for t in range(steps):
            if t > 0:
                x = np.asarray(transition(x, u[t, :n], t, *params), dtype=float)
            log_w = np.asarray(log_observation(x, t, *params), dtype=float)
            if log_w.shape != (n,) or x.shape != (n,):
                raise ValueError(
                    f"The particle filter needs scalar states: x and log_observation must have shape ({n},), "
                    f"got {x.shape} and {log_w.shape} at step {t}."
                )
            top = log_w.max()
            if not top < math.inf:  # NaN or +inf somewhere
                log_w = _weights_of_infinite_states(log_w, x, t)
                top = log_w.max()
            if top == -math.inf:  # every particle has zero weight: a zero estimate
                return -math.inf
            weights = np.exp(log_w - top)  # log_mean_exp by hand: SciPy's costs more than the filter
            total += float(top + math.log(weights.mean()))
            if t == steps - 1:
                break
            # sorted, so that resampling keeps the correlation
            order = np.argsort(x, kind="stable") if sort_particles else offsets
            cumulative = np.cumsum(weights[order] / weights.sum())
            positions = (offsets + ndtr(u[t, n])) / n  # systematic: one uniform per step
            x = x[order][np.minimum(np.searchsorted(cumulative, positions), n - 1)]
        return total

    log_estimator.auxiliary_shape = (steps, n + 1)
    log_estimator.n_particles = n
    return log_estimator


def _weights_of_infinite_states(log_w, x, t: int) -> np.ndarray:
    """``log_w`` with -inf (zero weight) where ``log_observation`` gave NaN or +inf at a state that is
    not finite: ``initial`` or ``transition`` degenerate at the parameters' boundary (the stochastic
    volatility model's sd sigma / sqrt(1 - phi^2) at phi = 1 exactly, where the logit transform rounds).
    At a finite state such a value is a fault in ``log_observation``, and an error: a new user's NaN for
    a few particles had made the estimate 0, and the chain reject every proposal there, without a word.
    """
    undefined = ~(log_w < math.inf)
    finite_states = undefined & np.isfinite(x)
    if finite_states.any():
        bad = log_w[finite_states]
        counts = (("NaN", np.isnan(bad).sum()), ("+inf", (bad == math.inf).sum()))
        kinds = " and ".join(f"{kind} for {int(k)}" for kind, k in counts if k)
        raise ValueError(
            f"correlated_particle_filter: log_observation returned {kinds} of {log_w.size} particles at "
            f"step t={t}, at finite states. It must return log g(y_t | x) per particle, a real number or "
            "-inf (a zero weight): look there for a log of a negative number, an overflow or a division by "
            "zero."
        )
    return np.where(undefined, -math.inf, log_w)


def _check_spread_values(values) -> None:
    """Refuse NaN or +inf log-estimates in :func:`log_estimate_spread` (a new user's estimator returned
    +inf in 30% of the repeats and got a healthy-looking sd of 1.33 from the others)."""
    bad = np.isnan(values) | (values == math.inf)
    if bad.any():
        counts = (("NaN", np.isnan(values).sum()), ("+inf", (values == math.inf).sum()))
        kinds = " and ".join(kind for kind, n in counts if n)
        raise ValueError(
            f"log_estimate_spread: the log-estimator returned {kinds} in {int(bad.sum())} of {values.size} "
            "repeats at these parameters; sampling refuses such values (PseudoMarginalEstimatorError). "
            "A log-estimate must be finite, or -inf for an estimate of exactly 0: fix the estimator (an "
            "overflow, log of a negative number, or the likelihood returned instead of its log)."
        )


def log_estimate_spread(
    log_estimator, *params, n_repeats: int = 100, rng=None, auxiliary_shape=None, correlation=None
) -> dict:
    r"""Mean and standard deviation of repeated log-estimates at fixed parameters.

    The standard deviation of :math:`\log\hat L(\theta)` decides how well a pseudo-marginal chain
    mixes: near 1 is efficient, above about 3 the chain sticks (Doucet et al. 2015). Check it
    at a few typical posterior values before a long run.

    A correlated estimator, ``log_estimator(*params, u)`` (``auxiliary_shape`` given, or the
    estimator's own attribute, as :func:`correlated_importance_sampling_estimator` and
    :func:`correlated_particle_filter` set it), is called with fresh standard normals ``u`` each time.
    What its chain sees is less noisy than one estimate: the log-ratio
    :math:`\log\hat L(\theta, u') - \log\hat L(\theta, u)` of two estimates one Crank-Nicolson
    move apart, :math:`u' = \rho u + \sqrt{1 - \rho^2}\,\varepsilon`. With ``correlation`` =
    :math:`\rho` its standard deviation is reported too (``"log_ratio_sd"``): a plain estimator's
    log-ratio has :math:`\sqrt2` times the single estimate's sd, so the plain rule (1-1.7) reads about
    1.4-2.4 for it; far above, the chain sticks (raise :math:`\rho` or the samples per estimate).

    Parameters
    ----------
    log_estimator : callable
        ``log_estimator(*params, rng)``, or ``log_estimator(*params, u)`` for a correlated one.
    *params
        The parameter values (as :func:`~pymc_kameleon.pseudo_marginal.PseudoMarginalPotential` passes them).
    n_repeats : int, default 100
        Estimates (pairs of estimates with ``correlation``).
    rng : int or numpy.random.Generator, optional
        Seed of the repeats.
    auxiliary_shape : int or tuple of int, optional
        The shape of ``u`` for a correlated estimator; defaults to ``log_estimator.auxiliary_shape``.
    correlation : float, optional
        :math:`\rho` in [0, 1), for a correlated estimator's ``"log_ratio_sd"``.

    Returns
    -------
    dict
        ``{"mean": ..., "sd": ..., "n_repeats": ..., "zero_fraction": ..., "log_values": array}``: the
        mean and sd of the finite log-estimates, and the share of estimates that were 0 (log -inf; a
        chain rejects a proposal whose estimate is 0, so a large share mixes poorly whatever the sd);
        with ``correlation`` also ``"log_ratio_sd"`` and ``"log_ratios"`` (NaN where either estimate is
        0).

    Raises
    ------
    ValueError
        If a log-estimate is NaN or +inf, which sampling refuses too (``PseudoMarginalEstimatorError``):
        a spread of the other values would hide it.
    """
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, int | np.integer) or n_repeats < 2:
        raise ValueError(f"n_repeats must be an integer >= 2, got {n_repeats!r}.")
    rng = np.random.default_rng(rng)
    if auxiliary_shape is None:
        auxiliary_shape = getattr(log_estimator, "auxiliary_shape", None)
    if auxiliary_shape is None:
        if correlation is not None:
            raise ValueError(
                "correlation needs a correlated estimator, log_estimator(*params, u): pass auxiliary_shape "
                "(the shape of u), or leave correlation out for an estimator that takes rng."
            )
        values = np.array([log_estimator(*params, rng) for _ in range(int(n_repeats))], dtype=float)
        ratios = None
    else:
        # PseudoMarginalPotential's own checks of the shape and of rho (0 stands for "no ratios" here).
        shape, rho = _check_auxiliary(auxiliary_shape, 0.0 if correlation is None else correlation)
        values = np.empty(int(n_repeats))
        ratios = None if correlation is None else np.empty(int(n_repeats))
        for i in range(int(n_repeats)):
            u = rng.standard_normal(shape)
            values[i] = log_estimator(*params, u)
            if ratios is not None:
                moved = rho * u + math.sqrt(1.0 - rho**2) * rng.standard_normal(shape)
                ratios[i] = float(log_estimator(*params, moved)) - values[i]
    _check_spread_values(values)
    finite = values[np.isfinite(values)]
    out = {
        "mean": float(np.mean(finite)) if finite.size else -math.inf,
        "sd": float(np.std(finite, ddof=1)) if finite.size > 1 else math.nan,
        "n_repeats": int(n_repeats),
        "zero_fraction": float(np.mean(values == -math.inf)),
        "log_values": values,
    }
    if ratios is not None:
        ratios = np.where(np.isfinite(ratios), ratios, np.nan)
        kept = ratios[np.isfinite(ratios)]
        out["log_ratio_sd"] = float(np.std(kept, ddof=1)) if kept.size > 1 else math.nan
        out["log_ratios"] = ratios
    return out
