"""KASS's checks at set-up and at a chain's last stage, and its statistics and settings: the mixin
:class:`KASSChecks`.

At set-up a waste-free kernel says when it starts too few chains a stage. At the last stage (beta = 1)
each chain says, once, whether its stages barely mixed, whether its particles lag their tempered
targets (log Z materially low), whether waste-free chains were too short for their moves, whether
likelihoods were NaN, and whether its final particles have too few lineages for the evidence's error
bar. With ``cores>1`` the chain runs in a worker process, and the warnings travel back with
``sample_settings`` (:class:`~pymc_kameleon.steps.reporting.StepWarnings`).
"""

from __future__ import annotations

import math

import numpy as np

from pymc_kameleon.core.smc.evidence import beta_increments, evidence_lag
from pymc_kameleon.core.smc.waste_free import waste_free_chains
from pymc_kameleon.core.validation import refuse_unused_options
from pymc_kameleon.core.warning_categories import KameleonRuntimeWarning, KameleonWarning
from pymc_kameleon.smc.results import (
    IMPROPER_PRIORS,
    LINEAGES_CHECKED,
    MIN_DISTINCT_ANCESTORS,
    STARTED_FROM_GIVEN_DRAWS,
    collapsed_genealogy_message,
    evidence_lag_message,
    lag_is_material,
    log_z_std_error,
)

__all__ = ["FEW_WASTE_FREE_CHAINS", "MIN_CHAIN_TIMES_TAU", "KASSChecks"]

# Waste-free chains shorter than this many autocorrelation times get a warning: on the gallery ODE and the
# banana, chains at 1.3 and 2.3 times were biased, at 3.0 and 3.4 times not (decision 0042).
MIN_CHAIN_TIMES_TAU = 2.5
#: Waste-free with fewer chains a stage than this says that a mode none of them starts in is lost (a new
#: user's two equal-mass modes in 3-d, 2000 particles in chains of 400: 5 chains, the narrow mode lost in
#: both runs, log Z 0.3-0.5 nats low, no other warning). "auto" gives about 20 (4 below 250 particles).
FEW_WASTE_FREE_CHAINS = 10


