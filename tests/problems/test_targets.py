"""Benchmark targets: log densities, PyMC models, exact draws and exact quantile references."""

import math
import warnings

import numpy as np
import pytest
from scipy import integrate, stats

from pymc_kameleon.problems.targets import (
    DEFAULT_QUANTILES,
    FlowerTarget,
    Target,
    banana,
    correlated_gaussian,
    flower,
    quantile_error,
    ring,
)

# Flowers whose radial truncation r > 0 is far from negligible (a_min = (r0 - A)/sigma = 0.5).
TRUNCATED_2D = dict(dim=2, r0=1.0, A=0.7, omega=3.0, sigma=0.6)
TRUNCATED_3D = dict(dim=3, r0=1.0, A=0.7, omega=3.0, sigma=0.6)

TARGETS = {
    "banana8": lambda: banana(),
    "banana2_strong": lambda: banana(dim=2, b=0.1, v=100.0),
    "flower8": lambda: flower(),
    "flower2": lambda: flower(dim=2),
    "flower2_truncated": lambda: flower(**TRUNCATED_2D),
    "flower3_truncated": lambda: flower(**TRUNCATED_3D),
    "flower2_noninteger_omega": lambda: flower(dim=2, r0=1.0, A=0.5, omega=1.5, sigma=0.5),
    "ring2": lambda: ring(),
    "ring4": lambda: ring(dim=4, radius=3.0, sigma=0.5),
    "gauss2": lambda: correlated_gaussian(),
    "gauss4_scaled": lambda: correlated_gaussian(dim=4, rho=0.5, scales=[1.0, 2.0, 0.5, 3.0]),
}

N_EXACT = 50_000


def binomial_tol(q, m):
    return 4.0 * np.sqrt(q * (1.0 - q) / m)


@pytest.fixture(scope="module")
def exact_draws():
    """Exact draws per target, shared by the tests of this module."""
    cache = {}

    def get(key, n=N_EXACT, seed=None):
        if (key, n) not in cache:
            target = TARGETS[key]()
            seed = sorted(TARGETS).index(key) if seed is None else seed
            cache[key, n] = (target, target.sample(n, rng=np.random.default_rng(1000 + seed)))
        return cache[key, n]

    return get


# ----------------------------------------------------------------------------- log density
@pytest.mark.parametrize("key", sorted(TARGETS))
def test_logp_batches_and_identity(key):
    target = TARGETS[key]()
    assert isinstance(target, Target)
    assert target.name and isinstance(target.params, dict)
    x = target.sample(7, rng=0)
    batch = target.logp(x)
    assert batch.shape == (7,)
    single = target.logp(x[3])
    assert isinstance(single, float)
    assert single == pytest.approx(batch[3], abs=1e-12)
    # logp = -T/2 and the normalised version differs by the log normaliser.
    np.testing.assert_allclose(batch, -0.5 * target.statistic(x), atol=1e-12)
    np.testing.assert_allclose(target.logp(x, normalized=True), batch - target.log_normalizer)
    assert np.isfinite(target.logp(target.initval))
    with pytest.raises(ValueError, match="shape"):
        target.logp(np.zeros(target.dim + 1))


def test_banana_logp_is_the_papers_formula():
    target = banana(dim=3, b=0.1, v=4.0)
    y = target.sample(5, rng=1)
    ref = (
        stats.norm.logpdf(y[:, 0], 0, 2.0)
        + stats.norm.logpdf(y[:, 1], 0.1 * (y[:, 0] ** 2 - 4.0), 1.0)
        + stats.norm.logpdf(y[:, 2])
    )
    np.testing.assert_allclose(target.logp(y, normalized=True), ref, rtol=1e-12)


