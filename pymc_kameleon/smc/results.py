"""Read per-stage SMC statistics back from ``pm.sample_smc`` output, the same way on PyMC 5 and 6."""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np
from scipy import stats
from scipy.special import logsumexp

from pymc_kameleon.core.smc.evidence import evidence_lag
from pymc_kameleon.core.warning_categories import KameleonWarning

__all__ = [
    "FINAL_RISE_Z", "EvidenceLag", "LogEvidence", "evidence_lags", "final_climb", "log_evidence",
    "stage_dataset", "stage_stats", "with_stage_dataset",
]


#: Where pm.sample_smc(return_inferencedata=False) keeps the stage statistics (a new user converted its
#: MultiTrace with pm.to_inference_data and was told the result was not from pm.sample_smc).
_MULTITRACE_NOTE = (
    " With return_inferencedata=False PyMC keeps the per-stage statistics on the MultiTrace's report "
    "(trace.report.log_marginal_likelihood: a chain's list of stages, the last one its log evidence, "
    "without an error bar), and pm.to_inference_data(trace) does not carry them."
)


def stage_stats(idata, name: str) -> list[np.ndarray]:
    """Per-chain arrays of one per-stage statistic (``beta``, ``nu2``, ...), as floats.

    ``pm.sample_smc`` stores per-stage statistics with layouts that depend on the PyMC version
    and on whether the chains ran the same number of stages:

    - equal stages: a numeric (chain, stage) array; on PyMC 6 a single chain's stages sit on
      the ``chain`` dimension;
    - unequal stages: an object array of one list per chain, shaped (chain,) on PyMC 6 and
      (1, chain) on PyMC 5 (the chains on the ``draw`` dimension).

    This undoes all of them: one float array per chain, in chain order. An InferenceData without the
    statistic (not from ``pm.sample_smc``, or a name it does not record) raises a ValueError that lists
    the statistics it has.
    """
    if not hasattr(idata, "groups"):  # a MultiTrace (return_inferencedata=False), a dict, ...
        raise TypeError(
            f"Expected the InferenceData that pm.sample_smc returns, got a {type(idata).__name__}: sample "
            "with return_inferencedata=True (PyMC's default) and pass its result." + _MULTITRACE_NOTE
        )
    stats = getattr(idata, "sample_stats", None)
    if stats is None or name not in stats:
        have = sorted(stats.data_vars) if stats is not None else []
        why = "" if "log_marginal_likelihood" in have else (
            " (it is not from pm.sample_smc, whose sample_stats hold log_marginal_likelihood and beta per "
            "stage, or it was made by pm.to_inference_data from pm.sample_smc's MultiTrace, which leaves "
            "them out)"
        )
        raise ValueError(
            f"This InferenceData has no per-stage statistic {name!r}{why}; its sample_stats hold: "
            f"{', '.join(have) if have else 'nothing'}." + ("" if have else _MULTITRACE_NOTE)
        )
    n_chains = int(idata.posterior.sizes["chain"])
    if STAGE_DIM in stats[name].dims:  # stage_dataset's layout: NaN after a chain's last stage
        table = np.asarray(stats[name].values, dtype=float).reshape(n_chains, -1)
        stages = np.isfinite(np.asarray(stats["beta"].values, dtype=float)).reshape(n_chains, -1).sum(axis=1)
        return [row[:n] for row, n in zip(table, stages, strict=True)]
    values = np.asarray(idata.sample_stats[name].values)
    if values.dtype == object:
        cells = [np.asarray(cell, dtype=float).reshape(-1) for cell in values.reshape(-1)]
        if len(cells) == n_chains:
            return cells
        values = np.concatenate(cells)  # one number per cell: a numeric array in disguise
    values = np.asarray(values, dtype=float)
    if values.size % n_chains:
        raise ValueError(
            f"sample_stats[{name!r}] has {values.size} values, which do not split over {n_chains} chains."
        )
    return list(values.reshape(n_chains, -1))


#: The dimension of the per-stage statistics in :func:`stage_dataset`.
STAGE_DIM = "stage"


