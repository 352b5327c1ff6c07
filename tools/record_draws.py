"""Record every sampler's draws for fixed seeds, to check that a refactor keeps them bit for bit.

    python tools/record_draws.py record tools/draws/pymc5.json     # before the change
    python tools/record_draws.py check tools/draws/pymc5.json      # after: exit 1 on any difference

Each case runs ``pm.sample`` (or ``pm.sample_smc``) with a fixed ``random_seed`` and keeps a SHA-256
of every array in the posterior, the sample statistics and (for MCMC) the warm-up groups. The
cases cover every sampler of the package: ``KameleonMetropolis`` with each kernel and both
adaptations, from a good and a far start; both GP delayed-acceptance steps with their proposals
and gradient options, exact and pseudo-marginal; ``MLDA`` with two and three levels; correlated
pseudo-marginal; ``DiscreteMetropolis`` beside a Kameleon step; ``KASS`` (sweeps and waste-free) and
``ASMC``. Tuning is long enough for every phase (coordinate scan, Adaptive Metropolis window, Kameleon
windows, windows that end early) to run.

Hashes depend on the installed PyMC, PyTensor, NumPy and BLAS, and on the CPU the BLAS picks its
kernels for (recorded as ``blas``), so record and check with the same environment and machine kind
(one file per stack and kind: ``pymc5.json`` and ``pymc6.json`` were recorded where OpenBLAS picks its
SkylakeX kernels, ``pymc5-haswell.json`` and ``pymc6-haswell.json`` where it picks Haswell ones, at 8a1722a;
an AMD EPYC host of each kind gave 31 of 33 PyMC 5 cases different from the other's at the same code); on
a new kind, record at a commit whose draws are known to be unchanged first.
The CPU counts beyond the BLAS's kernels: PyMC 6's PyTensor compiles for the host, and on an Intel Xeon
5 of 33 PyMC 6 cases matched a record from an AMD EPYC with the same packages and the same (SkylakeX)
BLAS kernels (PyMC 5: 33 of 33); the environment therefore names the CPU (``cpu``).
Record with PyTensor's compilation cache warm (run ``check``
once first): on PyMC 6, a graph's first compilation gave ``lp`` and ``accept`` of ``kamh-tune-0``
that differed from later runs by 6e-14 (the draws were the same). ``--save-arrays DIR`` also
writes each case's arrays to ``DIR/<case>.npz``, to see where two runs part.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time
import warnings
from functools import partial

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_kameleon as pk  # noqa: E402

SAMPLE_KW = dict(progressbar=False, compute_convergence_checks=False, cores=1)
GROUPS = ("posterior", "sample_stats", "warmup_posterior", "warmup_sample_stats")


# ------------------------------------------------------------------------------------- models
def banana_model():
    """A 4-d twisted banana (nonlinear, KAMH's home ground)."""
    with pm.Model() as model:
        x0 = pm.Normal("x0", 0, 10)
        pm.Normal("x1", 0.1 * (x0**2 - 100.0), 1.0)
        pm.Normal("rest", 0, 1, shape=2)
    return model


def gaussian_data_model(seed=0, n=30):
    data = np.random.default_rng(seed).normal([0.5, -1.0], 1.0, size=(n, 2))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10, shape=2)
        pm.Normal("y", mu, 1, observed=data)
    return model


def regression_model():
    """A correlated, mixed-scale regression with a transformed scale."""
    rng = np.random.default_rng(5)
    x1 = rng.normal(0, 100, 40)
    x2 = 0.01 * x1 + rng.normal(0, 0.1, 40)
    y = 1.0 + 0.02 * x1 + 3.0 * x2 + rng.normal(0, 0.5, 40)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 10, shape=3)
        s = pm.HalfNormal("s", 2.0)
        pm.Normal("y", b[0] + b[1] * x1 + b[2] * x2, s, observed=y)
    return model


LATENT_J, LATENT_D = 10, 2
LATENT_Y = np.array([0.5, -0.5]) + math.sqrt(2.0) * np.random.default_rng(2024).normal(
    size=(LATENT_J, LATENT_D)
)


