"""What :class:`~pymc_kameleon.MLDA` checks and says: its options and coarse models when it is built (the
same free variables, shapes, transforms and supports as the fine model), the coarse densities at the start
and after tuning, each level's acceptance and cost at the end of tuning, and what a stuck chain should
try."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pymc as pm
from pymc.vartypes import discrete_types

from pymc_kameleon.core.adaptation.gaussian_fit import bulk_log_density_range
from pymc_kameleon.core.multilevel import LevelPoint
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.steps.multilevel_gp import GPLevel
from pymc_kameleon.steps.reporting import STUCK_DRAWS
from pymc_kameleon.steps.session_warnings import user_stacklevel

__all__ = [
    "COSTLIER", "COSTLIER_BY", "FAILURE_CHECKS", "FINE_DECISIONS_KEPT", "LOW_FINE_ACCEPTANCE", "TIMED_EVALS",
    "MultilevelChecks", "checked_coarse_models", "checked_gp_positions", "checked_rates",
    "matching_value_vars",
]

#: Below this share of accepted subchain ends among the finest level's last FINE_DECISIONS_KEPT decisions
#: in tuning, MLDA warns (benchmarks/mlda_bias.py: at 0.16, a coarse posterior 2 sds off, MLDA made a
#: fourteenth of KameleonMetropolis's ESS per fine evaluation; at 0.47, 1 sd off, half).
LOW_FINE_ACCEPTANCE = 0.2
# Fine evaluations a chain spends after tuning where a coarse density was NaN or -inf, to tell a coarse model
# that fails where the fine posterior has mass (a wrong answer, silently) from one that fails only in the
# tails or where the fine density is zero too.
FAILURE_CHECKS = 10
FINE_DECISIONS_KEPT = 100
#: When tuning ends MLDA warns if a coarse model's evaluations took, per evaluation (the median wall time
#: of the last ones: multilevel_levels.CallTiming), more than COSTLIER times those of the model level above
#: it and at least COSTLIER_BY seconds more (a timing: the margin keeps cheap models, whose cost is
#: PyTensor's call overhead, out), each level timed at least TIMED_EVALS times.
COSTLIER, COSTLIER_BY, TIMED_EVALS = 1.5, 1e-4, 20
#: ... and if the coarse models together took more than COARSE_TIME_SHARE times the fine model's time in
#: tuning, and COARSE_EXCESS seconds more per fine evaluation (cheap models' call overheads left out).
COARSE_TIME_SHARE, COARSE_EXCESS = 1.0, 5e-4


class MultilevelChecks:
    """The checks and warnings of :class:`~pymc_kameleon.MLDA` (a mixin: it reads the step's levels, chain
    state and options)."""

    def _which_chain(self, form: str = " (chain {})") -> str:
        """``form`` naming the chain where it is known (MLDA tunes each chain apart: a new user's warnings
        named none), else ""."""
        return "" if self._chain_named is None else form.format(self._chain_named)

    def _narrower_noise_text(self) -> str:
        """The coarse observed pm.Normal variables whose noise sd is below the fine one's, as a clause."""
        return "; ".join(
            f"coarse_models[{k}]'s observed {name!r} has a noise sd {ratio:.3g} times the fine model's"
            for k, name, ratio in self._narrower_noise
        )

    def _warn_narrower_noise(self) -> None:
        """When the step is built: name the coarse observed pm.Normal variables whose noise sd is below the
        fine one's (:func:`~.multilevel_levels.narrower_noise`)."""
        if not self._narrower_noise:
            return
        warnings.warn(
            f"MLDA: {self._narrower_noise_text()}: a coarse likelihood narrower than the fine one makes the "
            "coarse posterior narrower, so the fine level rejects the coarse subchains' ends that reach its "
            "tails, and with many observations nearly all of them (the draws stay exact, but the chain can "
            "stall). Give every coarse model a noise sd at least the fine one's (a larger one also absorbs "
            "the coarse model's error).",
            KameleonWarning,
            stacklevel=user_stacklevel(3),
        )

    def _noise_remedy(self) -> str:
        """A coarse noise sd no smaller than the fine one's as a remedy, where a coarse model's is smaller."""
        if not self._narrower_noise:
            return ""
        return f"a coarse noise sd at least the fine one's ({self._narrower_noise_text()}), "

    def _error_model_remedy(self) -> str:
        """The error model as a remedy, where it is off and the levels have observed pm.Normal variables it
        could correct (the warnings' first suggestion)."""
        if self.adaptive_error_model or not self._error_model_fits:
            return ""
        return "adaptive_error_model=True (for observed pm.Normal likelihoods), "

    def _smaller_rate_remedy(self, k: int) -> str:
        """A smaller ``subsampling_rates[k]`` as a remedy, where it is above 1."""
        return f", or a smaller subsampling_rates[{k}]" if self.subsampling_rates[k] > 1 else ""

    def _untuned_message(self) -> str:
        error_model = (
            " The adaptive error model learns during tuning only, so it corrects nothing."
            if self.adaptive_error_model else ""
        )
        return (
            "MLDA: sampling without tuning (tune=0). The coarsest level's proposal keeps its untuned "
            f"unit-scale random walk, whatever the posterior's scale.{error_model} Pass tune >= "
            f"{self.default_tune_steps} to pm.sample (the draws stay exact, but mix slowly)."
        )

    def _warn_low_fine_acceptance(self) -> None:
        """At the end of tuning: warn if the finest level accepted under LOW_FINE_ACCEPTANCE of the last
        coarse subchains' ends it judged (the coarse posterior is too far from the fine one)."""
        decisions = self._chain.fine_decisions
        if len(decisions) < FINE_DECISIONS_KEPT:
            return
        rate = sum(decisions) / len(decisions)
        if rate >= LOW_FINE_ACCEPTANCE:
            return
        remedy = (
            f"{self._noise_remedy()}{self._error_model_remedy()}a coarse model closer to the fine one"
            f"{self._smaller_rate_remedy(self.n_levels - 2)}"
        )
        tails = self._in_the_tails()
        cause = f". {tails}Otherwise the" if tails else ": the"
        # With several coarse levels, name the one the finest judges (a new user's three-level run did not
        # say which model was off).
        below = self.n_levels - 2
        which = f" (coarse_models[{below}]'s)" if self.n_levels > 2 else ""
        self._warnings.warn(
            f"MLDA: at the end of tuning the finest level accepted {rate:.0%} of the last {len(decisions)} "
            f"coarse subchain ends it judged{self._which_chain()}{cause} coarse posterior{which} is far from "
            f"the fine one for the fine posterior's spread, so the chain will mix slowly (its draws stay "
            f"exact). Try {remedy}.",
            KameleonWarning,
            stacklevel=3,
        )

    def _warn_low_middle_acceptance(self) -> None:
        """At the end of tuning: warn if a level between the coarsest and the finest (a GP level, a middle
        model) accepted under LOW_FINE_ACCEPTANCE of its last decisions: the finest level then sees few
        proposals, too few for its own check, and the chain mixes slowly."""
        for k, kept in self._chain.middle_decisions.items():
            decisions = sum(steps for _, steps in kept)
            if decisions < FINE_DECISIONS_KEPT:
                continue
            rate = sum(accepted for accepted, _ in kept) / decisions
            if rate >= LOW_FINE_ACCEPTANCE:
                continue
            gp = k in self._chain.gp_levels
            what = "the GP level" if gp else "the middle level"
            why = (
                # A new user's ODE with the error model: 55% accepted without its GP level, 0-5% by it.
                ": it filters the coarse subchains' ends, and either they walk towards the coarse model's "
                "posterior, far from the fine one, or its GP has not learned the fine model's excess over "
                "the coarse one, and rejects what the coarse model alone would pass"
                if gp else f": the coarse posterior below it (coarse_models[{k - 1}]'s) is far from its own"
            )
            dropped = (
                # The error model's correction is a constant shift (decision 0056: learned between adjacent
                # levels, which cured a new user's [RK4 with 4 steps, with 16], stalled before at 0-8%).
                f", or without coarse_models[{k - 1}] (the error model corrects a coarse model by a constant "
                "shift: a coarsest model that is wrong by more than a shift keeps the level above it "
                "rejecting)"
                if self.adaptive_error_model and not gp and k == 1
                else ", or without the GPLevel (the coarse model alone below the fine one)" if gp else ""
            )
            self._warnings.warn(
                f"MLDA: at the end of tuning {what} (level {k}) accepted {rate:.1%} of the last {decisions} "
                f"subchain ends it judged{self._which_chain()}{why}, so the chain will mix slowly (its draws "
                f"stay exact). Try "
                f"{self._noise_remedy()}{self._error_model_remedy()}a coarse model closer to the fine one"
                f"{self._smaller_rate_remedy(k - 1)}{dropped}.",
                KameleonWarning,
                stacklevel=3,
            )

    def _warn_costly_coarse_levels(self) -> None:
        """At the end of tuning: warn if a coarse model cost more per evaluation than the model level above
        it (the fine model above the finest): the levels are in the wrong order (``coarse_models`` go
        coarsest first), or a coarse model saves nothing. GP levels are not compared. Where none does,
        the levels' total times are (:meth:`_warn_coarse_time_above_fine`)."""
        timed = [
            (f"coarse_models[{k}]", level) for k, level in enumerate(self._model_levels)
        ] + [("the fine model (the model in context)", self._fine_level)]
        costly = False
        for (name, level), (above, level_above) in zip(timed, timed[1:]):
            if min(level.timing.calls, level_above.timing.calls) < TIMED_EVALS:
                continue
            cost, cost_above = level.timing.typical, level_above.timing.typical
            if cost <= COSTLIER * cost_above or cost - cost_above < COSTLIER_BY:
                continue
            remedy = (
                "reverse coarse_models: they go coarsest (cheapest) first"
                if level_above is not self._fine_level
                else f"a coarse model cheaper than the fine one (or sample without {name})"
            )
            self._warnings.warn(
                f"MLDA: in tuning an evaluation of {name} took {1e3 * cost:.3g} ms (the median), "
                f"{cost / cost_above:.1f} times one of {above} ({1e3 * cost_above:.3g} ms), the level above "
                f"it. A coarse level pays only when it is cheaper than the level it screens for: {remedy}. "
                "The draws stay exact.",
                KameleonWarning,
                stacklevel=3,
            )
            costly = True
        if not costly:
            self._warn_coarse_time_above_fine(timed)

    def _warn_coarse_time_above_fine(self, timed) -> None:
        """At the end of tuning: warn if the coarse models took more of tuning's time than the fine model
        (each cheaper per evaluation, but evaluated many times per fine evaluation): MLDA then saves fine
        evaluations, not time, unless its ESS per fine evaluation is far above a one-level sampler's (a new
        user's ODE, a coarse solve a quarter of the fine one, 5 per fine: 2.2 times the fine time, and
        MLDA gave 5.1 ESS per second against KameleonMetropolis's 6.7 and GP-DA-MH's 14.5)."""
        fine = self._fine_level.timing
        coarse = [(name, level.timing) for name, level in timed[:-1]]
        if fine.calls < TIMED_EVALS or any(t.calls < TIMED_EVALS for _, t in coarse):
            return
        seconds = sum(t.seconds for _, t in coarse)
        if seconds <= COARSE_TIME_SHARE * fine.seconds or seconds - fine.seconds < COARSE_EXCESS * fine.calls:
            return
        levels = "; ".join(f"{name}: {t.calls} evaluations of {1e3 * t.typical:.3g} ms" for name, t in coarse)
        share = seconds / fine.seconds
        self._warnings.warn(
            f"MLDA: in tuning the coarse models took {share:.1f} times the fine model's time ({levels}; "
            f"against {fine.calls} fine evaluations of {1e3 * fine.typical:.3g} ms; medians"
            f"{self._which_chain('; chain {}')}), so each fine "
            f"evaluation costs MLDA about {1 + share:.1f} times its own time: against a sampler whose time "
            f"is its fine evaluations, MLDA is faster on the clock only where its ESS per fine evaluation is "
            f"over {1 + share:.1f} times that sampler's (less against one with costs of its own, such as "
            "GPDelayedAcceptanceMH's GP). Compare ESS per second with GPDelayedAcceptanceMH or "
            "KameleonMetropolis on your model, or give MLDA a cheaper coarse model. The draws stay exact.",
            KameleonWarning,
            stacklevel=4,
        )

    def _in_the_tails(self) -> str:
        """Where the chain sits far below the best fine log density it has evaluated (beyond the posterior
        bulk's range), the likelier cause of a low fine acceptance and its remedy, as a sentence; else "".

        A new user's chain started at far initvals (``start="initial_point"``) stopped at a fine log density
        of -433 against the mode's -106, where the coarse model (rounded data) lay 49 nats below the fine
        one, against 2 in the posterior: the fine level rejected every subchain's end, and the error model
        (a constant shift) and longer tuning changed nothing; the start search did."""
        chain = self._chain
        own = -math.inf if chain.current is None else chain.current.at(self.n_levels - 1)
        best = max(self._fine_level.best, own)
        if not own < best - bulk_log_density_range(self.dim):
            return ""
        start = (
            "let the start search find the posterior (start='search', the default)"
            if self.start == "initial_point" and not self._target.has_estimates
            else "pass initvals nearer the posterior"
        )
        if self._narrower_noise:  # the coarse model falls off faster everywhere: no start frees the chain
            start = f"give every coarse model a noise sd at least the fine one's, or {start}"
        return (
            f"The chain sits at a fine log density of {own:.6g}, {best - own:.3g} below the best it has "
            f"evaluated ({best:.6g}), in the tails, where a coarse model that falls off faster than the fine "
            "one makes the fine level reject every subchain's end however close the posteriors are; neither "
            f"the error model nor longer tuning frees it: {start}. "
        )

    def _stuck_remedy(self) -> str:
        """MLDA's likeliest cause of a stuck chain is a coarse posterior far from the fine one, or (when few
        of the stuck iterations reached the fine level) a coarse or middle level that does not move."""
        error_model = f"{self._noise_remedy()}{self._error_model_remedy()}"
        rates = "" if max(self.subsampling_rates) == 1 else ", or smaller subsampling_rates"
        judged = self._chain.judged_since_move
        tails = self._in_the_tails()

        def after_tails(sentence: str) -> str:
            return f"{tails}Otherwise, {sentence[0].lower()}{sentence[1:]}" if tails else sentence

        if judged < STUCK_DRAWS // 2:
            # A new user's three levels without the error model: 36 fine evaluations in a whole run, the
            # middle level rejecting; "the finest level's acceptance" pointed at the wrong level.
            stopped = "the coarse subchains did not move" if self.n_levels == 2 else (
                "the coarse subchains did not move, or a middle level rejected their ends (its "
                "level{k}_accept_rate statistic)"
            )
            return after_tails(
                f"Only {judged} of these iterations reached the fine level: {stopped}, so a coarse "
                f"posterior is far from the one above it. Try {error_model}coarse models closer to the fine "
                f"one{rates}; otherwise increase `tune`."
            )
        return after_tails(
            f"With MLDA the likeliest cause is a coarse posterior far from the fine one ({judged} of "
            f"these proposals reached the fine level and it rejected them): try {error_model}a coarse model "
            f"closer to the fine one{rates}; otherwise increase `tune`."
        )

    def _check_coarse_start(self, point: LevelPoint, point_map_info, zero_too: bool = False) -> None:
        """A coarse density NaN at the chain's start (with ``zero_too``, -inf as well: where the chain
        starts after the start search) leaves it frozen there: say so, as for the fine one."""
        for k, level in enumerate(self._model_levels):
            position = self._coarse_levels.index(level)
            value = point.at(position)
            if math.isnan(value) or (zero_too and value == -math.inf):
                raise ValueError(
                    f"MLDA: coarse_models[{k}]'s log density at the current point is {value} "
                    f"({self._target.describe_start(point.x, point_map_info)}), where the fine model's is "
                    f"{point.at(self.n_levels - 1):.6g}. The chain cannot move from a point where a coarse "
                    "density is NaN or zero (-inf): pass `initvals` to pm.sample where every model is "
                    "finite, and make the coarse model finite wherever the fine posterior has mass (check it "
                    "with coarse_model.point_logps())."
                )
            level.failed_at = None

    def _check_coarse_failure(self) -> None:
        """After tuning, where a coarse density was NaN or -inf, look at the fine one (up to
        FAILURE_CHECKS times a chain, one fine evaluation each, counted in ``logp_evals``): if it is
        within the posterior bulk's range of the chain's own (:func:`bulk_log_density_range` below it, or
        above), the draws miss part of the posterior, silently, so warn once a chain.

        Not during tuning: a new user's start search and walk-in met coarse failures in the prior's tails
        (fine log densities -507 to -17 600 against the posterior's +102), and with one warning a chain
        those used it up while a coarse model NaN in 27% of the posterior went unreported."""
        chain = self._chain
        for k, level in enumerate(self._model_levels):
            failed, level.failed_at = level.failed_at, None
            if failed is None or self.tune or chain.failure_checks >= FAILURE_CHECKS:
                continue
            x, coarse = failed
            chain.failure_checks += 1
            fine = self._target.evaluate(x).logp
            own = chain.current.at(self.n_levels - 1)
            if not fine >= own - bulk_log_density_range(self.dim):  # NaN, -inf or far in the tails
                continue
            chain.failure_checks = FAILURE_CHECKS  # once a chain
            self._warnings.warn(
                f"MLDA: coarse_models[{k}]'s log density is {coarse} at {self._describe_point(x)}, "
                f"where the fine model's is {fine:.6g}, within the posterior's range of the chain's own "
                f"({own:.6g}). Every proposal there is rejected before the fine model sees it, so the draws "
                "miss that part of the posterior (they are exact only where each coarse density is finite "
                "wherever the fine one is: a coarse model may be as wrong as you like, but not NaN or zero "
                "where the fine posterior has mass). Make the coarse model finite there (a solver that fails "
                "where the fine one does not: loosen its tolerance or catch the failure and return a rough "
                "value).",
                KameleonWarning,
                stacklevel=3,
            )


