"""Scale out over Dask: likelihood evaluations on a cluster, and chains as cluster tasks.

Two lines take an expensive model from one machine to a Dask cluster:

.. code-block:: python

    client = dask.distributed.Client("tcp://scheduler:8786")
    idata = pm.sample_smc(kernel=KASS, executor=client.get_executor())

On one machine, a ``LocalCluster`` and its client as context managers close in order (the client
first) when the block ends:

.. code-block:: python

    with LocalCluster(n_workers=2) as cluster, cluster.get_client() as client:
        idata = pm.sample_smc(kernel=KASS, executor=client.get_executor())

A worker process that ran our tasks freezes its objects at exit instead of collecting them
(:mod:`pymc_kameleon.executors`), so it exits within the 4 s that Dask's nanny allows.

``executor=`` (of :class:`~pymc_kameleon.smc.KASS`, :class:`~pymc_kameleon.smc.ASMC` and
:func:`~pymc_kameleon.PseudoMarginalPotential`) takes any ``concurrent.futures.Executor``; how the
work is split, what travels and why the answer equals the serial one is in
:mod:`pymc_kameleon.executors`. :class:`DaskExecutor` is the picklable form of a Dask executor, and
:func:`sample_chains` runs whole MCMC chains as Dask tasks.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from pymc_kameleon.core.warning_categories import KameleonRuntimeWarning
from pymc_kameleon.executors import DaskExecutor

__all__ = ["DaskExecutor", "sample_chains"]

# sample_chains asks the scheduler for its workers this often while the chains run, and warns once when
# it has had none for _NO_WORKER_SECONDS: Dask then waits for a worker for ever, saying nothing.
_POLL_SECONDS = 5.0
_NO_WORKER_SECONDS = 60.0


def _chain_seed(random_seed, chain: int) -> np.random.Generator:
    """A generator whose first spawned child is the one ``pm.sample(random_seed=...)`` gives ``chain``.

    ``pm.sample`` seeds chain :math:`c` with child :math:`c` of ``SeedSequence(random_seed)``
    (``get_random_generator(random_seed).spawn(chains)``); a SeedSequence that has already spawned
    :math:`c` children spawns exactly that child next.
    """
    if isinstance(random_seed, np.random.Generator):
        root = random_seed.bit_generator.seed_seq
    else:
        root = np.random.SeedSequence(random_seed)
    seq = np.random.SeedSequence(
        root.entropy, spawn_key=root.spawn_key, n_children_spawned=root.n_children_spawned + chain
    )
    return np.random.Generator(np.random.PCG64(seq))


def _sample_one_chain(model, step_factory, chain: int, random_seed, kwargs):
    import pymc as pm

    with model:
        return pm.sample(
            step=step_factory(),
            chains=1,
            cores=1,
            random_seed=_chain_seed(random_seed, chain),
            progressbar=False,
            compute_convergence_checks=False,
            **kwargs,
        )


def _concat_chains(results):
    """One ArviZ object with the chains of ``results`` (each one chain), numbered 0, 1, ..."""
    import xarray as xr

    def joined(datasets):
        if "chain" not in datasets[0].dims:
            return datasets[0]
        # A pooled step's "rescued" (a jump to another chain's state) means nothing for chains that
        # tune alone: the statistics are those of per-chain tuning, as pm.sample's with tuning="per_chain".
        datasets = [ds.drop_vars("rescued", errors="ignore") for ds in datasets]
        ds = xr.concat(datasets, dim="chain", combine_attrs="drop_conflicts")
        return ds.assign_coords(chain=np.arange(ds.sizes["chain"]))

    first = results[0]
    if hasattr(first, "groups") and callable(first.groups) and not hasattr(first, "children"):
        import arviz as az  # ArviZ 0.x: InferenceData

        groups = {g: joined([getattr(r, g) for r in results]) for g in first.groups()}
        return az.InferenceData(**groups)
    # ArviZ 1: a DataTree whose children are the groups
    groups = {f"/{name}": joined([r[name].to_dataset() for r in results]) for name in first.children}
    return xr.DataTree.from_dict(groups)


def sample_chains(model, step_factory, client, chains: int = 4, random_seed=None, **sample_kwargs):
    """Run MCMC chains as Dask tasks (each one ``pm.sample`` call) and return them as one ArviZ object.

    For models whose chains are long and expensive, on machines a single ``pm.sample(cores=...)``
    cannot reach. Each task calls ``pm.sample(step=step_factory(), chains=1, ...)`` with the random
    stream that ``pm.sample(chains=chains, random_seed=random_seed)`` gives that chain. Each chain
    therefore tunes alone: the result equals ``pm.sample``'s, chain for chain, with
    ``tuning="per_chain"`` steps (with the default pooled tuning, ``pm.sample``'s chains learn from
    each other while tuning, which separate tasks cannot).

    Parameters
    ----------
    model : pymc.Model or None
        Pickled to the workers (with ``cloudpickle``); None takes the model of the ``with`` context.
    step_factory : callable
        ``step_factory() -> step``, called inside the model's context on the worker; for example
        ``KameleonMetropolis`` or ``lambda: KameleonMetropolis(target_accept=0.3)``.
    client : dask.distributed.Client
    chains : int, default 4
    random_seed : int or numpy.random.Generator, optional
        As for ``pm.sample``. ``None`` draws one from the operating system here, so all chains still
        come from one seed.
    **sample_kwargs
        Passed to ``pm.sample`` (``draws``, ``tune``, ``idata_kwargs``, ...); not ``step``,
        ``chains``, ``cores``, ``random_seed``, ``progressbar`` or ``compute_convergence_checks``
        (set here), nor ``return_inferencedata=False``.

    Returns
    -------
    arviz.InferenceData (ArviZ 0.x) or xarray.DataTree (ArviZ 1)
        The chains in order, numbered ``0 .. chains - 1``.

    Raises
    ------
    ValueError
        For options that this function sets itself.
    TypeError
        For a ``client`` that is not a Dask client, or a ``step_factory`` that is not callable.

    Warns
    -----
    KameleonRuntimeWarning
        Once, when the cluster has had no worker for 60 s while chains wait (Dask waits for one
        without end): a cluster that lost its workers does not finish.
    """
    import pymc as pm

    model = pm.modelcontext(model)
    own = {"step", "chains", "cores", "random_seed", "model", "progressbar", "compute_convergence_checks"}
    taken = sorted(own & set(sample_kwargs))
    if taken:
        raise ValueError(f"sample_chains sets {taken} itself; pass only other pm.sample options.")
    if sample_kwargs.get("return_inferencedata", True) is not True:
        raise ValueError("sample_chains returns InferenceData (ArviZ 0) or a DataTree (ArviZ 1) only.")
    if not (hasattr(client, "submit") and hasattr(client, "gather")):
        raise TypeError(
            f"client must be a dask.distributed.Client, got {type(client).__name__} (pass the client, "
            "not client.get_executor())."
        )
    if not callable(step_factory):
        raise TypeError(
            "step_factory must be a callable that returns a step (for example KameleonMetropolis), "
            f"got {type(step_factory).__name__}: one step object cannot serve chains on several machines."
        )
    if isinstance(chains, bool) or not isinstance(chains, int | np.integer) or chains < 1:
        raise ValueError(f"chains must be a positive integer, got {chains!r}.")
    if random_seed is None:
        random_seed = int(np.random.SeedSequence().generate_state(1)[0])
    futures = [
        client.submit(_sample_one_chain, model, step_factory, c, random_seed, sample_kwargs, pure=False)
        for c in range(int(chains))
    ]
    return _concat_chains(_results(client, futures))


def _results(client, futures) -> list:
    """The futures' results in order, warning once when the cluster has had no worker for
    ``_NO_WORKER_SECONDS`` (a cluster that lost its workers; or one still waiting for them, as an
    adaptive cluster on a batch queue can): Dask's own wait for a worker has no end and no message."""
    results = []
    no_worker_since = None
    warned = False
    for future in futures:
        while True:
            try:
                results.append(future.result(timeout=_POLL_SECONDS))
                break
            except TimeoutError:
                if future.done():
                    # Finished as the wait ran out (a CI run raised the wait's TimeoutError here), or the
                    # chain's own TimeoutError (a solver's, say): its result, or its own error, now.
                    results.append(future.result())
                    break
                if client.nthreads():
                    no_worker_since = None
                    continue
                now = time.monotonic()
                no_worker_since = now if no_worker_since is None else no_worker_since
                if not warned and now - no_worker_since >= _NO_WORKER_SECONDS:
                    warned = True
                    waiting = sum(not f.done() for f in futures)
                    warnings.warn(
                        f"sample_chains: the Dask scheduler at {client.scheduler.address} has had no worker "
                        f"for {now - no_worker_since:.0f} s, and {waiting} of {len(futures)} chains wait for "
                        "one. Unless workers are on their way (an adaptive cluster), the cluster lost them "
                        "(its scheduler's log says why: killed, out of memory) and nothing will finish: "
                        "start workers (cluster.scale(n)), or interrupt and start a new cluster.",
                        KameleonRuntimeWarning,
                        stacklevel=3,
                    )
    return results
