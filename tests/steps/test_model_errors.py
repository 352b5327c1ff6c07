"""A model whose log density raises during sampling (an ODE solver that fails at some parameter values):
the user's error reaches them with its type and message, and a note from the step that says where it
was raised and what to do (return -inf there). On PyMC 6's Numba backend PyTensor's message gives no
input values, so the note gives the point."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.compile.ops import as_op

from pymc_kameleon import MLDA, GPDelayedAcceptanceMH, KameleonMetropolis
from pymc_kameleon.steps.target_density import MODEL_ERROR_NOTE, note_model_error
from pymc_kameleon.testing import SAMPLE_KW

DATA = np.random.default_rng(5).normal(1.0, 1.0, size=(20, 2))


class SolverFailure(RuntimeError):
    """What the user's Op raises (a type of their own, which their code may catch)."""


def _model(fail_above):
    """A 2-d mean with a black-box likelihood that raises where x[0] > ``fail_above``."""

    @as_op(itypes=[pt.dvector], otypes=[pt.dscalar])
    def loglik(theta):
        if theta[0] > fail_above:
            raise SolverFailure("odeint: excess work done on this call")
        return np.asarray(-0.5 * np.sum((DATA - theta) ** 2))

    with pm.Model() as model:
        theta = pm.Normal("theta", 0, 3, shape=2)
        pm.Potential("loglik", loglik(theta))
    return model


def _sample(name, fail_above):
    """Sample with the step ``name``; for MLDA the coarse model raises (built outside the fine model's
    context, as MLDA asks) and the fine one never does."""
    if name == "mlda_coarse":
        coarse, model = _model(fail_above), _model(np.inf)
        step_factory = lambda: MLDA(coarse_models=[coarse])  # noqa: E731
    else:
        model, step_factory = _model(fail_above), STEPS[name]
    with model:
        return pm.sample(step=step_factory(), tune=300, draws=100, chains=1, random_seed=2, **SAMPLE_KW)


STEPS = {"kameleon": KameleonMetropolis, "gp_da_mh": GPDelayedAcceptanceMH, "mlda_coarse": MLDA}


@pytest.mark.parametrize("name", STEPS)
def test_an_error_of_the_model_keeps_its_type_and_gets_the_point_and_the_remedy(name):
    with pytest.raises(SolverFailure, match="excess work done") as caught:
        _sample(name, 1.5)
    ours = [note for note in getattr(caught.value, "__notes__", []) if MODEL_ERROR_NOTE in note]
    assert len(ours) == 1, caught.value.__notes__  # PyTensor 3 adds a note of its own
    if name == "mlda_coarse":  # -inf at a coarse level keeps the chain out (a new user's P(r < 0.88): 0)
        assert "return a rough value there" in ours[0] and "only where the fine model fails too" in ours[0]
    else:
        assert "return -inf there" in ours[0]
    # The point by the coordinates' names (a new user's coarse level gave a bare array).
    point = ours[0].split("at the point ")[1].split(" (")[0]
    assert point.startswith("theta[0]=") and ", theta[1]=" in point
    assert float(point.split("theta[0]=")[1].split(",")[0]) > 1.5  # where the Op raised


@pytest.mark.parametrize("name", STEPS)
def test_control_the_same_model_that_never_raises_samples(name):
    idata = _sample(name, np.inf)
    assert np.isfinite(idata.posterior["theta"].values).all()


def test_the_note_is_added_once():
    err = SolverFailure("boom")
    note_model_error(err, "KameleonMetropolis", np.array([1.0, 2.0]))
    note_model_error(err, "KameleonMetropolis", np.array([1.0, 2.0]))  # raised on through a second layer
    assert len(err.__notes__) == 1 and "[1. 2.]" in err.__notes__[0]
    # Without names (or with the wrong number) the point is the raveled array.
    named = SolverFailure("boom")
    note_model_error(named, "MLDA", np.array([1.0, 2.0]), ["log(sigma)", "mu"])
    assert "at the point log(sigma)=1, mu=2 (a transformed variable by its transform, as log(sigma)," in (
        named.__notes__[0]
    )
    # The example is one of the model's own names; with none transformed there is nothing to explain.
    other = SolverFailure("boom")
    note_model_error(other, "MLDA", np.array([1.0, 2.0, 3.0]), ["logodds(p)[0]", "logodds(p)[1]", "mu"])
    assert "as logodds(p), on" in other.__notes__[0]
    plain = SolverFailure("boom")
    note_model_error(plain, "MLDA", np.array([1.0, 2.0]), ["theta[0]", "theta[1]"])
    assert "at the point theta[0]=1, theta[1]=2. If the model" in plain.__notes__[0]