# ------------------------------------------------------------------ the options and the coarse models
#: Most coarsest-level steps one iteration may run (the product of the subsampling rates).
MAX_COARSEST_STEPS = 10**6


def checked_rates(rates, n_coarse: int) -> list[int]:
    """One subchain length per coarse level, each an integer >= 1, whose product is at most
    :data:`MAX_COARSEST_STEPS`."""
    if isinstance(rates, str) or rates is None:
        raise ValueError(f"MLDA: subsampling_rates must be an integer >= 1 or a list of them, got {rates!r}.")
    values = [rates] * n_coarse if np.ndim(rates) == 0 else list(rates)
    if len(values) != n_coarse:
        raise ValueError(
            f"MLDA: subsampling_rates must be one number or one per coarse model ({n_coarse}), "
            f"got {len(values)}: {rates!r}."
        )
    for value in values:
        if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool):
            raise ValueError(f"MLDA: subsampling_rates must be integers >= 1, got {rates!r}.")
        if not float(value).is_integer() or value < 1:
            raise ValueError(f"MLDA: subsampling_rates must be integers >= 1, got {rates!r}.")
    steps = math.prod(int(v) for v in values)
    if steps > MAX_COARSEST_STEPS:
        raise ValueError(
            f"MLDA: subsampling_rates {rates!r} make every iteration run {steps:.3g} steps on the coarsest "
            f"level (their product), more than {MAX_COARSEST_STEPS:.0e}: the first iteration would not end. "
            "Subchains of 2-20 steps per level are usual; a coarse model that needs longer ones is too far "
            "from the fine one (adaptive_error_model=True corrects a bias)."
        )
    return [int(v) for v in values]


