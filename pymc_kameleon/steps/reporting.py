"""What our steps tell the user: end-of-tuning warnings and progress-bar columns.

How a warning raised in one of PyMC's worker processes reaches the session is
:mod:`pymc_kameleon.steps.session_warnings` (:class:`StepWarnings`, :func:`carry_warnings`, imported here
too).
"""

from __future__ import annotations

import math

from rich.progress import TextColumn
from rich.table import Column

from pymc_kameleon.core.adaptation.diagnostics import CLIMB_LIMIT
from pymc_kameleon.core.adaptation.scale_free import UNCOVERED_LIMIT
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.steps.agreement import DrawsAgreement, coordinate_name, cross_chain_disagreement
from pymc_kameleon.steps.session_warnings import StepWarnings, carry_warnings, in_pymc_worker

__all__ = [
    "CLIMB_LIMIT",
    "STUCK_DRAWS",
    "StepWarnings",
    "StuckAfterTuning",
    "carry_warnings",
    "in_pymc_worker",
    "RECENT_STEPS",
    "RecentRates",
    "delayed_acceptance_progressbar_config",
    "delayed_acceptance_progressbar_update_functions",
    "progressbar_config",
    "progressbar_update_functions",
    "tuning_problems",
    "warn_after_tuning",
]

# Acceptance rates outside [target / 2, (1 + target) / 2] at the end of tuning are reported.
_LOW_ACCEPT_FACTOR = 0.5
# Below this acceptance rate the chain is reported as stuck rather than as badly tuned.
_STUCK_ACCEPT = 0.01
# A drift (TuningReport.drift) above this many learned sds means tuning ended while the chain was
# still walking toward the posterior (measured: 9-10 from a start 50 sd away in 20-d, 0.5-1.7 settled),
# unless over the last half of those states (late_drift) it was at most _LATE_DRIFT_LIMIT and at most
# _LATE_SHARE of the drift: then the chain arrived early in them (the regression from PyMC's start,
# tune=1000, seeds 1-6: drift 1.2-4.3, late drift 0.38-0.59, draws right; seed 5 was told it was
# still moving). A steady walk keeps about half its drift over the last half.
_DRIFT_LIMIT = 3.0
# A drift above this many learned sds is no walk: the learned sds are a sliver of the chain's own moves,
# so its step collapsed (a chain walking in from 50 sd away drifts by 9-10; a new user's correlated
# particle-filter chains whose steps collapsed at rho 0.8 and 0.9: 3.6e5 to 7.2e11).
_COLLAPSED_DRIFT = 1e3
_LATE_DRIFT_LIMIT = 1.0
# A drift while the log density barely rose (climb below this many sqrt(d/2)) is no walk in: the chain
# moved within the posterior, farther than the sds learned in a short tuning's earlier windows (a ridge
# with sds 1000:4.5, tune=1500, 1 and 2 chains: drifts of 3.3-10.9 learned sds, 0.3-0.6 true ones, climbs
# -0.4 to 0.27, draws right). Chains walking in that drifted climbed by 1.9-2.4e5 (the catalogue at
# tune=1000 and the ridge from far starts, benchmarks/results/drift_without_climb.md). A climb that
# arrived early does not excuse the drift: a chain that reached the ridge early and crawled along it
# (climb 2.2e5, late climb 0.01, late drift 8.9, an sd of 11 where the posterior's is 816) warns by its
# drift alone. Where a prior is improper a drift without a climb still warns: no tuning ends a walk
# along a direction the data do not identify.
_DRIFT_CLIMB_FLOOR = 1.0
# A climb (TuningReport.climb) above CLIMB_LIMIT sqrt(d/2) means the log density was still rising,
# unless over the last half of those states (late_climb) it rose by at most _LATE_CLIMB_LIMIT and
# by at most _LATE_SHARE of the climb: then the chain arrived early in them (a regression from
# PyMC's start, tune=1000: climb 6.7-15.5, late climb 0.4-0.9, draws right). A steady climb keeps
# about half its rise over the last half, so it still warns (a coordinate walking in slowly
# gave a climb of 3.4, docs/decisions/0005); chains still walking in had late climbs of 3.6-150,
# settled ones -0.8 to 2.4 (the 20-d model of test_a_log_density_still_climbing..., seeds 1-3).
_LATE_CLIMB_LIMIT = 1.5
_LATE_SHARE = 0.25
# A gradient spread (TuningReport.spread) below this means a coordinate barely moved: it is at least
# about 1 for draws from the target (measured, GP-DA MALA, 63 chains not stuck: 0.24-3.7, all but one
# >= 0.60; 0.03 and 0.06 on two chains silently stuck in one coordinate).
_SPREAD_LIMIT = 0.1
# A gradient slope (TuningReport.slope) above this means the chain was still on its way to the posterior:
# the mean gradient over its last tuning states was more than about twice its sd (draws from the target
# have mean gradient zero). Measured (GP-DA MALA, 15 catalogue posteriors, 120 chains): at most 0.35 on
# chains whose draws converged, 0.94 on one far off, 0.9995 on a chain crawling toward the posterior
# that no other check saw (benchmarks/results/gradient_slope_calibration.md).
_SLOPE_LIMIT = 0.9
# A relative spread (TuningReport.relative_spread) below this means the chain's moves changed only the
# last four digits of a coordinate (float64 resolves 2.2e-16): frozen (pseudo-marginal chains whose step
# collapsed: 4e-15 and 5e-14). A new user's healthy posterior, sd 0.5 at 1.7e9, has 2.9e-10.
_FROZEN_LIMIT = 1e-12


