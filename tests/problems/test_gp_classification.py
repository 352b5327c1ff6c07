"""Tests of the UCI Glass data and the pseudo-marginal GP-classification likelihood estimator."""

import ast
import inspect
import pickle
import time
import warnings

import numpy as np
import pytest
from scipy.linalg import cholesky
from scipy.special import expit, log_expit, roots_hermitenorm

import pymc_kameleon.problems.gp_classification as gpc
from pymc_kameleon.problems import GPClassificationLikelihood, load_glass


@pytest.fixture(scope="module")
def glass():
    return load_glass()


@pytest.fixture(scope="module")
def glass_lik(glass):
    return GPClassificationLikelihood(*glass)


# Three points in 2-d: two correlated (distance 1), one a bit further; mixed labels.
TINY_X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.5]])
TINY_Y = np.array([1, 0, 1])
TINY_THETA = np.array([0.3, -0.2])


def exact_marginal_gh(K, y, m=60):
    r"""p(y) = E_{f ~ N(0, K)} prod_i sigma(t_i f_i) by tensor Gauss-Hermite quadrature.

    In whitened coordinates f = L u, u ~ N(0, I), the integrand is smooth (logistic), so
    m^n nodes give essentially machine precision for n <= 3.
    """
    nodes, weights = roots_hermitenorm(m)
    weights = weights / weights.sum()
    n = len(y)
    U = np.stack([g.ravel() for g in np.meshgrid(*([nodes] * n), indexing="ij")])
    w = np.prod(np.stack([g.ravel() for g in np.meshgrid(*([weights] * n), indexing="ij")]), axis=0)
    F = np.linalg.cholesky(K) @ U
    return float(w @ np.exp(log_expit((2 * y - 1)[:, None] * F).sum(axis=0)))


# ------------------------------------------------------------------------ data


def test_glass_data(glass):
    X, y = glass
    assert X.shape == (214, 9) and X.dtype == np.float64
    assert y.shape == (214,)
    assert not np.isnan(X).any()
    assert set(np.unique(y)) == {0, 1}
    assert (y == 1).sum() == 163 and (y == 0).sum() == 51
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(X.std(axis=0), 1.0, rtol=1e-12)


def test_glass_raw_data_and_class_counts():
    import csv
    from importlib import resources

    path = resources.files("pymc_kameleon.problems").joinpath("data", "glass.csv")
    with path.open("r", encoding="utf-8", newline="") as fh:
        types = [row["type"] for row in csv.DictReader(fh)]
    counts = {t: types.count(t) for t in set(types)}
    assert counts == {"WinF": 70, "WinNF": 76, "Veh": 17, "Con": 13, "Tabl": 9, "Head": 29}
    X_raw, y_raw = load_glass(standardize=False)
    assert X_raw[0].tolist() == [3.01, 13.64, 4.49, 1.10, 71.78, 0.06, 8.75, 0.0, 0.0]
    np.testing.assert_array_equal(y_raw, load_glass()[1])


def test_module_does_not_import_pymc_or_pytensor():
    tree = ast.parse(inspect.getsource(gpc))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert not {m for m in imported if m.split(".")[0] in ("pymc", "pytensor")}
    # our own imports must come from the NumPy-only core
    assert all(m.startswith("pymc_kameleon.core") for m in imported if m.startswith("pymc_kameleon"))


# ------------------------------------------------------------------------ kernel and Laplace