def test_flower_logp_is_the_reference_formula():
    target = flower(dim=3, r0=10.0, A=6.0, omega=6.0, sigma=2.0)
    x = np.array([[3.0, -4.0, 0.5], [-1.0, 12.0, 2.0]])
    r = np.hypot(x[:, 0], x[:, 1])
    theta = np.arctan2(x[:, 1], x[:, 0])
    ref = -((r - 10.0 - 6.0 * np.cos(6.0 * theta)) ** 2) / (2 * 4.0) - x[:, 2] ** 2 / 2
    np.testing.assert_allclose(target.logp(x), ref, rtol=1e-12)


def test_gaussian_logp_matches_scipy():
    target = correlated_gaussian(dim=3, rho=0.3, scales=[1.0, 2.0, 3.0])
    x = target.sample(5, rng=2)
    cov = np.array([[1, 0.6, 0.9], [0.6, 4, 1.8], [0.9, 1.8, 9]])
    np.testing.assert_allclose(target.exact_cov, cov)
    ref = stats.multivariate_normal(np.zeros(3), cov).logpdf(x)
    np.testing.assert_allclose(target.logp(x, normalized=True), ref, rtol=1e-12)


@pytest.mark.parametrize("key", ["banana8", "flower8", "ring2", "gauss4_scaled"])
def test_pymc_model_matches_numpy_logp_and_has_gradients(key):
    target = TARGETS[key]()
    model = target.model()
    assert [v.name for v in model.free_RVs] == ["x"]
    np.testing.assert_allclose(model.initial_point()["x"], target.initval)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyTensor's BLAS notice
        logp_fn = model.compile_logp()
        dlogp_fn = model.compile_dlogp()
    x = target.sample(6, rng=3)
    diff = np.array([logp_fn({"x": xi}) - target.logp(xi) for xi in x])
    assert np.ptp(diff) < 1e-9  # equal up to one constant (here the constant is 0)
    # Gradient against central differences of the NumPy log density.
    h = 1e-6
    for xi in x[:2]:
        fd = np.array(
            [(target.logp(xi + h * e) - target.logp(xi - h * e)) / (2 * h) for e in np.eye(target.dim)]
        )
        np.testing.assert_allclose(dlogp_fn({"x": xi}), fd, rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(dlogp_fn({"x": target.initval})))


def test_model_is_independent_of_an_enclosing_model():
    import pymc as pm

    with pm.Model() as outer:
        inner = ring().model()
    assert inner is not outer
    assert [v.name for v in inner.free_RVs] == ["x"]
    assert outer.free_RVs == []


# ----------------------------------------------------------------------------- exact references
@pytest.mark.parametrize("key", sorted(TARGETS))
def test_exact_draws_have_exact_coverage_and_mean(key, exact_draws):
    target, x = exact_draws(key)
    m = x.shape[0]
    assert x.shape == (m, target.dim)
    coverage = target.quantile_coverage(x, DEFAULT_QUANTILES)
    tol = binomial_tol(DEFAULT_QUANTILES, m)
    assert np.all(np.abs(coverage - DEFAULT_QUANTILES) < tol), (coverage - DEFAULT_QUANTILES) / tol * 4
    mcse = x.std(axis=0, ddof=1) / math.sqrt(m)
    assert np.all(np.abs(x.mean(axis=0) - target.exact_mean) < 4 * mcse)
    assert target.quantile_error(x) < 4 * math.sqrt(0.25 / m)


@pytest.mark.parametrize("key", sorted(TARGETS))
def test_threshold_inverts_the_cdf(key):
    target = TARGETS[key]()
    for q in (0.05, 0.5, 0.9, 0.99):
        t = target.hdr_threshold(q)
        assert target.statistic_cdf(t) == pytest.approx(q, abs=1e-9)
    assert target.statistic_cdf(0.0) == 0.0


@pytest.mark.parametrize("key", ["banana8", "gauss4_scaled"])
def test_exact_covariance(key, exact_draws):
    target, x = exact_draws(key)
    cov = target.exact_cov
    emp = np.cov(x, rowvar=False)
    # An empirical variance has standard error ~ sqrt(2/m) sigma^2 (Gaussian); banana Y2 has heavier tails.
    sd = np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    assert np.all(np.abs(emp - cov) < 0.05 * sd)


