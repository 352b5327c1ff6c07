r"""``KameleonMetropolis``: Kernel Adaptive Metropolis-Hastings as a PyMC step method.

The math lives in :mod:`pymc_kameleon.core`; this module only connects it to
PyMC's step machinery (compiled log densities, tuning flags, statistics).
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.step_methods.arraystep import PopulationArrayStepShared

from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.adaptation.scales import VanishingProbability
from pymc_kameleon.core.adaptation.state import TuningDraw
from pymc_kameleon.core.adaptation.transport_map import INDEPENDENT_COMPONENTS, MAP_COMPONENTS
from pymc_kameleon.core.kameleon.kernels import make_kernel
from pymc_kameleon.core.kameleon.scale_free import ScaleFreeProposal
from pymc_kameleon.core.kameleon.whitened import WhitenedFamily
from pymc_kameleon.core.linalg import SingularCovarianceError, one_blas_thread, same_array
from pymc_kameleon.core.mh import metropolis_hastings_step
from pymc_kameleon.core.validation import (
    check_independence_weight,
    check_kameleon_options,
    check_number,
    check_probability,
    check_weight,
    refuse_unused_options,
)
from pymc_kameleon.core.warning_categories import KameleonRuntimeWarning
from pymc_kameleon.steps.base import AdaptiveStep
from pymc_kameleon.steps.kameleon_chain import KameleonChainTuning
from pymc_kameleon.steps.population import TUNINGS, PooledTuning
from pymc_kameleon.steps.target_density import TargetDensity
from pymc_kameleon.steps.variables import (
    angle_coordinates,
    continuous_value_vars,
    coordinate_names,
    improper_prior_coordinates,
)

__all__ = ["KameleonMetropolis"]

_ADAPTATIONS = ("freeze", "vanishing")
#: Default tuning steps before the Kameleon component joins the proposal. Measured (docs/decisions/
#: 0037-kameleon-after-long-tuning.md): with 3000 tuning steps the Adaptive Metropolis walk alone had
#: more ESS than the mixture on 20 of 23 real posteriors, at a third to an eighth of the time per step;
#: after 20 000 the Kameleon component was worth its cost on the strongly twisted banana.
KAMELEON_AFTER = 10_000


class KameleonMetropolis(KameleonChainTuning, AdaptiveStep):
    r"""Kernel Adaptive Metropolis-Hastings (MCMC Kameleon) step.

    Proposes from a Gaussian centred at the current state :math:`y` whose covariance
    follows the local shape of the target, learned from a subsample :math:`Z` of
    the chain history (Sejdinovic, Strathmann et al., ICML 2014 [1]_):

    .. math::
        q_Z(\cdot \mid y) = \mathcal N\!\left(y,\ \gamma^2 I + \nu^2 M_y H M_y^\top\right),
        \qquad M_y = 2\,[\nabla_x k(x, z_i)]_{x=y,\ i=1..n},

    (:math:`k` a kernel, :math:`Z = \{z_1, \dots, z_n\}` a subsample of past states,
    :math:`H = I - \tfrac{1}{n} \mathbf 1 \mathbf 1^\top` the centring matrix) and accepts with the
    Metropolis-Hastings probability, including the asymmetric
    proposal terms :math:`q(y \mid x^*) / q(x^* \mid y)`. It needs neither gradients nor
    a tractable likelihood, so it suits strongly nonlinear posteriors and black-box
    or estimated likelihoods.

    The proposal lives in coordinates whitened by a learned mean and covariance, so it is the
    same on parameters of any scale; it is a mixture of the Kameleon proposal above (weight
    :math:`1-\rho`) and the Adaptive Metropolis walk :math:`N(y, \lambda^2 C)` (weight
    :math:`\rho`, ``am_weight``), each Hastings term over the whole mixture. The Kameleon component
    joins only after ``kameleon_after`` tuning steps (10 000): its subsample :math:`Z` needs a long
    tuning to pay, and with fewer steps the Adaptive Metropolis walk alone mixed better on most
    posteriors we measured, at a fraction of the cost per step. Tuning is a
    coordinate scan (25 d + 50 steps, one coordinate per step), then windows of doubling length
    starting at ``adapt_interval``: each window's draws alone re-estimate the mean, the
    covariance and (once the Kameleon component has joined) :math:`Z`, and reset the bandwidth, so
    the walk in from a far start is forgotten. :math:`\lambda` and :math:`\log\nu^2` follow
    Robbins-Monro toward ``target_accept``. With ``adaptation="freeze"`` (the default) everything is
    fixed after tuning, so the draws come from an exact Metropolis-Hastings chain. At the end of tuning one
    ``KameleonWarning`` per chain names every problem found (too few tuning steps, acceptance far
    from the target, states far from :math:`Z`, a chain still moving), with its figure and remedy.

    Parameters
    ----------
    vars : list of variables, optional
        Continuous variables to sample. Defaults to all continuous free variables.
    kernel : {"gaussian" (or "rbf"), "matern32", "matern52", "linear"} or kernel object, default "gaussian"
        Kernel :math:`k`. A custom kernel is any object with methods ``value(X, Z)``
        and ``grad(X, Z)`` (see :class:`pymc_kameleon.core.kameleon.kernels.Kernel`). With
        ``"linear"`` the proposal is Adaptive Metropolis with covariance
        :math:`\gamma^2 I + 4\nu^2 Z^\top H Z`.
    bandwidth : "median" or float, default "median"
        Kernel length scale :math:`\sigma` in whitened units. ``"median"`` re-estimates it from
        the whitened :math:`Z` at every window end:
        :math:`\sigma^2 = \operatorname{median}\|z_i - z_j\|^2 / 2`.
    n_subsample : int, default 1000
        Size :math:`n` of the history subsample :math:`Z`. A step costs :math:`O(n d^2 + d^3)`.
    gamma : "auto" or float, default "auto"
        Exploration term :math:`\gamma \ge 0` (a standard deviation). ``"auto"`` uses
        0.2 times the median marginal standard deviation of :math:`Z`, which is the
        paper's :math:`\gamma = 0.2` on unit-scale targets and follows the scale of yours.
    nu2 : float, optional
        Starting :math:`\nu^2`. By default it is set when the first :math:`Z` is drawn, so
        that the average proposal variance matches the tuned random-walk variance.
    target_accept : float, default 0.234
        Target acceptance rate of the walk's moves for the Robbins-Monro adaptation of their scale
        (the Adaptive Metropolis scale :math:`\lambda`, and :math:`\nu^2` once the Kameleon component
        has joined); the independence component's draws are not tuned to it.
    am_weight : float, default 0.1
        Weight :math:`\rho` of the Adaptive Metropolis walk in the mixture once the Kameleon component
        has joined; 1 never uses the Kameleon component.
    kameleon_after : int, default 10000
        Tuning steps before the Kameleon component may join the proposal (at the next adaptation
        window's end). With ``pm.sample(tune=...)`` below it, the proposal is the Adaptive Metropolis
        walk :math:`N(y, \lambda^2 C)` alone, before and after tuning, and the Kameleon statistics
        (``nu2``, ``bandwidth``, ``gamma``) are NaN. With 3000 tuning steps the walk alone had more
        ESS than the mixture on 20 of 23 real posteriors, at a third to an eighth of the time per step;
        with 20 000 the mixture was better on the strongly twisted 8-d banana (at 2 of 3 seeds).
        ``kameleon_after=0`` builds the first :math:`Z` after the first window after the scan (the
        behaviour before this option; decision record 0037).
    independence_weight : float, default 0.5
        Weight :math:`\iota \in [0, 1)` of independent draws from the Student-t :math:`t_{10}(m, C)`
        with the learned mean and covariance (the whitening's) in the proposal, where they pay:
        :math:`q_\iota(x \mid y) = \iota\, t_{10}(x; m, C) + (1 - \iota)\, q(x \mid y)`, both
        Hastings terms the whole mixture's. Where the posterior is close to its fitted Student-t
        (regressions, GLMs, most ODE parameters), one accepted draw decorrelates the chain. Tuning
        measures it before it is used: while it is off, a tenth of the tuning steps also evaluate the
        target at one such draw, without moving, and it is on in the next window (and after tuning)
        only if its draws jump further than the walk's moves (expected squared jump distance, whitened)
        and their importance weights :math:`\pi / t_{10}` have a Pareto :math:`\hat k \le 0.7` (on a
        funnel's neck they do not). Those evaluations count in ``logp_evals``; the ``independence``
        statistic says which moves it drew, and ``scale_free_adaptation.independence_decisions``
        the figures behind each window's verdict (each chain decides for itself). With 3000 tuning
        steps it raised min ESS 3-7 fold on 15 of 23 real posteriors and 2 fold on two more (decision
        record 0038). Where the walk cannot learn :math:`C` (many strongly correlated parameters), a
        second shape is probed and judged the same way: the Gaussian least-squares fitted to the log
        densities tuning evaluated (up to 50 dimensions), used where it passes and the learned one does
        not, or jumps 1.25 times further (17-d regression: min ESS 207 to 1647; decision record 0039;
        the ``independence_fitted`` statistic says which shape a chain uses). When tuning ends the shapes
        the draws would use, re-estimated at the last window's end, are examined: 100 draws of each,
        evaluated (counted in the first draw's ``logp_evals``) and judged by the same rule, decide the
        component for the draws (17-d regression: R-hat < 1.01 at 13 of 13 seeds against 10; decision
        record 0046). It is off for models with
        a :func:`~pymc_kameleon.PseudoMarginalPotential`, whose estimates' noise would pass for the
        weights' tail. 0 never draws them: the chain of the step before it, bit for bit.
    adaptation : {"freeze", "vanishing"}, default "freeze"
        ``"freeze"`` adapts only during tuning, then fixes :math:`Z`, :math:`\sigma`,
        :math:`\nu^2` and :math:`\gamma`. ``"vanishing"`` keeps adapting after tuning with
        probability :math:`p_t = t^{-\kappa}` at post-tuning step :math:`t` (the
        paper's diminishing-adaptation alternative).
    tuning : {"pooled", "per_chain"}, default "pooled"
        ``"pooled"``: ``pm.sample`` runs the chains as a population, each chain's adaptation windows
        learn the mean, covariance and :math:`Z` from every chain's tuning draws (its own scales and
        random stream stay its own), a chain stranded far below another jumps to its state during
        tuning, and the end of tuning compares the chains; see
        :mod:`pymc_kameleon.steps.population`. With one chain the population is that chain alone
        (PyMC still prints "Population sampling"), which the end of tuning cannot compare with others:
        its first 1000 draws are checked in halves instead. Models with a
        :func:`~pymc_kameleon.PseudoMarginalPotential` tune per chain. ``"per_chain"``: each
        chain tunes alone (PyMC's ordinary sampler, chains in parallel processes with ``cores>1``).
    start : {"search", "initial_point", "smc"} or SMCStart, optional
        Where each chain starts tuning. The default is ``"search"``, or ``"initial_point"`` for a model with a
        :func:`~pymc_kameleon.PseudoMarginalPotential` (a noisy estimate is no objective for a search;
        ``"search"`` or ``"smc"`` is refused there). ``"search"``: before its first step the chain runs
        Powell's method (no gradients) for ``min(50 d, 1000)`` log-density evaluations from each of two prior
        draws and moves to the best point reached, if it beats the start PyMC gave it and lies within the
        range of 100 prior draws (a funnel's neck, where a hierarchical model's density is unbounded, does
        not); with pooled tuning the chains that found the posterior then rescue the others. These evaluations
        are counted in ``logp_evals``; see :mod:`pymc_kameleon.core.starts`. ``"initial_point"``: start where
        ``pm.sample`` starts the chain (``initvals``). ``"smc"`` (``SMCStart()``) or an
        :class:`~pymc_kameleon.SMCStart`: start from a ``pm.sample_smc(kernel=KASS)`` run, whose particles
        give the chains their starts (``pm.sample``'s ``initvals`` are not used) and the tuning its first
        mean, covariance and :math:`Z`, and propose through a triangular map fitted to them, for a thin curved
        posterior the default does not converge on; one run for a pooled population, counted in chain 0's
        ``cumulative_logp_evals`` (:mod:`pymc_kameleon.steps.smc_start`, :attr:`smc_start_result`).
    vanishing_decay : float, default 1.0
        :math:`\kappa \in (0, 1]` for ``adaptation="vanishing"`` (another value without it is refused).
    adapt_interval : int, default 100
        Length of the first adaptation window after the coordinate scan; each later window is
        twice the previous one. The step needs about ``25 d + 50 + 7 * adapt_interval`` tuning
        steps (``default_tune_steps``).
    learning_rate : float, default 1.0
        Robbins-Monro gain :math:`\rho_0`; the gain at tuning step :math:`t` is
        :math:`\rho_0 (t+1)^{-0.6}`.
    history_size : int, optional
        Most history points kept for drawing :math:`Z` (evenly thinned beyond that).
        Defaults to ``max(10 * n_subsample, 10000)``.
    model : pymc.Model, optional
    initial_point : dict, optional
    compile_kwargs : dict, optional
        Passed to PyTensor when compiling the log density.
    rng : RandomGenerator, optional
        Set by ``pm.sample`` from ``random_seed``.
    blocked : bool, default True
        PyMC's option: with False and several variables PyMC makes one step per variable, each
        learning its own scale from that variable's moves (Metropolis-within-Gibbs); such steps tune
        per chain. One block (the default) learns the variables' joint covariance, which is what makes
        the step work on correlated posteriors.

    Notes
    -----
    Per step the log density is evaluated once, at the proposal: the value at the
    current state is cached, and re-evaluated only when another step of a
    ``CompoundStep`` has changed variables outside this block. Likewise exactly one
    new proposal covariance is built per step (at the proposal, for the reverse
    density); the current state's covariance and Cholesky factor are cached and
    rebuilt whenever adaptation changes :math:`Z`, :math:`\sigma`, :math:`\nu^2` or
    :math:`\gamma`.

    Sampler statistics: ``accept`` (acceptance probability), ``accepted``, ``scaling``
    (:math:`\lambda`, the AM component's scale in whitened units), ``nu2`` (:math:`\nu^2`; NaN
    before the first :math:`Z`), ``kernel_variance`` (:math:`\nu^2` times the kernel term's mean
    variance at :math:`Z`), ``bandwidth``, ``gamma``, ``kameleon`` (whether the
    Kameleon component drew this move), ``independence`` (whether an independence draw did: the
    independence component's, or one through the transport map), ``transport_map`` (whether the move
    came through the transport map fitted to the particles of ``start="smc"``),
    ``independence_fitted`` (whether its draws come from the Gaussian fitted to the evaluated
    log densities rather than the learned :math:`m, C`: constant per chain after tuning),
    ``subsample_size``, ``adapted`` (whether the mean, covariance and :math:`Z` were
    refreshed at this step), ``logp_evals`` (log-density
    evaluations in this step), ``cumulative_logp_evals`` (the chain's evaluations so far, tuning
    included: the last draw's value is the chain's whole cost), ``recent_accept_rate`` (the mean of
    ``accept`` over about the last 100 steps, which the progress bar shows), ``jitter`` (diagonal
    jitter needed to factorise the proposal covariance), ``rescued`` (pooled tuning: whether a stranded
    chain jumped to another chain's state at this step) and ``lp`` (the model log density of the draw). In a
    ``CompoundStep`` PyMC gives ``accept``, ``accepted`` and ``scaling`` one column per step that
    reports them.

    **Pseudo-marginal likelihoods.** With a :func:`~pymc_kameleon.PseudoMarginalPotential` in
    the model the step is the exact pseudo-marginal chain (Andrieu & Roberts 2009): the
    estimate at the current state is kept until a proposal is accepted, and fresh estimates
    are drawn only at proposals whose other log-density terms are finite, with a generator
    derived from the step's own (so ``random_seed`` reproduces the run). In tuning only, a plain
    (not correlated) estimate is redrawn at the state after 5 rejections in a row, so that one lucky
    estimate cannot shrink the steps until the chain freezes. Three more statistics
    are reported: ``loglik_estimate`` (the sum of the log-estimates kept at the state after the
    step), ``estimator_calls`` (estimator calls in this step) and ``cumulative_estimator_calls`` (the
    chain's so far, tuning included: the last draw's value is its whole count).

    References
    ----------
    .. [1] Sejdinovic, D., Strathmann, H., Lomeli Garcia, M., Andrieu, C., Gretton, A.
       (2014). Kernel Adaptive Metropolis-Hastings. ICML.

    Examples
    --------
    >>> import pymc as pm
    >>> from pymc_kameleon import KameleonMetropolis
    >>> with pm.Model():
    ...     x = pm.Normal("x", 0, 1, shape=2)
    ...     idata = pm.sample(step=KameleonMetropolis(), draws=1000, tune=1000,
    ...                       chains=4, progressbar=False)  # doctest: +SKIP
    """

    name = "kameleon"
    stats_dtypes_shapes = {
        **AdaptiveStep.stats_dtypes_shapes,
        "nu2": (np.float64, []),
        "bandwidth": (np.float64, []),
        "gamma": (np.float64, []),
        "kameleon": (bool, []),
        "independence": (bool, []),
        # Whether the move came through the transport map of an SMC start (start="smc", decision 0060).
        "transport_map": (bool, []),
        # Whether the independence component's draws come from the fitted shape (decision record 0039).
        "independence_fitted": (bool, []),
        "adapted": (bool, []),
        "subsample_size": (np.int64, []),
        "jitter": (np.float64, []),
        # nu2 times the kernel term's mean variance at Z (whitened units): rebuild_proposal's scale.
        "kernel_variance": (np.float64, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        kernel="gaussian",
        bandwidth="median",
        n_subsample: int = 1000,
        gamma="auto",
        nu2: float | None = None,
        target_accept: float = 0.234,
        am_weight: float = 0.1,
        kameleon_after: int = KAMELEON_AFTER,
        independence_weight: float = 0.5,
        adaptation: str = "freeze",
        tuning: str = "pooled",
        start=None,
        vanishing_decay: float = 1.0,
        adapt_interval: int = 100,
        learning_rate: float = 1.0,
        history_size: int | None = None,
        model=None,
        initial_point=None,
        compile_kwargs=None,
        rng=None,
        blocked: bool = True,
    ):
        model = pm.modelcontext(model)
        self._kernel_template = make_kernel(kernel)
        check_kameleon_options(bandwidth, gamma, n_subsample)
        if nu2 is not None:
            check_number("nu2", nu2, minimum=0)
        check_number("adapt_interval", adapt_interval, integer=True, minimum=1, strict=False)
        check_number("kameleon_after", kameleon_after, integer=True, minimum=0, strict=False)
        check_number("learning_rate", learning_rate, minimum=0)
        check_probability("target_accept", target_accept)
        check_weight("am_weight", am_weight)
        check_independence_weight(independence_weight)
        if adaptation not in _ADAPTATIONS:
            raise ValueError(f"adaptation must be one of {_ADAPTATIONS}, got {adaptation!r}.")
        if tuning not in TUNINGS:
            raise ValueError(f"tuning must be one of {TUNINGS}, got {tuning!r}.")
        self._vanishing = VanishingProbability(vanishing_decay)  # validates the decay
        if adaptation == "freeze":
            refuse_unused_options(
                type(self).__init__, dict(vanishing_decay=vanishing_decay),
                unused_when="adaptation='freeze' (nothing adapts after tuning)",
                remedy="pass adaptation='vanishing' as well, or drop {them}",
            )
        if history_size is None:
            history_size = max(10 * int(n_subsample), 10_000)
        check_number("history_size", history_size, integer=True, minimum=2, strict=False)

        self.kernel_spec = kernel
        self.bandwidth_spec = bandwidth
        self.n_subsample = int(n_subsample)
        self.gamma_spec = gamma
        self.nu2_initial = None if nu2 is None else float(nu2)
        self.target_accept = float(target_accept)
        self.am_weight = float(am_weight)
        self.kameleon_after = int(kameleon_after)
        self.independence_weight = float(independence_weight)
        self.adaptation = adaptation
        self.tuning = tuning
        self.adapt_interval = int(adapt_interval)
        self.learning_rate = float(learning_rate)
        self.history_size = int(history_size)

        if initial_point is None:
            initial_point = model.initial_point()
        vars = continuous_value_vars(vars, model, type(self).__name__)
        self.dim = int(sum(np.size(initial_point[v.name]) for v in vars))
        self._coordinate_names = coordinate_names(vars, initial_point, model)
        self._improper_coordinates = improper_prior_coordinates(vars, initial_point, model)
        self._angle_columns = angle_coordinates(vars, initial_point, model)
        target = TargetDensity(model, vars, initial_point, compile_kwargs, type(self).__name__)
        self._join_pymc(vars, target, blocked, rng, model=model, start=start)
        # PyMC 6 asks each step how long it needs to tune (pm.sample(tune=None)).
        self.default_tune_steps = self._chain.adaptation.required_tune_steps()

    # ------------------------------------------------------------ properties
    @property
    def scale_free_adaptation(self) -> ScaleFreeAdaptation:
        """The scale-free adaptation of the chain run last (its learned state, windows and report)."""
        return self._last_run()._chain.adaptation

    @property
    def subsample(self) -> np.ndarray | None:
        """The subsample :math:`Z` in the model's coordinates (None before the first Kameleon proposal)."""
        return self._last_run()._chain.adaptation.state.subsample

    @property
    def proposal(self) -> WhitenedFamily | None:
        """The Kameleon component in the model's coordinates (None before the first Kameleon proposal).

        It has ``Z`` and ``covariance(y)``, for :func:`pymc_kameleon.plots.plot_proposal_contours`.
        """
        return self._last_run()._chain.adaptation.state.model_family

    @property
    def transport_map(self):
        """The :class:`~pymc_kameleon.core.adaptation.transport_map.TriangularMap` the chain run last moves
        through (``start="smc"`` with its map), else None: then its proposal is no Kameleon proposal."""
        return self._last_run()._chain.adaptation.state.transport_map

    @property
    def scale_free_proposal(self) -> ScaleFreeProposal:
        """The whole proposal of the chain run last (the scan, AM or Kameleon/AM mixture move)."""
        return self._last_run()._chain.proposal

    # ------------------------------------------------------------ the step
    @one_blas_thread
    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list]:
        y = q0.data
        chain, target = self._chain, self._target
        if chain.exam_due:
            chain.exam_due = False
            self._examine_independence(chain.adaptation)
        evals_before = target.n_evals
        estimates_before = target.n_estimates
        y, evaluation, _ = self._current_evaluation(y, q0.point_map_info)
        logp_y = evaluation.logp
        self._warn_if_untuned()
        try:
            result = metropolis_hastings_step(chain.proposal, y, logp_y, target.evaluate, self.rng)
        except SingularCovarianceError as err:
            raise SingularCovarianceError(f"KameleonMetropolis: {err}") from None
        if result.accepted:
            target.accept(result.state, result.evaluation)
        self._refresh_sticky_estimate(result.accepted)
        adapted, new_state, rescued = False, result.state, False
        if self.tune or self._adapts_after_tuning():
            # The kept log-estimate of a pseudo-marginal term wanders on its auxiliary chain's time scale
            # by far more than sqrt(d/2), so the climb check reads the exact part only.
            move = result.move
            exact_logp = target.current_exact_logp
            population = self._population_states() if self.tune else None
            proposal_logp = math.nan if result.evaluation is None else result.evaluation.logp
            draw = TuningDraw(
                result.state, result.accept_prob, move.component, y, move.x, exact_logp, None, population,
                proposal_logp,
            )
            window = chain.adaptation.window
            self._probe_independence(chain.adaptation, chain.proposal, result.state)
            adapted = chain.adaptation.adapt(draw, self.rng)
            jump = self._rescue(exact_logp, population, chain.adaptation, window, self.rng)
            if jump is not None:
                new_state, rescued = jump[0], True

        state = chain.adaptation.state
        # A proposal equal to the state (a scale collapsed to zero) is accepted with ratio 1 but moves
        # nothing: a new user's frozen chain reported accepted = 1 at every draw, and no stuck warning.
        moved = result.accepted and not same_array(result.move.x, y)
        stats = {
            "accept": result.accept_prob,
            "accepted": float(moved),
            "scaling": state.am_scale.value,
            "nu2": math.nan if state.nu2 is None else state.nu2.value,
            "bandwidth": state.bandwidth,
            "gamma": state.gamma,
            "tune": self.tune,
            "kameleon": result.move.component == "kameleon",
            "independence": result.move.component in INDEPENDENT_COMPONENTS,
            "transport_map": result.move.component in MAP_COMPONENTS,
            "independence_fitted": state.independence_uses_fit,
            "adapted": adapted,
            "subsample_size": 0 if state.family is None else state.family.Z.shape[0],
            "jitter": result.move.jitter,
            "kernel_variance": state.kernel_variance,
            "model_logp": target.current_model_logp,
        }
        self._add_running_stats(stats, target.n_evals - evals_before)
        self._add_estimate_stats(stats, target, estimates_before)
        if self.pooled:
            stats["rescued"] = rescued
        self._check_draws(moved, target.n_estimates > estimates_before)
        self._warnings.attach(stats, "accept")  # with cores>1 they travel to the session this way
        return RaveledVars(new_state, q0.point_map_info), [stats]

    # ------------------------------------------------------------ warnings
    def _warn_singular(self):
        if not self._chain.warned_jitter:
            self._chain.warned_jitter = True
            self._warnings.warn(
                "KameleonMetropolis: a proposal covariance needed diagonal jitter to be factorised; "
                "consider a larger gamma. Proposals whose covariance cannot be factorised are rejected.",
                KameleonRuntimeWarning,
                stacklevel=4,
            )

    def _untuned_message(self) -> str:
        return (
            "KameleonMetropolis: sampling without tuning (tune=0). The proposal is "
            f"{self._untuned_proposal()}; pass tune >= {self.default_tune_steps} to pm.sample."
        )


class PooledKameleonMetropolis(PooledTuning, KameleonMetropolis, PopulationArrayStepShared):
    """``KameleonMetropolis(tuning="pooled")``: a population step (:mod:`pymc_kameleon.steps.population`)."""
