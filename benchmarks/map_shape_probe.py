"""Probe, not a sampler of the package: would Metropolis through a triangular map fitted to a KAMH
run's own draws (``core/adaptation/transport_map.py``) fix the curved posteriors KAMH's defaults leave
unconverged? (Issue 43, decision 0060's "map shape".)

For each seed, ``KameleonMetropolis()`` runs 4 chains x (3000 + 6000) on the posterior; its draws are
scored as ``real_posteriors.py`` scores them. The map (quadratic shifts, log-linear widths) is then
fitted either to the pooled second half of the four chains' tuning draws (``tuning``: what the step
has when tuning ends) or to their 24 000 draws (``draws``: what one refit could have), and 4 chains x
(1000 + 6000) run in the map's reference coordinates u, on the target pi(x(u)) |dx/du|: each step,
with probability 1/2, an independent Student-t draw (10 degrees of freedom, ``MapIndependenceProposal``'s
reference), else a random walk whose scale tunes to 0.234 acceptance in the first 1000 steps and then
freezes (the probe of decision 0060, with the package's map). The chains start at the KAMH chains'
last tuning states. One log-density evaluation per step, as KAMH's draws. A third variant (*tuning,
refitted*) fits the map to the tuning draws, then tunes the map chains for ``--refit-tune`` steps,
refitting the map every ``--refit-every`` of them to the tuning draws and the second half of the map
chains' pooled states so far (what a map shape refitted at pooled windows' ends would see), and
freezes it for the draws.

    python benchmarks/map_shape_probe.py --posteriors banana-8d flower-8d --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread

one_blas_thread()  # before NumPy is imported

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

from pymc_kameleon import KameleonMetropolis  # noqa: E402
from pymc_kameleon.core.adaptation.transport_map import TriangularMap  # noqa: E402
from pymc_kameleon.core.mh import metropolis_accept, mh_log_ratio  # noqa: E402
from pymc_kameleon.core.proposals import standard_t_draw, student_t_log_density  # noqa: E402
from pymc_kameleon.problems.real_posteriors import POSTERIORS  # noqa: E402


def map_chains(log_density, tuning, fit_set, seed, tune=1000, draws=6000, df=10.0, refit_every=0):
    """(chains, draws, d) states in the model's coordinates, and the share of independent draws
    accepted after tuning (module docstring). The chains step in turn; with ``refit_every``, every so
    many tuning steps the map is fitted again to ``fit_set`` and the second half of the chains' states
    so far (pooled), and each chain's reference coordinates follow."""
    chains, _, d = tuning.shape
    rng = np.random.default_rng(seed)
    xs = [tuning[c, -1].copy() for c in range(chains)]
    log_densities = [log_density(x) for x in xs]

    def place(tmap):
        """Each chain's u and its target in u, log pi(x) - log |du/dx|, under ``tmap``."""
        placed = [tmap.to_reference(x) for x in xs]
        return [u for u, _ in placed], [lp - log_det for lp, (_, log_det) in zip(log_densities, placed)]

    tmap = TriangularMap.fit(fit_set)
    us, currents = place(tmap)
    history = np.empty((chains, tune + draws, d))
    log_step = np.full(chains, np.log(2.38 / np.sqrt(d)))
    accepted = tried = 0
    for t in range(tune + draws):
        if refit_every and 0 < t < tune and t % refit_every == 0:
            tmap = TriangularMap.fit(np.concatenate([fit_set, history[:, t // 2:t].reshape(-1, d)]))
            us, currents = place(tmap)
        for c in range(chains):
            independent = rng.random() < 0.5
            if independent:
                u_new = standard_t_draw(d, df, rng)
                correction = student_t_log_density(us[c], df) - student_t_log_density(u_new, df)
            else:
                u_new, correction = us[c] + np.exp(log_step[c]) * rng.standard_normal(d), 0.0
            x_new, log_jacobian = tmap.to_model(u_new)
            value = log_density(x_new)
            new = value + log_jacobian if np.isfinite(value) else -np.inf
            accept, prob = metropolis_accept(mh_log_ratio(new, currents[c]) + correction, rng)
            if accept:
                us[c], currents[c], xs[c], log_densities[c] = u_new, new, x_new, value
            if t < tune and not independent:
                log_step[c] += (prob - 0.234) / (t + 1) ** 0.6
            if t >= tune:
                accepted += independent and accept
                tried += independent
            history[c, t] = xs[c]
    return history[:, tune:], accepted / max(tried, 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posteriors", nargs="+", default=["banana-8d", "flower-8d"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--refit-tune", type=int, default=3000, help="the refitted map chains' tuning steps")
    parser.add_argument("--refit-every", type=int, default=250)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import real_posteriors as rp

    print(environment_line())
    print("KAMH 4 x (3000 + 6000) against Metropolis in a map fitted to its draws, 4 x (1000 + 6000)\n")
    print("| posterior | seed | sampler | map fitted to | min ESS | max R-hat | mean err (sd) | "
          "sd err (log ratio) | independent draws accepted | s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.posteriors:
        model, reference, _ = POSTERIORS[name]()
        (value_var,) = model.value_vars  # the probe takes one untransformed vector (banana, flower)
        logp = model.compile_logp()

        def log_density(x, _name=value_var.name, _logp=logp):
            value = float(_logp({_name: x}))
            return value if np.isfinite(value) else -np.inf

        for seed in args.seeds:
            start = time.perf_counter()
            with model:
                idata = pm.sample(6000, tune=3000, chains=4, cores=1, step=KameleonMetropolis(),
                                  random_seed=seed, discard_tuned_samples=False, progressbar=False,
                                  compute_convergence_checks=False)
            kamh_seconds = time.perf_counter() - start
            names = rp.free_variable_names(model)
            s = rp.compare(rp.scalar_draws(idata.posterior, names), reference)
            print(f"| {name} | {seed} | KAMH | – | {s['min_ess']:.0f} | {s['max_rhat']:.3f} | "
                  f"{s['mean_err']:.3f} | {s['log_sd_err']:.3f} | – | {kamh_seconds:.0f} |", flush=True)
            tuning = idata.warmup_posterior[value_var.name].values
            d = tuning.shape[-1]
            half = tuning[:, tuning.shape[1] // 2:].reshape(-1, d)
            variants = {  # fit set, the map chains' tuning steps, refits every
                "tuning": (half, 1000, 0),
                f"tuning, refitted every {args.refit_every} of {args.refit_tune}": (
                    half, args.refit_tune, args.refit_every),
                "draws": (idata.posterior[value_var.name].values.reshape(-1, d), 1000, 0),
            }
            for source, (fit_set, map_tune, refit_every) in variants.items():
                start = time.perf_counter()
                states, acceptance = map_chains(log_density, tuning, fit_set, seed, tune=map_tune,
                                                refit_every=refit_every)
                map_seconds = time.perf_counter() - start
                posterior = az.from_dict(posterior={value_var.name: states}).posterior
                s = rp.compare(rp.scalar_draws(posterior, names), reference)
                print(f"| {name} | {seed} | map | {source} | {s['min_ess']:.0f} | {s['max_rhat']:.3f} | "
                      f"{s['mean_err']:.3f} | {s['log_sd_err']:.3f} | {acceptance:.2f} | {map_seconds:.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