def test_flower_without_rotational_symmetry_has_nonzero_exact_mean():
    target = TARGETS["flower2_noninteger_omega"]()
    assert target.exact_mean[0] > 0.1  # checked against exact draws in test_exact_draws_*
    assert target.exact_mean[1] == 0.0
    assert np.all(flower().exact_mean == 0.0)


def test_flower_statistic_is_chi2_with_d_minus_1_dof_up_to_truncation(exact_draws):
    # The paper's F(10, 6, 6, 1): truncation ~ Phi(-4), invisible at any Monte Carlo precision.
    target, x = exact_draws("flower8")
    assert 0 < target.truncation_mass < 1e-6
    for q in DEFAULT_QUANTILES:
        assert target.hdr_threshold(q) == pytest.approx(stats.chi2.ppf(q, 7), rel=1e-6)
    # chi2 with d (not d - 1) degrees of freedom is wrong by far more than the Monte Carlo error.
    naive_d = np.array([np.mean(target.statistic(x) <= stats.chi2.ppf(q, 8)) for q in DEFAULT_QUANTILES])
    assert np.max(np.abs(naive_d - DEFAULT_QUANTILES)) > 10 * binomial_tol(0.5, x.shape[0])


@pytest.mark.parametrize("key", ["flower2_truncated", "flower3_truncated"])
def test_flower_truncation_is_accounted_for(key, exact_draws):
    target, x = exact_draws(key)
    assert target.truncation_mass > 0.01
    # Ignoring the truncation r > 0 (plain chi2_{d-1} thresholds) is detectably wrong ...
    T = target.statistic(x)
    naive = np.array([np.mean(T <= stats.chi2.ppf(q, target.dim - 1)) for q in DEFAULT_QUANTILES])
    tol = binomial_tol(DEFAULT_QUANTILES, x.shape[0])
    assert np.any(np.abs(naive - DEFAULT_QUANTILES) > 2 * tol)
    # ... while the exact reference is right (see test_exact_draws_have_exact_coverage_and_mean).
    assert np.all(np.abs(target.quantile_coverage(x) - DEFAULT_QUANTILES) < tol)


def _grid_integral(target, lim, n):
    xs = np.linspace(lim[0][0], lim[0][1], n)
    ys = np.linspace(lim[1][0], lim[1][1], n)
    gx, gy = np.meshgrid(xs, ys)
    pts = np.column_stack([gx.ravel(), gy.ravel()])
    dens = np.exp(target.logp(pts, normalized=True))
    cell = (xs[1] - xs[0]) * (ys[1] - ys[0])
    return dens, target.statistic(pts), cell


@pytest.mark.parametrize(
    "key, lim, n",
    [
        ("ring2", [(-3.2, 3.2), (-3.2, 3.2)], 801),
        ("flower2", [(-22, 22), (-22, 22)], 1101),
        ("flower2_truncated", [(-4.5, 4.5), (-4.5, 4.5)], 901),
        ("flower2_noninteger_omega", [(-4.5, 4.5), (-4.5, 4.5)], 901),
        ("banana2_strong", [(-60, 60), (-20, 360)], 1201),
        ("gauss2", [(-7, 7), (-7, 7)], 701),
    ],
)
def test_normaliser_and_cdf_against_grid_integration(key, lim, n):
    """Deterministic check of the log normaliser and of P(T <= t), independent of the sampler."""
    target = TARGETS[key]()
    dens, T, cell = _grid_integral(target, lim, n)
    assert dens.sum() * cell == pytest.approx(1.0, abs=3e-3)
    for q in (0.3, 0.9):
        mass = dens[T <= target.hdr_threshold(q)].sum() * cell
        assert mass == pytest.approx(q, abs=5e-3)


