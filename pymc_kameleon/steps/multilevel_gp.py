r"""A Gaussian-process surrogate as a level of :class:`~pymc_kameleon.MLDA` (``[coarse, GPLevel()]``).

A GP level :math:`\ell` sits between a coarse level :math:`\ell - 1` and a finer level :math:`\ell + 1`
(usually the model in context) and learns, during tuning, the finer level's excess over the coarse one,

.. math::
    \delta(x) = \log\pi_{\ell+1}(x) - \log\pi_{\ell-1}(x),

from every point where level :math:`\ell + 1` was evaluated (where level :math:`\ell - 1` is known too:
the point ended a subchain that ran on it). Its density is

.. math::
    \log\pi_\ell(x) = \log\pi_{\ell-1}(x) + \mu_\delta(x),

with :math:`\mu_\delta` the GP's posterior mean (:math:`O(n d)` a point,
:meth:`~pymc_kameleon.core.gp.predict.GPPredictionMixin.point_mean`; no variance is needed), so a
step of level :math:`\ell` accepts the end :math:`y` of a coarse subchain from :math:`x` with
:math:`1 \wedge e^{\mu_\delta(y) - \mu_\delta(x)}` (:class:`~pymc_kameleon.core.multilevel.RelativeLevel`).
Where the GP has no data, :math:`\mu_\delta` tends to its constant mean, which cancels in that ratio:
far from the posterior the level passes the coarse level's proposals on unchanged. A smooth,
state-dependent coarse bias (which the adaptive error model's constant shift cannot correct) is what it
learns.

The GP is each chain's own, trained as GP delayed acceptance trains its GP
(:class:`~pymc_kameleon.core.gp.training.GPTrainingSchedule`: a warm-up of ``initial_points`` values,
hyperparameters fitted by marginal likelihood as the training set doubles, input whitening by the base
proposal's learned covariance, so its length scales are in posterior sds) and **frozen after tuning**,
so every level is a fixed density and the chain is exact. Until the warm-up is over :math:`\mu_\delta = 0`
(the level equals the one below).
"""

from __future__ import annotations

import math

import numpy as np

from pymc_kameleon.core.gp.options import GPTrainingOptions
from pymc_kameleon.core.gp.training import GPTrainingSchedule
from pymc_kameleon.core.multilevel import LevelPoint, RelativeLevel
from pymc_kameleon.core.warning_categories import KameleonWarning

__all__ = ["GPLevel", "MultilevelGPLevels", "SurrogateLevel"]


