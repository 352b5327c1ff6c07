"""A GP level fitted with a noise variance against one fitted as an exact function, where the difference
it learns is rough; and GP delayed acceptance's own GP on a rough likelihood.

``MLDA(coarse_models=[coarse, GPLevel()])``'s GP learns the fine-minus-coarse log density as a function of
MLDA's variables. Two ways it is not a smooth one:

- **rough**: a coarse solver's error changes abruptly with the parameters (adaptive steps). Here a
  2-d Gaussian-mean model (20 observations, N(0, 3^2) prior, exact posterior) whose coarse model is
  0.2 off and carries ``amp * sin(37 mu_0) cos(29 mu_1)`` nats (``--amps``; 0 is the smooth control);
  4 chains x (1000 + 5000), subchains [2, 3].
- **compound**: the difference depends on another step's variable too. The switch model of
  ``tests/steps/test_mlda_compound.py`` (z ~ Bernoulli(0.3) picks the mean of y; x ~ N(0, 1); coarse
  1.5 off), ``pm.BinaryGibbsMetropolis`` on z, MLDA on x, 4 chains x (1000 + 20 000), subchains 3.

- **gpda**: ``GPDelayedAcceptanceMH`` whose *fine* model carries the roughness (the same 2-d model with
  ``amp`` nats of ``sin cos``; exact moments by quadrature on a grid), 4 chains x (1000 + 5000): its
  default ``noise_variance="auto"`` (noise-free for a likelihood that is not estimated) against
  ``noise_variance="fit"``. Fine evaluations are its exact ones.

MLDA's rows: the default (noise fitted) and ``GPLevel(hyperparameters={"noise_variance": 0.0})`` (the
GP as an exact function, the default before). Reported per seed: the largest |mean - exact| in MCSE
(z-score, over the checked moments), the smallest bulk ESS, the largest R-hat, fine evaluations per
iteration, min ESS per fine evaluation, and the GP's fitted hyperparameters at the end of tuning
(lengthscales, signal and noise variance, constant mean) of the last chain.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/mlda_gp_level_noise.py
        [--experiments rough compound gpda] [--seeds 1 2 3] [--compound-seeds 3 5 6 7]
        [--gpda-amps 0 0.3 1] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402

VARIANTS = {"noise fitted (default)": None, "noise-free (noise_variance=0)": {"noise_variance": 0.0}}
GPDA_VARIANTS = {"GP-DA noise-free (default)": "auto", 'GP-DA noise_variance="fit"': "fit"}
N_OBS, PRIOR_SD, COARSE_SHIFT = 20, 3.0, 0.2


def _data():
    return np.random.default_rng(0).normal([0.5, -0.3], 1.0, size=(N_OBS, 2))


def gaussian_mean_model(shift: float = 0.0, rough: float = 0.0):
    """The 2-d Gaussian-mean model, its data's mean moved by ``shift``, with ``rough`` nats of
    ``sin(37 mu_0) cos(29 mu_1)`` (a solver-like error)."""
    import pymc as pm
    import pytensor.tensor as pt

    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, PRIOR_SD, shape=2)
        pm.Normal("y", mu + shift, 1.0, observed=_data())
        if rough:
            pm.Potential("solver_error", rough * pt.sin(37.0 * mu[0]) * pt.cos(29.0 * mu[1]))
    return m


def rough_models(amp: float):
    """The fine 2-d Gaussian-mean model, its coarse model (shifted, with ``amp`` nats of roughness) and the
    exact posterior mean and sd."""
    post_var = 1.0 / (N_OBS + 1.0 / PRIOR_SD**2)
    return (gaussian_mean_model(), gaussian_mean_model(COARSE_SHIFT, amp), _data().sum(0) * post_var,
            math.sqrt(post_var))


def rough_posterior_moments(amp: float, points: int = 1401):
    """Mean and sd of the fine model with ``amp`` nats of roughness, by quadrature on a grid of +-7
    posterior sds (the roughness's periods, 0.17 and 0.22, span about 8 grid cells each)."""
    post_var = 1.0 / (N_OBS + 1.0 / PRIOR_SD**2)
    centre, sd = _data().sum(0) * post_var, math.sqrt(post_var)
    a, b = (np.linspace(c - 7 * sd, c + 7 * sd, points) for c in centre)
    A, B = np.meshgrid(a, b, indexing="ij")
    log_w = (-0.5 * ((A - centre[0]) ** 2 + (B - centre[1]) ** 2) / post_var
             + amp * np.sin(37 * A) * np.cos(29 * B))
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    mean = np.array([(w * A).sum(), (w * B).sum()])
    return mean, np.sqrt([(w * (A - mean[0]) ** 2).sum(), (w * (B - mean[1]) ** 2).sum()])


def gp_fit(step) -> str:
    gp = step.gp if hasattr(step, "gp") else next(iter(step.gp_levels.values())).gp
    ell = ", ".join(f"{v:.3g}" for v in np.atleast_1d(gp._ell))
    return f"ell [{ell}], s2 {gp._s2:.3g}, noise {gp._noise:.3g}, mean {gp.mean_value:.3g}"


def run(fine, levels, *, tune, draws, seed, subsampling_rates):
    from pymc_kameleon import MLDA

    return _sample(fine, lambda: MLDA(coarse_models=levels, subsampling_rates=subsampling_rates,
                                      adaptive_error_model=False),
                   tune=tune, draws=draws, seed=seed)


def _sample(model, make_step, *, tune, draws, seed):
    import pymc as pm

    from pymc_kameleon.testing import SAMPLE_KW

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with model:
            step = make_step()
            idata = pm.sample(draws=draws, tune=tune, chains=4, cores=1, step=step, random_seed=seed,
                              **SAMPLE_KW)
    return step, idata


def summary(idata, names) -> tuple[int, float, float]:
    import arviz as az

    ess = az.ess(idata, var_names=names, method="bulk")
    rhat = az.rhat(idata, var_names=names)
    return (int(min(float(ess[n].min()) for n in names)), max(float(rhat[n].max()) for n in names),
            float(idata.sample_stats["logp_evals"].mean()))


def moment_errors(idata, mean, sd) -> tuple[float, float]:
    """The largest |mean - exact| of mu's two coordinates in MCSE, and the largest relative sd error."""
    from pymc_kameleon.testing import mcse_of_mean

    x = idata.posterior["mu"].values
    z = max(abs(x[..., j].mean() - mean[j]) / mcse_of_mean(x[..., j]) for j in range(2))
    return z, float(np.max(np.abs(x.std(axis=(0, 1)) / sd - 1.0)))


def rough(args) -> list[dict]:
    from pymc_kameleon import GPLevel

    rows = []
    for amp in args.amps:
        for label, hyper in VARIANTS.items():
            for seed in args.seeds:
                fine, coarse, mean, sd = rough_models(amp)
                step, idata = run(fine, [coarse, GPLevel(hyperparameters=hyper)], tune=args.tune,
                                  draws=args.draws, seed=seed, subsampling_rates=[2, 3])
                z, sd_err = moment_errors(idata, mean, sd)
                ess, rhat, fine_per_iter = summary(idata, ["mu"])
                row = {"experiment": f"rough, amp {amp:g}", "variant": label, "seed": seed, "z": z,
                       "sd_err": sd_err, "ess": ess, "rhat": rhat, "fine": fine_per_iter, "gp": gp_fit(step)}
                print(f"# {row}", flush=True)
                rows.append(row)
    return rows


def gpda(args) -> list[dict]:
    from pymc_kameleon import GPDelayedAcceptanceMH

    rows = []
    for amp in args.gpda_amps:
        mean, sd = rough_posterior_moments(amp)
        for label, noise in GPDA_VARIANTS.items():
            for seed in args.seeds:
                step, idata = _sample(gaussian_mean_model(rough=amp),
                                      lambda noise=noise: GPDelayedAcceptanceMH(noise_variance=noise),
                                      tune=args.tune, draws=args.draws, seed=seed)
                z, sd_err = moment_errors(idata, mean, sd)
                ess, rhat, _ = summary(idata, ["mu"])
                row = {"experiment": f"GP-DA-MH, rough fine model, amp {amp:g}", "variant": label,
                       "seed": seed, "z": z, "sd_err": sd_err, "ess": ess, "rhat": rhat,
                       "fine": float(idata.sample_stats["exact_eval"].mean()), "gp": gp_fit(step)}
                print(f"# {row}", flush=True)
                rows.append(row)
    return rows


def compound(args) -> list[dict]:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "steps"))
    from test_mlda_compound import switch_model, z_scores

    from pymc_kameleon import GPLevel

    rows = []
    for label, hyper in VARIANTS.items():
        for seed in args.compound_seeds:
            fine, coarse = switch_model(), switch_model(offset=1.5)
            step, idata = run(fine, [coarse, GPLevel(hyperparameters=hyper)], tune=args.tune,
                              draws=args.compound_draws, seed=seed, subsampling_rates=3)
            z = max(z_scores(idata).values())
            p_by_chain = idata.posterior["z"].values.mean(axis=1)
            ess, rhat, fine_per_iter = summary(idata, ["x"])
            row = {"experiment": "compound", "variant": label, "seed": seed, "z": float(z),
                   "draws": args.compound_draws,
                   "sd_err": math.nan, "ess": ess, "rhat": rhat, "fine": fine_per_iter,
                   "gp": gp_fit(step) + "; P(z=1) by chain " + " ".join(f"{p:.3f}" for p in p_by_chain)}
            print(f"# {row}", flush=True)
            rows.append(row)
    return rows


