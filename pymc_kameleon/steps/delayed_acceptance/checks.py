"""The GP delayed-acceptance steps' warnings at the end of tuning and their remedies (a mixin of
:class:`~pymc_kameleon.steps.delayed_acceptance.base.GPDelayedAcceptanceStep`: it reads the step's GP,
its training schedule, its target and its options). Each method returns a message, or None where
there is nothing to say; the step raises them."""

from __future__ import annotations

import math

import numpy as np

from pymc_kameleon.core.gp.training import MAX_STAGE1_ACCEPT, MIN_STAGE1_ACCEPT, SCREENING_CHECK_STEPS

__all__ = ["GP_BELOW_STATE_NATS", "LUCKY_ESTIMATE_NATS", "NOISY_ESTIMATE_SD", "DelayedAcceptanceChecks"]

# The sd (nats) of the log-likelihood estimates, as the GP's fitted noise, above which the step warns
# at the end of tuning. A 12-group latent model estimated by importance sampling, 2 x (3000 + 8000),
# 8 seeds (session of 2026-12-02): at a fitted sd of 0.52-0.63 GP-DA-MH's bulk ESS was
# 439-940 and every sd within 9% of NUTS's; at about 1.1 it was 14-359 (one run of 2 x 100 000 draws:
# 30), sds up to 22% low, where KameleonMetropolis had 365-879 at every seed. Stage 1 compares the
# GP's mean at a proposal with the estimate kept at the current state: after a lucky estimate it
# rejects nearly everything without drawing a fresh one. A new user's 30-group Poisson-lognormal model
# (helper-70; 4 x (2000 + 5000), seeds 1-3): at 0.76-0.93 (100 samples) ESS 642-1054, sds within 4%,
# R-hat <= 1.01, where the step had warned at 0.7 on every run; at 1.0-1.2 (60 samples) ESS 339-574,
# R-hat up to 1.03; at 1.3-1.5 (40) ESS 107-320, sds up to 11% off. The 12-group model at 0.70-0.84
# (5 samples, 4 seeds): ESS 289-546, sds 0.91-1.04 of the reference
# (benchmarks/results/gpda_noise_threshold.md).
NOISY_ESTIMATE_SD = 1.0
#: A stuck chain's kept estimate this far (and twice the GP's noise sd) above the GP's mean at the state
#: is named as what holds it.
LUCKY_ESTIMATE_NATS = 1.0
#: A stuck chain's exact log-likelihood this far above the GP's value at its state (the mean plus half
#: the variance, what stage 1 of a move back there reads) is named as what holds it: stage 2 then accepts
#: a move away about exp(-this) times as often as stage 1 passes one. On the far-start non-centred eight
#: schools (GP-DA-MH, seed 2029) a chain sat 1359 draws at tau = 20 where the GP, full at its 1000 points,
#: was 6 nats below, stage 2 accepting 0.002, and was told of a funnel's neck.
GP_BELOW_STATE_NATS = 3.0


#: The remedy where the likelihood depends on variables other steps of a ``CompoundStep`` move.
OUTSIDE_VARS_REMEDY = (
    "Sample those variables with this step if they are continuous, or use KameleonMetropolis for this block."
)


