r"""Starts from a tempered SMC run (``start="smc"``): particles that cover the posterior before tuning.

Where a posterior is a thin curved ridge (a latent GP's tube), chains that walk in from their starts
tune on what they find. A tempered run does not walk in: :class:`~pymc_kameleon.KASS` moves its
particles from the prior to the posterior through intermediate targets, and its last particles cover
the posterior's bulk (decision 0060: on the latent Poisson GP regression 2000 particles got every mean
within 0.07 posterior sd). With
``start=SMCStart()`` (or ``start="smc"``) the step runs ``pm.sample_smc(kernel=KASS)`` once before
tuning; the particles give

- each chain its start (distinct particles, drawn at random), and
- the tuning's first mean, covariance and Kameleon subsample :math:`Z`: they take the coordinate
  scan's place and stay in the first adaptation window
  (:meth:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation.start_from_draws`).

With ``KameleonMetropolis`` the step then proposes through a triangular map fitted to the particles
(``transport_map``), which is what made the latent GP converge; the particles alone did not.

With pooled tuning one run serves the population: chain 0 makes it when PyMC links the chains (in
``pm.sample``'s process, before the chains start), and its evaluations count in chain 0's first
``logp_evals`` (a tuning step's, which PyMC discards by default) and so in its
``cumulative_logp_evals``. Tuning per chain (``tuning="per_chain"``, ``chains=1``), each chain makes its
own run at its first step, counted in its own. The run costs what it costs: about :math:`N` times the
number of tempering stages times a few sweeps (750 000 evaluations on the latent GP at
:math:`N = 2000`, 20 times the chains'; 20 to 50 times on the models tried), so it is an option, not
the default. It says one line in PyMC's log, and ``step.smc_start_result`` keeps it.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

import numpy as np
import pymc as pm

from pymc_kameleon.core.validation import unexpected_keyword_error
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.steps.starts import STARTS

__all__ = ["SMC_START_PARTICLES", "SMCStart", "SMCStartResult", "resolve_start"]


#: Particles of the SMC run: with 2000 the latent GP's particles had every mean within 0.07 posterior sd
#: and every sd within 11% (decision 0060); with 1000 the map built on them mixed less well (R-hat up to
#: 1.011 against 1.005).
SMC_START_PARTICLES = 2000


@dataclass(frozen=True)
class SMCStart:
    """The ``start`` option that starts tuning from a ``pm.sample_smc(kernel=KASS)`` run.

    Parameters
    ----------
    particles : int, default 2000
        Particles of the run (``draws`` of ``pm.sample_smc``); at least 100.
    transport_map : bool, optional
        Propose through a triangular map fitted to the particles
        (:class:`~pymc_kameleon.core.adaptation.transport_map.MapMixtureProposal`: half independent
        draws through the map, half a walk in its reference coordinates whose scale tunes), fixed for
        the whole run, instead of the step's own proposal. It straightens a curved posterior that no
        learned covariance fits (the latent GP's tube, decision 0060), and is what makes the start pay:
        the particles alone (starts and first covariance) left the latent GP and an 8-d banana as
        unconverged as the default. By default (None) on where the step offers it,
        :class:`~pymc_kameleon.KameleonMetropolis`; ``True`` elsewhere is an error.
    kernel_options : dict, optional
        Options of :class:`~pymc_kameleon.KASS` (``n_subsample``, ``waste_free``, ``threshold``, ...),
        checked when the start is made.
    """

    particles: int = SMC_START_PARTICLES
    transport_map: bool | None = None
    kernel_options: dict = field(default_factory=dict)

    def __post_init__(self):
        if isinstance(self.particles, bool) or not isinstance(self.particles, int | np.integer):
            raise TypeError(f"SMCStart: particles must be an integer, got {self.particles!r}.")
        if self.particles < 100:
            raise ValueError(
                f"SMCStart: particles={self.particles} is too few to cover a posterior; use at least 100 "
                f"(default {SMC_START_PARTICLES})."
            )
        if not isinstance(self.kernel_options, dict):
            raise TypeError("SMCStart: kernel_options must be a dict of KASS's options.")
        if self.transport_map not in (None, True, False):
            raise TypeError(
                f"SMCStart: transport_map must be True, False or None, got {self.transport_map!r}."
            )
        reserved = _RESERVED & set(self.kernel_options)
        if reserved:
            raise ValueError(
                f"SMCStart: {sorted(reserved)} {'is' if len(reserved) == 1 else 'are'} set by the start "
                "itself; give the particles as particles=... and leave the rest to pm.sample."
            )
        known = _kass_options()
        for key in self.kernel_options:
            if key not in known:
                raise unexpected_keyword_error("KASS", key, known, " (in SMCStart's kernel_options)")

    def run(self, model, var_names: list[str], seed: int, step_name: str = "SMCStart") -> SMCStartResult:
        """Run ``pm.sample_smc(kernel=KASS)`` on ``model`` and return the particles in the step's coordinates
        (the raveled value variables of ``var_names``, in that order), the log-density evaluations made and
        the log evidence. PyMC's log and KASS's warnings are the start's business, not the user's: the run
        says one line in PyMC's log instead (what it cost, where that is counted, its log evidence)."""
        from pymc_kameleon.smc import KASS
        from pymc_kameleon.smc.results import log_evidence, stage_stats
        from pymc_kameleon.steps.tuned import value_space_draws

        pymc_log = logging.getLogger("pymc")
        level = pymc_log.level
        pymc_log.setLevel(logging.WARNING)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    idata = pm.sample_smc(
                        self.particles, kernel=KASS, chains=1, cores=1, random_seed=int(seed), model=model,
                        progressbar=False, compute_convergence_checks=False, **self.kernel_options,
                    )
                except (ValueError, FloatingPointError, np.linalg.LinAlgError) as err:
                    # KASS's own errors say what failed (particles collapsed at a tiny beta, ...); say whose.
                    raise type(err)(
                        f"{step_name}: the SMC run of start='smc' failed: {err} Try more particles "
                        "(SMCStart(particles=...)), a higher threshold "
                        "(SMCStart(kernel_options={'threshold': 0.8})), or start='search'."
                    ) from err
                evidence = log_evidence(idata)
        finally:
            pymc_log.setLevel(level)
        particles = value_space_draws(idata, 0, model=model, var_names=var_names)
        checked = int(idata.sample_stats.attrs.get("batch_check_evals", 0))  # the vectorised graph's check
        evaluations = particles.shape[0] + int(np.sum(stage_stats(idata, "likelihood_evals")[0])) + checked
        stages = len(stage_stats(idata, "beta")[0])
        # KASS's own warnings (on its evidence, its mixing) are kept, not shown: the start uses the particles.
        said = tuple(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, KameleonWarning)))
        result = SMCStartResult(
            particles, evaluations, float(evidence.log_z[0]), float(evidence.std_error[0]), stages, said
        )
        warned = (
            f"; KASS warned {len(said)} time(s): read step.smc_start_result.warnings before trusting this "
            "log evidence" if said else ""
        )
        pymc_log.info(
            f"{step_name}: started from an SMC run (KASS, {self.particles} particles, {stages} stages, "
            f"{evaluations:,} log-density evaluations, in cumulative_logp_evals; log evidence "
            f"{result.log_evidence:.2f} +- {result.log_evidence_se:.2f}{warned})"
        )
        return result