@pytest.mark.parametrize("key", ["flower2", "flower2_truncated", "flower2_noninteger_omega"])
def test_flower_angle_marginal_of_exact_draws(key, exact_draws):
    target, x = exact_draws(key)
    total, _ = integrate.quad(target.angle_density, -np.pi, np.pi, limit=200)
    assert total == pytest.approx(1.0, abs=1e-8)
    edges = np.linspace(-np.pi, np.pi, 61)
    probs = np.array([integrate.quad(target.angle_density, a, b)[0] for a, b in zip(edges[:-1], edges[1:])])
    counts, _ = np.histogram(np.arctan2(x[:, 1], x[:, 0]), bins=edges)
    expected = probs * x.shape[0]
    chi2_stat = np.sum((counts - expected) ** 2 / expected)
    assert stats.chi2.sf(chi2_stat, len(counts) - 1) > 1e-3
    # The marginal is proportional to c(theta) = r0 + A cos(omega theta) up to the truncation.
    if key == "flower2":
        theta = np.linspace(-np.pi, np.pi, 7)
        c = 10.0 + 6.0 * np.cos(6.0 * theta)
        np.testing.assert_allclose(target.angle_density(theta), c / (2 * np.pi * 10.0), rtol=1e-6)


# ----------------------------------------------------------------------------- negative controls
def test_negative_control_banana_gaussian_with_same_covariance(exact_draws):
    target, x = exact_draws("banana8")
    m = x.shape[0]
    wrong = np.random.default_rng(7).multivariate_normal(np.zeros(target.dim), target.exact_cov, size=m)
    tol = 4 * math.sqrt(0.25 / m)
    assert target.quantile_error(x) < tol
    assert quantile_error(target, wrong) > 5 * tol


@pytest.mark.parametrize("key, scale", [("flower8", 1.1), ("ring2", 1.05), ("gauss4_scaled", 1.1)])
def test_negative_control_rescaled_exact_draws(key, scale, exact_draws):
    target, x = exact_draws(key)
    tol = 4 * math.sqrt(0.25 / x.shape[0])
    assert target.quantile_error(scale * x) > 5 * tol


def test_negative_control_wrong_correlation():
    target = correlated_gaussian(dim=2, rho=0.9)
    wrong = correlated_gaussian(dim=2, rho=0.8).sample(N_EXACT, rng=8)
    assert target.quantile_error(wrong) > 5 * 4 * math.sqrt(0.25 / N_EXACT)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "factory, kwargs, name",
    [
        (banana, {"dim": 1}, "dim"),
        (banana, {"dim": 2.5}, "dim"),
        (banana, {"v": 0.0}, "v"),
        (banana, {"v": -1.0}, "v"),
        (banana, {"b": np.inf}, "b"),
        (flower, {"r0": 5.0, "A": 6.0}, "r0 > A"),
        (flower, {"A": -1.0}, "A"),
        (flower, {"sigma": 0.0}, "sigma"),
        (flower, {"omega": -2.0}, "omega"),
        (flower, {"r0": np.nan}, "r0"),
        (flower, {"dim": 1}, "dim"),
        (ring, {"radius": 0.0}, "radius"),
        (ring, {"sigma": -0.1}, "sigma"),
        (ring, {"dim": True}, "dim"),
        (correlated_gaussian, {"rho": 1.0}, "rho"),
        (correlated_gaussian, {"dim": 3, "rho": -0.6}, "rho"),
        (correlated_gaussian, {"dim": 2, "scales": [1.0]}, "scales"),
        (correlated_gaussian, {"dim": 2, "scales": [1.0, -1.0]}, "scales"),
        (correlated_gaussian, {"dim": 0}, "dim"),
    ],
)
def test_bad_parameters_raise_value_error_naming_them(factory, kwargs, name):
    with pytest.raises(ValueError, match=name):
        factory(**kwargs)


