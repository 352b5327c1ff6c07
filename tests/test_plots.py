"""Proposal-contour plots (paper Figure 2) and target heat maps."""

import math
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.patches import Ellipse  # noqa: E402
from scipy import stats  # noqa: E402

from pymc_kameleon.core.kameleon.family import KameleonProposal
from pymc_kameleon.core.kameleon.kernels import GaussianKernel, median_heuristic_bandwidth
from pymc_kameleon.plots import ellipse_parameters, plot_proposal_contours, plot_target_density  # noqa: E402
from pymc_kameleon.problems.targets import banana, flower  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def make_proposal(target, n=300, seed=0):
    Z = target.sample(n, rng=seed)
    return KameleonProposal(Z, GaussianKernel(median_heuristic_bandwidth(Z)), gamma2=0.04, nu2=1.0)


def ellipses(ax):
    return [p for p in ax.patches if isinstance(p, Ellipse)]


def boundary(ellipse, n=16):
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    a = math.radians(ellipse.angle)
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    local = np.column_stack([0.5 * ellipse.width * np.cos(t), 0.5 * ellipse.height * np.sin(t)])
    return np.asarray(ellipse.center) + local @ rot.T


def test_banana_proposal_contours_default_points():
    target = banana(dim=2)
    prop = make_proposal(target)
    ax = plot_proposal_contours(prop, target)
    assert isinstance(ax, Axes)
    assert len(ellipses(ax)) == 5
    assert len(ax.images) == 1  # the log-density heat map
    assert len(ax.collections) == 1  # the subsample Z
    assert ax.collections[0].get_offsets().shape == (300, 2)
    # Every default point is a point of Z.
    for e in ellipses(ax):
        assert np.min(np.linalg.norm(prop.Z - np.asarray(e.center), axis=1)) == 0.0


@pytest.mark.parametrize("level", [0.5, 0.95])
def test_ellipses_are_the_level_contours_of_the_proposal_marginal(level):
    target = banana(dim=8)
    prop = make_proposal(target, n=200, seed=1)
    points = target.sample(3, rng=2)
    dims = (0, 2)
    ax = plot_proposal_contours(prop, target, points=points, dims=dims, level=level, n_grid=40)
    es = ellipses(ax)
    assert len(es) == 3
    r2 = stats.chi2.ppf(level, 2)
    for y, e in zip(points, es):
        np.testing.assert_allclose(e.center, y[list(dims)])
        C2 = prop.covariance(y)[np.ix_(dims, dims)]
        u = boundary(e) - y[list(dims)]
        maha = np.einsum("ij,jk,ik->i", u, np.linalg.inv(C2), u)
        np.testing.assert_allclose(maha, r2, rtol=1e-8)


def test_ellipse_parameters_closed_form_and_monte_carlo():
    r = math.sqrt(stats.chi2.ppf(0.9, 2))
    w, h, angle = ellipse_parameters(np.diag([4.0, 1.0]), 0.9)
    assert (w, h) == pytest.approx((4 * r, 2 * r))
    assert angle % 180 == pytest.approx(0.0, abs=1e-9)
    w, h, angle = ellipse_parameters(np.diag([1.0, 9.0]), 0.9)
    assert (w, h) == pytest.approx((6 * r, 2 * r))
    assert angle % 180 == pytest.approx(90.0)
    # A correlated covariance: the fraction of Gaussian draws inside the ellipse is the level.
    cov = np.array([[2.0, 1.2], [1.2, 1.0]])
    w, h, angle = ellipse_parameters(cov, 0.8)
    a = math.radians(angle)
    e1, e2 = np.array([math.cos(a), math.sin(a)]), np.array([-math.sin(a), math.cos(a)])
    u = np.random.default_rng(3).multivariate_normal([0, 0], cov, size=40_000)
    inside = (u @ e1 / (w / 2)) ** 2 + (u @ e2 / (h / 2)) ** 2 <= 1
    assert abs(inside.mean() - 0.8) < 4 * math.sqrt(0.8 * 0.2 / 40_000)
    with pytest.raises(ValueError, match="level"):
        ellipse_parameters(cov, 1.0)
    with pytest.raises(ValueError, match="cov2"):
        ellipse_parameters(np.eye(3))


