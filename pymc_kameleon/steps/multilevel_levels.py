r"""The levels of :class:`~pymc_kameleon.MLDA`: the coarse models compiled on the fine step's raveled block
(checked against the fine one by :mod:`.multilevel_checks`), the fine level, and the adaptive error model
that corrects their bias.

**Adaptive error model** (state-independent; Cui, Fox and O'Sullivan 2011, as the MLDA paper uses it).
For an observed variable :math:`y \sim \mathcal N(F_\ell(\theta), \sigma)` that every level has (a
``pm.Normal`` of the same name and shape), level :math:`\ell < L` models the fine-minus-coarse output
:math:`B_\ell(\theta) = F_L(\theta) - F_\ell(\theta)` as a constant :math:`\mu_{B,\ell}` estimated during
tuning, and its likelihood becomes :math:`y \sim \mathcal N(F_\ell(\theta) + \mu_{B,\ell}, \sigma)`. The
estimate telescopes over adjacent levels, as in the MLDA paper: :math:`\mu_{B,\ell} = \sum_{k \ge \ell}
\bar D_k`, where :math:`\bar D_k` is the mean of :math:`F_{k+1} - F_k` over recent states of level
:math:`k + 1`'s chain (for the finest coarse level, over the points where the fine model was evaluated),
so a middle level teaches the one below it in every iteration. The correction only changes the coarse
densities, so the finest chain stays exact; it is frozen after tuning, so the coarse densities are fixed
functions and every level's kernel keeps its reversibility. With ``error_covariance=True`` the coarse
likelihood also takes the error's covariance, as the paper does:
:math:`y \sim \mathcal N(F_\ell(\theta) + \mu_{B,\ell}, \operatorname{diag}(\sigma^2) + \Sigma_{B,\ell})`
over all corrected observations together, :math:`\Sigma_{B,\ell}` the sum of the adjacent differences'
sample covariances (one Cholesky factorisation of the observations' covariance per coarse evaluation).
"""

from __future__ import annotations

import math
import time
import warnings
from collections import deque

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements

from pymc_kameleon.core.linalg import same_array
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.pseudo_marginal import pseudo_marginal_terms
from pymc_kameleon.steps.multilevel_checks import matching_value_vars
from pymc_kameleon.steps.session_warnings import user_stacklevel
from pymc_kameleon.steps.target_density import (
    Evaluation,
    TargetDensity,
    note_model_error,
    refuse_random_log_density,
)

__all__ = [
    "CoarseLevel",
    "ErrorModel",
    "FineLevel",
    "coarse_level",
    "correctable_names",
    "corrected_names",
    "fine_outputs",
    "narrower_noise",
]

#: A coarse observed pm.Normal whose constant noise sd is below NARROWER_NOISE times the fine one's is named
#: (:func:`narrower_noise`): the guide asks for a coarse noise sd no smaller than the fine one's.
NARROWER_NOISE = 0.999

#: The error model's estimate for each pair of adjacent levels is the mean of its last ERROR_MODEL_MEMORY
#: differences; the coarse densities take it after the first ERROR_MODEL_FIRST_UPDATE differences, then every
#: ERROR_MODEL_UPDATE new ones, during tuning: early enough that the base proposal tunes on the
#: corrected coarse model (a chain whose coarse model was 5 posterior sds off otherwise accepted too
#: few moves to correct anything before the end of tuning).
ERROR_MODEL_MEMORY = 200
ERROR_MODEL_FIRST_UPDATE = 10
ERROR_MODEL_UPDATE = 50
#: Evaluations of a level whose times are kept (:class:`CallTiming`: the median of the last ones).
TIMED_CALLS_KEPT = 1000


class CallTiming:
    """A level's typical wall time per evaluation: the median of its last :data:`TIMED_CALLS_KEPT`
    evaluations, leaving out each function's first call (on PyMC 6 it compiles the function: 6.6 s for a
    conjugate normal's log density). A median, not a mean: on a loaded machine a call the scheduler
    preempts takes a time slice (milliseconds) more, and a few of those among cheap calls made a mean
    tell MLDA that a free coarse model cost more than the fine one; wall time, not CPU time, so that a
    model that waits for another process or a solver's threads is timed as the user waits for it."""

    def __init__(self):
        self.calls = 0
        self._recent = deque(maxlen=TIMED_CALLS_KEPT)
        self._called = set()

    def add(self, fn, seconds: float) -> None:
        if id(fn) in self._called:
            self._recent.append(seconds)
            self.calls += 1
        else:
            self._called.add(id(fn))

    def count_from_here(self) -> None:
        """Count calls from now on, keeping the times per call (the start search's calls are one-off: a new
        user's tune=150 was told the coarse model took 1.3 times the fine model's time, from 1406 coarse
        calls of which 750 were the subchains')."""
        self.calls = 0

    @property
    def typical(self) -> float:
        """The median seconds per call (NaN before any call was timed)."""
        return float(np.median(self._recent)) if self._recent else math.nan

    @property
    def seconds(self) -> float:
        """The level's time in the calls timed, as :attr:`calls` typical ones."""
        return self.typical * self.calls if self.calls else 0.0


