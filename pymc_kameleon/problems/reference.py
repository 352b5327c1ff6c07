"""What a posterior of the catalogue is compared with: exact moments, or a long NUTS run to compute them.

Every builder of :mod:`~pymc_kameleon.problems.real_posteriors` returns ``(model, reference,
initvals)``: ``reference`` is an :data:`ExactReference` (moments in closed form or from exact
i.i.d. draws), a :class:`NutsReference` (how to compute them by NUTS, on this model or on a
differentiable twin of it), or None for "long NUTS on this same model"; ``initvals`` is None or a
dict for ``pm.sample(initvals=...)``. Data are simulated with fixed seeds, so references stay
valid. Running NUTS and caching its moments is the benchmark's job
(``benchmarks/real_posteriors.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pymc as pm

__all__ = ["ExactReference", "NutsReference"]

# Exact moments: scalar parameter name ("x[3]", "sigma") -> (mean, sd).
ExactReference = dict[str, tuple[float, float]]


@dataclass(frozen=True)
class NutsReference:
    """Reference moments from a long NUTS run, cached under ``key``.

    Parameters
    ----------
    key : str
        Cache key; posteriors that are the same distribution share one key (and one run).
    build : callable
        Returns the model NUTS samples. It must be differentiable and hold every variable of the
        benchmarked model under the same name (free or ``pm.Deterministic``).
    description : str
        How the reference model relates to the benchmarked one (printed with the table).
    target_accept : float
        NUTS ``target_accept`` for the reference run.
    tune, draws : int
        Tuning steps and draws per chain (4 chains) of the first attempt.
    """

    key: str
    build: Callable[[], pm.Model]
    description: str = "the same model"
    target_accept: float = 0.9
    tune: int = 2000
    draws: int = 5000