def stage_dataset(idata):
    """Every per-stage statistic of a ``pm.sample_smc`` result as numbers on dimensions (chain, stage).

    ``pm.sample_smc`` keeps per-stage statistics in object arrays whose layout depends on the PyMC
    version and on whether the chains ran the same number of stages (:func:`stage_stats`): Python lists
    where they did not, ints mixed with floats where they did; netCDF stores neither, on PyMC 5 or 6
    (pymc-devs/pymc#5263). Here every statistic is a float array of shape (chain, stage), NaN after a
    chain's last stage; the attributes are kept.
    :func:`stage_stats` and :func:`log_evidence` read this layout too.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        What ``pm.sample_smc`` returned (or :func:`with_stage_dataset` made of it).

    Returns
    -------
    xarray.Dataset
    """
    import xarray as xr

    stage_stats(idata, "beta")  # the checks and their messages
    stats = idata.sample_stats
    chains = idata.posterior["chain"].values
    columns = {name: stage_stats(idata, name) for name in stats.data_vars}
    n_stages = max(len(row) for rows in columns.values() for row in rows)
    data = {}
    for name, rows in columns.items():
        table = np.full((len(chains), n_stages), np.nan)
        for c, row in enumerate(rows):
            table[c, : len(row)] = row
        data[name] = (("chain", STAGE_DIM), table)
    return xr.Dataset(data, coords={"chain": chains, STAGE_DIM: np.arange(n_stages)}, attrs=dict(stats.attrs))


def with_stage_dataset(idata):
    """A copy of a ``pm.sample_smc`` result whose ``sample_stats`` is :func:`stage_dataset`'s, so that
    ``to_netcdf`` can save it (PyMC's own object arrays cannot be saved).

    Parameters
    ----------
    idata : arviz.InferenceData (ArviZ 0.x) or xarray.DataTree (ArviZ 1)

    Returns
    -------
    The same type as ``idata``; the other groups are shared with it, not copied.
    """
    dataset = stage_dataset(idata)
    if hasattr(idata, "children"):  # ArviZ 1: a DataTree whose children are the groups
        import xarray as xr

        tidy = idata.copy()
        tidy["sample_stats"] = xr.DataTree(dataset=dataset)
        return tidy
    import arviz as az

    groups = {group: getattr(idata, group) for group in idata.groups() if group != "sample_stats"}
    return az.InferenceData(sample_stats=dataset, **groups)


class LogEvidence(NamedTuple):
    r"""Per-chain :math:`\log \hat Z` and its standard error, with their across-chain combination.

    Unpacks as ``log_z, std_error = log_evidence(idata)``.
    """

    log_z: np.ndarray
    std_error: np.ndarray

    @property
    def combined_log_z(self) -> float:
        r""":math:`\log \bar Z` with :math:`\bar Z = \frac1C \sum_c \hat Z_c`, the chains' average
        evidence (unbiased for :math:`Z` when each :math:`\hat Z_c` is)."""
        log_z = np.asarray(self.log_z, dtype=float)
        return float(logsumexp(log_z) - math.log(log_z.size))

    @property
    def combined_std_error(self) -> float:
        r"""Standard error of :attr:`combined_log_z`.

        The chains are independent, so
        :math:`\operatorname{Var}(\bar Z) = C^{-2} \sum_c \operatorname{Var}(\hat Z_c)`, with
        :math:`\operatorname{Var}(\hat Z_c) \approx \hat Z_c^2 (e^{s_c^2} - 1)` from chain
        :math:`c`'s standard error :math:`s_c`; the result goes back to the log scale the same way,
        :math:`s^2 = \log(1 + \operatorname{Var}(\bar Z)/\bar Z^2)`.
        """
        log_z = np.asarray(self.log_z, dtype=float)
        rel_var = np.expm1(np.asarray(self.std_error, dtype=float) ** 2)
        weights = np.exp(2.0 * (log_z - self.combined_log_z)) / log_z.size**2
        return float(math.sqrt(math.log1p(np.sum(weights * rel_var))))


