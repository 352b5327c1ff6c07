"""What one iteration of each step costs beyond the likelihood, and with it, against the dimension.

Every step samples the same target under ``pm.sample`` (``chains`` chains, ``cores=1``): ``x ~ N(0,
10^2 I_d)`` with a black-box likelihood ``-|x|^2 / 2`` (a PyTensor Op whose ``perform`` waits
``--cost`` ms of busy time, then returns; at cost 0 it is the zero-cost log density). Each step
class's ``step`` method is timed from outside (class-level wrapper) and every call is booked to
tuning or draws by its index in its chain, with the likelihood calls made inside it. Reported per
chain iteration, tuning and draws separately:

- the evaluations of the likelihood per iteration (as each implementation really makes them);
- the wall time per iteration at cost 0: the step's own overhead plus a zero-cost density's call;
- the ratio of that time to ``pm.DEMetropolisZ``'s on the same target in the same run;
- tuning's end: the first draw iteration, where our steps finish tuning (KAMH's end-of-tuning exam of
  its independence component, about 200 evaluations and 5 ms at d = 10), in ms and evaluations. It is
  booked with tuning (in the "tuning included" ratio and the ESS per second), not in the draws'
  per-iteration figures, which it inflated by 5 µs and 0.2 evaluations at 1000 draws;
- the time per iteration at a likelihood of 0.1, 1 and 10 ms, *derived* as the time at cost 0 plus
  evaluations times cost; ``--check-cost MS`` samples once more with a real busy wait of that many ms
  (fewer iterations) and prints the measured time beside the derived one;
- for the GP steps, the GP's size (points) at the end of tuning and of the draws.

Timed inside ``pm.sample``, so the population machinery of pooled tuning is included, PyMC's
trace recording not. Our steps' tuning starts with a coordinate scan of 25 d + 50 steps: give ``--tune``
well beyond it (3000 at d = 50), or the draws time the scan's proposal, not the tuned one. Run on an
otherwise idle machine: it is a wall-time measurement.

    OPENBLAS_NUM_THREADS=1 python benchmarks/step_cost.py [--dims 2 10 50] [--tune 1000 --draws 1000]
        [--chains 4] [--samplers ...] [--check-cost 1] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections import defaultdict
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402

SAMPLERS = (
    "KAMH", "GP-DA-MH", "GP-DA-MALA", "Metropolis", "DEMetropolisZ", "Slice", "KAMH-mixture",
    "KAMH-without-independence",
)
REFERENCE = "DEMetropolisZ"
DERIVED_COSTS_MS = (0.1, 1.0, 10.0)


class Ledger:
    """Calls of the likelihood and of the steps, booked to tuning or draws (per process)."""

    def __init__(self):
        self.density_calls = 0
        self.calls = defaultdict(int)  # id(step) -> step calls so far (its index in the chain)
        # "end": the first draw iteration, where our steps finish their tuning (KAMH's end-of-tuning
        # exam of its independence component runs there, decision 0046): a one-off, booked with tuning.
        self.seconds = {"tune": 0.0, "end": 0.0, "draws": 0.0}
        self.iterations = {"tune": 0, "end": 0, "draws": 0}
        self.evaluations = {"tune": 0, "end": 0, "draws": 0}
        self.last_stats = {}  # phase -> the stats of the last step in it


LEDGER = Ledger()


def busy_wait(cost_ms: float) -> None:
    LEDGER.density_calls += 1
    if cost_ms > 0:
        end = time.perf_counter() + cost_ms / 1000.0
        while time.perf_counter() < end:
            pass


def gaussian_log_density(x):
    return -0.5 * float(np.dot(x, x))


def gaussian_gradient(x):
    return -np.asarray(x, dtype=float)


def banana_functions(b: float = 0.1, v: float = 100.0):
    """The banana B(b, v) of Haario et al. (log density up to a constant) and its gradient."""

    def log_density(x):
        bent = x[1] - b * (x[0] ** 2 - v)
        return -0.5 * float(x[0] ** 2 / v + bent**2 + np.dot(x[2:], x[2:]))

    def gradient(x):
        x = np.asarray(x, dtype=float)
        bent = x[1] - b * (x[0] ** 2 - v)
        g = -x.copy()
        g[0] = -x[0] / v + 2.0 * b * x[0] * bent
        g[1] = -bent
        return g

    return log_density, gradient


TARGETS = {"gaussian": (gaussian_log_density, gaussian_gradient), "banana": banana_functions()}


def make_op(cost_ms: float, target: str = "gaussian"):
    """A black-box log likelihood (the target's) that busy-waits ``cost_ms`` per call.

    Its gradient (for GP-DA-MALA's derivative observations) is a second black box of the same cost,
    so a step that evaluates value and gradient makes two calls.
    """
    log_density, gradient = TARGETS[target]
    import pytensor.tensor as pt
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class BusyLikelihoodGradient(Op):
        __props__ = ("cost",)

        def __init__(self, cost):
            self.cost = float(cost)

        def make_node(self, x):
            x = pt.as_tensor_variable(x)
            return Apply(self, [x], [x.type()])

        def perform(self, node, inputs, output_storage):
            busy_wait(self.cost)
            output_storage[0][0] = gradient(inputs[0])

    class BusyLikelihood(Op):
        __props__ = ("cost",)

        def __init__(self, cost):
            self.cost = float(cost)

        def make_node(self, x):
            return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

        def perform(self, node, inputs, output_storage):
            busy_wait(self.cost)
            output_storage[0][0] = np.asarray(log_density(inputs[0]))

        def L_op(self, inputs, outputs, output_grads):
            return [output_grads[0] * BusyLikelihoodGradient(self.cost)(inputs[0])]

    return BusyLikelihood(cost_ms)


def model_for(d: int, cost_ms: float, target: str = "gaussian"):
    import pymc as pm

    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 10.0 if target == "gaussian" else 100.0, shape=d)
        pm.Potential("likelihood", make_op(cost_ms, target)(x))
    return model


def make_step(name: str):
    import pymc as pm

    import pymc_kameleon as pk

    makers = {
        "KAMH": pk.KameleonMetropolis,
        "GP-DA-MH": pk.GPDelayedAcceptanceMH,
        "GP-DA-MALA": pk.GPDelayedAcceptanceMALA,
        "Metropolis": pm.Metropolis,
        "DEMetropolisZ": pm.DEMetropolisZ,
        "Slice": pm.Slice,
        # The Kameleon mixture from the first window on (by default it joins after 10 000 tuning steps).
        "KAMH-mixture": partial(pk.KameleonMetropolis, kameleon_after=0),
        # Without the independence component (the default before decision record 0038).
        "KAMH-without-independence": partial(pk.KameleonMetropolis, independence_weight=0),
    }
    return makers[name]()


def timed_class(step, tune: int, draws: int):
    """Wrap ``type(step).step`` with the ledger's timer; returns a function that undoes it."""
    cls = type(step)
    original = cls.__dict__.get("step")
    inherited = cls.step

    def step_method(self, point):
        index = LEDGER.calls[id(self)] % (tune + draws)
        LEDGER.calls[id(self)] += 1
        phase = "tune" if index < tune else "end" if index == tune else "draws"
        calls_before = LEDGER.density_calls
        start = time.perf_counter()
        result = inherited(self, point)
        LEDGER.seconds[phase] += time.perf_counter() - start
        LEDGER.iterations[phase] += 1
        LEDGER.evaluations[phase] += LEDGER.density_calls - calls_before
        LEDGER.last_stats[phase] = result[1][0] if isinstance(result, tuple) and result[1] else {}
        return result

    cls.step = step_method

    def undo():
        if original is None:
            del cls.step
        else:
            cls.step = original

    return undo


def measure(name: str, d: int, cost_ms: float, tune: int, draws: int, chains: int, seed: int,
            target: str = "gaussian") -> dict:
    """Sample once and return the per-iteration figures of one step (and its smallest bulk ESS)."""
    import arviz as az
    import pymc as pm

    global LEDGER
    LEDGER = Ledger()
    model = model_for(d, cost_ms, target)
    with model:
        step = make_step(name)
        undo = timed_class(step, tune, draws)
        wall = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=1, step=step,
                                  random_seed=seed, progressbar=False, compute_convergence_checks=False)
        finally:
            undo()
        wall = time.perf_counter() - wall
    row = {"sampler": name, "d": d, "cost_ms": cost_ms, "wall": wall, "seed": seed,
           "tune": tune, "draws": draws, "chains": chains,
           "ess": float(np.min(az.ess(idata, var_names=["x"], method="bulk")["x"].values))}
    for phase in ("tune", "end", "draws"):
        n = max(LEDGER.iterations[phase], 1)
        row[f"us_{phase}"] = 1e6 * LEDGER.seconds[phase] / n
        row[f"evals_{phase}"] = LEDGER.evaluations[phase] / n
    for phase in ("tune", "draws"):
        row[f"gp_points_{phase}"] = LEDGER.last_stats.get(phase, {}).get("gp_points")
    row["us_all"] = 1e6 * sum(LEDGER.seconds.values()) / max(sum(LEDGER.iterations.values()), 1)
    return row


def fmt_points(value) -> str:
    return "–" if value is None else f"{int(value)}"


def report(rows: list[dict], d: int) -> None:
    reference = next((r for r in rows if r["sampler"] == REFERENCE), None)
    print(f"\n## d = {d}: per chain iteration, likelihood of zero cost\n")
    print("| step | evals/iter tune | evals/iter draws | µs/iter tune | µs/iter draws | "
          f"× {REFERENCE} draws | × {REFERENCE} tuning included | tuning's end: ms, evals | "
          "GP points (tune, draws) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio_draws = ratio_all = "–"
        if reference is not None:
            ratio_draws = f"{r['us_draws'] / reference['us_draws']:.2f}"
            ratio_all = f"{r['us_all'] / reference['us_all']:.2f}"
        print(f"| {r['sampler']} | {r['evals_tune']:.2f} | {r['evals_draws']:.2f} | {r['us_tune']:.0f} | "
              f"{r['us_draws']:.0f} | {ratio_draws} | {ratio_all} | "
              f"{r['us_end'] / 1e3:.2g}, {r['evals_end']:.0f} | "
              f"{fmt_points(r['gp_points_tune'])}, {fmt_points(r['gp_points_draws'])} |")
    print(f"\n## d = {d}: ms per draw iteration with a likelihood of c ms (derived: time at cost 0 + "
          "evaluations × c)\n")
    print("| step | " + " | ".join(f"c = {c:g} ms" for c in DERIVED_COSTS_MS) + " |")
    print("|---|" + "---|" * len(DERIVED_COSTS_MS))
    for r in rows:
        cells = [f"{(r['us_draws'] / 1000 + r['evals_draws'] * c):.3g}" for c in DERIVED_COSTS_MS]
        print(f"| {r['sampler']} | " + " | ".join(cells) + " |")


CROSSOVER_GRID_MS = np.geomspace(1e-3, 1e3, 601)


def seconds_per_chain(row: dict, cost_ms: float) -> float:
    """A chain's whole run (tuning and draws) with a likelihood of ``cost_ms``: the time at cost 0 plus
    the evaluations times the cost, in each phase."""
    tune = row["tune"] * (row["us_tune"] / 1e3 + row["evals_tune"] * cost_ms)
    end = row["us_end"] / 1e3 + row["evals_end"] * cost_ms
    draws = (row["draws"] - 1) * (row["us_draws"] / 1e3 + row["evals_draws"] * cost_ms)
    return (tune + end + draws) / 1e3


def ess_per_second(row: dict, cost_ms: float) -> float:
    """Smallest bulk ESS per second of one core running the chains one after the other."""
    return row["ess"] / (row["chains"] * seconds_per_chain(row, cost_ms))


def beats_from(ours: dict, peer: dict) -> str:
    """The likelihood cost from which ``ours`` has at least ``peer``'s ESS per second at every larger
    cost on the grid (1 µs to 1 s): "always", a cost, or "never"."""
    wins = [ess_per_second(ours, c) >= ess_per_second(peer, c) for c in CROSSOVER_GRID_MS]
    if all(wins):
        return "always"
    if not wins[-1]:
        return "never"
    last_loss = max(i for i, won in enumerate(wins) if not won)
    return f"{CROSSOVER_GRID_MS[last_loss + 1]:.2g} ms"


def report_ess(runs: dict, d: int, target: str) -> None:
    """ESS per second against the likelihood's cost, and from which cost each step beats the peers."""
    seeds = sorted(runs)
    names = [r["sampler"] for r in runs[seeds[0]]]
    by = {seed: {r["sampler"]: r for r in runs[seed]} for seed in seeds}
    peers = [p for p in ("DEMetropolisZ", "Slice", "KAMH") if p in names]
    costs = (0.0,) + DERIVED_COSTS_MS
    print(f"\n## {target}, d = {d}: smallest bulk ESS per second, tuning included, with a likelihood of c ms "
          f"(derived; median over seeds {', '.join(map(str, seeds))})\n")
    print("| step | min ESS per seed | " + " | ".join(f"c = {c:g} ms" for c in costs) + " | "
          + " | ".join(f"beats {p} from (per seed)" for p in peers) + " |")
    print("|---|---|" + "---|" * (len(costs) + len(peers)))
    for name in names:
        ess = ", ".join(f"{by[seed][name]['ess']:.0f}" for seed in seeds)
        cells = [f"{np.median([ess_per_second(by[seed][name], c) for seed in seeds]):.3g}" for c in costs]
        crossings = []
        for peer in peers:
            crossings.append("–" if name == peer else
                             ", ".join(beats_from(by[seed][name], by[seed][peer]) for seed in seeds))
        print(f"| {name} | {ess} | " + " | ".join(cells) + " | " + " | ".join(crossings) + " |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[2, 10, 50])
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1],
                        help="one run per seed; the per-iteration tables are the first seed's")
    parser.add_argument("--target", choices=sorted(TARGETS), default="gaussian",
                        help="the likelihood: a standard normal, or the banana B(0.1, 100) of Haario et al.")
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--check-cost", type=float, default=None, metavar="MS",
                        help="also sample at d = the middle dimension with a real busy wait of MS ms "
                             "(a tenth of the iterations) and compare with the derived time")
    parser.add_argument("--quick", action="store_true", help="d = 2 and 5, 100 + 100 iterations, 2 chains")
    args = parser.parse_args(argv)
    if args.quick:
        args.dims, args.tune, args.draws, args.chains = [2, 5], 100, 100, 2

    print(f"# {environment_line()}")
    print(f"# target {args.target}, chains {args.chains}, tune {args.tune}, draws {args.draws}, "
          f"seeds {args.seeds}, cores=1")
    command = " ".join(argv if argv is not None else sys.argv[1:])
    print(f"# command: OPENBLAS_NUM_THREADS=1 python benchmarks/step_cost.py {command}")
    seed = args.seeds[0]
    for name in args.samplers:  # one-off costs (numba's cached loops, imports) outside the timings
        measure(name, 2, 0.0, 30, 30, 2, seed, args.target)
    results = {}
    for d in args.dims:
        runs = {s: [measure(name, d, 0.0, args.tune, args.draws, args.chains, s, args.target)
                    for name in args.samplers] for s in args.seeds}
        results[d] = runs[seed]
        report(runs[seed], d)
        report_ess(runs, d, args.target)
        sys.stdout.flush()
    if args.check_cost:
        d = args.dims[len(args.dims) // 2]
        tune, draws = max(args.tune // 10, 50), max(args.draws // 10, 50)
        print(f"\n## Check at d = {d}: a real {args.check_cost:g} ms likelihood, {tune} + {draws} "
              "iterations\n")
        print("| step | measured ms/iter draws | derived from cost 0 (this run's evals) |")
        print("|---|---|---|")
        zero = {r["sampler"]: r for r in results[d]}
        for name in args.samplers:
            r = measure(name, d, args.check_cost, tune, draws, args.chains, seed, args.target)
            derived = zero[name]["us_draws"] / 1000 + r["evals_draws"] * args.check_cost
            print(f"| {name} | {r['us_draws'] / 1000:.3g} | {derived:.3g} |")
    return results


if __name__ == "__main__":
    main()