_RESERVED = frozenset({
    "draws", "kernel", "chains", "cores", "random_seed", "model", "start", "progressbar",
    "compute_convergence_checks", "return_inferencedata",
})


def _kass_options() -> list[str]:
    """The keyword options ``pm.sample_smc(kernel=KASS, ...)`` passes to the kernel: KASS's own, its batched
    base's and PyMC's SMC kernel's."""
    import inspect

    from pymc.smc.kernels import SMC_KERNEL

    from pymc_kameleon.smc import KASS
    from pymc_kameleon.smc._batched import BatchedSMCKernel

    names = set()
    for function in (KASS.__init__, BatchedSMCKernel.__init__, SMC_KERNEL.__init__):
        for name, parameter in inspect.signature(function).parameters.items():
            if parameter.kind is parameter.KEYWORD_ONLY or parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
                names.add(name)
    return sorted(names - {"self"} - _RESERVED)


@dataclass(frozen=True)
class SMCStartResult:
    """What an :class:`SMCStart` run gave.

    Attributes
    ----------
    particles : array of shape (N, d)
        The last stage's particles in the step's coordinates.
    evaluations : int
        Log-density evaluations of the run (the initial particles', every sweep's and those of KASS's check
        of the vectorised log density).
    log_evidence, log_evidence_se : float
        The run's estimate of the log marginal likelihood and its single-run standard error
        (:func:`~pymc_kameleon.smc.log_evidence`).
    stages : int
        Tempering stages.
    warnings : tuple of str
        What KASS warned during the run (a biased evidence, stages that barely mixed, ...), which the
        start keeps from the user's session; empty if nothing.
    """

    particles: np.ndarray
    evaluations: int
    log_evidence: float
    log_evidence_se: float
    stages: int
    warnings: tuple = ()

    def starts(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` distinct particles (with repeats only if there are fewer distinct ones), drawn at random."""
        distinct = np.unique(self.particles, axis=0)
        rows = rng.choice(distinct.shape[0], size=n, replace=n > distinct.shape[0])
        return distinct[rows]


def resolve_start(start):
    """``start`` as the step keeps it: ``"search"``, ``"initial_point"`` or an :class:`SMCStart`
    (``"smc"`` is ``SMCStart()``); anything else raises a ValueError naming the choices."""
    if isinstance(start, SMCStart):
        return start
    if start == "smc":
        return SMCStart()
    if start in STARTS:
        return start
    raise ValueError(f"start must be one of {(*STARTS, 'smc')} or an SMCStart(...), got {start!r}.")