# Below this many distinct initial draws behind the final particles, the genealogy estimate is not
# trusted: +-2 SE covered the true log Z in about 70% of such runs
# (benchmarks/results/evidence_calibration.md).
MIN_DISTINCT_ANCESTORS = 50
# The setting (an attribute of sample_stats) of samples whose kernel warned at the end of sampling about
# each chain with few lineages (KASS, ASMC): log_evidence does not warn about them again.
LINEAGES_CHECKED = "lineages_checked_at_sampling"
# The settings of samples whose particles started from pm.sample_smc(start=...) (1 or 0), and the model's
# variables with an improper prior (comma-separated names, or ""): log Z is then another model's evidence.
STARTED_FROM_GIVEN_DRAWS = "particles_from_start"
IMPROPER_PRIORS = "improper_priors"


# Below this many lineages a reweighting kept only a handful of particles, and log Z was off by nats to tens
# of nats, not tenths: on a regression on income in dollars with N(0, 10^2) priors (1000 particles, before
# KASS refined PyMC's tempering steps) 1-7 lineages gave errors of -65.9 to +0.7 against error bars of
# 0.6-0.8; 4000 particles, 10-17 lineages (still under 1% of the draws), gave -0.52 to +0.06
# (benchmarks/results/kass_unstandardised_regression.md).
FEW_LINEAGES = 10


def collapsed_genealogy_message(counts: str, draws: int, fewest: int) -> str:
    """The warning for final particles with fewer than :data:`MIN_DISTINCT_ANCESTORS` distinct
    ancestors; ``counts`` says whose and how many (``"chain 0: 12 of 100"``), ``fewest`` is the
    smallest count and ``draws`` the number of particles. Below :data:`FEW_LINEAGES` it says that log Z
    can be off by many nats, and why."""
    # Lineages grow about in proportion to the particles (8-d banana: 11, 27, 52 at 200, 500, 1000).
    suggested = int(math.ceil(2 * MIN_DISTINCT_ANCESTORS * draws / max(fewest, 1) / 100.0)) * 100
    if draws < MIN_DISTINCT_ANCESTORS:
        # Too few particles to judge a collapse (2 particles, both surviving, were blamed on the prior).
        return (
            f"With draws={draws} particles the final particles cannot descend from {MIN_DISTINCT_ANCESTORS} "
            f"distinct initial draws ({counts}), so the standard error of log Z is not to be trusted (with "
            "one ancestor it is sqrt(log 2) = 0.83 whatever the error), and the posterior is "
            f"{draws} points. Use draws={max(suggested, 500)} or more for an evidence with an error bar "
            "(a few hundred for posterior summaries)."
        )
    if fewest < FEW_LINEAGES:
        return (
            f"The final particles descend from fewer than {MIN_DISTINCT_ANCESTORS} of the initial draws "
            f"({counts}), and from fewer than {FEW_LINEAGES}: a reweighting kept only a handful of "
            "particles, and log Z can be off by many nats, far beyond "
            "its standard error (measured: up to 66 nats off with error bars of 0.6-0.8, on a regression "
            "whose prior was a million times wider than the posterior along a coefficient on income in "
            "dollars). "
            "The usual cause is a prior far wider than the posterior, or one that puts little mass where "
            "the data are possible. Rescale the predictors (standardise them) or the priors so that the "
            "prior is not orders of magnitude wider than the posterior, and use more particles: "
            f"4 times as many (draws={4 * draws}) brought that regression within its error bars; about "
            f"draws={suggested} would give {2 * MIN_DISTINCT_ANCESTORS} lineages. Compare several "
            "independent chains."
        )
    return (
        f"The final particles descend from fewer than {MIN_DISTINCT_ANCESTORS} of the initial draws "
        f"({counts}). With so few lineages the standard error of log Z is too small (in benchmarks "
        "+-2 SE covered the true log Z in about 70% of such runs, not 95%; with one ancestor it is "
        "sqrt(log 2) = 0.83 whatever the error), and log Z can be off by more than it says. Use more "
        f"particles: lineages grow about in proportion to draws, so about draws={suggested} would give "
        f"{2 * MIN_DISTINCT_ANCESTORS}; or compare several independent chains."
    )


def _warn_collapsed_genealogy(distinct: list[int], draws: int) -> None:
    few = {c: n for c, n in enumerate(distinct) if n < MIN_DISTINCT_ANCESTORS}
    if few:
        counts = ", ".join(f"chain {c}: {n} of {draws}" for c, n in few.items())
        message = collapsed_genealogy_message(counts, draws, min(few.values()))
        warnings.warn(message, KameleonWarning, stacklevel=3)


