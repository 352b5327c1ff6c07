"""The real-posteriors catalogue: every builder's model starts at a finite log density and its reference
covers every free variable; the frontier posteriors (issue 43) are posteriordb's models and data."""

import json
from pathlib import Path

import numpy as np
import pytest

pm = pytest.importorskip("pymc")

from pymc_kameleon.problems.real_posteriors import POSTERIORS  # noqa: E402
from pymc_kameleon.problems.reference import NutsReference  # noqa: E402

REFERENCE_FILE = Path(__file__).resolve().parents[2] / "benchmarks/data/real_posteriors_reference.json"
FRONTIER = ("lotka-volterra-lynx-hare", "gp-poisson-latent", "gp-poisson-latent-noncentred")
# Checked in `make test-fast`: the frontier and PyMC's gallery model (issue 44's yardstick).
FAST = (*FRONTIER, "gallery-lotka-volterra")


@pytest.fixture(scope="module")
def cached():
    return json.loads(REFERENCE_FILE.read_text())


def _start(model, initvals):
    """The benchmark's start: the model's initial point with ``initvals`` applied (transformed space)."""
    if not initvals:
        return model.initial_point()
    from pymc.initial_point import make_initial_point_fn

    fn = make_initial_point_fn(model=model, overrides=initvals, jitter_rvs=set(), return_transformed=True)
    return fn(0)


def _scalar_names(model) -> set[str]:
    """``x``, ``x[0]``, ``x[1,2]``, ... of every free variable, as the benchmark names them."""
    shapes = model.eval_rv_shapes()
    names = set()
    for rv in model.free_RVs:
        shape = shapes[rv.name]
        names |= {f"{rv.name}[{','.join(map(str, i))}]" for i in np.ndindex(shape)} if shape else {rv.name}
    return names


# FAST here runs in `make test-fast`; the rest of the catalogue with the slow tests.
@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in POSTERIORS]
)
def test_builder_starts_finite_and_its_reference_covers_every_scalar(name, cached):
    model, reference, initvals = POSTERIORS[name]()
    assert np.isfinite(model.compile_logp()(_start(model, initvals)))
    scalars = _scalar_names(model)
    if isinstance(reference, dict):  # exact moments
        assert scalars <= set(reference), sorted(scalars - set(reference))
        return
    key = reference.key if isinstance(reference, NutsReference) else name
    entry = cached[key]
    assert scalars <= set(entry["params"]), sorted(scalars - set(entry["params"]))
    assert entry["max_rhat"] < 1.01 and entry["min_ess"] > 2000


@pytest.mark.parametrize("name", FAST)
def test_frontier_reference_is_cached_for_this_model(name, cached):
    """The cached moments were computed on the reference model as it is now (the benchmark's
    fingerprint), and that model holds every benchmarked variable under the same name."""
    model, reference, _ = POSTERIORS[name]()
    twin = reference.build()
    fingerprint = float(twin.compile_logp()(twin.initial_point()))
    assert fingerprint == pytest.approx(cached[reference.key]["fingerprint"], rel=1e-9, abs=1e-9)
    held = {v.name for v in twin.free_RVs} | {v.name for v in twin.deterministics}
    assert {rv.name for rv in model.free_RVs} <= held


def test_lynx_hare_black_box_and_twin_are_one_model():
    """The benchmarked model (black-box solve_ivp Op, no gradient) and the NUTS twin (odeint with
    sensitivities) give the same log density, here at posteriordb's posterior means."""
    model, reference, _ = POSTERIORS["lotka-volterra-lynx-hare"]()
    twin = reference.build()
    with pytest.raises(Exception):  # noqa: B017, PT011 - PyTensor's error for an Op without grad varies
        model.compile_dlogp()
    point = {
        "theta_interval__": np.log([0.5469, 0.02775, 0.8001, 0.02409]),
        "z_init_log__": np.log([34.04, 5.936]),
        "sigma_log__": np.log([0.248, 0.251]),
    }
    lp = model.compile_logp()(point)
    assert lp == pytest.approx(twin.compile_logp()(point), rel=1e-5)
    assert lp > model.compile_logp()(model.initial_point()) + 40  # the posterior is far above the start
    assert np.all(np.isfinite(twin.compile_dlogp()(point)))