class CoarseLevel:
    r"""A coarse model's log density on the fine step's raveled block, counting its evaluations (``n_evals``:
    log densities and outputs, each a run of the model's forward computation) and timing them
    (``timing``: MLDA compares the levels' costs when tuning ends).

    With an error model, the corrected observed terms use ``bias`` (a shared variable, zeros until the
    error model sets it), with ``error_covariance`` also ``covariance`` (the same, a matrix), and
    ``outputs(x)`` returns the level's model outputs :math:`F_\ell(x)`.

    In a ``CompoundStep`` the model's variables outside the block are PyTensor shared variables
    (``shared``, by value-variable name), set to the fine chain's values by :meth:`follow`.
    """

    def __init__(self, fn, outputs_fn=None, bias=None, covariance=None, shared=None):
        self._fn = fn
        self._outputs_fn = outputs_fn
        self.bias = bias
        self.covariance = covariance
        self.shared = dict(shared or {})
        self.n_evals = 0
        self.timing = CallTiming()
        self.failed_at = None  # (x, value) where the log density was last NaN or -inf, until MLDA has looked
        self.coordinate_names = None  # for the note on an error the model raised (set by MLDA)

    def start_chain(self) -> None:
        """Forget the last chain's timing and failure: with ``cores=1`` PyMC samples the chains one after
        another with this one level, and a chain's end-of-tuning checks judge its own tuning (the second
        chain's timing had counted the first chain's tuning and draws too)."""
        self.timing = CallTiming()
        self.failed_at = None

    def follow(self, values: dict) -> None:
        """Set the variables outside the block to ``values`` (value-variable name -> value): the
        other steps' current values."""
        for name, variable in self.shared.items():
            variable.set_value(values[name])

    def log_density(self, x) -> float:
        self.n_evals += 1
        start = time.perf_counter()
        try:
            value = float(self._fn(np.asarray(x, dtype=float)))
        except Exception as err:
            note_model_error(err, "MLDA (a coarse level)", x, self.coordinate_names, coarse=True)
            raise
        self.timing.add(self._fn, time.perf_counter() - start)
        if not value > -np.inf:  # NaN or -inf: MLDA checks the fine model there (MLDA._check_coarse_failure)
            self.failed_at = (np.array(x, dtype=float, copy=True), value)
        return value

    def evaluate(self, x) -> Evaluation:
        """The log density at ``x`` as an evaluation (what the start search reads)."""
        logp = self.log_density(x)
        return Evaluation(logp, logp)

    def outputs(self, x) -> np.ndarray:
        r"""The model outputs :math:`F_\ell(x)` (for the error model: a forward run, in ``n_evals``)."""
        self.n_evals += 1
        start = time.perf_counter()
        outputs = np.asarray(self._outputs_fn(np.asarray(x, dtype=float)), dtype=float)
        self.timing.add(self._outputs_fn, time.perf_counter() - start)
        return outputs


class FineLevel:
    """The finest level's log density (the model in context), keeping its last evaluation: with a
    pseudo-marginal term, the estimate of an accepted proposal is the one the chain keeps. Times its
    evaluations (``timing``), as :class:`CoarseLevel` does."""

    def __init__(self, target: TargetDensity):
        self.target = target
        self._last = None  # (x, Evaluation)
        self.timing = CallTiming()
        self.best = -math.inf  # the highest log density evaluated (how far down a stuck chain sits)

    def __call__(self, x) -> float:
        start = time.perf_counter()
        evaluation = self.target.evaluate(x)
        self.timing.add(self.target, time.perf_counter() - start)
        self._last = (x, evaluation)
        if evaluation.logp > self.best:  # NaN never
            self.best = evaluation.logp
        return evaluation.logp

    def evaluation_at(self, x) -> Evaluation | None:
        """The last evaluation, if it was at ``x`` (None otherwise)."""
        if self._last is None or not same_array(self._last[0], x):
            return None
        return self._last[1]