def test_options_without_target_single_point_and_swapped_dims():
    target = flower(dim=3)
    prop = make_proposal(target, n=150)
    ax = plot_proposal_contours(prop, show_subsample=False)
    assert len(ellipses(ax)) == 5 and len(ax.images) == 0 and len(ax.collections) == 0
    fig, ax2 = plt.subplots()
    y = prop.Z[0]
    out = plot_proposal_contours(prop, target, points=y, dims=(1, 0), ax=ax2, n_grid=30)
    assert out is ax2
    (e,) = ellipses(ax2)
    np.testing.assert_allclose(e.center, [y[1], y[0]])
    ax3 = plot_proposal_contours(prop, target, n_points=2, n_grid=30)
    assert len(ellipses(ax3)) == 2


def test_plot_target_density():
    target = flower(dim=2)
    ax = plot_target_density(target, n_grid=50)
    assert isinstance(ax, Axes) and len(ax.images) == 1
    img = ax.images[0].get_array()
    assert img.shape == (50, 50) and np.ptp(img) == pytest.approx(20.0)  # clipped log density
    ax = plot_target_density(
        banana(dim=4), dims=(0, 1), slice_at=np.ones(4), xlim=(-5, 5), ylim=(-5, 5), log=False
    )
    assert ax.get_xlim() == (-5.0, 5.0)
    assert np.nanmax(ax.images[0].get_array()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="slice_at"):
        plot_target_density(target, slice_at=np.zeros(3))
    with pytest.raises(ValueError, match="dims"):
        plot_target_density(target, dims=(0, 2))


def test_bad_inputs():
    target = banana(dim=2)
    prop = make_proposal(target, n=50)
    with pytest.raises(ValueError, match="level"):
        plot_proposal_contours(prop, level=0.0)
    with pytest.raises(ValueError, match="dims"):
        plot_proposal_contours(prop, dims=(0, 0))
    with pytest.raises(ValueError, match="dims"):
        plot_proposal_contours(prop, dims=(0, 2))
    with pytest.raises(ValueError, match="points"):
        plot_proposal_contours(prop, points=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="dim"):
        plot_proposal_contours(prop, target=banana(dim=3))
    with pytest.raises(ValueError, match="n_grid"):
        plot_proposal_contours(prop, target=target, n_grid=1)
    with pytest.raises(ValueError, match="proposal must be"):
        plot_proposal_contours(object())


def test_step_without_proposal_raises():
    class FakeStep:
        proposal = None

    message = r"has not adapted yet.*cores>1.*plot_proposal_contours\(idata, chain=0\)"
    with pytest.raises(ValueError, match=message):
        plot_proposal_contours(FakeStep())


def test_kameleon_step_before_and_after_tuning():
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis

    target = banana(dim=2)
    with target.model():
        step = KameleonMetropolis(adapt_interval=50, n_subsample=100, kameleon_after=0)
        with pytest.raises(ValueError, match="KameleonMetropolis has not adapted yet"):
            plot_proposal_contours(step, target)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pm.sample(
                draws=10, tune=150, chains=1, cores=1, step=step, random_seed=1,
                progressbar=False, compute_convergence_checks=False,
            )
    assert step.proposal is not None
    ax = plot_proposal_contours(step, target, n_grid=30)
    assert len(ellipses(ax)) == 5


# ------------------------------------------------- the tuned proposal of pm.sample(cores>1)
def correlated_gaussian_model():
    import pymc as pm

    with pm.Model() as model:
        pm.MvNormal("x", mu=[1.0, -2.0], cov=[[4.0, 1.8], [1.8, 1.0]])
    return model


