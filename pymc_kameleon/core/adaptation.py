r"""Adaptation pieces: Robbins-Monro scale learning, a bounded history, schedules.

Exactness rests on one of the two conditions of Roberts & Rosenthal (2007) that
the KAMH paper uses:

* ``"freeze"`` (default): adapt only during tuning, then freeze everything. The
  chain after tuning is a plain Metropolis-Hastings chain with a fixed proposal
  family, so it is exact (the paper's KAMH-LS).
* ``"vanishing"``: after tuning keep adapting, but only with probability
  :math:`p_t = \min(1, t^{-\kappa})`, :math:`0 < \kappa \le 1`, so that
  :math:`p_t \to 0` and :math:`\sum_t p_t = \infty`.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["HistoryBuffer", "RobbinsMonro", "VanishingProbability"]


class RobbinsMonro:
    r"""Stochastic approximation of a log-scale toward a target acceptance rate.

    .. math::
        \log s_{t+1} = \log s_t + \rho_t\,(\alpha_t - \alpha^*),
        \qquad \rho_t = \rho_0\,(t + 1)^{-\kappa},

    where :math:`\alpha_t` is the acceptance *probability* of step :math:`t`
    (Andrieu & Thoms 2008, Algorithm 4). Using the probability rather than the
    0/1 outcome lowers the variance of the update.

    Parameters
    ----------
    initial : float
        Starting value :math:`s_0 > 0` (not its log).
    target : float
        Target acceptance rate :math:`\alpha^* \in (0, 1)`.
    learning_rate : float
        :math:`\rho_0 > 0`.
    decay : float
        :math:`\kappa \in (0.5, 1]`, so the gains are square-summable but not summable.
    """

    def __init__(self, initial: float, target: float = 0.234, learning_rate: float = 1.0, decay: float = 0.6):
        if not (np.isfinite(initial) and initial > 0):
            raise ValueError(f"initial scale must be positive and finite, got {initial!r}.")
        self.log_value = math.log(initial)
        self.target = float(target)
        self.learning_rate = float(learning_rate)
        self.decay = float(decay)
        self.t = 0

    @property
    def value(self) -> float:
        return math.exp(self.log_value)

    def update(self, accept_prob: float) -> float:
        """Move toward the target after seeing one acceptance probability; returns the new value."""
        gain = self.learning_rate * (self.t + 1) ** (-self.decay)
        self.log_value += gain * (float(accept_prob) - self.target)
        # Guard against runaway scales on pathological targets.
        self.log_value = min(max(self.log_value, -700.0), 700.0)
        self.t += 1
        return self.value

    def restart(self) -> None:
        """Restart the gain sequence at :math:`\\rho_0` (keeping the value), e.g. after the geometry
        changed."""
        self.t = 0

    def rescale(self, factor: float) -> None:
        """Multiply the current value by ``factor`` without touching the gain sequence."""
        if factor > 0 and np.isfinite(factor):
            self.log_value += math.log(factor)


class VanishingProbability:
    r"""Adaptation probabilities :math:`p_t = \min(1, t^{-\kappa})`, :math:`0 < \kappa \le 1`.

    They satisfy :math:`p_t \to 0` and :math:`\sum_t p_t = \infty`, the paper's
    condition for an ergodic adaptive chain.
    """

    def __init__(self, decay: float = 1.0):
        if not (0.0 < decay <= 1.0):
            raise ValueError(f"vanishing decay must be in (0, 1] so that sum p_t diverges, got {decay!r}.")
        self.decay = float(decay)

    def __call__(self, t: int) -> float:
        return min(1.0, float(max(t, 1)) ** (-self.decay))


class HistoryBuffer:
    r"""Bounded, evenly thinned record of a chain's history.

    Points are kept with a stride that doubles whenever the buffer fills: the
    buffer then drops every other stored point. It therefore always holds points
    evenly spaced over the whole history, at most ``capacity`` of them, with
    amortised :math:`O(d)` cost per step. :meth:`subsample` draws the Kameleon
    subsample :math:`Z` from the later part of the history, leaving out the
    transient at the start of tuning.

    Parameters
    ----------
    dim : int
        Dimension of the points.
    capacity : int
        Maximal number of stored points (at least 2).
    """

    def __init__(self, dim: int, capacity: int):
        if capacity < 2:
            raise ValueError(f"history capacity must be at least 2, got {capacity!r}.")
        self.dim = int(dim)
        self.capacity = int(capacity)
        self._points = np.empty((self.capacity, self.dim))
        self._size = 0
        self.stride = 1
        self.n_seen = 0

    def __len__(self) -> int:
        return self._size

    def clear(self) -> None:
        self._size = 0
        self.stride = 1
        self.n_seen = 0

    def append(self, x) -> None:
        if self.n_seen % self.stride == 0:
            if self._size == self.capacity:
                kept = self._points[: self._size : 2]
                self._size = kept.shape[0]
                self._points[: self._size] = kept
                self.stride *= 2
            if self.n_seen % self.stride == 0:
                self._points[self._size] = x
                self._size += 1
        self.n_seen += 1

    @property
    def points(self) -> np.ndarray:
        """Stored points, oldest first (a view; do not modify)."""
        return self._points[: self._size]

    def subsample(self, n: int, rng: np.random.Generator, discard_fraction: float = 0.5) -> np.ndarray:
        """Uniform subsample without replacement of at most ``n`` stored points.

        Parameters
        ----------
        n : int
            Subsample size.
        rng : numpy.random.Generator
        discard_fraction : float
            Leading fraction of the (time-ordered) history that is left out.
        """
        start = int(discard_fraction * self._size)
        pool = self._points[start : self._size]
        if pool.shape[0] <= n:
            return pool.copy()
        idx = rng.choice(pool.shape[0], size=n, replace=False)
        idx.sort()
        return pool[idx].copy()