class ErrorModel:
    r"""The adaptive error model's state for one chain: recent differences between adjacent model levels.

    Model level :math:`j` (coarsest first; the fine model is the last) keeps :math:`D_j = F_{j+1} - F_j`
    at the states of model level :math:`j + 1`'s chain (the points where the fine model was evaluated,
    for the finest coarse model), and is corrected by the telescoping sum
    :math:`\mu_{B,j} = \sum_{i \ge j} \bar D_i`, an estimate of :math:`F_L - F_j` (the MLDA paper's
    construction, as tinyDA's): a middle level steps in every iteration, so the level below it learns in
    every iteration, also while the middle level rejects most proposals and the fine model is rarely
    evaluated. With two levels this is the fine-minus-coarse mean.

    Parameters
    ----------
    levels : list of CoarseLevel
        The coarse models' levels (coarsest first), each with ``outputs`` and ``bias``.
    fine_outputs : callable
        :math:`x \mapsto F_L(x)` (the fine model's outputs, raveled as the levels' are).
    """

    def __init__(self, levels, fine_outputs):
        self.levels = levels
        self.fine_outputs = fine_outputs
        self.differences = [deque(maxlen=ERROR_MODEL_MEMORY) for _ in levels]
        self.n_recorded = [0] * len(levels)  # differences recorded per level in the chain (the last kept)
        self.since_update = 0
        self.n_updates = 0

    def reset(self) -> None:
        """A new chain: no differences, no correction."""
        for level, kept in zip(self.levels, self.differences):
            kept.clear()
            level.bias.set_value(np.zeros_like(level.bias.get_value()))
            if level.covariance is not None:
                level.covariance.set_value(np.zeros_like(level.covariance.get_value()))
        self.n_recorded = [0] * len(self.levels)
        self.since_update = 0
        self.n_updates = 0

    def record(self, x, below: int | None = None) -> bool:
        """Record the difference between model level ``below + 1`` and ``below`` at ``x``, a state of
        level ``below + 1``'s chain (``below`` None: the finest model level, ``x`` where the fine model
        was evaluated; one more forward run of each of the two); returns whether the coarse densities were
        updated (then every cached coarse value is stale). A difference that is not finite (a forward run
        that failed) is not kept."""
        finest = len(self.levels) - 1
        below = finest if below is None else int(below)
        above = self.fine_outputs(x) if below == finest else self.levels[below + 1].outputs(x)
        difference = above - self.levels[below].outputs(x)
        if not np.all(np.isfinite(difference)):
            return False
        self.differences[below].append(difference)
        self.n_recorded[below] += 1
        self.since_update += 1
        due = ERROR_MODEL_FIRST_UPDATE if self.n_updates == 0 else ERROR_MODEL_UPDATE
        if self.since_update < due:
            return False
        self.update()
        return True

    def update(self) -> bool:
        """Set each level's correction to the sum of the mean differences of it and every level above it
        (and, with ``error_covariance``, of their covariances, as if independent); whether any was set."""
        self.since_update = 0
        self.n_updates += 1
        changed = False
        mean = covariance = None
        for level, kept in reversed(list(zip(self.levels, self.differences))):
            if kept:
                differences = np.array(kept)
                mean = _summed(mean, np.mean(differences, axis=0))
                if level.covariance is not None and len(kept) >= 2:
                    covariance = _summed(covariance, np.atleast_2d(np.cov(differences, rowvar=False)))
            if mean is not None:
                level.bias.set_value(mean)
                changed = True
            if level.covariance is not None and covariance is not None:
                level.covariance.set_value(covariance)
        return changed


def _summed(total, term):
    """``total + term``, or ``term`` itself where there is no total yet (no rounding for a single term)."""
    return term if total is None else total + term


# ---------------------------------------------------------------------------- building the levels
def _normal_observed(model) -> dict:
    """The model's observed ``pm.Normal`` variables by name."""
    return {rv.name: rv for rv in model.observed_RVs if type(rv.owner.op).__name__ == "NormalRV"}


def _found(model, name: str) -> str:
    """What ``model`` has under ``name`` where it has no observed ``pm.Normal`` of that name."""
    rv = next((rv for rv in model.observed_RVs if rv.name == name), None)
    if rv is None:
        return "none"
    return f"a {type(rv.owner.op).__name__.removesuffix('RV')}, not a pm.Normal,"


def _observed_shape(value) -> tuple:
    """The shape of an observed variable's data (a constant, or a ``pm.Data`` shared variable)."""
    if hasattr(value, "data"):
        return np.shape(value.data)
    return np.shape(value.get_value())


def correctable_names(fine, coarse_models) -> list[str]:
    """The observed variables an error model would correct (:func:`corrected_names`, without its error
    and warning): where there is none, the warnings do not suggest one (a new user's coarse model on a
    tenth of the data was told to turn it on, and then got the error)."""
    return _matching_normals(fine, coarse_models)[0]


