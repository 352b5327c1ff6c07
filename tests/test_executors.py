"""``executor=`` options without a cluster: chunking, pickling, errors, and the replicated estimate."""

import pickle
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pymc as pm
import pytest
from scipy.special import logsumexp

from pymc_kameleon import PseudoMarginalPotential
from pymc_kameleon.executors import ExecutorOption, ParallelEvaluationError
from pymc_kameleon.smc import KASS, log_evidence


def square(x):
    return x * x


def test_map_rows_keeps_order_and_makes_one_chunk_per_worker():
    with ThreadPoolExecutor(3) as pool:
        option = ExecutorOption(pool, "test")
        assert option.n_workers() == 3
        assert option.map_rows(square, [(i,) for i in range(10)]) == [i * i for i in range(10)]
        assert option.map_rows(square, []) == []
        blocks = option.map_blocks(lambda a: a.sum(), np.arange(9.0))
        assert len(blocks) == 3 and sum(blocks) == 36.0


def test_a_raising_row_is_reported_with_its_inputs():
    def fails_at_three(x):
        if x == 3:
            raise ArithmeticError("bad x\nand pages of details")
        return x

    with ThreadPoolExecutor(2) as pool:
        option = ExecutorOption(pool, "owner")
        rows = [(i,) for i in range(6)]
        results = option.map_rows(fails_at_three, rows)
        with pytest.raises(ParallelEvaluationError, match=r"owner: ArithmeticError: bad x \(at x=3\)"):
            option.raise_failure(results, rows, describe=lambda row: f"x={row[0]}")


def exits(x):
    import os

    os._exit(1)


def test_a_dead_worker_is_reported_in_one_sentence():
    """A process that dies breaks the pool; the pool's message ends with a full stop, which read
    '... while the future was running or pending.. A worker may have died'."""
    with ProcessPoolExecutor(1) as pool:
        option = ExecutorOption(pool, "owner")
        with pytest.raises(ParallelEvaluationError, match="BrokenProcessPool") as err:
            option.map_rows(exits, [(1,)], describe=lambda row: f"x={row[0]}")
    assert "(first row: x=1)" in str(err.value)
    assert "running or pending (a worker may have died" in str(err.value)


def test_bad_executor_options_are_refused():
    with pytest.raises(TypeError, match="executor must be a concurrent.futures.Executor"):
        ExecutorOption(4, "KASS")
    option = ExecutorOption(lambda: "not an executor", "KASS")
    with pytest.raises(TypeError, match="factory returned a str"):
        option.get()


def test_pickling_needs_a_factory():
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(TypeError, match="zero-argument callable"):
            pickle.dumps(ExecutorOption(pool, "KASS"))
    option = pickle.loads(pickle.dumps(ExecutorOption(_two_threads, "KASS")))
    assert option.map_rows(square, [(2,), (3,)]) == [4, 9]


def _two_threads():
    return ThreadPoolExecutor(2)


def small_model():
    with pm.Model() as model:
        x = pm.Normal("x", 0, 1, shape=2)
        pm.Normal("y", x.sum(), 1, observed=np.linspace(-1, 1, 20))
    return model


def test_kass_on_a_process_pool_equals_serial():
    def run(executor):
        with small_model():
            return pm.sample_smc(
                200, kernel=KASS, chains=2, random_seed=3, executor=executor, progressbar=False,
                compute_convergence_checks=False,
            )

    serial = run(None)
    with ProcessPoolExecutor(2) as pool:
        pooled = run(pool)
    np.testing.assert_array_equal(serial.posterior["x"].values, pooled.posterior["x"].values)
    np.testing.assert_array_equal(log_evidence(serial).log_z, log_evidence(pooled).log_z)


def uniform_estimator(theta, rng):
    return np.log(rng.random())


def test_replicated_estimate_is_the_log_mean_of_spawned_parts():
    with pm.Model():
        theta = pm.Normal("theta")
        lik = PseudoMarginalPotential("lik", uniform_estimator, inputs=[theta], replicates=3)
    op = lik.owner.op
    value = op.estimate([np.array(0.0)], np.random.default_rng(42))
    parts = [np.log(child.random()) for child in np.random.default_rng(42).spawn(3)]
    assert value == pytest.approx(logsumexp(parts) - np.log(3), rel=1e-14)
    with ThreadPoolExecutor(2) as pool:
        op.executor = ExecutorOption(pool, "test")
        assert op.estimate([np.array(0.0)], np.random.default_rng(42)) == value


