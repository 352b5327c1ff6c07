r"""When the GP surrogate of GP delayed acceptance learns: its options, training set and schedule.

The two-stage ratios are in :mod:`pymc_kameleon.core.delayed_acceptance.ratios`; the GP itself is
:class:`~pymc_kameleon.core.gp.surrogate.GPSurrogate`. This module decides which exact evaluations the GP
is given and when its hyperparameters are set (PyMC-free; the steps in
:mod:`pymc_kameleon.steps.delayed_acceptance` drive it):

- **Warm-up.** A chain starts with exact steps until the GP holds ``initial_points`` evaluations
  and the base proposal's coordinate scan is over; then the hyperparameters are set by heuristics
  (length scales: the points' spread; signal variance: their values' variance) and, during tuning,
  fitted by marginal likelihood with two restarts.
- **Floor.** A value more than :data:`GP_FLOOR_NATS` :math:`+ 5d` below the best so far is clipped
  to that floor (gradient 0), and stored values are raised when the best improves.
- **Fit schedule.** During tuning the hyperparameters are refitted whenever the training set has
  doubled since the last fit, at every adaptation window's end, and once more at the end of tuning
  if the set grew by a quarter; each fit uses the latest ``fit_max_points`` points. A fit's result
  replaces the hyperparameters only if it predicts those points at least as well, by the
  leave-one-out log predictive density, as the hyperparameters it started from: the marginal
  likelihood can prefer length scales that predict far worse (a 20-d Gaussian: +2.6 nats of
  marginal likelihood, -400 nats leave-one-out, stage 2 accepting 45% instead of 95%).
- **Forgetting.** During tuning a full GP drops its older half, and a window's end drops the points
  from before the previous window (a walk in from a far start). After tuning, ``max_points`` caps it.
- **Screening pause.** If, during tuning, stage 1 accepts less than :data:`MIN_STAGE1_ACCEPT` on
  average over :data:`SCREENING_CHECK_STEPS` screened steps, the GP is wrong near the chain: exact
  steps until the next window ends, then a fresh fit. Likewise while the chain is still walking
  in: an adaptation window that ended early (its draws disagreed with the learned covariance)
  pauses screening until the next window ends or for ``2 * adapt_interval`` exact steps, whichever
  is first. A GP fitted on the path extrapolates ahead of it with confidence and rejects the moves
  that would carry the chain in, and each window then learns a smaller covariance from the
  smaller moves (a regression 100 sds away: plain MH with the same adaptation arrived within 1500
  steps, screened chains took 9000).

None of this touches the chain's exactness: the GP only screens proposals.
"""

from __future__ import annotations

import math
from collections import deque
from contextlib import contextmanager

import numpy as np

from pymc_kameleon.core.gp.fit import data_scales
from pymc_kameleon.core.gp.options import GPTrainingOptions
from pymc_kameleon.core.linalg import SingularCovarianceError, one_blas_thread, same_array
from pymc_kameleon.core.warning_categories import KameleonRuntimeWarning

__all__ = [
    "GP_FLOOR_NATS",
    "MAX_STAGE1_ACCEPT",
    "MIN_STAGE1_ACCEPT",
    "SCREENING_CHECK_STEPS",
    "GPTrainingSchedule",
]


# Training values below (best value - this - 5 per dimension) are clipped to that floor.
GP_FLOOR_NATS = 50.0
# During tuning, a mean stage-1 acceptance below MIN_STAGE1_ACCEPT over this many screened steps
# pauses screening (see GPTrainingSchedule.record_stage1).
SCREENING_CHECK_STEPS = 100
MIN_STAGE1_ACCEPT = 0.02
# Mean stage-1 acceptance over the last SCREENING_CHECK_STEPS screened tuning steps above which the
# GP screens (almost) nothing: every survivor costs an exact evaluation (the step warns).
MAX_STAGE1_ACCEPT = 0.9