def test_kernel_matrix_matches_definition():
    lik = GPClassificationLikelihood(TINY_X, TINY_Y, ridge=1e-6)
    K = lik.kernel_matrix(TINY_THETA)
    diff = TINY_X[:, None, :] - TINY_X[None, :, :]
    expected = np.exp(-0.5 * np.sum(diff**2 / np.exp(TINY_THETA), axis=-1)) + 1e-6 * np.eye(3)
    np.testing.assert_allclose(K, expected, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("theta_value", [0.0, 2.0, -2.0])
def test_laplace_mode_fixed_point_and_evidence(glass, theta_value):
    X, y = glass
    lik = GPClassificationLikelihood(X, y)
    theta = np.full(9, theta_value)
    la = lik.laplace(theta)
    K = lik.kernel_matrix(theta)
    assert la.converged and la.n_iter <= 20
    grad = y - expit(la.f_hat)
    # mode condition f = K grad log p(y|f), and a = K^{-1} f = grad at the mode
    np.testing.assert_allclose(la.f_hat, K @ grad, atol=1e-7)
    np.testing.assert_allclose(la.a_hat, grad, atol=1e-7)
    # Laplace evidence in GPML's B form (eq. 3.32), computed independently of the whitened form
    sW = np.sqrt(la.W)
    L = cholesky(np.eye(len(y)) + sW[:, None] * K * sW[None, :], lower=True)
    expected = -0.5 * la.a_hat @ la.f_hat + log_expit((2 * y - 1) * la.f_hat).sum() - np.log(np.diag(L)).sum()
    assert la.log_marginal == pytest.approx(expected, abs=1e-8)
    assert lik.laplace_log_marginal(theta) == la.log_marginal


def test_laplace_mode_fixed_point_tiny():
    lik = GPClassificationLikelihood(TINY_X, TINY_Y)
    la = lik.laplace(TINY_THETA)
    K = lik.kernel_matrix(TINY_THETA)
    np.testing.assert_allclose(la.f_hat, K @ (TINY_Y - expit(la.f_hat)), atol=1e-10)


# ------------------------------------------------------------------------ unbiasedness


def test_exact_marginal_reference_agrees_with_brute_force_monte_carlo():
    """The quadrature truth used below, checked against 2e6 prior draws f ~ N(0, K)."""
    K = GPClassificationLikelihood(TINY_X, TINY_Y).kernel_matrix(TINY_THETA)
    p_gh = exact_marginal_gh(K, TINY_Y)
    assert p_gh == pytest.approx(exact_marginal_gh(K, TINY_Y, m=80), rel=1e-12)
    f = np.random.default_rng(1).standard_normal((2_000_000, 3)) @ np.linalg.cholesky(K).T
    lik_values = np.exp(log_expit((2 * TINY_Y - 1) * f).sum(axis=1))
    se = lik_values.std() / np.sqrt(len(lik_values))
    assert abs(lik_values.mean() - p_gh) < 4 * se, (lik_values.mean(), p_gh, se)


@pytest.mark.parametrize(
    "X, y, theta",
    [
        (TINY_X, TINY_Y, TINY_THETA),  # correlated latents, mixed labels
        (np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]]), np.array([1, 1, 1]), np.zeros(2)),  # ~independent
    ],
    ids=["correlated", "separated"],
)
def test_estimator_is_unbiased_for_the_marginal_likelihood(X, y, theta):
    """Mean of p_hat (not log p_hat) over many estimates matches the exact p(y|theta).

    The negative control: the deterministic Laplace approximation is off by many standard
    errors on the same case, so the tolerance is tight enough for the test to fail.
    """
    lik = GPClassificationLikelihood(X, y, n_importance=2)
    p_exact = exact_marginal_gh(lik.kernel_matrix(theta), y)
    if y.sum() == 3:  # separated points: K = (1 + ridge) I up to 1e-22, so p = (1/2)^3 exactly
        assert p_exact == pytest.approx(0.125, rel=1e-12)
    rng = np.random.default_rng(2024)
    M = 4000
    p_hat = np.exp([lik(theta, rng) for _ in range(M)])
    se = p_hat.std(ddof=1) / np.sqrt(M)
    tol = 4 * se
    print(f"\nexact p={p_exact:.6f}  mean p_hat={p_hat.mean():.6f}  SE={se:.2e}")
    assert abs(p_hat.mean() - p_exact) < tol
    assert lik.n_calls == M
    # negative control: a biased "estimate" of p fails the same check
    p_laplace = np.exp(lik.laplace_log_marginal(theta))
    print(f"Laplace p={p_laplace:.6f}: off by {abs(p_laplace - p_exact) / se:.0f} SE")
    assert abs(p_laplace - p_exact) > 5 * tol


