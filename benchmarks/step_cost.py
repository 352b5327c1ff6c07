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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402

SAMPLERS = ("KAMH", "GP-DA-MH", "GP-DA-MALA", "Metropolis", "DEMetropolisZ", "Slice")
REFERENCE = "DEMetropolisZ"
DERIVED_COSTS_MS = (0.1, 1.0, 10.0)


class Ledger:
    """Calls of the likelihood and of the steps, booked to tuning or draws (per process)."""

    def __init__(self):
        self.density_calls = 0
        self.calls = defaultdict(int)  # id(step) -> step calls so far (its index in the chain)
        self.seconds = {"tune": 0.0, "draws": 0.0}
        self.iterations = {"tune": 0, "draws": 0}
        self.evaluations = {"tune": 0, "draws": 0}
        self.last_stats = {}  # phase -> the stats of the last step in it


LEDGER = Ledger()


def busy_wait(cost_ms: float) -> None:
    LEDGER.density_calls += 1
    if cost_ms > 0:
        end = time.perf_counter() + cost_ms / 1000.0
        while time.perf_counter() < end:
            pass


def make_op(cost_ms: float):
    """A black-box log likelihood ``-|x|^2 / 2`` that busy-waits ``cost_ms`` per call.

    Its gradient (for GP-DA-MALA's derivative observations) is a second black box of the same cost,
    so a step that evaluates value and gradient makes two calls.
    """
    import pytensor.tensor as pt
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class BusyGaussianGradient(Op):
        __props__ = ("cost",)

        def __init__(self, cost):
            self.cost = float(cost)

        def make_node(self, x):
            x = pt.as_tensor_variable(x)
            return Apply(self, [x], [x.type()])

        def perform(self, node, inputs, output_storage):
            busy_wait(self.cost)
            output_storage[0][0] = -np.asarray(inputs[0], dtype=float)

    class BusyGaussian(Op):
        __props__ = ("cost",)

        def __init__(self, cost):
            self.cost = float(cost)

        def make_node(self, x):
            return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

        def perform(self, node, inputs, output_storage):
            busy_wait(self.cost)
            x = inputs[0]
            output_storage[0][0] = np.asarray(-0.5 * float(np.dot(x, x)))

        def L_op(self, inputs, outputs, output_grads):
            return [output_grads[0] * BusyGaussianGradient(self.cost)(inputs[0])]

    return BusyGaussian(cost_ms)


def model_for(d: int, cost_ms: float):
    import pymc as pm

    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 10.0, shape=d)
        pm.Potential("likelihood", make_op(cost_ms)(x))
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
        phase = "tune" if index < tune else "draws"
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


def measure(name: str, d: int, cost_ms: float, tune: int, draws: int, chains: int, seed: int) -> dict:
    """Sample once and return the per-iteration figures of one step."""
    import pymc as pm

    global LEDGER
    LEDGER = Ledger()
    model = model_for(d, cost_ms)
    with model:
        step = make_step(name)
        undo = timed_class(step, tune, draws)
        wall = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pm.sample(draws=draws, tune=tune, chains=chains, cores=1, step=step, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
        finally:
            undo()
        wall = time.perf_counter() - wall
    row = {"sampler": name, "d": d, "cost_ms": cost_ms, "wall": wall}
    for phase in ("tune", "draws"):
        n = max(LEDGER.iterations[phase], 1)
        row[f"us_{phase}"] = 1e6 * LEDGER.seconds[phase] / n
        row[f"evals_{phase}"] = LEDGER.evaluations[phase] / n
        row[f"gp_points_{phase}"] = LEDGER.last_stats.get(phase, {}).get("gp_points")
    row["us_all"] = 1e6 * sum(LEDGER.seconds.values()) / max(sum(LEDGER.iterations.values()), 1)
    return row


def fmt_points(value) -> str:
    return "–" if value is None else f"{int(value)}"


def report(rows: list[dict], d: int) -> None:
    reference = next((r for r in rows if r["sampler"] == REFERENCE), None)
    print(f"\n## d = {d}: per chain iteration, likelihood of zero cost\n")
    print("| step | evals/iter tune | evals/iter draws | µs/iter tune | µs/iter draws | "
          f"× {REFERENCE} draws | × {REFERENCE} tuning included | GP points (tune, draws) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio_draws = ratio_all = "–"
        if reference is not None:
            ratio_draws = f"{r['us_draws'] / reference['us_draws']:.2f}"
            ratio_all = f"{r['us_all'] / reference['us_all']:.2f}"
        print(f"| {r['sampler']} | {r['evals_tune']:.2f} | {r['evals_draws']:.2f} | {r['us_tune']:.0f} | "
              f"{r['us_draws']:.0f} | {ratio_draws} | {ratio_all} | "
              f"{fmt_points(r['gp_points_tune'])}, {fmt_points(r['gp_points_draws'])} |")
    print(f"\n## d = {d}: ms per draw iteration with a likelihood of c ms (derived: time at cost 0 + "
          "evaluations × c)\n")
    print("| step | " + " | ".join(f"c = {c:g} ms" for c in DERIVED_COSTS_MS) + " |")
    print("|---|" + "---|" * len(DERIVED_COSTS_MS))
    for r in rows:
        cells = [f"{(r['us_draws'] / 1000 + r['evals_draws'] * c):.3g}" for c in DERIVED_COSTS_MS]
        print(f"| {r['sampler']} | " + " | ".join(cells) + " |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[2, 10, 50])
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--check-cost", type=float, default=None, metavar="MS",
                        help="also sample at d = the middle dimension with a real busy wait of MS ms "
                             "(a tenth of the iterations) and compare with the derived time")
    parser.add_argument("--quick", action="store_true", help="d = 2 and 5, 100 + 100 iterations, 2 chains")
    args = parser.parse_args(argv)
    if args.quick:
        args.dims, args.tune, args.draws, args.chains = [2, 5], 100, 100, 2

    print(f"# {environment_line()}")
    print(f"# chains {args.chains}, tune {args.tune}, draws {args.draws}, seed {args.seed}, cores=1")
    command = " ".join(argv if argv is not None else sys.argv[1:])
    print(f"# command: OPENBLAS_NUM_THREADS=1 python benchmarks/step_cost.py {command}")
    for name in args.samplers:  # one-off costs (numba's cached loops, imports) outside the timings
        measure(name, 2, 0.0, 30, 30, 2, args.seed)
    results = {}
    for d in args.dims:
        rows = [measure(name, d, 0.0, args.tune, args.draws, args.chains, args.seed)
                for name in args.samplers]
        results[d] = rows
        report(rows, d)
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
            r = measure(name, d, args.check_cost, tune, draws, args.chains, args.seed)
            derived = zero[name]["us_draws"] / 1000 + r["evals_draws"] * args.check_cost
            print(f"| {name} | {r['us_draws'] / 1000:.3g} | {derived:.3g} |")
    return results


if __name__ == "__main__":
    main()