def _arrived_early(late: float, whole: float, limit: float) -> bool:
    """Whether a rise (climb or drift) over the last tuning states is the chain's arrival early in
    them: over their last half it is at most ``limit`` and at most a quarter of the whole."""
    return math.isfinite(late) and late <= min(limit, _LATE_SHARE * whole)


def chain_words(chain: int | None) -> tuple[str, str]:
    """How a warning names the chain it is about, as subject and possessive: ``("the chain", "the")``
    alone, ``("chain k", "chain k's")`` for chain k of a population."""
    return ("the chain", "the") if chain is None else (f"chain {chain}", f"chain {chain}'s")


def _improper_drift_hint(report, improper) -> str:
    """What to add to the still-moving sentence where the model has improper priors and the chain moved
    without climbing: a walk along a direction the data do not identify, which no tuning ends."""
    if not improper or (math.isfinite(report.climb) and report.climb > CLIMB_LIMIT):
        return ""
    listed = ", ".join(improper)
    return (
        f". It moved without its log density rising, and {listed} {'has' if len(improper) == 1 else 'have'} "
        "an improper prior (pm.Flat or pm.HalfFlat): if the data do not identify "
        f"{'it' if len(improper) == 1 else 'them'} (collinear predictors, an intercept given twice), the "
        "posterior is improper and no tuning helps; give a proper prior (a wide pm.Normal, pm.HalfNormal)"
    )


def improper_variable_labels(coordinate_names, improper) -> tuple[str, ...]:
    """The labels of the variables whose coordinates (indices into ``coordinate_names``) are in
    ``improper``, in order, each once (``b`` for ``b[0]`` and ``b[1]``, ``s`` for ``log(s)``)."""
    labels = [coordinate_name(coordinate_names, j).split("[")[0] for j in sorted(improper)]
    labels = [label[label.index("(") + 1 : -1] if label.endswith(")") else label for label in labels]
    return tuple(dict.fromkeys(labels))


