"""Angles (``pm.VonMises``): our steps and PyMC's on posteriors of a mean direction, against a grid.

PyMC samples an angle through its circular transform: the sampler's coordinate repeats the density
every 2 pi, so a posterior near +-pi has copies on both sides of PyMC's start at 0 (``core.angles`` keeps
tuning in one period). Three targets, each with a concentration kappa whose exact mean and sd come
from a grid:

- ``one``: 50 angles about 1 rad (the control: no copy near the start);
- ``pi``: 50 angles about pi (the posterior across the period's edge);
- ``axial``: y ~ VonMises(2 theta, kappa), 60 angles: two modes of theta, pi apart, of equal mass.

Per sampler and seed (4 chains x (tune + draws), ``cores=1``): kappa's mean error in grid sds, its sd
over the grid's, the largest split R-hat and smallest bulk ESS of kappa (an angle's own R-hat reads
wrapped draws), kappa's ESS per log-density evaluation (as each step really makes them), and the
direction's error (rad; for ``axial`` the share of draws in the mode about 1 rad, exact 0.5, and the
moves between the modes per 1000 draws: a sampler that makes none gets the share from how its chains
split between the modes).

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/angles.py [--targets one pi axial] [--seeds 1 2 3]
        [--samplers KAMH KAMH-per-chain GP-DA-MH DEMetropolisZ Metropolis NUTS] [--tune 1000 --draws 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402

SAMPLERS = ("KAMH", "KAMH-per-chain", "GP-DA-MH", "DEMetropolisZ", "Metropolis", "NUTS")
AXIAL_DIRECTION = 1.0


def axial_model(seed: int = 0, n: int = 60):
    """theta ~ VonMises(0, 0.01), kappa ~ HalfNormal(5), y ~ VonMises(2 theta, kappa): modes at 1 and
    1 - pi of (nearly) equal mass."""
    import pymc as pm

    obs = np.random.default_rng(seed).vonmises(2 * AXIAL_DIRECTION, 1.5, size=n)
    with pm.Model() as model:
        theta = pm.VonMises("mu", 0.0, 0.01)
        kappa = pm.HalfNormal("kappa", 5.0)
        pm.VonMises("y", 2 * theta, kappa, observed=obs)
    return model, obs


def axial_moments(obs) -> tuple[float, float, float]:
    """The exact share of theta within pi/2 of 1 rad, and kappa's mean and sd (a grid)."""
    from scipy.special import i0e
    from scipy.stats import halfnorm, vonmises

    mu, kappa = np.meshgrid(np.linspace(-np.pi, np.pi, 1441), np.linspace(0.005, 6, 1200), indexing="ij")
    log_norm = np.log(2 * np.pi * i0e(kappa)) + kappa
    log_lik = kappa * np.cos(obs[:, None, None] - 2 * mu).sum(0) - obs.size * log_norm
    log_post = vonmises.logpdf(mu, 0.01) + halfnorm.logpdf(kappa, scale=5.0) + log_lik
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    near = np.cos(mu - AXIAL_DIRECTION) > 0
    mean = (w * kappa).sum()
    return float(w[near].sum()), float(mean), float(np.sqrt((w * kappa**2).sum() - mean**2))


def target(name: str):
    """(model, (exact direction or mode share, kappa mean, kappa sd))."""
    from pymc_kameleon.testing import von_mises_model, von_mises_moments

    if name == "axial":
        model, obs = axial_model()
        return model, axial_moments(obs)
    model, obs = von_mises_model(direction={"one": 1.0, "pi": np.pi}[name])
    return model, von_mises_moments(obs)


def make_step(sampler: str):
    import pymc as pm

    from pymc_kameleon import GPDelayedAcceptanceMH, KameleonMetropolis

    return {
        "KAMH": lambda: KameleonMetropolis(),
        "KAMH-per-chain": lambda: KameleonMetropolis(tuning="per_chain"),
        "GP-DA-MH": lambda: GPDelayedAcceptanceMH(),
        "DEMetropolisZ": lambda: pm.DEMetropolisZ(),
        "Metropolis": lambda: pm.Metropolis(),
        "NUTS": lambda: None,
    }[sampler]()


