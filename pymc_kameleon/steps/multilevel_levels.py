r"""The levels of :class:`~pymc_kameleon.MLDA`: the coarse models checked against the fine one, compiled on
the fine step's raveled block, the fine level, and the adaptive error model that corrects their bias.

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

from collections import deque

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements

from pymc_kameleon.core.linalg import same_array
from pymc_kameleon.pseudo_marginal import pseudo_marginal_terms
from pymc_kameleon.steps.multilevel_gp import GPLevel
from pymc_kameleon.steps.target_density import Evaluation, TargetDensity

__all__ = [
    "CoarseLevel",
    "ErrorModel",
    "FineLevel",
    "checked_coarse_models",
    "checked_gp_positions",
    "checked_rates",
    "coarse_level",
    "corrected_names",
    "fine_outputs",
]

#: The error model's estimate for each pair of adjacent levels is the mean of its last ERROR_MODEL_MEMORY
#: differences; the coarse densities take it after the first ERROR_MODEL_FIRST_UPDATE differences, then every
#: ERROR_MODEL_UPDATE new ones, during tuning: early enough that the base proposal tunes on the
#: corrected coarse model (a chain whose coarse model was 5 posterior sds off otherwise accepted too
#: few moves to correct anything before the end of tuning).
ERROR_MODEL_MEMORY = 200
ERROR_MODEL_FIRST_UPDATE = 10
ERROR_MODEL_UPDATE = 50


class CoarseLevel:
    r"""A coarse model's log density on the fine step's raveled block, counting its evaluations (``n_evals``:
    log densities and outputs, each a run of the model's forward computation).

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
        self.failed_at = None  # (x, value) where the log density was last NaN or -inf, until MLDA has looked

    def follow(self, values: dict) -> None:
        """Set the variables outside the block to ``values`` (value-variable name -> value): the
        other steps' current values."""
        for name, variable in self.shared.items():
            variable.set_value(values[name])

    def log_density(self, x) -> float:
        self.n_evals += 1
        value = float(self._fn(np.asarray(x, dtype=float)))
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
        return np.asarray(self._outputs_fn(np.asarray(x, dtype=float)), dtype=float)


class FineLevel:
    """The finest level's log density (the model in context), keeping its last evaluation: with a
    pseudo-marginal term, the estimate of an accepted proposal is the one the chain keeps."""

    def __init__(self, target: TargetDensity):
        self.target = target
        self._last = None  # (x, Evaluation)

    def __call__(self, x) -> float:
        evaluation = self.target.evaluate(x)
        self._last = (x, evaluation)
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


def corrected_names(fine, coarse_models) -> list[str]:
    """The observed variables the error model corrects: ``pm.Normal`` in every level, same name and shape."""
    names, seen = [], []
    for name, rv in _normal_observed(fine).items():
        shape = _observed_shape(fine.rvs_to_values[rv])
        theirs = [_normal_observed(coarse).get(name) for coarse in coarse_models]
        shapes = [
            None if t is None else _observed_shape(c.rvs_to_values[t]) for t, c in zip(theirs, coarse_models)
        ]
        if all(s == shape for s in shapes):
            names.append(name)
        seen.append(f"{name!r} {shape} in the model, " + ", ".join(
            f"{_found(c, name) if s is None else s} in coarse_models[{k}]"
            for k, (s, c) in enumerate(zip(shapes, coarse_models))))
    if not names:
        found = "; ".join(seen) if seen else "the model in context has no observed pm.Normal"
        raise ValueError(
            "MLDA(adaptive_error_model=True) corrects observed pm.Normal variables that the model in context "
            f"and every coarse model have under the same name and shape; there is none ({found}). Write the "
            "likelihood as pm.Normal(name, mu=forward_model(...), sigma=..., observed=data) at every level, "
            "observing the same data."
        )
    return names


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
    coarse_vars = _matching_value_vars(coarse, vars, model, k)
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
    fns = _joined(coarse, [logp, *outputs], coarse_vars, compile_kwargs, shared)
    by_name = {value.name: variable for value, variable in shared.items()}
    return CoarseLevel(fns[0], fns[1] if corrected else None, bias, error_cov, by_name)


# ---------------------------------------------------------------------------- checks of the input
def checked_rates(rates, n_coarse: int) -> list[int]:
    """One subchain length per coarse level, each an integer >= 1."""
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
        if not coarse.observed_RVs and not coarse.potentials:
            raise ValueError(
                f"MLDA: coarse_models[{k}] has no likelihood (no observed variables, no potentials): "
                "its density would be the prior alone, a useless approximation of the posterior."
            )
    return coarse_models


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


def _matching_value_vars(coarse, vars, model, k: int) -> list:
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
    discrete = [v for v in others if v.dtype in pm.discrete_types]
    continuous = [v for v in others if v.dtype not in pm.discrete_types]
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