def tuning_problems(
    report, target_accept: float, required_steps: int, dim: int, coordinate_names=None,
    steps_per_iteration: int = 1, accept_remedy: str | None = None, chain: int | None = None,
    iteration_budget: tuple[int, int] | None = None, improper: tuple[str, ...] = (),
) -> list[str]:
    """Sentences describing what went wrong in tuning (empty if nothing did).

    ``report`` is a :class:`pymc_kameleon.core.adaptation.diagnostics.TuningReport`; ``coordinate_names``
    names the sampler's coordinates (default ``coordinate j``). ``steps_per_iteration``: the adaptation's
    steps in one of ``pm.sample``'s iterations (MLDA's coarsest-level steps), so that ``tune`` is
    advised in iterations. ``accept_remedy``: the advice for an acceptance rate far from the target where
    the step knows a likelier cause than tuning too short (default: increase ``tune``). ``chain``: the
    chain's index in a population (pooled tuning), named in the sentences about that chain alone; those
    about the tuning budget, the same for every chain, do not name it, so that Python shows them once.
    ``iteration_budget``: ``(iterations tuned, iterations needed)`` for a step whose proposal tunes on
    densities that learn once an iteration (MLDA's error model and GP levels), judged instead of
    ``required_steps``. ``improper``: the variables with an improper prior (``pm.Flat``,
    ``pm.HalfFlat``), named where a chain still moved at the end of tuning without climbing, as in a
    direction the data do not identify.
    """
    subject, whose = chain_words(chain)
    problems = []
    if iteration_budget is not None:
        tuned, needed = iteration_budget
        if tuned < needed:
            problems.append(
                f"tuning took {tuned} iterations, fewer than the {needed} its proposal needs in {dim} "
                "dimensions when the coarse densities it tunes on keep moving (the adaptive error model and "
                f"GP levels learn from the fine level, once an iteration); pass tune >= {needed}"
            )
    elif report.tune_steps < required_steps:
        if steps_per_iteration > 1:
            iterations = math.ceil(required_steps / steps_per_iteration)
            problems.append(
                f"tuning took {report.tune_steps} coarsest-level steps ({steps_per_iteration} per "
                f"iteration), fewer than the {required_steps} its proposal needs in {dim} dimensions (a "
                f"coordinate scan, then adaptation windows); pass tune >= {iterations}"
            )
        else:
            problems.append(
                f"tuning took {report.tune_steps} steps, fewer than the {required_steps} this step needs "
                f"in {dim} dimensions (a coordinate scan, then adaptation windows); pass tune >= "
                f"{required_steps}"
            )
    if report.phase == "scan":
        problems.append(
            "tuning ended inside the coordinate scan, before any covariance was learned: the draws use a "
            "random walk with the scan's step sizes per coordinate, which mixes slowly on correlated "
            "posteriors. Increase `tune`"
        )
    elif report.phase != "kameleon" and report.wants_kameleon:
        problems.append(
            "tuning ended before the first Kameleon proposal was built (kameleon_after); the draws use the "
            "Adaptive Metropolis walk. Increase `tune`"
        )
    rate = report.accept_rate
    if math.isfinite(rate) and not (
        _LOW_ACCEPT_FACTOR * target_accept <= rate <= 0.5 * (1.0 + target_accept)
    ):
        # Delayed acceptance records an unbiased estimate of each step's acceptance probability (an
        # importance weight), whose window mean can exceed 1; a rate is shown as at most 1.
        shown = f"{min(rate, 1.0):.3f}" + (f" (estimated as {rate:.3g}, capped at 1)" if rate > 1.0 else "")
        if rate < _STUCK_ACCEPT:
            problems.append(
                f"{subject} was stuck at the end of tuning: the acceptance rate over its last tuning steps "
                f"was {shown} (target_accept={target_accept:.3g}), so its draws may all sit at one point far "
                "from the posterior. Causes: a start far from the posterior, or a likelihood estimate "
                "(PseudoMarginalPotential) that overestimates by luck and is held on to; start closer to "
                "the posterior (initvals), use a less noisy estimator, or increase `tune`"
            )
        else:
            problems.append(
                f"{whose} acceptance rate over the last tuning window was {shown}, far from "
                f"target_accept={target_accept:.3g}; "
                + (accept_remedy or "increase `tune` so that the adaptation can settle")
            )
    if math.isfinite(report.uncovered) and report.uncovered > UNCOVERED_LIMIT:
        problems.append(
            f"{100 * report.uncovered:.0f}% of {whose} last tuning states lie more than 3 bandwidths from "
            "every point of the subsample Z, where the proposal falls back to Adaptive Metropolis; increase "
            "`tune` (Z is drawn from the last adaptation window) or `n_subsample`"
        )
    arrived_early = _arrived_early(report.late_drift, report.drift, _LATE_DRIFT_LIMIT)
    frozen = math.isfinite(report.relative_spread) and report.relative_spread < _FROZEN_LIMIT
    # A frozen chain's learned sds are its collapsed steps: its drift in them says nothing.
    collapsed = math.isfinite(report.drift) and report.drift > _COLLAPSED_DRIFT and not frozen
    if collapsed:
        problems.append(
            f"{subject}'s step collapsed in tuning: the mean of its last tuning states shifted by "
            f"{report.drift:.3g} learned posterior sds between their two halves, where a chain walking in "
            "shifts by 10 at most, so what it learned as the posterior's spread is a sliver of it and its "
            "draws barely move (a chain held at one point, as by a likelihood estimate far above the "
            "likelihood, learns such a sliver). With a PseudoMarginalPotential: check the estimator with "
            "log_estimate_spread (for a correlated one its log_ratio_sd), use more samples per estimate or "
            "a correlation closer to 1, and start closer to the posterior (initvals); otherwise increase "
            "`tune`"
        )
    without_climb = math.isfinite(report.climb) and report.climb < _DRIFT_CLIMB_FLOOR
    if (
        math.isfinite(report.drift) and report.drift > _DRIFT_LIMIT and not arrived_early and not frozen
        and not collapsed and (improper or not without_climb)
    ):
        problems.append(
            f"{subject} was still moving at the end of tuning: the mean of its last tuning states shifted "
            f"by {report.drift:.1f} learned posterior sds (root mean square over coordinates) between their "
            "two halves, so the proposal was learned on the way to the posterior and the draws may not "
            "be from it yet; increase `tune` or start closer to the posterior"
            + _improper_drift_hint(report, improper)
        )
    arrived_early = _arrived_early(report.late_climb, report.climb, _LATE_CLIMB_LIMIT)
    if math.isfinite(report.climb) and report.climb > CLIMB_LIMIT and not arrived_early:
        late = ""
        if math.isfinite(report.late_climb):
            late = f", and by {report.late_climb:.1f} over the last half"
        problems.append(
            f"{subject} was still climbing at the end of tuning: the mean log density of its last tuning "
            f"states rose by {report.climb:.1f} x sqrt(d/2) (the spread of the log density over a "
            f"{dim}-dimensional Gaussian posterior) between their two halves{late}, so some coordinates "
            "may still be on their way to the posterior; increase `tune` or start closer to the posterior"
        )
    if math.isfinite(report.spread) and report.spread < _SPREAD_LIMIT:
        name = coordinate_name(coordinate_names, report.spread_coordinate)
        problems.append(
            f"{subject} barely moved in {name} at the end of tuning: the sd of its last tuning states there "
            f"was {report.spread:.2g} x the least the log density's gradient allows for draws from the "
            "posterior (Cramer-Rao: sd >= 1 / root mean square of the gradient), so it was stuck (a "
            "collapsed step, or a narrow ridge) and its draws may be far from the posterior; increase "
            "`tune` or start closer to the posterior"
        )
    if frozen:
        name = coordinate_name(coordinate_names, report.relative_spread_coordinate)
        problems.append(
            f"{subject} was frozen in {name} at the end of tuning: the sd of its last tuning states there "
            f"was {report.relative_spread:.1e} of their size, moves that change only a float's last digits, "
            "so its step collapsed and its draws repeat one point. With a PseudoMarginalPotential, an "
            "estimate far above the likelihood held the chain while tuning shrank its steps: start closer "
            "to the posterior (initvals; the start search is off with an estimated likelihood), where the "
            "estimator is less noisy, or use more samples per estimate; otherwise increase `tune`"
        )
    if math.isfinite(report.slope) and report.slope > _SLOPE_LIMIT:
        name = coordinate_name(coordinate_names, report.slope_coordinate)
        problems.append(
            f"{subject} was still on a slope at the end of tuning: in {name} the log density's gradient "
            f"kept one sign over its last tuning states (its mean was {report.slope:.2f} x its root mean "
            "square; at the posterior the gradient averages zero), so the chain had not reached the "
            "posterior and its draws may be far from it; increase `tune` or start closer to the posterior"
        )
    return problems


