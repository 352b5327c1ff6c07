"""What a step of ours checks in its draws and says about them: a chain sampling untuned (``tune=0``),
a chain stuck after tuning, a model whose log density was NaN at a proposal, a chain whose draws never
reach the region it settled in during tuning, and chains that disagree after tuning.

:class:`DrawChecks` is a mixin of :class:`~pymc_kameleon.steps.base.AdaptiveStep` (as MLDA's
``MultilevelChecks`` and GP-DA's ``DelayedAcceptanceChecks`` are of theirs): its methods read the
step's chain state (``self._chain``), target and warnings.
"""

from __future__ import annotations

import math

from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.steps.left_regions import LeftRegionsCheck
from pymc_kameleon.steps.variables import describe_coordinates

__all__ = ["DrawChecks"]


class DrawChecks:
    """The after-tuning checks of a chain's draws, and the warning of a chain that was not tuned."""

    def _warn_if_untuned(self, adaptation=None) -> None:
        """Warn once per chain when it samples with no tuning step behind it (``tune=0``), in the words of
        :meth:`_untuned_message`; ``adaptation``: the chain's scale-free adaptation (by default its
        ``adaptation``)."""
        chain = self._chain
        if adaptation is None:
            adaptation = chain.adaptation
        if self.tune or adaptation.tune_steps or chain.warned_untuned:
            return
        chain.warned_untuned = True
        self._warnings.warn(self._untuned_message(), KameleonWarning, stacklevel=4)

    def _untuned_message(self) -> str:
        raise NotImplementedError

    def _untuned_proposal(self) -> str:
        """What an untuned chain proposes: the adaptation's starting walk, in words for the tune=0 warning."""
        scale = self._start_adaptation.state.am_scale.value
        return (
            f"an untuned move of all {self.dim} coordinates at once, with step sd {scale:.3g} in each on the "
            f"sampler's unconstrained scale (2.38/sqrt({self.dim})), whatever the scale of the posterior"
        )

    def _start_left_regions_check(self, adaptation) -> None:
        """At the end of tuning: compare the chain's settled tuning blocks with its first draws
        (:class:`~pymc_kameleon.steps.left_regions.LeftRegionsCheck`). Not with a PseudoMarginalPotential:
        the blocks' log densities are the exact part, without the estimated likelihood, so they say nothing
        of a region's mass (nor, flat where only the prior is, whether the chain was walking in)."""
        if self._target.has_estimates:
            self._chain.left_regions = None
            return
        check = LeftRegionsCheck(type(self).__name__, adaptation.blocks.blocks, self._chain_index)
        self._chain.left_regions = None if check.done else check

    def _check_draws(self, accepted: bool, estimated: bool = True) -> None:
        """After tuning: warn once if the chain rejects :data:`~pymc_kameleon.steps.reporting.STUCK_DRAWS`
        proposals in a row, if it settled during tuning in a region its first draws never reach
        (:class:`~pymc_kameleon.steps.left_regions.LeftRegionsCheck`), and if chains that disagreed at the
        end of tuning disagree over their first draws too
        (:class:`~pymc_kameleon.steps.agreement.DrawsAgreement`)."""
        self._check_nan_density()
        if self._chain.stuck.count(accepted, self.tune, estimated):
            message = self._chain.stuck.text(
                type(self).__name__, self._warnings.n_warned > 0, pseudo_marginal=self._target.has_estimates,
                remedy=self._stuck_remedy(), chain=self._chain_named, lucky_estimate=self._lucky_estimate(),
                surrogate_below=self._gp_below_state(), kept_estimate=self._kept_estimate(),
            )
            self._warnings.warn(message, KameleonWarning, stacklevel=3)
        left, agreement = self._chain.left_regions, self._chain.draws_agreement
        if self.tune or (left is None and agreement is None):
            return
        population = self._population_states()
        if left is not None:
            draws = self._target.current_state if population is None else population
            message = left.record(draws, self._target.current_exact_logp)
            if left.done:
                self._chain.left_regions = None
            if message:
                self._warnings.warn(message, KameleonWarning, stacklevel=3)
        if agreement is not None:
            message = agreement.record(population if population is not None else self._lone_chain_state())
            if agreement.done:
                self._chain.draws_agreement = None
            if message:
                self._warnings.warn(message, KameleonWarning, stacklevel=3)

    def _lone_chain_state(self):
        """The state of a pooled population's only chain (``chains=1``), as one row, which the draws'
        agreement check then splits in halves; None where there is no such chain."""
        if not self.pooled or getattr(self, "other_chains", None):
            return None
        state = self._target.current_state
        return None if state is None else state.reshape(1, -1)

    def _check_nan_density(self) -> None:
        """After tuning, say once a chain where the model's log density was NaN at a proposal: it is
        rejected as a zero density, so a model that fails inside the posterior (an ODE solver) cuts
        that region out of the draws with nothing else to show for it. (During tuning a chain walking in
        from far away often meets such points, and they are forgotten.)"""
        target = self._target
        x, target.nan_at = target.nan_at, None
        if x is None or self.tune or self._chain.nan_said:
            return
        self._chain.nan_said = True
        self._warnings.warn(
            f"{type(self).__name__}: after tuning, the model's log density was {self._target.nan_value} at a "
            f"proposal ({self._describe_point(x)}); it is rejected, as a point of zero density. If the model "
            "fails there for numerical reasons (an ODE solver, an overflow, a division by zero) rather than "
            "having zero density, the draws miss that part of the posterior: make the model finite there, "
            "or -inf where the density really is zero. Said once per chain.",
            KameleonWarning,
            stacklevel=4,
        )

    def _describe_point(self, x) -> str:
        """``x`` by the user's coordinate names (:func:`.variables.describe_coordinates`)."""
        return describe_coordinates(x, getattr(self, "_coordinate_names", None))

    def _kept_estimate(self) -> float | None:
        """The log-likelihood estimate a pseudo-marginal chain keeps at its state (None: no estimate)."""
        if not self._target.has_estimates:
            return None
        value = self._target.current_log_estimate  # NaN before the first estimate
        return None if math.isnan(value) else float(value)

    def _stuck_remedy(self) -> str | None:
        """The advice of the after-tuning warning of a stuck chain (None: more tuning, a closer start)."""
        return None

    def _gp_below_state(self) -> str | None:
        """A stuck chain's measured sign that a surrogate underrates the likelihood at its state, as a
        phrase with the figure (None: none measured; GP delayed acceptance can tell)."""
        return None

    def _lucky_estimate(self) -> str | None:
        """A stuck chain's measured sign that its kept likelihood estimate came out high, as a phrase with
        the figure (None: none measured; a step with a surrogate of the likelihood can tell)."""
        return None