def test_bad_quantile_inputs():
    target = banana(dim=2)
    x = target.sample(100, rng=0)
    for qs in ([0.0, 0.5], [0.5, 1.0], [], [[0.5]]):
        with pytest.raises(ValueError, match="qs"):
            target.quantile_coverage(x, qs)
    with pytest.raises(ValueError, match="samples"):
        target.quantile_coverage(np.zeros((10, 3)))
    with pytest.raises(ValueError, match="NaN"):
        target.quantile_coverage(np.full((10, 2), np.nan))
    with pytest.raises(ValueError, match="n must"):
        target.sample(-1)
    with pytest.raises(ValueError, match="initval"):
        target.model(initval=np.zeros(3))


def test_coverage_flattens_chains_and_is_reproducible():
    target = ring()
    x = target.sample(1000, rng=5)
    np.testing.assert_array_equal(x, ring().sample(1000, rng=np.random.default_rng(5)))
    chains = x.reshape(4, 250, 2)
    np.testing.assert_array_equal(target.quantile_coverage(chains), target.quantile_coverage(x))
    assert isinstance(target.hdr_threshold(0.5), float)
    assert isinstance(target, FlowerTarget) and target.params == {"radius": 2.0, "sigma": 0.2}


def test_truncated_flower_cdf_against_nested_quadrature():
    """P(T <= t) for a strongly truncated 3-D flower, against adaptive quadrature of its definition.

    With S = (r - c(theta))/sigma the density of (S, theta) is phi(S)(sigma S + c(theta)) on S > -c/sigma,
    and x_3 ~ N(0, 1) independently, so P(T <= t) = E[F_{chi2_1}(t - S^2)].
    """
    target = flower(**TRUNCATED_3D)
    sig, r0, A, om = target.sigma, target.r0, target.A, target.omega
    t = 2.0

    def c(th):
        return r0 + A * math.cos(om * th)

    def phi(s):
        return math.exp(-0.5 * s * s) / math.sqrt(2 * math.pi)

    def angle_mass(th):  # integral of phi(s)(sigma s + c) over s > -c/sigma
        a = c(th) / sig
        return sig * phi(a) + c(th) * 0.5 * math.erfc(-a / math.sqrt(2))

    def inner(th):
        lower = -min(c(th) / sig, math.sqrt(t))
        return integrate.quad(
            lambda s: phi(s) * (sig * s + c(th)) * math.erf(math.sqrt(max(t - s * s, 0.0) / 2)),
            lower,
            math.sqrt(t),
            epsabs=1e-12,
        )[0]

    Z = integrate.quad(angle_mass, -np.pi, np.pi, limit=200, epsabs=1e-12)[0]
    ref = integrate.quad(inner, -np.pi, np.pi, limit=200, epsabs=1e-11)[0] / Z
    assert target.statistic_cdf(t) == pytest.approx(ref, abs=1e-7)
    # The plain chi2_{d-1} answer is off by much more.
    assert abs(stats.chi2.cdf(t, 2) - ref) > 1e-2


def test_quantile_measure_is_blind_to_the_angle_of_flower_draws(exact_draws):
    """The reference code's flower sampler (uniform angle, r ~ N(c, sigma^2)) has the wrong angle marginal
    but the right distribution of T, so only the angle check detects it (documented limitation)."""
    target, _ = exact_draws("flower2")
    rng = np.random.default_rng(11)
    m = N_EXACT
    theta = rng.uniform(-np.pi, np.pi, m)
    r = 10.0 + 6.0 * np.cos(6.0 * theta) + rng.standard_normal(m)
    x = np.column_stack([r * np.cos(theta), r * np.sin(theta)])
    assert target.quantile_error(x) < 4 * math.sqrt(0.25 / m)
    edges = np.linspace(-np.pi, np.pi, 61)
    probs = np.array([integrate.quad(target.angle_density, a, b)[0] for a, b in zip(edges[:-1], edges[1:])])
    counts, _ = np.histogram(np.arctan2(x[:, 1], x[:, 0]), bins=edges)
    chi2_stat = np.sum((counts - probs * m) ** 2 / (probs * m))
    assert stats.chi2.sf(chi2_stat, len(counts) - 1) < 1e-10