def _latent_log_estimator(n_importance=20):
    def log_est(theta, rng):
        z = np.ravel(theta) + rng.standard_normal((n_importance, LATENT_J, LATENT_D))
        log_w = -0.5 * ((LATENT_Y - z) ** 2).sum(-1) - math.log(2 * math.pi)
        return float(pk.log_mean_exp(log_w, axis=0).sum())

    return log_est


def latent_model():
    with pm.Model() as model:
        theta = pm.Normal("theta", 0, 1, shape=LATENT_D)
        pk.PseudoMarginalPotential("lik", _latent_log_estimator(), inputs=[theta])
    return model


def latent_correlated_model():
    def log_weight(z, theta):
        return -0.5 * ((LATENT_Y - z) ** 2).sum(-1) - math.log(2 * math.pi)

    estimator = pk.correlated_importance_sampling_estimator(
        log_weight, lambda u, theta: theta + u, 2, latent_shape=(LATENT_J, LATENT_D)
    )
    with pm.Model() as model:
        theta = pm.Normal("theta", 0, 1, shape=LATENT_D)
        pk.PseudoMarginalPotential("lik", estimator, inputs=[theta], correlation=0.9)
    return model


def poisson_model():
    Y = np.array([3.1, 2.2, 4.0, 2.9, 3.5])

    def log_weight(z, theta, k):
        return -0.5 * (Y - z) ** 2 - 0.5 * math.log(2 * math.pi)

    estimator = pk.importance_sampling_estimator(
        log_weight, lambda theta, k, n, rng: theta + k + rng.standard_normal((n, Y.size)), 10
    )
    with pm.Model() as model:
        k = pm.Poisson("k", 2.0)
        theta = pm.Normal("theta", 0, 1)
        pk.PseudoMarginalPotential("lik", estimator, inputs=[theta, k])
    return model


# ------------------------------------------------------------------------------------- cases
def _mcmc(model_fn, step_fn, *, tune, draws, chains=2, seed=1, initvals=None):
    def run():
        model = model_fn()
        with model:
            step = step_fn(model)
            return pm.sample(
                step=step, tune=tune, draws=draws, chains=chains, random_seed=seed, initvals=initvals,
                **SAMPLE_KW,
            )

    return run


def _smc(model_fn, kernel, *, draws, seed=1, **kwargs):
    def run():
        with model_fn():
            return pm.sample_smc(
                draws=draws, kernel=kernel, chains=1, cores=1, random_seed=seed, progressbar=False, **kwargs
            )

    return run


def _mlda(coarse_shifts, *, tune, draws, chains=2, seed=1, **options):
    """MLDA on the Gaussian data model, with coarse models whose data are moved by ``coarse_shifts``
    (coarsest first; built before entering the fine model's context)."""

    def run():
        coarse = []
        for shift in coarse_shifts:
            data = np.random.default_rng(0).normal([0.5, -1.0], 1.0, size=(30, 2)) + shift
            with pm.Model() as model:
                mu = pm.Normal("mu", 0, 10, shape=2)
                pm.Normal("y", mu, 1, observed=data)
            coarse.append(model)
        with gaussian_data_model():
            step = pk.MLDA(coarse_models=coarse, **options)
            return pm.sample(step=step, tune=tune, draws=draws, chains=chains, random_seed=seed, **SAMPLE_KW)

    return run


FAR = {"b": np.array([40.0, -3.0, 30.0])}

# The cases recorded at ff86cb7 ran each chain's tuning alone: "per_chain" since pooled tuning became
# the default. The pooled cases below were recorded when it came in.
# The Kameleon cases were recorded before the Kameleon component waited for long tuning (kameleon_after,
# decision record 0037) and before the independence component (0038): they keep kameleon_after=0 and
# independence_weight=0, which must reproduce them bit for bit.
KAMH = partial(pk.KameleonMetropolis, tuning="per_chain", kameleon_after=0, independence_weight=0)
KAMH_POOLED = partial(pk.KameleonMetropolis, kameleon_after=0, independence_weight=0)
GPDA_MH = partial(pk.GPDelayedAcceptanceMH, tuning="per_chain")
GPDA_MALA = partial(pk.GPDelayedAcceptanceMALA, tuning="per_chain")


