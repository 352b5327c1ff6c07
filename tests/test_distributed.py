"""Likelihoods evaluated on a real Dask cluster (issue 13): same answers as serial, clear faults.

A ``LocalCluster`` with two single-threaded worker processes is started once for the module;
nothing is mocked.
"""

import logging
import os
import sys
import threading
import time
import warnings

import cloudpickle
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from pymc_kameleon import (
    GPDelayedAcceptanceMH,
    KameleonMetropolis,
    KameleonRuntimeWarning,
    KameleonWarning,
    PseudoMarginalPotential,
    importance_sampling_estimator,
)
from pymc_kameleon.executors import DaskExecutor, ExecutorClosedError, ExecutorOption, ParallelEvaluationError
from pymc_kameleon.pseudo_marginal import PseudoMarginalEstimatorError
from pymc_kameleon.smc import KASS, log_evidence

distributed = pytest.importorskip("distributed")

# The workers unpickle this module's functions and Ops by value (the tests directory is not importable
# there).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

Y = np.array([0.3, -1.2, 0.8, 0.1])


class ModuleCluster:
    """The module's ``LocalCluster`` of two worker processes and its client, started again where a test
    left it without both workers."""

    def __init__(self):
        self.start()

    def start(self):
        self.cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
        self.client = distributed.Client(self.cluster)

    def close(self):
        self.client.close()
        self.cluster.close()

    def healthy_client(self, test: str):
        """The client, with both workers up. Tests kill workers on purpose and Dask's nannies start them
        again; in one CI run (PyMC 5 beside PyMC 6 on 2 cores) they were not back after the speculative
        test, every later test failed, and sample_chains waited for a worker until CI's time ran out."""
        try:
            self.client.wait_for_workers(2, timeout=60)
        except TimeoutError:
            n = len(self.client.nthreads())
            warnings.warn(
                f"{test}: the module's cluster had {n} of 2 workers after 60 s; started a new one",
                stacklevel=2,
            )
            self.close()
            self.start()
        return self.client


@pytest.fixture(scope="module")
def module_cluster():
    cluster = ModuleCluster()
    yield cluster
    cluster.close()


@pytest.fixture
def client(module_cluster, request):
    return module_cluster.healthy_client(request.node.name)