class GPLevel:
    r"""A GP surrogate level for :class:`~pymc_kameleon.MLDA`, in ``coarse_models`` above a coarse model.

    ``MLDA(coarse_models=[coarse, GPLevel()])`` samples with three levels: the coarse model, the GP
    level (the coarse density times :math:`e^{\mu_\delta}`, :math:`\mu_\delta` the GP's mean of the
    fine-minus-coarse log density) and the model in context. A GP mean costs a fraction of a coarse
    solve, so its level filters the coarse subchains' ends before they cost a fine evaluation. See
    :mod:`pymc_kameleon.steps.multilevel_gp` for the model.

    Parameters
    ----------
    initial_points : int, optional
        Values of the finer level seen before the GP's mean is used; default :math:`\max(10, 2(d+1))`.
    max_points : int, optional
        Most points the GP holds during tuning (it then forgets its older half); default 1000.
    fit_max_points : int, optional
        Latest points used by a hyperparameter fit; default 300.
    hyperparameters : dict, optional
        Fixed ``lengthscales`` (in the base proposal's whitened coordinates once learned),
        ``signal_variance``, ``noise_variance`` or ``mean`` instead of fitted ones. The noise variance is
        fitted by default: the difference the GP learns is rough where the coarse model's solver error
        is, and depends on other steps' variables in a ``CompoundStep``; ``noise_variance=0`` fits it as
        an exact function (the GP then chases any roughness).
    jitter : float, default 1e-8
        Relative nugget on the GP's covariance diagonal.

    Notes
    -----
    The level's statistics are those of any coarse level: ``level{k}_logp_evals`` (GP means computed,
    each with the level below's value reused), ``level{k}_accept_rate`` and
    ``level{k}_subchain_length``. ``MLDA.gp_levels`` holds the last chain's trained GPs.
    """

    def __init__(self, *, initial_points=None, max_points=None, fit_max_points=None, hyperparameters=None,
                 jitter: float = 1e-8):
        self.initial_points = initial_points
        self.max_points = max_points
        self.fit_max_points = fit_max_points
        self.hyperparameters = hyperparameters
        self.jitter = jitter
        # The options that do not depend on the dimension are checked now (hyperparameters' shapes at MLDA).
        self._validated(1, hyperparameters=None)

    def options(self, dim: int) -> GPTrainingOptions:
        """The validated GP options for ``dim`` parameters (a ValueError names a bad one)."""
        return self._validated(dim, self.hyperparameters)

    def _validated(self, dim: int, hyperparameters) -> GPTrainingOptions:
        try:
            return GPTrainingOptions.from_user(
                dim,
                gradients=False,
                # The difference it learns is rough as a function of MLDA's variables where a coarse solver's
                # error is (adaptive steps) or where it depends on other steps' variables too: fitted as
                # noise-free, the GP chases it. A noise variance the user fixed is kept.
                noisy_likelihood="noise_variance" not in (hyperparameters or {}),
                initial_points=self.initial_points,
                max_points=self.max_points,
                fit_max_points=self.fit_max_points,
                hyperparameters=hyperparameters,
                jitter=self.jitter,
                gp_after_tuning="freeze",
            )
        except ValueError as error:
            raise ValueError(f"GPLevel: {error}") from None

    def __repr__(self):
        return "GPLevel()"


class SurrogateLevel(RelativeLevel):
    r"""One chain's GP level at position ``level``: the correction :math:`\mu_\delta(x)` and its training.

    Parameters
    ----------
    level : int
        Its index among the levels (at least 1, below the finest).
    options : GPTrainingOptions
    warn : callable
        ``warn(message, category, stacklevel)`` for the training schedule's warnings.
    """

    def __init__(self, level: int, options: GPTrainingOptions, warn=None):
        super().__init__(self._correction)
        self.level = level
        self.schedule = GPTrainingSchedule(options, warn)
        self.n_evals = 0  # corrections computed (the level's evaluations)
        self._pending = []  # (x, delta, finer value) recorded during a step, learned after it
        self._finer = {}  # x.tobytes() -> the finer level's value there, for the points learned
        self._mean = None  # (schedule version, the GP's point_mean at that version)

    @property
    def gp(self):
        return self.schedule.gp

    @property
    def ready(self) -> bool:
        """Whether the GP's mean is in use (its warm-up is over)."""
        return not self.schedule.warm

    def _correction(self, x) -> float:
        self.n_evals += 1
        if self.schedule.warm:
            return 0.0
        if self._mean is None or self._mean[0] != self.schedule.version:
            self._mean = (self.schedule.version, self.gp.point_mean())
        return self._mean[1](x)

    def record(self, point: LevelPoint) -> None:
        r"""``point`` has level ``level + 1``'s value (and those below): remember :math:`\delta` there."""
        finer = point.at(self.level + 1)
        delta = finer - point.at(self.level - 1)
        if math.isfinite(delta):
            self._pending.append((np.array(point.x, dtype=float, copy=True), delta, finer))

    def learn(self, adaptation, whitening_changed: bool = False) -> bool:
        """After a step in tuning: add the recorded values and follow the schedule (warm-up end, fits), then,
        if an adaptation window ended with a new whitening, move to it and refit. Returns whether the
        correction changed."""
        changed = False
        for x, delta, finer in self._pending:
            if self.schedule.add(x, delta, tune=True):
                self._finer[x.tobytes()] = finer
                changed = True
                self.schedule.after_exact_evaluation(
                    tune=True,
                    scanning=adaptation.phase == "scan",
                    window=adaptation.window,
                    typical_step=adaptation.state.typical_scale,
                )
        self._pending.clear()
        if whitening_changed:
            # Not the GP-DA schedule's window end, which forgets the points from before the previous
            # window: the windows count coarsest-level steps here, several per fine evaluation, so it
            # would leave the GP a handful of points.
            self.schedule.set_whitening(adaptation.state.whitening)
            if self.ready:
                self.schedule.fit()
            changed = True
        return changed and self.ready

    def relearn(self, below) -> None:
        r"""The level below changed (the adaptive error model's update): :math:`\delta` again at the GP's
        points, with ``below(x)`` the new :math:`\log\pi_{\ell-1}(x)` (one evaluation each; the GP's
        factor is kept, :meth:`~pymc_kameleon.core.gp.surrogate.GPSurrogate.replace_values`). Values
        recorded against an older correction contradict each other (a new user's trial: the GP's mean
        then had no correlation with the remaining difference, and the level cost 5-10 times the ESS)."""
        schedule = self.schedule
        points = schedule.gp.X
        if not len(points):
            return
        self._finer = {x.tobytes(): self._finer[x.tobytes()] for x in points}
        delta = np.array([self._finer[x.tobytes()] - below(x) for x in points])
        finite = np.isfinite(delta)
        schedule.best_ll = float(delta[finite].max()) if finite.any() else schedule.best_ll
        floor = schedule.floor
        schedule.gp.replace_values(np.where(finite & (delta > floor), delta, floor))
        schedule.version += 1

    def end_tuning(self, adaptation) -> None:
        """Freeze: a last fit if the training set grew by a quarter, in the final whitening."""
        self._pending.clear()
        if self.ready:
            self.schedule.set_whitening(adaptation.state.whitening)
            self.schedule.end_tuning()


