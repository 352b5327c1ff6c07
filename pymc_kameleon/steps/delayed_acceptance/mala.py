"""``GPDelayedAcceptanceMALA``: two-stage MALA whose drift comes from a GP surrogate of the
log-likelihood and its gradient. The shared machinery is in
:mod:`~pymc_kameleon.steps.delayed_acceptance.base`."""

from __future__ import annotations

from pymc.step_methods.arraystep import PopulationArrayStepShared

from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.delayed_acceptance.mala import DelayedAcceptanceMALA
from pymc_kameleon.core.kameleon.scale_free import ScaleFreeProposal
from pymc_kameleon.steps.delayed_acceptance.base import GPDelayedAcceptanceStep
from pymc_kameleon.steps.population import PooledTuning

__all__ = ["GPDelayedAcceptanceMALA"]

class GPDelayedAcceptanceMALA(GPDelayedAcceptanceStep):
    r"""Two-stage MALA with a Gaussian-process surrogate of the log-likelihood and its gradient.

    As :class:`GPDelayedAcceptanceMH`, but the base proposal is a Langevin move whose drift comes
    from the GP (Benavoli, Wyse & White, section 3):

    .. math::
        Q(\cdot \mid x) = \mathcal N\big(x + \tfrac12 \Sigma\,(\nabla\mu(x) + \nabla\log p(x)),\ \Sigma\big),
        \qquad \Sigma = \lambda^2 C,

    with :math:`\nabla\mu` the gradient of the GP mean (:meth:`GPSurrogate.predict_gradient`) and
    the exact prior gradient. The preconditioner :math:`C` and the scale :math:`\lambda` are learned
    scale-free, as for :class:`GPDelayedAcceptanceMH`
    (:class:`~pymc_kameleon.core.adaptation.scale_free.ScaleFreeAdaptation`): the exact warm-up starts with a
    coordinate scan (25 d + 50 random-walk steps, one coordinate each) that finds every
    parameter's scale; then windows of doubling length (from ``adapt_interval``) re-estimate
    :math:`C` from their own draws (a walk in from a far start is forgotten), the GP's inputs are
    whitened by :math:`C`, and :math:`\lambda` follows Robbins-Monro toward ``target_accept`` with
    the importance-weighted signal described for :class:`GPDelayedAcceptanceMH`. All frozen after
    tuning.
    When the model has gradients the GP also carries the exact gradient :math:`\nabla\ell` at each
    evaluated point as derivative observations (PyTensor differentiates the likelihood part, so
    every evaluation returns value and gradient), and at a training point the drift is exact.

    **Stage 1** marginalises the GP's joint law of :math:`(\ell(y), \nabla\ell(y))` in
    :math:`e^{\ell(y)} Q_{\ell}(x \mid y)`, the closed form of the paper's Proposition 3.1
    (corrected; :func:`~pymc_kameleon.core.delayed_acceptance.mala.log_expected_langevin_term`):

    .. math::
        \alpha_1(x, y) = 1 \wedge \frac{p(y)\, E\big[e^{\tilde\ell(y)}\, Q_{\tilde\ell}(x \mid y)\big]}
                                      {e^{\ell(x)}\, p(x)\, Q(y \mid x)}.

    **Stage 2** is the delayed-acceptance correction with the proposal densities of the kernel
    actually used and both :math:`\alpha_1` from the same GP
    (:func:`~pymc_kameleon.core.delayed_acceptance.mala.mala_delayed_acceptance_log_ratios`), so the
    chain targets the exact posterior whatever the surrogate. The warm-up that seeds the GP is
    plain MALA with the exact gradient.

    Parameters
    ----------
    vars : list of variables, optional
        As for :class:`GPDelayedAcceptanceMH`, including the warning when other steps sample
        variables that enter the likelihood.
    gradient_observations : bool, default True
        Give the GP the exact log-likelihood gradients. This needs a differentiable likelihood:
        a model with a PseudoMarginalPotential or a black-box Op without ``grad`` raises a
        ValueError that names :class:`GPDelayedAcceptanceMH`. With False the GP is fitted to
        values only and the drift is the gradient of its mean (the prior must still be
        differentiable).
    target_accept : float, default 0.35
        Target overall acceptance rate. Plain MALA's optimum per iteration is 0.574, but here an
        iteration costs an exact evaluation only when stage 1 passes (about the acceptance rate
        with a good GP), so larger steps pay: on the paper's T1, T2 and T5 (2 seeds x 5
        repetitions) 0.35 gave 2-44% more ESS per exact evaluation during the draws than 0.574,
        and 28-51% fewer evaluations (``docs/decisions/0023-gp-da-acceptance-targets.md``).
    max_points : int, optional
        Cap on the GP's training points; with gradient observations each point adds
        :math:`d + 1` rows, so the default is ``max(1000 // (d + 1), 2 * initial_points)``.
        A prediction costs :math:`O(d \cdot \text{rows}^2)`: in 5-d about 0.6 ms per step at the
        default and 0.3 ms at half of it (``benchmarks/results/gp_step_cost.md``). Lower it when the
        likelihood costs no more than that; a smaller GP screens a little less well.
    fit_max_points : int, optional
        Default ``max(20, 300 // (d + 1))`` with gradient observations, else 300.
    initial_scale : float, default 0.5
        Starting step size of the coordinate scan (on the sampler's unconstrained space).
    initial_points, fit_hyperparameters, hyperparameters, noise_variance, current_value : optional
        As for :class:`GPDelayedAcceptanceMH`.
    gp_after_tuning, jitter, adapt_interval, learning_rate, history_size, tuning, start : optional
        As for :class:`GPDelayedAcceptanceMH`.
    model, initial_point, compile_kwargs, rng, blocked
        As for other PyMC step methods.

    Notes
    -----
    The statistics are those of :class:`GPDelayedAcceptanceMH` (``gp_sd`` is the predictive sd of
    :math:`\ell` at the proposal, NaN after tuning where stage 1 rejected on a bound of the GP's joint
    covariance without computing it; ``scaling`` is :math:`\lambda`) but for those of the components
    and speculation this step does not have (``independence``, ``independence_fitted``, ``nu2``,
    ``speculative_evals``, ``prefetched``).
    """

    name = "gp_da_mala"
    #: The PyMC-free move (:class:`~pymc_kameleon.core.delayed_acceptance.mala.DelayedAcceptanceMALA`).
    kernel_class = DelayedAcceptanceMALA
    _default_target_accept = 0.35  # per exact evaluation, not per iteration (docstring)
    _default_initial_scale = 0.5
    _uses_prior_gradient = True
    # GPDelayedAcceptanceMH's own options a new user passed here (a bare "unexpected keyword argument").
    _foreign_options = {
        "executor": "evaluating likely next proposals ahead on workers is GPDelayedAcceptanceMH's option; "
        "this step evaluates the likelihood and its gradient in the chain's process. Use "
        "GPDelayedAcceptanceMH(executor=...) or leave executor out.",
    }

    def __init__(self, vars=None, *, gradient_observations=True, **options):
        self._check_option_names(options)
        if not isinstance(gradient_observations, bool):
            raise ValueError(f"gradient_observations must be True or False, got {gradient_observations!r}.")
        self.gradient_observations = gradient_observations
        super().__init__(vars, **options)

    def _new_kernel(self, adaptation: ScaleFreeAdaptation, schedule) -> DelayedAcceptanceMALA:
        # The base proposal is the coordinate scan of the warm-up (then the Langevin move takes over).
        return self.kernel_class(
            adaptation, ScaleFreeProposal(adaptation.state, 1.0), schedule, self.current_value,
            pause_steps=2 * self.adapt_interval, gradient_observations=self.gradient_observations,
        )


class PooledGPDelayedAcceptanceMALA(PooledTuning, GPDelayedAcceptanceMALA, PopulationArrayStepShared):
    """``GPDelayedAcceptanceMALA(tuning="pooled")``, a population step (steps/population.py)."""