def report(rows, draws: int) -> None:
    print("\n| experiment | GP | seed | max z-score (MCSE) | max sd error | min ESS | max R-hat | "
          "fine evals / iter | min ESS / fine eval | GP at the end of tuning (last chain) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        sd_err = "–" if math.isnan(r["sd_err"]) else f"{r['sd_err']:.3f}"
        draws_of = r.get("draws", draws)
        print(f"| {r['experiment']} | {r['variant']} | {r['seed']} | {r['z']:.2f} | {sd_err} | {r['ess']} | "
              f"{r['rhat']:.3f} | {r['fine']:.2f} | {r['ess'] / (4 * draws_of * r['fine']):.3f} | "
              f"{r['gp']} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=["rough", "compound", "gpda"],
                        choices=["rough", "compound", "gpda"])
    parser.add_argument("--amps", type=float, nargs="+", default=[0.0, 0.3])
    parser.add_argument("--gpda-amps", type=float, nargs="+", default=[0.0, 0.3, 1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--compound-seeds", type=int, nargs="+", default=[3, 5, 6, 7])
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=5000)
    parser.add_argument("--compound-draws", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="smoke test: one seed, 300 + 300 iterations")
    args = parser.parse_args(argv)
    if args.quick:
        args.amps, args.gpda_amps, args.seeds, args.compound_seeds = [0.3], [0.3], [1], [3]
        args.tune, args.draws, args.compound_draws = 300, 300, 300
    print(f"# {environment_line()}")
    print(f"# command: python benchmarks/mlda_gp_level_noise.py {' '.join(argv or sys.argv[1:])}")
    rows = []
    if "rough" in args.experiments:
        rows += rough(args)
    if "compound" in args.experiments:
        rows += compound(args)
    if "gpda" in args.experiments:
        rows += gpda(args)
    report(rows, args.draws)
    return rows


if __name__ == "__main__":
    main()