class MultilevelGPLevels:
    """How :class:`~pymc_kameleon.MLDA` feeds, updates and freezes its chain's GP levels (a mixin: it
    reads the step's chain state, coarse levels and random stream)."""

    def _record_for_gp(self, level: int, point: LevelPoint) -> None:
        """A level was evaluated at a subchain's end (tuning): the GP level below it records its excess."""
        gp_level = self._chain.gp_levels.get(level - 1)
        if gp_level is not None:
            gp_level.record(point)

    def _learn_gp_levels(self) -> bool:
        """After a step in tuning: the GP levels learn what they recorded (and the whitening, if an
        adaptation window ended with a new one in the step); whether a correction changed."""
        chain = self._chain
        changed = False
        for gp_level in chain.gp_levels.values():
            changed |= gp_level.learn(chain.adaptation, chain.whitening_changed)
        chain.whitening_changed = False
        return changed

    def _warn_from_gp(self, message, category, stacklevel) -> None:
        """A GP level's training warning, through the chain's warnings (read when it warns)."""
        self._warnings.warn(f"MLDA: the GP level: {message}", category, stacklevel=stacklevel)

    def _relearn_gp_levels(self) -> None:
        """The error model changed the coarse densities: each GP level relearns its differences."""
        for k, gp_level in self._chain.gp_levels.items():
            gp_level.relearn(self._coarse_levels[k - 1].log_density)

    def _freeze_gp_levels(self) -> None:
        """End of tuning: each GP level's last fit in the final whitening; warn if one never warmed up."""
        chain = self._chain
        for k, gp_level in chain.gp_levels.items():
            gp_level.end_tuning(chain.adaptation)
            if not gp_level.ready:
                needed = gp_level.schedule.options.initial_points
                self._warnings.warn(
                    f"MLDA: the GP level (level {k}) saw {gp_level.gp.n_points} of the {needed} values of "
                    "the level above it that it needs before it corrects anything, so it passes the coarse "
                    f"level's proposals on unchanged (the draws stay exact). Pass more tune to pm.sample, "
                    "or GPLevel(initial_points=...) smaller.",
                    KameleonWarning,
                    stacklevel=3,
                )
        if chain.current is not None:
            chain.current = self._with_gp_levels_updated(chain.current)

    def _with_gp_levels_updated(self, point: LevelPoint) -> LevelPoint:
        """``point`` with its GP levels' log densities recomputed (after their GPs changed)."""
        move = self._chain.move
        for k in sorted(self._chain.gp_levels):
            point = point.with_level(k, move.log_density(k, point))
        return point
