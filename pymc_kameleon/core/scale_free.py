r"""Scale-free Kameleon: the Kameleon proposal in coordinates whitened by a learned covariance.

Everything a user's choice of units could change is defined relative to a covariance
:math:`C = L L^\top` and mean :math:`m` learned from the chain: with whitened coordinates
:math:`w = L^{-1}(x - m)` the proposal is

.. math::
    q(x \mid y) = |L|^{-1}\Big[(1 - \rho)\,
                  \mathcal N\big(w_x;\ w_y,\ \gamma^2 I + \nu^2 M_{w_y} H M_{w_y}^\top\big)
                  + \rho\, \mathcal N\big(w_x;\ w_y,\ \lambda^2 I\big)\Big],

a mixture of the Kameleon proposal built on the whitened subsample :math:`Z_w = L^{-1}(Z - m)`
(bandwidth and :math:`\gamma` in whitened units) and the Adaptive Metropolis (AM) random walk
:math:`\mathcal N(y, \lambda^2 C)`. The AM component is the fallback where the kernel carries no
information (far from :math:`Z`, or where the RKHS term degenerates in high dimension); both
Hastings terms are the full mixture density, so the chain is exact. Sampling :math:`x` and
:math:`A x + b` gives the same chain after mapping back (affine equivariance), up to the
floating-point rounding of the whitening.

Tuning (:meth:`ScaleFreeKameleon.adapt`), in the spirit of Stan's windowed warm-up:

1. **Coordinate scan** (``scan_steps`` steps): one coordinate moves per step, each with its own
   step size learned toward acceptance 0.44 (the one-dimensional optimum). It finds every
   coordinate's scale, from 1e-4 to 1e4, in a few dozen moves each.
2. **Windows** of doubling length (``first_window``, then twice that, ...; each window is twice as
   long as the previous one ran, so after one that ended early the doubling starts again from its
   length). At the end of each
   window, :math:`m` and :math:`C` are re-estimated from *that window's draws only* (the walk in
   from a far start is forgotten), shrunk toward their diagonal, and :math:`Z` is redrawn from
   the same draws. The first window runs AM alone; the Kameleon component starts after it.
   When the step passes the log density's gradient (GP-DA MALA), no coordinate's learned variance
   falls below the window's Cramér-Rao bound :math:`1 / \overline{(\partial_i \log\pi)^2}`.
3. At every step, :math:`\log\lambda` (on AM moves) and :math:`\log\nu^2` (on Kameleon moves)
   follow Robbins-Monro toward the target acceptance rate.

After tuning everything is frozen, so the chain is an exact Metropolis-Hastings chain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular

from pymc_kameleon.core.adaptation.covariance import shrunk_covariance
from pymc_kameleon.core.adaptation.diagnostics import gradient_spread, log_density_climb, whitened_drift
from pymc_kameleon.core.adaptation.scales import RobbinsMonro
from pymc_kameleon.core.adaptation.scan import MAX_LOG_STEP, SCAN_TARGET, CoordinateScan, scan_steps_for
from pymc_kameleon.core.adaptation.whitening import WhitenedCoordinates, Whitening
from pymc_kameleon.core.adaptation.windows import DRIFT_STATES, AdaptationWindow
from pymc_kameleon.core.kameleon.family import check_subsample_size, fit_proposal, matched_nu2
from pymc_kameleon.core.kameleon.moves import KameleonMoves
from pymc_kameleon.core.kameleon.whitened import WhitenedFamily
from pymc_kameleon.core.linalg import SingularCovarianceError, same_array
from pymc_kameleon.core.proposals import Move, Proposal, mixture_log_density

__all__ = [
    "DRIFT_STATES",
    "SCAN_TARGET",
    "ScaleFreeKameleon",
    "TuningReport",
    "WhitenedFamily",
    "Whitening",
    "scan_steps_for",
    "shrunk_covariance",
    "whitened_drift",
]

_LOG_2PI = math.log(2.0 * math.pi)
# More than this fraction of the last tuning states beyond 3 bandwidths of every point of Z is
# reported at the end of tuning, and means that nu^2 was tuned where the kernel term vanished.
UNCOVERED_LIMIT = 0.1


def _bounded_update(rm: RobbinsMonro, signal: float) -> None:
    """Robbins-Monro step with the signal capped so that the log-scale moves by at most 0.5."""
    gain = rm.learning_rate * (rm.t + 1) ** (-rm.decay)
    rm.update(min(signal, rm.target + MAX_LOG_STEP / gain))


@dataclass(frozen=True)
class TuningReport:
    r"""What tuning achieved, for the step's end-of-tuning warnings.

    Attributes
    ----------
    tune_steps : int
        Tuning steps taken.
    phase : str
        ``"scan"``, ``"adaptive_metropolis"`` or ``"kameleon"`` at the end of tuning.
    accept_rate : float
        Mean acceptance probability over the last window of tuning, or over its last
        ``first_window`` steps if that window had fewer (NaN if none).
    wants_kameleon : bool
        Whether the proposal would use Kameleon moves once tuned.
    uncovered : float
        Fraction of the last window's states farther than 3 bandwidths (whitened) from every
        point of :math:`Z`, where the Kameleon term vanishes (NaN before the first :math:`Z`).
    drift : float
        Root mean square, over whitened coordinates, of the shift between the means of the first
        and second halves of the last (up to 1000) tuning states: about 0.5 or less for a chain
        that has settled, far above 1 for one still walking toward the posterior (NaN with fewer
        than 200 states).
    climb : float
        The rise of the log density between the same two halves, in units of :math:`\sqrt{d/2}`
        (:func:`~pymc_kameleon.core.adaptation.diagnostics.log_density_climb`; NaN if the step gave no log
        densities).
    late_climb : float
        The same rise between the two halves of the *last half* of those states (NaN with fewer
        than 400): near 0 for a chain that arrived early in them, whose ``climb`` counts its arrival.
    late_drift : float
        ``drift`` over the last half of those states (NaN with fewer than 400), in the same
        whitened coordinates: small for a chain that arrived early in them.
    spread : float
        The smallest, over coordinates, sd of the same states times the root mean square of the log
        density's gradient there (:func:`~pymc_kameleon.core.adaptation.diagnostics.gradient_spread`):
        at least about 1 for a chain that explores its target, far below for one stuck in some
        coordinate (NaN if the step gave no gradients).
    spread_coordinate : int
        The coordinate where ``spread`` is smallest (-1 if ``spread`` is NaN).
    """

    tune_steps: int
    phase: str
    accept_rate: float
    wants_kameleon: bool
    uncovered: float
    drift: float = math.nan
    climb: float = math.nan
    spread: float = math.nan
    spread_coordinate: int = -1
    late_climb: float = math.nan
    late_drift: float = math.nan


class ScaleFreeKameleon(WhitenedCoordinates, Proposal):
    r"""The scale-free, windowed Kameleon proposal with an Adaptive Metropolis fallback.

    Parameters
    ----------
    dim : int
        Dimension :math:`d`.
    kernel : kernel object
        Template kernel (:func:`pymc_kameleon.core.kameleon.kernels.make_kernel`); the linear kernel gives
        a pure Adaptive Metropolis chain.
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
    am_weight : float
        Mixture weight :math:`\rho \in [0, 1]` of the AM component once Kameleon moves start.
    scan_steps : int, optional
        Length of the coordinate scan (default :func:`scan_steps_for`).
    history_size : int
        Most window draws kept (evenly thinned beyond that).
    on_jitter : callable, optional
        Called when a Kameleon covariance needed jitter or could not be factorised.
    """

    def __init__(
        self,
        dim: int,
        kernel,
        *,
        bandwidth="median",
        gamma="auto",
        n_subsample: int = 1000,
        nu2: float | None = None,
        target_accept: float = 0.234,
        learning_rate: float = 1.0,
        first_window: int = 100,
        am_weight: float = 0.1,
        scan_steps: int | None = None,
        history_size: int = 10_000,
        initial_scan_scale: float = 1.0,
        on_jitter=None,
    ):

        self.dim = d = int(dim)
        if am_weight < 1:  # the Kameleon component is used
            check_subsample_size(n_subsample, d)
        self.kernel = kernel
        self.bandwidth_spec = bandwidth
        self.gamma_spec = gamma
        self.n_subsample = int(n_subsample)
        self.nu2_initial = None if nu2 is None else float(nu2)
        self.target_accept = float(target_accept)
        self.learning_rate = float(learning_rate)
        self.first_window = max(int(first_window), 2)
        self.am_weight = float(am_weight)
        self.scan_steps = scan_steps_for(d) if scan_steps is None else int(scan_steps)
        self.on_jitter = on_jitter
        self.whitening = Whitening.identity(d)
        self.scan = CoordinateScan(d, initial_scan_scale, self.learning_rate)
        self.am_scale = RobbinsMonro(2.38 / math.sqrt(d), self.target_accept, self.learning_rate)
        self.nu2 = None  # RobbinsMonro once the Kameleon component exists
        self.moves: KameleonMoves | None = None  # in whitened coordinates
        self.bandwidth = math.nan
        self.gamma = math.nan
        self._probe_variance = math.nan
        self._gamma_ratio = None  # gamma^2 / nu^2 when gamma="auto"
        self._current_white = None  # (model point, its whitened coordinates) of the last accepted move
        self.tune_steps = 0
        # Whether the last adaptation window ended before its scheduled end because its draws
        # disagreed with the learned covariance (a chain still walking in, or one that settled
        # into a region much smaller than C).
        self.window_ended_early = False
        first_end = self.scan_steps if self.scan_steps > 0 else self.first_window
        self._windows = AdaptationWindow(d, history_size, self.first_window, first_end)
        self.last_component = "scan" if self.scan_steps > 0 else "adaptive_metropolis"

    # ------------------------------------------------------------------ state
    @property
    def phase(self) -> str:
        """``"scan"``, ``"adaptive_metropolis"`` (AM only) or ``"kameleon"`` (the mixture)."""
        if self.tune_steps < self.scan_steps:
            return "scan"
        return "adaptive_metropolis" if self.moves is None else "kameleon"

    @property
    def window(self) -> int:
        """Adaptation windows completed (the scan counts as the first)."""
        return self._windows.index

    @property
    def scan_scales(self) -> np.ndarray:
        """Per-coordinate step sizes of the coordinate scan."""
        return self.scan.scales

    @property
    def wants_kameleon(self) -> bool:
        """Whether Kameleon moves are part of the mixture (``am_weight < 1``)."""
        return self.am_weight < 1.0

    @property
    def typical_scale(self) -> float:
        """Root mean proposal variance per coordinate, in the model's units (for GP length-scale defaults)."""
        if self.phase == "scan":
            return float(self.scan.scales.mean())
        return self.am_scale.value * math.sqrt(float(np.sum(self.chol**2)) / self.dim)

    @property
    def family(self):
        """The Kameleon family on whitened :math:`Z_w` (None before the first window ends)."""
        return None if self.moves is None else self.moves.family

    @property
    def subsample(self) -> np.ndarray | None:
        """:math:`Z` in the model's coordinates (None before the first window ends)."""
        return None if self.moves is None else self.to_model(self.moves.family.Z)

    @property
    def model_family(self) -> WhitenedFamily | None:
        """The Kameleon component in the model's coordinates (None before the first window ends)."""
        return None if self.moves is None else WhitenedFamily(self.moves.family, self.whitening)

    @property
    def kernel_variance(self) -> float:
        r""":math:`\nu^2 \bar v`: the kernel term's average variance per whitened coordinate at :math:`Z`
        (NaN before the first Kameleon proposal). It, not :math:`\nu^2`, is what carries over to a new
        :math:`Z` (see :meth:`_refresh_kameleon`)."""
        return math.nan if self.nu2 is None else self.nu2.value * self._probe_variance

    # ------------------------------------------------------------------ moves
    def _am_log_density(self, w_to, w_from) -> float:
        r = (w_to - w_from) / self.am_scale.value
        return -0.5 * self.dim * _LOG_2PI - self.dim * math.log(self.am_scale.value) - 0.5 * float(r @ r)

    def propose(self, y, rng) -> Move:
        if self.phase == "scan":
            self.last_component = "scan"
            return self.scan.propose(y, rng)
        cur = self._current_white
        # The accepted proposal's own whitened coordinates (whitening the model point again would
        # differ in the last bits and miss the Kameleon cache at the current state).
        w_y = cur[1] if cur is not None and same_array(cur[0], y) else self.whiten(y)
        if self.moves is None:
            self.last_component = "adaptive_metropolis"
            return Move(self.to_model(w_y + self.am_scale.value * rng.standard_normal(self.dim)))
        at_y = self.moves.at_current(w_y)
        if rng.random() < self.am_weight:
            self.last_component = "adaptive_metropolis"
            w_x = w_y + self.am_scale.value * rng.standard_normal(self.dim)
        else:
            self.last_component = "kameleon"
            w_x = at_y.sample(rng)
        at_x, rkhs_x = self.moves.factor_at(w_x)
        x = self.to_model(w_x)
        log_q_forward = self._mixture(at_y.log_density(w_x), w_x, w_y)
        if at_x is None:
            return Move(x, log_q_forward, math.nan, None, at_y.jitter)
        log_q_reverse = self._mixture(at_x.log_density(w_y), w_y, w_x)
        return Move(x, log_q_forward, log_q_reverse, self.moves.cache_entry(w_x, at_x, rkhs_x), at_y.jitter)

    def _mixture(self, log_kameleon, w_to, w_from) -> float:
        """Log mixture density in model coordinates (the Jacobian :math:`-\\log|L|` included)."""
        rho = self.am_weight
        if rho <= 0.0:
            return log_kameleon - self.whitening.log_det
        log_am = self._am_log_density(w_to, w_from)
        if rho >= 1.0:
            return log_am - self.whitening.log_det
        return float(mixture_log_density(log_kameleon, log_am, rho)) - self.whitening.log_det

    def accept(self, move: Move) -> None:
        if move.cache is not None and self.moves is not None:
            self.moves.accept(move)
            self._current_white = (np.array(move.x, copy=True), move.cache[2])

    def log_density(self, x, y) -> float:
        r""":math:`\log q(x \mid y)` of the proposal in its current phase."""
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        if self.phase == "scan":
            return self.scan.log_density(x, y)
        w_x, w_y = self.whiten(x), self.whiten(y)
        if self.moves is None:
            return self._am_log_density(w_x, w_y) - self.whitening.log_det
        return self._mixture(self.moves.family.at(w_y).log_density(w_x), w_x, w_y)

    # ------------------------------------------------------------------ adaptation
    def adapt(
        self,
        y_new,
        accept_prob: float,
        rng,
        component: str | None = None,
        log_density: float = math.nan,
        gradient=None,
    ) -> bool:
        """One tuning step after the decision; returns whether :math:`m`, :math:`C` and :math:`Z` changed.

        ``accept_prob`` is the acceptance probability of the step's move, or an unbiased estimate
        of it (delayed acceptance, where it can exceed 1); one step moves a log-scale by at most
        0.5, so a rare large value cannot throw the scale (and is not clipped to bias it down).
        ``component`` is the scale the move used: ``"scan"``, ``"kameleon"`` (:math:`\\nu^2`) or
        ``"adaptive_metropolis"`` (:math:`\\lambda`, also for any other move whose covariance is
        :math:`\\lambda^2 C`, such as GP-DA MALA's Langevin move); default: the last :meth:`propose`'s.
        ``log_density`` is the target's log density at ``y_new``, for the end-of-tuning climb check
        (the steps pass its exact part: a pseudo-marginal log-estimate's slow wandering is not a climb),
        and ``gradient`` its gradient there (if the step has it), for the gradient-spread check.
        """
        accept_prob = float(accept_prob)
        self.tune_steps += 1
        self._windows.record(y_new, accept_prob, log_density, gradient)
        if component is None:
            component = self.last_component
        if component == "scan":
            self.scan.adapt(accept_prob, y_new)
        elif component == "kameleon":
            _bounded_update(self.nu2, accept_prob)
            self._set_kameleon_scales()
        else:
            _bounded_update(self.am_scale, accept_prob)
        if self.tune_steps < self._windows.end and not self._whitening_is_off():
            return False
        self.window_ended_early = self.tune_steps < self._windows.end
        return self._end_window(rng)

    def end_tuning(self, rng, end_window: bool = True) -> bool:
        r"""Tuning is over: end the scan or the window it ended in. Returns whether the whitening changed.

        - **Inside the coordinate scan:** a frozen scan would move one coordinate for ever (the
          scan advances its coordinate as it adapts). Instead the chain continues with Adaptive
          Metropolis moves in the scan's diagonal whitening (the identity if no tuning step was
          taken), so every coordinate moves.
        - **Inside a window** that holds at least half as many draws as the previous window, and
          if ``end_window``: the window ends now (:meth:`_end_partial_window`), so that its draws
          are not wasted.
        """
        if self.phase != "scan":
            return end_window and self._end_partial_window(rng)
        self.scan_steps = self.tune_steps
        self.last_component = "adaptive_metropolis"
        return self.tune_steps > 0 and self._end_window(rng)

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
        windows = self._windows
        ran = len(windows.accept)
        planned = windows.end - (self.tune_steps - ran)
        if 4 * ran < planned or windows.stuck:
            return False
        old_chol = self.chol
        uncovered = self._uncovered_fraction()
        if not self._end_window(rng):
            return False
        relative = solve_triangular(self.chol, old_chol, lower=True, check_finite=False)
        factor = float(np.sum(relative**2)) / self.dim  # tr(C_new^-1 C_old) / d
        self.am_scale.rescale(math.sqrt(factor))
        if self.nu2 is not None and self.moves is not None:
            if uncovered > UNCOVERED_LIMIT:
                # nu^2 was learned where the kernel term vanished (the states far from the previous Z,
                # say in the walk-in), so it tuned gamma only: matched to lambda, as at the first Z.
                self.nu2.rescale(self._matched_nu2() / self.nu2.value)
            else:
                self.nu2.rescale(factor)
            self._set_kameleon_scales()
        return True

    def _uncovered_fraction(self) -> float:
        """Fraction of the window's (last 500) states beyond 3 bandwidths (whitened) of every point of
        Z, where the Kameleon term vanishes (NaN before the first Z or with no draws)."""
        windows = self._windows
        if self.moves is None or not math.isfinite(self.bandwidth) or len(windows.draws) == 0:
            return math.nan
        W = self.whiten(windows.draws.points[-500:])
        Zw = self.moves.family.Z
        sq = (W * W).sum(1)[:, None] - 2.0 * W @ Zw.T + (Zw * Zw).sum(1)[None, :]
        nearest = np.sqrt(np.maximum(sq.min(axis=1), 0.0))
        return float(np.mean(nearest > 3.0 * self.bandwidth))

    def _matched_nu2(self) -> float:
        r""":math:`\nu^2` whose Kameleon component has the AM step's average variance :math:`\lambda^2`
        per whitened coordinate at Z (:func:`~pymc_kameleon.core.kameleon.family.matched_nu2`).

        With ``gamma="auto"``, :math:`\gamma^2 = r \nu^2 \bar v` is tied to :math:`\nu^2`, so
        :math:`\nu^2 \bar v (1 + r) = \lambda^2`.
        """
        s2 = self.am_scale.value**2
        if self._gamma_ratio is not None:
            return s2 / (self._probe_variance * (1.0 + self._gamma_ratio))
        return matched_nu2(s2, self.gamma, self._probe_variance)

    def _whitening_is_off(self) -> bool:
        """Whether the window's draws say the learned covariance is off (never in the scan)."""
        return self.phase != "scan" and self._windows.whitening_is_off(self.whitening)

    def _end_window(self, rng) -> bool:
        """Re-estimate :math:`m, C` and :math:`Z` from this window's draws, then start a longer window.

        Each window starts afresh (Stan's windowed warm-up): a transient from a far start is
        forgotten after the window it falls in. Only the first window after the scan starts from
        the scan, whose step sizes bound each coordinate's variance from below.
        """
        windows = self._windows
        points = windows.draws.points
        after_scan = windows.index == 0 and self.scan_steps > 0
        if after_scan:
            points = points[points.shape[0] // 2 :]
        stuck = not after_scan and windows.stuck
        # The previous estimate (not the scan's identity) tells a persistent correlation from a walk's.
        previous = None if after_scan else self.covariance
        estimate = None if stuck else shrunk_covariance(points, previous)
        if after_scan:
            # The scan's step sizes are about 2.4 conditional sds: a floor for coordinates it barely moved.
            floor = (self.scan.scales / 2.4) ** 2
            var = floor if estimate is None else np.maximum(np.diag(estimate[1]), floor)
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
        if changed:
            if not after_scan:
                self._refresh_kameleon(points, rng)
            # New geometry: the scales learn afresh from their current values (as Stan's warm-up does).
            self.am_scale.restart()
            if self.nu2 is not None:
                self.nu2.restart()
        # The next window is twice as long as this one ran: after a window that ended early (the
        # geometry changed) the schedule does not jump ahead to a window longer than the tuning left.
        length = len(windows.accept)
        windows.start_next(self.tune_steps + (self.first_window if after_scan else 2 * length))
        return changed

    def _set_kameleon_scales(self) -> None:
        """:math:`\\gamma^2` is a fixed fraction of the kernel term's average variance
        :math:`\\nu^2 \\bar v` at Z."""
        gamma2 = (
            None if self._gamma_ratio is None else self._gamma_ratio * self.nu2.value * self._probe_variance
        )
        self.moves.set_nu2(self.nu2.value, gamma2)
        self.gamma = math.sqrt(self.moves.family.gamma2)

    def _set_whitening(self, mean, cov) -> bool:
        try:
            self.whitening = Whitening.from_moments(mean, cov)
        except SingularCovarianceError:
            return False
        self._current_white = None
        if self.moves is not None:
            self.moves = None  # rebuilt on the new whitened subsample by _refresh_kameleon
        return True

    def _refresh_kameleon(self, points, rng) -> None:
        if self.am_weight >= 1.0:
            return
        Z = points
        if Z.shape[0] > self.n_subsample:
            idx = np.sort(rng.choice(Z.shape[0], size=self.n_subsample, replace=False))
            Z = Z[idx]
        probe_nu2 = 1.0 if self.nu2 is None else self.nu2.value
        fit = fit_proposal(self.whiten(Z), self.kernel, self.bandwidth_spec, self.gamma_spec, probe_nu2, rng)
        if fit is None:
            return
        if self.nu2 is None:
            nu2 = self.nu2_initial
            if nu2 is None:
                nu2 = matched_nu2(self.am_scale.value**2, fit.gamma, fit.probe_variance)
            self.nu2 = RobbinsMonro(nu2, self.target_accept, self.learning_rate)
        elif fit.probe_variance > 0 and self._probe_variance > 0:
            self.nu2.rescale(self._probe_variance / fit.probe_variance)
        self._probe_variance = fit.probe_variance
        self.bandwidth = fit.bandwidth
        # With gamma="auto", gamma^2 is tied to nu^2: where the kernel term vanishes (far from Z, or
        # nearly constant weights in high dimension) the component is still a tuned random walk.
        if self.gamma_spec == "auto" and self._gamma_ratio is None:
            self._gamma_ratio = fit.gamma**2 / (self.nu2.value * fit.probe_variance)
        self.moves = KameleonMoves(fit.family, on_jitter=self.on_jitter)
        self._set_kameleon_scales()

    # ------------------------------------------------------------------ diagnostics
    def report(self) -> TuningReport:
        """Diagnostics at the end of tuning (see :class:`TuningReport`)."""
        windows = self._windows
        uncovered = self._uncovered_fraction()
        recent = self.whiten(np.array(windows.recent)) if windows.recent else None
        drift = math.nan if recent is None else whitened_drift(recent)
        late_drift = math.nan if recent is None else whitened_drift(recent[recent.shape[0] // 2 :])
        recent_log_density = list(windows.recent_log_density)
        climb = log_density_climb(recent_log_density, self.dim)
        late_climb = log_density_climb(recent_log_density[len(recent_log_density) // 2 :], self.dim)
        spread, spread_coordinate = math.nan, -1
        if windows.recent_gradient and all(g is not None for g in windows.recent_gradient):
            kappa = gradient_spread(np.array(windows.recent), np.array(windows.recent_gradient))
            if kappa.size and np.all(np.isfinite(kappa)):
                spread_coordinate = int(np.argmin(kappa))
                spread = float(kappa[spread_coordinate])
        return TuningReport(
            self.tune_steps,
            self.phase,
            windows.last_accept_rate,
            self.wants_kameleon,
            uncovered,
            drift,
            climb,
            spread,
            spread_coordinate,
            late_climb,
            late_drift,
        )

    def required_tune_steps(self) -> int:
        """Tuning steps for the scan and three windows (AM, then two Kameleon refreshes)."""
        return self.scan_steps + 7 * self.first_window

