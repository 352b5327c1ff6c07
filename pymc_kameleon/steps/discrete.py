r"""``DiscreteMetropolis``: Metropolis-within-Gibbs for discrete variables, exact beside estimates.

PyMC gives discrete variables ``BinaryGibbsMetropolis``, ``CategoricalGibbsMetropolis`` or
``Metropolis``. With a :func:`~pymc_kameleon.PseudoMarginalPotential` in the model those would
re-estimate the likelihood at the current state, which is biased, so the potential refuses them.
This step updates the discrete variables through the same
:class:`~pymc_kameleon.steps.target_density.TargetDensity` as our continuous steps: the estimate
at the current state is kept, and a proposal is accepted with the pseudo-marginal ratio.

Importing :mod:`pymc_kameleon` registers the step with PyMC's automatic assignment. Its
competence is ``IDEAL`` for a discrete variable of a model (the active ``with model:`` context)
that has a pseudo-marginal term, and ``INCOMPATIBLE`` otherwise, so
``pm.sample(step=KameleonMetropolis())`` gives the discrete variables this step in such models
and changes nothing in any other model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs
from pymc.step_methods.compound import Competence
from pymc.util import get_value_vars_from_user_vars
from pymc.vartypes import discrete_types
from pytensor.tensor.random.basic import BernoulliRV, CategoricalRV

from pymc_kameleon.core.adaptation.scales import RobbinsMonro
from pymc_kameleon.core.mh import metropolis_accept, mh_log_ratio
from pymc_kameleon.core.validation import check_number, check_probability
from pymc_kameleon.pseudo_marginal import pseudo_marginal_terms
from pymc_kameleon.steps.base import AdaptiveStep
from pymc_kameleon.steps.reporting import RecentRates
from pymc_kameleon.steps.target_density import TargetDensity

__all__ = ["DiscreteChain", "DiscreteMetropolis", "register_with_pymc"]


@dataclass(eq=False)
class DiscreteChain:
    """One chain's state in :class:`DiscreteMetropolis`: the integer moves' scales :math:`s_j`
    (Robbins-Monro, during tuning; the binary elements' are never used)."""

    scales: list
    cumulative_logp_evals: int = 0  # the chain's evaluations so far (AdaptiveStep._add_running_stats)
    cumulative_estimator_calls: int = 0  # its estimator calls so far (AdaptiveStep._add_estimate_stats)
    recent: RecentRates = field(default_factory=RecentRates)  # its recent acceptance rate
    pending_logp_evals: int = 0  # always 0: no evaluations between steps (AdaptiveStep._add_running_stats)
    pending_estimator_calls: int = 0  # always 0: the continuous step beside it checks the estimates' noise


class DiscreteMetropolis(AdaptiveStep):
    r"""Metropolis-within-Gibbs for integer and binary variables, with exact pseudo-marginal terms.

    One step visits every element of the block once, in random order, and for element :math:`j`
    proposes

    - a flip :math:`x_j' = 1 - x_j` if the variable is binary (Bernoulli, or Categorical with two
      categories);
    - one of the other :math:`K - 1` categories, uniformly, if it is Categorical with :math:`K > 2`
      categories (known when the step is made; categories have no order to walk along);
    - otherwise :math:`x_j' = x_j + \delta`, with :math:`\delta = \operatorname{round}(s_j Z)`,
      :math:`Z \sim \mathcal N(0, 1)`, and :math:`\delta = 0` replaced by :math:`\pm 1` with equal
      probability.

    All three proposals are symmetric, so element :math:`j`'s move is accepted with probability
    :math:`\min\{1, \pi(x')\hat L(x') / (\pi(x) \hat L_{\text{kept}}(x))\}`, where
    :math:`\hat L_{\text{kept}}` is the estimate kept at the current state (Andrieu & Roberts
    2009). An integer walk's proposal outside the variable's support (zero prior density, such as a
    category past the last, which the model might use as an index) is rejected without evaluating the
    model, and a proposal of zero density without calling the estimator. During tuning each
    :math:`s_j` follows a Robbins-Monro rule toward
    ``target_accept``; after tuning it is fixed, so the chain is an exact Metropolis-within-Gibbs
    chain. Each element's move costs one log-density evaluation and, when it changes an
    estimator's inputs, one estimate.

    Parameters
    ----------
    vars : list of variables, optional
        Discrete variables to sample. Defaults to all discrete free variables.
    scaling : float, default 1.0
        Initial :math:`s_j` of the integer moves.
    target_accept : float, default 0.44
        Acceptance rate the integer moves' scales are tuned toward (the one-dimensional optimum).
    model, initial_point, compile_kwargs, rng, blocked
        As for :class:`~pymc_kameleon.KameleonMetropolis`.

    Examples
    --------
    >>> with pm.Model():  # doctest: +SKIP
    ...     k = pm.Poisson("k", 3.0)
    ...     theta = pm.Normal("theta", 0, 1)
    ...     PseudoMarginalPotential("lik", log_estimator, inputs=[theta, k])
    ...     idata = pm.sample(step=KameleonMetropolis())  # k gets DiscreteMetropolis
    """

    name = "discrete_metropolis"
    _checks_estimate_noise = False  # the continuous step beside it does

    def __init__(
        self,
        vars=None,
        *,
        scaling: float = 1.0,
        target_accept: float = 0.44,
        model=None,
        initial_point=None,
        compile_kwargs=None,
        rng=None,
        blocked: bool = True,
    ):
        model = pm.modelcontext(model)
        check_number("scaling", scaling, minimum=0)
        check_probability("target_accept", target_accept)
        self.scaling_initial = float(scaling)
        self.target_accept = float(target_accept)
        if initial_point is None:
            initial_point = model.initial_point()
        vars = _discrete_value_vars(vars, model)
        # Each element's number of categories: 2 for a binary variable, K for a Categorical, 0 to walk.
        self._categories = np.concatenate(
            [np.full(np.size(initial_point[v.name]), _categories(model.values_to_rvs[v])) for v in vars]
        )
        self._binary = self._categories == 2
        self._walks = self._categories == 0
        self.dim = int(self._binary.size)
        target = TargetDensity(model, vars, initial_point, compile_kwargs, type(self).__name__)
        self._own_log_prior = (
            _own_log_prior(model, vars, initial_point, target, compile_kwargs) if self._walks.any() else None
        )
        self._join_pymc(vars, target, blocked, rng, model=model, start="initial_point")

    def _reset_chain_state(self):
        scales = [RobbinsMonro(self.scaling_initial, self.target_accept) for _ in range(self.dim)]
        self._chain = DiscreteChain(scales)
        self._target.reset()

    @staticmethod
    def competence(var, has_grad):
        """``IDEAL`` for a discrete variable of the active model when it has a pseudo-marginal term."""
        if var.dtype not in discrete_types:
            return Competence.INCOMPATIBLE
        try:
            model = pm.modelcontext(None)
            has_terms = bool(pseudo_marginal_terms(model))
        except (TypeError, ValueError):  # no active model, or a misused potential (reported elsewhere)
            return Competence.INCOMPATIBLE
        if has_terms and any(rv is var for rv in model.free_RVs):
            return Competence.IDEAL
        return Competence.INCOMPATIBLE

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list]:
        evals_before = self._target.n_evals
        estimates_before = self._target.n_estimates
        y = np.array(q0.data, copy=True)
        logp_y = self._target.current(y, q0.point_map_info, self.rng).logp
        accept_probs = np.empty(self.dim)
        n_accepted = 0
        for j in self.rng.permutation(self.dim):
            x = y.copy()
            x[j] = self._proposed_value(j, y[j])
            # A walk past the support's end (a category past the last, k = -1) has zero prior density, and
            # the model may not even evaluate there (an index out of bounds): reject it unevaluated.
            outside = self._walks[j] and not math.isfinite(float(self._own_log_prior(x)))
            evaluation = None if outside else self._target.evaluate(x)
            logp_x = -math.inf if outside else evaluation.logp
            accepted, accept_probs[j] = metropolis_accept(mh_log_ratio(logp_x, logp_y), self.rng)
            if accepted:
                self._target.accept(x, evaluation)
                y, logp_y = x, evaluation.logp
                n_accepted += 1
            if self.tune and self._walks[j]:
                self._chain.scales[j].update(accept_probs[j])
        stats = {
            "accept": float(np.mean(accept_probs)),
            "accepted": n_accepted / self.dim,
            "tune": self.tune,
            "scaling": float(np.mean([s.value for s in self._chain.scales])),
            "model_logp": self._target.current_model_logp,
        }
        self._add_running_stats(stats, self._target.n_evals - evals_before)
        self._add_estimate_stats(stats, self._target, estimates_before)
        return RaveledVars(y, q0.point_map_info), [stats]

    def _proposed_value(self, j: int, value):
        """Element ``j``'s proposed value from its current ``value``: a flip, another category, or a walk."""
        if self._binary[j]:
            return 1 - value
        categories = int(self._categories[j])
        if categories:
            return (value + self.rng.integers(1, categories)) % categories
        return value + self._jump(j)

    def _jump(self, j: int) -> int:
        """Symmetric integer jump: round(s_j Z), with 0 replaced by +-1."""
        jump = int(round(self._chain.scales[j].value * self.rng.standard_normal()))
        return jump if jump != 0 else (1 if self.rng.random() < 0.5 else -1)


