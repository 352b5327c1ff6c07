r"""A window's mean and covariance, shrunk toward the diagonal except where a strong correlation persists.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "shrunk_covariance",
]


# Effective draws per window draw, for the covariance shrinkage (random-walk draws are correlated).
_EFFECTIVE_FRACTION = 0.1
# A window's correlation at least this strong, after one of at least _STRONG_PREVIOUS_CORRELATION in
# the previous window's estimate, is kept unshrunk (shrunk_covariance). Measured (docs/decisions/
# 0010-persistent-strong-correlation-shrinkage.md): an uncentred logistic regression, KAMH min ESS
# 1-25 -> 10-88 of 2000; without the previous window's condition, trending windows of independent
# normals showed 0.93-0.99 and cost GP-DA-MH its ESS there (49 -> 7).
_STRONG_CORRELATION = 0.9
_STRONG_PREVIOUS_CORRELATION = 0.8


def shrunk_covariance(points, previous_cov=None):
    r"""Mean and covariance of a window's draws, shrunk toward the diagonal except where a strong
    correlation persists.

    .. math::
        C_{ij} = f_i f_j \hat C_{ij} \;(i \ne j), \qquad C_{ii} = \hat C_{ii}, \qquad
        f_i = \begin{cases} 1 & \text{$i$ is strongly correlated} \\ \sqrt{w} & \text{otherwise,}\end{cases}
        \qquad w = \frac{n_e}{n_e + d}, \quad n_e = n / 10,

    where :math:`n_e` is a rough effective sample size of correlated random-walk draws. With no
    strong correlation this is :math:`w \hat C + (1 - w) \operatorname{diag}(\hat C)`: the
    diagonal target keeps :math:`C` full rank and in the units of each coordinate. Coordinate
    :math:`i` is strongly correlated if some :math:`j` has :math:`|\hat r_{ij}| \ge 0.9` here and a
    correlation of at least 0.8, of the same sign, in ``previous_cov`` (the previous window's
    estimate): shrinking such a pair by :math:`w` would make the narrow direction of the posterior
    many times too wide (:math:`1 - w|r|` against :math:`1 - |r|`), while one window alone may show a
    strong correlation that is a walk's, not the posterior's. :math:`C` is positive definite: it is
    the Hadamard product of :math:`\hat C` with :math:`f f^\top + \operatorname{diag}(1 - f^2)`, both
    positive semi-definite, the second with a positive diagonal (Schur).

    Returns ``(mean, cov)``, or None if there are fewer than two draws or some coordinate never moved.
    """
    points = np.asarray(points, dtype=float)
    n, d = points.shape
    if n < 2:
        return None
    mean = points.mean(axis=0)
    cov = np.atleast_2d(np.cov(points, rowvar=False))
    diag = np.diag(cov).copy()
    if not (np.all(np.isfinite(cov)) and np.all(diag > 0)):
        return None
    n_eff = _EFFECTIVE_FRACTION * n
    w = n_eff / (n_eff + d)
    shrunk = w * cov
    shrunk[np.diag_indices(d)] += (1.0 - w) * diag
    kept = _persistently_correlated(cov, previous_cov)
    if kept.any():
        # Only pairs with a kept coordinate are recomputed: elsewhere C is bit for bit as without the rule.
        f = np.where(kept, 1.0, np.sqrt(w))
        pairs = np.logical_or.outer(kept, kept) & ~np.eye(d, dtype=bool)
        shrunk[pairs] = (cov * np.outer(f, f))[pairs]
    return mean, shrunk


def _correlation(cov) -> np.ndarray:
    sd = np.sqrt(np.diag(cov))
    corr = cov / np.outer(sd, sd)
    np.fill_diagonal(corr, 0.0)
    return corr


def _persistently_correlated(cov, previous_cov) -> np.ndarray:
    """Coordinates with a partner correlated at least 0.9 in ``cov`` and at least 0.8, of the same
    sign, in ``previous_cov``."""
    if previous_cov is None:
        return np.zeros(cov.shape[0], dtype=bool)
    corr, previous = _correlation(cov), _correlation(previous_cov)
    pairs = (
        (np.abs(corr) >= _STRONG_CORRELATION)
        & (np.abs(previous) >= _STRONG_PREVIOUS_CORRELATION)
        & (np.sign(corr) == np.sign(previous))
    )
    return np.any(pairs, axis=1)
