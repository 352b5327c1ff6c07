r"""The evidence of tempered SMC: its relative variance from one run, and its lag behind the moves.

:func:`evidence_relative_variance` (Lee and Whiteley 2018) estimates the relative variance of
:math:`\hat Z` from the particles' genealogy; :func:`loglik_rise` and :func:`evidence_lag`
measure how far the moves lagged behind the tempered targets (the rise of the particles' mean
log-likelihood during a stage's sweeps, integrated over :math:`\beta`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "beta_increments",
    "chain_autocorrelation_time",
    "chain_mean_variance",
    "coordinate_autocorrelation_times",
    "evidence_lag",
    "evidence_relative_variance",
    "genealogy_stats",
    "loglik_rise",
    "slowest_chain_autocorrelation",
    "waste_free_relative_variance",
]


def evidence_relative_variance(weights, eve, n_weightings: int) -> float:
    r"""Single-run estimate of :math:`\operatorname{Var}(\hat Z / Z)` from the particles' genealogy.

    An SMC sampler that starts from :math:`N` independent draws, reweights :math:`n` times (the
    last weights are ``weights``) and resamples in between estimates
    :math:`\hat Z = \prod_{p=1}^{n} \frac1N \sum_i G_p(x_p^i)`. Let :math:`E^i` be the *Eve
    index* of particle :math:`i`: the initial draw it descends from through the resamplings. With
    normalised weights :math:`W^i`, Lee and Whiteley's estimator (2018; Chan and Lai 2013
    without the factor) is

    .. math::
        V = 1 - \left(\frac{N}{N-1}\right)^{n}
            \Bigl(1 - \sum_{k=1}^{N} \Bigl(\sum_{i:\,E^i = k} W^i\Bigr)^2\Bigr),

    unbiased for :math:`\operatorname{Var}(\hat Z)/Z^2` under multinomial resampling (since
    :math:`\hat Z^2 (1 - V)` is unbiased for :math:`Z^2`), and with :math:`N V` consistent for the
    asymptotic relative variance. Particles that share an Eve are correlated through their
    common ancestor; the squared sums over each Eve's descendants measure that. With no
    resampling (:math:`n = 1`) it is the importance-sampling estimate
    :math:`(N \sum_i (W^i)^2 - 1)/(N - 1)`.

    Parameters
    ----------
    weights : array of shape (N,)
        Normalised weights of the current reweighting (non-negative, summing to 1).
    eve : int array of shape (N,)
        Eve index of each particle, in ``0 .. N-1``.
    n_weightings : int
        :math:`n`, the number of reweightings so far, this one included.

    Returns
    -------
    float
        :math:`V`; it can be slightly negative (it is unbiased, not clipped).

    References
    ----------
    Lee, A. and Whiteley, N. (2018). Variance estimation in the particle filter. Biometrika 105(3),
    609-625. Chan, H. P. and Lai, T. L. (2013). A general theory of particle filters in hidden
    Markov models and some applications. Ann. Statist. 41(6), 2877-2904.
    """
    weights = np.asarray(weights, dtype=float).reshape(-1)
    n = weights.size
    if n < 2:
        raise ValueError("The genealogy variance estimate needs at least 2 particles.")
    lineage_mass = np.bincount(np.asarray(eve).reshape(-1), weights=weights, minlength=n)
    same_eve = float(np.sum(lineage_mass**2))
    return 1.0 - math.exp(n_weightings * math.log(n / (n - 1))) * (1.0 - same_eve)


def chain_mean_variance(values) -> float:
    r"""Asymptotic variance :math:`\sigma^2` of the mean of :math:`M` Markov chains of length :math:`P`:
    :math:`M P` times the variance of the grand mean (Geyer's initial positive sequence).

    With :math:`c_k` the lag-:math:`k` autocovariance averaged over the chains (about the grand mean,
    divided by :math:`P`), :math:`\sigma^2 = -c_0 + 2 \sum_{k < K} c_k`, where :math:`K` is the first
    odd index at which :math:`c_K + c_{K-1} < 0` or the pair sums stop decreasing
    (:math:`c_{K-2} + c_{K-3} < c_K + c_{K-1}`). This is the estimator that Dau and Chopin (2022)
    use for waste-free SMC, where the chains start at stationarity (``MCMC_init_seq`` in the
    ``particles`` package, with which it agrees to rounding). With :math:`P = 1` it is the variance.

    Parameters
    ----------
    values : array of shape (P, M)
        Column :math:`m` is chain :math:`m`'s values in order.
    """
    c, end = _initial_sequence(values)
    return float(-c[0] + 2.0 * c[:end].sum())


def chain_autocorrelation_time(values) -> float:
    r"""Integrated autocorrelation time :math:`\tau = \sigma^2 / c_0` of :math:`M` chains of length
    :math:`P` (:func:`chain_mean_variance`; 1 for independent draws, NaN if the values do not vary).

    :math:`\tau` is read off lags below :math:`P` only, so chains much shorter than their true
    autocorrelation time understate it, and a :math:`\tau` near :math:`P` means the chains are too
    short to tell.
    """
    c, end = _initial_sequence(values)
    if not c[0] > 0:
        return float("nan")
    return float((-c[0] + 2.0 * c[:end].sum()) / c[0])


def _initial_sequence(values):
    """Autocovariances c_k (about the grand mean, divided by P) and the end of Geyer's initial sequence."""
    X = np.asarray(values, dtype=float)
    if X.ndim != 2 or X.size == 0:
        raise ValueError(f"values must have shape (P, M) with P, M >= 1, got {X.shape}.")
    P = X.shape[0]
    X = X - X.mean()
    c = np.array([np.mean(X[: P - k] * X[k:]) * (P - k) / P for k in range(P)])
    # Rounding room relative to c_0, so that the values' units do not matter (an absolute 1e-10 read every
    # lag of values with sd 1e-6 as admissible, and their variance as about 0).
    return c, _sequence_end(c, 1e-10 * c[0] if c[0] > 0 else 0.0)


def _sequence_end(c, tolerance: float) -> int:
    """The first inadmissible odd index of Geyer's initial sequence of autocovariances ``c`` (or len(c))."""
    for i in range(1, len(c), 2):
        pair = c[i] + c[i - 1]
        previous = c[i - 2] + c[i - 3] if i >= 3 else np.inf
        if pair < -tolerance or previous - pair < -tolerance:
            return i
    return len(c)


def coordinate_autocorrelation_times(states) -> np.ndarray:
    r""":func:`chain_autocorrelation_time` of each coordinate of :math:`M` chains of length :math:`P`.

    The autocovariances :math:`c_k` (averaged over the chains, about each coordinate's grand mean,
    divided by :math:`P`) come from one FFT per chain and coordinate, and the sequence's end is judged on
    :math:`c_k / c_0`, so that a coordinate's units do not matter; NaN where a coordinate does not vary.

    Parameters
    ----------
    states : array of shape (P, M, d)
        ``states[p, m]`` is step :math:`p` of chain :math:`m`.
    """
    X = np.asarray(states, dtype=float)
    if X.ndim != 3 or X.size == 0:
        raise ValueError(f"states must have shape (P, M, d) with P, M, d >= 1, got {X.shape}.")
    P, M, d = X.shape
    # A coordinate varies if its variance is above the rounding of its values (float64's 2.2e-16, with
    # room): a constant's centred values are that rounding, and a tiny scale (sd 1e-8) is not constant.
    rounding = (1e-12 * np.abs(X).max(axis=(0, 1))) ** 2
    X = X - X.mean(axis=(0, 1))
    n = 1 << (2 * P - 1).bit_length()  # zero padding: no wrap-around below lag P
    spectrum = np.fft.rfft(X, n=n, axis=0)
    c = np.fft.irfft(spectrum * spectrum.conj(), n=n, axis=0)[:P].sum(axis=1) / (P * M)
    taus = np.full(d, np.nan)
    for j in range(d):
        if c[0, j] > rounding[j]:
            rho = c[:, j] / c[0, j]
            end = _sequence_end(rho, 1e-10)
            taus[j] = -1.0 + 2.0 * rho[:end].sum()
    return taus


def slowest_chain_autocorrelation(loglik, states, coordinate_names=None) -> tuple[float, str]:
    """The largest :func:`chain_autocorrelation_time` of :math:`M` chains of length :math:`P`, over their
    log-likelihoods and each coordinate of their states, and what it was of.

    The log-likelihood alone missed the slow coordinates of a hierarchical regression (decision record
    0052): waste-free chains of 100 states whose log-likelihood's time was about 20 lagged by 42-44
    in the group mean and scale, and log Z came out 0.50 nats low over 10 seeds, ±2 SE covering 5.

    Parameters
    ----------
    loglik : array of shape (P, M)
    states : array of shape (P, M, d)
    coordinate_names : sequence of str, optional
        The coordinates' names, for ``what``.

    Returns
    -------
    tau : float
        NaN if nothing varies.
    what : str
        ``"the log-likelihood"``, the coordinate's name, or ``"coordinate j of the particles"``.
    """
    tau = chain_autocorrelation_time(loglik)
    coordinates = coordinate_autocorrelation_times(states)
    if np.any(np.isfinite(coordinates)):
        j = int(np.nanargmax(coordinates))
        if not coordinates[j] <= tau:  # also where the log-likelihood's is NaN
            what = coordinate_names[j] if coordinate_names is not None else f"coordinate {j} of the particles"
            return float(coordinates[j]), what
    return tau, "the log-likelihood"


def waste_free_relative_variance(weights, n_chains: int) -> float:
    r"""Relative variance :math:`\operatorname{Var}(\hat\ell_t)/\ell_t^2` of one waste-free reweighting's
    mean weight, from the chains the particles came from (Dau and Chopin 2022).

    The :math:`N` particles are :math:`M` = ``n_chains`` Markov chains stored step by step (particle
    :math:`pM + m` is step :math:`p` of chain :math:`m`; the initial draws are :math:`N` chains of
    length 1). The increment of :math:`\log \hat Z` is the log of the mean unnormalised weight; by
    the delta method its variance is :math:`\sigma^2 / N`, with :math:`\sigma^2`
    :func:`chain_mean_variance` of the weights scaled to mean 1 (:math:`N W_i`). Only whole steps
    enter :math:`\sigma^2` (the trailing :math:`N \bmod M` particles do not). Dau and Chopin add
    these over the stages for :math:`\operatorname{Var}(\log \hat Z)`.

    Parameters
    ----------
    weights : array of shape (N,)
        Normalised weights (summing to 1) in the particles' order.
    n_chains : int
        :math:`M`.
    """
    weights = np.asarray(weights, dtype=float).reshape(-1)
    n = weights.size
    steps = n // int(n_chains)
    scaled = n * weights[: steps * n_chains].reshape(steps, n_chains)
    return chain_mean_variance(scaled) / n


def genealogy_stats(weights, eve, n_weightings: int, multinomial: bool = True) -> dict:
    """The evidence's genealogy statistics at a reweighting, taken before the particles are resampled.

    ``evidence_relative_variance`` is :func:`evidence_relative_variance` (NaN unless the particles are
    resampled multinomially, the only scheme for which it is unbiased); ``distinct_ancestors`` is the
    number of distinct Eve indices, the initial draws that still have descendants.
    """
    return {
        "evidence_relative_variance": (
            evidence_relative_variance(weights, eve, n_weightings) if multinomial else np.nan
        ),
        "distinct_ancestors": int(np.unique(eve).size),
    }


def loglik_rise(loglik_start, loglik_end, parents) -> tuple[float, float]:
    r"""How far a stage's sweeps raised the particles' log-likelihood, and the standard error of that rise.

    After reweighting to :math:`\beta_t` and resampling, particles that had reached
    :math:`\pi_{t-1}` are distributed as :math:`\pi_t`, and :math:`\pi_t`-invariant sweeps leave the
    mean of :math:`\log L` where it is: the expected rise

    .. math::
        D_t = \frac1N \sum_i \left(\log L(x_i^{\mathrm{end}}) - \log L(x_i^{\mathrm{start}})\right)

    is zero. Particles that lagged behind (too few at high likelihood) rise towards
    :math:`\mathbb E_{\pi_t}[\log L]`, so :math:`D_t > 0` measures (at least) how far they lagged when
    they were reweighted. The standard error is cluster-robust: copies of one resampled parent start
    from the same value, so the :math:`N` differences are not independent, but the parents are:

    .. math::
        \widehat{\mathrm{se}}(D_t) = \frac1N \Bigl(\sum_{p} \bigl(\textstyle\sum_{i:\,a_i = p}
            (d_i - D_t)\bigr)^2\Bigr)^{1/2},

    with :math:`d_i` the particles' rises and :math:`a_i` their parents' indices.

    Parameters
    ----------
    loglik_start, loglik_end : arrays of shape (N,)
        :math:`\log L` of each particle before the stage's first sweep and after its last.
    parents : int array of shape (N,)
        The index each particle was resampled from (PyMC's ``resampling_indexes``).

    Returns
    -------
    (float, float)
        :math:`D_t` and its standard error; (NaN, NaN) if any value is not finite.
    """
    rise = np.asarray(loglik_end, dtype=float) - np.asarray(loglik_start, dtype=float)
    if rise.size == 0 or not np.all(np.isfinite(rise)):
        return math.nan, math.nan
    mean = float(rise.mean())
    _, cluster = np.unique(np.asarray(parents).reshape(-1), return_inverse=True)
    cluster_sums = np.bincount(cluster, weights=rise - mean)
    return mean, float(math.sqrt(np.sum(cluster_sums**2)) / rise.size)


def beta_increments(beta) -> np.ndarray:
    r""":math:`\beta_t - \beta_{t-1}` for the stages' inverse temperatures :math:`\beta_1, \dots, \beta_T`,
    with :math:`\beta_0 = 0`."""
    beta = np.asarray(beta, dtype=float).reshape(-1)
    return np.diff(np.concatenate([[0.0], beta]))


def evidence_lag(beta, rise, rise_se) -> tuple[float, float]:
    r"""An estimate of how far the evidence is too low because the particles lagged their tempered targets.

    Since :math:`\frac{d}{d\beta} \log Z(\beta) = \mathbb E_{\pi_\beta}[\log L]`, an SMC sampler whose
    particles' mean :math:`\log L` falls :math:`\delta_t` short of :math:`\mathbb E_{\pi_t}[\log L]`
    when it reweights from :math:`\beta_{t-1}` to :math:`\beta_t` underestimates that stage's
    increment of :math:`\log Z` by about :math:`(\beta_t - \beta_{t-1})\,\delta_t`. The rise
    :math:`D_t` of :func:`loglik_rise` is the part of :math:`\delta_t` that the stage's sweeps made
    up, so

    .. math::
        \Lambda = \sum_t (\beta_t - \beta_{t-1})\, D_t,
        \qquad \mathrm{se}(\Lambda) = \Bigl(\sum_t (\beta_t - \beta_{t-1})^2\,
            \mathrm{se}(D_t)^2\Bigr)^{1/2}

    estimates the low bias of :math:`\log \hat Z` (a lower bound when the sweeps do not close the
    whole gap). It is zero in expectation when every stage's particles had reached their target.

    It assumes that a reweighting leaves the particles as close to their new target as they were to the
    old one. A reweighting that keeps only a few particles does not: its survivors are an extreme-value
    selection of the highest likelihoods, *ahead* of the target, the sweeps lower their mean log L, and
    :math:`D_t` is negative however low log Z is. On a regression whose prior was :math:`10^6` times
    wider than its posterior, PyMC's tempering steps kept an effective sample size of about 3 of 1000
    and :math:`\Lambda` read :math:`-2.0 \pm 0.25` with log Z 4.8 nats low
    (``benchmarks/results/kass_unstandardised_regression.md``); KASS now refines such steps
    (:func:`~pymc_kameleon.core.smc.population.refine_tempering_step`), and the few-lineages warning
    covers what remains.

    Parameters
    ----------
    beta : array of shape (T,)
        :math:`\beta_1, \dots, \beta_T`, the stages' inverse temperatures (:math:`\beta_0 = 0`).
    rise, rise_se : arrays of shape (T,)
        :math:`D_t` and its standard error per stage; stages with NaN are left out.

    Returns
    -------
    (float, float)
        :math:`\Lambda` and its standard error.
    """
    step = beta_increments(beta)
    rise, rise_se = np.asarray(rise, dtype=float), np.asarray(rise_se, dtype=float)
    known = np.isfinite(rise) & np.isfinite(rise_se)
    lag = float(np.sum(step[known] * rise[known]))
    return lag, float(math.sqrt(np.sum((step[known] * rise_se[known]) ** 2)))