def sample_kameleon(model, cores, chains, seed=7):
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = KameleonMetropolis(kameleon_after=0)
        idata = pm.sample(
            step=step, tune=1500, draws=800, chains=chains, cores=cores, random_seed=seed,
            progressbar=False, compute_convergence_checks=False,
        )
    return step, idata


def test_contours_of_each_chain_from_the_inference_data_of_parallel_chains():
    """pm.sample(cores=2) tunes in worker processes: the session's step has no proposal, and
    the plot says how to draw it from the InferenceData instead."""
    model = correlated_gaussian_model()
    step, idata = sample_kameleon(model, cores=2, chains=2)
    with pytest.raises(ValueError, match=r"plot_proposal_contours\(idata, chain=0\)"):
        plot_proposal_contours(step)
    with model:
        axes = [plot_proposal_contours(idata, chain=c, n_grid=20) for c in (0, 1)]
    assert all(len(ellipses(ax)) == 5 for ax in axes)
    centres = [np.array([e.center for e in ellipses(ax)]) for ax in axes]
    assert not np.allclose(centres[0], centres[1])  # each chain's own subsample
    with pytest.raises(ValueError, match=r"chain must be in 0\.\.1"):
        plot_proposal_contours(idata, chain=2, model=model)


def test_rebuilt_proposal_matches_the_tuned_one_in_law():
    """The rebuild applies the step's own construction (whitening and Z from one window of draws,
    the tuned bandwidth, gamma and kernel variance) to the first |Z| draws after tuning. A window
    of 400 correlated draws estimates the covariance only roughly (here the tuned one is 1.5x too
    small in variance), so the two agree in law, not exactly: the rebuilt proposal variance at
    posterior draws is the tuned one (cores=1: the step in this process holds it) within a factor
    3 in the median, as much as rebuilds from two blocks of the same chain differ. The average
    kernel variance is the tuned one exactly."""
    from pymc_kameleon import rebuild_proposal

    model = correlated_gaussian_model()
    step, idata = sample_kameleon(model, cores=1, chains=1)
    rebuilt = rebuild_proposal(idata, 0, model=model)
    tuned = step.proposal
    assert rebuilt.Z.shape == tuned.Z.shape
    X = idata.posterior["x"].values[0][::10]
    ratio = [np.trace(rebuilt.covariance(y)) / np.trace(tuned.covariance(y)) for y in X]
    assert 1 / 3 < np.median(ratio) < 3
    Zw = rebuilt.family.Z
    probe = Zw[np.unique(np.linspace(0, len(Zw) - 1, 20).round().astype(int))]
    v = np.mean([np.trace(rebuilt.family.rkhs_covariance(z)) for z in probe]) / 2
    assert rebuilt.nu2 * v == pytest.approx(float(idata.sample_stats["kernel_variance"].values[0, -1]))


def test_contours_after_parallel_chains_of_a_model_whose_variables_depend_on_each_other():
    """b's distribution depends on a (b ~ N(a**2, 0.5)): mapping the draws to the step's coordinates
    replaced a and b by fresh inputs with graph_replace, which raised 'i-2 is not a part of graph'."""
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis

    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        pm.Normal("b", a**2, 0.5)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            step=KameleonMetropolis(kameleon_after=0), tune=300, draws=100, chains=2,
            cores=2, random_seed=3, progressbar=False, compute_convergence_checks=False,
        )
        ax = plot_proposal_contours(idata, chain=0, n_grid=10)
    assert len(ellipses(ax)) == 5


def test_value_space_draws_of_transformed_variables_that_depend_on_others():
    """A HalfNormal scale with a child, and an interval whose bounds are another variable: each
    coordinate is its transform's forward at the draw, with the bounds at that draw's values."""
    import pymc as pm

    from pymc_kameleon.steps.tuned import value_space_draws

    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        s = pm.HalfNormal("s", 1)
        pm.Normal("b", a, s)
        pm.Uniform("u", lower=a, upper=a + 2)
    _, idata = sample_kameleon(model, cores=1, chains=1)
    X = value_space_draws(idata, 0, model=model)
    post = idata.posterior.isel(chain=0)
    a_, s_, b_, u_ = (post[n].values for n in ("a", "s", "b", "u"))
    np.testing.assert_allclose(X, np.column_stack([a_, np.log(s_), b_, np.log((u_ - a_) / (a_ + 2 - u_))]))


