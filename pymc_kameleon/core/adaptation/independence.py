r"""Tuning's measure of the independence component: is it on, with which shape, and why (decision
records 0038 and 0039).

The tuned proposal (:class:`~pymc_kameleon.core.kameleon.scale_free.ScaleFreeProposal`) may draw a
share :math:`\iota` of its moves independently from a Student-t :math:`t_\nu`. Its *shape* is the
learned mean and covariance :math:`m, C`, or, once tuning has evaluated the target at enough points,
the Gaussian fitted to those log densities (:mod:`~pymc_kameleon.core.adaptation.gaussian_fit`,
``ScaleFreeState.independence_fit``). :class:`IndependenceTuning` decides, per chain and per window,
whether the component is on (``ScaleFreeState.independence_weight`` :math:`\in \{0, \iota_{max}\}`)
and with which shape (``ScaleFreeState.independence_uses_fit``). Each shape is *measured before it is
used*: while the component is off, a share :data:`INDEPENDENCE_PROBE` of the tuning steps (more in
short windows, for a step without the exam: ``probes_per_shape``) also evaluates the target at one draw
of a shape without moving (a *probe*; the shapes take turns); while
it is on, its own moves measure its shape, and probes at the same rate measure the other one. At each
window's end the component is on for the next window, with the shape that jumped further (the fitted
one only by a margin, :data:`FIT_MARGIN`), if in this window that shape's draws

(a) jumped, or would have jumped, further than the walk's moves, by the expected squared jump
    distance in whitened units, :math:`\overline{\min(1, \alpha)\, \lVert w_x - w_y \rVert^2}`
    (Pasarica and Gelman 2010; for a probe :math:`\alpha = \min(1, w(x') / w(y))`, the independence
    sampler's, with :math:`w = \pi / q`), and
(b) had importance weights whose Pareto :math:`\hat k` is at most :data:`INDEPENDENCE_MAX_KHAT`
    (above it the Student-t misses a region the target holds, such as a funnel's neck, where a chain
    that enters sticks).

Both shapes are then re-estimated for the next window (the learned one from the window's draws, the
fitted one from the latest evaluations). So the shapes a chain has when tuning ends were re-estimated
at the last window's end and never measured; a step that can evaluate the target there gives them an
*exam* (:meth:`IndependenceTuning.exam`): :data:`EXAM_DRAWS` independent draws of each shape, judged
by the same rule against the last window's walk, decide the component for the draws. Without the exam
the component stays as the last window left it.
Without a fit (above :data:`~pymc_kameleon.core.adaptation.gaussian_fit.FIT_MAX_DIM` dimensions, or
before there are enough evaluations) only the learned shape is probed, as before 0039.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from pymc_kameleon.core.adaptation.diagnostics import pareto_tail_index
from pymc_kameleon.core.adaptation.gaussian_fit import EvaluatedPoints, fit_gaussian
from pymc_kameleon.core.adaptation.state import ScaleFreeState, TuningDraw
from pymc_kameleon.core.kameleon.scale_free import INDEPENDENCE_DF, independence_log_density
from pymc_kameleon.core.linalg import solve_lower
from pymc_kameleon.core.proposals import standard_t_draw
from pymc_kameleon.core.validation import check_independence_weight

__all__ = [
    "BOOSTED_FROM",
    "EXAM_DRAWS",
    "INDEPENDENCE_MAX_KHAT",
    "INDEPENDENCE_PROBE",
    "PROBE_CAP",
    "IndependenceDecision",
    "IndependenceTuning",
]

#: Share of the tuning steps that evaluate the target at an independent draw (without moving) while
#: the independence component is off, to measure whether it would pay.
INDEPENDENCE_PROBE = 0.1
# Fewer moves than this of either kind in a window leave the independence weight as it was.
_MIN_JUMPS = 20
#: Largest share of a window's tuning steps that probe, where ``probes_per_shape`` raises the share.
PROBE_CAP = 0.5
#: The first window (counted from the scan's end, 1 the first) whose rate ``probes_per_shape`` raises:
#: the one the minimum tuning ends with. Earlier windows, often a chain's walk in, keep the fixed rate.
BOOSTED_FROM = 3
#: Where both shapes pass, the fitted one is used only if its draws jumped this many times further than
#: the learned one's: near ties are noise, and on the lynx-hare ODE, where they went to the fitted shape
#: (7.6-7.9 against 7.0-7.7), min ESS fell from 4548 to 3529 (decision record 0039).
FIT_MARGIN = 1.25
#: Pareto k-hat of the independent draws' importance weights above which the component is not used:
#: the Student-t misses a region the target holds (a funnel's neck), where a chain would stick.
INDEPENDENCE_MAX_KHAT = 0.7
#: Independent draws of each shape evaluated by the exam at the end of tuning: k-hat from 20 tail
#: weights, where a window's 40-50 probes give 8-10. On the 17-d mixed-scale regression (seed 2027) the
#: fits a chain has when tuning ends have k-hat 0.05-0.21 from 4000 draws, yet 50 draws put them above
#: 0.7 in 0-4% of samples, and the window's verdict had judged the previous fit (k-hat 0.83 from 51
#: probes): that chain sampled with the walk alone (decision record 0046).
EXAM_DRAWS = 100


class IndependenceDecision(NamedTuple):
    r"""One window's verdict on one shape of the independence component
    (:attr:`IndependenceTuning.decisions`, also ``ScaleFreeAdaptation.independence_decisions``).

    Attributes
    ----------
    tune_step : int
        The tuning step at which the window ended (or tuning did).
    independent_jump, walk_jump : float
        Mean expected squared jump (whitened) of the window's independent draws (probes or moves)
        and of its walk moves.
    khat : float
        Pareto :math:`\hat k` of the independent draws' importance weights (NaN: too few finite, or
        not computed because the draws did not jump further than the walk, so that the shape lost
        whatever its :math:`\hat k`).
    draws : int
        Independent draws (probes or moves) in the window.
    on : bool
        Whether the component is on with this shape after the verdict.
    fitted : bool
        Whether this shape is the fitted Gaussian (else the learned :math:`m, C`).
    exam : bool
        Whether this is the end-of-tuning exam's verdict (:meth:`IndependenceTuning.exam`), whose
        draws were evaluated for it, paired with the chain's last tuning states.
    """

    tune_step: int
    independent_jump: float
    walk_jump: float
    khat: float
    draws: int
    on: bool
    fitted: bool = False
    exam: bool = False


class IndependenceTuning:
    r"""Whether the independence component is on, and with which shape, measured window by window
    (module docstring).

    Parameters
    ----------
    weight : float
        :math:`\iota_{max} \in [0, 1)`, the component's weight when on; 0 never turns it on and draws
        no uniform for it.
    dim : int
        The state's dimension (of the evaluations kept for the fitted shape).
    probes_per_shape : int, optional
        Probes each shape measured should get in a window from the :data:`BOOSTED_FROM`-th on: a
        window of :math:`n` steps probes at the rate :math:`\max(` :data:`INDEPENDENCE_PROBE`
        :math:`, \min(` :data:`PROBE_CAP` :math:`, s \cdot` ``probes_per_shape`` :math:`/ n))`,
        :math:`s` the shapes probed. For a step without the exam, whose windows' verdicts are all it
        has: at the rate alone the third window (400 steps) gives each of two shapes 20 probes, fewer
        than the 25 :func:`pareto_tail_index` needs, and tuning of PyMC 5's default length ends in
        the next one. None: the rate alone (decision record 0065).

    Attributes
    ----------
    decisions : list of IndependenceDecision
        Every window's verdict on each shape it measured, in order.
    """

    def __init__(self, weight: float, dim: int, probes_per_shape: int | None = None):
        check_independence_weight(weight)
        self.weight = float(weight)
        self.probes_per_shape = probes_per_shape
        # Per window: [sum of min(1, alpha) |w_x - w_y|^2, draws] of the learned shape's independent
        # draws, the fitted shape's, and the walk's moves.
        self._jumps = np.zeros((3, 2))
        self._log_weights = ([], [])  # per shape: log pi - log q of its independent draws
        # The evaluations the fitted shape is fitted to (read and written only when enabled).
        self._evaluated = EvaluatedPoints(dim) if self.enabled else None
        self._probes = 0  # probes so far: while off, the shapes take turns
        self._probe_fitted = False  # the shape of the probe due
        self._walk_jump = None  # the walk's mean jump in the last window with enough moves (the exam's bar)
        self.decisions = []

    @property
    def enabled(self) -> bool:
        """Whether the component can ever be on."""
        return self.weight > 0.0

    def record_move(self, state: ScaleFreeState, draw: TuningDraw, accept_prob: float) -> None:
        r"""Add a move's expected squared jump, :math:`\min(1, \alpha) \lVert w_x - w_y \rVert^2`, an
        independent move's importance weight, and the evaluation to those a shape is fitted to."""
        if not math.isfinite(accept_prob) or draw.start is None:
            return
        step = solve_lower(state.chol, draw.proposal - draw.start)  # BLAS dtrsv: a statistic, not a draw
        independent = draw.component == "independence"
        row = int(state.independence_uses_fit) if independent else 2
        self._jumps[row] += (min(accept_prob, 1.0) * float(step @ step), 1.0)
        self.record_evaluation(draw.proposal, draw.proposal_log_density)
        if independent:
            fitted = state.independence_uses_fit
            log_q = independence_log_density(state, state.whiten(draw.proposal), fitted)
            self._log_weights[fitted].append(draw.proposal_log_density - log_q)

    def record_evaluation(self, x, log_density: float) -> None:
        """A point at which tuning evaluated the target, for the fitted shape."""
        self._evaluated.add(x, log_density)

    def probe_due(self, state: ScaleFreeState, windows_completed: int, rng, window_length: int = 0) -> bool:
        """Whether this tuning step should also evaluate the target at an independent draw, of the shape
        :attr:`probe_fitted`: with probability :data:`INDEPENDENCE_PROBE` (or more in a short window of
        ``window_length`` steps, with ``probes_per_shape``), from the first window after the scan,
        while the component is off (the shapes take turns) or, with a fit, while it is on (the shape
        it does not use). No uniform is drawn otherwise."""
        if not self.enabled or state.phase == "scan" or windows_completed < 1:
            return False
        has_fit = state.independence_fit is not None
        on = state.independence_weight > 0.0
        if on and not has_fit:
            return False
        rate = INDEPENDENCE_PROBE
        if self.probes_per_shape is not None and window_length > 0 and windows_completed >= BOOSTED_FROM:
            shapes = 2 if has_fit and not on else 1
            rate = max(rate, min(PROBE_CAP, shapes * self.probes_per_shape / window_length))
        if not rng.random() < rate:
            return False
        if on:
            self._probe_fitted = not state.independence_uses_fit
        else:
            self._probe_fitted = has_fit and self._probes % 2 == 1
        self._probes += 1
        return True

    @property
    def probe_fitted(self) -> bool:
        """Whether the probe due draws from the fitted shape (else the learned one)."""
        return self._probe_fitted

    def record_probe(self, state: ScaleFreeState, start, start_log_density: float, point,
                     point_log_density: float) -> None:
        r"""An independent draw ``point`` of the shape :attr:`probe_fitted`, evaluated but not proposed:
        its importance weight, and the jump it would have made from ``start``,
        :math:`\min(1, w(x') / w(y)) \lVert w_{x'} - w_y \rVert^2` with :math:`w = \pi / q` (the
        independence sampler's acceptance probability)."""
        fitted = self._probe_fitted
        self.record_evaluation(point, point_log_density)
        jump, log_weight = _independent_jump(
            state, fitted, state.whiten(point), point_log_density, state.whiten(start), start_log_density
        )
        self._jumps[int(fitted)] += (jump, 1.0)
        self._log_weights[fitted].append(log_weight)

    def verdict(self, tune_step: int) -> tuple[bool, bool] | None:
        """``(on, fitted)``: whether some shape's independent draws jumped (or would have jumped) further
        on average than the window's walk moves, with importance weights whose tail is light enough,
        and whether the fitted one is used: it passes and the learned one does not, or it jumped
        :data:`FIT_MARGIN` times further. None if no shape had
        ``_MIN_JUMPS`` draws (or the walk too few moves). Each shape judged is recorded in
        :attr:`decisions`."""
        walk_sum, walk_n = self._jumps[2]
        if walk_n < _MIN_JUMPS:
            return None
        walk_jump = self._walk_jump = walk_sum / walk_n
        judged = {}
        for fitted in (False, True):
            ind_sum, ind_n = self._jumps[int(fitted)]
            if ind_n >= _MIN_JUMPS:
                jump = ind_sum / ind_n
                khat = _khat_if_it_counts(self._log_weights[fitted], jump, walk_jump)
                judged[fitted] = (jump, khat, int(ind_n))
        return self._choose(judged, walk_jump, tune_step, exam=False)

    def _choose(self, judged: dict, walk_jump: float, tune_step: int, exam: bool) -> tuple[bool, bool] | None:
        """The verdict's rule (:meth:`verdict`) on ``judged``, shape (fitted?) -> (mean jump, k-hat,
        draws); records each shape's decision."""
        if not judged:
            return None
        # NaN k-hat too fails: weights that cannot be judged (infinite, or too few finite).
        winners = {
            fitted: jump for fitted, (jump, khat, _) in judged.items()
            if khat <= INDEPENDENCE_MAX_KHAT and jump > walk_jump
        }
        best = None
        if True in winners and (False not in winners or winners[True] > FIT_MARGIN * winners[False]):
            best = True
        elif False in winners:
            best = False
        for fitted, (jump, khat, n) in judged.items():
            decision = IndependenceDecision(tune_step, jump, walk_jump, khat, n, fitted == best, fitted, exam)
            self.decisions.append(decision)
        return (False, False) if best is None else (True, best)

    def exam(self, state: ScaleFreeState, log_density, recent, recent_log_density, rng) -> int:
        r"""At the end of tuning, after the last window's end: judge the shapes the draws would use.

        Draws :data:`EXAM_DRAWS` points of each shape (the learned one, and the fitted one if there is
        a fit), evaluates ``log_density`` there, and pairs them with as many of ``recent`` (the chain's
        last tuning states, evenly spaced, with their log densities ``recent_log_density``) as the
        starts: a draw's jump is the independence sampler's
        :math:`\min(1, w(x') / w(y)) \lVert w_{x'} - w_y \rVert^2` from its start, as a probe's.
        The verdict's rule (jump beyond the last window's walk, :math:`\hat k \le`
        :data:`INDEPENDENCE_MAX_KHAT`, :data:`FIT_MARGIN`) then sets the component. Nothing is done
        (and 0 returned) when the component is disabled, tuning ended in the scan, no window had
        enough walk moves to set the bar, or there are no recent states.

        Parameters
        ----------
        state : ScaleFreeState
            The chain's state when tuning ended (its shapes and whitening).
        log_density : callable
            ``x -> log pi(x)`` in the model's coordinates.
        recent, recent_log_density : sequences
            The chain's last tuning states (model coordinates) and their log densities.
        rng : numpy.random.Generator
            The exam's own stream (the chain's keeps its state).

        Returns
        -------
        int
            Evaluations of ``log_density`` made.
        """
        starts = len(recent)
        if not self.enabled or state.phase == "scan" or self._walk_jump is None or starts == 0:
            return 0
        picked = np.unique(np.linspace(0, starts - 1, min(starts, EXAM_DRAWS)).round().astype(int))
        w_starts = state.whiten(np.asarray(recent, dtype=float)[picked])
        start_values = np.asarray(recent_log_density, dtype=float)[picked]
        judged = {}
        fit = state.independence_fit
        shapes = (False, True) if fit is not None else (False,)
        for fitted in shapes:
            jumps, log_weights = np.empty(EXAM_DRAWS), np.empty(EXAM_DRAWS)
            for i in range(EXAM_DRAWS):
                w = fit.draw(rng) if fitted else standard_t_draw(state.dim, INDEPENDENCE_DF, rng)
                value = float(log_density(state.to_model(w)))
                j = i % len(picked)
                jumps[i], log_weights[i] = _independent_jump(
                    state, fitted, w, value, w_starts[j], start_values[j]
                )
            jump = float(jumps.mean())
            judged[fitted] = (jump, _khat_if_it_counts(log_weights, jump, self._walk_jump), EXAM_DRAWS)
        self._apply(state, self._choose(judged, self._walk_jump, state.tune_steps, exam=True))
        return EXAM_DRAWS * len(shapes)

    def window_ended(self, state: ScaleFreeState, after_scan: bool) -> None:
        """At a window end, after the new whitening: the component on or off for the next window, and
        its shape, from this window's jumps; then the fitted shape in the new whitening."""
        if not self.enabled:
            return
        if not after_scan:
            self._apply(state, self.verdict(state.tune_steps))
        for row in self._log_weights:
            row.clear()
        self._jumps[:] = 0.0
        evaluated = self._evaluated
        fit = None
        if evaluated.enough:
            fit = fit_gaussian(state.whiten(evaluated.points), evaluated.values, INDEPENDENCE_DF)
        state.independence_fit = fit
        if fit is None and state.independence_uses_fit:
            # The shape that won is gone (no fit now): off, rather than a shape no window measured.
            state.independence_weight, state.independence_uses_fit = 0.0, False

    def freeze(self, state: ScaleFreeState) -> None:
        """At the end of tuning: the component stays on, with its shape, if that shape won the window
        tuning ended in (or, with too few draws there to tell, the last window that could)."""
        if self.enabled:
            self._apply(state, self.verdict(state.tune_steps))

    def _apply(self, state: ScaleFreeState, verdict) -> None:
        if verdict is None:
            return
        on, fitted = verdict
        state.independence_weight = self.weight if on else 0.0
        state.independence_uses_fit = on and fitted


