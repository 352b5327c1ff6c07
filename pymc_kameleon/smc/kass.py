r"""KASS: Kameleon rejuvenation moves inside ``pm.sample_smc`` (Schuster, Strathmann et al.).

PyMC's SMC sampler tempers from the prior to the posterior through
:math:`\pi_t(x) \propto p(x) L(x)^{\beta_t}`, reweighting, resampling and then rejuvenating the
particles with an MCMC kernel at each stage; its evidence estimate is
:math:`\log \hat Z = \sum_t \log \frac1N \sum_i L(x_i)^{\beta_t - \beta_{t-1}}`. ``KASS`` supplies
the rejuvenation: Metropolis-Hastings moves whose Gaussian proposal at each particle,

.. math::
    q(\cdot \mid x) = \mathcal N\!\left(x,\ \gamma^2 I + \nu_t^2 M_{Z,x} H M_{Z,x}^\top\right),

is built from kernel gradients over the resampled particle system :math:`Z`, so it aligns with
the local shape of :math:`\pi_t` (bananas, rings, several modes). With the linear kernel the
covariance is the particle system's global covariance: adaptive SMC (Fearnhead & Taylor), the
paper's ASMC baseline (:class:`ASMC`).
"""

from __future__ import annotations

import math

import numpy as np
from pymc.model import modelcontext

from pymc_kameleon.core.kameleon.family import check_subsample_size
from pymc_kameleon.core.kameleon.kernels import make_kernel
from pymc_kameleon.core.linalg import one_blas_thread
from pymc_kameleon.core.smc.evidence import (
    genealogy_stats,
    loglik_rise,
    slowest_chain_autocorrelation,
    waste_free_relative_variance,
)
from pymc_kameleon.core.smc.population import adapt_log_scale, wrap_about_mean_direction
from pymc_kameleon.core.smc.rejuvenation import (
    CollapsedParticlesError,
    PoorMixingLog,
    check_rejuvenation_options,
    fit_stage_proposal,
)
from pymc_kameleon.core.smc.waste_free import (
    check_waste_free_options,
    waste_free_chain_length,
    waste_free_final_thinning,
)
from pymc_kameleon.smc._batched import BatchedSMCKernel
from pymc_kameleon.smc.kass_checks import KASSChecks
from pymc_kameleon.smc.kass_moves import KASSMoves
from pymc_kameleon.smc.particle_checks import check_continuous, coordinate_labels

__all__ = ["ASMC", "KASS"]