def corrected_names(fine, coarse_models) -> list[str]:
    """The observed variables the error model corrects: ``pm.Normal`` in every level, same name and shape."""
    names, seen = _matching_normals(fine, coarse_models)
    if not names:
        found = "; ".join(seen.values()) if seen else "the model in context has no observed pm.Normal"
        raise ValueError(
            "MLDA(adaptive_error_model=True) corrects observed pm.Normal variables that the model in context "
            f"and every coarse model have under the same name and shape; there is none ({found}). Write the "
            "likelihood as pm.Normal(name, mu=forward_model(...), sigma=..., observed=data) at every level, "
            "observing the same data."
        )
    skipped = [rv.name for rv in fine.observed_RVs if rv.name not in names]
    if skipped:
        # A new user's fine model observed z where the coarse one observed z_coarse: only y was corrected,
        # 0.5% of iterations moved, and the warnings blamed the coarse model's distance.
        details = "; ".join(seen[name] for name in skipped if name in seen)
        warnings.warn(
            f"MLDA's adaptive error model corrects {names} but not {skipped}: it corrects "
            "observed pm.Normal variables that the model in context and every coarse model have under the "
            f"same name and shape{f' ({details})' if details else ' (not a pm.Normal in the model)'}. "
            "Rename or reshape them to match, or the coarse levels keep their error there.",
            KameleonWarning,
            stacklevel=user_stacklevel(4),
        )
    return names


def _matching_normals(fine, coarse_models) -> tuple[list[str], dict]:
    """The observed ``pm.Normal`` names every level has with the same shape, and for each of the fine
    model's, what every level has under its name (for the messages)."""
    names, seen = [], {}  # seen: each fine pm.Normal's name -> what every level has under it
    coarse_normals = [_normal_observed(coarse) for coarse in coarse_models]
    for name, rv in _normal_observed(fine).items():
        shape = _observed_shape(fine.rvs_to_values[rv])
        theirs = [normals.get(name) for normals in coarse_normals]
        shapes = [
            None if t is None else _observed_shape(c.rvs_to_values[t]) for t, c in zip(theirs, coarse_models)
        ]
        if all(s == shape for s in shapes):
            names.append(name)
        seen[name] = f"{name!r} {shape} in the model, " + ", ".join(
            f"{_found(c, name) if s is None else s} in coarse_models[{k}]"
            for k, (s, c) in enumerate(zip(shapes, coarse_models)))
    return names, seen


def narrower_noise(fine, coarse_models) -> list[tuple[int, str, float]]:
    """``(k, name, ratio)`` for each observed ``pm.Normal`` that ``coarse_models[k]`` has with a constant
    noise sd smaller than the fine model's constant one (``ratio``: the smallest of coarse sd / fine sd
    over the observations). Such a coarse likelihood makes the coarse posterior narrower than the fine
    one: a new user's coarse noise sd of 0.5 and 0.6 times the fine one's left chains stuck, and the
    warnings named only "a coarse model closer to the fine one". Sds that depend on free variables are
    not compared."""
    found = []
    fine_normals = _normal_observed(fine)
    fine_sds = {}  # evaluated once, whatever the number of coarse models
    for k, coarse in enumerate(coarse_models):
        for name, rv in _normal_observed(coarse).items():
            if name not in fine_normals:
                continue
            if name not in fine_sds:
                fine_sds[name] = _constant_sd(fine, fine_normals[name])
            sds = [fine_sds[name], _constant_sd(coarse, rv)]
            if any(sd is None for sd in sds):
                continue
            if sds[0].shape != sds[1].shape:  # other data (a subsample): comparable where each sd is one
                if sds[0].size == 0 or sds[1].size == 0 or np.ptp(sds[0]) > 0 or np.ptp(sds[1]) > 0:
                    continue
                sds = [sd.ravel()[:1] for sd in sds]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = float(np.min(sds[1] / sds[0]))
            if ratio < NARROWER_NOISE:
                found.append((k, name, ratio))
    return found


def _constant_sd(model, rv):
    """The noise sd of an observed ``pm.Normal``, broadcast to its data's shape, or None where it depends on
    a free variable (or its shape does not broadcast)."""
    sd = rv.owner.op.dist_params(rv.owner)[1]
    if any(var in model.value_vars or var in model.free_RVs for var in pytensor.graph.ancestors([sd])):
        return None
    try:
        return np.broadcast_to(np.asarray(sd.eval(), dtype=float), _observed_shape(model.rvs_to_values[rv]))
    except (ValueError, TypeError):
        return None


