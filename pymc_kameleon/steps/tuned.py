r"""Rebuild a chain's tuned Kameleon proposal from ``pm.sample``'s InferenceData.

With ``pm.sample(cores>1)`` each chain tunes in a worker process; the step object in the user's
session never sees the result. What does come back is, per chain, the draws and the frozen
figures of the proposal in ``sample_stats`` (bandwidth, :math:`\gamma`, :math:`\nu^2`, all in
whitened units, and the size of :math:`Z`). That is enough to rebuild the proposal in law.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytensor
from pymc.logprob.utils import replace_rvs_by_values

from pymc_kameleon.core.adaptation.covariance import shrunk_covariance
from pymc_kameleon.core.adaptation.whitening import Whitening
from pymc_kameleon.core.kameleon.family import KameleonProposal, mean_rkhs_variance
from pymc_kameleon.core.kameleon.kernels import make_kernel
from pymc_kameleon.core.kameleon.whitened import WhitenedFamily
from pymc_kameleon.core.warning_categories import KameleonWarning
from pymc_kameleon.steps.variables import continuous_value_vars, coordinate_names, model_in_context

__all__ = ["rebuild_proposal", "value_space_draws", "value_space_labels"]

_TUNED_STATS = ("bandwidth", "gamma", "nu2", "subsample_size")
_PROBE_POINTS = 20  # points of Z at which the kernel term's variance is averaged
# Why a chain of start="smc" with its map has no Kameleon proposal to rebuild or plot (plots.py says it too).
THROUGH_MAP_MESSAGE = (
    "moved through the transport map fitted to its SMC start's particles (start='smc'), not a Kameleon "
    "proposal, so there is no Kameleon proposal to rebuild or plot (its moves are marked by the "
    "transport_map statistic). For a Kameleon proposal, sample with SMCStart(transport_map=False) or "
    "start='search'."
)


def value_space_draws(idata, chain: int = 0, *, model=None, var_names=None) -> np.ndarray:
    """One chain's posterior draws in the coordinates a step samples in: the raveled value variables.

    Transformed variables (a ``HalfNormal`` scale, an ``Interval``, ...) are mapped by their
    transform's ``forward``, so the rows are what the step saw as states.

    Parameters
    ----------
    idata : InferenceData or DataTree
        The output of ``pm.sample``.
    chain : int, default 0
        Position of the chain along the ``chain`` dimension.
    model : pm.Model, optional
        The model that was sampled (default: the model in context).
    var_names : list of str, optional
        Names of the sampled random variables, in the step's order (default: every continuous
        free variable, the default of our steps).

    Returns
    -------
    array of shape (draws, d)
    """
    model = _sampled_model(model)
    value_vars = _value_vars(model, var_names)
    rvs = [model.values_to_rvs[v] for v in value_vars]
    outputs = []
    for rv in rvs:
        transform = model.rvs_to_transforms.get(rv)
        outputs.append(rv if transform is None else transform.forward(rv, *rv.owner.inputs))
    free = list(model.free_RVs)
    inputs = [rv.type(name=rv.name) for rv in free]
    # PyMC's own replacement: a variable whose distribution (or transform) depends on another free
    # variable (b ~ N(a**2, s)) is replaced together with that ancestor (graph_replace raised 'is not a
    # part of graph' there).
    outputs = replace_rvs_by_values(outputs, rvs_to_values=dict(zip(free, inputs, strict=True)))
    fn = pytensor.function(inputs, outputs, on_unused_input="ignore")
    _check_chain(idata, chain)
    posterior = idata.posterior
    values = [np.asarray(posterior[rv.name].isel(chain=int(chain)).values, dtype=rv.dtype) for rv in free]
    n_draws = values[0].shape[0] if values else 0
    return np.array(
        [np.concatenate([np.ravel(o) for o in fn(*(v[i] for v in values))]) for i in range(n_draws)],
        dtype=float,
    )


def _check_chain(idata, chain) -> None:
    n_chains = int(idata.posterior.sizes["chain"])
    if not 0 <= int(chain) < n_chains:
        raise ValueError(f"chain must be in 0..{n_chains - 1}, got {chain!r}.")


def _frozen_stat(stats, name: str, chain: int) -> float:
    if name not in stats:
        raise ValueError(
            f"sample_stats has no {name!r}: rebuild_proposal reads the tuned figures that "
            "KameleonMetropolis reports (bandwidth, gamma, nu2, subsample_size)."
        )
    values = np.asarray(stats[name].isel(chain=int(chain)).values, dtype=float)
    if values.ndim != 1:
        raise ValueError(
            f"sample_stats[{name!r}] has one column per step (a CompoundStep with several Kameleon "
            "steps); rebuild_proposal supports one KameleonMetropolis step per model."
        )
    return float(values[-1])


def value_space_labels(model=None, var_names=None) -> list[str]:
    """Names of the coordinates of :func:`value_space_draws`' rows, as the steps' warnings give them:
    ``mu``, ``log(sigma)``, ``b[2]``."""
    model = _sampled_model(model)
    return coordinate_names(_value_vars(model, var_names), model.initial_point(), model)


def _value_vars(model, var_names):
    if var_names is None:
        return continuous_value_vars(None, model, "rebuild_proposal")
    return [model.rvs_to_values[model[name]] for name in var_names]


def _sampled_model(model):
    """``model``, or the model in context; outside one, an error that says what to pass."""
    return model_in_context(
        model,
        "Rebuilding a chain's proposal from InferenceData needs the model that was sampled: call it "
        "inside `with model:` or pass model=model.",
    )


def rebuild_proposal(
    idata, chain: int = 0, *, model=None, var_names=None, kernel="gaussian"
) -> WhitenedFamily:
    r"""The Kameleon proposal a ``KameleonMetropolis`` chain ran with after tuning, rebuilt from its output.

    After tuning (the default ``adaptation="freeze"``) the chain's proposal is fixed:

    .. math::
        q(\cdot \mid y) = \mathcal N\!\left(y,\; L\left(\gamma^2 I + \nu^2 M_w H M_w^\top\right)L^\top\right),
        \qquad M_w = 2\left[\nabla_w k(w, z_i)\right]_{w = L^{-1}(y - m)},

    with the kernel :math:`k` of bandwidth :math:`\sigma` on the whitened subsample
    :math:`Z_w`, and :math:`m, C = LL^\top` the learned posterior mean and covariance.
    ``sample_stats`` keeps :math:`\sigma, \gamma, \nu^2` (whitened units) and :math:`|Z|` for
    every draw; ``pm.sample`` does not return the tuning draws :math:`Z` came from. So the
    rebuild applies the step's own window construction to the first :math:`|Z|` draws after
    tuning, in the value coordinates (:func:`value_space_draws`): :math:`m, C` are their shrunk
    moments (:func:`~pymc_kameleon.core.adaptation.covariance.shrunk_covariance`) and :math:`Z` are those
    draws; :math:`\nu^2` is set so that the kernel term's mean variance is the tuned
    ``kernel_variance``. The tuning window that gave the real :math:`Z` is followed by these
    draws in the same chain, so the rebuilt proposal equals the tuned one in law, not exactly: a
    window of a few hundred correlated draws is noisy (on a 2-d Gaussian the proposal variances
    differed by a factor of about 2, as much as rebuilds from two blocks of one chain differ).
    This is how ``plot_proposal_contours(idata, chain=...)`` works after ``pm.sample(cores>1)``.

    Parameters
    ----------
    idata : InferenceData or DataTree
        The output of ``pm.sample(step=KameleonMetropolis(...))``, with ``tune`` long enough for a
        Kameleon proposal to exist.
    chain : int, default 0
    model : pm.Model, optional
        The model sampled (default: the model in context).
    var_names : list of str, optional
        The random variables the step sampled, in its order (default: every continuous one).
    kernel : str or kernel object, default "gaussian"
        The step's ``kernel`` option (``sample_stats`` cannot record it: pass the one you sampled with).

    Returns
    -------
    WhitenedFamily
        Has ``Z`` and ``covariance(y)`` in the value coordinates, like ``step.proposal``.
    """
    _check_chain(idata, chain)
    stats = idata.sample_stats
    if "transport_map" in stats and bool(np.any(stats["transport_map"].isel(chain=int(chain)).values)):
        raise ValueError(f"Chain {chain} {THROUGH_MAP_MESSAGE}")
    bandwidth, gamma, nu2, size = (_frozen_stat(stats, name, chain) for name in _TUNED_STATS)
    if not (size >= 2 and math.isfinite(nu2) and math.isfinite(gamma)):
        raise ValueError(
            f"Chain {chain} ended tuning before its first Kameleon proposal (subsample size {size:g}, "
            f"nu2 {nu2:g}), so there is no tuned proposal to rebuild: it ran the Adaptive Metropolis walk "
            "alone. The Kameleon component joins after `kameleon_after` tuning steps (10000 by default); "
            "sample with a longer tune or a smaller kameleon_after."
        )
    X = value_space_draws(idata, chain, model=model, var_names=var_names)
    # The chain's last tuning window gave both its whitening and Z; the same estimator on the first
    # |Z| draws after tuning (the window that would have come next) gives a proposal equal in law.
    block = X[: int(size)]
    if block.shape[0] < size:
        warnings.warn(
            f"Chain {chain} has {X.shape[0]} draws, fewer than the {int(size)} points of its tuned Z; "
            f"the rebuilt proposal uses all {X.shape[0]} (sample more draws for a closer rebuild).",
            KameleonWarning,
            stacklevel=2,
        )
    moments = shrunk_covariance(block)
    if moments is None:
        raise ValueError(
            f"The first {block.shape[0]} draws of chain {chain} do not move in every coordinate, so no "
            "proposal can be rebuilt from them."
        )
    whitening = Whitening.from_moments(*moments)
    Z_w = whitening.whiten(block)
    k = make_kernel(kernel)
    if getattr(k, "has_bandwidth", False):
        k = k.with_bandwidth(bandwidth)
    family = KameleonProposal(Z_w, k, gamma**2, nu2)
    # Keep the tuned average kernel variance nu^2 v (as the step does when its Z changes): nu^2 alone
    # would make the proposal as much wider or narrower as this Z's kernel term is.
    kernel_variance = math.nan
    if "kernel_variance" in stats:  # InferenceData from before the statistic existed: nu^2 as it is
        kernel_variance = _frozen_stat(stats, "kernel_variance", chain)
    probe = Z_w[np.unique(np.linspace(0, Z_w.shape[0] - 1, _PROBE_POINTS).round().astype(int))]
    probe_variance = mean_rkhs_variance(family, probe)
    if math.isfinite(kernel_variance) and probe_variance > 0:
        family.nu2 = kernel_variance / probe_variance
    return WhitenedFamily(family, whitening)