class GaussianLoglik(Op):
    """log N(Y | mu, 1) in Python (a black box to PyTensor), with two ways to fail on purpose:
    it raises where mu > ``raise_above``; and with ``kill_marker`` (a path) it ends its worker process,
    twice in all: first on any worker, then on another process after 20 more evaluations there (the
    marker file logs them)."""

    def __init__(self, raise_above=np.inf, kill_marker=None, fails_on_workers=False):
        self.raise_above = raise_above
        self.kill_marker = kill_marker
        self.fails_on_workers = fails_on_workers  # raises on every Dask worker, works in this process

    def _maybe_kill(self):
        import time

        from distributed import get_worker

        try:
            get_worker()
        except ValueError:  # not on a worker: never kill the test process
            return
        log = open(self.kill_marker).read().split() if os.path.exists(self.kill_marker) else []
        first = not log
        second = False
        if len(log) == 1 and int(log[0].split(":")[0]) != os.getpid():
            self._after_first_kill = getattr(self, "_after_first_kill", 0) + 1  # this worker's own count
            second = self._after_first_kill > 20
        if first or second:
            with open(self.kill_marker, "a") as f:
                f.write(f"{os.getpid()}:{time.time()} ")
            os._exit(1)

    def make_node(self, mu):
        return Apply(self, [pt.as_tensor_variable(mu)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        mu = float(inputs[0])
        if mu > self.raise_above:
            raise FloatingPointError(f"solver diverged at mu={mu}")
        if self.kill_marker is not None and "distributed" in sys.modules:
            self._maybe_kill()
        if self.fails_on_workers and _on_a_worker():
            raise ImportError("libsolver.so: cannot open shared object file")
        output_storage[0][0] = np.asarray(-0.5 * np.sum((Y - mu) ** 2) - 2 * np.log(2 * np.pi))


def _on_a_worker() -> bool:
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


def black_box_model(op=None):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        pm.Normal("other", 0, 1)
        pm.Potential("lik", (op or GaussianLoglik())(mu))
    return model


def run_kass(model, executor, cores=1, draws=150, chains=2, **options):
    with model:
        return pm.sample_smc(
            draws,
            kernel=KASS,
            chains=chains,
            cores=cores,
            random_seed=11,
            executor=executor,
            progressbar=False,
            compute_convergence_checks=False,
            **options,
        )


def same_run(a, b):
    return np.array_equal(a.posterior["mu"].values, b.posterior["mu"].values) and np.array_equal(
        log_evidence(a).log_z, log_evidence(b).log_z
    )


@pytest.mark.slow
def test_kass_on_dask_equals_serial_with_one_and_two_workers(client):
    model = black_box_model()
    serial = run_kass(model, None)
    one_worker = [next(iter(client.scheduler_info()["workers"]))]
    assert same_run(serial, run_kass(model, client.get_executor()))
    assert same_run(serial, run_kass(model, client.get_executor(workers=one_worker)))
    # The chains in PyMC's worker processes (cores=2) reach the cluster through its address.
    assert same_run(serial, run_kass(model, DaskExecutor(client), cores=2))
    # Negative control: another seed's run differs, so the comparison can fail.
    with model:
        other = pm.sample_smc(150, kernel=KASS, chains=2, random_seed=12, progressbar=False,
                              compute_convergence_checks=False)
    assert not same_run(serial, other)


@pytest.mark.slow
def test_waste_free_kass_on_dask_equals_serial(client):
    """Waste-free chains evaluate a few proposals per step (one per chain): the same draws, log Z and error
    bar as serial."""
    model = black_box_model()
    serial = run_kass(model, None, waste_free=True, chain_length=15)
    parallel = run_kass(model, client.get_executor(), waste_free=True, chain_length=15)
    assert same_run(serial, parallel)
    assert np.array_equal(log_evidence(serial).std_error, log_evidence(parallel).std_error)


def test_tasks_are_chunks_one_per_worker(client):
    option = ExecutorOption(client.get_executor(), "test")
    assert option.n_workers() == 2
    pids = option.map_rows(lambda x: (x, os.getpid()), [(i,) for i in range(10)])
    assert [x for x, _ in pids] == list(range(10))
    # rows 0-4 in one task, 5-9 in the other: each chunk ran in one process
    assert len({pid for _, pid in pids[:5]}) == 1 and len({pid for _, pid in pids[5:]}) == 1


def test_each_chunk_of_a_round_runs_on_its_own_worker(client):
    """Chunk i is submitted for the i-th worker, loosely (another may take it): left to the scheduler,
    both chunks of a round sometimes went to one of the two workers (2-5 of 26 rounds of a KASS run at
    10 ms per evaluation, each then taking twice as long). The scheduler's own record of a round's
    tasks shows the placement (without it the tasks have no worker restrictions); over 20 rounds
    each chunk ran on its own worker."""
    option = ExecutorOption(client.get_executor(), "test")
    workers = sorted(client.nthreads())

    def slow(x):
        time.sleep(0.5)
        return x

    def chunk_restrictions(dask_scheduler):
        return sorted(
            (sorted(ts.worker_restrictions or ()), bool(ts.loose_restrictions))
            for key, ts in dask_scheduler.tasks.items()
            if "_run_chunk" in str(key)
        )

    round_ = threading.Thread(target=option.map_rows, args=(slow, [(i,) for i in range(4)]))
    round_.start()
    time.sleep(0.25)  # the round's two chunks are running (1 s each)
    seen = client.run_on_scheduler(chunk_restrictions)
    round_.join()
    assert seen == [([workers[0]], True), ([workers[1]], True)]

    def pid_after(x):
        time.sleep(0.005)
        return os.getpid()

    for _ in range(20):
        pids = option.map_rows(pid_after, [(i,) for i in range(4)])
        assert pids[0] == pids[1] and pids[2] == pids[3] and pids[0] != pids[2]
    # A user's own restriction wins: every chunk on the one worker named.
    one = sorted(client.nthreads())[0]
    restricted = ExecutorOption(client.get_executor(workers=[one]), "test")
    pids = restricted.map_rows(pid_after, [(i,) for i in range(4)])
    assert len(set(pids)) == 1 and pids[0] == client.run(os.getpid, workers=[one])[one]


def _holds(token):
    """Worker side: whether this worker has unpickled the payload of ``token``."""
    from pymc_kameleon import _executor_worker

    return token in _executor_worker._worker_functions


def _forget_functions():
    from pymc_kameleon import _executor_worker

    _executor_worker._worker_functions.clear()


def test_warm_up_has_every_worker_unpickle_a_compiled_function(client):
    """A worker's first unpickling of any compiled PyTensor function loads PyTensor's module cache (1.7-3.3
    s for each fresh worker of this cluster's kind on 2 cores, then 0.02 s per function): ``warm_up``
    (called where KASS is made) has each worker do it at once with a small function, one task per worker,
    without waiting."""
    from pymc_kameleon._executor_worker import _warm_up_payload

    token = _warm_up_payload().token
    client.run(_forget_functions)
    assert not any(client.run(_holds, token).values())  # the control: the check sees a cold worker
    option = ExecutorOption(client.get_executor(), "test")
    option.warm_up()
    assert sorted(f.result(timeout=60) for f in option._warming) == [0, 1]
    assert list(client.run(_holds, token).values()) == [True, True]
    # A broken executor: nothing raised here; the first real call says what is wrong, as before.
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(1)
    pool.shutdown()
    broken = ExecutorOption(pool, "test")
    broken.warm_up()
    assert broken._warming == []
    with pytest.raises(RuntimeError, match="shutdown"):
        broken.map_rows(_square, [(2.0,)])
    # A user's factory is not called: with cores > 1 only PyMC's chain processes would use what it makes.
    made = []
    factory = ExecutorOption(lambda: made.append(ProcessPoolExecutor(1)) or made[-1], "test")
    factory.warm_up()
    assert made == [] and factory._warming == []
    assert factory.map_rows(_square, [(3.0,)]) == [9.0] and len(made) == 1  # made at its first real use
    made[0].shutdown()


def test_an_evaluation_that_raises_names_its_inputs(client):
    model = black_box_model(GaussianLoglik(raise_above=3.0))
    message = r"FloatingPointError: solver diverged.*\(at mu="
    with pytest.raises(ParallelEvaluationError, match=message) as info:
        run_kass(model, client.get_executor(), chains=1)
    assert "Worker traceback" in str(info.value)
    # Serially PyMC raises the Op's own error.
    with pytest.raises(FloatingPointError):
        run_kass(model, None, chains=1)


def test_failed_rounds_are_retried_until_a_worker_answers(client, monkeypatch):
    """Two failed rounds in a row (workers dying one after the other) are retried, each with the
    payload scattered afresh; a round that keeps failing raises its own error after the retries."""
    from pymc_kameleon import executors

    option = ExecutorOption(client.get_executor(), "test")
    real, calls, failures = ExecutorOption._submit_chunks_once, [], [2]

    def flaky(self, *args):
        calls.append(self._scattered)
        if failures[0] > 0:
            failures[0] -= 1
            raise ParallelEvaluationError("test: a worker died")
        return real(self, *args)

    monkeypatch.setattr(ExecutorOption, "_submit_chunks_once", flaky)
    assert option.map_rows(lambda x: 2 * x, [(i,) for i in range(6)]) == [0, 2, 4, 6, 8, 10]
    assert len(calls) == 3 and calls[1] is None and calls[2] is None  # rescattered before each retry
    failures[0] = executors._DASK_RETRIES + 1
    with pytest.raises(ParallelEvaluationError, match="a worker died"):
        option.map_rows(lambda x: 2 * x, [(0,)])
    assert len(calls) == 3 + executors._DASK_RETRIES + 1


@pytest.mark.slow
def test_killed_workers_are_replaced_and_the_run_is_unchanged(client, tmp_path):
    """Both workers die, one after the other. The second death also loses the scattered likelihood
    (the restarted first worker never got it), which cancelled every task until the payload was
    scattered afresh (found by a new-user check)."""
    marker = str(tmp_path / "killed")
    op = GaussianLoglik(kill_marker=marker)
    serial = run_kass(black_box_model(op), None, chains=1, draws=300)
    assert not os.path.exists(marker)  # the serial run never kills
    on_dask = run_kass(black_box_model(op), client.get_executor(), chains=1, draws=300)
    kills = open(marker).read().split()
    assert len(kills) == 2, f"expected two killed workers, got {kills}: the test did not test anything"
    assert same_run(serial, on_dask)


def run_speculative(model, executor, cores=1):
    with model:
        step = GPDelayedAcceptanceMH(executor=executor)
        step._speculation_min_ms = 0.0  # speculate at this microsecond likelihood (the rule is 2 ms)
        return pm.sample(
            tune=800, draws=300, chains=2, cores=cores, step=step, random_seed=5, progressbar=False,
            compute_convergence_checks=False,
        )


@pytest.mark.slow
def test_speculative_delayed_acceptance_on_dask_equals_serial(client, tmp_path, caplog):
    """GP-DA-MH's draws-phase speculation on the cluster: the serial draws, with cores=1 and with PyMC's
    worker processes (cores=2); and when workers die mid-run, the lost guesses are evaluated again in
    the chain's own process, so the draws are still the serial ones.

    With cores=2 the executor is given as the guide says, client.get_executor(). PyMC's population
    sampler pickles each chain's step for its worker process, and the constructor's arguments PyMC keeps
    for that held the Dask executor, which does not pickle: PyMC then ran the chains one after another
    in this process, saying so only in an info log (a new user's run took 17 s against 11 s without the
    executor). The step now travels with its executor as the scheduler's address."""
    serial = run_speculative(black_box_model(), None)
    on_dask = run_speculative(black_box_model(), client.get_executor())
    assert np.array_equal(serial.posterior["mu"].values, on_dask.posterior["mu"].values)
    stats = on_dask.sample_stats
    assert stats["prefetched"].values.sum() > 0.3 * stats["exact_eval"].values.sum()
    with black_box_model():
        step = GPDelayedAcceptanceMH(executor=client.get_executor())
    copy = cloudpickle.loads(cloudpickle.dumps(step))
    assert type(copy) is type(step) and isinstance(copy.executor, ExecutorOption)
    serial_2 = run_speculative(black_box_model(), None, cores=2)
    caplog.set_level(logging.INFO, logger="pymc")
    on_dask_2 = run_speculative(black_box_model(), client.get_executor(), cores=2)
    assert "Attempting to parallelize" in caplog.text and "parallelization failed" not in caplog.text
    assert np.array_equal(serial_2.posterior["mu"].values, on_dask_2.posterior["mu"].values)
    assert on_dask_2.sample_stats["prefetched"].values.sum() > 0

    marker = str(tmp_path / "killed")
    killing = run_speculative(black_box_model(GaussianLoglik(kill_marker=marker)), client.get_executor())
    assert len(open(marker).read().split()) >= 1, "no worker was killed: the test did not test anything"
    assert np.array_equal(serial.posterior["mu"].values, killing.posterior["mu"].values)


def test_speculation_that_fails_on_the_workers_says_so(client):
    """A likelihood that raises on every worker (a library missing there) and works here: each guess made
    ahead is evaluated again in the chain's process, so the draws are the serial ones, but the executor
    only costs time. A new user's run said nothing (30 of 559 guesses used); the step now warns once per
    chain, with the workers' error. Negative control: the same run with a likelihood that works on the
    workers does not warn (and uses several times as many guesses)."""
    serial = run_speculative(black_box_model(), None)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        working = run_speculative(black_box_model(), client.get_executor())
    assert not [w for w in record if "made ahead" in str(w.message)]
    expected = r"made ahead on the executor and needed failed there \(the last: ImportError: libsolver.so"
    failing_model = black_box_model(GaussianLoglik(fails_on_workers=True))
    with pytest.warns(KameleonWarning, match=expected) as record:
        failing = run_speculative(failing_model, client.get_executor())
    assert len([w for w in record if "made ahead" in str(w.message)]) <= 2
    assert np.array_equal(serial.posterior["mu"].values, failing.posterior["mu"].values)
    used = working.sample_stats["prefetched"].values.sum()
    assert failing.sample_stats["prefetched"].values.sum() < 0.5 * used


def noisy_estimator():
    return importance_sampling_estimator(
        log_weight=lambda z, theta: -0.5 * ((Y - z) ** 2).sum(-1) - 2 * np.log(2 * np.pi),
        sample=lambda theta, n, rng: theta + rng.standard_normal((n, Y.size)),
        n_samples=5,
    )


def run_pseudo_marginal(executor, cores=1, replicates=4):
    with pm.Model():
        theta = pm.Normal("theta", 0, 1)
        PseudoMarginalPotential(
            "lik", noisy_estimator(), inputs=[theta], replicates=replicates, executor=executor
        )
        return pm.sample(
            60, tune=60, step=KameleonMetropolis(), chains=2, cores=cores, random_seed=5,
            progressbar=False, compute_convergence_checks=False,
        )


@pytest.mark.slow
def test_pseudo_marginal_replicates_on_dask_equal_serial(client):
    serial = run_pseudo_marginal(None)
    for executor, cores in [(client.get_executor(), 1), (DaskExecutor(client), 2)]:
        on_dask = run_pseudo_marginal(executor, cores=cores)
        np.testing.assert_array_equal(serial.posterior["theta"].values, on_dask.posterior["theta"].values)
    # Negative control: without the split the chain is another one.
    unsplit = run_pseudo_marginal(None, replicates=1)
    assert not np.array_equal(serial.posterior["theta"].values, unsplit.posterior["theta"].values)


def test_dask_never_reuses_a_result(client):
    """A call repeated with the same arguments is evaluated again: the submissions are impure."""

    def draw():
        return np.random.default_rng().random()  # fresh OS entropy on every call

    option = ExecutorOption(client.get_executor(), "test")  # pure=True is Dask's default
    assert option.map_rows(draw, [()]) != option.map_rows(draw, [()])
    # Negative control: Dask's pure submission of the same call returns the cached result.
    pure = client.get_executor(pure=True)
    assert pure.submit(draw).result() == pure.submit(draw).result()
    # A re-estimate at the same theta is a new estimate.
    with pm.Model():
        theta = pm.Normal("theta", 0, 1)
        lik = PseudoMarginalPotential(
            "lik", noisy_estimator(), inputs=[theta], replicates=2, executor=client.get_executor()
        )
    op = lik.owner.op
    rng = np.random.default_rng(0)
    assert op.estimate([np.array(0.5)], rng) != op.estimate([np.array(0.5)], rng)


def test_pseudo_marginal_estimator_that_raises_on_a_worker(client):
    def failing(theta, rng):
        raise ValueError("no particles survived")

    with pm.Model():
        theta = pm.Normal("theta", 0, 1)
        lik = PseudoMarginalPotential(
            "lik", failing, inputs=[theta], replicates=2, executor=client.get_executor()
        )
    message = r"ValueError: no particles survived \(at theta=0\.5"
    with pytest.raises(PseudoMarginalEstimatorError, match=message):
        lik.owner.op.estimate([np.array(0.5)], np.random.default_rng(0))


def test_sample_chains_equals_pm_sample(client):
    from pymc_kameleon.distributed import sample_chains

    with pm.Model() as model:
        pm.Normal("x", 0, 1, shape=2)
    kwargs = dict(draws=40, tune=40, random_seed=7)
    with model:
        # Chains on a cluster tune alone, as per-chain tuning does in one pm.sample.
        reference = pm.sample(
            step=KameleonMetropolis(tuning="per_chain"), chains=3, cores=1, progressbar=False,
            compute_convergence_checks=False, **kwargs,
        )
    on_dask = sample_chains(model, KameleonMetropolis, client, chains=3, **kwargs)
    np.testing.assert_array_equal(on_dask.posterior["x"].values, reference.posterior["x"].values)
    np.testing.assert_array_equal(
        on_dask.sample_stats["accepted"].values, reference.sample_stats["accepted"].values
    )
    assert list(on_dask.posterior["chain"].values) == [0, 1, 2]
    # The same statistics as per-chain tuning's: no pooled "rescued", which chains tuning alone never set.
    assert set(on_dask.sample_stats.data_vars) == set(reference.sample_stats.data_vars)
    # Negative control: another seed gives other chains.
    other = sample_chains(model, KameleonMetropolis, client, chains=3, draws=40, tune=40, random_seed=8)
    assert not np.array_equal(other.posterior["x"].values, reference.posterior["x"].values)
    with pytest.raises(ValueError, match="sets \\['cores'\\] itself"):
        sample_chains(model, KameleonMetropolis, client, chains=2, cores=2)
    with pytest.raises(TypeError, match="step_factory must be a callable"):
        sample_chains(model, object.__new__(KameleonMetropolis), client)


def test_sample_chains_on_a_cluster_without_workers_warns_and_waits(monkeypatch):
    """A cluster that lost its workers: Dask waits for one without end or message (a CI run waited until
    its time ran out). sample_chains warns once, naming the figure and the remedy, and goes on when a
    worker comes. Negative control: the same short thresholds with a worker give no warning."""
    from pymc_kameleon import distributed as ours

    monkeypatch.setattr(ours, "_POLL_SECONDS", 0.2)
    monkeypatch.setattr(ours, "_NO_WORKER_SECONDS", 1.0)
    with pm.Model() as model:
        pm.Normal("x")
    kwargs = dict(chains=2, draws=20, tune=20, random_seed=3)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster, distributed.Client(cluster, set_as_default=False) as own:
        with warnings.catch_warnings():
            warnings.simplefilter("error", KameleonRuntimeWarning)  # (tune=20 warns a KameleonWarning)
            served = ours.sample_chains(model, KameleonMetropolis, own, **kwargs)
        cluster.scale(0)
        deadline = time.monotonic() + 30
        while own.nthreads() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not own.nthreads(), "the worker did not go: the test did not test anything"
        back = threading.Timer(3.0, cluster.scale, args=(1,))
        back.start()
        try:
            message = (r"sample_chains: the Dask scheduler at \S+ has had no worker for \d+ s, and 2 of 2 "
                       r"chains wait for one\..*start workers \(cluster.scale\(n\)\)")
            with pytest.warns(KameleonRuntimeWarning, match=message) as record:
                waited = ours.sample_chains(model, KameleonMetropolis, own, **kwargs)
        finally:
            back.join()
    assert len([w for w in record if issubclass(w.category, KameleonRuntimeWarning)]) == 1
    np.testing.assert_array_equal(waited.posterior["x"].values, served.posterior["x"].values)


def _solver_that_times_out():
    raise TimeoutError("the ODE solver gave up after 30 s")


def test_sample_chains_raises_a_chains_own_timeout_error(client, monkeypatch):
    """A chain that raises TimeoutError (a user's solver) is an error, not the poll's wait running out:
    the poll had taken it for one and asked again for ever."""
    from pymc_kameleon import distributed as ours

    monkeypatch.setattr(ours, "_POLL_SECONDS", 0.2)
    with pm.Model() as model:
        pm.Normal("x")
    raised = []

    def run():
        try:
            ours.sample_chains(model, _solver_that_times_out, client, chains=2, draws=10, tune=10)
        except TimeoutError as err:
            raised.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "sample_chains still waits on a chain that raised TimeoutError"
    assert raised and "the ODE solver gave up" in str(raised[0])


def test_a_closed_client_and_misused_arguments_get_clear_errors(client):
    from pymc_kameleon.distributed import sample_chains

    other = distributed.Client(client.scheduler.address, set_as_default=False)
    other.close()
    with pytest.raises(ValueError, match="client is not connected"):
        DaskExecutor(other)
    with pytest.raises(TypeError, match=r"Pass client.get_executor\(\), not the client itself"):
        ExecutorOption(client, "KASS")
    with pm.Model() as model:
        pm.Normal("x")
    with pytest.raises(ValueError, match="sets \\['progressbar'\\] itself"):
        sample_chains(model, KameleonMetropolis, client, progressbar=True)
    with pytest.raises(ValueError, match="returns InferenceData"):
        sample_chains(model, KameleonMetropolis, client, return_inferencedata=False)
    with pytest.raises(TypeError, match="not client.get_executor"):
        sample_chains(model, KameleonMetropolis, client.get_executor())


def _square(x):
    return x * x


def test_a_client_closed_in_use_is_replaced_while_its_scheduler_is_up(client):
    """A Dask client closed during a run (a `with Client(...)` block that ended too soon): the next call
    connects a new client to the same scheduler and gives the same results; Dask's own error had been
    "'NoneType' object has no attribute 'scatter'"."""
    other = distributed.Client(client.scheduler.address, set_as_default=False)
    option = ExecutorOption(other.get_executor(), "KASS")
    rows = [(float(i),) for i in range(6)]
    assert option.map_rows(_square, rows) == [x * x for (x,) in rows]
    other.close()
    assert option.map_rows(_square, rows) == [x * x for (x,) in rows]
    assert option.submit_row(_square, (3.0,)).result(timeout=30) == 9.0


class ClosesTheCluster(Op):
    """log N(Y | mu, 1), which closes ``_closing["cluster"]`` and its client at its ``after``-th call in
    this process (not on a worker): a user's cluster closed in the middle of a run."""

    def make_node(self, mu):
        return Apply(self, [pt.as_tensor_variable(mu)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        if not _on_a_worker():
            # Looked up, not referenced: the Op travels to the workers by value, the cluster cannot.
            closing = sys.modules[type(self).__module__]._closing
            closing["calls"] += 1
            if closing["calls"] == closing["after"]:
                closing["client"].close()
                closing["cluster"].close()
        output_storage[0][0] = np.asarray(-0.5 * np.sum((Y - float(inputs[0])) ** 2) - 2 * np.log(2 * np.pi))


_closing: dict = {}


@pytest.mark.parametrize("after", [60, 700])
def test_a_cluster_closed_in_use_gets_a_clear_error_or_none(after):
    """Client and cluster closed during a run. KASS (it needs the executor) and the executor itself: an
    ExecutorClosedError that names the cause and the remedy, at once after the first (no second wait for
    a connection); Dask's own errors had been AttributeErrors from its internals. GP-DA-MH (its executor
    only evaluates ahead): one warning, and the draws of the run without an executor, whether the cluster
    closes in the start search (after 60 evaluations here) or later (700)."""
    import dask

    message = r"Dask scheduler at \S+ could not be reached .*Keep a Dask client and its cluster open"
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        cluster = distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        )
        own = distributed.Client(cluster, set_as_default=False)
        if after == 60:  # once is enough for the executor's own error
            option = ExecutorOption(own.get_executor(), "KASS")
            assert option.map_rows(_square, [(2.0,)]) == [4.0]
        _closing.update(calls=0, after=after, client=own, cluster=cluster)
        with pytest.warns(KameleonWarning, match="GPDelayedAcceptanceMH: no more evaluations made ahead: .*"
                          + message + r".*The draws are the same"):
            closed = run_speculative(black_box_model(ClosesTheCluster()), own.get_executor())
        assert _closing["calls"] > after, "the cluster was not closed: the test did not test anything"
        serial = run_speculative(black_box_model(), None)
        assert np.array_equal(serial.posterior["mu"].values, closed.posterior["mu"].values)
        if after == 60:
            with pytest.raises(ExecutorClosedError, match="KASS: the executor.s " + message):
                option.map_rows(_square, [(2.0,)])
            start = time.monotonic()
            with pytest.raises(ExecutorClosedError, match=message):
                option.map_rows(_square, [(2.0,)])
            assert time.monotonic() - start < 1.0


def test_a_search_run_whose_cluster_closed_is_made_here_not_awaited_for_ever():
    """CI once waited 40 minutes in the start search for a run sent to a worker of a cluster closed
    meanwhile: the future of its task never completed. The wait now gives up once the executor is gone
    (ExecutorOption.result_of, which map_rows's rounds wait with too), and the chain makes the run itself
    (the same run)."""
    from concurrent.futures import Future

    from pymc_kameleon.steps.delayed_acceptance.executor_evaluations import _CountedRun

    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    )
    client = distributed.Client(cluster, set_as_default=False)
    option = ExecutorOption(client.get_executor(), "test")
    assert option.map_rows(_square, [(2.0,)]) == [4.0] and not option.gone()
    run = _CountedRun(Future(), None, option)  # a task whose result never comes back
    outcome = []
    waiting = threading.Thread(target=lambda: outcome.append(run.result()), daemon=True)
    waiting.start()
    time.sleep(0.5)
    assert waiting.is_alive()  # it waits while the cluster is there
    client.close()
    cluster.close()
    waiting.join(timeout=10.0)
    assert not waiting.is_alive() and outcome == [None] and option.gone()
    # What a round of map_rows waits with: the executor's own error, at once.
    start = time.monotonic()
    with pytest.raises(ExecutorClosedError, match="closed while in use.*Keep a Dask client"):
        option.result_of(Future())
    assert time.monotonic() - start < 3.0


class SlowToCollect:
    """An object in a reference cycle whose finaliser takes 6 s: what the garbage collector does at a
    worker's exit, on a worker that holds PyMC and compiled models (1.5-4 s measured on a loaded 2-core
    machine), made deterministic."""

    def __init__(self):
        self.cycle = self

    def __del__(self, sleep=time.sleep):  # nothing can be imported at exit
        sleep(6.0)


def keeps_a_cycle(x):
    """The identity; on first call it leaves a SlowToCollect in the worker for its exit."""
    import builtins

    if not hasattr(builtins, "_slow_to_collect"):
        builtins._slow_to_collect = SlowToCollect()
    return x


def test_workers_that_ran_our_tasks_close_in_time(caplog):
    """A worker's exit collected garbage over everything it held, and Dask's nanny killed workers still
    alive after 4 s: runs ended with 'Worker process still alive after 4.0 seconds, killing'. A worker
    that ran our tasks freezes its objects at exit instead (the operating system takes the memory)."""
    import logging

    nanny = logging.getLogger("distributed.nanny")
    nanny.addHandler(caplog.handler)  # distributed's own handlers may not reach the root logger
    try:
        with distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster, distributed.Client(cluster) as client:
            option = ExecutorOption(client.get_executor(), "test")
            assert option.map_rows(keeps_a_cycle, [(1.0,), (2.0,)]) == [1.0, 2.0]
    finally:
        nanny.removeHandler(caplog.handler)
    assert not [r for r in caplog.records if "still alive" in r.getMessage()]