def checked_coarse_models(coarse_models, model) -> list:
    """The coarse models as a list: ``pm.Model`` objects other than the fine one, each with a likelihood
    (or GP levels, checked by :func:`checked_gp_positions`)."""
    if isinstance(coarse_models, pm.Model | GPLevel):
        coarse_models = [coarse_models]
    coarse_models = list(coarse_models) if coarse_models is not None else []
    if not coarse_models:
        raise ValueError(
            "MLDA needs at least one coarse model: MLDA(coarse_models=[coarse]), a cheaper pm.Model with "
            "the same free variables as the model in context (coarsest first, if several)."
        )
    for k, coarse in enumerate(coarse_models):
        if isinstance(coarse, GPLevel):
            continue
        if not isinstance(coarse, pm.Model):
            raise TypeError(
                f"MLDA: coarse_models[{k}] must be a pm.Model or a GPLevel, got {type(coarse).__name__}."
            )
        if getattr(coarse, "parent", None) is not None:
            raise ValueError(
                f"MLDA: coarse_models[{k}] was built inside another model's `with` block (it is a "
                "sub-model of it, its variables prefixed): build each coarse model on its own, outside "
                "the fine model's `with`."
            )
        if coarse is model:
            raise ValueError(
                f"MLDA: coarse_models[{k}] is the model in context itself; give a cheaper model."
            )
        earlier = [j for j, other in enumerate(coarse_models[:k]) if other is coarse]
        if earlier:
            # A level equal to the one below accepts every subchain end: its evaluations buy nothing.
            raise ValueError(
                f"MLDA: coarse_models[{k}] is the same model as coarse_models[{earlier[0]}]; each level must "
                "be a different model, from the cheapest to the most accurate (list it once)."
            )
        if not coarse.observed_RVs and not coarse.potentials:
            raise ValueError(
                f"MLDA: coarse_models[{k}] has no likelihood (no observed variables, no potentials): "
                "its density would be the prior alone, a useless approximation of the posterior."
            )
        _warn_if_other_data(coarse, model, k)
    return coarse_models