def log_z_std_error(relative_variance):
    """The standard error of log Z from V = Var(Z_hat)/Z^2: sqrt(log(1 + V)), as Z_hat/Z is close to
    log-normal; V is unbiased, not clipped, so a slightly negative V gives 0. NaN stays NaN."""
    return np.sqrt(np.log1p(np.maximum(relative_variance, 0.0)))


# The evidence-lag warning (core.smc.evidence_lag): the estimate must stand clear of its own noise (LAG_Z
# standard errors) and be at least half log Z's error bar (which does not include it), and MIN_LAG nats.
LAG_Z = 3.0
MIN_LAG = 0.05


def lag_is_material(lag: float, lag_se: float, log_z_se: float) -> bool:
    """Whether an evidence lag of ``lag`` +- ``lag_se`` nats deserves a warning next to a log Z with
    standard error ``log_z_se`` (NaN: no error bar)."""
    if not (math.isfinite(lag) and math.isfinite(lag_se)):
        return False
    floor = log_z_se / 2 if math.isfinite(log_z_se) else 0.0
    return lag > LAG_Z * lag_se and lag > max(floor, MIN_LAG)


def evidence_lag_message(sampler: str, lag: float, lag_se: float, log_z_se: float, stage: int,
                         beta: float) -> str:
    """The warning for a material evidence lag; ``stage`` and ``beta`` name the stage that rose most."""
    bar = f"; its standard error, {log_z_se:.2g}, does not include this" if math.isfinite(log_z_se) else ""
    return (
        f"{sampler}: log Z is probably too low by at least {lag:.2g} +- {lag_se:.2g}{bar}. The particles "
        "lagged behind the tempered targets: their mean log-likelihood was still rising during the "
        f"rejuvenation sweeps, most at stage {stage} (beta={beta:.3g}). Use more sweeps (n_steps=50, or "
        "move_probability=0.999); for a funnel-shaped posterior (a scale parameter that sets the spread "
        "of others: a noise scale with regression coefficients, a hierarchical scale) "
        "independence_weight=0 helps too. Per-stage figures: the statistics loglik_rise and "
        "loglik_rise_se."
    )


class EvidenceLag(NamedTuple):
    """Per-chain evidence lag (nats by which log Z is probably too low) and its standard error."""

    lag: np.ndarray
    std_error: np.ndarray


def evidence_lags(idata) -> EvidenceLag:
    r"""How far each chain's :math:`\log \hat Z` is probably too low because its particles lagged.

    :math:`\Lambda_c = \sum_t (\beta_t - \beta_{t-1}) D_{c,t}` from the ``loglik_rise`` statistics
    (:func:`~pymc_kameleon.core.smc.evidence.evidence_lag`): about zero when every stage's particles reached
    their tempered target, positive (a lower bound of the shortfall) when they had not. KASS warns
    when it is material; this reads it for every chain.

    Raises
    ------
    ValueError
        When the run has no ``loglik_rise`` statistics (PyMC's own kernels record none).
    """
    if "loglik_rise" not in idata.sample_stats:
        raise ValueError(
            "This run has no loglik_rise statistics: the evidence lag is recorded by KASS and ASMC "
            "(pm.sample_smc(kernel=KASS)), not by PyMC's own SMC kernels."
        )
    per_chain = zip(*(stage_stats(idata, name) for name in ("beta", "loglik_rise", "loglik_rise_se")))
    lags = [evidence_lag(beta, rise, rise_se) for beta, rise, rise_se in per_chain]
    lag, std_error = (np.array(column, dtype=float) for column in zip(*lags))
    return EvidenceLag(lag, std_error)


# Chains whose log Z disagree beyond their standard errors at this level are reported.
CHAIN_DISAGREEMENT_P = 0.01