# A chain that rejects this many proposals in a row after tuning is reported as stuck (a healthy
# chain at acceptance 0.1 does so with probability 0.9^500 ~ 1e-23).
STUCK_DRAWS = 500


class StuckAfterTuning:
    """Counts the proposals a chain rejects in a row after tuning, and says so once at :data:`STUCK_DRAWS`.

    Tuning's own checks look at the tuning states; a chain can still stick after them (a proposal
    or surrogate that fits the tuning states but not where the chain goes, a pseudo-marginal
    estimate that came out far too high), and its draws then repeat one point.
    """

    def __init__(self):
        self.rejected_in_a_row = 0
        self.estimated_in_a_row = 0  # of those rejections, the ones whose proposal drew an estimate
        self.said = False

    def message(
        self, step_name: str, accepted: bool, tune: bool, warned_before: bool = False,
        pseudo_marginal: bool = False, remedy: str | None = None,
    ) -> str | None:
        """The warning's text at the :data:`STUCK_DRAWS`-th rejection in a row after tuning, else None.

        ``warned_before``: whether the step already warned in this chain (its text then points there;
        otherwise it says that tuning looked fine, which narrows the causes). ``pseudo_marginal``: the
        model has an estimated likelihood, whose kept estimate is the likeliest cause. ``remedy``: the
        step's own advice, in place of more tuning or a closer start.
        """
        if not self.count(accepted, tune):
            return None
        return self.text(step_name, warned_before, pseudo_marginal, remedy)

    def count(self, accepted: bool, tune: bool, estimated: bool = True) -> bool:
        """Count one step (``estimated``: whether its proposal drew a likelihood estimate); True once, at
        the :data:`STUCK_DRAWS`-th rejection in a row after tuning (the step then builds the warning with
        :meth:`text`, not at every step)."""
        if tune or self.said:
            return False
        self.rejected_in_a_row = 0 if accepted else self.rejected_in_a_row + 1
        self.estimated_in_a_row = 0 if accepted else self.estimated_in_a_row + bool(estimated)
        if self.rejected_in_a_row < STUCK_DRAWS:
            return False
        self.said = True
        return True

    def text(
        self, step_name: str, warned_before: bool = False, pseudo_marginal: bool = False,
        remedy: str | None = None, chain: int | None = None, lucky_estimate: str | None = None,
        surrogate_below: str | None = None, kept_estimate: float | None = None,
    ) -> str:
        """The warning of a stuck chain (the arguments as :meth:`message`'s; ``chain``: the chain's index
        in a population, which the text names; ``lucky_estimate``: a step's measured sign that the kept
        estimate came out high, with its figure, which then is the cause named; ``surrogate_below``: with
        an exact likelihood, the same for a surrogate that underrates the likelihood at the state;
        ``kept_estimate``: the log-likelihood estimate a pseudo-marginal chain keeps, which the text gives
        so that chains can be compared)."""
        subject, _ = chain_words(chain)
        if surrogate_below is not None and not pseudo_marginal:
            # GP-DA-MH on the far-start eight schools sat 1359 draws where its full GP was 6 nats low, and
            # was told of a funnel's neck.
            return (
                f"{step_name}: after tuning {subject} rejected {STUCK_DRAWS} proposals in a row, and "
                f"{surrogate_below}: the surrogate holds it there (its draws repeat one point "
                "meanwhile; the chain stays exact, but these draws do not describe the posterior until it "
                "moves on). "
                + (remedy or "Increase `tune`.")
            )
        if pseudo_marginal and lucky_estimate is not None:
            # A new user's GP-DA chain (20 samples per estimate) rejected 500 proposals in a row at stage 1
            # with its kept estimate 1.4 nats above the likelihood, and was told the estimate was not the
            # cause.
            return (
                f"{step_name}: after tuning {subject} rejected {STUCK_DRAWS} proposals in a row, and "
                f"{lucky_estimate}: an estimate that came out high holds a chain until a proposal's estimate "
                "comes out as high, and stage 1 rejects the proposals before drawing theirs, since it "
                "compares them with the kept estimate (its draws repeat one point meanwhile; the chain "
                "stays exact, but mixes slowly). Use more samples per estimate (log_estimate_spread: a "
                "log-estimate sd of 0.8 or less for delayed acceptance), or sample with "
                "KameleonMetropolis, which copes with an sd of 1-1.7."
            )
        if pseudo_marginal and self.estimated_in_a_row < STUCK_DRAWS // 10:
            # A new user's GP-DA chain rejected 1349 proposals in a row of which 7 drew an estimate, and a
            # KameleonMetropolis chain whose scale had collapsed drew none: the estimate was not the cause.
            return (
                f"{step_name}: after tuning {subject} rejected {STUCK_DRAWS} proposals in a row, and only "
                f"{self.estimated_in_a_row} of them drew a likelihood estimate, so the estimate it keeps is "
                "not what holds it: the rest were rejected before the estimator ran (by a GP's stage 1, by "
                "the model's exact terms, or as proposals equal to the state, which a proposal scale that "
                "collapsed in tuning makes; see this step's other warnings). Its draws repeat one point "
                "meanwhile (the chain stays exact, but mixes slowly). "
                + (remedy or "Increase `tune`, or start closer to the posterior.")
            )
        if pseudo_marginal:
            # A new user's GP-DA chains sat inside the posterior on estimates 2 nats too high for 500-1200
            # draws, then moved on: the funnel advice below misled there. Another's chain, started far off,
            # sat 685 nats below the others (whose estimates were healthy): no start search with estimates.
            kept = (
                "" if kept_estimate is None else f" (its kept log-likelihood estimate: {kept_estimate:.1f})"
            )
            return (
                f"{step_name}: after tuning {subject} rejected {STUCK_DRAWS} proposals in a row{kept}: the "
                "likelihood estimate it keeps is probably far above the likelihood there, which holds a "
                "pseudo-marginal chain until a proposal's estimate comes out as high (its draws repeat one "
                "point meanwhile; the chain stays exact, but mixes slowly), or the chain is far from the "
                "posterior, where estimates are often much noisier. Compare the chains' loglik_estimate: "
                "where this chain's is tens of nats below the others', start it nearer the posterior with "
                "initvals (with a PseudoMarginalPotential there is no start search); else use more samples "
                "per estimate (log_estimate_spread: aim for an sd of 1-1.7 near the posterior) or a "
                "correlated estimator (auxiliary_shape=..., with the smallest correlation whose "
                "log_ratio_sd is at most about 2.4)."
            )
        why = (
            "see this step's earlier warning(s) for this chain"
            if warned_before
            else "its tuning raised no warning, so the chain has reached a region unlike the one it was "
            "tuned in, for example a funnel's neck (a hierarchical scale near zero: reparametrise it "
            "non-centred) or a narrower mode of a multimodal posterior (pm.sample_smc(kernel=KASS) weighs "
            "separated modes)"
        )
        return (
            f"{step_name}: after tuning {subject} rejected {STUCK_DRAWS} proposals in a row, so it is stuck "
            f"and its draws repeat one point (the chain stays exact, but these draws do not describe the "
            f"posterior until it moves on); {why}. "
            + (remedy or "Increase `tune`, or start closer to the posterior.")
        )