def _observed_data_container(model, rv) -> np.ndarray | None:
    """The values of the ``pm.Data`` container ``rv`` observes in ``model``; None for constant data (a
    coarse model may observe deliberately other constants: a test's biased level does)."""
    value = model.rvs_to_values.get(rv)
    if not hasattr(value, "get_value"):
        return None
    return np.asarray(value.get_value())


def _warn_if_other_data(coarse, model, k: int) -> None:
    """Warn where an observed variable of the model in context and one of ``coarse`` of the same name and
    shape observe ``pm.Data`` containers with other values: ``pm.set_data`` on one level only (a new
    user's acceptance fell to 0 and the warnings blamed the coarse model's distance)."""
    theirs = {rv.name: rv for rv in coarse.observed_RVs}
    for rv in model.observed_RVs:
        other = theirs.get(rv.name)
        if other is None:
            continue
        mine, data = _observed_data_container(model, rv), _observed_data_container(coarse, other)
        if mine is None or data is None or mine.shape != data.shape or mine.dtype.kind not in "biuf":
            continue
        same = mine == data
        if mine.dtype.kind == "f" and data.dtype.kind == "f":
            same |= np.isnan(mine) & np.isnan(data)
        if not same.all():
            warnings.warn(
                f"MLDA: the data observed by {rv.name!r} differ between the model in context and "
                f"coarse_models[{k}] ({np.count_nonzero(~same)} of {mine.size} values): the coarse "
                "level then approximates another posterior, and the fine level rejects its proposals. Give "
                "every level the same data (after pm.set_data on one model, set it on the others too).",
                KameleonWarning,
                stacklevel=user_stacklevel(4),
            )