class DelayedAcceptanceChecks:
    """What the GP delayed-acceptance steps say when tuning ends, and their remedies."""

    def _paused_message(self, schedule) -> str:
        """Tuning ended while the GP's screening was paused (read before the warm-up ends)."""
        if schedule.pause_reason == "walking":
            why = (
                "tuning ended while the chain was still walking toward the posterior: its last "
                "adaptation window ended early, because its draws' spread disagreed with the learned "
                "covariance by more than a factor 3 in sd, so the step took exact steps and its GP has "
                f"not screened near the posterior yet ({schedule.n_walking_pauses} such window(s) in "
                "tuning)"
            )
        else:
            why = (
                "tuning ended in an exact fallback: stage 1 (the GP's likelihood times the exact "
                "prior) had rejected nearly every proposal (acceptance below "
                f"{MIN_STAGE1_ACCEPT:.0%} over {SCREENING_CHECK_STEPS} steps; {schedule.n_pauses} "
                "fallback(s) in tuning), so the GP's fit near the posterior is untested; if the prior "
                "rejects them (a hierarchical scale that another step drove to 0), the chain is stuck, "
                "not the GP"
            )
        return f"{type(self).__name__}: {why}. Increase `tune`, or start closer to the posterior."

    def _ended_warm_message(self, adaptation, schedule, in_scan: bool, planned: int) -> str | None:
        """Tuning ended before the GP screened: inside the coordinate scan, or in the exact warm-up."""
        if schedule.warm and in_scan:
            return (
                f"{type(self).__name__}: tuning ended after {adaptation.tune_steps} steps, inside the "
                f"coordinate scan ({planned} steps were planned), where the GP does "
                f"not screen: the draws screen with a GP of {self.gp.n_points} points whose "
                "hyperparameters were never fitted (the warm-up's heuristic ones), around a random "
                "walk with the scan's step sizes. Increase `tune` (the end-of-tuning warning gives "
                "the steps this model needs)."
            )
        if schedule.warm and self.gp.n_points >= self.initial_points:
            # The GP had its points: the scan's end, which came with tuning's, held the warm-up (a new
            # user's tune=100 in 2-d had been told to lower initial_points, with 102 points of 10).
            return (
                f"{type(self).__name__}: tuning ended after {adaptation.tune_steps} steps, still in "
                f"the exact warm-up: the warm-up lasts until the coordinate scan ({planned} steps) has "
                "ended, and here it ended with tuning, so the GP never screened a tuning step and "
                f"screens the draws with the warm-up's heuristic hyperparameters ({self.gp.n_points} "
                "points), never fitted. Increase `tune` (the end-of-tuning warning gives the steps "
                "this model needs)."
            )
        if schedule.warm:
            return (
                f"{type(self).__name__}: tuning ended after {adaptation.tune_steps} steps, still in "
                f"the exact warm-up ({self.gp.n_points} of initial_points={self.initial_points} GP "
                "points). Every step stays exact until the GP holds initial_points points; it then "
                "screens with the warm-up's heuristic hyperparameters, never fitted. Increase `tune` "
                "or lower `initial_points`."
            )
        return None

    def _screens_nothing_message(self, schedule) -> str | None:
        """Stage 1 passes nearly every proposal: the GP fits noise, and screens nothing."""
        if schedule.warm or not schedule.recent_stage1_rate() >= MAX_STAGE1_ACCEPT:
            return None
        ell = ", ".join(f"{v:.2g}" for v in self.gp.lengthscales)
        outside = self._target.likelihood_outside_vars
        if outside:
            # Other steps' moves are the noise: more tuning only gives the GP more of it (a new user's
            # change-point model: tune 2000 -> 8000 took R-hat 1.011 -> 1.029, ESS 765 -> 326).
            remedy = (
                f"Here the likeliest cause is {outside}, which other steps move (the warning at "
                "construction), so the GP's values go stale; more tuning does not help. "
                + OUTSIDE_VARS_REMEDY
            )
        elif self.fit_hyperparameters:
            remedy = "Increase `tune`, or pass `hyperparameters=` (with `fit_hyperparameters=False`)."
        else:
            remedy = "Let them be fitted (`fit_hyperparameters=True`), or pass other `hyperparameters=`."
        return (
            f"{type(self).__name__}: at the end of tuning the GP's stage 1 passed "
            f"{schedule.recent_stage1_rate():.0%} of the last {SCREENING_CHECK_STEPS} proposals, so it "
            "screens almost nothing and nearly every proposal costs an exact evaluation (the chain "
            f"is still exact). Its length scales are [{ell}] "
            + ("posterior sds" if self.gp.whitening is not None else "(model units)")
            + f" and its signal variance {self.gp.signal_variance:.3g}: length scales far below the "
            f"spread of the training points mean it fits noise. {remedy}"
        )

    def _noisy_estimates_message(self, schedule) -> str | None:
        """The GP's fitted noise says the likelihood estimates (or other steps' moves) are too noisy."""
        if schedule.warm or not (self._target.has_estimates and self.fit_noise):
            return None
        noise_sd = math.sqrt(max(self.gp.noise_variance, 0.0))
        if not noise_sd > NOISY_ESTIMATE_SD:
            return None
        outside = self._target.likelihood_outside_vars
        if outside:
            # Another step's moves look like noise to the GP: the estimator may be fine.
            return (
                f"{type(self).__name__}: at the end of tuning the GP fits the log-likelihood with a "
                f"noise sd of {noise_sd:.2g} nats (above {NOISY_ESTIMATE_SD}), part of which may come "
                f"from {outside}, which other steps move (the warning at construction), not from the "
                "estimates (log_estimate_spread gives their own sd). With noise this large delayed "
                "acceptance sticks, and its ESS and sds can come out too small (the draws stay exact). "
                f"{OUTSIDE_VARS_REMEDY}"
            )
        return (
            f"{type(self).__name__}: the likelihood estimates are noisy: at the end of tuning the GP "
            f"fits their log values with a noise sd of {noise_sd:.2g} nats (above "
            f"{NOISY_ESTIMATE_SD}). With estimates this noisy delayed acceptance sticks: after a "
            "lucky estimate at the current state stage 1 rejects nearly every proposal without "
            "drawing a fresh one, so the chain can stay put for thousands of steps and its ESS "
            "and sds come out too small (the draws stay exact). Make the estimator more precise "
            "(more samples, a log-estimate sd of 0.8 or less), or sample with KameleonMetropolis, "
            "which copes with an sd of 1-1.7."
        )

    def _untuned_message(self) -> str:
        return (
            f"{type(self).__name__}: sampling without tuning (tune=0). The base proposal is "
            f"{self._untuned_proposal()}, and the GP surrogate has no tuning points or fitted "
            "hyperparameters to screen its proposals with; "
            f"pass tune >= {self.default_tune_steps} to pm.sample."
        )

    def _lucky_estimate(self) -> str | None:
        """The kept estimate's excess over the GP's mean at the state, where it is above
        :data:`LUCKY_ESTIMATE_NATS` and twice the GP's fitted noise sd (the GP has learned the
        likelihood around the state from many estimates, so it sees one that came out high)."""
        target = self._target
        x = target.current_state
        if not target.has_estimates or x is None:
            return None
        # The log-likelihood kept at the state, estimates included: what the GP models there.
        kept = target.current_logp - target.prior(x)[0]
        gp = self._chain.kernel.gp
        if gp.n_points < 2 or not math.isfinite(kept):
            return None
        mean, _ = gp.predict(np.asarray(x, dtype=float))
        excess = kept - mean
        noise_sd = math.sqrt(max(gp.noise_variance, 0.0))
        if not excess > max(LUCKY_ESTIMATE_NATS, 2.0 * noise_sd):
            return None
        return (
            f"the likelihood estimate it keeps is {excess:.2g} nats above the GP's prediction there (the "
            f"GP's fitted noise sd: {noise_sd:.2g} nats)"
        )

    def _gp_below_state(self) -> str | None:
        """With an exact likelihood: how far the GP's value at the chain's state (mean plus half the
        variance) lies below the exact log-likelihood there, where that is above
        :data:`GP_BELOW_STATE_NATS`, as a phrase with the figures (else None). The reverse stage-1 ratio
        of every move away reads that value, so stage 2 rejects the moves stage 1 passes."""
        target = self._target
        x = target.current_state
        if target.has_estimates or x is None:
            return None
        gp = self._chain.kernel.gp
        loglik = target.current_logp - target.prior(x)[0]
        if gp.n_points < 2 or not math.isfinite(loglik):
            return None
        mean, var = gp.predict(np.asarray(x, dtype=float))
        below = loglik - (float(mean) + 0.5 * float(var))
        if not below > GP_BELOW_STATE_NATS:
            return None
        return (
            f"the GP's value at its state (its mean plus half its variance) is {below:.2g} nats below the "
            f"exact log-likelihood there, so stage 2 accepts a move away only about {math.exp(-below):.2g} "
            "times as often as stage 1 passes one"
        )

    def _gp_below_state_remedy(self) -> str:
        """The advice of the stuck warning when the GP underrates the chain's state."""
        cap = self.max_points
        full = self._chain.kernel.gp.n_points >= cap
        learned = (
            f"The GP holds its cap of max_points={cap} points and learns no more: a larger max_points lets "
            "it learn where the draws go (each step then costs more)"
            if full
            else "More tuning lets the GP learn the likelihood where the chains go"
        )
        return (
            f"{learned}; or sample with KameleonMetropolis, which has no surrogate to hold a chain. More "
            "draws let the chain move on (it stays exact)."
        )

    def _stuck_remedy(self) -> str | None:
        """With variables outside the block in the likelihood, a stuck chain's likeliest cause is the GP
        gone stale, which more tuning does not cure (a new user's change-point model: R-hat 1.16 at
        tune=6000); else the generic advice."""
        outside = self._target.likelihood_outside_vars
        if not outside:
            return self._gp_below_state_remedy() if self._gp_below_state() is not None else None
        return (
            f"Here the likeliest cause is the GP gone stale: the likelihood depends on {outside}, which "
            "other steps move, so the GP's values no longer describe it (the warning at construction). "
            "Sample them with this step if they are continuous, or use KameleonMetropolis for this "
            "block; more tuning does not help."
        )
