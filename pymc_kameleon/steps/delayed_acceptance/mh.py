"""``GPDelayedAcceptanceMH``: two-stage Metropolis-Hastings with a GP surrogate (random-walk or
Kameleon base proposal). The shared machinery is in :mod:`~pymc_kameleon.steps.delayed_acceptance.base`."""

from __future__ import annotations

import math

import numpy as np
from pymc.step_methods.arraystep import PopulationArrayStepShared

from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.delayed_acceptance.kernel import DelayedAcceptanceMH
from pymc_kameleon.core.kameleon.kernels import make_kernel
from pymc_kameleon.core.kameleon.scale_free import ScaleFreeProposal
from pymc_kameleon.core.validation import (
    check_independence_weight,
    check_kameleon_options,
    refuse_unused_options,
)
from pymc_kameleon.executors import as_executor_option
from pymc_kameleon.steps.delayed_acceptance.base import GPDelayedAcceptanceStep
from pymc_kameleon.steps.delayed_acceptance.executor_evaluations import ExecutorEvaluations
from pymc_kameleon.steps.population import PooledTuning

__all__ = ["GPDelayedAcceptanceMH"]

_PROPOSALS = ("random_walk", "kameleon")
#: Probes of each independence shape per tuning window from the third on (a higher rate in the short
#: ones): the step has no end-of-tuning exam, so a window's verdict is all the component gets, and at
#: the fixed rate the third window gave each shape 20, too few to judge; PyMC 5's default
#: ``tune=1000`` ends in the next one (up to 10 dimensions), so its draws ran without the component.
INDEPENDENCE_PROBES = 40
#: Speculation runs only where the likelihood took at least this long on average during tuning (ms):
#: on PyMC's gallery Lotka-Volterra model the draws were 0.8 times as fast at 1.1 ms, 1.25 times at
#: 3.1 ms and 1.5-1.6 times at 11 ms (benchmarks/speculative_da.py).
SPECULATION_MIN_MS = 2.0