def _warn_disagreeing_chains(log_z: np.ndarray, std_error: np.ndarray, waste_free: bool = False) -> None:
    r"""Warn when the chains' :math:`\log \hat Z_c` are not consistent with their standard errors
    :math:`s_c`: :math:`\chi^2 = \sum_c (\log \hat Z_c - m)^2 / s_c^2` with the precision-weighted
    mean :math:`m` has :math:`C - 1` degrees of freedom when the error bars are right. The remedy
    named is that of the run's stages (waste-free chains have no ``n_steps``)."""
    ok = np.isfinite(log_z) & np.isfinite(std_error) & (std_error > 0)
    if ok.sum() < 2:
        return
    z, se = log_z[ok], std_error[ok]
    w = 1.0 / se**2
    chi2 = float(np.sum(w * (z - np.sum(w * z) / np.sum(w)) ** 2))
    p = float(stats.chi2.sf(chi2, ok.sum() - 1))
    if p < CHAIN_DISAGREEMENT_P:
        remedy = (
            "Use longer waste-free chains (chain_length=), more particles (draws=), or the default "
            "sweeps (waste_free=False), whose evidence is the reliable one."
            if waste_free
            else "Use more particles (draws=), or more sweeps per stage (n_steps=)."
        )
        listing = ", ".join(f"{a:.3f} +- {b:.3f}" for a, b in zip(z, se, strict=True))
        warnings.warn(
            f"The chains' log Z estimates ({listing}) disagree by more than their standard errors allow "
            f"(chi-squared {chi2:.1f} on {ok.sum() - 1} degrees of freedom, p = {p:.2g}), so the error "
            f"bars are too small and log Z is not reliable. {remedy}",
            KameleonWarning,
            stacklevel=3,
        )


