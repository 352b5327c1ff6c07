r"""Scale-free tuning: the schedule that learns a
:class:`~pymc_kameleon.core.adaptation.state.ScaleFreeState`.

Everything a user's choice of units could change is defined relative to a covariance
:math:`C = L L^\top` and mean :math:`m` learned from the chain; the proposals built from the
state (:class:`~pymc_kameleon.core.kameleon.scale_free.ScaleFreeProposal`, GP-DA MALA's Langevin
move) live in those whitened coordinates. Tuning (:meth:`ScaleFreeAdaptation.adapt`, fed one
:class:`~pymc_kameleon.core.adaptation.state.TuningDraw` per step), in the spirit of Stan's
windowed warm-up:

1. **Coordinate scan** (``scan_steps`` steps): one coordinate moves per step, each with its own
   step size learned toward acceptance 0.44 (the one-dimensional optimum). It finds every
   coordinate's scale, from 1e-4 to 1e4, in a few dozen moves each.
2. **Windows** of doubling length (``first_window``, then twice that, ...; each window is twice as
   long as the previous one ran, so after one that ended early the doubling starts again from its
   length). At the end of each window, :math:`m` and :math:`C` are re-estimated from *that
   window's draws only* (the walk in from a far start is forgotten), shrunk toward their
   diagonal, and :math:`Z` is redrawn from the same draws. The first window runs AM alone; the
   Kameleon component starts after it. When the steps pass the log density's gradient (GP-DA
   MALA), no coordinate's learned variance falls below the window's Cramér-Rao bound
   :math:`1 / \overline{(\partial_i \log\pi)^2}`.
3. At every step, :math:`\log\lambda` (on AM moves) and :math:`\log\nu^2` (on Kameleon moves)
   follow Robbins-Monro toward the target acceptance rate.
4. With ``independence_weight`` :math:`\iota_{max} > 0`, the proposal may draw a share
   :math:`\iota_{max}` of its moves independently from the Student-t :math:`t_\nu(m, C)`, on in a
   window only where the last one measured that it pays
   (:class:`~pymc_kameleon.core.adaptation.independence.IndependenceTuning`: probes while it is off,
   expected squared jumps against the walk's, and the Pareto :math:`\hat k` of its importance
   weights).

After tuning everything is frozen, so the chain is an exact Metropolis-Hastings chain.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import solve_triangular

from pymc_kameleon.core.adaptation.covariance import shrunk_covariance
from pymc_kameleon.core.adaptation.diagnostics import (
    TuningReport,
    gradient_slope,
    gradient_spread,
    log_density_climb,
    relative_spread,
    whitened_drift,
)
from pymc_kameleon.core.adaptation.independence import IndependenceTuning
from pymc_kameleon.core.adaptation.kameleon_component import KameleonComponentTuning
from pymc_kameleon.core.adaptation.left_regions import TuningBlocks
from pymc_kameleon.core.adaptation.scales import RobbinsMonro
from pymc_kameleon.core.adaptation.scan import MAX_LOG_STEP, CoordinateScan, scan_steps_for
from pymc_kameleon.core.adaptation.state import ScaleFreeState, TuningDraw
from pymc_kameleon.core.adaptation.transport_map import INDEPENDENT_COMPONENTS, TriangularMap
from pymc_kameleon.core.adaptation.whitening import Whitening
from pymc_kameleon.core.adaptation.windows import AdaptationWindow
from pymc_kameleon.core.angles import AngleFrame
from pymc_kameleon.core.kameleon.family import check_subsample_size
from pymc_kameleon.core.linalg import SingularCovarianceError

__all__ = ["UNCOVERED_LIMIT", "ScaleFreeAdaptation"]

# More than this fraction of the last tuning states beyond 3 bandwidths of every point of Z is
# reported at the end of tuning, and means that nu^2 was tuned where the kernel term vanished.
UNCOVERED_LIMIT = 0.1


def _bounded_update(rm: RobbinsMonro, signal: float) -> None:
    """Robbins-Monro step with the signal capped so that the log-scale moves by at most 0.5."""
    gain = rm.learning_rate * (rm.t + 1) ** (-rm.decay)
    rm.update(min(signal, rm.target + MAX_LOG_STEP / gain))


class ScaleFreeAdaptation(KameleonComponentTuning):
    r"""The scan, the doubling windows and the Robbins-Monro scales that learn a :class:`ScaleFreeState`.

    Parameters
    ----------
    dim : int
        Dimension :math:`d`.
    kernel : kernel object or None
        Template kernel of the Kameleon component (:func:`pymc_kameleon.core.kameleon.kernels.make_kernel`);
        None learns no Kameleon component (no :math:`Z`): the Adaptive Metropolis walk alone.
    bandwidth : "median" or float
        Kernel bandwidth in whitened units; ``"median"``: the median heuristic over :math:`Z_w`.
    gamma : "auto" or float
        :math:`\gamma` in whitened units; ``"auto"``: 0.2 times the median marginal sd of
        :math:`Z_w` (about 0.2).
    n_subsample : int
        Most points in :math:`Z`.
    nu2 : float, optional
        Starting :math:`\nu^2` (whitened units). By default the Kameleon component's average
        proposal variance is matched to the AM component's :math:`\lambda^2` at the first
        :math:`Z`.
    target_accept : float
        Robbins-Monro target for :math:`\lambda` and :math:`\nu^2`.
    learning_rate : float
        Robbins-Monro gain :math:`\rho_0` (gain :math:`\rho_0 (t+1)^{-0.6}`).
    first_window : int
        Length of the first adaptation window; later windows double.
    scan_steps : int, optional
        Length of the coordinate scan (default :func:`~pymc_kameleon.core.adaptation.scan.scan_steps_for`).
    history_size : int
        Most window draws kept (evenly thinned beyond that).
    initial_scan_scale : float
        Starting step size of every coordinate in the scan.
    kameleon_after : int
        Tuning steps before the Kameleon component may join: its first :math:`Z` is drawn at the first
        window end at or after this step (or where tuning ends, as when tuning ends in the first
        window). Until then the walk is Adaptive Metropolis alone.
    independence_weight : float
        :math:`\iota_{max}`, the independence component's weight when on (item 4); 0: never on.
    independence_probes : int, optional
        Probes each of its shapes should get in a window, for a step whose windows' verdicts are all
        it has (``probes_per_shape`` of
        :class:`~pymc_kameleon.core.adaptation.independence.IndependenceTuning`). None: the fixed rate.
    angle_columns : sequence of int
        The coordinates in which the target's density is :math:`2\pi`-periodic (``pm.VonMises``):
        tuning keeps them in one period (:meth:`on_circle`, :mod:`pymc_kameleon.core.angles`).

    Attributes
    ----------
    state : ScaleFreeState
        What has been learned; proposals are built from it.
    window_ended_early : bool
        Whether the last window ended before its scheduled end because its draws disagreed with
        the learned covariance (a chain still walking in, or one that settled into a region much
        smaller than :math:`C`).
    """

    def __init__(
        self,
        dim: int,
        kernel=None,
        *,
        bandwidth="median",
        gamma="auto",
        n_subsample: int = 1000,
        nu2: float | None = None,
        target_accept: float = 0.234,
        learning_rate: float = 1.0,
        first_window: int = 100,
        scan_steps: int | None = None,
        history_size: int = 10_000,
        initial_scan_scale: float = 1.0,
        kameleon_after: int = 0,
        independence_weight: float = 0.0,
        independence_probes: int | None = None,
        angle_columns=(),
    ):
        d = int(dim)
        if kernel is not None:
            check_subsample_size(n_subsample, d)
        self.dim = d
        self.kernel = kernel
        self.bandwidth_spec = bandwidth
        self.gamma_spec = gamma
        self.n_subsample = int(n_subsample)
        self.nu2_initial = None if nu2 is None else float(nu2)
        self.target_accept = float(target_accept)
        self.learning_rate = float(learning_rate)
        self.first_window = max(int(first_window), 2)
        self.kameleon_after = int(kameleon_after)
        self.independence = IndependenceTuning(independence_weight, d, independence_probes)
        scan_steps = scan_steps_for(d) if scan_steps is None else int(scan_steps)
        self.state = ScaleFreeState(
            dim=d,
            whitening=Whitening.identity(d),
            scan=CoordinateScan(d, initial_scan_scale, self.learning_rate),
            am_scale=RobbinsMonro(2.38 / math.sqrt(d), self.target_accept, self.learning_rate),
            scan_steps=scan_steps,
        )
        self.window_ended_early = False
        first_end = scan_steps if scan_steps > 0 else self.first_window
        angles = AngleFrame(angle_columns) if len(angle_columns) else None
        self._windows = AdaptationWindow(d, history_size, self.first_window, first_end, angles)
        # Whether the chain's state was last put in the angles' period, at the first step after tuning.
        self._angles_placed = False
        #: The chain's settled tuning blocks, for the regions-left-behind check after tuning.
        self.blocks = TuningBlocks(d)
        self._tuning_ended = False
        # Whether a window has ended since the Kameleon component was due (its Z should exist by now).
        self._kameleon_window_ended = False
        # The log-scales (lambda, nu^2) where the current window began: tuning that ends too early in a
        # window to end it freezes these (end_tuning).
        self._window_start_scales = self._log_scales()

    # ------------------------------------------------------------------ what is known
    @property
    def phase(self) -> str:
        """``"scan"``, ``"adaptive_metropolis"`` (AM only) or ``"kameleon"`` (the mixture)."""
        return self.state.phase

    @property
    def tune_steps(self) -> int:
        """Tuning steps taken."""
        return self.state.tune_steps

    @property
    def window(self) -> int:
        """Adaptation windows completed (the scan counts as the first)."""
        return self._windows.index

    @property
    def windows(self) -> AdaptationWindow:
        """The current adaptation window (its draws, and the recent tuning states)."""
        return self._windows

    @property
    def wants_kameleon(self) -> bool:
        """Whether a Kameleon component is learned by now (a kernel was given and tuning reached
        ``kameleon_after``): a window that ends draws Z, and the end-of-tuning report expects one."""
        return self.kernel is not None and self.state.tune_steps >= self.kameleon_after

    def start_from_draws(self, points, rng, transport_map: bool = False) -> bool:
        r"""Begin tuning from draws that already cover the posterior (an SMC run's particles,
        ``start="smc"``), before the first tuning step.

        There is no coordinate scan: :math:`m` and :math:`C` are the draws' shrunk moments, :math:`Z`
        is drawn from them (if the Kameleon component is due from the start), and the draws stay in
        the first window, so that its end re-estimates from them and the chains' first steps together
        (the later windows forget them, as they forget any transient). Returns False, and changes
        nothing, if the draws' covariance is singular: tuning then starts with the scan as usual.

        With ``transport_map``, a :class:`~.transport_map.TriangularMap` is fitted to the draws and
        kept, fixed, as ``state.transport_map`` (the step proposes through it); no Kameleon subsample
        and no independence component are learned then, only the walk's scale :math:`\lambda`.
        """
        state = self.state
        if state.tune_steps:
            raise RuntimeError("start_from_draws comes before the first tuning step.")
        points = np.atleast_2d(np.asarray(points, dtype=float))
        estimate = shrunk_covariance(points)
        if estimate is None or not self._set_whitening(*estimate):
            return False
        state.scan_steps = 0
        if transport_map:
            state.transport_map = TriangularMap.fit(points)
            self.kernel = None
            self.independence = IndependenceTuning(0.0, self.dim)
        if self.wants_kameleon:
            self._refresh_kameleon(points, rng)
            self._kameleon_window_ended = True
        self._windows.seed(points, self.first_window)
        return True

    def on_circle(self, x, tuning: bool):
        r"""The chain's state ``x`` with its angles moved into the period tuning keeps them in
        (:class:`~pymc_kameleon.core.angles.AngleFrame`), or None where none moves.

        At every tuning step, and once more at the first step after tuning: the draws start in the
        period whose draws the proposal learned from, and are never moved (a move by :math:`2\pi` is
        no Metropolis-Hastings step: the Kameleon and independence proposals are not periodic).
        """
        angles = self._windows.angles
        if angles is None or self._angles_placed:
            return None
        self._angles_placed = not tuning
        moved = angles.wrap(x)
        return None if moved is x or np.array_equal(moved, x) else moved

    def required_tune_steps(self, windows: int = 3) -> int:
        r"""Tuning steps for the scan and ``windows`` doubling windows: the scan's steps plus
        :math:`(2^{windows} - 1)` ``first_window``. Three (AM, then two Kameleon refreshes) are the
        minimum, below which the steps warn."""
        return self.state.scan_steps + (2**windows - 1) * self.first_window

    # ------------------------------------------------------------------ adaptation
    def adapt(self, draw: TuningDraw, rng) -> bool:
        """One tuning step after the decision; returns whether :math:`m`, :math:`C` and :math:`Z` changed.

        ``draw.accept_prob`` may be an unbiased estimate that exceeds 1 (delayed acceptance): one
        step moves a log-scale by at most 0.5, so a rare large value cannot throw the scale (and is
        not clipped to bias it down).
        """
        state = self.state
        accept_prob = float(draw.accept_prob)
        state.tune_steps += 1
        self._windows.record(
            draw.state, accept_prob, draw.log_density, draw.gradient, draw.population,
            tuned=draw.component not in INDEPENDENT_COMPONENTS,
        )
        if not self._tuning_ended:  # vanishing adaptation after tuning adapts too
            self.blocks.record(draw.state, draw.log_density)
        if self.independence.enabled and draw.proposal is not None:
            if draw.component == "scan":  # no jump to compare, but its evaluation is one to fit to
                self.independence.record_evaluation(draw.proposal, draw.proposal_log_density)
            else:
                self.independence.record_move(state, draw, accept_prob)
        if draw.component == "scan":
            state.scan.adapt(accept_prob, draw.start, draw.proposal, draw.state)
        elif draw.component == "kameleon":
            _bounded_update(state.nu2, accept_prob)
            state.set_kameleon_scales()
        elif draw.component in INDEPENDENT_COMPONENTS:
            pass  # no scale: the component's spread is the learned covariance's (or the map's)
        else:
            _bounded_update(state.am_scale, accept_prob)
        if state.tune_steps < self._windows.end and not self._whitening_is_off():
            return False
        self.window_ended_early = state.tune_steps < self._windows.end
        return self._end_window(rng)

    def end_tuning(self, rng, end_window: bool = True) -> bool:
        r"""Tuning is over: end the scan or the window it ended in. Returns whether the whitening changed.

        - **Inside the coordinate scan:** a frozen scan would move one coordinate for ever (the
          scan advances its coordinate as it adapts). Instead the chain continues with Adaptive
          Metropolis moves in the scan's diagonal whitening, its step sizes alone (the identity if no
          tuning step was taken), so every coordinate moves. The spread of a cut-short scan's states
          is not used: with pooled tuning it is the chains' spread on their way in (1e4 times the
          posterior's variance, every chain frozen after tuning, in a new user's 9-d model).
        - **Inside a window** that holds at least half as many draws as the previous window, and
          if ``end_window``: the window ends now (:meth:`_end_partial_window`), so that its draws
          are not wasted.
        - **Early in a window** (fewer draws than half the previous window's): the window changes
          nothing. The scales :math:`\lambda` and :math:`\nu^2` return to their values at the window's
          start and the independence component keeps the last window's verdict (and bar for the
          exam). The scales learn afresh at each window start, from a gain of :math:`\rho_0`: a few
          dozen steps later they are noise, and so is a verdict on a few dozen moves. GP-DA-MH tuned
          75 steps past its default (3-d regression, 2 chains) sampled with :math:`\lambda` 1.2-1.4
          times the window's and the component voted off, acceptance 0.12 against 0.47.
        """
        state = self.state
        self._tuning_ended = True
        if state.phase != "scan":
            if self._window_too_short_to_end():
                self._restore_log_scales(self._window_start_scales)
                return False
            changed = end_window and self._end_partial_window(rng)
            self.independence.freeze(state)
            return changed
        state.scan_steps = state.tune_steps
        return state.tune_steps > 0 and self._end_window(rng, scan_cut_short=True)

    def examine_independence(self, log_density, rng) -> int:
        """After :meth:`end_tuning`, the independence component's exam: the shapes the draws would use,
        re-estimated at the last window's end, judged on draws of their own evaluated by
        ``log_density`` (:meth:`~pymc_kameleon.core.adaptation.independence.IndependenceTuning.exam`),
        paired with the chain's last tuning states. Returns the evaluations made."""
        states, values = self._windows.recent, self._windows.recent_log_density
        return self.independence.exam(self.state, log_density, states, values, rng)

    def probe_due(self, rng) -> bool:
        """Whether this tuning step should also evaluate the target at an independent draw and pass it to
        :meth:`record_probe`
        (:meth:`~pymc_kameleon.core.adaptation.independence.IndependenceTuning.probe_due`)."""
        windows = self._windows
        length = windows.end - self.state.tune_steps + len(windows.accept)
        return self.independence.probe_due(self.state, windows.index, rng, length)

    @property
    def probe_fitted(self) -> bool:
        """Whether the probe due draws from the fitted shape
        (:attr:`~pymc_kameleon.core.adaptation.independence.IndependenceTuning.probe_fitted`)."""
        return self.independence.probe_fitted

    def record_probe(self, start, start_log_density: float, point, point_log_density: float) -> None:
        """A probe's evaluation
        (:meth:`~pymc_kameleon.core.adaptation.independence.IndependenceTuning.record_probe`)."""
        self.independence.record_probe(self.state, start, start_log_density, point, point_log_density)

    @property
    def independence_weight(self) -> float:
        r""":math:`\iota_{max}`, the independence component's weight when on."""
        return self.independence.weight

    @property
    def independence_decisions(self) -> list:
        """Every window's verdict on the independence component
        (:class:`~pymc_kameleon.core.adaptation.independence.IndependenceDecision`)."""
        return self.independence.decisions

    def _end_partial_window(self, rng) -> bool:
        r"""End the window that tuning ended in, if it holds at least half the previous one's draws.

        The windows double, and a user's ``tune`` does not line up with them: without this, the
        draws since the last window's end would never be used (in 20 dimensions with ``tune=3000``
        the last window ended at step 2050). The scales cannot learn after tuning, so they are
        carried to the new coordinates by the random-walk rule for acceptance (Roberts and
        Rosenthal, 2001: it depends on :math:`\lambda^2 \operatorname{tr}(\Sigma^{-1})` in
        coordinates whitened by the proposal's covariance):

        .. math::
            \lambda_{new}^2 = \lambda^2\, \operatorname{tr}(C_{new}^{-1} C) / d,

        which keeps the acceptance rate if the target's covariance is :math:`C_{new}`. :math:`\nu^2`
        (a variance in whitened units) gets the same factor; but if more than
        :data:`UNCOVERED_LIMIT` of the window's states were beyond 3 bandwidths of every point of
        the previous Z, where the kernel term vanishes and :math:`\nu^2` tuned only
        :math:`\gamma`, it is matched to the new :math:`\lambda` instead (:meth:`_matched_nu2`).
        """
        if self._window_too_short_to_end() or self._windows.stuck:
            return False
        state = self.state
        old_chol = state.chol
        uncovered = self._uncovered_fraction()
        if not self._end_window(rng):
            return False
        relative = solve_triangular(state.chol, old_chol, lower=True, check_finite=False)
        factor = float(np.sum(relative**2)) / self.dim  # tr(C_new^-1 C_old) / d
        state.am_scale.rescale(math.sqrt(factor))
        if state.nu2 is not None and state.family is not None:
            if uncovered > UNCOVERED_LIMIT:
                # nu^2 was learned where the kernel term vanished (the states far from the previous Z,
                # say in the walk-in), so it tuned gamma only: matched to lambda, as at the first Z.
                state.nu2.rescale(self._matched_nu2() / state.nu2.value)
            else:
                state.nu2.rescale(factor)
            state.set_kameleon_scales()
        return True

    def _window_too_short_to_end(self) -> bool:
        """Whether the current window holds fewer draws than half the previous one's (a quarter of its
        own planned length): too few to re-estimate anything from when tuning ends in it."""
        windows = self._windows
        ran = len(windows.accept)
        planned = windows.end - (self.state.tune_steps - ran)
        return 4 * ran < planned

    def _log_scales(self) -> tuple:
        r"""The log-scales :math:`(\log\lambda, \log\nu^2)` (None for a :math:`\nu^2` not yet learned)."""
        nu2 = self.state.nu2
        return self.state.am_scale.log_value, None if nu2 is None else nu2.log_value

    def _restore_log_scales(self, log_scales: tuple) -> None:
        state = self.state
        state.am_scale.log_value, log_nu2 = log_scales
        if log_nu2 is not None and state.nu2 is not None and state.family is not None:
            state.nu2.log_value = log_nu2
            state.set_kameleon_scales()

    def _whitening_is_off(self) -> bool:
        """Whether the window's draws say the learned covariance is off (never in the scan)."""
        return self.state.phase != "scan" and self._windows.whitening_is_off(self.state.whitening)

    def _end_window(self, rng, scan_cut_short: bool = False) -> bool:
        """Re-estimate :math:`m, C` and :math:`Z` from this window's draws, then start a longer window.

        Each window starts afresh (Stan's windowed warm-up): a transient from a far start is
        forgotten after the window it falls in. Only the first window after the scan starts from
        the scan, whose step sizes bound each coordinate's variance from below.
        """
        state, windows = self.state, self._windows
        points = windows.draws.points
        after_scan = windows.index == 0 and state.scan_steps > 0
        if after_scan:
            points = points[points.shape[0] // 2 :]
        stuck = not after_scan and windows.stuck
        # The previous estimate (not the scan's identity) tells a persistent correlation from a walk's.
        previous = None if after_scan else state.covariance
        estimate = None if stuck else shrunk_covariance(points, previous)
        if after_scan:
            # The scan's step sizes are about 2.4 conditional sds: a floor for coordinates it barely moved.
            floor = (state.scan.scales / 2.4) ** 2
            var = floor if estimate is None or scan_cut_short else np.maximum(np.diag(estimate[1]), floor)
            # Diagonal: one-coordinate moves say little about correlations.
            estimate = (points.mean(axis=0), np.diag(var))
        floor = windows.variance_floor
        if estimate is not None and floor is not None:
            # Cramér-Rao: no coordinate's variance is below 1 / E[gradient^2] (a collapsed step's window
            # would otherwise shrink C where the chain did not move, and the next window moves less).
            mean, cov = estimate
            cov = cov + np.diag(np.maximum(floor - np.diag(cov), 0.0))
            estimate = (mean, cov)
        changed = estimate is not None and self._set_whitening(*estimate)
        # A first Z when tuning ends would give the draws a Kameleon component whose nu^2 never adapted (a
        # new user's 24-d model at tune=10 000: it drew 45% of the moves, accepting 0.16 against 0.234):
        # the component joins at a window's end within tuning, and tuning that ends first keeps the walk.
        first_at_end = self._tuning_ended and state.nu2 is None
        kameleon_due = not after_scan and self.wants_kameleon and not first_at_end
        self._kameleon_window_ended = self._kameleon_window_ended or kameleon_due
        if changed:
            if kameleon_due:
                self._refresh_kameleon(points, rng)
            # New geometry: the scales learn afresh from their current values (as Stan's warm-up does).
            state.am_scale.restart()
            if state.nu2 is not None:
                state.nu2.restart()
        # The next window is twice as long as this one ran: after a window that ended early (the
        # geometry changed) the schedule does not jump ahead to a window longer than the tuning left.
        self.independence.window_ended(state, after_scan)
        length = len(windows.accept)
        windows.start_next(state.tune_steps + (self.first_window if after_scan else 2 * length))
        self._window_start_scales = self._log_scales()
        return changed

    def _set_whitening(self, mean, cov) -> bool:
        try:
            whitening = Whitening.from_moments(mean, cov)
        except SingularCovarianceError:
            return False
        self.state.whitening = whitening
        self.state.family = None  # redrawn on the new whitened subsample by _refresh_kameleon
        return True

    # ------------------------------------------------------------------ diagnostics
    def report(self) -> TuningReport:
        """Diagnostics at the end of tuning
        (:class:`~pymc_kameleon.core.adaptation.diagnostics.TuningReport`)."""
        state, windows = self.state, self._windows
        uncovered = self._uncovered_fraction()
        recent = state.whiten(np.array(windows.recent)) if windows.recent else None
        drift = math.nan if recent is None else whitened_drift(recent)
        late_drift = math.nan if recent is None else whitened_drift(recent[recent.shape[0] // 2 :])
        recent_log_density = list(windows.recent_log_density)
        climb = log_density_climb(recent_log_density, self.dim)
        late_climb = log_density_climb(recent_log_density[len(recent_log_density) // 2 :], self.dim)
        spread, spread_coordinate, slope, slope_coordinate = math.nan, -1, math.nan, -1
        if windows.recent_gradient and all(g is not None for g in windows.recent_gradient):
            gradients = np.array(windows.recent_gradient)
            kappa = gradient_spread(np.array(windows.recent), gradients)
            if kappa.size and np.all(np.isfinite(kappa)):
                spread_coordinate = int(np.argmin(kappa))
                spread = float(kappa[spread_coordinate])
            # The last half only: a chain that arrived early in the recent states has no slope there.
            steady = gradient_slope(gradients[gradients.shape[0] // 2 :])
            if steady.size and np.any(np.isfinite(steady)):
                slope_coordinate = int(np.nanargmax(steady))
                slope = float(steady[slope_coordinate])
        relative, relative_coordinate = math.nan, -1
        if windows.recent:
            r = relative_spread(np.array(windows.recent))
            if r.size and np.any(np.isfinite(r)):
                relative_coordinate = int(np.nanargmin(r))
                relative = float(r[relative_coordinate])
        return TuningReport(
            state.tune_steps,
            state.phase,
            windows.last_accept_rate,
            self.wants_kameleon and self._kameleon_window_ended,
            uncovered,
            drift,
            climb,
            spread,
            spread_coordinate,
            late_climb,
            late_drift,
            slope,
            slope_coordinate,
            relative,
            relative_coordinate,
        )
