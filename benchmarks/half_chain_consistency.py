"""Is a high R-hat a wrong sampler or a short run? Half-chain z-scores on two independent normals.

The target is the real-posterior benchmark's ``two-normals`` (sd 1e-3 and 1e3, exact mean 0).
Each run is 2 chains; each chain is split into halves, as split R-hat does. For every half and
parameter, ``z = half mean / (sd / sqrt(ESS of the half))`` with ArviZ's ESS for the mean. If
the draws are right and the ESS honest, the z-scores are standard normal: variance 1 and about 5%
beyond 2. A biased or stuck sampler gives a larger variance; an ESS that overstates the
information gives one too. The script also prints the median (over runs and parameters) of
ArviZ's rank-normalised split R-hat per parameter.

Usage::

    python benchmarks/half_chain_consistency.py --samplers KameleonMetropolis DEMetropolisZ --seeds 2025 2033
"""

import argparse
import logging
import warnings

import arviz as az
import numpy as np
import pymc as pm

from pymc_kameleon import KameleonMetropolis

SDS = {"a": 1e-3, "b": 1e3}
SAMPLERS = {
    "KameleonMetropolis": KameleonMetropolis,
    "KameleonMetropolis-linear": lambda: KameleonMetropolis(kernel="linear"),
    # The Kameleon mixture from the first window on (by default it joins after 10 000 tuning steps).
    "KameleonMetropolis-mixture": lambda: KameleonMetropolis(kameleon_after=0),
    "Metropolis": pm.Metropolis,
    "DEMetropolisZ": pm.DEMetropolisZ,
}


def run(sampler: str, seeds, tune: int, draws: int) -> dict:
    """Half-chain z-scores and per-parameter R-hats over ``seeds`` (2 chains each)."""
    z, rhat = [], []
    for seed in seeds:
        with pm.Model(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, sd in SDS.items():
                pm.Normal(name, 0.0, sd)
            idata = pm.sample(draws, tune=tune, chains=2, cores=1, step=SAMPLERS[sampler](), random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
        for name, sd in SDS.items():
            x = idata.posterior[name].values
            for half in x.reshape(2 * x.shape[0], -1):
                ess = float(az.ess(half[None, :], method="mean"))
                z.append(half.mean() / (sd / np.sqrt(ess)))
            rhat.append(float(az.rhat(x)))
    return {"z": np.array(z), "rhat": np.array(rhat)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samplers", nargs="+", choices=list(SAMPLERS), default=["KameleonMetropolis"])
    parser.add_argument("--seeds", nargs=2, type=int, default=[2025, 2033], help="first, one past last")
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    seeds = range(*args.seeds)
    print(f"# two normals (sd 1e-3, 1e3), 2 chains x ({args.tune} tune + {args.draws} draws), seeds "
          f"{seeds.start}..{seeds.stop - 1}\n")
    print("| sampler | half-chain z: variance | share beyond 2 | halves | median R-hat per parameter |")
    print("|---|---|---|---|---|")
    out = {}
    for sampler in args.samplers:
        r = out[sampler] = run(sampler, seeds, args.tune, args.draws)
        print(f"| {sampler} | {r['z'].var():.2f} | {np.mean(np.abs(r['z']) > 2):.3f} | {r['z'].size} | "
              f"{np.median(r['rhat']):.4f} |", flush=True)
    return out


if __name__ == "__main__":
    main()