def warn_after_tuning(
    step_name: str, adaptation, target_accept: float, sink: StepWarnings, coordinate_names=None,
    across_chains: bool = False, steps_per_iteration: int = 1, differentiable=None,
    accept_remedy: str | None = None, chain: int | None = None,
    iteration_budget: tuple[int, int] | None = None, improper=frozenset(), gradient_split=None,
    smc_start: bool = False,
) -> DrawsAgreement | None:
    """One KameleonWarning at the end of a chain's tuning, listing every problem found (none: silent).

    ``across_chains``: also compare the chains (pooled tuning; one chain says so): the
    :class:`DrawsAgreement` returned compares their first :data:`CROSS_CHAIN_DRAWS` draws and warns if
    they disagree, with the figure of their last tuning states if those disagreed too (None without
    ``across_chains``). ``steps_per_iteration`` and ``accept_remedy``: as :func:`tuning_problems`.
    ``differentiable``, ``gradient_split``, ``improper`` and ``smc_start``: as :class:`DrawsAgreement`'s.
    ``chain`` and ``iteration_budget``: as :func:`tuning_problems`.
    """
    required = adaptation.required_tune_steps()
    problems = tuning_problems(
        adaptation.report(), target_accept, required, adaptation.dim, coordinate_names, steps_per_iteration,
        accept_remedy, chain, iteration_budget, improper_variable_labels(coordinate_names, improper),
    )
    pending = None
    if across_chains:
        windows = adaptation.windows
        disagreement = cross_chain_disagreement(windows.recent_population, len(windows.accept))
        pending = DrawsAgreement(
            step_name, disagreement, coordinate_names, differentiable, improper, gradient_split, smc_start
        )
    if problems:
        sink.warn(f"{step_name}: " + "; ".join(problems) + ".", KameleonWarning, stacklevel=3)
    return pending