class GPTrainingSchedule:
    """One chain's GP and the schedule by which it learns (see the module docstring).

    ``version`` increases whenever the GP changes, so predictions at the current state can be
    cached (:meth:`cached`). ``warm`` is True during the exact warm-up and the screening pauses.
    ``warn(message, category, stacklevel)`` reports a duplicated point (once per chain).
    """

    def __init__(self, options: GPTrainingOptions, warn=None):
        self.options = options
        self._warn = warn
        self.gp = options.new_gp()
        self.version = 0
        self.warm = True
        self.best_ll = -math.inf  # largest exact log-likelihood added (sets the floor)
        self.next_fit = options.initial_points
        self.fitted_at = 0  # training-set size at the last hyperparameter fit (0: never)
        self.n_fits = 0
        self.n_fits_refused = 0  # fits not applied: they predicted worse (leave-one-out) than before
        self.last_fit_refused = False
        self.resume_window = None  # screening paused until this adaptation window (None: not paused)
        self.stage1_recent = deque(maxlen=SCREENING_CHECK_STEPS)  # alpha1 of recent screened tuning steps
        self.n_pauses = 0  # times screening fell back to exact steps during tuning (stage 1 failing)
        self.n_walking_pauses = 0  # times a window that ended early paused screening
        self.pause_reason = None  # "stage1" or "walking" while paused
        self.pause_steps_left = 0  # exact evaluations left in a walking pause
        self.window_start_points = [0]  # GP points at the start of each adaptation window
        self._warned_singular = False
        self._cache = None  # (version, point, value, key)

    # ------------------------------------------------------------ training set
    @property
    def floor(self) -> float:
        """Lowest value the GP is given: :data:`GP_FLOOR_NATS` + 5 per dimension below the best so far."""
        return self.best_ll - (GP_FLOOR_NATS + 5.0 * self.options.dim)

    def accepts_points(self, tune: bool) -> bool:
        return tune or self.warm or self.options.gp_after_tuning == "grow"

    @one_blas_thread
    def add(self, theta, ll, grad=None, *, tune: bool) -> bool:
        """Condition the GP on one exact evaluation (after the step's decision); whether it was added.

        Values below :attr:`floor` are clipped to it, with a zero gradient. The GP then learns
        "very unlikely here" without one value of, say, -1e300 from an overshooting Langevin
        proposal, or -1e8 from a scan step across an unstandardised regression's ridge, blowing up
        its signal variance and making its mean pessimistic everywhere (then stage 1 rejects every
        proposal and the scale collapses). Non-finite values are not added.
        """
        if not self.accepts_points(tune) or not math.isfinite(ll):
            return False
        if grad is not None and not np.all(np.isfinite(grad)):
            return False
        if self.options.gradients and grad is None:
            return False
        if ll > self.best_ll:
            self.best_ll = float(ll)
            self._raise_to_floor(tune)
        floor = self.floor
        if ll < floor:
            ll = floor
            grad = None if grad is None else np.zeros_like(np.asarray(grad, dtype=float))
        if tune and self.gp.n_points >= self.options.max_points:
            self.forget_older_half()
        try:
            added = self.gp.add(theta, ll, grad)
        except SingularCovarianceError:
            if not self._warned_singular and self._warn is not None:
                self._warned_singular = True
                self._warn(
                    "a new GP point duplicates stored ones numerically and was skipped (raise `jitter` "
                    "if this happens often).",
                    KameleonRuntimeWarning,
                    4,
                )
            return False
        if added:
            self.version += 1
        return added

    def forget_older_half(self) -> None:
        """Drop the older half (one :math:`O(t^3)` refactorisation per :math:`t/2` additions).

        A GP that reached ``max_points`` while the chain walked in from a far start would otherwise
        stay fixed on the transient: with gradient observations (cap 1000 / (d + 1) points) GP-DA
        MALA's drift then came from points far behind the chain, which crawled (an unstandardised
        regression: still 7 sds away after 3000 tuning steps).
        """
        self.forget_oldest(self.gp.n_points - self.gp.n_points // 2)

    @one_blas_thread
    def forget_oldest(self, n: int) -> None:
        """Drop the ``n`` oldest points (a refactorisation); window starts count from the new first."""
        self.gp = self.gp.latest(self.gp.n_points - n, max_points=self.options.max_points)
        self.window_start_points = [max(start - n, 0) for start in self.window_start_points]
        self.version += 1

    def _raise_to_floor(self, tune: bool) -> None:
        """Re-clip the stored values to the floor below a new best value.

        Walking in from a far start, the first values can be 1e7 nats below the later ones; left
        there, they keep the signal variance near 1e13, whose relative nugget (``jitter``) then
        spoils the interpolation at the current state by hundreds of nats, and stage 1 rejects
        everything. A signal variance fitted to the old spread is reset to the new one (during
        tuning; the next scheduled fit refines it).
        """
        gp = self.gp
        if not gp.n_points or not gp.raise_values_to(self.floor):
            return
        self.version += 1
        spread = max(float(np.var(gp.values)), 1.0)
        if tune and not self.warm and gp.signal_variance > 10.0 * spread:
            gp.set_hyperparameters(signal_variance=spread)

    # ------------------------------------------------------------ hyperparameters
    @one_blas_thread
    def end_warm_up(self, *, tune: bool, typical_step: float) -> bool:
        """Set the hyperparameters (heuristics, then a fit if tuning). Returns whether it fitted.

        ``typical_step`` is the length-scale fallback for a coordinate whose points do not spread
        (used only while the GP's inputs are not whitened).
        """
        self.warm = False
        self.pause_reason = None
        fixed = self.options.fixed_hyperparameters or {}
        ell, vy = data_scales(self.gp, fallback=typical_step if self.gp.whitening is None else 1.0)
        hyper = {
            "lengthscales": fixed.get("lengthscales", ell),
            "signal_variance": fixed.get("signal_variance", vy),
        }
        if self.options.fit_noise and "noise_variance" not in fixed:
            hyper["noise_variance"] = 0.01 * vy
        self.gp.set_hyperparameters(**hyper)
        self.version += 1
        if self.options.fit_hyperparameters and tune:
            # From the data's scales only: random restarts cost twice the rest of the fit and reached the
            # same optimum in every warm-up fit probed (decision 0071).
            self.fit()
            return True
        return False

    @one_blas_thread
    def fit(self) -> None:
        """Fit the hyperparameters by marginal likelihood on the latest ``fit_max_points`` points."""
        gp = self.gp
        n = gp.n_points
        if n < 2:
            return
        try:
            sub = gp.latest(self.options.fit_max_points)
            before = sub.loo_log_predictive_density()
            sub.fit_hyperparameters()
            self.last_fit_refused = sub.loo_log_predictive_density() < before
            if self.last_fit_refused:
                # The fit raised the marginal likelihood but predicts the points worse: keep what
                # predicted them (gp_fit.loo_log_predictive_density).
                self.n_fits_refused += 1
            else:
                gp.set_hyperparameters(
                    lengthscales=sub.lengthscales,
                    signal_variance=sub.signal_variance,
                    noise_variance=sub.noise_variance,
                )
        except SingularCovarianceError:
            gp.refit()  # keep the previous hyperparameters
        self.version += 1
        self.fitted_at = n
        self.n_fits += 1
        self.next_fit = 2 * n

    def warm_up_may_end(self, *, scanning: bool, window: int, tune: bool) -> bool:
        """Whether screening may (re)start: not during the coordinate scan, nor during a pause.

        Screening a coordinate scan would let a GP that has not seen each coordinate's scale shrink
        the scan's step sizes; the GP starts screening with the scan's whitening.
        """
        if scanning:
            return False
        if self.pause_reason == "walking" and self.pause_steps_left <= 0:
            return True
        return not tune or self.resume_window is None or window >= self.resume_window

    def after_exact_evaluation(
        self, *, tune: bool, scanning: bool, window: int, typical_step: float
    ) -> bool:
        """The schedule after a new point: end the warm-up, or fit if the set doubled (tuning only).

        ``scanning`` and ``window`` describe the base proposal (:meth:`warm_up_may_end`),
        ``typical_step`` is :meth:`end_warm_up`'s. Returns whether the hyperparameters were fitted.
        """
        if self.warm:
            if self.pause_reason == "walking":
                self.pause_steps_left -= 1
            if self.gp.n_points >= self.options.initial_points and self.warm_up_may_end(
                scanning=scanning, window=window, tune=tune
            ):
                return self.end_warm_up(tune=tune, typical_step=typical_step)
            return False
        if self.options.fit_hyperparameters and tune and self.gp.n_points >= self.next_fit:
            self.fit()
            return True
        return False

    @one_blas_thread
    def window_ended(self, whitening) -> bool:
        """An adaptation window ended (tuning): forget the transient, re-whiten, refit.

        The GP forgets the points from before the previous window (a walk in from a far start
        would otherwise fill it up to ``max_points``), and, if ``whitening`` is given (the learned
        covariance changed), its kernel moves to those coordinates, where a correlated ridge is
        round; then its hyperparameters are refitted. Returns whether it refitted.
        """
        starts = self.window_start_points
        starts.append(self.gp.n_points)
        if len(starts) > 2 and starts[-3] > 0:
            self.window_start_points = starts[-2:]
            self.forget_oldest(starts[-3])  # the points from before the window that just ended
        if whitening is not None:
            self.gp.set_input_whitening(whitening)
        self.version += 1
        if self.options.fit_hyperparameters and not self.warm and self.gp.n_points >= 2:
            self.fit()
            return True
        return False

    @one_blas_thread
    def end_tuning(self) -> None:
        """A last fit if the training set grew by a quarter since the previous one."""
        if self.options.fit_hyperparameters and not self.warm and self.gp.n_points >= 1.25 * self.fitted_at:
            self.fit()

    @one_blas_thread
    def set_whitening(self, whitening) -> None:
        """Move the GP's kernel to new whitened coordinates (same points)."""
        self.gp.set_input_whitening(whitening)
        self.version += 1

    # ------------------------------------------------------------ screening
    def record_stage1(self, alpha1: float, window: int) -> bool:
        """Record a screened tuning step's stage-1 probability; pause screening if the GP fails.

        A stage-1 acceptance below :data:`MIN_STAGE1_ACCEPT` over :data:`SCREENING_CHECK_STEPS`
        screened tuning steps means the GP is wrong near the chain (walking in from a far start,
        its stationary model of a steep slope is poor), and the adaptation signal is then ~0, so
        the scale would collapse and the chain stick. The step then takes exact steps until the
        end of the next adaptation window (``window + 1``), which give the GP points where the
        chain is, the scale the true acceptance rate, and the window a new whitening. Returns
        whether it paused.
        """
        self.stage1_recent.append(alpha1)
        if not self.recent_stage1_rate() < MIN_STAGE1_ACCEPT:  # NaN (too few steps yet) too
            return False
        self.n_pauses += 1
        self._pause(window, "stage1")
        return True

    def pause_while_walking(self, window: int, max_steps: int) -> None:
        """An adaptation window ended early during tuning: exact steps until the next one ends.

        ``window`` is the index of the window that starts now. The pause also ends after
        ``max_steps`` exact evaluations, so that a long window does not stay exact throughout.
        A window ends early when its draws disagree with the learned covariance by a factor 3 in
        sd: the chain is still walking in, or has settled somewhere much smaller. A GP trained on
        the way would screen with confidence where it has never been. Exact steps move the chain
        as plain MH would, give the GP points where the chain is, and the next window a
        covariance from unscreened moves.
        """
        self.n_walking_pauses += 1
        self.pause_steps_left = int(max_steps)
        self._pause(window, "walking")

    def _pause(self, window: int, reason: str) -> None:
        """Exact steps from now until adaptation window ``window + 1`` (or an earlier resume)."""
        self.warm = True
        self.resume_window = window + 1
        self.pause_reason = reason
        self.stage1_recent.clear()

    def recent_stage1_rate(self) -> float:
        """Mean stage-1 acceptance of the last SCREENING_CHECK_STEPS screened tuning steps (NaN: fewer)."""
        recent = self.stage1_recent
        return float(np.mean(recent)) if len(recent) >= SCREENING_CHECK_STEPS else math.nan

    @property
    def paused(self) -> bool:
        """Whether the chain is in an exact fallback (a screening pause), not the initial warm-up."""
        return self.warm and self.resume_window is not None

    # ------------------------------------------------------------ cache
    def cached(self, x, key, make):
        """``make()``, cached per (GP version, point ``x``, ``key``): the predictions at the current state."""
        cached = self._cache
        if cached is not None and cached[0] == self.version and cached[3] is key and same_array(cached[1], x):
            return cached[2]
        value = make()
        self.remember(x, key, value)
        return value

    @contextmanager
    def cache_kept(self):
        """Predictions cached inside this block are forgotten after it (a speculative dry run's)."""
        saved = self._cache
        try:
            yield
        finally:
            self._cache = saved

    def remember(self, x, key, value) -> None:
        """Cache ``value``, made by the GP as it is now, as the prediction at ``x`` for ``key``.

        A step that accepts its proposal has the prediction there already; unless the GP changes
        (a new point, a refit), the next step starts from it instead of predicting again. At
        ``max_points`` that saves GP-DA MALA a joint prediction (an O(n^2 (d+1)) solve) per
        accepted step.
        """
        self._cache = (self.version, np.array(x, copy=True), value, key)