class KASSChecks:
    """The checks at set-up and at the last stage, and the statistics of :class:`~pymc_kameleon.KASS` (a
    mixin: it reads the kernel's per-chain state, ``_poor_stages``, ``_rises``, ``_autocorrelation``,
    ``_evidence`` and ``_stage``)."""

    def _refuse_unused_sweep_options(self, n_steps, waste_free, **given):
        """At set-up: the options of a sweep rule not in use (``given``: name to value) are refused, not
        ignored (``n_steps`` the rule in use, the default filled in)."""
        if waste_free:
            used, rule = (), "waste_free=True (chains of chain_length states, no sweep rule)"
        elif not isinstance(n_steps, str):
            used, rule = (), f"n_steps={n_steps!r} (a fixed number of sweeps)"
        else:
            used = {"correlation": ("correlation_threshold", "max_steps")}.get(
                n_steps, ("move_probability", "max_steps")
            )
            rule = f"n_steps={n_steps!r}"
        refuse_unused_options(
            type(self).__init__, {name: value for name, value in given.items() if name not in used},
            unused_when=rule, remedy="drop {them}, or choose the rule they set (see n_steps in help(KASS))",
        )

    def _warn_if_few_waste_free_chains(self):
        """At set-up: waste-free with fewer than :data:`FEW_WASTE_FREE_CHAINS` chains a stage loses a mode
        that none of them starts in."""
        n_chains = waste_free_chains(self.draws, self.chain_length)
        if self.waste_free and n_chains < FEW_WASTE_FREE_CHAINS:
            self._warnings.warn(
                f"{type(self).__name__}: waste-free with {self.draws} particles in chains of "
                f"{self.chain_length} states starts only {n_chains} chains a stage, and a mode that none "
                "of them starts in is lost (log Z then comes out low, and chains that agree hide it from "
                "R-hat). For a posterior that may have separated modes use waste_free=False, or keep at "
                f"least {FEW_WASTE_FREE_CHAINS} chains: more particles or a shorter chain_length.",
                KameleonWarning,
                stacklevel=1,
            )

    def _warn_at_the_last_stage(self):
        """Each of the chain's warnings, once, at its last stage."""
        if self._poor_stages:  # one warning per chain, at its last stage
            message = self._poor_stages.warning(type(self).__name__, self.iteration)
            self._warnings.warn(message, KameleonRuntimeWarning, stacklevel=1)
        self._warn_evidence_lag()
        self._warn_short_chains()
        self._warn_nan_likelihoods()
        ancestors = self._evidence["distinct_ancestors"]
        # The genealogy's error bar needs lineages; the waste-free one does not.
        has_error_bar = self.resampling == "multinomial" and not self.waste_free
        if has_error_bar and ancestors < MIN_DISTINCT_ANCESTORS:
            # PyMC does not tell a kernel its chain number: the count identifies the chain, and each
            # chain below the bar warns for itself ("one chain" read as "only one chain").
            bar = MIN_DISTINCT_ANCESTORS
            counts = f"in this chain {ancestors} of {self.draws}; each chain below {bar} warns"
            message = collapsed_genealogy_message(counts, self.draws, ancestors)
            self._warnings.warn(f"{type(self).__name__}: {message}", KameleonWarning, stacklevel=1)

    def _warn_short_chains(self):
        """Waste-free: warn when a stage's chains were shorter than :data:`MIN_CHAIN_TIMES_TAU` times the
        largest autocorrelation time of their log-likelihoods and coordinates (log Z then came out low,
        with too small an error bar; decisions 0042 and 0052)."""
        known = [row for row in self._autocorrelation if np.isfinite(row[2])]
        if not known:
            return
        stage, beta, tau, slowest = max(known, key=lambda row: row[2])
        if self.chain_length >= MIN_CHAIN_TIMES_TAU * tau:
            return
        self._warnings.warn(
            f"{type(self).__name__}: the waste-free chains of {self.chain_length} states were too short for "
            f"their moves: at stage {stage} (beta={beta:.3g}) the autocorrelation time of {slowest} was "
            f"{tau:.1f} states (chains this short understate it), and below {MIN_CHAIN_TIMES_TAU:g} times "
            "that the chains' states lag their tempered targets, so log Z is biased (low or high) with "
            f"too small an error bar. Use chain_length of at least {math.ceil(4 * tau)} with more particles, "
            "to keep as many chains (each stage starts draws / chain_length of them, and a mode none starts "
            "in is lost), or waste_free=False.",
            KameleonWarning,
            stacklevel=1,
        )

    def _warn_evidence_lag(self):
        """Warn when the particles' log-likelihood rises put log Z materially low
        (:func:`~pymc_kameleon.core.smc.evidence.evidence_lag`)."""
        stages, betas, rises, rise_ses = (np.array(column) for column in zip(*self._rises))
        lag, lag_se = evidence_lag(betas, rises, rise_ses)
        log_z_se = float(log_z_std_error(self._evidence["evidence_relative_variance"]))
        if lag_is_material(lag, lag_se, log_z_se):
            worst = int(np.nanargmax(beta_increments(betas) * rises))
            message = evidence_lag_message(
                type(self).__name__, lag, lag_se, log_z_se, int(stages[worst]), float(betas[worst])
            )
            self._warnings.warn(message, KameleonWarning, stacklevel=1)

    # ---------------------------------------------------------------- reporting
    def sample_stats(self):
        return {
            "log_marginal_likelihood": self.log_marginal_likelihood if self.beta == 1 else np.nan,
            "beta": self.beta,
            **{
                name: self._stage[name] for name in ("mean_accept_rate", "nu2", "scale", "bandwidth", "gamma")
            },
            **{name: int(self._stage[name]) for name in ("n_steps", "subsample_size", "likelihood_evals")},
            "loglik_rise": self._stage["loglik_rise"],
            "loglik_rise_se": self._stage["loglik_rise_se"],
            "autocorrelation_time": self._stage["autocorrelation_time"],
            **self._evidence,
        }

    def sample_settings(self):
        settings = {
            "_n_draws": self.draws,
            "threshold": self.threshold,
            "_n_tune": self.n_steps,
            "proposal_kernel": self.proposal_kernel,
            "n_steps_rule": "waste-free" if self.waste_free else str(self.n_steps_rule),
            "correlation_threshold": self.correlation_threshold,
            "learning_rate": self.learning_rate,
            "target_accept": self.target_accept,
            "am_weight": self.am_weight,
            "independence_weight": self.independence_weight,
            "batch_logp": int(self._use_batch),
            # Likelihood evaluations of the check of the vectorised log density (no stage counts them).
            "batch_check_evals": int(self._check_evaluations),
            "resampling": self.resampling,
            "waste_free": int(self.waste_free),
            "chain_length": self.chain_length,
            "final_thinning": self.final_thinning,
            "poorly_mixing_stages": len(self._poor_stages),
            # The particles started from pm.sample_smc(start=...), not the prior: log_evidence says what
            # log Z then is (STARTED_FROM_GIVEN_DRAWS, IMPROPER_PRIORS).
            STARTED_FROM_GIVEN_DRAWS: int(self.start is not None),
            IMPROPER_PRIORS: ", ".join(self._improper_priors),
            # Each chain warned at its end if its final particles had few lineages: log_evidence does
            # not say it again (smc.results.LINEAGES_CHECKED).
            LINEAGES_CHECKED: 1,
        }
        # With cores>1 this chain ran in a worker process: its warning travels back with the setting.
        return self._warnings.attach(settings, "poorly_mixing_stages")
