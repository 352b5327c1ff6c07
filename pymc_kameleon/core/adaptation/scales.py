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

__all__ = [
    "RobbinsMonro",
    "VanishingProbability",
]


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
            raise ValueError(f"vanishing_decay must be in (0, 1] so that sum p_t diverges, got {decay!r}.")
        self.decay = float(decay)

    def __call__(self, t: int) -> float:
        return min(1.0, float(max(t, 1)) ** (-self.decay))