# ------------------------------------------------------------------------ full Glass


@pytest.mark.parametrize("theta_value", [0.0, 2.0])
def test_full_glass_estimator_is_finite_and_low_variance(glass_lik, theta_value):
    theta = np.full(9, theta_value)
    rng = np.random.default_rng(7)
    glass_lik._cache_key = None  # time a call that includes the Laplace fit
    t0 = time.perf_counter()
    first = glass_lik(theta, rng)
    elapsed = time.perf_counter() - t0
    values = np.array([first] + [glass_lik(theta, rng) for _ in range(29)])
    assert np.all(np.isfinite(values))
    sd = values.std(ddof=1)
    print(
        f"\ntheta={theta_value:+.0f}*ones: log p_hat mean {values.mean():.3f}, sd {sd:.3f} over 30, "
        f"Laplace {glass_lik.laplace_log_marginal(theta):.3f}, "
        f"Newton iterations {glass_lik.last_laplace.n_iter}, one call {elapsed * 1e3:.1f} ms"
    )
    assert sd < 1.5
    # log p_hat is a noisy estimate of a quantity near the Laplace value
    assert abs(values.mean() - glass_lik.laplace_log_marginal(theta)) < 5.0


@pytest.mark.parametrize("theta_value", [-2000.0, -30.0, 30.0, 700.0])
def test_extreme_theta_stays_finite(glass, theta_value):
    lik = GPClassificationLikelihood(*glass, n_importance=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = lik(np.full(9, theta_value), np.random.default_rng(0))
    assert np.isfinite(value)


# ------------------------------------------------------------------------ errors and reproducibility


@pytest.mark.parametrize(
    "theta, match",
    [
        (np.zeros(8), "shape"),
        (np.zeros((1, 9)), "shape"),
        (np.r_[np.nan, np.zeros(8)], "finite"),
        (np.r_[np.inf, np.zeros(8)], "finite"),
        (["a"] * 9, "numeric"),
    ],
)
def test_bad_theta_raises(glass_lik, theta, match):
    with pytest.raises(ValueError, match=match):
        glass_lik(theta, np.random.default_rng(0))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_importance": 0}, "n_importance"),
        ({"ridge": -1.0}, "ridge"),
        ({"y": np.array([0, 1, 2])}, "labels"),
        ({"y": np.array([0, 1])}, "shape"),
        ({"X": np.array([[np.nan, 0.0], [0.0, 0.0], [1.0, 1.0]])}, "non-finite"),
    ],
)
def test_bad_constructor_arguments_raise(kwargs, match):
    args = {"X": TINY_X, "y": TINY_Y} | kwargs
    with pytest.raises(ValueError, match=match):
        GPClassificationLikelihood(**args)


def test_reproducible_and_independent_of_call_history(glass):
    theta = np.linspace(-1.0, 1.0, 9)
    lik = GPClassificationLikelihood(*glass)
    a = lik(theta, np.random.default_rng(11))
    b = lik(theta, rng=np.random.default_rng(11))  # keyword form of the contract
    assert a == b
    lik(np.full(9, 3.0), np.random.default_rng(0))  # another theta in between
    fresh = GPClassificationLikelihood(*glass)
    assert fresh(theta, np.random.default_rng(11)) == a == lik(theta, np.random.default_rng(11))
    assert lik(theta, np.random.default_rng(12)) != a
    # pickling (for multi-process sampling) keeps the estimator identical
    assert pickle.loads(pickle.dumps(lik))(theta, np.random.default_rng(11)) == a


def test_newton_cap_warns_but_estimate_is_still_returned():
    lik = GPClassificationLikelihood(TINY_X, TINY_Y, max_newton_iter=1)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        value = lik(TINY_THETA, np.random.default_rng(0))
    assert np.isfinite(value) and not lik.last_laplace.converged