def checked_gp_positions(specs) -> None:
    """A GP level learns the next finer level's excess over the coarse model just below it: it needs one."""
    for k, spec in enumerate(specs):
        if not isinstance(spec, GPLevel):
            continue
        if k == 0:
            raise ValueError(
                "MLDA: a GPLevel corrects the coarse model below it, so it cannot be the coarsest level: "
                "give coarse_models=[coarse, GPLevel()]. With no coarse model, GPDelayedAcceptanceMH is the "
                "two-level sampler whose cheap level is a GP."
            )
        if isinstance(specs[k - 1], GPLevel):
            raise ValueError(
                f"MLDA: coarse_models[{k - 1}] and coarse_models[{k}] are both GPLevel; a GP level corrects "
                "the coarse model below it, so put a pm.Model between them."
            )


def matching_value_vars(coarse, vars, model, k: int) -> list:
    """The coarse model's value variables for the fine block's ``vars`` (same names, shapes and order),
    after checking that it has every free variable of the fine model, each sampled alike."""
    fine_point = model.initial_point()
    coarse_point = coarse.initial_point()
    coarse_values = {v.name: v for v in coarse.value_vars}
    fine_rvs = {v.name: model.values_to_rvs[v].name for v in model.value_vars}
    expected = sorted(fine_rvs.values())
    actual = sorted(coarse.values_to_rvs[v].name for v in coarse.value_vars)
    if expected != actual:
        raise ValueError(
            f"MLDA: coarse_models[{k}] must have the same free variables as the model in context: "
            f"expected {expected}, got {actual}."
        )
    # Every variable, in the block or not: the coarse model reads the others' values from the fine chain.
    for v in model.value_vars:
        if v.name not in coarse_values:
            rv = fine_rvs[v.name]
            theirs = next(c.name for c in coarse.value_vars if coarse.values_to_rvs[c].name == rv)
            raise ValueError(
                f"MLDA: variable {rv!r} is transformed differently in coarse_models[{k}] (sampled as "
                f"{theirs!r}) than in the model in context ({v.name!r}): give it the same prior "
                "support and transform in both."
            )
        shape, theirs = np.shape(fine_point[v.name]), np.shape(coarse_point[v.name])
        if shape != theirs:
            raise ValueError(
                f"MLDA: variable {fine_rvs[v.name]!r} has shape {theirs} in coarse_models[{k}] and "
                f"{shape} in the model in context."
            )
    block = {v.name for v in vars}
    others = [v for v in model.value_vars if v.name not in block]
    discrete = [v for v in others if v.dtype in discrete_types]
    continuous = [v for v in others if v.dtype not in discrete_types]
    _check_same_support(coarse, model, [*vars, *continuous], k)
    _check_same_discrete_support(coarse, model, discrete, k)
    return [coarse_values[v.name] for v in vars]


