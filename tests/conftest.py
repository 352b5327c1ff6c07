"""Shared statistical helpers: MCSE-based comparisons of MCMC output with exact answers."""

import os

# One BLAS thread (the Makefile sets this too; here for a bare `pytest`, where it only helps if
# NumPy is not imported yet): small dense linear algebra is much slower multi-threaded.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

INVARIANCE_QS = (0.25, 0.5, 0.75, 0.9)


def _mcse_of_mean(values):
    """MCSE of the mean of a (chain, draw) array, from ArviZ's ESS (works with ArviZ 0.x and 1.x)."""
    values = np.atleast_2d(np.asarray(values, dtype=float))
    try:
        return float(az.mcse(values, method="mean"))  # ArviZ 1 takes (chain, draw) arrays
    except TypeError:
        dataset = az.convert_to_dataset({"v": values})  # ArviZ 0.x wants a dataset
        return float(az.mcse(dataset, method="mean")["v"])


def invariance_z_scores(draws, target, qs=INVARIANCE_QS):
    """Standardised errors |estimate - exact| / MCSE for HDR coverages and coordinate means.

    ``draws`` has shape (chain, draw, dim). Every statistic is a posterior mean, so its
    Monte Carlo standard error comes from ArviZ's ESS, which accounts for autocorrelation.
    """
    draws = np.asarray(draws, dtype=float)
    flat = draws.reshape(-1, draws.shape[-1])
    out = {}
    for q in qs:
        inside = target.in_hdr(flat, q).reshape(draws.shape[:2]).astype(float)
        out[f"coverage_{q}"] = abs(inside.mean() - q) / max(_mcse_of_mean(inside), 1e-12)
    exact_mean = target.exact_mean
    for j in range(draws.shape[-1]):
        est = draws[..., j]
        out[f"mean_{j}"] = abs(est.mean() - exact_mean[j]) / max(_mcse_of_mean(est), 1e-12)
    return out


@pytest.fixture
def z_scores():
    return invariance_z_scores
