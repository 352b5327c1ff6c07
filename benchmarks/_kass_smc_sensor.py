"""The sensor-network reference of ``kass_smc.py --experiments sensor``, and its mode labels.

Split from ``kass_smc.py`` (which re-exports every name here) under the 500-line rule; notebook 04
reads these names from ``kass_smc`` as before. :func:`sensor_reference` pools random-walk chains
(:func:`random_walk_chains`) and reweights them by importance sampling; :func:`mode_masses` and
:func:`pattern_switches` label draws by the side of the base line each sensor is on.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.cluster.vq import kmeans2
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

from pymc_kameleon import log_mean_exp
from pymc_kameleon.problems.sensor_network import side_of_base_line

__all__ = ["mode_masses", "pattern_switches", "random_walk_chains", "sensor_reference"]


def random_walk_chains(log_density, x0, n_steps: int, rng, burn_in: float = 0.5):
    """Independent random-walk Metropolis chains, all advanced together (vectorised log density).

    The per-chain scale adapts toward acceptance 0.234 during the burn-in (the first half of the
    steps), then stays fixed; the burn-in is discarded. Returns draws of shape (chains, kept, d).
    """
    x = np.array(x0, dtype=float)
    n, d = x.shape
    lp = log_density(x)
    log_scale = np.full(n, math.log(2.38 / math.sqrt(d) * 0.1))
    n_burn = int(burn_in * n_steps)
    kept = []
    for t in range(n_steps):
        prop = x + np.exp(log_scale)[:, None] * rng.standard_normal((n, d))
        lp_prop = log_density(prop)
        alpha = np.exp(np.minimum(0.0, np.nan_to_num(lp_prop - lp, nan=-np.inf)))
        accept = rng.random(n) < alpha
        x[accept], lp[accept] = prop[accept], lp_prop[accept]
        if t < n_burn:
            log_scale += (alpha - 0.234) / math.sqrt(t + 1)
        else:
            kept.append(x.copy())
    return np.stack(kept, axis=1)


def sensor_reference(
    data, seed: int, n_chains: int, n_steps: int, n_importance: int, n_components: int = 40
) -> dict:
    """Reference posterior: pooled random-walk chains, reweighted by importance sampling.

    A mixture of Gaussians (k-means clusters of the pooled draws, covariances inflated by 1.5², and
    a 5% defensive prior component) is the importance distribution; the self-normalised weights give
    the modes their correct masses, the resampled draws are the reference sample, and the mean
    weight estimates log Z.
    """
    rng = np.random.default_rng(seed)
    x0 = data.prior_mean + data.prior_sd * rng.standard_normal((n_chains, data.dim))
    pooled = random_walk_chains(data.log_posterior, x0, n_steps, rng).reshape(-1, data.dim)
    thin = pooled[rng.choice(pooled.shape[0], size=min(50_000, pooled.shape[0]), replace=False)]
    centres, labels = kmeans2(thin, n_components, seed=rng, minit="++")
    comps, weights = [], []
    for k in range(n_components):
        pts = thin[labels == k]
        if pts.shape[0] > data.dim + 1:
            comps.append(
                multivariate_normal(pts.mean(axis=0), 1.5**2 * np.cov(pts.T) + 1e-8 * np.eye(data.dim))
            )
            weights.append(pts.shape[0])
    weights = 0.95 * np.array(weights) / np.sum(weights)
    prior = multivariate_normal(np.full(data.dim, data.prior_mean), data.prior_sd**2 * np.eye(data.dim))
    comps.append(prior)
    weights = np.append(weights, 0.05)
    which = rng.choice(len(comps), size=n_importance, p=weights)
    draws = np.concatenate([comps[k].rvs(size=int(np.sum(which == k)), random_state=rng).reshape(-1, data.dim)
                            for k in range(len(comps))])
    log_q = logsumexp(np.stack([np.log(w) + c.logpdf(draws) for w, c in zip(weights, comps)]), axis=0)
    log_w = data.log_posterior(draws) - log_q
    w = np.exp(log_w - logsumexp(log_w))
    sample = draws[rng.choice(draws.shape[0], size=5000, p=w)]
    return dict(
        sample=sample,
        draws=draws,
        weights=w,
        log_z=float(log_mean_exp(log_w)),
        ess=float(1.0 / np.sum(w**2)),
        pooled=pooled,
        n_chains=n_chains,
        n_steps=n_steps,
        n_components=len(comps),
    )


def mode_masses(data, samples, weights=None) -> dict:
    """Mass of each reflection pattern (side of the base line per sensor), e.g. 'LRL'."""
    sides = side_of_base_line(data, samples)
    labels = np.array(["".join("L" if s else "R" for s in row) for row in sides.reshape(-1, data.n_sensors)])
    weights = np.full(labels.size, 1.0 / labels.size) if weights is None else np.asarray(weights)
    return {lab: float(weights[labels == lab].sum()) for lab in sorted(set(labels))}


def pattern_switches(data, chain) -> int:
    """How often a chain's reflection pattern changes from one draw to the next."""
    sides = side_of_base_line(data, chain).reshape(chain.shape[0], -1)
    return int(np.sum(np.any(sides[1:] != sides[:-1], axis=1)))