def test_gallery_black_box_and_twin_are_one_model():
    """PyMC's gallery Lotka-Volterra model (odeint in an ``as_op`` Op, no gradient) and its NUTS twin
    (odeint with forward sensitivities) give one log density, and the twin's gradient is the log
    density's (central differences)."""
    model, reference, _ = POSTERIORS["gallery-lotka-volterra"]()
    twin = reference.build()
    with pytest.raises(Exception):  # noqa: B017, PT011 - PyTensor's error for an Op without grad varies
        model.compile_dlogp()
    start = twin.initial_point()
    names = list(start)
    x0 = np.array([float(start[k]) for k in names]) + 0.1
    logp, twin_logp = model.compile_logp(), twin.compile_logp()

    def at(x):
        return dict(zip(names, x, strict=True))

    assert logp(at(x0)) == pytest.approx(twin_logp(at(x0)), rel=1e-7)
    h = 1e-4
    central = [(twin_logp(at(x0 + h * e)) - twin_logp(at(x0 - h * e))) / (2 * h) for e in np.eye(len(x0))]
    np.testing.assert_allclose(twin.compile_dlogp()(at(x0)), central, rtol=1e-4, atol=1e-3)


def test_gp_poisson_centred_and_noncentred_are_one_posterior():
    """log p_centred(rho, alpha, f) = log p_noncentred(rho, alpha, f_tilde) - log|L| with f = L f_tilde."""
    model, reference, _ = POSTERIORS["gp-poisson-latent"]()
    twin = reference.build()
    rng = np.random.default_rng(0)
    for rho, alpha in ((5.7, 2.9), (3.0, 1.0), (9.0, 4.0)):
        x = np.arange(-10.0, 11.0, 2.0)
        cov = alpha**2 * np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho**2) + 1e-10 * np.eye(11)
        chol = np.linalg.cholesky(cov)
        f_tilde = rng.normal(size=11)
        common = {"rho_log__": np.log(rho), "alpha_log__": np.log(alpha)}
        centred = model.compile_logp()({**common, "f": chol @ f_tilde})
        noncentred = twin.compile_logp()({**common, "f_tilde": f_tilde})
        assert centred == pytest.approx(noncentred - np.log(np.diag(chol)).sum(), rel=1e-8, abs=1e-6)


# posteriordb's reference posterior means (reference_posteriors/summary_statistics/mean), and sds from
# its mean_squared_value: our NUTS references must agree within Monte Carlo error (ours, ESS > 2000:
# about 0.02 sd on a mean and 1.6% on an sd; posteriordb's are < 0.01 sd).
POSTERIORDB = {
    "lotka-volterra-lynx-hare": {
        "names": [f"{v}[{i}]" for v, n in (("theta", 4), ("z_init", 2), ("sigma", 2)) for i in range(n)],
        "mean": [0.546864, 0.0277473, 0.800095, 0.0240859, 34.0352, 5.93590, 0.248057, 0.251017],
        "mean_square": [0.303036, 0.000787172, 0.648139, 0.000592578, 1166.904, 35.51633, 0.0634037,
                        0.0649094],
    },
    "gp-poisson-latent-noncentred": {
        "names": ["rho", "alpha"] + [f"f[{i}]" for i in range(11)],
        "mean": [5.66653, 2.92134, 3.63574, 3.68861, 3.25467, 2.40917, 1.56153, 1.29526, 1.93120, 3.17961,
                 4.25292, 4.41510, 3.50682],
        "mean_square": [32.570579, 9.162755, 13.241741, 13.621802, 10.613349, 5.842878, 2.499327, 1.748558,
                        3.779984, 10.130595, 18.096567, 19.501496, 12.324364],
    },
}


@pytest.mark.parametrize("name", sorted(POSTERIORDB))
def test_frontier_reference_agrees_with_posteriordb(name, cached):
    ours = cached[POSTERIORS[name]()[1].key]["params"]
    theirs = POSTERIORDB[name]
    for key, mean, square in zip(theirs["names"], theirs["mean"], theirs["mean_square"], strict=True):
        sd = np.sqrt(square - mean**2)
        our_mean, our_sd = ours[key]
        assert abs(our_mean - mean) < 0.1 * sd, (key, our_mean, mean, sd)
        assert abs(np.log(our_sd / sd)) < 0.05, (key, our_sd, sd)
