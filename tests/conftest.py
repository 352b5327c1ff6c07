"""Shared test helpers: MCSE-based comparisons of MCMC output with exact answers, small models, and
drivers that run a step by hand or through pm.sample with a seed and compare what two runs recorded."""

import os

# One BLAS thread (the Makefile sets this too; here for a bare `pytest`, where it only helps if
# NumPy is not imported yet): small dense linear algebra is much slower multi-threaded.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import math  # noqa: E402

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

# PyMC and pymc_kameleon are imported inside the helpers that use them: tests/core runs without PyMC.

# ------------------------------------------------------------------ slow tests shared between stacks
# `make test` runs the two stacks side by side on a 2-core machine, and running every slow statistical
# test on both took CI past 30 minutes. There each slow test runs on one stack: these modules' on
# PyMC 5 (the stack `make demo` and the benchmarks use), every other module's on PyMC 6. Every test not
# marked slow (contracts, exact ratios, proposal densities, notebooks, Dask) runs on both, and
# `make test-pymc5` / `make test-pymc6` alone (or a bare `pytest`) run everything.
SLOW_ON_PYMC5 = (
    "tests/steps/test_robustness.py",  # the models people bring
    "tests/test_benchmarks.py",  # the benchmark scripts' quick modes
    "tests/test_kass_benchmark.py",
)


def pytest_addoption(parser):
    parser.addoption(
        "--slow-share",
        choices=("all", "pymc5", "pymc6"),
        default="all",
        help="run all slow tests (default), or only this stack's share of them (see SLOW_ON_PYMC5)",
    )


def _share_of(nodeid):
    return "pymc5" if nodeid.split("::")[0] in SLOW_ON_PYMC5 else "pymc6"


def pytest_configure(config):
    share = config.getoption("--slow-share")
    if share != "all":
        from importlib.metadata import version

        major = version("pymc").split(".")[0]
        if share != f"pymc{major}":
            raise pytest.UsageError(f"--slow-share={share} on PyMC {version('pymc')}: use pymc{major}.")


def pytest_collection_modifyitems(config, items):
    share = config.getoption("--slow-share")
    if share == "all":
        return
    theirs = [it.get_closest_marker("slow") is not None and _share_of(it.nodeid) != share for it in items]
    if any(theirs):
        config.hook.pytest_deselected(items=[it for it, t in zip(items, theirs) if t])
        items[:] = [it for it, t in zip(items, theirs) if not t]


def pytest_report_header(config):
    share = config.getoption("--slow-share")
    if share != "all":
        return f"slow tests: this stack's share only (--slow-share={share}); the other stack runs the rest"

INVARIANCE_QS = (0.25, 0.5, 0.75, 0.9)
SAMPLE_KW = dict(progressbar=False, compute_convergence_checks=False)


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


# ------------------------------------------------------------------------------------ small models
def gaussian_data_model(seed=0, n=30):
    """mu ~ N(0, 10^2 I) in 2-d and n observations y_i ~ N(mu, I): a smooth posterior with gradients, a
    likelihood term (the GP steps need one) and a proper prior (SMC starts from prior draws)."""
    import pymc as pm

    data = np.random.default_rng(seed).normal([0.5, -1.0], 1.0, size=(n, 2))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10, shape=2)
        pm.Normal("y", mu, 1, observed=data)
    return model


# A latent Gaussian model with a known marginal likelihood, for pseudo-marginal samplers:
# z_j ~ N(theta, I), y_j | z_j ~ N(z_j, I), so y_j | theta ~ N(theta, 2I), and with the prior
# theta ~ N(0, I) the posterior is N(sum(y) / (2 + J), I / (1 + J/2)). The likelihood is estimated
# by importance sampling from p(z | theta), deliberately noisily (sd of the log-estimate ~1-1.4).
LATENT_J, LATENT_D = 10, 2
LATENT_Y = np.array([0.5, -0.5]) + math.sqrt(2.0) * np.random.default_rng(2024).normal(
    size=(LATENT_J, LATENT_D)
)
LATENT_POST_MEAN = LATENT_Y.sum(0) / 2 / (1 + LATENT_J / 2)
LATENT_POST_VAR = 1 / (1 + LATENT_J / 2)


def latent_gaussian_log_estimator(n_importance=20):
    from pymc_kameleon import log_mean_exp

    def log_est(*args):
        *thetas, rng = args
        theta = np.hstack([np.ravel(t) for t in thetas])
        z = theta + rng.standard_normal((n_importance, LATENT_J, LATENT_D))  # z ~ p(z | theta)
        log_w = -0.5 * ((LATENT_Y - z) ** 2).sum(-1) - math.log(2 * math.pi)  # log p(y_j | z_j)
        return float(log_mean_exp(log_w, axis=0).sum())

    return log_est