CASES = {
    "kamh-gaussian-banana": _mcmc(banana_model, lambda m: KAMH(), tune=2000, draws=500),
    "kamh-matern32-banana": _mcmc(
        banana_model, lambda m: KAMH(kernel="matern32", n_subsample=200),
        tune=1200, draws=300,
    ),
    "kamh-matern52-banana": _mcmc(
        banana_model, lambda m: KAMH(kernel="matern52", n_subsample=200),
        tune=1200, draws=300,
    ),
    "kamh-linear-banana": _mcmc(
        banana_model, lambda m: KAMH(kernel="linear"), tune=1200, draws=300
    ),
    "kamh-vanishing-banana": _mcmc(
        banana_model, lambda m: KAMH(adaptation="vanishing", n_subsample=200),
        tune=1000, draws=400,
    ),
    "kamh-regression-far-start": _mcmc(
        regression_model, lambda m: KAMH(), tune=3000, draws=300, initvals=FAR
    ),
    "kamh-pseudo-marginal": _mcmc(latent_model, lambda m: KAMH(), tune=800, draws=300),
    "kamh-correlated-pseudo-marginal": _mcmc(
        latent_correlated_model, lambda m: KAMH(), tune=800, draws=300
    ),
    "discrete-and-kamh": _mcmc(
        poisson_model,
        lambda m: [KAMH([m["theta"]]), pk.DiscreteMetropolis([m["k"]])],
        tune=500, draws=300,
    ),
    "gpda-mh-rw": _mcmc(gaussian_data_model, lambda m: GPDA_MH(), tune=800, draws=300),
    "gpda-mh-kameleon": _mcmc(
        gaussian_data_model, lambda m: GPDA_MH(proposal="kameleon", n_subsample=200),
        tune=800, draws=300,
    ),
    "gpda-mh-regression-far-start": _mcmc(
        regression_model, lambda m: GPDA_MH(), tune=2500, draws=300, initvals=FAR
    ),
    "gpda-mh-pseudo-marginal": _mcmc(latent_model, lambda m: GPDA_MH(), tune=600, draws=200),
    "gpda-mh-freeze-surrogate": _mcmc(
        gaussian_data_model,
        lambda m: GPDA_MH(gp_after_tuning="freeze", current_value="surrogate"),
        tune=600, draws=300,
    ),
    "gpda-mala": _mcmc(gaussian_data_model, lambda m: GPDA_MALA(), tune=600, draws=200),
    "gpda-mala-values-only": _mcmc(
        gaussian_data_model, lambda m: GPDA_MALA(gradient_observations=False),
        tune=600, draws=200,
    ),
    "gpda-mala-regression": _mcmc(
        regression_model, lambda m: GPDA_MALA(), tune=1000, draws=200
    ),
    # Tuning that ends in the coordinate scan, in a partial window, or is absent.
    "kamh-tune-in-scan": _mcmc(banana_model, lambda m: KAMH(), tune=100, draws=200),
    "kamh-tune-partial-window": _mcmc(banana_model, lambda m: KAMH(), tune=700, draws=200),
    "kamh-tune-0": _mcmc(gaussian_data_model, lambda m: KAMH(), tune=0, draws=200),
    "gpda-mh-tune-in-scan": _mcmc(
        gaussian_data_model, lambda m: GPDA_MH(), tune=40, draws=200
    ),
    "gpda-mala-tune-in-scan": _mcmc(
        gaussian_data_model, lambda m: GPDA_MALA(), tune=40, draws=100
    ),
    # Pooled tuning (the default since issue 43): populations of 3 and 4 chains, a stranded chain.
    "kamh-pooled-banana": _mcmc(
        banana_model, lambda m: KAMH_POOLED(), tune=1500, draws=300, chains=4
    ),
    "kamh-pooled-regression-far-start": _mcmc(
        regression_model, lambda m: KAMH_POOLED(), tune=2500, draws=300, chains=3, initvals=FAR
    ),
    "gpda-mh-pooled": _mcmc(
        gaussian_data_model, lambda m: pk.GPDelayedAcceptanceMH(), tune=800, draws=300, chains=3
    ),
    "gpda-mala-pooled": _mcmc(
        gaussian_data_model, lambda m: pk.GPDelayedAcceptanceMALA(), tune=600, draws=200, chains=3
    ),
    # MLDA (issue 46): two levels; three levels with random subchain lengths. Recorded before the error
    # model was on by default (adaptive_error_model="auto"), so they keep it off.
    "mlda-two-levels": _mlda([0.2], tune=500, draws=300, adaptive_error_model=False),
    "mlda-three-levels-random-lengths": _mlda(
        [0.4, 0.1], tune=300, draws=200, subsampling_rates=[2, 3], randomize_lengths=True,
        adaptive_error_model=False,
    ),
    "kass": _smc(gaussian_data_model, pk.KASS, draws=300),
    "kass-banana": _smc(banana_model, pk.KASS, draws=400),
    "asmc": _smc(gaussian_data_model, pk.ASMC, draws=300),
    "kass-pseudo-marginal": _smc(latent_model, pk.KASS, draws=200),
    "kass-waste-free": _smc(banana_model, pk.KASS, draws=400, waste_free=True, chain_length=20),
}