# Offsets from a discrete variable's initial value at which both levels' priors must agree on whether the
# value is possible (a coarse DiscreteUniform(0, 12) against the fine (0, 30) left the chain stuck).
_DISCRETE_OFFSETS = (-100, -30, -10, -3, -1, 0, 1, 3, 10, 30, 100)


def _check_same_discrete_support(coarse, model, discrete, k: int) -> None:
    """A discrete variable left to another step must have the same possible values at every level: where
    the coarse prior rules out a value the fine one allows, the coarse subchain cannot move while the
    other step keeps the variable there. Checked at the initial value and at offsets from it (the other
    variables at their initial values)."""
    fine_point, coarse_point = model.initial_point(), coarse.initial_point()
    for value in discrete:
        name = model.values_to_rvs[value].name
        fine_fn = model.compile_logp(vars=[model[name]])
        coarse_fn = coarse.compile_logp(vars=[coarse[name]])
        start = np.asarray(fine_point[value.name])
        for offset in _DISCRETE_OFFSETS:
            candidate = (start + offset).astype(start.dtype)
            with np.errstate(all="ignore"):
                fine_ok = np.isfinite(fine_fn({**fine_point, value.name: candidate}))
                coarse_ok = np.isfinite(coarse_fn({**coarse_point, value.name: candidate}))
            if fine_ok != coarse_ok:
                where, other = ("the model in context", f"coarse_models[{k}]")
                if coarse_ok:
                    where, other = other, where
                raise ValueError(
                    f"MLDA: the discrete variable {name!r} can take the value {np.ravel(candidate)[:3]} in "
                    f"{where} but not in {other}: its prior's support differs. Give it the same possible "
                    "values at every level (the coarse model may ignore it in its likelihood)."
                )


