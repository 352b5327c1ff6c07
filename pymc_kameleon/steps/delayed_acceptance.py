r"""GP-surrogate delayed acceptance as PyMC steps: ``GPDelayedAcceptanceMH``, ``GPDelayedAcceptanceMALA``.

For a posterior :math:`\pi(\theta) \propto e^{\ell(\theta)} p(\theta)` whose log-likelihood
:math:`\ell` (the model's observed terms plus its potentials) is expensive, a Gaussian process
over the exact evaluations of :math:`\ell` screens proposals (Benavoli, Wyse & White, "Gaussian
Processes to speed up MCMC with automatic exploratory-exploitation effect"). With :math:`x` the
current state, :math:`y \sim Q(\cdot \mid x)` the proposal and :math:`\mu, \sigma^2` the GP's
predictive mean and variance:

Stage 1 (paper eq. 4), free: the GP is marginalised (log-normal mean), so

.. math::
    \alpha_1(x, y) = 1 \wedge \frac{e^{\mu(y) + \sigma^2(y)/2}\, p(y)\, Q(x \mid y)}
                                  {e^{\ell(x)}\, p(x)\, Q(y \mid x)},

which rewards proposals where the GP is uncertain (exploration).

Stage 2 (paper eq. 6), paid: only survivors of stage 1 get an exact :math:`\ell(y)`, and

.. math::
    \alpha_2(x, y) = 1 \wedge \frac{e^{\ell(y)} p(y)\, Q(x \mid y)\, \alpha_1(y, x)}
                                  {e^{\ell(x)} p(x)\, Q(y \mid x)\, \alpha_1(x, y)}.

The prior is always exact. Because one surrogate (the GP before the new evaluation is added)
gives both :math:`\alpha_1(x, y)` and :math:`\alpha_1(y, x)`, each step is reversible with respect
to the exact posterior, however poor the GP is. The new evaluation joins the GP only *after*
the step's decision. The ratios themselves live in :mod:`pymc_kameleon.core.delayed_acceptance`;
this module runs them inside PyMC.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars

from pymc_kameleon.core.delayed_acceptance import (
    CURRENT_VALUES,
    DAPoint,
    delayed_acceptance_log_ratios,
    langevin_log_density,
    log_alpha1,
    mala_delayed_acceptance_log_ratios,
    mala_log_alpha1,
    mala_point,
    surrogate_point,
)
from pymc_kameleon.core.gp import GPSurrogate
from pymc_kameleon.core.kernels import make_kernel
from pymc_kameleon.core.linalg import SingularCovarianceError, same_array
from pymc_kameleon.core.mh import accept_probability, metropolis_accept, mh_log_ratio
from pymc_kameleon.core.proposals import LangevinProposal, Move
from pymc_kameleon.core.scale_free import ScaleFreeKameleon
from pymc_kameleon.core.validation import check_kameleon_options, check_number, check_probability
from pymc_kameleon.steps.base import AdaptiveStep, continuous_value_vars
from pymc_kameleon.steps.reporting import StepWarnings, warn_after_tuning
from pymc_kameleon.steps.target_density import GradientUnavailableError, SplitTargetDensity

__all__ = ["GPDelayedAcceptanceMALA", "GPDelayedAcceptanceMH"]

_PROPOSALS = ("random_walk", "kameleon")
_GP_AFTER_TUNING = ("grow", "freeze")
_HYPERPARAMETER_KEYS = ("lengthscales", "signal_variance", "noise_variance", "mean")
# Warm-up GP training values below (best value - this - 5 per dimension) are clipped to that floor.
_GP_FLOOR_NATS = 50.0
# During tuning, if the mean stage-1 acceptance over this many screened steps is below
# _MIN_STAGE1_ACCEPT, the GP cannot be trusted (see GPDelayedAcceptanceMH._pause_screening).
_SCREENING_CHECK_STEPS = 100
_MIN_STAGE1_ACCEPT = 0.02
# A Langevin move with covariance lambda^2 C adapts lambda as the scale-free proposal's AM moves do.
_LANGEVIN = "adaptive_metropolis"




def _finite_prediction(point) -> bool:
    """Whether a MALAPoint's GP joint prediction is finite (it can overflow far from the data)."""
    return bool(np.all(np.isfinite(point.joint_mean)) and np.all(np.isfinite(point.joint_cov)))


