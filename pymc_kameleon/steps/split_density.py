"""The model's log density split into the prior and the log-likelihood, compiled separately: the target
of GP delayed acceptance, which needs the prior at every proposal and the likelihood only at those its
surrogate lets through."""

from __future__ import annotations

import math
import time

import numpy as np
import pytensor.tensor as pt
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs
from pytensor.graph.traversal import ancestors

from pymc_kameleon.steps.target_density import (
    Evaluation,
    TargetDensity,
    note_model_error,
    refuse_random_log_density,
)

__all__ = ["GradientUnavailableError", "SplitTargetDensity"]


class GradientUnavailableError(ValueError):
    """PyTensor cannot differentiate a term whose gradient a step needs.

    ``what`` is ``"prior"`` or ``"likelihood"``: the part of the model that has no gradient.
    """

    def __init__(self, message: str, what: str = "likelihood"):
        super().__init__(message)
        self.what = what


def _outside_inputs(model, shared, outputs) -> list[str]:
    """Names of the variables outside the block that ``outputs`` depend on.

    ``shared`` maps the value variables outside the block to the shared variables standing for them.
    """
    graph = set(ancestors(outputs))
    return [model.values_to_rvs[v].name for v, s in shared.items() if s in graph]


class SplitTargetDensity(TargetDensity):
    r"""The model's log density split into the prior and the likelihood, compiled separately.

    .. math::
        \log \pi(x) = \underbrace{\log p(x)}_{\text{prior}}
        + \underbrace{\ell_{\text{exact}}(x) + \sum_k \log \hat L_k(x)}_{\text{log-likelihood } \ell(x)},

    where :math:`\log p` is the sum of the free variables' terms (Jacobians of their transforms
    included) and :math:`\ell_{\text{exact}}` the observed variables' terms plus the ordinary
    potentials. Delayed-acceptance steps need the prior at every proposal, but the (expensive)
    likelihood only at the proposals that survive the surrogate screen, so the two are separate
    compiled functions: :meth:`prior` and :meth:`evaluate`. Everything about the current state
    and the pseudo-marginal estimates is as in :class:`TargetDensity`; ``n_evals`` counts
    likelihood evaluations and ``n_prior_evals`` prior evaluations.

    Parameters
    ----------
    model, vars, initial_point, compile_kwargs, step_name
        As for :class:`TargetDensity`.
    prior_gradient : bool
        Also compile :math:`\nabla \log p` with respect to the raveled block (returned with the
        prior by :meth:`prior`).
    loglik_gradient : bool
        Also compile :math:`\nabla \ell_{\text{exact}}`, in the same function as the likelihood, so
        an evaluation returns both at once. Raises :class:`GradientUnavailableError` if the model has
        a pseudo-marginal term (a random estimate has no gradient) or a likelihood term PyTensor
        cannot differentiate (e.g. a black-box Op without ``grad``).

    Attributes
    ----------
    likelihood_outside_vars : list of str
        The variables outside the block that the likelihood depends on (sampled by other steps
        of a ``CompoundStep``): a surrogate of :math:`\ell` as a function of the block alone
        goes stale whenever they move.

    Raises
    ------
    ValueError
        If the model has no likelihood term at all (no observed variables, no potentials).
    """

    def __init__(
        self,
        model,
        vars,
        initial_point,
        compile_kwargs=None,
        step_name: str = "step",
        *,
        prior_gradient: bool = False,
        loglik_gradient: bool = False,
    ):
        self.prior_gradient = bool(prior_gradient)
        self.loglik_gradient = bool(loglik_gradient)
        self.n_prior_evals = 0
        # Likelihood values evaluated ahead on workers (speculative delayed acceptance), or None.
        self.prefetch = None
        # Wall time of the likelihood evaluations made here (speculation pays only above a cost).
        self.loglik_seconds, self.n_timed_evals = 0.0, 0
        super().__init__(model, vars, initial_point, compile_kwargs, step_name)

    def _compile(self, model, vars, initial_point, compile_kwargs):
        estimated = {id(t.potential) for t in self.terms}
        lik_terms = model.observed_RVs + [p for p in model.potentials if id(p) not in estimated]
        if not lik_terms and not self.terms:
            raise ValueError(
                f"{self.step_name} screens proposals with a surrogate of the log-likelihood, but this "
                "model has no likelihood term: no observed variables and no potentials (pm.Potential or "
                "PseudoMarginalPotential). Add the data with observed=..., or, if the whole density is "
                "cheap prior terms, sample it with pm.sample() or KameleonMetropolis instead."
            )
        lik_terms, other_terms = _terms_of_block(model, lik_terms, vars, bool(self.terms))
        prior = model.logp(vars=model.free_RVs)
        loglik = model.logp(vars=lik_terms) if lik_terms else pt.constant(0.0, dtype="float64")
        other = model.logp(vars=other_terms) if other_terms else pt.constant(0.0, dtype="float64")
        refuse_random_log_density([prior, loglik, other], self.step_name, model)
        estimator_inputs = model.replace_rvs_by_values([x for t in self.terms for x in t.inputs])
        outputs, inarray = join_nonshared_inputs(
            point=initial_point,
            outputs=[prior, loglik, other, *estimator_inputs],
            inputs=vars,
            shared_inputs=self.shared,
        )
        prior_out, loglik_out, other_out, *inputs_out = outputs
        question = None if self.terms else (prior_out + loglik_out, inarray)
        self._ask_gradient(question, model, prior + loglik, vars)
        # The terms that only other steps' variables enter: constant in this block's moves, so out of the
        # likelihood its surrogate learns (they made it stale); kept for the model_logp statistic.
        self.other_likelihood_terms = [t.name for t in other_terms]
        self._other_fn = None
        if other_terms:
            # Other steps' variables only: the block's input is unused, by construction.
            self._other_fn = compile_pytensor(
                [inarray], other_out, **{"on_unused_input": "ignore", **dict(compile_kwargs or {})}
            )
            self._other_fn.trust_input = True
        self._cur_other = 0.0
        self.likelihood_outside_vars = _outside_inputs(model, self.shared, [loglik_out, *inputs_out])
        prior_outputs, loglik_outputs = [prior_out], [loglik_out]
        if self.loglik_gradient and self.terms:
            names = [t.name for t in self.terms]
            raise GradientUnavailableError(
                f"PseudoMarginalPotential {names} "
                f"{'is a random estimate' if len(names) == 1 else 'are random estimates'} "
                "of the likelihood and has no gradient.",
                "likelihood",
            )
        wanted = []
        if self.prior_gradient:
            wanted.append(("prior", prior_out, prior_outputs))
        if self.loglik_gradient:
            wanted.append(("likelihood", loglik_out, loglik_outputs))
        for what, out, dest in wanted:
            try:
                dest.append(pt.grad(out, inarray, disconnected_inputs="ignore"))
            except Exception as err:  # NotImplementedError, NullTypeGradError, misuse errors, ...
                raise GradientUnavailableError(
                    f"PyTensor cannot differentiate the model's {what} terms ({type(err).__name__}: {err}).",
                    what,
                ) from err
        kwargs = dict(compile_kwargs or {})
        self._prior_fn = compile_pytensor(
            [inarray], prior_outputs if self.prior_gradient else prior_out, **kwargs
        )
        self._prior_fn.trust_input = True
        self._single_output = not self.loglik_gradient and not self.terms
        self._fn = compile_pytensor(
            [inarray], loglik_out if self._single_output else [*loglik_outputs, *inputs_out], **kwargs
        )
        self._fn.trust_input = True
        self._n_lik_outputs = len(loglik_outputs)
        self.dtype = inarray.type.dtype

    def _exact_quietly(self, x) -> float:
        try:
            prior, out = self._prior_fn(x), self._fn(x)
        except Exception as err:
            note_model_error(err, self.step_name, x, self.coordinate_names)
            raise
        prior = prior[0] if self.prior_gradient else prior
        return float(prior) + float(out if self._single_output else out[0])

    @property
    def current_gradient(self) -> np.ndarray | None:
        r""":math:`\nabla \log\pi` at the current state, if both gradients are compiled (else None)."""
        return None if self._cur is None else self._cur.grad_logp

    # ------------------------------------------------------------- evaluation
    def prior(self, x):
        """Log prior at ``x`` (and its gradient, or None): ``(log_prior, grad_log_prior)``."""
        self.n_prior_evals += 1
        try:
            out = self._prior_fn(np.asarray(x, dtype=self.dtype))
        except Exception as err:
            note_model_error(err, self.step_name, x, self.coordinate_names)
            raise
        if self.prior_gradient:
            return float(out[0]), np.array(out[1], dtype=float, copy=True)
        return float(out), None

    def _loglik_and_inputs(self, x):
        """Exact log-likelihood part, its gradient (or None) and the estimators' inputs at ``x``."""
        self.n_evals += 1
        x = np.asarray(x, dtype=self.dtype)
        out = None if self.prefetch is None else self.prefetch.take(x)
        if out is None:
            start = time.perf_counter()
            try:
                out = self._fn(x)
            except Exception as err:
                note_model_error(err, self.step_name, x, self.coordinate_names)
                raise
            self.loglik_seconds += time.perf_counter() - start
            self.n_timed_evals += 1
        if self._single_output:
            return float(out), None, ()
        grad = np.array(out[1], dtype=float, copy=True) if self.loglik_gradient else None
        grouped, start = [], self._n_lik_outputs
        for count in self._input_counts:
            grouped.append(tuple(np.asarray(v) for v in out[start : start + count]))
            start += count
        return float(out[0]), grad, tuple(grouped)

    def evaluate(self, x, prior=None) -> Evaluation:
        """Prior and likelihood at a proposal ``x``, with fresh estimates.

        ``prior`` is ``(log_prior, grad_log_prior)`` from :meth:`prior` if already computed. Where
        the prior is not finite the likelihood is not evaluated (``logp`` is ``-inf``, or NaN for a
        NaN/+inf prior); where the exact likelihood part is not finite no estimator is called.
        """
        lp, glp = self.prior(x) if prior is None else prior
        if not math.isfinite(lp):
            self._note_nan(x, lp)
            bad = -math.inf if lp == -math.inf else math.nan
            return Evaluation(bad, bad, log_prior=lp, grad_log_prior=glp)
        ll, gll, inputs = self._loglik_and_inputs(x)
        if not math.isfinite(ll):
            self._note_nan(x, ll)
            bad = -math.inf if ll == -math.inf else math.nan
            return Evaluation(bad, bad, (), inputs, lp, ll, glp, gll)
        estimates, auxiliaries = self._proposal_estimates(inputs)
        exact = lp + ll
        return Evaluation(exact + sum(estimates), exact, estimates, inputs, lp, ll, glp, gll, auxiliaries)

    def _current_parts(self, y):
        lp, glp = self.prior(y)
        ll, gll, inputs = self._loglik_and_inputs(y)
        if self._other_fn is not None:
            self._cur_other = float(self._other_fn(np.asarray(y, dtype=self.dtype)))
        return lp + ll, inputs, dict(log_prior=lp, exact_loglik=ll, grad_log_prior=glp, grad_exact_loglik=gll)

    @property
    def current_model_logp(self) -> float:
        """The model's log density at the current state: :attr:`current_logp` plus the likelihood terms
        that only other steps' variables enter (``other_likelihood_terms``)."""
        return self.current_logp + self._cur_other


def _terms_of_block(model, terms, vars, has_estimates: bool) -> tuple[list, list]:
    """``terms`` split into those the block's value variables ``vars`` enter (or no free variable at all)
    and those only other free variables enter. All of them stay with the block if none is the block's
    (and no pseudo-marginal term is): a likelihood of the block alone would then be a constant."""
    block = set(vars)
    others = {v for v in model.value_vars if v not in block}
    if not others:  # the block is the whole model (the common case): no term graph to build
        return terms, []
    mine, theirs = [], []
    for term in terms:
        graph = set(ancestors([model.logp(vars=[term])]))
        (theirs if not (graph & block) and graph & others else mine).append(term)
    if not mine and not has_estimates:
        return terms, []
    return mine, theirs