def test_correlated_replicates_take_one_slice_of_u_each():
    def log_estimator(theta, u):
        assert u.shape == (4,)
        return float(u.sum())

    with pm.Model():
        theta = pm.Normal("theta")
        lik = PseudoMarginalPotential("lik", log_estimator, inputs=[theta], auxiliary_shape=4, replicates=2)
    op = lik.owner.op
    assert op.auxiliary_shape == (2, 4)
    u = np.arange(8.0).reshape(2, 4)
    assert op.estimate([np.array(0.0)], None, u) == pytest.approx(logsumexp([6.0, 22.0]) - np.log(2))


def test_replicated_estimate_is_unbiased():
    """E[exp(estimate)] = L for log-normal parts with E[exp] = 1: 4000 estimates average 1 within 4 SE."""

    def log_normal(theta, rng):
        return rng.normal(-0.5, 1.0)  # exp has mean 1

    with pm.Model():
        theta = pm.Normal("theta")
        lik = PseudoMarginalPotential("lik", log_normal, inputs=[theta], replicates=4)
    op, rng = lik.owner.op, np.random.default_rng(1)
    values = np.exp([op.estimate([np.array(0.0)], rng) for _ in range(4000)])
    assert abs(values.mean() - 1) < 4 * values.std() / np.sqrt(values.size)
    # Negative control: averaging the logs instead is biased low, and the same check sees it.
    logs = np.array([np.mean([rng.normal(-0.5, 1.0) for _ in range(4)]) for _ in range(4000)])
    assert abs(np.exp(logs).mean() - 1) > 4 * np.exp(logs).std() / np.sqrt(logs.size)


def test_replicate_options_are_checked():
    with pm.Model():
        theta = pm.Normal("theta")
        with pytest.raises(ValueError, match="replicates must be a positive integer"):
            PseudoMarginalPotential("a", uniform_estimator, inputs=[theta], replicates=0)
        with ThreadPoolExecutor(2) as pool, pytest.raises(ValueError, match="executor needs replicates >= 2"):
            PseudoMarginalPotential("b", uniform_estimator, inputs=[theta], executor=pool)


def test_kass_refuses_an_executor_with_pseudo_marginal_terms():
    with pm.Model():
        theta = pm.Normal("theta")
        PseudoMarginalPotential("lik", uniform_estimator, inputs=[theta])
        message = "Give the executor to the potential"
        with ThreadPoolExecutor(2) as pool, pytest.raises(ValueError, match=message):
            pm.sample_smc(100, kernel=KASS, executor=pool, progressbar=False)


_FORKED_POOL_SCRIPT = """
import numpy as np, pymc as pm
from concurrent.futures import ProcessPoolExecutor
from pymc_kameleon import KameleonMetropolis, PseudoMarginalPotential

def estimate(theta, rng):
    return -0.5 * float(np.sum(theta ** 2)) + 0.1 * rng.standard_normal()

if __name__ == "__main__":
    pool = ProcessPoolExecutor(2)
    with pm.Model():
        theta = pm.Normal("theta", 0, 1, shape=2)
        PseudoMarginalPotential("lik", estimate, inputs=[theta], replicates=2, executor={executor})
        kwargs = dict(step=KameleonMetropolis(), draws=20, tune=20, chains=2, progressbar=False,
                      compute_convergence_checks=False)
        pm.sample(cores=1, **kwargs)
        try:
            pm.sample(cores=2, **kwargs)
        except Exception as err:
            print("ERROR:", err)
"""


@pytest.mark.parametrize("executor", ["pool", "lambda: ProcessPoolExecutor(2)"])
def test_process_pools_in_pymc_worker_processes_fail_clearly(executor, tmp_path):
    """A used pool instance with pm.sample(cores=2) hung for ever (PyMC forks, so nothing was pickled);
    a pool factory failed with 'daemonic processes are not allowed to have children'. Both now stop
    with an error that names the remedy, in a subprocess with a time limit."""
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(_FORKED_POOL_SCRIPT.replace("{executor}", executor))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert "ERROR:" in out, out[-3000:]
    assert "sample with cores=1" in out, out[-3000:]