def log_evidence(idata) -> LogEvidence:
    r"""The log evidence :math:`\log \hat Z` of each chain, with a standard error from the same run.

    :math:`\log \hat Z` is PyMC's accounting, ``log_marginal_likelihood`` at the last stage
    (:math:`\beta = 1`): :math:`\hat Z = \prod_t \frac1N \sum_i L(x_i)^{\beta_t - \beta_{t-1}}`.

    The standard error comes from the genealogy of the particles, which :class:`KASS` and
    :class:`ASMC` record at every stage (``evidence_relative_variance``): Lee and Whiteley's
    single-run estimate :math:`V` of :math:`\operatorname{Var}(\hat Z)/Z^2`
    (:func:`~pymc_kameleon.core.smc.evidence.evidence_relative_variance`). As :math:`\log \hat Z` is
    asymptotically normal, :math:`\hat Z/Z` is close to log-normal with
    :math:`\operatorname{Var}(\hat Z/Z) = e^{\sigma^2} - 1`, so the standard error of
    :math:`\log \hat Z` is :math:`\sigma = \sqrt{\log(1 + V)}` (:math:`\approx \sqrt V` when
    small; a negative :math:`V` counts as 0). :math:`\log \hat Z \pm 2\sigma` covers
    :math:`\log Z` in about 95% of runs when the moves mix (measured in
    ``benchmarks/results/evidence_calibration.md``).
    Samples from PyMC's own kernels, or from ``resampling="systematic"``, have no valid genealogy
    estimate: their standard errors are NaN, with a warning. Waste-free KASS (``waste_free=True``)
    records Dau and Chopin's estimate instead, which needs no genealogy, so it has a standard error
    with either resampling scheme.

    The estimate needs the final particles to descend from many initial draws. When they
    descend from fewer than :data:`MIN_DISTINCT_ANCESTORS` = 50 (the ``distinct_ancestors``
    statistic), :math:`V` is computed from a few lineages and tends to be too small: over 563
    such runs of KASS and ASMC (8-d banana, conjugate regressions in 5 and 20 dimensions,
    50-1000 particles), :math:`\pm 2\sigma` covered :math:`\log Z` in 70% of them (67% below
    30 lineages, 86% between 30 and 49). With a single lineage
    :math:`V` is exactly 1 whatever the true variance, so :math:`\sigma = \sqrt{\log 2}
    \approx 0.83`. A warning then says so, once per run: :class:`KASS` and :class:`ASMC` warn at
    the end of sampling (for each such chain, with its count), and ``log_evidence`` names the
    chains and their counts only for samples that were not checked then.

    The error bar measures the resampling noise, not whether the moves kept up with the tempered
    targets. ``log_evidence`` warns when the chains' pooled log-likelihood rise during the last stage's
    sweeps is beyond :data:`FINAL_RISE_Z` = 3 standard errors (:func:`final_climb`; not for waste-free
    runs): rising, the particles lagged and log Z may be low by more than its error bar (a 43-parameter
    random-intercept model: 0.3-0.6 nats low at 3-7 standard errors, pooled rises 3.6-4.4 standard
    errors); falling, a harsh reweighting left survivors ahead of their target.

    Returns
    -------
    LogEvidence
        ``(log_z, std_error)``, float arrays with one entry per chain, in chain order; its
        ``combined_log_z`` and ``combined_std_error`` pool the chains.

    References
    ----------
    Lee, A. and Whiteley, N. (2018). Variance estimation in the particle filter. Biometrika 105(3),
    609-625.
    """
    log_z = np.array([chain[-1] for chain in stage_stats(idata, "log_marginal_likelihood")])
    if "evidence_relative_variance" not in idata.sample_stats:
        warnings.warn(
            "These SMC samples carry no particle genealogy (PyMC's own kernels do not record it), so "
            "log_evidence cannot give a standard error: std_error is NaN. Sample with "
            "pm.sample_smc(kernel=pymc_kameleon.KASS) or ASMC for an error bar, or compare several "
            "independent chains.",
            KameleonWarning,
            stacklevel=2,
        )
        return LogEvidence(log_z, np.full_like(log_z, np.nan))
    rel_var = np.array([chain[-1] for chain in stage_stats(idata, "evidence_relative_variance")])
    systematic = np.isnan(rel_var).any()  # no error bar, so nothing to distrust
    checked = bool(idata.sample_stats.attrs.get(LINEAGES_CHECKED, False))  # warned once already
    if "distinct_ancestors" in idata.sample_stats and not systematic and not checked:
        distinct = [int(chain[-1]) for chain in stage_stats(idata, "distinct_ancestors")]
        _warn_collapsed_genealogy(distinct, int(idata.posterior.sizes["draw"]))
    if systematic:
        warnings.warn(
            "The particles were resampled systematically (resampling='systematic'), for which the "
            "genealogy estimate of the evidence's variance does not hold, so std_error is NaN. Sample "
            "with the default resampling='multinomial' for an error bar.",
            KameleonWarning,
            stacklevel=2,
        )
    std_error = log_z_std_error(rel_var)
    attrs = idata.sample_stats.attrs
    given_start = bool(attrs.get(STARTED_FROM_GIVEN_DRAWS, 0))
    if given_start:
        improper = str(attrs.get(IMPROPER_PRIORS, ""))
        warnings.warn(_given_start_message(improper), KameleonWarning, stacklevel=2)
        if improper:  # no normalising constant: no evidence
            return LogEvidence(np.full_like(log_z, np.nan), np.full_like(log_z, np.nan))
    waste_free = bool(attrs.get("waste_free", 0))
    _warn_disagreeing_chains(log_z, std_error, waste_free)
    # Waste-free rises are measured from a few chain starts (their standard error has that many clusters);
    # the short-chains warning speaks for those runs. From given start draws the climb's remedy (more
    # particles) does not apply: the start's warning speaks for the run.
    if "loglik_rise" in idata.sample_stats and not waste_free and not given_start:
        _warn_final_climb(stage_stats(idata, "loglik_rise"), stage_stats(idata, "loglik_rise_se"), std_error)
    return LogEvidence(log_z, std_error)


def _given_start_message(improper: str) -> str:
    """What log Z is when the particles started from ``pm.sample_smc(start=...)`` (a new user's trial of
    model comparison: a warm start 3.4 nats high at 250 standard errors, and for a pm.Flat prior, as KASS's
    error had suggested, a number that moved with the start draws' spread)."""
    if improper:
        return (
            f"The particles started from pm.sample_smc(start=...), and {improper} has an improper prior "
            "(pm.Flat or pm.HalfFlat), which has no normalising constant: the model has no evidence, and "
            "log_marginal_likelihood is that of a model whose prior is the start draws' distribution (it "
            "moves with their spread). log_evidence returns NaN; the posterior draws are unaffected. For "
            "an evidence, give a proper prior."
        )
    return (
        "The particles started from pm.sample_smc(start=...): log Z is this model's evidence only if the "
        "start draws were draws from its prior (sorted prior draws for an ordered variable are). Draws "
        "from elsewhere, such as a warm start near the posterior, give the evidence of a model whose prior "
        "is their distribution (a new user's warm start: 3.4 nats high, at 250 standard errors), and more "
        "particles do not help."
    )