def _outputs(model, names):
    """The means of the named observed ``pm.Normal`` variables at their data's shape, raveled and
    concatenated (value space)."""
    rvs = [model[name] for name in names]
    means = model.replace_rvs_by_values([rv.owner.op.dist_params(rv.owner)[0] for rv in rvs])
    shaped = [pt.broadcast_to(m, _observed_shape(model.rvs_to_values[rv])) for m, rv in zip(means, rvs)]
    return pt.concatenate([pt.flatten(m) for m in shaped])


def _joined(model, outputs, vars, compile_kwargs, shared=None):
    """``outputs`` compiled as functions of the raveled ``vars``; ``shared`` maps the model's other value
    variables to the shared variables standing for them (none when ``vars`` are all of them)."""
    point = model.initial_point()
    joined, inarray = join_nonshared_inputs(
        point=point, outputs=outputs, inputs=vars, shared_inputs=shared or {}
    )
    fns = []
    for out in joined:
        fn = compile_pytensor([inarray], out, **dict(compile_kwargs or {}))
        fn.trust_input = True
        fns.append(fn)
    return fns


def fine_outputs(model, vars, names, compile_kwargs, shared=None):
    r""":math:`x \mapsto F_L(x)`: the fine model's outputs of the corrected variables (``shared``: the fine
    step's shared variables for the value variables outside its block)."""
    (fn,) = _joined(model, [_outputs(model, names)], vars, compile_kwargs, shared)
    return lambda x: np.asarray(fn(np.asarray(x, dtype=float)), dtype=float)


def coarse_level(coarse, vars, model, compile_kwargs, k: int, corrected=(), covariance=False) -> CoarseLevel:
    """The coarse model's density on the fine block (the same value variables, names, shapes and order),
    its named observed ``pm.Normal`` terms with a correction of their mean if ``corrected`` (and of their
    covariance, all of them jointly, if ``covariance``)."""
    coarse_vars = matching_value_vars(coarse, vars, model, k)
    if pseudo_marginal_terms(coarse):
        raise ValueError(
            f"MLDA: coarse_models[{k}] has a PseudoMarginalPotential; every level's density must be exact "
            "(a random coarse density breaks the subchains' reversibility)."
        )
    bias, error_cov, outputs = None, None, []
    if corrected:
        terms = [coarse[name] for name in corrected]
        others = [rv for rv in coarse.basic_RVs if rv.name not in corrected]
        rest = coarse.logp(vars=[*others, *coarse.potentials])
        means = coarse.replace_rvs_by_values([rv.owner.op.dist_params(rv.owner)[0] for rv in terms])
        sds = coarse.replace_rvs_by_values([rv.owner.op.dist_params(rv.owner)[1] for rv in terms])
        size = int(sum(np.prod(_observed_shape(coarse.rvs_to_values[rv])) for rv in terms))
        bias = pytensor.shared(np.zeros(size), name=f"mlda_bias_{k}")
        logp, start, residuals, scales = rest, 0, [], []
        for rv, mean, sd in zip(terms, means, sds):
            observed = coarse.rvs_to_values[rv]
            n = int(np.prod(_observed_shape(observed)))
            shift = bias[start : start + n].reshape(observed.shape)
            if covariance:
                residuals.append(pt.flatten(observed - (mean + shift)))  # shift has the data's shape
                scales.append(pt.flatten(pt.broadcast_to(sd, observed.shape)))
            else:
                logp = logp + pm.logp(pm.Normal.dist(mean + shift, sd), observed).sum()
            start += n
        if covariance:
            error_cov = pytensor.shared(np.zeros((size, size)), name=f"mlda_error_covariance_{k}")
            scale = pt.concatenate(scales)
            joint = pm.MvNormal.dist(pt.zeros(size), cov=pt.diag(scale**2) + error_cov)
            logp = logp + pm.logp(joint, pt.concatenate(residuals))
        outputs = [_outputs(coarse, list(corrected))]
    else:
        logp = coarse.logp()
    # The variables outside the fine block (sampled by other steps of a CompoundStep) as shared inputs.
    shared = make_shared_replacements(coarse.initial_point(), coarse_vars, coarse)
    refuse_random_log_density([logp], f"MLDA: coarse_models[{k}]", coarse)
    fns = _joined(coarse, [logp, *outputs], coarse_vars, compile_kwargs, shared)
    by_name = {value.name: variable for value, variable in shared.items()}
    return CoarseLevel(fns[0], fns[1] if corrected else None, bias, error_cov, by_name)


# ---------------------------------------------------------------------------- checks of the input