def _check_same_support(coarse, model, vars, k: int) -> None:
    """The same value-space point must mean the same parameter values at both levels: a transform with
    other parameters (``Uniform(0, 10)`` against ``Uniform(0, 20)``: one interval transform name, two
    maps) would make the coarse density a distorted copy of the fine one."""
    names = [model.values_to_rvs[v].name for v in vars]

    def constrained(m, inputs):
        """The free variables' values as functions of the value variables (the transforms' backward maps)."""
        by_name = {var.name: var for var in m.unobserved_value_vars}
        return m.compile_fn([by_name[n] for n in names], inputs=inputs, on_unused_input="ignore",
                            point_fn=False)

    fine_fn = constrained(model, vars)
    coarse_fn = constrained(coarse, [coarse.rvs_to_values[coarse[n]] for n in names])
    start = model.initial_point()
    for shift in (0.0, 0.7, -1.3):
        point = [np.asarray(start[v.name], dtype=float) + shift for v in vars]
        with np.errstate(all="ignore"):
            fine_values, coarse_values = fine_fn(*point), coarse_fn(*point)
        for name, a, b in zip(names, fine_values, coarse_values, strict=True):
            if not np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True):
                raise ValueError(
                    f"MLDA: variable {name!r} maps the same sampled value to {np.ravel(b)[:3]} in "
                    f"coarse_models[{k}] and to {np.ravel(a)[:3]} in the model in context: its prior's "
                    "support (a bound) or transform differs. Give it the same support at every level."
                )
