"""What a step of ours keeps per chain, and how PyMC 5 and 6 reset it before each chain:
:class:`ChainState`, :class:`PerChainReset`, and :func:`side_stream` for draws that must leave the
chain's random stream as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pymc.util import get_random_generator

from pymc_kameleon.steps.agreement import DrawsAgreement
from pymc_kameleon.steps.left_regions import LeftRegionsCheck
from pymc_kameleon.steps.reporting import RecentRates, StepWarnings, StuckAfterTuning
from pymc_kameleon.steps.session_warnings import spawn_key

__all__ = ["ChainState", "PerChainReset", "side_stream"]


class PerChainReset:
    """Mixin for steps that keep per-chain state in ``_reset_chain_state()``.

    Before each chain, PyMC 5 calls ``set_rng`` then (in this process) sets ``tune`` and calls
    ``reset_tuning``, but in a worker process (``cores>1``) only ``set_rng``; PyMC 6 calls
    ``setup_chain(rng, tune, draws)`` in both. So every one of these hooks resets the state, and
    the ones that run in workers also set ``tune``: a step object that has already sampled arrives
    there with ``tune=False`` and its old adaptation. ``_reset_chain_state`` also runs in ``__init__``.
    """

    def _start_chain(self) -> None:
        """``_reset_chain_state``; the start search's box forgotten if the prior's data changed since it
        was built (``pm.set_data`` between two runs of one step object); then the new chain's warnings told
        which sampling run they belong to (``_warning_session``, made with the step and pickled with it),
        so that a warning another chain of the run gave already, with other figures, is shown in short
        (``session_warnings.show``)."""
        self._reset_chain_state()
        search = getattr(self, "_start_search", None)
        if search is not None:
            search.forget_if_prior_data_changed()
        chain_warnings = getattr(getattr(self, "_chain", None), "warnings", None)
        if isinstance(chain_warnings, StepWarnings):
            chain_warnings.session = getattr(self, "_warning_session", None)
            chain_warnings.chain = spawn_key(getattr(self, "rng", None))

    def _join_run(self) -> None:
        """A new chain's generator is set: its sampling run's session (:class:`RunSessions`), if the step
        keeps one, becomes the step's ``_warning_session``."""
        runs = getattr(self, "_run_sessions", None)
        if runs is not None:
            self._warning_session = runs.join(self.rng)

    def reset_tuning(self):
        """Reset per-chain state (PyMC 5 calls this before each chain in this process)."""
        self._start_chain()

    def set_rng(self, rng):
        """PyMC 5 hook before each chain (the only one in a worker process): set the rng, reset.

        ``tune`` is set to True: a worker calls ``stop_tuning`` at draw ``tune`` (draw 0 for
        ``tune=0``), and in this process PyMC sets ``tune`` itself after this call.
        """
        parent = getattr(super(), "set_rng", None)
        if parent is not None:
            parent(rng)
        else:  # PyMC 6 has no set_rng
            self.rng = get_random_generator(rng, copy=False)
        self.tune = True
        self._join_run()
        self._start_chain()

    def setup_chain(self, rng, tune, draws):
        """PyMC 6 hook before each chain, here and in workers: set the rng and ``tune``, reset."""
        parent = getattr(super(), "setup_chain", None)
        if parent is not None:
            parent(rng, tune, draws)
            self._join_run()
            self._start_chain()
        else:
            self.set_rng(rng)  # resets too
        self.tune = bool(tune)


def side_stream(rng: np.random.Generator, jumps: int = 1) -> np.random.Generator:
    """A random stream independent of ``rng`` that leaves ``rng`` as it was: its bit generator jumped
    ahead ``jumps`` times (:math:`2^{128}` draws each for PCG64, PyMC's; different ``jumps``, different
    streams), or, for one that cannot jump, a child spawned from its seed."""
    jumped = getattr(rng.bit_generator, "jumped", None)
    return np.random.Generator(jumped(jumps)) if jumped is not None else rng.spawn(1)[0]


@dataclass(eq=False, kw_only=True)
class ChainState:
    """What a step keeps per chain, made afresh by ``_reset_chain_state`` (and pickled with the step).

    Each step declares its own subclass (:class:`~pymc_kameleon.steps.kameleon_chain.KameleonChain`,
    :class:`~pymc_kameleon.steps.delayed_acceptance.base.DelayedAcceptanceChain`) and keeps it in
    ``self._chain``; these two fields every continuous step of ours has.

    Attributes
    ----------
    warnings : StepWarnings
        The chain's warnings (kept for the statistics in a worker process).
    stuck : StuckAfterTuning
        Rejections in a row after tuning.
    searched : bool
        Whether the chain has had its chance to search for a start (its first step).
    cumulative_logp_evals : int
        The chain's log-density evaluations so far, tuning and its start included.
    cumulative_estimator_calls : int
        The chain's pseudo-marginal estimator calls so far, tuning's fresh estimates included.
    recent : RecentRates
        The acceptance rate (and share of exact evaluations) over about the last 100 steps.
    warned_untuned : bool
        Whether the chain has said that it samples without tuning (:meth:`AdaptiveStep._warn_if_untuned`).
    pending_logp_evals : int
        Evaluations made between two steps (the end-of-tuning exam), counted in the next step's
        ``logp_evals``.
    pending_estimator_calls : int
        Estimator calls made between two steps (the end-of-tuning noise check), counted in the next
        step's ``estimator_calls``.
    draws_agreement : DrawsAgreement or None
        Chains that disagreed at the end of tuning, compared again over the first draws (the chain that
        speaks for a pooled population).
    left_regions : LeftRegionsCheck or None
        The chain's settled tuning blocks, compared with the first draws (a region left behind).
    tuning_rejections : int
        Proposals rejected in a row during tuning since the pseudo-marginal estimate at the state was
        last drawn (:meth:`AdaptiveStep._refresh_sticky_estimate`).
    """

    warnings: StepWarnings = field(default_factory=StepWarnings)
    stuck: StuckAfterTuning = field(default_factory=StuckAfterTuning)
    nan_said: bool = False  # the after-tuning warning of a NaN log density at a proposal was given
    searched: bool = False
    cumulative_logp_evals: int = 0
    cumulative_estimator_calls: int = 0
    recent: RecentRates = field(default_factory=RecentRates)
    warned_untuned: bool = False
    pending_logp_evals: int = 0
    pending_estimator_calls: int = 0
    draws_agreement: DrawsAgreement | None = None
    left_regions: LeftRegionsCheck | None = None
    tuning_rejections: int = 0