# The chains' pooled rise at the last stage, in its standard errors, from which log Z is called too low. On
# 44 runs of targets with an exact log Z (20-d and 5-d conjugate regressions, a 5-d prior-data conflict, the
# 8-d banana) a chain's last rise was within 2.45 of its standard errors either way; on a
# 43-parameter random-intercept model, where log Z came out 0.3-0.6 nats low at every seed, 2.3-3.5 per
# chain and 3.6-4.4 for two chains pooled.
FINAL_RISE_Z = 3.0


def final_climb(rises, rise_ses) -> tuple[float, float]:
    r"""The chains' pooled log-likelihood rise at the last stage (:math:`\beta = 1`) and its standard
    error: :math:`\bar D = \frac1C \sum_c D_{c,T}`,
    :math:`\mathrm{se} = \frac1C (\sum_c \mathrm{se}_{c,T}^2)^{1/2}` (the chains are independent). NaN
    where no chain has a finite one."""
    last = np.array([[float(r[-1]), float(s[-1])] for r, s in zip(rises, rise_ses) if len(r)], dtype=float)
    last = last[np.isfinite(last).all(axis=1)] if last.size else last
    if not last.size:
        return math.nan, math.nan
    return float(last[:, 0].mean()), float(math.sqrt(np.sum(last[:, 1] ** 2)) / last.shape[0])


def _warn_final_climb(rises, rise_ses, std_error) -> None:
    """Warn when the particles' log-likelihood moved during the last stage's sweeps by more than
    :data:`FINAL_RISE_Z` standard errors: rising, the stages before it lagged their tempered targets and
    log Z is low by more than its error bar says (the evidence-lag estimate, which weighs each stage's
    rise by its step in beta, counts the last stage's little); falling, a reweighting kept so few
    particles that the survivors were the highest likelihoods, ahead of the target (200 particles on the
    same model: log Z 1.7-2.3 nats low, the last stage's fall 3.2 standard errors)."""
    rise, se = final_climb(rises, rise_ses)
    if not (math.isfinite(rise) and se > 0 and abs(rise) > FINAL_RISE_Z * se):
        return
    bar = np.nanmax(std_error) if np.isfinite(std_error).any() else math.nan
    bar_text = f" than its standard error ({bar:.2g}) says" if math.isfinite(bar) else " than it seems"
    if rise > 0:
        what = (
            "The particles were still climbing at the last stage: their mean log-likelihood rose by "
            f"{rise:.2g} +- {se:.2g} nats during the sweeps at beta=1 ({rise / se:.1f} standard errors, "
            "the chains pooled), so at the stages before it they lagged their tempered targets, and log Z "
            f"may be too low by more{bar_text} (a new user's 43-parameter random-intercept model: 0.3-0.6 "
            "nats low at every seed, at 3-7 of its standard errors, and 0.01-0.15 low with n_steps=50, "
            "which still climbed). Compare with a run with more sweeps per stage (n_steps=50) or more "
            "particles: where log Z moves by more than the error bars, trust the higher, or neither."
        )
    else:
        what = (
            f"The particles were falling at the last stage: their mean log-likelihood fell by {-rise:.2g} +- "
            f"{se:.2g} nats during the sweeps at beta=1 ({-rise / se:.1f} standard errors, the chains "
            "pooled), so a reweighting kept so few particles that the survivors were the highest "
            "likelihoods, ahead of their target, and log Z may be off by more"
            f"{bar_text} (200 particles on a 43-parameter random-intercept model: 1.7-2.3 nats low). Use "
            "more particles (draws), and compare the runs."
        )
    warnings.warn(
        what,
        KameleonWarning,
        stacklevel=3,
    )
