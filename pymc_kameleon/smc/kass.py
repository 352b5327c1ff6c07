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

import logging
import math

import numpy as np
import pytensor.tensor as pt
from pymc.model import modelcontext
from pymc.pytensorf import compile, floatX, join_nonshared_inputs, make_shared_replacements
from pymc.smc.kernels import SMC_KERNEL, Pearson
from pymc.vartypes import discrete_types
from pytensor import shared
from pytensor.graph.replace import vectorize_graph
from pytensor.tensor.random.type import RandomGeneratorType

from pymc_kameleon.core.kameleon import check_subsample_size, fit_proposal, matched_nu2
from pymc_kameleon.core.kernels import make_kernel
from pymc_kameleon.core.linalg import SingularCovarianceError
from pymc_kameleon.core.scale_free import WhitenedFamily, Whitening
from pymc_kameleon.core.smc import (
    adapt_log_scale,
    evidence_relative_variance,
    population_mh_move,
    steps_for_acceptance,
)
from pymc_kameleon.core.validation import check_kameleon_options, check_number, check_probability
from pymc_kameleon.pseudo_marginal import PseudoMarginalOp
from pymc_kameleon.steps.reporting import StepWarnings

__all__ = ["ASMC", "KASS"]

_log = logging.getLogger(__name__)

_STEP_RULES = ("correlation", "acceptance")
_RESAMPLING = ("multinomial", "systematic")
# Rows per vectorised log-density call: bounds the memory of models with many observations.
_LOGP_BATCH_ROWS = 1024
# The proposal factors of the current particles are kept between sweeps below this size.
_FACTOR_CACHE_BYTES = 256 * 2**20
# Particles compared between the vectorised and PyMC's per-particle log densities (per chain).
_BATCH_CHECK_POINTS = 8
# A stage whose mean acceptance probability is below this has moves that barely mix.
_MIN_STAGE_ACCEPT = 0.01


