"""The groundwater-flow inverse problem (issue 46, problem (a)): its solver, its models, and MLDA on it."""

import numpy as np
import pymc as pm
import pytest
from scipy import stats

from pymc_kameleon import MLDA, KameleonMetropolis
from pymc_kameleon.problems.groundwater import (
    DATA_CELLS,
    GROUNDWATER_MODES,
    NOISE_SD,
    GroundwaterHeadsOp,
    groundwater_data,
    groundwater_model,
    log_conductivity,
    log_posterior,
    solve_heads,
)

WELL_S1 = np.repeat(np.linspace(0.1, 0.9, 5), 5)  # the wells' coordinate along the flow


def test_uniform_conductivity_gives_the_linear_head_exactly():
    # theta = 0: k = 1 everywhere, u = 1 - s1 solves the problem, and the scheme is exact for it.
    for cells in (4, 7, 16):
        np.testing.assert_allclose(solve_heads(np.zeros(6), cells), 1.0 - WELL_S1, atol=1e-12)


def test_a_constant_factor_in_the_conductivity_does_not_change_the_heads():
    # Why the constant mode is left out of the expansion: it is not identifiable.
    theta = np.random.default_rng(0).standard_normal(6)
    from pymc_kameleon.problems import groundwater

    k_base = log_conductivity(theta, 10)
    original = groundwater.log_conductivity
    try:
        groundwater.log_conductivity = lambda t, c: original(t, c) + 3.0
        shifted = solve_heads(theta, 10)
    finally:
        groundwater.log_conductivity = original
    assert np.ptp(k_base) > 0.5
    np.testing.assert_allclose(shifted, solve_heads(theta, 10), rtol=1e-10)


def test_heads_obey_the_maximum_principle_and_converge_with_the_grid():
    rng = np.random.default_rng(1)
    for theta in rng.standard_normal((5, 6)) * 1.5:
        fine = solve_heads(theta, DATA_CELLS)
        assert np.all((fine > 0) & (fine < 1))
        errors = [np.abs(solve_heads(theta, cells) - fine).max() for cells in (6, 12, 24, 48)]
        assert all(b < a for a, b in zip(errors, errors[1:])), errors  # finer grids are closer
        assert errors[-1] < 0.1 * errors[0]


def test_coarse_grid_bias_is_comparable_to_the_noise():
    # The setting MLDA's error model is for: an 8-cell grid misses the data grid by a good part of the
    # noise sd at some wells (its posterior is shifted), a 48-cell grid by a hundredth of it.
    theta, _ = groundwater_data()
    truth = solve_heads(theta, DATA_CELLS)
    assert np.abs(solve_heads(theta, 8) - truth).max() > 0.3 * NOISE_SD
    assert np.abs(solve_heads(theta, 48) - truth).max() < 0.05 * NOISE_SD


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="shape"):
        solve_heads(np.zeros(5), 8)
    with pytest.raises(ValueError, match="at least 2"):
        solve_heads(np.zeros(6), 1)


def test_model_log_density_is_the_prior_plus_the_gaussian_likelihood():
    model = groundwater_model(10)
    _, heads = groundwater_data()
    theta = np.linspace(-1, 1, len(GROUNDWATER_MODES))
    expected = stats.norm.logpdf(theta).sum()
    expected += stats.norm.logpdf(heads, solve_heads(theta, 10), NOISE_SD).sum()
    logp = model.compile_logp()({"theta": theta})
    np.testing.assert_allclose(logp, expected, rtol=1e-12)
    # log_posterior is the same density up to its constant.
    other = 0.5 * theta + 0.3
    delta = model.compile_logp()({"theta": other}) - logp
    np.testing.assert_allclose(log_posterior(other, 10) - log_posterior(theta, 10), delta, rtol=1e-10)
    op = GroundwaterHeadsOp(10)
    assert op == GroundwaterHeadsOp(10) and op != GroundwaterHeadsOp(12)  # one compiled Op per grid


def _importance_moments(cells, centre, cov, draws, seed):
    """Mean, variance and the mean's MCSE of the posterior on ``cells`` cells, by importance sampling
    from a t_5 (a wide, heavy-tailed proposal about the given moments); also the importance ESS."""
    proposal = stats.multivariate_t(centre, 2.0 * cov, df=5)
    x = proposal.rvs(size=draws, random_state=np.random.default_rng(seed))
    logw = np.array([log_posterior(t, cells) for t in x]) - proposal.logpdf(x)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    mean = w @ x
    var = w @ (x - mean) ** 2
    mcse = np.sqrt(np.sum(w[:, None] ** 2 * (x - mean) ** 2, axis=0))
    return mean, var, mcse, 1.0 / np.sum(w**2)


@pytest.mark.slow
def test_mlda_with_a_coarse_grid_matches_importance_sampling_of_the_fine_posterior():
    """MLDA (with the error model) on a 12-cell fine grid with a 4-cell coarse one: every mean within
    4 combined MCSE of importance sampling on the 12-cell grid, every sd within 20%. Negative control:
    KameleonMetropolis on the 4-cell model alone (what a sampler of the coarse model targets) fails the
    same check."""
    import arviz as az

    def sample(model, step, tune, min_ess):
        with model:
            idata = pm.sample(draws=1000, tune=tune, chains=2, cores=1, step=step(), random_seed=3,
                              progressbar=False, compute_convergence_checks=False)
        assert az.ess(idata)["theta"].values.min() > min_ess
        mcse = az.mcse(idata, var_names=["theta"])["theta"].values
        return idata.posterior["theta"].values.reshape(-1, 6), mcse

    fine, coarse = groundwater_model(12), groundwater_model(4)
    flat, mcse = sample(fine, lambda: MLDA([coarse], adaptive_error_model=True), 800, 300)
    mean, var, ref_mcse, ess = _importance_moments(12, flat.mean(0), np.cov(flat.T), 3000, 4)
    assert ess > 800
    z = (flat.mean(0) - mean) / np.sqrt(mcse**2 + ref_mcse**2)
    assert np.all(np.abs(z) < 4), z
    np.testing.assert_allclose(flat.std(0), np.sqrt(var), rtol=0.2)
    coarse_flat, coarse_mcse = sample(groundwater_model(4), KameleonMetropolis, 3000, 30)
    z_coarse = (coarse_flat.mean(0) - mean) / np.sqrt(coarse_mcse**2 + ref_mcse**2)
    assert np.abs(z_coarse).max() > 4, z_coarse