class _GPDelayedAcceptanceBase(AdaptiveStep):
    """Shared machinery: options, the split target, the GP and its schedule, proposal scale, stats."""

    stats_dtypes_shapes = {
        **AdaptiveStep.stats_dtypes_shapes,
        # (`accept` is the probability of accepting this proposal given the stage-1 outcome: alpha2
        # if stage 1 passed, else 0; in the exact warm-up, the plain MH probability. Its mean is the
        # overall acceptance rate E[alpha1 alpha2].)
        "stage1_accept": (np.float64, []),
        "stage2_accept": (np.float64, []),
        "exact_eval": (bool, []),
        "n_exact_evals": (np.int64, []),
        "gp_sd": (np.float64, []),
        "gp_points": (np.int64, []),
        "screened": (bool, []),
        "gp_refit": (bool, []),
    }
    _default_target_accept = 0.234
    _uses_prior_gradient = False

    def __init__(
        self,
        vars=None,
        *,
        target_accept=None,
        initial_points=None,
        max_points=None,
        fit_hyperparameters=True,
        hyperparameters=None,
        fit_max_points=None,
        noise_variance="auto",
        current_value="exact",
        gp_after_tuning="grow",
        jitter=1e-8,
        initial_scale=1.0,
        adapt_interval=100,
        learning_rate=1.0,
        history_size=10_000,
        loglik_gradient=False,
        model=None,
        initial_point=None,
        compile_kwargs=None,
        rng=None,
        blocked=True,
    ):
        model = pm.modelcontext(model)
        name = type(self).__name__
        if target_accept is None:
            target_accept = self._default_target_accept
        check_probability("target_accept", target_accept)
        if current_value not in CURRENT_VALUES:
            raise ValueError(f"current_value must be one of {CURRENT_VALUES}, got {current_value!r}.")
        if gp_after_tuning not in _GP_AFTER_TUNING:
            raise ValueError(f"gp_after_tuning must be one of {_GP_AFTER_TUNING}, got {gp_after_tuning!r}.")
        if not isinstance(fit_hyperparameters, bool):
            raise ValueError(f"fit_hyperparameters must be True or False, got {fit_hyperparameters!r}.")
        if isinstance(noise_variance, str):
            if noise_variance not in ("auto", "fit"):
                raise ValueError(
                    f'noise_variance must be "auto", "fit" or a number >= 0, got {noise_variance!r}.'
                )
        else:
            check_number("noise_variance", noise_variance, minimum=0, strict=False)
        check_number("jitter", jitter, minimum=0, strict=False)
        check_number("initial_scale", initial_scale, minimum=0)
        check_number("adapt_interval", adapt_interval, integer=True, minimum=0)
        check_number("learning_rate", learning_rate, minimum=0)
        check_number("history_size", history_size, integer=True, minimum=1)

        if initial_point is None:
            initial_point = model.initial_point()
        vars = continuous_value_vars(vars, model, name)
        self.dim = d = int(sum(np.size(initial_point[v.name]) for v in vars))
        try:
            target = SplitTargetDensity(
                model, vars, initial_point, compile_kwargs, name,
                prior_gradient=self._uses_prior_gradient, loglik_gradient=loglik_gradient,
            )
        except GradientUnavailableError as err:
            if err.what == "prior":
                raise ValueError(
                    f"{name} needs the gradient of the log prior for its Langevin drift: {err} "
                    "Use GPDelayedAcceptanceMH, which needs no gradients."
                ) from err
            raise ValueError(
                f"{name} needs the gradient of the log-likelihood for the GP's derivative "
                f"observations, and this model has none: {err} Use GPDelayedAcceptanceMH, which "
                f"needs no gradients, or {name}(gradient_observations=False), which drives the "
                "Langevin drift by the gradient of a GP fitted to log-likelihood values only."
            ) from err
        self.loglik_gradient = bool(loglik_gradient)
        rows = d + 1 if self.loglik_gradient else 1

        if initial_points is None:
            initial_points = max(10, 2 * (d + 1))
        check_number("initial_points", initial_points, integer=True, minimum=1, strict=False)
        if max_points is None:
            max_points = max(1000 // rows, 2 * initial_points)
        check_number("max_points", max_points, integer=True, minimum=1, strict=False)
        if max_points < initial_points:
            raise ValueError(
                f"max_points ({max_points}) must be at least initial_points ({initial_points}): the GP "
                "is seeded with initial_points exact evaluations."
            )
        if fit_max_points is None:
            fit_max_points = max(20, 300 // rows)
        check_number("fit_max_points", fit_max_points, integer=True, minimum=2, strict=False)
        self._fixed_hyper = self._check_hyperparameters(hyperparameters, d)
        self._gp_mean = self._fixed_hyper.pop("mean", "gls") if self._fixed_hyper else "gls"

        noisy = target.has_estimates if noise_variance == "auto" else noise_variance == "fit"
        self.fit_noise = bool(noisy)
        self.noise_variance_spec = noise_variance
        self.target_accept = float(target_accept)
        self.initial_points = int(initial_points)
        self.max_points = int(max_points)
        self.fit_max_points = int(fit_max_points)
        self.fit_hyperparameters = fit_hyperparameters
        self.hyperparameters = None if hyperparameters is None else dict(hyperparameters)
        self.current_value = current_value
        self.gp_after_tuning = gp_after_tuning
        self.jitter = float(jitter)
        self.initial_scale = float(initial_scale)
        self.adapt_interval = int(adapt_interval)
        self.learning_rate = float(learning_rate)
        self.history_size = int(history_size)

        self._join_pymc(vars, target, blocked, rng)

    @staticmethod
    def _check_hyperparameters(hyperparameters, d):
        if hyperparameters is None:
            return None
        if not isinstance(hyperparameters, dict) or not set(hyperparameters) <= set(_HYPERPARAMETER_KEYS):
            raise ValueError(
                f"hyperparameters must be a dict with keys among {_HYPERPARAMETER_KEYS}, "
                f"got {hyperparameters!r}."
            )
        out = {}
        if "lengthscales" in hyperparameters:
            ell = np.asarray(hyperparameters["lengthscales"], dtype=float)
            try:
                ell = np.broadcast_to(ell, (d,)).copy()
            except ValueError:
                raise ValueError(
                    f"hyperparameters['lengthscales'] must be a number or have length {d}, "
                    f"got shape {ell.shape}."
                ) from None
            if not (np.all(np.isfinite(ell)) and np.all(ell > 0)):
                raise ValueError(f"hyperparameters['lengthscales'] must be positive, got {ell!r}.")
            out["lengthscales"] = ell
        if "signal_variance" in hyperparameters:
            check_number("hyperparameters['signal_variance']", hyperparameters["signal_variance"], minimum=0)
            out["signal_variance"] = float(hyperparameters["signal_variance"])
        if "noise_variance" in hyperparameters:
            check_number(
                "hyperparameters['noise_variance']",
                hyperparameters["noise_variance"],
                minimum=0,
                strict=False,
            )
            out["noise_variance"] = float(hyperparameters["noise_variance"])
        if "mean" in hyperparameters:
            check_number("hyperparameters['mean']", hyperparameters["mean"])
            out["mean"] = float(hyperparameters["mean"])
        return out

    # ------------------------------------------------------------------ state
    def _new_gp(self, **hyper):
        noise = hyper.pop("noise_variance", None)
        if noise is None:
            noise = 0.0 if isinstance(self.noise_variance_spec, str) else float(self.noise_variance_spec)
        return GPSurrogate(
            self.dim,
            lengthscales=hyper.get("lengthscales", 1.0),
            signal_variance=hyper.get("signal_variance", 1.0),
            noise_variance=noise,
            fit_noise=self.fit_noise,
            mean=self._gp_mean,
            jitter=self.jitter,
            max_points=self.max_points,
            gradients=self.loglik_gradient,
        )

    def _reset_chain_state(self):
        """Forget everything learned in a previous chain (GP, proposal scale, counters)."""
        self._gp = self._new_gp(**dict(self._fixed_hyper or {}))
        self._gp_version = 0
        self._warm = True  # exact warm-up that seeds the GP
        self._best_ll = -math.inf  # largest exact log-likelihood added to the GP (sets its floor)
        self._seeded = False  # whether the chain's starting point is in the GP
        self._next_fit = self.initial_points
        self._fitted_at = 0  # training-set size at the last hyperparameter fit (0: never)
        self._n_fits = 0
        self._warned_singular = False
        self._warnings = StepWarnings()
        self._tune_steps = 0
        self._cache = None  # (gp version, point, surrogate point at the current state)
        self._target.reset()
        self._evals_at_reset = self._target.n_evals
        self._resume_window = None  # screening paused until this adaptation window (None: not paused)
        self._stage1_recent = deque(maxlen=_SCREENING_CHECK_STEPS)  # alpha1 of recent screened tuning steps
        self._n_pauses = 0  # times screening fell back to exact steps during tuning
        self._window_start_points = [0]  # GP points at the start of each adaptation window
        self._proposal = self._base_proposal()
        self.default_tune_steps = self._proposal.required_tune_steps()

    def _base_proposal(self, kernel=None, am_weight=1.0, **kameleon_options) -> ScaleFreeKameleon:
        r"""The scale-free adaptation: a coordinate scan, then windows that learn :math:`m`, :math:`C`
        and :math:`\lambda`. By default its Adaptive Metropolis component :math:`\mathcal N(x, \lambda^2 C)`
        alone (MALA takes :math:`\lambda^2 C` as its Langevin covariance).
        """
        return ScaleFreeKameleon(
            self.dim,
            kernel,
            target_accept=self.target_accept,
            learning_rate=self.learning_rate,
            first_window=self.adapt_interval,
            am_weight=am_weight,
            history_size=self.history_size,
            initial_scan_scale=self.initial_scale,
            **kameleon_options,
        )

    def stop_tuning(self):
        """End of tuning: a last hyperparameter fit if the training set grew, then freeze everything."""
        tuned = self.tune and self._tune_steps > 0
        if tuned and self._warm and self._resume_window is not None:
            self._end_warm_up()  # tuning ended during an exact fallback: screen from here on
            self._warnings.warn(
                f"{type(self).__name__}: tuning ended in an exact fallback: the GP's stage 1 had "
                f"rejected nearly every proposal (acceptance below {_MIN_STAGE1_ACCEPT:.0%} over "
                f"{_SCREENING_CHECK_STEPS} steps; {self._n_pauses} fallback(s) in tuning), so its fit "
                "near the posterior is untested. Increase `tune`, or start closer to the posterior.",
                UserWarning,
                stacklevel=2,
            )
        if tuned:
            if self.fit_hyperparameters and not self._warm and self._gp.n_points >= 1.25 * self._fitted_at:
                self._fit()
            if self._warm:
                self._warnings.warn(
                    f"{type(self).__name__}: tuning ended after {self._tune_steps} steps, still in the exact "
                    f"warm-up ({self._gp.n_points} of initial_points={self.initial_points} GP points). "
                    "The GP screens proposals from now on, but its hyperparameters were never fitted; "
                    "increase `tune` or lower `initial_points`.",
                    UserWarning,
                    stacklevel=2,
                )
        super().stop_tuning()
        if tuned:
            warn_after_tuning(type(self).__name__, self._proposal, self.target_accept, self._warnings)
        if self._proposal.end_tuning(self.rng):
            self._gp.set_input_whitening(self._proposal.whitening)
            self._gp_version += 1

    # ------------------------------------------------------------ properties
    @property
    def gp(self) -> GPSurrogate:
        """The GP surrogate of the log-likelihood (of the chain run last)."""
        return self._gp

    @property
    def n_exact_evals(self) -> int:
        """Exact likelihood evaluations in the current chain, including the one at its start."""
        return self._target.n_evals - self._evals_at_reset

    # ------------------------------------------------------------ the GP
    def _gp_accepts_points(self) -> bool:
        return self.tune or self._warm or self.gp_after_tuning == "grow"

    def _add_training_point(self, theta, ll, grad=None) -> bool:
        """Condition the GP on one exact evaluation (after the step's decision).

        Values more than ``_GP_FLOOR_NATS`` (+ 5 per dimension) below the best seen so far are
        clipped to that floor, with a zero gradient. The GP then learns "very unlikely here" without
        one value of, say, -1e300 from an overshooting Langevin proposal, or -1e8 from a scan step
        across an unstandardised regression's ridge, blowing up its signal variance and making its
        mean pessimistic everywhere (then stage 1 rejects every proposal and the scale collapses).
        The GP only screens proposals, so the chain stays exact whatever it is fed.
        """
        if not self._gp_accepts_points() or not (math.isfinite(ll)):
            return False
        if grad is not None and not np.all(np.isfinite(grad)):
            return False
        if self.loglik_gradient and grad is None:
            return False
        if ll > self._best_ll:
            self._best_ll = float(ll)
            self._raise_to_floor()
        floor = self._gp_floor()
        if ll < floor:
            ll = floor
            grad = None if grad is None else np.zeros_like(np.asarray(grad, dtype=float))
        if self.tune and self._gp.n_points >= self.max_points:
            self._forget_older_half()
        try:
            added = self._gp.add(theta, ll, grad)
        except SingularCovarianceError:
            if not self._warned_singular:
                self._warned_singular = True
                self._warnings.warn(
                    f"{type(self).__name__}: a new GP point duplicates stored ones numerically and was "
                    "skipped (raise `jitter` if this happens often).",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return False
        if added:
            self._gp_version += 1
        return added

    def _forget_older_half(self) -> None:
        """During tuning a full GP drops its older half (one :math:`O(t^3)` refactorisation per
        :math:`t/2` additions), so that it keeps learning where the chain is.

        A GP that reached ``max_points`` while the chain walked in from a far start would otherwise
        stay fixed on the transient: with gradient observations (cap 1000 / (d + 1) points) GP-DA MALA's
        drift then came from points far behind the chain, which crawled (an unstandardised
        regression: still 7 sds away after 3000 tuning steps).
        """
        self._forget_oldest(self._gp.n_points - self._gp.n_points // 2)

    def _forget_oldest(self, n: int) -> None:
        """Drop the GP's ``n`` oldest points (a refactorisation); window starts count from the new first."""
        self._gp = self._gp.latest(self._gp.n_points - n, max_points=self.max_points)
        self._window_start_points = [max(start - n, 0) for start in self._window_start_points]
        self._gp_version += 1

    def _gp_floor(self) -> float:
        """Lowest value the GP is given: ``_GP_FLOOR_NATS`` + 5 per dimension below the best so far."""
        return self._best_ll - (_GP_FLOOR_NATS + 5.0 * self.dim)

    def _raise_to_floor(self) -> None:
        """Re-clip the stored values to the floor below the new best value.

        Walking in from a far start, the first values can be 1e7 nats below the later ones; left
        there, they keep the signal variance near 1e13, whose relative nugget (``jitter``) then
        spoils the interpolation at the current state by hundreds of nats, and stage 1 rejects
        everything. A signal variance fitted to the old spread is reset to the new one (during
        tuning; the next scheduled fit refines it).
        """
        gp = self._gp
        if not gp.n_points or not gp.raise_values_to(self._gp_floor()):
            return
        self._gp_version += 1
        spread = max(float(np.var(gp.values)), 1.0)
        if self.tune and not self._warm and gp.signal_variance > 10.0 * spread:
            gp.set_hyperparameters(signal_variance=spread)

    def _end_warm_up(self) -> bool:
        """Set the hyperparameters (heuristics, then a fit if tuning). Returns whether it fitted."""
        self._warm = False
        fixed = self._fixed_hyper or {}
        W, y = self._gp.W, self._gp.values  # in the kernel's (whitened) coordinates
        ell = np.std(W, axis=0) if W.shape[0] > 1 else np.ones(self.dim)
        fallback = self._typical_step() if self._gp.whitening is None else 1.0
        ell = np.where(ell > 0, ell, fallback)
        vy = float(np.var(y)) if y.size > 1 else 1.0
        vy = vy if vy > 0 else 1.0
        hyper = {
            "lengthscales": fixed.get("lengthscales", ell),
            "signal_variance": fixed.get("signal_variance", vy),
        }
        if self.fit_noise and "noise_variance" not in fixed:
            hyper["noise_variance"] = 0.01 * vy
        self._gp.set_hyperparameters(**hyper)
        self._gp_version += 1
        if self.fit_hyperparameters and self.tune:
            self._fit(n_restarts=2)
            return True
        return False

    def _warm_up_may_end(self) -> bool:
        """Whether the base proposal is ready for screening (MH: once the coordinate scan is over)."""
        return True

    def _fit(self, n_restarts=0):
        """Fit the hyperparameters by marginal likelihood on the latest ``fit_max_points`` points."""
        gp = self._gp
        n = gp.n_points
        if n < 2:
            return
        try:
            sub = gp.latest(self.fit_max_points)
            sub.fit_hyperparameters(n_restarts=n_restarts, rng=self.rng)
            gp.set_hyperparameters(
                lengthscales=sub.lengthscales,
                signal_variance=sub.signal_variance,
                noise_variance=sub.noise_variance,
            )
        except SingularCovarianceError:
            gp.refit()  # keep the previous hyperparameters
        self._gp_version += 1
        self._fitted_at = n
        self._n_fits += 1
        self._next_fit = 2 * n

    def _after_exact_evaluation(self) -> bool:
        """Hyperparameter schedule: fit when the training set doubled (tuning only); whether it fitted."""
        if self._warm:
            if self._gp.n_points >= self.initial_points and self._warm_up_may_end():
                return self._end_warm_up()
            return False
        if self.fit_hyperparameters and self.tune and self._gp.n_points >= self._next_fit:
            self._fit()
            return True
        return False

    def _current_point(self, x, evaluation, make):
        """Surrogate values at the current state, cached per (GP version, point)."""
        cached = self._cache
        if (
            cached is not None
            and cached[0] == self._gp_version
            and cached[3] is evaluation
            and same_array(cached[1], x)
        ):
            return cached[2]
        value = make()
        self._cache = (self._gp_version, np.array(x, copy=True), value, evaluation)
        return value

    # ------------------------------------------------------------ adaptation
    @property
    def scale_free_proposal(self) -> ScaleFreeKameleon:
        """The scale-free adaptation: learned mean and covariance, scan step sizes, scales."""
        return self._proposal

    def _typical_step(self) -> float:
        """Root mean proposal variance per coordinate (a default GP length scale)."""
        return self._proposal.typical_scale

    def _adapt(self, y_new, adapt_value, component=None) -> bool:
        """Adapt the base proposal; at a window end, update the GP. Returns whether it refitted.

        ``component`` names the scale the step's move used (default: the base proposal's last move).
        """
        if not self.tune:
            return False
        self._tune_steps += 1
        window = self._proposal.window
        changed = self._proposal.adapt(y_new, adapt_value, self.rng, component=component)
        if self._proposal.window == window:
            return False
        # A window ended. The GP forgets points from before the previous window (a walk in from
        # a far start would otherwise fill it up to max_points with the transient), and, if the
        # learned covariance changed, its kernel moves to the new whitened coordinates, where a
        # correlated ridge is round; then its hyperparameters are refitted.
        starts = self._window_start_points
        starts.append(self._gp.n_points)
        if len(starts) > 2 and starts[-3] > 0:
            self._window_start_points = starts[-2:]
            self._forget_oldest(starts[-3])  # the points from before the window that just ended
        if changed:
            self._gp.set_input_whitening(self._proposal.whitening)
        self._gp_version += 1
        if self.fit_hyperparameters and not self._warm and self._gp.n_points >= 2:
            self._fit()
            return True
        return False

    def _warm_up_may_end(self) -> bool:
        # Screening a coordinate scan would let a GP that has not seen each coordinate's scale
        # shrink the scan's step sizes; the GP starts screening with the scan's whitening.
        if self._proposal.phase == "scan":
            return False
        return not self.tune or self._resume_window is None or self._proposal.window >= self._resume_window

    def _pause_screening(self) -> None:
        """Back to exact steps until the end of the next adaptation window, then a fresh GP fit.

        A stage-1 acceptance below 2% over 100 screened tuning steps means the GP is wrong near
        the chain (walking in from a far start, its stationary model of a steep slope is poor), and
        the adaptation signal is then ~0, so the scale would collapse and the chain stick. Exact
        steps give the GP points where the chain is, the scale the true acceptance rate, and the
        window a new whitening. Tuning only: the sampling kernel is unaffected.
        """
        self._warm = True
        self._resume_window = self._proposal.window + 1
        self._n_pauses += 1
        self._stage1_recent.clear()

    def _propose(self, x) -> Move:
        """Draw from the base proposal (``move.feasible`` is False if the proposal is invalid)."""
        return self._proposal.propose(x, self.rng)

    def _exact_step(self, x, cur, info):
        """Warm-up: plain MH with the base proposal and an exact evaluation at its proposal."""
        move = self._propose(x)
        y, lq_f, lq_r = move.x, move.log_q_forward, move.log_q_reverse
        if not move.feasible:
            metropolis_accept(-math.inf, self.rng)
            return x, False, 0.0, None
        lp_y = self._target.prior(y)
        ev = self._target.evaluate(y, lp_y)
        accepted, prob = metropolis_accept(mh_log_ratio(ev.logp, cur.logp, lq_r, lq_f), self.rng)
        info["stage2"] = prob
        if accepted:
            self._proposal.accept(move)
        evaluated = (y, ev) if math.isfinite(ev.log_prior) else None
        return self._finish(x, y, accepted, ev), accepted, prob, evaluated

    # ------------------------------------------------------------ the step
    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list]:
        x = q0.data
        evals_before = self._target.n_evals
        estimates_before = self._target.n_estimates
        cur = self._target.current(x, q0.point_map_info, self.rng)
        refit = False
        if not self._seeded:
            # The starting point seeds the GP.
            self._seeded = True
            self._add_training_point(x, cur.loglik, cur.grad_exact_loglik)
            refit = self._after_exact_evaluation()
        info = {"stage1": 1.0, "stage2": math.nan, "gp_sd": math.nan, "screened": not self._warm}
        if self._warm:
            y_new, accepted, accept_prob, evaluated = self._exact_step(x, cur, info)
        else:
            y_new, accepted, accept_prob, evaluated = self._delayed_acceptance_step(x, cur, info)
        if evaluated is not None:
            y, ev = evaluated
            # Only now, after the decision, does the new evaluation join the GP.
            self._add_training_point(y, ev.loglik, ev.grad_exact_loglik)
            refit = self._after_exact_evaluation() or refit
        # The scale adapts to an unbiased estimate of the acceptance probability of plain MH on the
        # exact target (set by the step; the acceptance probability itself in the warm-up).
        refit = bool(self._adapt(y_new, info.get("adapt", accept_prob), info.get("component"))) or refit
        stats = {
            "accept": accept_prob,
            "accepted": float(accepted),
            "stage1_accept": info["stage1"],
            "stage2_accept": info["stage2"],
            "exact_eval": self._target.n_evals > evals_before,
            "n_exact_evals": self.n_exact_evals,
            "gp_sd": info["gp_sd"],
            "gp_points": self._gp.n_points,
            "screened": info["screened"],
            "gp_refit": refit,
            "tune": self.tune,
            "scaling": self._proposal.am_scale.value,
            "model_logp": self._target.current_logp,
        }
        stats.update(self._target.estimate_stats(estimates_before))
        if self.tune and info["screened"]:
            self._stage1_recent.append(info["stage1"])
            if (
                len(self._stage1_recent) == _SCREENING_CHECK_STEPS
                and np.mean(self._stage1_recent) < _MIN_STAGE1_ACCEPT
            ):
                self._pause_screening()
        self._warnings.attach(stats, "accept")  # with cores>1 they travel to the session this way
        return RaveledVars(y_new, q0.point_map_info), [stats]

    def _finish(self, x, y, accepted, evaluation):
        if accepted:
            self._target.accept(y, evaluation)
            return y
        return x

    def _stage2_log_ratios(self, current, proposal, *args):
        """Both stage-1 log probabilities and the stage-2 log ratio (a hook for tests)."""
        raise NotImplementedError


class GPDelayedAcceptanceMH(_GPDelayedAcceptanceBase):
    r"""Two-stage Metropolis-Hastings with a Gaussian-process surrogate of the log-likelihood.

    For expensive likelihoods (ODE solutions, simulators, big data): a GP over the exact
    log-likelihood evaluations made so far screens each proposal for free, and only the
    survivors pay for an exact evaluation (Benavoli, Wyse & White). The prior is always exact.
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

    **The GP** (:class:`~pymc_kameleon.core.gp.GPSurrogate`): squared-exponential ARD kernel,
    constant (generalised-least-squares) mean, noise-free interpolation with a relative nugget
    ``jitter``; points are appended by an :math:`O(t^2)` Cholesky update.

    - *Initialisation.* The chain starts with an exact warm-up: plain MH steps with the base
      proposal, each evaluating the likelihood at its proposal, until the GP holds
      ``initial_points`` evaluations (the starting point plus one per warm-up step, whether
      accepted or not) *and* the base proposal's coordinate scan (25 d + 50 steps) is over, so
      that the GP screens only once every coordinate's scale is known. Then length scales are set
      to the spread of those points and the signal variance to the variance of their values,
      and (during tuning) the hyperparameters are fitted by marginal likelihood, with two random
      restarts.
    - *Whitened inputs.* The kernel acts on coordinates whitened by the base proposal's learned
      mean and covariance (:meth:`~pymc_kameleon.core.gp.GPSurrogate.set_input_whitening`), so its
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

    **Base proposal.** :class:`~pymc_kameleon.core.scale_free.ScaleFreeKameleon`, as in
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
        you can (inside a ``CompoundStep`` the chain is still exact, but the likelihood moves
        with the other blocks and the GP's old values go stale).
    proposal : {"random_walk", "kameleon"}, default "random_walk"
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
        number or one per coordinate), ``signal_variance`` and ``noise_variance``; and
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
        (stage 2 is then Christen & Fox's form). See :mod:`pymc_kameleon.core.delayed_acceptance`.
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
    kernel, bandwidth, n_subsample, gamma : optional
        Kameleon proposal options, as for :class:`~pymc_kameleon.KameleonMetropolis`
        (``proposal="kameleon"`` only).
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
      warm-up, where every proposal is evaluated), ``stage2_accept`` (:math:`\alpha_2`; NaN if stage
      2 was not reached).
    - ``exact_eval``: whether this step evaluated the likelihood exactly (at the proposal, or at
      the current state at the start of a chain or after another block of a ``CompoundStep``
      moved); ``n_exact_evals``: running count in this chain, the start included. The fraction of
      evaluations saved is ``1 - mean(exact_eval)``.
    - ``gp_sd``: the GP's predictive sd of :math:`\ell` at the proposal (NaN in the warm-up and where
      the prior is zero);
      ``gp_points``: training points after the step; ``gp_refit``: whether the hyperparameters
      were fitted at this step; ``screened``: whether the GP screened this proposal (False in the
      warm-up).
    - ``tune``, ``scaling`` (:math:`\lambda`, the scale of :math:`\mathcal N(x, \lambda^2 C)` in
      learned posterior sds), ``nu2`` (:math:`\nu^2` of the Kameleon component; NaN otherwise).
    - With a PseudoMarginalPotential, also ``loglik_estimate`` and ``estimator_calls`` (as for
      :class:`~pymc_kameleon.KameleonMetropolis`).

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
    stats_dtypes_shapes = {
        **_GPDelayedAcceptanceBase.stats_dtypes_shapes,
        # nu2 of the Kameleon component (NaN for the random walk and before the first subsample).
        "nu2": (np.float64, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        proposal="random_walk",
        target_accept=0.234,
        initial_points=None,
        max_points=None,
        fit_hyperparameters=True,
        hyperparameters=None,
        fit_max_points=None,
        noise_variance="auto",
        current_value="exact",
        gp_after_tuning="grow",
        jitter=1e-8,
        initial_scale=1.0,
        adapt_interval=100,
        learning_rate=1.0,
        history_size=10_000,
        kernel="gaussian",
        bandwidth="median",
        n_subsample=1000,
        gamma="auto",
        model=None,
        initial_point=None,
        compile_kwargs=None,
        rng=None,
        blocked=True,
    ):
        if proposal not in _PROPOSALS:
            raise ValueError(f"proposal must be one of {_PROPOSALS}, got {proposal!r}.")
        self.proposal = proposal
        self._kernel_template = make_kernel(kernel)
        check_kameleon_options(bandwidth, gamma, n_subsample)
        self.kernel_spec = kernel
        self.bandwidth_spec = bandwidth
        self.n_subsample = int(n_subsample) if isinstance(n_subsample, (int, np.integer)) else n_subsample
        self.gamma_spec = gamma
        super().__init__(
            vars,
            target_accept=target_accept,
            initial_points=initial_points,
            max_points=max_points,
            fit_hyperparameters=fit_hyperparameters,
            hyperparameters=hyperparameters,
            fit_max_points=fit_max_points,
            noise_variance=noise_variance,
            current_value=current_value,
            gp_after_tuning=gp_after_tuning,
            jitter=jitter,
            initial_scale=initial_scale,
            adapt_interval=adapt_interval,
            learning_rate=learning_rate,
            history_size=history_size,
            loglik_gradient=False,
            model=model,
            initial_point=initial_point,
            compile_kwargs=compile_kwargs,
            rng=rng,
            blocked=blocked,
        )

    def _base_proposal(self) -> ScaleFreeKameleon:
        return super()._base_proposal(
            self._kernel_template,
            # Kameleon: the pure Kameleon component (gamma tied to nu2 is its AM-shaped fallback). With
            # the Kameleon/AM mixture, delayed acceptance showed a bias on a 2-d banana with a poor GP
            # (z 4.3 at 2500 draws, 6.6 at 6000; KAMH with the same mixture is exact): issue 16.
            # Random walk: the AM component alone.
            am_weight=0.0 if self.proposal == "kameleon" else 1.0,
            bandwidth=self.bandwidth_spec,
            gamma=self.gamma_spec,
            n_subsample=self.n_subsample,
        )

    @property
    def kameleon_family(self):
        """The Kameleon family on the whitened subsample (None before the first one)."""
        return self._proposal.family

    # ------------------------------------------------------------ steps
    def _delayed_acceptance_step(self, x, cur, info):
        move = self._propose(x)
        y, lq_f, lq_r = move.x, move.log_q_forward, move.log_q_reverse
        if not move.feasible:  # Kameleon covariance at y singular even with jitter: reject
            info["stage1"] = 0.0
            metropolis_accept(-math.inf, self.rng)
            return x, False, 0.0, None
        lp_y, _ = self._target.prior(y)
        ll_x = cur.loglik
        if self.current_value == "exact":
            cur_pt = DAPoint(cur.log_prior, math.nan, math.nan, ll_x)
        else:
            cur_pt = self._current_point(x, cur, lambda: surrogate_point(self._gp, x, cur.log_prior, ll_x))
        if math.isfinite(lp_y):
            prop_pt = surrogate_point(self._gp, y, lp_y)
            info["gp_sd"] = math.sqrt(prop_pt.var)
            la1 = log_alpha1(cur_pt, prop_pt, lq_f, lq_r, self.current_value)
        else:
            prop_pt, la1 = None, -math.inf
        passed, a1 = metropolis_accept(la1, self.rng)
        info["stage1"] = a1
        if not passed:
            return x, False, 0.0, None

        ev = self._target.evaluate(y, (lp_y, None))
        ll_y = ev.loglik
        if not (math.isfinite(ll_y) and math.isfinite(ev.logp)):
            info["stage2"] = 0.0
            metropolis_accept(-math.inf, self.rng)
            return x, False, 0.0, (y, ev)
        if self.current_value == "exact":
            # mu(x), var(x) from the same GP (y is not in it yet), for alpha1(y, x).
            cur_pt = self._current_point(x, cur, lambda: surrogate_point(self._gp, x, cur.log_prior, ll_x))
        ratios = self._stage2_log_ratios(cur_pt, prop_pt._replace(ll=ll_y), lq_f, lq_r)
        accepted, a2 = metropolis_accept(ratios.log_ratio_stage2, self.rng)
        info["stage2"] = a2
        # Stage 1 passed with probability a1, so this is unbiased for the plain MH acceptance probability.
        info["adapt"] = accept_probability(mh_log_ratio(ll_y + lp_y, ll_x + cur.log_prior, lq_r, lq_f)) / a1
        if accepted:
            self._proposal.accept(move)
        return self._finish(x, y, accepted, ev), accepted, a2, (y, ev)

    def _stage2_log_ratios(self, current, proposal, log_q_forward, log_q_reverse):
        return delayed_acceptance_log_ratios(
            current, proposal, log_q_forward, log_q_reverse, self.current_value
        )

    def astep(self, q0):
        y_new, stats = super().astep(q0)
        stats[0]["nu2"] = math.nan if self._proposal.nu2 is None else self._proposal.nu2.value
        return y_new, stats


class GPDelayedAcceptanceMALA(_GPDelayedAcceptanceBase):
    r"""Two-stage MALA with a Gaussian-process surrogate of the log-likelihood and its gradient.

    As :class:`GPDelayedAcceptanceMH`, but the base proposal is a Langevin move whose drift comes
    from the GP (Benavoli, Wyse & White, section 3):

    .. math::
        Q(\cdot \mid x) = \mathcal N\big(x + \tfrac12 \Sigma\,(\nabla\mu(x) + \nabla\log p(x)),\ \Sigma\big),
        \qquad \Sigma = \lambda^2 C,

    with :math:`\nabla\mu` the gradient of the GP mean (:meth:`GPSurrogate.predict_gradient`) and
    the exact prior gradient. The preconditioner :math:`C` and the scale :math:`\lambda` are learned
    scale-free, as for :class:`GPDelayedAcceptanceMH`
    (:class:`~pymc_kameleon.core.scale_free.ScaleFreeKameleon`): the exact warm-up starts with a
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
    (corrected; :func:`~pymc_kameleon.core.delayed_acceptance.log_expected_langevin_term`):

    .. math::
        \alpha_1(x, y) = 1 \wedge \frac{p(y)\, E\big[e^{\tilde\ell(y)}\, Q_{\tilde\ell}(x \mid y)\big]}
                                      {e^{\ell(x)}\, p(x)\, Q(y \mid x)}.

    **Stage 2** is the delayed-acceptance correction with the proposal densities of the kernel
    actually used and both :math:`\alpha_1` from the same GP
    (:func:`~pymc_kameleon.core.delayed_acceptance.mala_delayed_acceptance_log_ratios`), so the
    chain targets the exact posterior whatever the surrogate. The warm-up that seeds the GP is
    plain MALA with the exact gradient.

    Parameters
    ----------
    vars : list of variables, optional
    gradient_observations : bool, default True
        Give the GP the exact log-likelihood gradients. This needs a differentiable likelihood:
        a model with a PseudoMarginalPotential or a black-box Op without ``grad`` raises a
        ValueError that names :class:`GPDelayedAcceptanceMH`. With False the GP is fitted to
        values only and the drift is the gradient of its mean (the prior must still be
        differentiable).
    target_accept : float, default 0.574
        Target overall acceptance rate (the optimal rate of MALA).
    max_points : int, optional
        Cap on the GP's training points; with gradient observations each point adds
        :math:`d + 1` rows, so the default is ``max(1000 // (d + 1), 2 * initial_points)``.
    fit_max_points : int, optional
        Default ``max(20, 300 // (d + 1))`` with gradient observations, else 300.
    initial_scale : float, default 0.5
        Starting step size of the coordinate scan (on the sampler's unconstrained space).
    initial_points, fit_hyperparameters, hyperparameters, noise_variance, current_value : optional
        As for :class:`GPDelayedAcceptanceMH`.
    gp_after_tuning, jitter, adapt_interval, learning_rate, history_size : optional
        As for :class:`GPDelayedAcceptanceMH`.
    model, initial_point, compile_kwargs, rng, blocked
        As for other PyMC step methods.

    Notes
    -----
    The statistics are those of :class:`GPDelayedAcceptanceMH` (``gp_sd`` is the predictive sd of
    :math:`\ell` at the proposal; ``scaling`` is :math:`\lambda`).
    """

    name = "gp_da_mala"
    _default_target_accept = 0.574
    _uses_prior_gradient = True

    def __init__(
        self,
        vars=None,
        *,
        gradient_observations=True,
        target_accept=0.574,
        initial_points=None,
        max_points=None,
        fit_hyperparameters=True,
        hyperparameters=None,
        fit_max_points=None,
        noise_variance="auto",
        current_value="exact",
        gp_after_tuning="grow",
        jitter=1e-8,
        initial_scale=0.5,
        adapt_interval=100,
        learning_rate=1.0,
        history_size=10_000,
        model=None,
        initial_point=None,
        compile_kwargs=None,
        rng=None,
        blocked=True,
    ):
        if not isinstance(gradient_observations, bool):
            raise ValueError(f"gradient_observations must be True or False, got {gradient_observations!r}.")
        self.gradient_observations = gradient_observations
        super().__init__(
            vars,
            target_accept=target_accept,
            initial_points=initial_points,
            max_points=max_points,
            fit_hyperparameters=fit_hyperparameters,
            hyperparameters=hyperparameters,
            fit_max_points=fit_max_points,
            noise_variance=noise_variance,
            current_value=current_value,
            gp_after_tuning=gp_after_tuning,
            jitter=jitter,
            initial_scale=initial_scale,
            adapt_interval=adapt_interval,
            learning_rate=learning_rate,
            history_size=history_size,
            loglik_gradient=gradient_observations,
            model=model,
            initial_point=initial_point,
            compile_kwargs=compile_kwargs,
            rng=rng,
            blocked=blocked,
        )

    def _langevin_draw(self, x, drift, L):
        r"""Langevin draw :math:`y = x + \tfrac12 \Sigma g + L z`, :math:`z \sim \mathcal N(0, I)`.

        Here :math:`\Sigma = L L^\top`. (A separate method so that tests can record the proposals.)
        """
        return LangevinProposal(L).draw(x, drift, self.rng)

    def _proposal_chol(self):
        r"""Factor :math:`\lambda L` of the Langevin covariance :math:`\lambda^2 C`, :math:`C = L L^\top`."""
        return self._proposal.am_scale.value * self._proposal.chol

    def _drift_exact(self, evaluation):
        g = evaluation.grad_log_prior
        if self.gradient_observations:
            g = g + evaluation.grad_exact_loglik
        return g

    def _exact_step(self, x, cur, info):
        """Warm-up: the coordinate scan (random-walk moves), then plain MALA with the exact gradient
        (the prior gradient only without gradient observations)."""
        if self._proposal.phase == "scan":
            return super()._exact_step(x, cur, info)
        info["component"] = _LANGEVIN
        L = self._proposal_chol()
        drift_x = self._drift_exact(cur)
        y = self._langevin_draw(x, drift_x, L)
        lq_f = langevin_log_density(y, x, drift_x, L)
        prior_y = self._target.prior(y)
        ev = self._target.evaluate(y, prior_y)
        if math.isfinite(ev.logp):
            drift_y = self._drift_exact(ev)
            lq_r = langevin_log_density(x, y, drift_y, L) if np.all(np.isfinite(drift_y)) else math.nan
            log_ratio = mh_log_ratio(ev.logp, cur.logp, lq_r, lq_f)
        else:
            log_ratio = -math.inf
        accepted, prob = metropolis_accept(log_ratio, self.rng)
        info["stage2"] = prob
        evaluated = (y, ev) if math.isfinite(prior_y[0]) else None
        return self._finish(x, y, accepted, ev), accepted, prob, evaluated

    def _delayed_acceptance_step(self, x, cur, info):
        info["component"] = _LANGEVIN
        L = self._proposal_chol()
        ll_x = cur.loglik
        cur_pt = self._current_point(
            x, cur, lambda: mala_point(self._gp, x, cur.log_prior, cur.grad_log_prior, ll_x)
        )
        y = self._langevin_draw(x, cur_pt.drift(), L)
        lp_y, glp_y = self._target.prior(y)
        if math.isfinite(lp_y) and np.all(np.isfinite(glp_y)):
            prop_pt = mala_point(self._gp, y, lp_y, glp_y)
            info["gp_sd"] = math.sqrt(max(float(prop_pt.joint_cov[0, 0]), 0.0))
            # A GP prediction that overflowed (far from every training point) cannot screen: alpha1 = 0
            # if either end's is non-finite. The rule is symmetric in (x, y), so the chain stays exact.
            if _finite_prediction(cur_pt) and _finite_prediction(prop_pt):
                la1 = mala_log_alpha1(cur_pt, prop_pt, L, self.current_value)
            else:
                la1 = -math.inf
        else:
            prop_pt, la1 = None, -math.inf
        passed, a1 = metropolis_accept(la1, self.rng)
        info["stage1"] = a1
        if not passed:
            return x, False, 0.0, None

        ev = self._target.evaluate(y, (lp_y, glp_y))
        ll_y = ev.loglik
        if not (math.isfinite(ll_y) and math.isfinite(ev.logp)):
            info["stage2"] = 0.0
            metropolis_accept(-math.inf, self.rng)
            return x, False, 0.0, (y, ev)
        ratios = self._stage2_log_ratios(cur_pt, prop_pt._replace(ll=ll_y), L)
        accepted, a2 = metropolis_accept(ratios.log_ratio_stage2, self.rng)
        info["stage2"] = a2
        # Stage 1 passed with probability a1, so this is unbiased for the acceptance probability of
        # plain MH with this (GP-drift) Langevin proposal.
        lq_f = langevin_log_density(y, x, cur_pt.drift(), L)
        lq_r = langevin_log_density(x, y, prop_pt.drift(), L)
        info["adapt"] = accept_probability(mh_log_ratio(ll_y + lp_y, ll_x + cur.log_prior, lq_r, lq_f)) / a1
        return self._finish(x, y, accepted, ev), accepted, a2, (y, ev)

    def _stage2_log_ratios(self, current, proposal, proposal_chol):
        return mala_delayed_acceptance_log_ratios(current, proposal, proposal_chol, self.current_value)
