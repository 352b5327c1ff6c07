"""Serial against a 2-worker Dask LocalCluster, same seed: KASS on an ODE model, pseudo-marginal KAMH.

Issue 13.

- **KASS** (``pm.sample_smc(kernel=KASS, executor=...)``) on a Lotka-Volterra model observed at
  several sites (5 sweeps per stage): the likelihood is a black-box PyTensor Op that solves one
  ODE per site with ``scipy.integrate.solve_ivp`` (DOP853, rtol 1e-10), about 50 ms per
  evaluation on this machine. Parameters: the prey growth rate ``a`` and the predation rate ``b``
  (log-normal priors); the other rates and the initial populations are known; log-normal
  observation noise.
- **Pseudo-marginal KAMH** (``pm.sample(step=KameleonMetropolis())``) on the random-effects model of
  ``correlated_pseudo_marginal.py`` with an importance-sampling estimator of about 55 ms, split into
  ``replicates=2`` halves (``PseudoMarginalPotential(..., replicates=2, executor=...)``).

Each configuration runs serially (``executor=None``) and on a ``LocalCluster(n_workers=2,
threads_per_worker=1, processes=True)``, one chain, with the same seed; the pseudo-marginal
case also on a local ``ProcessPoolExecutor(2)``, whose round trip is far cheaper than Dask's.
Reported: wall time, speed-up, the number of likelihood evaluations, the overhead per evaluation
(``(t_parallel - t_serial / 2) / evaluations``: what the parallel run costs beyond a perfect split),
and whether the draws (and for KASS the log evidence) are bit-for-bit identical.

With ``--cost-ms C`` the KASS run's likelihood is instead one of a fixed cost: the same Gaussian
shape in (log a, log b) as the ODE's posterior, plus C ms of single-threaded matrix products. An ODE
solve's cost depends on the parameters (the 15.6 ms site measured at the true values averaged 24 ms
over a KASS run, its prior draws included), so only a fixed cost puts a figure on "a C ms
likelihood".

    python benchmarks/scale_out.py            # the full run (RESULTS.md): 2 seeds
    python benchmarks/scale_out.py --quick    # smoke test: cheap likelihoods, small runs
    python benchmarks/scale_out.py --runs kass --cost-ms 10 --seeds 1 2 3   # issue 45's 10 ms
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

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from pytensor.graph.basic import Apply  # noqa: E402
from pytensor.graph.op import Op  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

from pymc_kameleon import KameleonMetropolis, PseudoMarginalPotential  # noqa: E402
from pymc_kameleon.smc import KASS, log_evidence  # noqa: E402

TRUE_A, TRUE_B, PREDATOR_DEATH, PREDATION_GAIN, NOISE = 0.55, 0.028, 0.4, 0.6, 0.1
TIMES = np.linspace(0, 60, 120)
# Sweeps per stage, fixed: the comparison is of wall time at equal work, and the default rule's
# 10-20 sweeps per stage would make the serial run take 15 minutes.
KASS_SWEEPS = 5


def lotka_volterra(a, b, start):
    """Prey and predator counts at ``TIMES`` (two rows), from ``start``."""

    def rhs(t, z):
        x, y = z
        return [a * x - b * x * y, PREDATION_GAIN * b * x * y - PREDATOR_DEATH * y]

    sol = solve_ivp(rhs, (TIMES[0], TIMES[-1]), start, t_eval=TIMES, method="DOP853", rtol=1e-10, atol=1e-12)
    return sol.y if sol.success else None


def site_starts(n_sites: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.column_stack([rng.uniform(8, 14, n_sites), rng.uniform(3, 7, n_sites)])


def ode_data(starts) -> np.ndarray:
    rng = np.random.default_rng(1)
    noise = NOISE * rng.standard_normal((len(starts), 2, TIMES.size))
    return np.stack([np.log(lotka_volterra(TRUE_A, TRUE_B, s)) for s in starts]) + noise


class LotkaVolterraLoglik(Op):
    """log p(data | a, b): one ODE solve per site, in Python (no gradient)."""

    def __init__(self, starts, log_data):
        self.starts, self.log_data = starts, log_data

    def make_node(self, a, b):
        return Apply(self, [pt.as_tensor_variable(a), pt.as_tensor_variable(b)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        a, b = (float(v) for v in inputs)
        total = 0.0
        for start, log_y in zip(self.starts, self.log_data):
            z = lotka_volterra(a, b, start)
            if z is None or np.any(z <= 0):
                total = -np.inf
                break
            total += -0.5 * np.sum((log_y - np.log(z)) ** 2) / NOISE**2
        output_storage[0][0] = np.asarray(total)


def ode_model(n_sites: int):
    starts = site_starts(n_sites)
    with pm.Model() as model:
        a = pm.LogNormal("a", np.log(0.5), 0.5)
        b = pm.LogNormal("b", np.log(0.03), 0.5)
        pm.Potential("loglik", LotkaVolterraLoglik(starts, ode_data(starts))(a, b))
    return model


class FixedCostLoglik(Op):
    """A Gaussian log likelihood in (log a, log b) about the true rates, after ``work`` products of
    two 64 x 64 matrices: a black box of fixed cost (``--cost-ms``), whose work is the same in every
    process it is pickled to."""

    _size = 64

    def __init__(self, work: int):
        self.work = int(work)
        # Orthogonal, so that its powers neither overflow nor sink into slow subnormal numbers.
        self._matrix = np.linalg.qr(np.random.default_rng(3).standard_normal((self._size, self._size)))[0]

    def make_node(self, a, b):
        return Apply(self, [pt.as_tensor_variable(a), pt.as_tensor_variable(b)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        product = self._matrix
        for _ in range(self.work):
            product = self._matrix @ product
        shift = 0.0 * float(product[0, 0])  # uses the products
        a, b = (float(v) for v in inputs)
        z = (np.log(a) - np.log(TRUE_A)) / 0.02, (np.log(b) - np.log(TRUE_B)) / 0.05
        output_storage[0][0] = np.asarray(-0.5 * (z[0] ** 2 + z[1] ** 2) + shift)


def fixed_cost_model(cost_ms: float):
    """a, b as in :func:`ode_model`, with a :class:`FixedCostLoglik` calibrated to ``cost_ms``."""
    probe = FixedCostLoglik(200)
    per_product = cost_ms_of(lambda: probe.perform(None, [TRUE_A, TRUE_B], [[None]])) / 200
    op = FixedCostLoglik(max(1, round(cost_ms / per_product)))
    with pm.Model() as model:
        a = pm.LogNormal("a", np.log(0.5), 0.5)
        b = pm.LogNormal("b", np.log(0.03), 0.5)
        pm.Potential("loglik", op(a, b))
    return model


# ---------------------------------------------------------------- pseudo-marginal
def random_effects_data(n_obs: int) -> np.ndarray:
    rng = np.random.default_rng(2)
    return 0.5 + rng.standard_normal(n_obs) + rng.standard_normal(n_obs)


def make_estimator(y, n_samples: int):
    """log prod_t (1/N) sum_i N(y_t; mu + sigma z_ti, 1), z ~ N(0, 1) drawn from ``rng``."""

    def log_estimator(mu, sigma, rng):
        z = rng.standard_normal((n_samples, y.size))
        log_w = -0.5 * (y - mu - sigma * z) ** 2
        top = log_w.max(axis=0)
        log_means = top + np.log(np.exp(log_w - top).mean(axis=0))
        return float(np.sum(log_means) - 0.5 * y.size * np.log(2 * np.pi))

    return log_estimator


def pseudo_marginal_model(y, n_samples: int, executor):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        sigma = pm.HalfNormal("sigma", 2)
        PseudoMarginalPotential(
            "lik", make_estimator(y, n_samples), inputs=[mu, sigma], replicates=2, executor=executor
        )
    return model


# ---------------------------------------------------------------- timing
def time_call(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def cost_ms_of(fn, repeats: int = 5) -> float:
    fn()  # warm up
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t) / repeats * 1000


def run_kass(model, draws, seed, executor, sweeps=KASS_SWEEPS, chain_length=None):
    moves = {"n_steps": sweeps}
    if chain_length is not None:
        moves = {"waste_free": True, "chain_length": chain_length}
    with model:
        return pm.sample_smc(
            draws, kernel=KASS, chains=1, cores=1, random_seed=seed, executor=executor, **moves,
            progressbar=False, compute_convergence_checks=False,
        )


def run_kamh(model, draws, tune, seed):
    with model:
        return pm.sample(
            draws, tune=tune, step=KameleonMetropolis(), chains=1, cores=1, random_seed=seed,
            progressbar=False, compute_convergence_checks=False,
        )


def row(name, seed, evals, t_serial, engine, t_parallel, identical):
    overhead = (t_parallel - t_serial / 2) / evals * 1000
    return (
        f"| {name} | {seed} | {evals} | {t_serial:.1f} | {engine} | {t_parallel:.1f} | "
        f"{t_serial / t_parallel:.2f} | {overhead:.2f} | {'yes' if identical else 'NO'} |"
    )


HEADER = (
    "| run | seed | likelihood evaluations | serial (s) | 2 workers | parallel (s) | speed-up "
    "| overhead per evaluation (ms) | identical draws |\n|---|---|---|---|---|---|---|---|---|"
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="cheap likelihoods and small runs (smoke test)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    runs = ["kass", "pseudo-marginal"]
    parser.add_argument("--runs", nargs="+", choices=runs, default=runs)
    parser.add_argument("--sites", type=int, default=None, help="ODE sites (4: about 50 ms per evaluation)")
    parser.add_argument("--particles", type=int, default=None, help="KASS particles (default 100)")
    parser.add_argument("--waste-free", type=int, default=None, metavar="P",
                        help="KASS waste-free with chains of P states instead of 5 sweeps per stage")
    parser.add_argument("--cost-ms", type=float, default=None, metavar="C",
                        help="KASS on a fixed-cost likelihood of C ms instead of the ODE model")
    args = parser.parse_args(argv)
    from concurrent.futures import ProcessPoolExecutor

    from distributed import Client, LocalCluster

    quick = args.quick
    seeds = args.seeds or ([1] if quick else [1, 2])
    n_sites = args.sites or (1 if quick else 4)
    particles = args.particles or (12 if quick else 100)
    sweeps = 2 if quick else KASS_SWEEPS  # quick: 30 ms ODE solves, so fewer moves per stage
    y = random_effects_data(200)
    n_samples = 40 if quick else 20000
    draws, tune = (20, 20) if quick else (150, 150)
    warnings.filterwarnings("ignore")

    print(environment_line())
    model = ode_model(n_sites) if args.cost_ms is None else fixed_cost_model(args.cost_ms)
    op = model.potentials[0].owner.op
    likelihood_ms = cost_ms_of(lambda: op.perform(None, [0.5, 0.03], [[None]]))
    if args.cost_ms is None:
        print(f"ODE likelihood ({n_sites} sites): {likelihood_ms:.1f} ms per evaluation at the true rates")
    else:
        print(f"Fixed-cost likelihood: {likelihood_ms:.1f} ms per evaluation ({op.work} matrix products)")
    estimator = make_estimator(y, n_samples)
    rng = np.random.default_rng(0)
    estimate_ms = cost_ms_of(lambda: estimator(0.5, 1.0, rng))
    print(f"Importance-sampling estimate (N={n_samples}, T={y.size}): {estimate_ms:.1f} ms per estimate, "
          "split into 2 replicates")
    print(HEADER, flush=True)

    def same(a, b, names):
        return all(np.array_equal(a.posterior[v].values, b.posterior[v].values) for v in names)

    rows = []

    def report(*fields):
        rows.append(row(*fields))
        print(rows[-1], flush=True)

    def kass(seed, executor):
        return run_kass(model, particles, seed, executor, sweeps, args.waste_free)

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, Client(cluster) as client, ProcessPoolExecutor(2) as pool:
        for seed in seeds:
            if "kass" in args.runs:
                serial, t_serial = time_call(lambda s=seed: kass(s, None))
                dask, t_dask = time_call(lambda s=seed: kass(s, client.get_executor()))
                identical = same(serial, dask, ("a", "b")) and np.array_equal(
                    log_evidence(serial).log_z, log_evidence(dask).log_z
                )
                stage_evals = np.asarray(serial.sample_stats["likelihood_evals"].values[0], dtype=float)
                evals = int(particles + np.sum(stage_evals))
                label = f", waste-free P={args.waste_free}" if args.waste_free else ""
                name = f"KASS, {particles} particles{label}"
                report(name, seed, evals, t_serial, "Dask", t_dask, identical)
            if "pseudo-marginal" in args.runs:

                def pseudo_marginal(executor, seed=seed):
                    return run_kamh(pseudo_marginal_model(y, n_samples // 2, executor), draws, tune, seed)

                name, evals = f"PM KAMH, {tune}+{draws} steps", tune + draws + 1
                serial, t_serial = time_call(lambda: pseudo_marginal(None))
                for engine, executor in [("Dask", client.get_executor()), ("ProcessPoolExecutor", pool)]:
                    parallel, t_parallel = time_call(lambda ex=executor: pseudo_marginal(ex))
                    identical = same(serial, parallel, ("mu", "sigma"))
                    report(name, seed, evals, t_serial, engine, t_parallel, identical)
    print()
    print(HEADER)
    for r in rows:
        print(r)
    return rows


if __name__ == "__main__":
    main()