def _khat_if_it_counts(log_weights, jump: float, walk_jump: float) -> float:
    """Pareto k-hat of ``log_weights`` where it can decide the verdict (the draws jumped further than the
    walk's), else NaN: a shape that jumped less loses either way, so its fit (0.3 ms, decision record
    0047; SciPy's generic fit took 10) is not made."""
    return pareto_tail_index(log_weights) if jump > walk_jump else math.nan


def _independent_jump(state: ScaleFreeState, fitted: bool, w_x, point_log_density: float, w_y,
                      start_log_density: float) -> tuple[float, float]:
    r"""An independent draw's jump from a start and its log importance weight: with :math:`w = \pi / q`
    for the shape ``fitted``, :math:`(\min(1, w(x') / w(y)) \lVert w_{x'} - w_y \rVert^2, \log w(x'))`
    (whitened ``w_x``, ``w_y``; a jump of 0 where the weights are not finite)."""
    log_weight = point_log_density - independence_log_density(state, w_x, fitted)
    log_ratio = log_weight - (start_log_density - independence_log_density(state, w_y, fitted))
    finite = math.isfinite(log_weight) and not math.isnan(log_ratio)
    accept = math.exp(min(log_ratio, 0.0)) if finite else 0.0
    d = w_x - w_y
    return accept * float(d @ d), log_weight