class GPDelayedAcceptanceMH(ExecutorEvaluations, GPDelayedAcceptanceStep):
    r"""Two-stage Metropolis-Hastings with a Gaussian-process surrogate of the log-likelihood.

    For expensive likelihoods (ODE solutions, simulators, big data): a GP over the exact
    log-likelihood evaluations made so far screens each proposal for free, and only the
    survivors pay for an exact evaluation (Benavoli, Wyse & White [1]_). The prior is always exact.
    The "log-likelihood" :math:`\ell` is the model's observed terms plus all its potentials
    (including :func:`~pymc_kameleon.PseudoMarginalPotential` estimates); the prior
    :math:`p` is the free variables' terms, Jacobians included.

    With :math:`x` the current state, :math:`y \sim Q(\cdot \mid x)` and :math:`\mu, \sigma^2` the
    GP's predictive mean and variance of :math:`\ell`:

    **Stage 1** (paper eq. 4): accept with

    .. math::
        \alpha_1(x, y) = 1 \wedge \frac{e^{\mu(y) + \sigma^2(y)/2}\, p(y)\, Q(x \mid y)}
                                      {e^{\ell(x)}\, p(x)\, Q(y \mid x)},

    the GP marginalised (log-normal mean); where the GP is uncertain the bonus
    :math:`\sigma^2/2` lets proposals through (exploration). A rejection costs nothing.

    **Stage 2** (paper eq. 6): evaluate :math:`\ell(y)` exactly and accept with

    .. math::
        \alpha_2(x, y) = 1 \wedge \frac{e^{\ell(y)} p(y)\, Q(x \mid y)\, \alpha_1(y, x)}
                                      {e^{\ell(x)} p(x)\, Q(y \mid x)\, \alpha_1(x, y)}.

    Both :math:`\alpha_1` come from the same GP, the one before :math:`y` is added, so each step
    is reversible with respect to the exact posterior whatever the surrogate's quality. The new
    evaluation is added to the GP after the decision.

    **The GP** (:class:`~pymc_kameleon.core.gp.surrogate.GPSurrogate`): squared-exponential ARD kernel,
    constant (generalised-least-squares) mean, noise-free interpolation with a relative nugget
    ``jitter``; points are appended by an :math:`O(t^2)` Cholesky update.

    - *Initialisation.* The chain starts with an exact warm-up: plain MH steps with the base
      proposal, each evaluating the likelihood at its proposal, until the GP holds
      ``initial_points`` evaluations (the starting point plus one per warm-up step, whether
      accepted or not) *and* the base proposal's coordinate scan (25 d + 50 steps) is over, so
      that the GP screens only once every coordinate's scale is known. Then length scales are set
      to the spread of those points and the signal variance to the variance of their values,
      and (during tuning) the hyperparameters are fitted by marginal likelihood from there.
    - *Whitened inputs.* The kernel acts on coordinates whitened by the base proposal's learned
      mean and covariance (:meth:`~pymc_kameleon.core.gp.surrogate.GPSurrogate.set_input_whitening`), so its
      length scales are in posterior units and a correlated ridge looks round. At each window end
      during tuning the GP moves to the new whitening, forgets the points from before the
      previous window (a walk in from a far start), and is refitted.
    - *Floor.* Values more than 50 + 5 d nats below the best so far are clipped to that floor (and
      raised when the best improves): the GP learns "very unlikely here" without one value of
      -1e8 spoiling its fit.
    - *Fallback.* If, during tuning, stage 1 accepts less than 2% on average over 100 screened
      steps, the GP is wrong near the chain: the step takes exact steps until the next window
      ends, then refits and screens again (a warning if tuning ends in such a fallback).
    - *Hyperparameter schedule.* During tuning only, refitted whenever the training set has
      doubled since the last fit (geometric schedule: ``initial_points``, then about 2x, 4x, ...),
      and once more at the end of tuning if it grew by a quarter since. Each fit uses the latest
      ``fit_max_points`` points (L-BFGS-B, warm-started), then the full GP is refactorised once.
      After tuning the hyperparameters are frozen (the diminishing adaptation of the paper's
      Proposition 2.3).
    - *Cap.* At ``max_points`` points the GP stops growing and stays fixed: later evaluations are
      still exact, but not added (a sliding window would cost an :math:`O(t^3)` refactorisation
      per step). The chain is exact either way.

    **Base proposal.** :class:`~pymc_kameleon.core.kameleon.scale_free.ScaleFreeProposal`, as in
    :class:`~pymc_kameleon.KameleonMetropolis`: a coordinate scan, then windows of doubling length
    (from ``adapt_interval``) that re-estimate the mean and covariance from their own draws.
    ``"random_walk"`` (default): its Adaptive Metropolis component alone,
    :math:`Q(\cdot \mid x) = \mathcal N(x, \lambda^2 C)`, :math:`\lambda` by Robbins-Monro toward
    ``target_accept``. ``"kameleon"``: its Kameleon component alone, in whitened coordinates
    (:math:`\nu^2` adapted likewise); its asymmetric :math:`Q` terms enter both stages. Frozen
    after tuning.

    *Adaptation signal.* The scale is tuned for the exact target, not for the surrogate: the
    Robbins-Monro signal is :math:`\alpha_{MH}(x, y) / \alpha_1(x, y)` for a proposal that passed
    stage 1 and 0 otherwise, where :math:`\alpha_{MH}` is the plain Metropolis-Hastings acceptance
    probability (known once :math:`\ell(y)` is). Stage 1 passes with probability
    :math:`\alpha_1`, so this is an unbiased estimate of :math:`\alpha_{MH}` at no extra cost, and
    a poor surrogate, whose stage-1 rejections do not depend on the scale, cannot shrink the
    proposal. (A single step moves the log-scale by at most 0.5.) With a good surrogate
    :math:`\alpha_1 \approx \alpha_{MH}` and the signal is the overall acceptance.

    Parameters
    ----------
    vars : list of variables, optional
        Continuous variables to sample (default: all continuous free variables). The GP models
        the likelihood as a function of these; sample all continuous variables in one block if
        you can. Inside a ``CompoundStep`` whose other steps sample variables that enter the
        likelihood, the chain is still exact, but the likelihood moves with them and the GP's
        values go stale, so the chain can stall; the step warns at construction and names them.
    proposal : {"random_walk", "kameleon"}, default "random_walk"
        The base proposal (see "Base proposal" above): the scale-free Adaptive Metropolis random
        walk, or the Kameleon proposal of :class:`~pymc_kameleon.KameleonMetropolis`.
    independence_weight : float, default 0.5
        Weight :math:`\iota` of independent draws from the Student-t :math:`t_{10}(m, C)` fitted to the
        chain, added to the base proposal where tuning measured that they pay, as in
        :class:`~pymc_kameleon.KameleonMetropolis` (decision record 0038): while it is off, a tenth of
        the tuning steps evaluate the likelihood exactly at one such draw without moving (the GP
        learns from it too; counted in ``logp_evals``), and it is on only if its draws jump further
        than the walk's and their importance weights have Pareto :math:`\hat k \le 0.7`. Its moves
        are screened by the GP like any other. On seven of eight real posteriors with a likelihood
        (4 x (3000 + 6000), 3 seeds) 0.5 gave 2-4.8 times the ESS per exact evaluation and per
        second (the lynx-hare ODE: min ESS 2847 against 616, at 0.51 exact evaluations per iteration
        against 0.36). It has KameleonMetropolis's second, fitted shape too (decision record 0039).
        The default since decision record 0040: on 22 real posteriors with a likelihood (2 x (2000 +
        1000), 3 seeds) it raised the ESS per exact evaluation 2.3-15 times on 13 (7.3 times the
        min-ESS per second on PyMC's gallery Lotka-Volterra model) and lowered it only where the step
        fails either way. 0 turns it off.
        Off with a pseudo-marginal term. It switches on only at an adaptation window's end, on that
        window's measure; without an exam at the end of tuning (the GP has not seen the shapes it would
        judge) a window's verdict is all it gets, so from the third window on the windows probe each
        shape about 40 times (decision record 0065). At PyMC 5's default ``tune=1000`` the component
        then switches on as at longer tuning: on 19 real posteriors with a likelihood (2 x (1000 +
        1000), 3 seeds) the ESS per exact evaluation rose 2-12 times on 14, the other five failing
        either way; at ``tune=2000`` it was 0.6-1.9 times (median 0.9), tuning's evaluations
        included.
    target_accept : float, default 0.234
        Target acceptance rate of the scale adaptation (for plain MH on the exact target, see
        *Adaptation signal*).
    initial_points : int, optional
        Exact evaluations (starting point included) that seed the GP before screening starts.
        Default ``max(10, 2 (d + 1))``.
    max_points : int, optional
        Cap on the GP's training points (see above). Default 1000.
    fit_hyperparameters : bool, default True
        Fit the hyperparameters by marginal likelihood during tuning. With False they stay at
        ``hyperparameters`` (or the warm-up heuristics).
    hyperparameters : dict, optional
        Starting (with ``fit_hyperparameters=False``: fixed) values for ``lengthscales`` (a
        number or one per coordinate, in learned posterior sds: the GP's inputs are whitened
        before it screens anything), ``signal_variance`` and ``noise_variance``; and
        ``mean``, a fixed constant prior mean of the log-likelihood (by default the
        generalised-least-squares estimate from the training values, refreshed as points come).
    fit_max_points : int, optional
        Most recent points used by a hyperparameter fit. Default 300.
    noise_variance : "auto", "fit" or float, default "auto"
        Observation noise of the GP's values. ``"auto"``: 0 (interpolation) for exact
        likelihoods, fitted for models with a PseudoMarginalPotential, whose estimates are noisy.
        ``"fit"``: always fitted. A number: fixed.
    current_value : {"exact", "surrogate"}, default "exact"
        What stands for :math:`\ell` at the state a move starts from in :math:`\alpha_1`: the
        exact value (as above; Peskun-better) or the surrogate's :math:`\mu + \sigma^2/2`
        (stage 2 is then Christen & Fox's form [2]_). See :mod:`pymc_kameleon.core.delayed_acceptance.ratios`.
    gp_after_tuning : {"grow", "freeze"}, default "grow"
        ``"grow"``: keep adding exact evaluations after tuning (as in the paper; fixed
        hyperparameters). ``"freeze"``: fix the GP at the end of tuning, so the draws come from one
        fixed Markov kernel.
    jitter : float, default 1e-8
        Relative nugget of the GP.
    initial_scale : float, default 1.0
        Starting step size of the coordinate scan (on the sampler's unconstrained space).
    adapt_interval : int, default 100
        Length of the first adaptation window after the scan (later windows double).
    learning_rate : float, default 1.0
        Robbins-Monro gain :math:`\rho_0` (gain :math:`\rho_0 (t+1)^{-0.6}` at tuning step t).
    history_size : int, default 10000
        Most history points kept (evenly thinned) for the covariance and the Kameleon subsample.
    tuning : {"pooled", "per_chain"}, default "pooled"
        ``"pooled"``: ``pm.sample`` runs the chains as a population, the base proposal's windows
        learn the mean, covariance (and Kameleon subsample) from every chain's tuning draws, a
        stranded chain is rescued, and the end of tuning compares the chains; each chain keeps its
        own GP, scales and random stream (:mod:`pymc_kameleon.steps.population`). One chain is a
        population of one, whose first 1000 draws are checked in halves; models with a
        PseudoMarginalPotential tune per chain. ``"per_chain"``: each chain tunes alone.
    start : {"search", "initial_point", "smc"} or SMCStart, optional
        Where each chain starts tuning, as for :class:`~pymc_kameleon.KameleonMetropolis` (not with
        ``SMCStart(transport_map=True)``); the search's (or the SMC run's) evaluations count in
        ``logp_evals``, and the start is the GP's first point.
    kernel, bandwidth, n_subsample, gamma : optional
        Kameleon proposal options, as for :class:`~pymc_kameleon.KameleonMetropolis`
        (``proposal="kameleon"`` only: a value other than the default is refused without it).
    executor : concurrent.futures.Executor or callable, optional
        Put idle cores to work during the draws (*speculative delayed acceptance*): while the chain
        evaluates the likelihood at a proposal that passed stage 1, a worker evaluates it at the point
        the chain will most likely evaluate next, found by running the chain ahead on a copy of its
        random stream with the GP's prediction in place of the pending value
        (:mod:`~pymc_kameleon.core.delayed_acceptance.speculation`). A worker's value is used only
        where its point equals the chain's bit for bit, so **the draws are those of the run without an
        executor**. A ``ProcessPoolExecutor(1)`` with ``cores=1`` uses a second core; Dask's
        ``client.get_executor()`` works with ``cores > 1`` too (the forms of ``executor=`` are
        described in the scale-out guide). Tuning is not speculated (the proposal adapts at every step),
        nor a likelihood that took under 2 ms on average during tuning (the dry runs and round trips
        then cost about what they save); the start search runs its second candidate on a worker
        either way. While a chain speculates, CPython's GIL switch interval is 0.2 ms (the default 5 ms
        delayed the executor's threads), restored once the step is discarded. Not with a
        PseudoMarginalPotential (random estimates cannot be reused), nor where other steps sample
        variables of the likelihood.
    model, initial_point, compile_kwargs, rng, blocked
        As for other PyMC step methods.

    Notes
    -----
    Sampler statistics:

    - ``accept``: probability of accepting the proposal given the stage-1 outcome, i.e.
      :math:`\alpha_2` if stage 1 passed and 0 if it failed (in the warm-up, the plain MH
      probability). Its mean over a chain is the overall acceptance rate
      :math:`E[\alpha_1\alpha_2]` (the exact :math:`\alpha_1\alpha_2` would need
      :math:`\alpha_2` also where stage 1 failed, which is never computed).
    - ``accepted`` (float, as in ``pm.Metropolis``), ``stage1_accept`` (:math:`\alpha_1`; 1 in the
      warm-up, where every proposal is evaluated; after tuning, where a bound of the GP's variance
      already rejected the proposal, the bound :math:`\bar\alpha_1 \ge \alpha_1`, below the step's
      uniform), ``stage2_accept`` (:math:`\alpha_2`; NaN if stage 2 was not reached).
    - ``exact_eval``: whether this step evaluated the likelihood exactly (at the proposal, or at
      the current state at the start of a chain or after another block of a ``CompoundStep``
      moved); ``logp_evals``: the exact evaluations this step made (the start search and,
      with pooled tuning, the checks for stranded chains included); ``cumulative_logp_evals``: the
      chain's so far, tuning and the start included (the last draw's value is the chain's whole cost;
      the sum of ``logp_evals`` over the draws omits the tuning). The fraction of
      evaluations saved is ``1 - mean(exact_eval)``. ``recent_accept_rate`` and
      ``recent_exact_share``: the acceptance rate and the share of steps with an exact evaluation
      over about the last 100 steps (the progress bar shows them).
    - ``gp_sd``: the GP's predictive sd of :math:`\ell` at the proposal (NaN in the warm-up, where
      the prior is zero, and after tuning where the bound rejected the proposal without it);
      ``gp_points``: training points after the step; ``gp_refit``: whether the hyperparameters
      were fitted at this step; ``screened``: whether the GP screened this proposal (False in the
      warm-up).
    - ``tune``, ``scaling`` (:math:`\lambda`, the scale of :math:`\mathcal N(x, \lambda^2 C)` in
      learned posterior sds), ``nu2`` (:math:`\nu^2` of the Kameleon component; NaN otherwise).
    - With a PseudoMarginalPotential, also ``loglik_estimate``, ``estimator_calls`` and
      ``cumulative_estimator_calls`` (as for
      :class:`~pymc_kameleon.KameleonMetropolis`).
    - ``speculative_evals``: likelihood evaluations sent ahead to a worker at this step (with
      ``executor=``; the ones not used are the workers' wasted work); ``prefetched``: whether this
      step's exact evaluation was a worker's (it is counted in ``logp_evals`` as any other).

    **Pseudo-marginal likelihoods.** The estimate at the current state is kept until a proposal
    is accepted (stage 2), fresh estimates are drawn only at stage-2 proposals, and the GP fits a
    noise variance. The chain is the exact pseudo-marginal delayed-acceptance chain.

    Non-finite values: a proposal whose prior is :math:`-\infty` or NaN is rejected at stage 1
    without a likelihood evaluation; one whose likelihood is NaN, :math:`\pm\infty` is rejected at
    stage 2 and not added to the GP. A non-finite density at the starting point is an error.

    References
    ----------
    .. [1] Benavoli, A., Wyse, J., White, A. Gaussian Processes to speed up MCMC with automatic
       exploratory-exploitation effect.
    .. [2] Christen, J. A., Fox, C. (2005). Markov chain Monte Carlo using an approximation.
       JCGS 14(4).

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from pymc_kameleon import GPDelayedAcceptanceMH
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 10, shape=2)
    ...     pm.Normal("y", mu, 1, observed=np.random.default_rng(0).normal(size=(20, 2)))
    ...     idata = pm.sample(step=GPDelayedAcceptanceMH(), progressbar=False)  # doctest: +SKIP
    >>> float(idata.sample_stats["exact_eval"].mean())  # doctest: +SKIP
    """

    name = "gp_da_mh"
    #: The PyMC-free move (:class:`~pymc_kameleon.core.delayed_acceptance.kernel.DelayedAcceptanceMH`).
    kernel_class = DelayedAcceptanceMH
    stats_dtypes_shapes = {
        **GPDelayedAcceptanceStep.stats_dtypes_shapes,
        # nu2 of the Kameleon component (NaN for the random walk and before the first subsample).
        "nu2": (np.float64, []),
        # With executor=: evaluations sent ahead to workers at this step, and whether this step's exact
        # evaluation was a worker's (speculation).
        "speculative_evals": (np.int64, []),
        "prefetched": (bool, []),
        # Whether the independence component drew this move (independence_weight).
        "independence": (bool, []),
        # Whether its draws come from the fitted shape (decision record 0039).
        "independence_fitted": (bool, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        proposal="random_walk",
        kernel="gaussian",
        bandwidth="median",
        n_subsample=1000,
        gamma="auto",
        independence_weight=0.5,
        executor=None,
        **options,
    ):
        self._check_option_names(options)
        self.executor = as_executor_option(executor, type(self).__name__)
        if self.executor is not None:
            self.executor.warm_up()  # the workers load PyTensor's compiled modules while PyMC compiles
        self._speculation_min_ms = SPECULATION_MIN_MS
        check_independence_weight(independence_weight)
        self.independence_weight = float(independence_weight)
        if proposal not in _PROPOSALS:
            raise ValueError(f"proposal must be one of {_PROPOSALS}, got {proposal!r}.")
        self.proposal = proposal
        self._kernel_template = make_kernel(kernel)
        check_kameleon_options(bandwidth, gamma, n_subsample)
        if proposal == "random_walk":
            refuse_unused_options(
                type(self).__init__,
                dict(kernel=kernel, bandwidth=bandwidth, n_subsample=n_subsample, gamma=gamma),
                unused_when="proposal='random_walk' (they set the Kameleon proposal)",
                remedy="pass proposal='kameleon' as well, or drop {them}",
            )
        self.kernel_spec = kernel
        self.bandwidth_spec = bandwidth
        self.n_subsample = int(n_subsample) if isinstance(n_subsample, (int, np.integer)) else n_subsample
        self.gamma_spec = gamma
        super().__init__(vars, **options)
        if self.executor is not None:
            self._check_speculation()

    def _reset_chain_state(self):
        super()._reset_chain_state()
        self._target.prefetch = None  # a fork shares its parent's until the draws begin
        self.likelihood_ms = None  # the mean cost of a likelihood evaluation during tuning (ms), once known
        self._prefetch_counts = (0, 0)
        self._speculation_warned = False
        self._speculation_judged = False  # whether it was judged if evaluating ahead pays

    def stop_tuning(self):
        super().stop_tuning()
        self._start_speculating()

    def _new_kernel(self, adaptation: ScaleFreeAdaptation, schedule) -> DelayedAcceptanceMH:
        # Kameleon: the pure Kameleon component (gamma tied to nu2 is its AM-shaped fallback); the
        # Kameleon/AM mixture showed a bias on a 2-d banana with a poor GP once, later not, and did not
        # make the far-start regression robust either, so it stays off. Random walk: the AM walk alone.
        am_weight = 0.0 if self.proposal == "kameleon" else 1.0
        proposal = ScaleFreeProposal(adaptation.state, am_weight)
        return self.kernel_class(
            adaptation, proposal, schedule, self.current_value, pause_steps=2 * self.adapt_interval
        )

    def _new_adaptation(self) -> ScaleFreeAdaptation:
        if self.proposal != "kameleon":
            return super()._new_adaptation(
                None, independence_weight=self._independence_weight_in_use,
                independence_probes=INDEPENDENCE_PROBES,
            )
        return super()._new_adaptation(
            self._kernel_template,
            bandwidth=self.bandwidth_spec,
            gamma=self.gamma_spec,
            n_subsample=self.n_subsample,
            independence_weight=self._independence_weight_in_use,
            independence_probes=INDEPENDENCE_PROBES,
        )

    def _extra_stats(self, result) -> dict:
        state = self._chain.kernel.adaptation.state  # the chain this step moved
        nu2 = state.nu2
        prefetch = self._chain.kernel.prefetch
        counts = (0, 0) if prefetch is None else (prefetch.submitted, prefetch.used)
        if prefetch is not None:
            self._check_speculation_pays(prefetch)
        seen, self._prefetch_counts = self._prefetch_counts, counts
        return {
            "nu2": math.nan if nu2 is None else nu2.value,
            "speculative_evals": counts[0] - seen[0],
            "prefetched": counts[1] > seen[1],
            "independence": result.component == "independence",
            "independence_fitted": state.independence_uses_fit,
        }


class PooledGPDelayedAcceptanceMH(PooledTuning, GPDelayedAcceptanceMH, PopulationArrayStepShared):
    """``GPDelayedAcceptanceMH(tuning="pooled")``, a population step (steps/population.py)."""