def _records(idata) -> dict[str, np.ndarray]:
    out = {}
    for group in GROUPS:
        data = getattr(idata, group, None)
        if data is None:
            continue
        for name, var in data.data_vars.items():
            out[f"{group}/{name}"] = np.asarray(var.values)
    return out


def _digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    if a.dtype == object:
        return hashlib.sha256(repr(a.tolist()).encode()).hexdigest()
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def run_cases(names, save_arrays=None) -> dict:
    out = {}
    for name in names:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = CASES[name]()
        records = _records(idata)
        if save_arrays:
            os.makedirs(save_arrays, exist_ok=True)
            arrays = {k.replace("/", "__"): v for k, v in records.items()}
            np.savez(os.path.join(save_arrays, f"{name}.npz"), **arrays)
        out[name] = {key: _digest(value) for key, value in sorted(records.items())}
        print(f"{name}: {len(records)} arrays, {time.perf_counter() - start:.1f} s", flush=True)
    return out


def _environment() -> dict:
    import pytensor
    import scipy
    from threadpoolctl import threadpool_info

    # The BLAS's kernels round differently on different CPUs (OpenBLAS picks them at run time: Haswell,
    # SkylakeX, ...), and a rounding difference parts two chains within steps: 31 of 33 cases differed
    # between two machines with the same packages.
    blas = sorted({f"{i['internal_api']} {i['version']} {i.get('architecture')}" for i in threadpool_info()
                   if i.get("user_api") == "blas"})
    return {"python": sys.version.split()[0], "pymc": pm.__version__, "pytensor": pytensor.__version__,
            "numpy": np.__version__, "scipy": scipy.__version__, "blas": ", ".join(blas), "cpu": _cpu()}


def _cpu() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; else what the platform module says)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=("record", "check"))
    parser.add_argument("file")
    parser.add_argument("--cases", nargs="*", default=None, help="only these cases (default: all)")
    parser.add_argument("--save-arrays", default=None, help="write each case's arrays to DIR/<case>.npz")
    args = parser.parse_args(argv)
    names = args.cases or list(CASES)
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {sorted(CASES)}")
    digests = run_cases(names, args.save_arrays)
    if args.action == "record":
        with open(args.file, "w") as f:
            json.dump({"environment": _environment(), "cases": digests}, f, indent=1, sort_keys=True)
        print(f"recorded {len(digests)} cases in {args.file}")
        return 0
    with open(args.file) as f:
        recorded = json.load(f)
    if recorded["environment"] != _environment():
        print(f"note: recorded with {recorded['environment']}, checking with {_environment()}")
    failed = 0
    for name, arrays in digests.items():
        before = recorded["cases"].get(name)
        if before is None:
            print(f"{name}: not recorded")
            failed += 1
            continue
        # A statistic added since the recording changes none of the recorded arrays: it is listed, not
        # counted as a difference; a recorded array that is gone or changed is.
        added = sorted(set(arrays) - set(before))
        differ = sorted(k for k in before if before[k] != arrays.get(k))
        if differ:
            failed += 1
            print(f"{name}: DIFFERENT {differ[:8]}{' ...' if len(differ) > 8 else ''}")
        else:
            note = f"; new since the recording: {added}" if added else ""
            print(f"{name}: identical ({len(before)} recorded arrays{note})")
    print(f"{len(digests) - failed} of {len(digests)} cases identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