def _categories(rv) -> int:
    """2 for a binary variable (Bernoulli; the flip is the natural move), K for a Categorical whose number
    of categories is known when the step is made, else 0 (an integer walk)."""
    op = getattr(rv.owner, "op", None)
    if isinstance(op, BernoulliRV):
        return 2
    if isinstance(op, CategoricalRV):
        try:
            categories = int(rv.owner.inputs[-1].shape[-1].eval())
        except Exception:  # a number of categories that depends on other variables: walk
            return 0
        return categories if categories >= 2 else 0  # one category: every other value is outside
    return 0


def _own_log_prior(model, vars, initial_point, target, compile_kwargs):
    """The block's own prior log density (its variables' terms alone) as a compiled function of the raveled
    block, the other variables read from ``target``'s shared values: zero density outside the support."""
    own = model.logp(vars=[model.values_to_rvs[v] for v in vars])
    outputs, inarray = join_nonshared_inputs(
        point=initial_point, outputs=[own], inputs=vars, shared_inputs=target.shared
    )
    fn = compile_pytensor([inarray], outputs[0], **dict(compile_kwargs or {}))
    return lambda x: fn(np.asarray(x, dtype=inarray.type.dtype))


def _discrete_value_vars(vars, model):
    if vars is None:
        vars = model.discrete_value_vars
        if not vars:
            raise ValueError("DiscreteMetropolis samples discrete variables, and this model has none.")
        return vars
    vars = get_value_vars_from_user_vars(vars, model)
    continuous = [v.name for v in vars if v.dtype not in discrete_types]
    if continuous:
        raise ValueError(
            f"DiscreteMetropolis samples discrete variables only, but {continuous} "
            f"{'is' if len(continuous) == 1 else 'are'} continuous; give them KameleonMetropolis."
        )
    return vars


def register_with_pymc() -> None:
    """Put :class:`DiscreteMetropolis` first in PyMC's list of step methods for automatic assignment.

    First, so that it wins ties with PyMC's own discrete steps; its competence is ``INCOMPATIBLE``
    for every model without a pseudo-marginal term, so no other assignment changes.
    """
    methods = pm.step_methods.STEP_METHODS
    if DiscreteMetropolis not in methods:
        methods.insert(0, DiscreteMetropolis)


register_with_pymc()
