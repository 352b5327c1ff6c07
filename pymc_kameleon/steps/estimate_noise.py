"""The end-of-tuning noise check of pseudo-marginal terms: how many estimates it draws, the spreads above
which a step warns, and the warning (the check itself: ``AdaptiveStep._check_estimate_noise``, which
measures through :meth:`~pymc_kameleon.steps.target_density.TargetDensity.estimate_noise`)."""

from __future__ import annotations

from pymc_kameleon.steps.reporting import chain_words

__all__ = [
    "NOISE_ESTIMATES", "NOISE_RATIO_SD_LIMIT", "NOISE_SD_LIMIT", "estimate_noise_message", "noise_limit",
]

#: Estimates the end-of-tuning noise check draws per pseudo-marginal term and chain (the sd they give is
#: within about 13% of the estimator's).
NOISE_ESTIMATES = 30
#: Above this sd of a plain term's log-estimates at the chain's state when tuning ends, the step warns:
#: a pseudo-marginal chain's autocorrelation grows like exp(sd^2), it mixes well at 1-1.7 (Doucet, Pitt,
#: Deligiannidis and Kohn 2015) and sticks above about 3.
NOISE_SD_LIMIT = 3.0
#: ... and above this sd of a correlated term's log-ratios at a Crank-Nicolson move of u (a plain
#: estimate's log-ratio has sqrt(2) times its sd): on a random-intercept Poisson model 2.48 mixed well and
#: 3.94 froze; a new user's 2-particle filter (6.7) sampled a scale's sd at 0.34 against 0.50 with only
#: PyMC's R-hat to say so.
NOISE_RATIO_SD_LIMIT = 3.5


def noise_limit(correlated: bool) -> float:
    """The sd above which a term's noise is said: :data:`NOISE_RATIO_SD_LIMIT` for a correlated term's
    log-ratios, :data:`NOISE_SD_LIMIT` for a plain term's log-estimates."""
    return NOISE_RATIO_SD_LIMIT if correlated else NOISE_SD_LIMIT


def estimate_noise_message(step_name: str, spreads, chain: int | None = None) -> str | None:
    """The warning for the pseudo-marginal terms whose log-estimates' sd (``spreads``, from
    :meth:`~.target_density.TargetDensity.estimate_noise`) is above :func:`noise_limit`; None if none is."""
    noisy = [(name, sd, correlated) for name, sd, correlated in spreads if sd > noise_limit(correlated)]
    if not noisy:
        return None
    subject, _ = chain_words(chain)
    parts = [
        f"{name!r}: sd {sd:.2g} of its {'log-ratios at a move of u' if correlated else 'log-estimates'}, "
        f"above {noise_limit(correlated)}"
        for name, sd, correlated in noisy
    ]
    correlated = any(c for _, _, c in noisy)
    remedy = (
        "a correlation closer to 1 (log_estimate_spread's log_ratio_sd: aim for at most about 2.4) or more "
        "samples per estimate" if correlated else
        "more samples per estimate (log_estimate_spread: aim for an sd of 1-1.7 near the posterior, 0.8 or "
        "less with GP delayed acceptance) or a correlated estimator (auxiliary_shape=..., with about the "
        "smallest correlation whose log_ratio_sd is at most 2.4)"
    )
    return (
        f"{step_name}: when tuning ended, {NOISE_ESTIMATES} fresh likelihood estimates at {subject}'s state "
        f"spread widely ({'; '.join(parts)}). The chain stays exact, but it keeps "
        "an estimate that came out high until a proposal's comes out as high, so it mixes slowly and its "
        f"draws can be far from the posterior while R-hat is the only sign. Use {remedy}. (A chain far from "
        "the posterior, where estimates are often much noisier, says this too: if its loglik_estimate is "
        "tens of nats below the other chains', start it nearer with initvals.)"
    )