class KASS(SMC_KERNEL):
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
      of sweeps per stage follows ``n_steps``.
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
    n_steps : int, "acceptance" or "correlation", default "acceptance"
        MH sweeps per stage. An integer fixes it. ``"acceptance"`` runs one sweep, then enough
        sweeps for a particle to move with probability ``move_probability`` at that sweep's
        acceptance rate (:func:`~pymc_kameleon.core.smc.steps_for_acceptance`).
        ``"correlation"`` is the rule of PyMC's ``MH`` kernel: sweep while more than 90% of the
        coordinates' correlations with the stage's starting particles still drop by more than
        ``correlation_threshold``; it stops early when acceptance is low, because then the
        correlations hardly move. Both are capped by ``max_steps``.
    correlation_threshold : float, default 0.01
    move_probability : float, default 0.99
    max_steps : int, default 100
        Cap on the sweeps per stage.
    chunk_size : int, optional
        Particles per chunk of the batched proposal algebra; by default a chunk's temporaries
        stay near 4 MB, so memory is bounded for any number of particles.
    batch_logp : {"auto", True, False}, default "auto"
        Evaluate the log densities of all proposals with one vectorised PyTensor function
        (``vectorize_graph``). ``"auto"`` uses it when the model vectorises and agrees with PyMC's
        per-particle functions on the initial particles, else falls back to a loop; models with
        pseudo-marginal terms always loop (their estimates are random). ``True`` insists.
    resampling : {"multinomial", "systematic"}, default "multinomial"
        How particles are resampled at each stage. Multinomial resampling is what the evidence's
        single-run standard error (:func:`~pymc_kameleon.smc.log_evidence`) needs; PyMC's systematic
        resampling adds less noise to the particles, but then ``log_evidence`` has no standard error.
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
    }

    _default_proposal_kernel = "gaussian"

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
        n_steps="acceptance",
        correlation_threshold: float = 0.01,
        move_probability: float = 0.99,
        max_steps: int = 100,
        chunk_size: int | None = None,
        batch_logp="auto",
        resampling: str = "multinomial",
        **kwargs,
    ):
        if "kernel" in kwargs:
            raise TypeError(
                f"{type(self).__name__} takes the RKHS kernel as proposal_kernel=... "
                "(pm.sample_smc's own `kernel` argument is the SMC kernel class)."
            )
        model = modelcontext(kwargs.get("model"))
        discrete = [v.name for v in model.value_vars if v.dtype in discrete_types]
        if discrete:
            raise ValueError(
                f"{type(self).__name__} moves continuous variables only, but {discrete} "
                f"{'is' if len(discrete) == 1 else 'are'} discrete. Use pm.smc.kernels.MH or IMH "
                "for models with discrete variables."
            )
        proposal_kernel = self._default_proposal_kernel if proposal_kernel is None else proposal_kernel
        self._kernel_template = make_kernel(proposal_kernel)
        self.proposal_kernel = (
            proposal_kernel if isinstance(proposal_kernel, str) else type(proposal_kernel).__name__
        )
        check_kameleon_options(bandwidth, gamma, n_subsample)
        check_number("learning_rate", learning_rate, minimum=0, strict=False)
        check_number("initial_scale", initial_scale, minimum=0)
        check_probability("target_accept", target_accept)
        check_number("correlation_threshold", correlation_threshold, minimum=0)
        check_probability("move_probability", move_probability)
        check_number("max_steps", max_steps, integer=True, minimum=1, strict=False)
        if isinstance(n_steps, str):
            if n_steps not in _STEP_RULES:
                raise ValueError(
                    f"n_steps must be a positive integer or one of {_STEP_RULES}, got {n_steps!r}."
                )
        else:
            check_number("n_steps", n_steps, integer=True, minimum=1, strict=False)
        if chunk_size is not None:
            check_number("chunk_size", chunk_size, integer=True, minimum=1, strict=False)
        if not (isinstance(batch_logp, bool) or (isinstance(batch_logp, str) and batch_logp == "auto")):
            raise ValueError(f'batch_logp must be "auto", True or False, got {batch_logp!r}.')
        if resampling not in _RESAMPLING:
            raise ValueError(f"resampling must be one of {_RESAMPLING}, got {resampling!r}.")

        super().__init__(*args, **kwargs)
        check_subsample_size(n_subsample, sum(size for _, size in self.var_info.values()))

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
        self.batch_logp = batch_logp
        self.resampling = resampling
        self._evaluations = 0  # running count of likelihood evaluations at proposals

        self._pseudo_marginal_ops = _pseudo_marginal_ops(self.likelihood_logp_func)
        self._batch_logp_func = None
        if batch_logp is True or (batch_logp == "auto" and not self._pseudo_marginal_ops):
            self._batch_logp_func = self._compile_batch_logp(
                model, kwargs.get("compile_kwargs"), strict=batch_logp is True
            )
        self._reset_chain_state()

    # ---------------------------------------------------------------- set-up
    def _compile_batch_logp(self, model, compile_kwargs, strict: bool):
        """One PyTensor function mapping an (m, D) array of particles to their (prior, likelihood) log
        densities."""
        try:
            point = model.initial_point(random_seed=0)  # only the shapes are used
            replacements = make_shared_replacements(point, self.variables, model)
            outputs, joined = join_nonshared_inputs(
                point=point,
                outputs=[model.varlogp, model.datalogp],
                inputs=self.variables,
                shared_inputs=replacements,
            )
            particles = pt.matrix("particles", dtype=joined.dtype)
            batched = vectorize_graph(outputs, replace={joined: particles})
            kwargs = {**(compile_kwargs or {}), "on_unused_input": "ignore"}
            fn = compile([particles], batched, **kwargs)
        except Exception as err:  # the model does not vectorise: loop over particles instead
            if strict:
                raise ValueError(
                    f"batch_logp=True, but the model's log density could not be vectorised: {err}"
                ) from err
            _log.info(
                "KASS: the model's log density does not vectorise (%s); evaluating particles one by one.", err
            )
            return None
        fn.trust_input = True
        return fn

    def set_rng(self, rng: np.random.Generator):
        """Give this chain's generator to PyMC's functions, the batched function and the estimators."""
        super().set_rng(rng)
        if self._batch_logp_func is not None:
            fn = self._batch_logp_func
            rngs = [v for v in fn.get_shared() if isinstance(v.type, RandomGeneratorType)]
            swaps = {
                old: shared(new, borrow=True) for old, new in zip(rngs, rng.spawn(len(rngs)), strict=True)
            }
            self._batch_logp_func = fn.copy(swap=swaps) if swaps else fn
        # The estimators draw from their Op's own generator when PyMC's functions run them.
        self._pseudo_marginal_ops = _pseudo_marginal_ops(self.likelihood_logp_func)
        for op, child in zip(
            self._pseudo_marginal_ops, rng.spawn(len(self._pseudo_marginal_ops)), strict=True
        ):
            op.set_rng(child)

    def setup_kernel(self):
        """Reset the per-chain state (PyMC reuses one kernel instance for sequential chains)."""
        self._reset_chain_state()
        self._check_prior_draws()
        # A model without observed terms has a float32 ``datalogp`` (PyMC's constant 0); float32
        # weights then sum to less than 1 and PyMC's systematic resampling indexes past the end.
        self.prior_logp = np.asarray(self.prior_logp, dtype=np.float64).reshape(self.draws)
        self.likelihood_logp = np.asarray(self.likelihood_logp, dtype=np.float64).reshape(self.draws)
        self._use_batch = self._batch_logp_func is not None and self._batch_matches_pymc()

    def _check_prior_draws(self):
        """A clear error if the initial particles do not vary: SMC starts from prior draws, and an improper
        prior (``pm.Flat``, ``pm.HalfFlat``) has none; PyMC puts every particle at its initial value."""
        X = np.asarray(self.tempered_posterior, dtype=float)
        if self.start is not None or X.shape[0] < 2:
            return
        constant = np.all(X == X[0], axis=0)
        if not constant.any():
            return
        names, offset = [], 0
        for v in self.variables:
            size = self.var_info[v.name][1]
            if constant[offset : offset + size].any():
                names.append(v.name)
            offset += size
        raise ValueError(
            f"All {X.shape[0]} initial particles are identical in {names}: SMC starts from draws of the "
            "prior, and these variables have none (an improper prior such as pm.Flat or pm.HalfFlat, "
            "whose 'draws' are its initial value). Give them a proper prior (for example a wide "
            "pm.Normal), or sample the model with pm.sample."
        )

    def _reset_chain_state(self):
        self._log_scale = math.log(self.initial_scale)
        self._family = None
        self._stage = {}
        self._use_batch = False
        self.n_steps = 0
        self._poor_stages = []  # (stage, beta, mean acceptance, sweeps) of stages that barely mixed
        self._warnings = StepWarnings()
        self._eve = np.arange(self.draws)  # the initial draw each particle descends from
        self._evidence = {"evidence_relative_variance": np.nan, "distinct_ancestors": self.draws}

    def _batch_matches_pymc(self) -> bool:
        """Whether the vectorised function reproduces PyMC's per-particle log densities."""
        k = min(_BATCH_CHECK_POINTS, self.draws)
        try:
            prior, loglik = self._batch_logp(floatX(self.tempered_posterior[:k]))
        except Exception as err:
            if self.batch_logp is True:
                raise
            _log.info("KASS: the vectorised log density failed (%s); evaluating particles one by one.", err)
            return False
        same = _same_values(prior, self.prior_logp[:k]) and _same_values(loglik, self.likelihood_logp[:k])
        if not same:
            message = (
                "KASS: the vectorised model log density disagrees with PyMC's per-particle one "
                "(a random term?); evaluating particles one by one."
            )
            if self.batch_logp is True:
                raise ValueError(message)
            self._warnings.warn(message, RuntimeWarning, stacklevel=2)
        return same

    # ---------------------------------------------------------------- one stage
    def resample(self):
        """Resample (multinomially by default), after the evidence's genealogy variance estimate at this
        stage's weights.

        Each particle's Eve index (the initial draw it descends from) follows the resampling, so
        :func:`~pymc_kameleon.core.smc.evidence_relative_variance` gives the error bar of the evidence
        accumulated so far (read back by :func:`pymc_kameleon.smc.log_evidence`). That estimator is
        unbiased under multinomial resampling, not under PyMC's systematic resampling: with systematic
        resampling it reported half the spread of log Z over repeated runs (conjugate test model, 60
        runs of 300 particles: standard error 0.061 against a spread of 0.122; 67% of the ±2 SE
        intervals covered the truth). ``resampling="systematic"`` is PyMC's scheme, and records no
        error bar.
        """
        multinomial = self.resampling == "multinomial"
        self._evidence = {
            "evidence_relative_variance": (
                evidence_relative_variance(self.weights, self._eve, self.iteration) if multinomial else np.nan
            ),
            "distinct_ancestors": int(np.unique(self._eve).size),
        }
        if not multinomial:
            super().resample()
        else:
            self.resampling_indexes = self.rng.choice(self.draws, size=self.draws, p=self.weights)
            self.tempered_posterior = self.tempered_posterior[self.resampling_indexes]
            self.prior_logp = self.prior_logp[self.resampling_indexes]
            self.likelihood_logp = self.likelihood_logp[self.resampling_indexes]
            self.tempered_posterior_logp = self.prior_logp + self.likelihood_logp * self.beta
        self._eve = self._eve[self.resampling_indexes]

    def tune(self):
        """Fit the Kameleon proposal family to the resampled particles (stage start), in whitened coordinates.

        The particles' mean :math:`m` and covariance :math:`C = L L^\\top` define :math:`w = L^{-1}(x - m)`;
        :math:`Z`, the bandwidth and :math:`\\gamma` live there, so the proposal does not depend on the
        model's units (a coordinate in dollars and one in millimetres are treated alike).
        """
        X = np.asarray(self.tempered_posterior, dtype=float)
        N, d = X.shape
        try:
            whitening = Whitening.from_moments(X.mean(axis=0), np.atleast_2d(np.cov(X, rowvar=False)))
        except SingularCovarianceError:
            whitening = None
        if whitening is None or not np.all(np.diag(np.atleast_2d(np.cov(X, rowvar=False))) > 0):
            raise self._collapse_error(f"The {N} particles do not vary in every coordinate")
        Z = X if N <= self.n_subsample else X[self.rng.choice(N, size=self.n_subsample, replace=False)]
        W = whitening.whiten(Z)
        fit = fit_proposal(W, self._kernel_template, self.bandwidth_spec, self.gamma_spec, 1.0, self.rng)
        if fit is None:
            raise self._collapse_error(f"All {N} particles are identical")
        mean_variance = float(np.mean(np.var(W, axis=0)))
        rw_variance = math.exp(self._log_scale) * 2.38**2 / d * mean_variance
        fit.family.nu2 = matched_nu2(rw_variance, fit.gamma, fit.probe_variance)
        self._family = WhitenedFamily(fit.family, whitening)
        self._stage = {
            "bandwidth": fit.bandwidth,
            "gamma": fit.gamma,
            "nu2": fit.family.nu2,
            "scale": math.exp(self._log_scale),
            "subsample_size": Z.shape[0],
        }

    def _collapse_error(self, what: str) -> ValueError:
        """The error for a particle system that collapsed, naming stalled moves if they caused it."""
        cause = "Use more draws, or a higher threshold (more, gentler stages)."
        if self._poor_stages:
            stage, beta, accept, _ = self._worst_stage()
            cause = (
                f"The moves had stopped mixing: stage {stage} (beta={beta:.3g}) accepted {accept:.2%} of its "
                f"proposals, with the proposal variance at {math.exp(self._log_scale):.3g} times the optimal "
                "random walk's. Let the scale adapt (learning_rate > 0, initial_scale near 1), or "
                "reparametrise the model; more draws and a higher threshold help too."
            )
        return ValueError(
            f"{what} after resampling at beta={self.beta:.4g}, so no proposal can be fitted. {cause}"
        )

    def mutate(self):
        """Kameleon MH sweeps over all particles against :math:`p(x) L(x)^{\\beta_t}`, then adapt the
        scale."""
        rule = self.n_steps_rule
        planned = rule if isinstance(rule, int | np.integer) else self.max_steps
        correlation = Pearson(self.tempered_posterior) if rule == "correlation" else None
        old_corr = 2.0
        accept_means, evals, sweeps = [], 0, 0
        N, d = self.tempered_posterior.shape
        cache = N * d * d * 8 <= _FACTOR_CACHE_BYTES
        factors = (
            self._family.factor_batch(self.tempered_posterior, chunk_size=self.chunk_size) if cache else None
        )
        while sweeps < planned:
            before = self._evaluations
            move = population_mh_move(
                self.tempered_posterior,
                self.tempered_posterior_logp,
                self._family,
                self._evaluate,
                self.beta,
                self.rng,
                chunk_size=self.chunk_size,
                current_factors=factors,
                cache_factors=cache,
            )
            evals += self._evaluations - before
            acc = move.accepted
            if cache:  # an accepted particle's factor is its proposal's
                factors[0][acc] = move.proposal_factors[0][acc]
                factors[1][acc] = move.proposal_factors[1][acc]
            self.tempered_posterior[acc] = move.proposals[acc]
            self.prior_logp[acc] = move.log_prior[acc]
            self.likelihood_logp[acc] = move.loglik[acc]
            self.tempered_posterior_logp[acc] = move.log_target[acc]
            accept_means.append(float(np.mean(move.accept_prob)))
            sweeps += 1
            if rule == "correlation":
                pearson_r = correlation.get(self.tempered_posterior)
                if np.mean((old_corr - pearson_r) > self.correlation_threshold) > 0.9:
                    old_corr = pearson_r
                else:
                    break
            elif rule == "acceptance" and sweeps == 1:
                planned = steps_for_acceptance(accept_means[0], self.move_probability, 1, self.max_steps)
        mean_accept = float(np.mean(accept_means))
        self._stage.update(mean_accept_rate=mean_accept, n_steps=sweeps, likelihood_evals=evals)
        self.n_steps = sweeps
        self._log_scale = adapt_log_scale(
            self._log_scale, mean_accept, self.target_accept, self.learning_rate
        )
        capped = isinstance(rule, str) and sweeps >= self.max_steps
        if capped or mean_accept < _MIN_STAGE_ACCEPT:
            self._poor_stages.append((self.iteration, self.beta, mean_accept, sweeps))
        if self.beta >= 1 and self._poor_stages:
            self._warn_poor_mixing()

    def _warn_poor_mixing(self):
        """One warning per chain, at its last stage, naming the worst stage and the remedies.

        With ``cores>1`` the chain runs in a worker process whose warnings never reach the session;
        :meth:`sample_settings` then carries the message back
        (:class:`~pymc_kameleon.steps.reporting.StepWarnings`).
        """
        stage, beta, accept, _ = self._worst_stage()
        n_capped = sum(sweeps >= self.max_steps for *_, sweeps in self._poor_stages)
        capped = ""
        if n_capped and isinstance(self.n_steps_rule, str):
            plural = "s" if n_capped > 1 else ""
            capped = f"; {n_capped} stage{plural} hit the cap of max_steps={self.max_steps} sweeps"
        message = (
            f"{type(self).__name__}: the rejuvenation moves barely mixed in {len(self._poor_stages)} of "
            f"{self.iteration} stages (mean acceptance below {_MIN_STAGE_ACCEPT:.0%} or the sweep cap "
            f"reached). The worst, stage {stage} (beta={beta:.3g}), accepted {accept:.2%} of its "
            f"proposals{capped}. The particles may be little more than resampled copies of an earlier "
            "stage's (or of the prior draws), so the posterior and the evidence are unreliable. Use more "
            "draws, threshold=0.8 (more, gentler stages) or a larger max_steps, let the proposal scale "
            "adapt (learning_rate > 0, initial_scale near 1), or reparametrise the model."
        )
        self._warnings.warn(message, RuntimeWarning, stacklevel=2)

    def _worst_stage(self):
        """The (stage, beta, mean acceptance, sweeps) row of the stage that mixed worst."""
        return min(self._poor_stages, key=lambda row: row[2])

    def _batch_logp(self, particles):
        """The vectorised (prior, likelihood) log densities of an (m, D) array, each of shape (m,).

        A term that does not depend on the particles (``datalogp`` of a model without observed
        variables is the constant 0) comes out of ``vectorize_graph`` as a scalar: broadcast it.
        """
        m = particles.shape[0]
        outputs = self._batch_logp_func(particles)
        return tuple(np.broadcast_to(np.asarray(out, dtype=np.float64), (m,)) for out in outputs)

    def _evaluate(self, proposals):
        """Prior and likelihood log densities at the proposals (likelihood only inside the prior's
        support)."""
        proposals = floatX(np.ascontiguousarray(proposals))
        if self._use_batch:
            priors, logliks = [], []
            for s in range(0, proposals.shape[0], _LOGP_BATCH_ROWS):
                prior, loglik = self._batch_logp(proposals[s : s + _LOGP_BATCH_ROWS])
                priors.append(prior)
                logliks.append(loglik)
            self._evaluations += proposals.shape[0]
            return np.concatenate(priors), np.concatenate(logliks)
        prior = np.array([float(self.prior_logp_func(x)) for x in proposals])
        loglik = np.full(proposals.shape[0], -np.inf)
        # Never ask an expensive (or estimated) likelihood about a point the prior rules out.
        for i in np.flatnonzero(np.isfinite(prior)):
            loglik[i] = float(self.likelihood_logp_func(proposals[i]))
            self._evaluations += 1
        return prior, loglik

    # ---------------------------------------------------------------- reporting
    def sample_stats(self):
        return {
            "log_marginal_likelihood": self.log_marginal_likelihood if self.beta == 1 else np.nan,
            "beta": self.beta,
            **{
                name: self._stage[name] for name in ("mean_accept_rate", "nu2", "scale", "bandwidth", "gamma")
            },
            **{name: int(self._stage[name]) for name in ("n_steps", "subsample_size", "likelihood_evals")},
            **self._evidence,
        }

    def sample_settings(self):
        settings = {
            "_n_draws": self.draws,
            "threshold": self.threshold,
            "_n_tune": self.n_steps,
            "proposal_kernel": self.proposal_kernel,
            "n_steps_rule": str(self.n_steps_rule),
            "correlation_threshold": self.correlation_threshold,
            "learning_rate": self.learning_rate,
            "target_accept": self.target_accept,
            "batch_logp": int(self._use_batch),
            "resampling": self.resampling,
            "poorly_mixing_stages": len(self._poor_stages),
        }
        # With cores>1 this chain ran in a worker process: its warning travels back with the setting.
        return self._warnings.attach(settings, "poorly_mixing_stages")


class ASMC(KASS):
    r"""Adaptive SMC (Fearnhead & Taylor): :class:`KASS` with the linear kernel.

    The proposal covariance is :math:`\gamma^2 I + \nu_t^2 \cdot 4 n\, \widehat{\mathrm{Cov}}(Z)`, the
    same at every particle: the particle system's global covariance, scaled by eq. (4). This
    is the paper's ASMC baseline; ``pm.sample_smc(kernel=ASMC)``.
    """

    _default_proposal_kernel = "linear"


def _pseudo_marginal_ops(fn) -> list:
    """The pseudo-marginal Ops inside a compiled PyTensor function, in graph order."""
    ops = []
    for node in fn.maker.fgraph.toposort():
        if isinstance(node.op, PseudoMarginalOp) and all(node.op is not op for op in ops):
            ops.append(node.op)
    return ops


def _same_values(a, b) -> bool:
    """Equal up to rounding; equal infinities count as equal."""
    a, b = np.asarray(a, dtype=float).reshape(-1), np.asarray(b, dtype=float).reshape(-1)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-8, atol=1e-8, equal_nan=True))