def latent_gaussian_model(split=False, n_importance=20):
    """The latent Gaussian model with a PseudoMarginalPotential "lik" (``theta``, or with ``split`` the
    scalars ``theta0`` and ``theta1`` for two-block CompoundSteps)."""
    import pymc as pm

    from pymc_kameleon import PseudoMarginalPotential

    with pm.Model() as model:
        if split:
            inputs = [pm.Normal("theta0", 0, 1), pm.Normal("theta1", 0, 1)]
        else:
            inputs = [pm.Normal("theta", 0, 1, shape=LATENT_D)]
        PseudoMarginalPotential("lik", latent_gaussian_log_estimator(n_importance), inputs=inputs)
    return model


def latent_gaussian_correlated_model(n_importance=2, correlation=0.9):
    """The latent Gaussian model with a correlated estimator: z = theta + u, u of shape (N, J, D)."""
    import pymc as pm

    from pymc_kameleon import PseudoMarginalPotential, correlated_importance_sampling_estimator

    def log_weight(z, theta):  # log p(y_j | z_j) per importance sample and group: shape (N, J)
        return -0.5 * ((LATENT_Y - z) ** 2).sum(-1) - math.log(2 * math.pi)

    estimator = correlated_importance_sampling_estimator(
        log_weight, lambda u, theta: theta + u, n_importance, latent_shape=(LATENT_J, LATENT_D)
    )
    with pm.Model() as model:
        theta = pm.Normal("theta", 0, 1, shape=LATENT_D)
        PseudoMarginalPotential("lik", estimator, inputs=[theta], correlation=correlation)
    return model


def latent_gaussian_z_scores(draws):
    """|error| / MCSE for the exact posterior mean and variance of each coordinate of theta."""
    scores = {}
    for j in range(draws.shape[-1]):
        x = draws[..., j]
        scores[f"mean_{j}"] = abs(x.mean() - LATENT_POST_MEAN[j]) / _mcse_of_mean(x)
        sq = (x - LATENT_POST_MEAN[j]) ** 2
        scores[f"var_{j}"] = abs(sq.mean() - LATENT_POST_VAR) / _mcse_of_mean(sq)
    return scores


# ------------------------------------------------------------------------ runs and their records
def sample_with_seed(model, step, seed, *, tune, draws, chains=2, cores=1, **kwargs):
    """pm.sample(step=step, random_seed=seed) on ``model``, without progress bar or convergence checks."""
    import pymc as pm

    with model:
        return pm.sample(
            step=step, tune=tune, draws=draws, chains=chains, cores=cores, random_seed=seed,
            **SAMPLE_KW, **kwargs,
        )


RECORDED_GROUPS = ("posterior", "sample_stats", "warmup_posterior", "warmup_sample_stats")


def recorded(idata) -> dict:
    """Every draw and statistic a pm.sample run kept, as arrays by "group/name" (ArviZ 0.x and 1.x)."""
    out = {}
    for group in RECORDED_GROUPS:
        data = getattr(idata, group, None)
        if data is not None:
            out.update({f"{group}/{name}": np.asarray(var.values) for name, var in data.data_vars.items()})
    return out


def assert_same_records(a: dict, b: dict):
    """Equal names and equal arrays (NaN equals NaN)."""
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# Per-chain set-up of a step as each PyMC calls it before a chain (and a negative control):
CHAIN_HOOKS = {
    # PyMC 5 (cores=1): the chain's generator, then reset_tuning(). (PyMC 6 steps have no set_rng.)
    "reset_tuning": lambda step, rng, tune: (_set_rng(step, rng), step.reset_tuning()),
    # PyMC 6: setup_chain(rng, tune, draws), alone here (pm.sample calls reset_tuning after it too).
    "setup_chain": lambda step, rng, tune: step.setup_chain(rng, tune, 0),
    # PyMC 5's worker processes: set_rng alone (our steps reset there too).
    "set_rng": lambda step, rng, tune: _set_rng(step, rng),
    # Negative control: a new generator and nothing else (no hook of ours runs).
    "rng_only": lambda step, rng, tune: setattr(step, "rng", rng),
}


def _set_rng(step, rng):
    if hasattr(step, "set_rng"):
        step.set_rng(rng)
    else:
        step.rng = rng  # what PyMC 6's BlockedStep.setup_chain does


def start_chain(step, seed, hook="setup_chain", tune=1):
    """Prepare ``step`` for a chain with ``np.random.default_rng(seed)``, as pm.sample does."""
    step.tune = bool(tune)
    CHAIN_HOOKS[hook](step, np.random.default_rng(seed), tune)


def run_steps(step, point, n_steps, stop_tuning_at=None):
    """Take ``n_steps`` steps from ``point`` by hand; returns the last point and a record of the draws and
    statistics, one row per step, by name (as :func:`recorded`)."""
    draws, stats = [], []
    for i in range(n_steps):
        if i == stop_tuning_at:
            step.stop_tuning()
        point, step_stats = step.step(point)
        draws.append({name: np.array(value, copy=True) for name, value in point.items()})
        stats.append(step_stats[0])
    record = {f"draw/{name}": np.array([d[name] for d in draws]) for name in draws[0]}
    record.update({f"stat/{name}": np.array([s[name] for s in stats]) for name in stats[0]})
    return point, record
