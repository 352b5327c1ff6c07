"""The contract KASS and ASMC keep as SMC kernels of ``pm.sample_smc``, parametrised over both: invalid
options named, discrete variables refused, and cores=2 drawing what sequential chains draw (PyMC
reuses one kernel instance for sequential chains, and each worker process unpickles its own), the
seed reproducing the run, on a plain model and on a pseudo-marginal one."""

import numpy as np
import pymc as pm
import pytest

from pymc_kameleon import ASMC, KASS
from pymc_kameleon.smc import log_evidence, stage_stats
from pymc_kameleon.testing import SAMPLE_KW, assert_same_records, gaussian_data_model, latent_gaussian_model

KERNELS = pytest.mark.parametrize("kernel", [KASS, ASMC], ids=lambda k: k.__name__)
MODELS = {"plain": gaussian_data_model, "pseudo_marginal": latent_gaussian_model}

BAD_OPTIONS = [
    # the option as the user passed it, and the closest name when there is one
    ({"proposal_kernel": "nope"}, ValueError, r"^proposal_kernel='nope' is not a known kernel; use one of"),
    (
        {"proposal_kernel": "gausian"},
        ValueError,
        r"^proposal_kernel='gausian' is not a known kernel \(did you mean proposal_kernel='gaussian'\?\)",
    ),
    ({"bandwidth": -1.0}, ValueError, "bandwidth"),
    ({"gamma": "x"}, ValueError, "gamma"),
    ({"n_subsample": 0}, ValueError, "n_subsample"),
    ({"learning_rate": -1.0}, ValueError, "learning_rate"),
    ({"target_accept": 1.5}, ValueError, "target_accept"),
    ({"n_steps": 0}, ValueError, "n_steps"),
    ({"n_steps": "sometimes"}, ValueError, "n_steps"),
    ({"max_steps": 0}, ValueError, "max_steps"),
    ({"move_probability": 1.0}, ValueError, "move_probability"),
    ({"chunk_size": 0}, ValueError, "chunk_size"),
    ({"batch_logp": "yes"}, ValueError, "batch_logp"),
    ({"resampling": "stratified"}, ValueError, "resampling"),
    ({"threshold": 2.0}, ValueError, "threshold must be a number in"),  # PyMC's own option, checked first
    ({"threshold": 0.0}, ValueError, "threshold must be a number in"),  # PyMC accepts it
    # pm.sample_smc's `kernel` is the SMC kernel class; the RKHS kernel has its own name.
    ({"kernel": "linear"}, TypeError, "proposal_kernel"),
]


@KERNELS
@pytest.mark.parametrize(
    "options, error, message", [pytest.param(*row, id=f"{row[2]}-{i}") for i, row in enumerate(BAD_OPTIONS)]
)
def test_invalid_options_name_the_option(kernel, options, error, message):
    with pytest.raises(error, match=message):
        kernel(draws=20, model=gaussian_data_model(), **options)


@KERNELS
def test_discrete_variables_are_refused_with_a_clear_error(kernel):
    with pm.Model() as model:
        k = pm.Poisson("k", 3.0)
        pm.Normal("y", k, 1.0, observed=[2.0, 3.0])
    with pytest.raises(ValueError, match=r"\['k'\].*discrete"):
        kernel(draws=20, model=model)
    with model, pytest.raises(ValueError, match=r"\['k'\].*discrete"):
        pm.sample_smc(draws=20, kernel=kernel, chains=1, cores=1, **SAMPLE_KW)


def _smc_record(idata, var):
    """The particles, every per-stage statistic of each chain, and the log evidence with its error bar."""
    record = {"particles": idata.posterior[var].values}
    for name in idata.sample_stats.data_vars:
        chains = stage_stats(idata, name)
        record.update({f"{name}/{c}": np.asarray(values, dtype=float) for c, values in enumerate(chains)})
    record["log_z"], record["std_error"] = log_evidence(idata)
    return record


@KERNELS
@pytest.mark.parametrize("model_name", list(MODELS))
def test_cores_2_equals_sequential_chains_and_the_seed_reproduces(kernel, model_name):
    """Sequential chains reuse one kernel instance; parallel chains each unpickle a fresh one. Both, and a
    second run with the seed, record the same particles, stage statistics and evidence. Negative
    controls: the two chains differ, and so does another seed."""
    model = MODELS[model_name]()
    var = model.value_vars[0].name
    kw = dict(draws=60, kernel=kernel, chains=2, n_steps=1, **SAMPLE_KW)
    with model:
        sequential = _smc_record(pm.sample_smc(cores=1, random_seed=7, **kw), var)
        parallel = _smc_record(pm.sample_smc(cores=2, random_seed=7, **kw), var)
        again = _smc_record(pm.sample_smc(cores=1, random_seed=7, **kw), var)
        other = pm.sample_smc(cores=1, random_seed=8, **{**kw, "chains": 1}).posterior[var].values
    assert_same_records(parallel, sequential)
    assert_same_records(again, sequential)
    particles = sequential["particles"]
    assert particles.shape == (2, 60, 2) and np.all(np.isfinite(sequential["log_z"]))
    assert not np.array_equal(particles[0], particles[1])
    assert not np.array_equal(other[0], particles[0])


def test_a_kernel_instance_instead_of_the_class_is_named():
    """pm.sample_smc(kernel=KASS()) failed with Python's "'KASS' object is not callable"."""
    with pm.Model():
        pm.Normal("x", 0, 1)
        pm.Normal("y", pm.math.constant(0.0), 1, observed=0.5)
        kernel = KASS(draws=50)
        with pytest.raises(TypeError, match=r"takes the kernel class, not an instance.*kernel=KASS,"):
            pm.sample_smc(draws=50, kernel=kernel, chains=1, progressbar=False)


@pytest.mark.parametrize("draws", [1, 0, 2.5])
def test_too_few_particles_are_named(draws):
    """draws=1 failed inside PyMC's resampling with "array is 0-dimensional"."""
    with pm.Model():
        pm.Normal("x", 0, 1)
        pm.Normal("y", pm.math.constant(0.0), 1, observed=0.5)
        with pytest.raises(ValueError, match=r"KASS: draws \(the number of particles\) must be an integer"):
            pm.sample_smc(draws=draws, kernel=KASS, chains=1, progressbar=False)