#: Steps over which the progress bar's rates are averaged (exponentially, after a plain mean at first).
RECENT_STEPS = 100


class RecentRates:
    """A chain's acceptance rate and share of steps with an exact evaluation over about the last
    :data:`RECENT_STEPS` steps: the mean of the first :data:`RECENT_STEPS` values, then an exponential
    moving average of weight ``1 / RECENT_STEPS`` (the progress bar shows them; one step's acceptance
    probability jumps between 0 and 1)."""

    def __init__(self):
        self.n = 0
        self.accept = 0.0
        self.exact = 0.0

    def update(self, accept: float, exact_eval: bool = True) -> None:
        self.n += 1
        weight = 1.0 / min(self.n, RECENT_STEPS)
        if math.isfinite(accept):
            self.accept += weight * (accept - self.accept)
        self.exact += weight * (float(exact_eval) - self.exact)


def progressbar_config(n_chains=1):
    """Progress-bar columns: the proposal scale and the acceptance rate over the recent steps."""
    columns = [
        TextColumn("{task.fields[scaling]:0.2f}", table_column=Column("Scaling", ratio=1)),
        TextColumn("{task.fields[accept_rate]:0.2f}", table_column=Column("Accept Rate", ratio=1)),
    ]
    return columns, {"scaling": [0.0] * n_chains, "accept_rate": [0.0] * n_chains}


def progressbar_update_functions():
    """Map a step's stats to the progress-bar fields of :func:`progressbar_config`."""

    def update_stats(step_stats):
        return {"accept_rate": step_stats["recent_accept_rate"], "scaling": step_stats["scaling"]}

    return (update_stats,)


def delayed_acceptance_progressbar_config(n_chains=1):
    """:func:`progressbar_config`'s columns and the share of recent steps that evaluated the likelihood."""
    columns, fields = progressbar_config(n_chains)
    columns.append(TextColumn("{task.fields[exact_share]:0.2f}", table_column=Column("Exact Evals", ratio=1)))
    return columns, {**fields, "exact_share": [0.0] * n_chains}


def delayed_acceptance_progressbar_update_functions():
    """Map a GP-DA step's stats to the fields of :func:`delayed_acceptance_progressbar_config`."""
    (common,) = progressbar_update_functions()

    def update_stats(step_stats):
        return {**common(step_stats), "exact_share": step_stats["recent_exact_share"]}

    return (update_stats,)