class KASS(KASSChecks, KASSMoves, BatchedSMCKernel):
    r"""Kernel Adaptive SMC: ``pm.sample_smc(kernel=KASS, ...)`` with Kameleon rejuvenation moves.

    At every stage, after PyMC has reweighted to the new temperature :math:`\beta_t` and resampled:

    - **tune.** :math:`Z` is the resampled particle system (a random subsample of ``n_subsample``
      particles when there are more). The Gaussian kernel's bandwidth comes from the median
      heuristic over :math:`Z`, and :math:`\gamma` from its spread (``"auto"``: 0.2 times the
      median marginal standard deviation). :math:`\nu_t^2` is set so that the average
      proposal variance is :math:`s_t^2 \cdot 2.38^2/d` times the particles' average marginal
      variance (the optimal random-walk scale at :math:`s_t = 1`).
    - **mutate.** Every particle makes Metropolis-Hastings moves against
      :math:`p(x) L(x)^{\beta_t}`, all particles at once: the proposals, their densities in
      both directions (each particle has its own location-dependent covariance) and, where
      PyTensor can vectorise the model, the log densities are computed in batches. The number
      of sweeps per stage follows ``n_steps``. A move is a Kameleon move, ASMC's global random
      walk (``am_weight``) or an independent draw from the Gaussian fitted to the particles,
      truncated to their largest whitened radius (``independence_weight``, PyMC's ``IMH``
      proposal); both Hastings terms are the mixture's density.
    - **adapt.** After the sweeps, the paper's eq. (4) on the log scale:
      :math:`\log s_{t+1}^2 = \log s_t^2 + \lambda (\hat\alpha_t - \alpha_{\mathrm{opt}})`, with
      :math:`\hat\alpha_t` the mean acceptance *probability* of the stage's proposals.

    Each sweep leaves :math:`\pi_t` invariant because the proposal family is fixed within a
    stage (it depends only on the particles at the start of the stage). The evidence
    (``log_marginal_likelihood``) is PyMC's own accounting.

    **Pseudo-marginal likelihoods.** With a :func:`~pymc_kameleon.PseudoMarginalPotential`, each
    particle keeps the likelihood estimate it was accepted with (PyMC carries it through
    resampling), and only proposals are estimated afresh, so the sampler targets the exact
    posterior and the evidence estimate stays consistent (IS²/SMC² on the extended space). The
    estimators' random stream is seeded from ``random_seed``.

    Options are passed through ``pm.sample_smc``. Its ``kernel`` argument is this class, so the
    RKHS kernel is called ``proposal_kernel``.

    Parameters
    ----------
    proposal_kernel : str or kernel object, default "gaussian"
        ``"gaussian"``, ``"matern32"``, ``"matern52"``, ``"linear"`` (adaptive SMC, see
        :class:`ASMC`), or an object with ``value(X, Z)`` and ``grad(X, Z)``.
    bandwidth : "median" or float, default "median"
        Kernel length scale; the median heuristic is recomputed at every stage.
    gamma : "auto" or float, default "auto"
        Exploration noise :math:`\gamma`.
    n_subsample : int, default 1000
        At most this many particles form :math:`Z`. A sweep costs
        :math:`O(N n d^2 + N d^3)` on top of the :math:`N` log-density evaluations.
    learning_rate : float, default 3.0
        :math:`\lambda` in eq. (4), constant over stages. On the log scale; the paper's
        :math:`\lambda = 1` acts on :math:`\nu^2` itself, so the values do not compare.
    target_accept : float, default 0.234
        :math:`\alpha_{\mathrm{opt}}`.
    initial_scale : float, default 1.0
        :math:`s_1^2`, relative to the optimal random-walk scale.
    n_steps : int, "moved", "acceptance" or "correlation", default "moved" ("acceptance" for :class:`ASMC`)
        MH sweeps per stage. An integer fixes it. ``"moved"`` sweeps until every particle has
        moved with probability ``move_probability``, from each particle's own acceptance
        probabilities (the expected fraction still unmoved,
        :math:`\frac1N \sum_i \prod_s (1 - \alpha_{i,s})`, falls to ``1 - move_probability``).
        ``"acceptance"`` runs one sweep, then enough sweeps for a particle to move with probability
        ``move_probability`` at that sweep's *mean* acceptance rate
        (:func:`~pymc_kameleon.core.smc.population.steps_for_acceptance`): too few where the particles differ,
        for example in a funnel's neck, whose particles accept far less often than the rest. On a
        regression whose noise scale and coefficients form such a funnel at small beta
        (``benchmarks/kass_unstandardised_regression.py``) ``"moved"`` spends its extra sweeps on
        those stages and cut the log Z error from -1.52 to -0.36 over 8 seeds
        (``benchmarks/results/kass_unstandardised_regression.md``);
        what remains is reported (the evidence-lag warning,
        :func:`~pymc_kameleon.core.smc.evidence.evidence_lag`).
        ``"correlation"`` is the rule of PyMC's ``MH`` kernel: sweep while more than 90% of the
        coordinates' correlations with the stage's starting particles still drop by more than
        ``correlation_threshold``; it stops early when acceptance is low, because then the
        correlations hardly move. Both are capped by ``max_steps``. An option of a rule not in use
        (``correlation_threshold``, ``move_probability``, ``max_steps``) is refused unless at its default.
    correlation_threshold : float, default 0.01
        The drop in a coordinate's correlation below which ``n_steps="correlation"`` counts it as
        settled.
    move_probability : float, default 0.99
        The probability that each particle has moved at least once, at which ``n_steps="moved"``
        stops sweeping.
    max_steps : int, default 100
        Cap on the sweeps per stage.
    chunk_size : int, optional
        Particles per chunk of the batched proposal algebra; by default a chunk's temporaries
        stay near 4 MB, so memory is bounded for any number of particles.
    batch_logp : {"auto", True, False}, default "auto"
        Evaluate the log densities of all proposals with one vectorised PyTensor function
        (``vectorize_graph``). ``"auto"`` uses it when the model vectorises and agrees with PyMC's
        per-particle functions on the initial particles, else falls back to a loop; models with
        pseudo-marginal terms always loop (their estimates are random), and so do models whose
        vectorised graph would run a Cholesky or triangular solve per particle and observation in
        PyTensor's Python loop (a multivariate likelihood of many rows with a parameter as its
        covariance, on PyMC 5's C backend). ``True`` insists, except for a log density that draws
        random numbers (a ``pm.Simulator``), which is always evaluated particle by particle.
    resampling : {"multinomial", "systematic"}, default "multinomial"
        How particles are resampled at each stage. Multinomial resampling is what the evidence's
        single-run standard error (:func:`~pymc_kameleon.smc.log_evidence`) needs; PyMC's systematic
        resampling adds less noise to the particles, but then ``log_evidence`` has no standard error
        (except with ``waste_free=True``, whose error bar needs no genealogy).
    am_weight : float, default 0.25 (0 for :class:`ASMC`)
        Probability that a move is the global random walk of the stage's optimal variance in
        whitened coordinates (ASMC's move) instead of a Kameleon move; both Hastings terms are the
        mixture's density (:class:`~pymc_kameleon.core.smc.mixtures.GlobalWalkMixture`).
        With 0 (pure Kameleon moves, the paper's kernel) the local moves lag behind the tempered
        targets at small beta and log Z is biased low: on the 8-d banana bridge (N = 2000, the
        same 30 seeds) the mean log Z error was -0.187 +- 0.057 with 0, -0.138 +- 0.049 with 0.1
        and -0.036 +- 0.038 with 0.25, at the same cost (``docs/decisions/0030-kass-global-walk.md``).
    independence_weight : float, default 0.25 (0 for :class:`ASMC`)
        Probability that a move is an independent draw from the Gaussian fitted to the stage's
        particles (the proposal of PyMC's ``IMH`` kernel), truncated to the ball of the
        particles' largest whitened radius, instead of a local move; both Hastings terms are the
        mixture's density (:class:`~pymc_kameleon.core.smc.mixtures.IndependenceMixture`).
        Where the tempered targets are nearly Gaussian one accepted draw decorrelates a
        particle: with 0.25 the mean abs(log Z) error fell from 0.55 to 0.13 on a 20-d conjugate
        regression and from 0.17 to 0.10 on the 8-d banana bridge (30 runs each,
        ``docs/decisions/0031-kass-truncated-independent-draws.md``). The truncation keeps the
        draws where the particles are: the Gaussian of a small or skewed particle cloud otherwise
        reaches parameters where an ODE likelihood takes seconds per solve. 0 gives the Kameleon and
        global-walk moves only.
    waste_free : bool, default False
        Waste-free SMC (Dau and Chopin 2022): at each stage the first :math:`M = \lceil N/P \rceil`
        resampled particles start Markov chains (the same moves as the sweeps) that run until they
        hold :math:`N` states in all, and every state is kept: :math:`N - M` likelihood evaluations
        per stage instead of a sweep rule's. The evidence's error bar is then Dau and Chopin's (the
        chains' asymptotic variance of each stage's mean weight, summed over stages). It needs chains
        longer than the moves' mixing time: with short chains log Z came out low with too small an
        error bar (``benchmarks/results/history.md``, "Waste-free KASS"), so it is off by default.
    chain_length : int or "auto", default "auto"
        :math:`P`, the states per waste-free chain (its start included): :math:`M = \lceil N/P \rceil`
        chains share the :math:`N` states, so the longest holds :math:`\lceil N/M \rceil`, which is
        :math:`P` when it divides :math:`N` and what the run records (``chain_length=600`` with
        :math:`N = 1000` runs 2 chains of 500). ``"auto"`` makes about 20 chains,
        :math:`P = \max(\lfloor N/20 \rfloor, \min(25, \lfloor N/4 \rfloor), 10)`, at most :math:`N`:
        chains of 10 states biased log Z on the gallery ODE at N = 1000, chains of 50 or 100 did not
        (``docs/decisions/0042-kass-waste-free-option.md``); below 500 particles, chains of 25 while
        4 chains remain (on a conjugate regression at N = 200, ±2 SE covered log Z in 90-93% of runs
        against 78-87% with chains of 10, which warned in 108 of 120 runs; decision 0054). Only with
        ``waste_free=True``; not with ``n_steps``.
    final_thinning : int, optional
        Waste-free: at the last stage (:math:`\beta = 1`), whose :math:`N` states are the posterior
        draws, each chain makes this many moves between the states it keeps (its start, then every
        ``final_thinning``-th state), at ``final_thinning`` times that stage's evaluations. Default 5
        with ``waste_free=True``: on PyMC's gallery Lotka–Volterra ODE (N = 1000, chains of 50) the
        largest error of a posterior mean over 5 seeds went from 0.23 to 0.08 posterior sd for 44%
        more solves, 0.40 times those of ``pm.sample_smc``'s default kernel
        (``docs/decisions/0053-kass-waste-free-final-thinning.md``). 1 keeps every state. The
        evidence does not change: it is read before the last stage's moves. Only with
        ``waste_free=True``.
    executor : concurrent.futures.Executor or callable, optional
        Evaluates the likelihoods of the initial particles and of every sweep's proposals on this
        executor (one task per worker per sweep), for expensive likelihoods: Dask's
        ``client.get_executor()``, a ``ProcessPoolExecutor``, ``mpi4py.futures.MPIPoolExecutor``, or a
        zero-argument callable that returns one (needed with ``cores > 1`` for executors that do not
        pickle; a Dask executor pickles as its scheduler's address). The prior is evaluated here. The
        draws and the evidence are those of the serial run, whatever the number of workers
        (:mod:`pymc_kameleon.executors`; "the same" needs the same compiled functions: on PyMC 6 a
        cold compilation cache changed values by about 1e-15 in a new user's check, serial runs
        included). Not with pseudo-marginal terms: give the executor to
        :func:`~pymc_kameleon.PseudoMarginalPotential` instead.
    **kwargs
        ``pm.sample_smc``'s own kernel options (``threshold``, ...).
    """

    stats_dtypes_shapes: dict[str, tuple[type, list]] = {
        "log_marginal_likelihood": (float, []),
        "beta": (float, []),
        "mean_accept_rate": (float, []),
        "nu2": (float, []),
        "scale": (float, []),
        "bandwidth": (float, []),
        "gamma": (float, []),
        "n_steps": (int, []),
        "subsample_size": (int, []),
        "likelihood_evals": (int, []),
        "evidence_relative_variance": (float, []),
        "distinct_ancestors": (int, []),
        "loglik_rise": (float, []),
        "loglik_rise_se": (float, []),
        "autocorrelation_time": (float, []),
    }

    _default_proposal_kernel = "gaussian"
    _default_am_weight = 0.25  # removes the evidence's low bias (docstring, docs/decisions/0030)
    _default_independence_weight = 0.25  # halves the evidence's error (docstring, docs/decisions/0031)
    _default_n_steps = "moved"  # enough sweeps in a funnel's neck too (docstring, docs/decisions/0032)

    def __init__(
        self,
        *args,
        proposal_kernel=None,
        bandwidth="median",
        gamma="auto",
        n_subsample: int = 1000,
        learning_rate: float = 3.0,
        target_accept: float = 0.234,
        initial_scale: float = 1.0,
        n_steps=None,
        correlation_threshold: float = 0.01,
        move_probability: float = 0.99,
        max_steps: int = 100,
        chunk_size: int | None = None,
        batch_logp="auto",
        resampling: str = "multinomial",
        am_weight: float | None = None,
        independence_weight: float | None = None,
        waste_free: bool = False,
        chain_length="auto",
        final_thinning: int | None = None,
        **kwargs,
    ):
        if "kernel" in kwargs:
            raise TypeError(
                f"{type(self).__name__} takes the RKHS kernel as proposal_kernel=... "
                "(pm.sample_smc's own `kernel` argument is the SMC kernel class)."
            )
        self._check_keywords(kwargs)  # before the checks below read kwargs (BatchedSMCKernel checks again)
        model = modelcontext(kwargs.get("model"))
        check_continuous(model, type(self).__name__)
        proposal_kernel = self._default_proposal_kernel if proposal_kernel is None else proposal_kernel
        self._kernel_template = make_kernel(proposal_kernel, option="proposal_kernel")
        self.proposal_kernel = (
            proposal_kernel if isinstance(proposal_kernel, str) else type(proposal_kernel).__name__
        )
        am_weight = self._default_am_weight if am_weight is None else am_weight
        if independence_weight is None:
            independence_weight = self._default_independence_weight
        check_waste_free_options(
            waste_free, chain_length, n_steps, kwargs.get("draws", 2000), final_thinning
        )
        n_steps = self._default_n_steps if n_steps is None else n_steps
        check_rejuvenation_options(
            bandwidth=bandwidth,
            gamma=gamma,
            n_subsample=n_subsample,
            learning_rate=learning_rate,
            initial_scale=initial_scale,
            target_accept=target_accept,
            n_steps=n_steps,
            correlation_threshold=correlation_threshold,
            move_probability=move_probability,
            max_steps=max_steps,
            chunk_size=chunk_size,
            batch_logp=batch_logp,
            resampling=resampling,
            am_weight=am_weight,
            independence_weight=independence_weight,
        )
        self._refuse_unused_sweep_options(
            n_steps, waste_free, correlation_threshold=correlation_threshold,
            move_probability=move_probability, max_steps=max_steps,
        )

        super().__init__(*args, batch_logp=batch_logp, **kwargs)
        check_subsample_size(n_subsample, sum(size for _, size in self.var_info.values()))
        self._coordinate_names = coordinate_labels(self.variables, self.var_info)  # for the warnings

        self.bandwidth_spec = bandwidth
        self.gamma_spec = gamma
        self.n_subsample = int(n_subsample)
        self.learning_rate = float(learning_rate)
        self.target_accept = float(target_accept)
        self.initial_scale = float(initial_scale)
        self.n_steps_rule = n_steps
        self.correlation_threshold = float(correlation_threshold)
        self.move_probability = float(move_probability)
        self.max_steps = int(max_steps)
        self.chunk_size = chunk_size
        self.resampling = resampling
        self.am_weight = float(am_weight)
        self.independence_weight = float(independence_weight)
        self.waste_free = bool(waste_free)
        self.chain_length = waste_free_chain_length(chain_length, self.draws)
        self.final_thinning = waste_free_final_thinning(final_thinning) if self.waste_free else 1
        self._reset_chain_state()

    # ---------------------------------------------------------------- set-up
    @one_blas_thread
    def setup_kernel(self):
        """Reset the per-chain state (PyMC reuses one kernel instance for sequential chains)."""
        self._reset_chain_state()
        super().setup_kernel()
        self._warn_if_few_waste_free_chains()

    def _reset_chain_state(self):
        self._log_scale = math.log(self.initial_scale)
        self._family = None
        self._stage = {}
        self.n_steps = 0
        # The stages that barely mixed, for the chain's warning and the collapse error.
        adaptive = isinstance(self.n_steps_rule, str) and not self.waste_free
        self._poor_stages = PoorMixingLog(
            self.max_steps, adaptive=adaptive, estimated=bool(self._pseudo_marginal_ops)
        )
        self._eve = np.arange(self.draws)  # the initial draw each particle descends from
        self._rises = []  # (stage, beta, loglik_rise, its se): for the evidence-lag warning
        self._autocorrelation = []  # waste-free: (stage, beta, tau, of what), for the short-chains warning
        self._evidence = {"evidence_relative_variance": np.nan, "distinct_ancestors": self.draws}
        # Waste-free: the particles are _n_chains chains stored step by step (the initial draws: N
        # chains of length 1), and the sum of the stages' log-evidence variances so far.
        self._n_chains = self.draws
        self._log_z_variance = 0.0

    # ---------------------------------------------------------------- one stage
    @one_blas_thread
    def resample(self):
        """Resample (multinomially by default), after the evidence's genealogy variance estimate at this
        stage's weights.

        Each particle's Eve index (the initial draw it descends from) follows the resampling, so
        :func:`~pymc_kameleon.core.smc.evidence.evidence_relative_variance` gives the error bar of the
        evidence accumulated so far (read back by :func:`pymc_kameleon.smc.log_evidence`). That estimator is
        unbiased under multinomial resampling, not under PyMC's systematic resampling: with systematic
        resampling it reported half the spread of log Z over repeated runs (conjugate test model, 60
        runs of 300 particles: standard error 0.061 against a spread of 0.122; 67% of the ±2 SE
        intervals covered the truth). ``resampling="systematic"`` is PyMC's scheme, and records no
        error bar.

        Waste-free (``waste_free=True``): the error bar is Dau and Chopin's instead, the sum over
        stages of :func:`~pymc_kameleon.core.smc.evidence.waste_free_relative_variance` (it needs no
        genealogy, so either scheme has one), and the first :math:`M` resampled particles start the
        chains (after systematic resampling, a random subset of :math:`M`: its first ones would
        favour the low indices).
        """
        multinomial = self.resampling == "multinomial"
        if self.waste_free:
            self._log_z_variance += waste_free_relative_variance(self.weights, self._n_chains)
            self._evidence = {
                "evidence_relative_variance": math.expm1(self._log_z_variance),
                "distinct_ancestors": int(np.unique(self._eve).size),
            }
        else:
            self._evidence = genealogy_stats(self.weights, self._eve, self.iteration, multinomial)
        if not multinomial:
            super().resample()
            if self.waste_free:
                order = self.rng.permutation(self.draws)
                self.resampling_indexes = self.resampling_indexes[order]
                for name in ("tempered_posterior", "prior_logp", "likelihood_logp"):
                    setattr(self, name, getattr(self, name)[order])
                self.tempered_posterior_logp = self.tempered_posterior_logp[order]
        else:
            self.resampling_indexes = self.rng.choice(self.draws, size=self.draws, p=self.weights)
            self.tempered_posterior = self.tempered_posterior[self.resampling_indexes]
            self.prior_logp = self.prior_logp[self.resampling_indexes]
            self.likelihood_logp = self.likelihood_logp[self.resampling_indexes]
            self.tempered_posterior_logp = self.prior_logp + self.likelihood_logp * self.beta
        self._eve = self._eve[self.resampling_indexes]

    @one_blas_thread
    def tune(self):
        """Fit the Kameleon proposal family to the resampled particles (stage start), in whitened coordinates.

        The particles' mean :math:`m` and covariance :math:`C = L L^\\top` define :math:`w = L^{-1}(x - m)`;
        :math:`Z`, the bandwidth and :math:`\\gamma` live there, so the proposal does not depend on the
        model's units (a coordinate in dollars and one in millimetres are treated alike)
        (:func:`~pymc_kameleon.core.smc.rejuvenation.fit_stage_proposal`).
        """
        scale = math.exp(self._log_scale)
        # Angles (pm.VonMises) into one period about their mean direction: the copies of the posterior
        # 2 pi apart are one on the circle, and the moves are fitted to one of them.
        self.tempered_posterior = wrap_about_mean_direction(self.tempered_posterior, self._angle_columns)
        X, kernel = self.tempered_posterior, self._kernel_template
        try:
            fit = fit_stage_proposal(
                X, kernel, self.bandwidth_spec, self.gamma_spec, self.n_subsample, scale, self.rng,
                am_weight=self.am_weight,
                independence_weight=self.independence_weight,
            )
        except CollapsedParticlesError as err:  # name the stalled moves if they caused the collapse
            cause = self._poor_stages.collapse_cause(scale)
            raise ValueError(
                f"{err} after resampling at beta={self.beta:.4g}, so no proposal can be fitted. {cause}"
            ) from None
        self._family = fit.family
        self._stage = fit.stats()

    @one_blas_thread
    def mutate(self):
        """Kameleon MH sweeps over all particles against :math:`p(x) L(x)^{\\beta_t}`
        (:func:`~pymc_kameleon.core.smc.rejuvenation.rejuvenate`), then adapt the scale.

        With ``cores>1`` the chain runs in a worker process whose warnings never reach the session;
        :meth:`sample_settings` then carries the poor-mixing warning of its last stage back
        (:class:`~pymc_kameleon.steps.reporting.StepWarnings`).
        """
        N, d = self.tempered_posterior.shape
        before = self._evaluations
        tau = np.nan
        if self.waste_free:
            moved, loglik_start, parents = self._run_chains()
            steps = moved.steps
            whole = N // moved.n_chains * moved.n_chains  # whole steps of every chain
            tau, slowest = slowest_chain_autocorrelation(
                self.likelihood_logp[:whole].reshape(-1, moved.n_chains),
                self.tempered_posterior[:whole].reshape(-1, moved.n_chains, d),
                self._coordinate_names,
            )
            self._autocorrelation.append((self.iteration, self.beta, tau, slowest))
        else:
            loglik_start, parents = self.likelihood_logp.copy(), self.resampling_indexes
            moved = self._sweep(N, d)
            steps = moved.sweeps
        evals = self._evaluations - before
        rise, rise_se = loglik_rise(loglik_start, self.likelihood_logp, parents)
        self._rises.append((self.iteration, self.beta, rise, rise_se))
        self._stage.update(
            mean_accept_rate=moved.mean_accept, n_steps=steps, likelihood_evals=evals,
            loglik_rise=rise, loglik_rise_se=rise_se, autocorrelation_time=tau,
        )
        self.n_steps = steps
        self._log_scale = adapt_log_scale(
            self._log_scale, moved.mean_accept, self.target_accept, self.learning_rate
        )
        self._poor_stages.record(self.iteration, self.beta, moved.mean_accept, steps, moved.unmoved)
        if self.beta >= 1:
            self._warn_at_the_last_stage()


class ASMC(KASS):
    r"""Adaptive SMC (Fearnhead & Taylor): :class:`KASS` with the linear kernel.

    The proposal covariance is :math:`\gamma^2 I + \nu_t^2 \cdot 4 n\, \widehat{\mathrm{Cov}}(Z)`, the
    same at every particle: the particle system's global covariance, scaled by eq. (4). This
    is the paper's ASMC baseline; ``pm.sample_smc(kernel=ASMC)``.
    """

    _default_proposal_kernel = "linear"
    _default_am_weight = 0.0  # its moves are already the global walk
    _default_independence_weight = 0.0  # the paper's baseline: global-walk moves only
    _default_n_steps = "acceptance"  # the paper's baseline, as benchmarked