def test_rebuild_maps_transformed_variables_and_refuses_other_steps():
    import pymc as pm

    from pymc_kameleon import rebuild_proposal
    from pymc_kameleon.steps.tuned import value_space_draws

    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu, sigma, observed=[0.3, -0.2, 0.9, 0.1])
    _, idata = sample_kameleon(model, cores=1, chains=1)
    X = value_space_draws(idata, 0, model=model)
    post = idata.posterior.isel(chain=0)
    np.testing.assert_allclose(X[:, 0], post["mu"].values)
    np.testing.assert_allclose(X[:, 1], np.log(post["sigma"].values))  # the log transform's forward
    family = rebuild_proposal(idata, 0, model=model)
    assert family.Z.shape[1] == 2 and np.any(family.Z[:, 1] < 0)  # log-scale coordinates
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other = pm.sample(
            step=pm.Metropolis(), tune=100, draws=50, chains=1, random_seed=1,
            progressbar=False, compute_convergence_checks=False,
        )
    with pytest.raises(ValueError, match="no 'bandwidth'.*KameleonMetropolis"):
        rebuild_proposal(other, model=model)


def test_a_chain_that_never_built_a_kameleon_proposal_gets_a_clear_error():
    """With the default kameleon_after, tune=300 leaves the AM walk alone: rebuild and plot say why."""
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis, rebuild_proposal

    with pm.Model() as model:
        pm.Normal("x", 0, 1, shape=2)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = KameleonMetropolis()
        idata = pm.sample(step=step, tune=300, draws=50, chains=1, random_seed=2, progressbar=False,
                          compute_convergence_checks=False)
    assert not idata.sample_stats["kameleon"].values.any()
    with pytest.raises(ValueError, match="kameleon_after"):
        rebuild_proposal(idata, 0, model=model)
    with pytest.raises(ValueError, match="kameleon_after"):
        plot_proposal_contours(step)


def _sampled_scale_model():
    """A model with a positive scale (sampled as its log), its KameleonMetropolis step and its run."""
    import pymc as pm

    from pymc_kameleon import KameleonMetropolis

    with pm.Model() as model:
        pm.Normal("mu", 0, 1)
        pm.HalfNormal("sigma", 1)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = KameleonMetropolis(kameleon_after=0, adapt_interval=50)
        idata = pm.sample(step=step, tune=400, draws=300, chains=1, cores=1, random_seed=2,
                          progressbar=False, compute_convergence_checks=False)
    return model, step, idata


def test_contours_label_the_axes_with_the_sampled_coordinates():
    """A new user's plot read $x_1$ and $x_4$ in a model that had a variable x: the axes name the step's
    coordinates as its warnings do (a positive scale is sampled as its log). A core proposal, which
    knows no names, keeps x_1, x_2 (the control). Outside the model, rebuilding from the InferenceData
    says to pass it (PyMC's error was a bare 'No model on context stack')."""
    from pymc_kameleon import rebuild_proposal

    model, step, idata = _sampled_scale_model()
    for source in (step, idata):
        with model:
            ax = plot_proposal_contours(source, n_grid=10)
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("mu", "log(sigma)")
    ax = plot_proposal_contours(step.proposal, n_grid=10, dims=(1, 0))
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("$x_{2}$", "$x_{1}$")
    for call in (lambda: rebuild_proposal(idata), lambda: plot_proposal_contours(idata)):
        with pytest.raises(TypeError, match=r"inside `with model:` or pass model=model"):
            call()
    rebuild_proposal(idata, model=model)  # the control
