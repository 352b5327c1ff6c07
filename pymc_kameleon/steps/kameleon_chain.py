"""One chain of :class:`~pymc_kameleon.KameleonMetropolis`: its state (:class:`KameleonChain`) and
:class:`KameleonChainTuning`, the step's mixin that makes each chain's scale-free adaptation and proposal
afresh, lets an SMC start seed them, ends the chain's tuning (the end-of-tuning warnings, the independence
component's exam) and, with ``adaptation="vanishing"``, keeps adapting after it.

Separate from :mod:`pymc_kameleon.steps.kameleon` (the 500-line rule), which keeps the step's options, its
statistics and the step itself; the mixin reads the step's options (``am_weight``, ``adaptation``, ...),
target and warnings.
"""

from __future__ import annotations

from dataclasses import dataclass

from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.adaptation.transport_map import MapMixtureProposal
from pymc_kameleon.core.kameleon.scale_free import ScaleFreeProposal
from pymc_kameleon.steps.chain import ChainState
from pymc_kameleon.steps.reporting import warn_after_tuning

__all__ = ["KameleonChain", "KameleonChainTuning"]


@dataclass(eq=False, kw_only=True)
class KameleonChain(ChainState):
    """One chain's state in :class:`~pymc_kameleon.KameleonMetropolis` (and the ``warnings`` and ``stuck`` of
    every step).

    Attributes
    ----------
    adaptation : ScaleFreeAdaptation
        What tuning learns (whitening, scales, :math:`Z`) and when.
    proposal : ScaleFreeProposal
        The scan, AM or Kameleon/AM mixture move, built from ``adaptation.state``.
    post_tune_steps : int
        Steps since tuning ended (vanishing adaptation's clock).
    warned_jitter : bool
        Whether the chain has said so already (once per chain).
    exam_due : bool
        Tuning has ended and the independence component's exam waits for the chain's next step.
    """

    adaptation: ScaleFreeAdaptation
    proposal: ScaleFreeProposal
    post_tune_steps: int = 0
    warned_jitter: bool = False
    exam_due: bool = False


class KameleonChainTuning:
    """How each chain of :class:`~pymc_kameleon.KameleonMetropolis` is made and tuned (a mixin)."""

    def _new_adaptation(self) -> ScaleFreeAdaptation:
        return ScaleFreeAdaptation(
            self.dim,
            # am_weight=1: the AM walk alone, no Z to learn.
            self._kernel_template if self.am_weight < 1.0 else None,
            bandwidth=self.bandwidth_spec,
            gamma=self.gamma_spec,
            n_subsample=self.n_subsample,
            nu2=self.nu2_initial,
            target_accept=self.target_accept,
            learning_rate=self.learning_rate,
            first_window=self.adapt_interval,
            history_size=self.history_size,
            kameleon_after=self.kameleon_after,
            independence_weight=self._independence_weight_in_use,
            angle_columns=self._angle_columns,
        )

    def _reset_chain_state(self):
        """Forget everything learned in a previous chain."""
        if self.pooled:  # a population's chains are shallow copies of one step: each its own state
            self._target = self._target.fork()
        adaptation = self._new_adaptation()
        proposal = ScaleFreeProposal(adaptation.state, self.am_weight, on_jitter=self._warn_singular)
        self._chain = KameleonChain(adaptation=adaptation, proposal=proposal)
        self._target.reset()

    def stop_tuning(self):
        super().stop_tuning()
        adaptation = self._chain.adaptation
        if adaptation.tune_steps > 0:
            self._chain.draws_agreement = warn_after_tuning(
                type(self).__name__, adaptation, self.target_accept, self._warnings, self._coordinate_names,
                across_chains=self._speaks_for_population,
                differentiable=lambda: self._target.differentiable, chain=self._chain_index,
                gradient_split=self._target.gradient_split,
                improper=self._improper_coordinates, smc_start=self._smc_start is not None,
            )
            self._start_left_regions_check(adaptation)
        adaptation.end_tuning(self.rng)
        # At the next step, when PyMC has set the other steps' variables to their current values: here they
        # are as this step last saw them, an iteration old in one process and current in a worker's, so
        # the exam's verdict (and the draws) depended on `cores` beside another step.
        self._chain.exam_due = True

    @property
    def _start_adaptation(self) -> ScaleFreeAdaptation:
        return self._chain.adaptation

    def _propose_through_map(self, state) -> None:
        self._chain.proposal = MapMixtureProposal(state.transport_map, lambda: state.am_scale.value)

    def _adapts_after_tuning(self) -> bool:
        """Vanishing adaptation after tuning: adapt with probability :math:`p_t` at post-tuning step t."""
        if self.adaptation != "vanishing":
            return False
        self._chain.post_tune_steps += 1
        return self.rng.random() < self._vanishing(self._chain.post_tune_steps)