def evaluations(idata, sampler: str, iterations: int, dim: int) -> float:
    """Log-density evaluations as each step really makes them (tuning included)."""
    stats = idata.sample_stats
    if sampler == "DEMetropolisZ":
        return 2.0 * iterations * stats.sizes["chain"]
    if sampler == "Metropolis":
        return 2.0 * dim * iterations * stats.sizes["chain"]
    if sampler == "NUTS":
        return float(stats["n_steps"].values.sum() + idata.warmup_sample_stats["n_steps"].values.sum())
    return float(stats["cumulative_logp_evals"].values[:, -1].sum())


def run(name: str, sampler: str, seed: int, tune: int, draws: int) -> dict:
    import arviz as az
    import pymc as pm

    model, (direction, mean, sd) = target(name)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = make_step(sampler)
        idata = pm.sample(step=step, tune=tune, draws=draws, chains=4, cores=1, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False, discard_tuned_samples=False)
    kappa, mu = idata.posterior["kappa"].values, idata.posterior["mu"].values
    crossings = np.nan
    if name == "axial":
        near = np.cos(mu - AXIAL_DIRECTION) > 0
        angle_error = abs(float(near.mean()) - direction)
        # Moves between the modes per 1000 draws (mean over chains): without them the mode share is
        # the chains' split, right at 2 of 4 by chance.
        crossings = 1000.0 * float(np.mean(np.diff(near.astype(int), axis=1) != 0))
    else:
        found = np.arctan2(np.sin(mu).mean(), np.cos(mu).mean())
        angle_error = abs(np.angle(np.exp(1j * (found - direction))))
    ess = float(az.ess(idata, var_names=["kappa"])["kappa"])
    return {
        "mean_err": abs(kappa.mean() - mean) / sd,
        "sd_ratio": kappa.std() / sd,
        "rhat": float(az.rhat(idata, var_names=["kappa"])["kappa"]),
        "ess": ess,
        "ess_per_eval": ess / evaluations(idata, sampler, tune + draws, 2),
        "angle_error": angle_error,
        "crossings": crossings,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    targets = ["one", "pi", "axial"]
    parser.add_argument("--targets", nargs="+", default=targets, choices=targets)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args(argv)
    print(f"# {environment_line()}")
    print(f"# 4 chains x ({args.tune} + {args.draws}), seeds {args.seeds}; median over seeds (worst seed)")
    for name in args.targets:
        print(f"\n## {name}\n")
        angle = "direction error (rad)"
        if name == "axial":
            angle = "mode share error | mode crossings per 1000 draws"
        print(
            "| sampler | kappa mean err (sd) | kappa sd / exact | kappa R-hat | kappa ESS | ESS/eval | "
            f"{angle} |"
        )
        print("|---|---|---|---|---|---|---|" + ("---|" if name == "axial" else ""))
        for sampler in args.samplers:
            rows = [run(name, sampler, seed, args.tune, args.draws) for seed in args.seeds]
            print(f"| {sampler} | " + " | ".join(_cells(rows)) + " |", flush=True)


def _cells(rows) -> list[str]:
    """Each column's median over the seeds and its worst seed."""

    def cell(key, fmt, worst=max):
        values = [r[key] for r in rows]
        return f"{format(np.median(values), fmt)} ({format(worst(values), fmt)})"

    sd_ratios = [r["sd_ratio"] for r in rows]
    sd_worst = max(sd_ratios, key=lambda v: abs(np.log(v)))
    return [
        cell("mean_err", ".2f"), f"{np.median(sd_ratios):.2f} ({sd_worst:.2f})", cell("rhat", ".3f"),
        cell("ess", ".0f", min), cell("ess_per_eval", ".2e", min), cell("angle_error", ".3f"),
    ] + ([cell("crossings", ".1f", min)] if np.isfinite(rows[0]["crossings"]) else [])


if __name__ == "__main__":
    main()
