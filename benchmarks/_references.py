"""Scores against a reference, and the cached NUTS references, of ``real_posteriors.py``.

Split from ``real_posteriors.py`` (which re-exports every name here): :func:`scalar_draws` and
:func:`compare` score draws against reference moments; :class:`ReferenceStore` keeps the long NUTS
runs' moments in ``benchmarks/data/real_posteriors_reference.json`` and recomputes one only on request
(:func:`compute_nuts_reference`), refusing a cached entry whose model changed.
"""

import json
import math
import sys
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm

from pymc_kameleon.problems.reference import ExactReference, NutsReference

__all__ = [
    "REFERENCE_FILE", "ReferenceStore", "compare", "compute_nuts_reference", "free_variable_names",
    "scalar_draws",
]

#: The cached NUTS references of every posterior of ``real_posteriors.py`` (and their twins elsewhere).
REFERENCE_FILE = Path(__file__).resolve().parent / "data" / "real_posteriors_reference.json"


# ============================================================================ moments and metrics
def scalar_draws(posterior, names) -> dict[str, np.ndarray]:
    """Draws of every scalar component of the variables ``names``, as ``{"x[3]": (chain, draw)}``."""
    out = {}
    for name in names:
        values = posterior[name].values
        shape = values.shape[2:]
        if not shape:
            out[name] = values
            continue
        flat = values.reshape(values.shape[:2] + (-1,))
        for i, index in enumerate(np.ndindex(shape)):
            out[f"{name}[{','.join(map(str, index))}]"] = flat[..., i]
    return out


def free_variable_names(model) -> list[str]:
    """Names of the model's free random variables (the parameters compared)."""
    return [rv.name for rv in model.free_RVs]


def compare(draws: dict[str, np.ndarray], reference: ExactReference) -> dict:
    """Errors against the reference moments and convergence diagnostics, over scalar parameters.

    Parameters
    ----------
    draws : dict
        Scalar name -> draws of shape (chain, draw), from :func:`scalar_draws`.
    reference : dict
        Scalar name -> (mean, sd).

    Returns
    -------
    dict with ``mean_err``, ``log_sd_err``, ``min_ess``, ``max_rhat`` and the parameters that
    attain them (``worst_mean``, ``worst_sd``). A scalar on which some chain never moved during the
    draws has ESS 0 (ArviZ would report the number of draws).
    """
    missing = sorted(set(draws) - set(reference))
    if missing:
        raise KeyError(f"the reference has no moments for {missing}")
    mean_err, sd_err, ess, rhat = {}, {}, [], []
    for name, x in draws.items():
        ref_mean, ref_sd = reference[name]
        mean_err[name] = abs(float(x.mean()) - ref_mean) / ref_sd
        sd = float(x.std())
        sd_err[name] = abs(math.log(sd / ref_sd)) if sd > 0 else math.inf
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # R-hat of a chain that never moved: NaN
            rhat.append(float(az.rhat(x)))
            # ArviZ gives a constant chain the full ESS; a chain that never moved has none.
            stuck = np.any(np.ptp(x, axis=1) == 0)
            ess.append(0.0 if stuck else float(az.ess(x, method="bulk")))
    rhat = np.array(rhat)
    return {
        "mean_err": max(mean_err.values()),
        "worst_mean": max(mean_err, key=mean_err.get),
        "log_sd_err": max(sd_err.values()),
        "worst_sd": max(sd_err, key=sd_err.get),
        "min_ess": float(np.nan_to_num(np.min(ess), nan=0.0)),
        "max_rhat": float(np.nan if np.isnan(rhat).any() else rhat.max()),
    }


# ============================================================================ references
def _fingerprint(model) -> float:
    """The model's log density at its initial point: changes whenever its data or priors change."""
    return float(model.compile_logp()(model.initial_point()))


def compute_nuts_reference(spec: NutsReference, chains=4, cores=2, seed=2025) -> dict:
    """Moments of every variable from a long NUTS run; refuses unless R-hat < 1.01 and ESS > 2000.

    The run is doubled in length (twice at most) until every scalar passes.

    Parameters
    ----------
    spec : NutsReference
        What to sample, and the tuning steps and draws per chain of the first attempt.
    chains, cores, seed
        Chains, processes and the seed of the first attempt.

    Returns
    -------
    dict
        ``params`` (scalar name -> [mean, sd]) plus the diagnostics and how it was computed.
    """
    tune, draws = spec.tune, spec.draws
    for attempt in range(3):
        model = spec.build()
        start = time.perf_counter()
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(
                draws=draws, tune=tune, chains=chains, cores=cores, random_seed=seed + attempt,
                target_accept=spec.target_accept, progressbar=False, compute_convergence_checks=False,
            )
        names = [v for v in idata.posterior.data_vars]
        draws_ = scalar_draws(idata.posterior, names)
        rhat = {k: float(az.rhat(x)) for k, x in draws_.items()}
        ess = {k: float(az.ess(x, method="bulk")) for k, x in draws_.items()}
        ok = max(rhat.values()) < 1.01 and min(ess.values()) > 2000
        divergences = int(idata.sample_stats["diverging"].values.sum())
        print(f"  reference {spec.key}: NUTS {chains} x ({tune} + {draws}), max R-hat "
              f"{max(rhat.values()):.4f}, min ESS {min(ess.values()):.0f}, {divergences} divergences, "
              f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        if ok:
            return {
                "params": {k: [float(x.mean()), float(x.std())] for k, x in draws_.items()},
                "method": (f"NUTS {chains} x ({tune} tune + {draws} draws), "
                           f"target_accept {spec.target_accept}, seed {seed + attempt}"),
                "description": spec.description,
                "max_rhat": max(rhat.values()),
                "min_ess": min(ess.values()),
                "divergences": divergences,
                "fingerprint": _fingerprint(model),
                "versions": f"pymc {pm.__version__}, arviz {az.__version__}",
            }
        draws *= 2
    raise RuntimeError(f"NUTS reference for {spec.key!r} did not converge (R-hat >= 1.01 or ESS <= 2000).")


class ReferenceStore:
    """The cached NUTS references (a JSON file), recomputed only on request.

    Parameters
    ----------
    path : Path
        The JSON cache.
    refresh : bool
        Recompute every NUTS reference that is used, even if cached.
    cores : int
        Processes for the reference runs.
    """

    def __init__(self, path: Path, refresh: bool = False, cores: int = 2):
        self.path = Path(path)
        self.refresh = refresh
        self.cores = cores
        self.entries = json.loads(self.path.read_text()) if self.path.exists() else {}
        self._refreshed = set()

    def get(self, name: str, model, reference) -> tuple[ExactReference, str]:
        """Reference moments for posterior ``name`` and a one-line description of their source."""
        if isinstance(reference, dict):
            return reference, "exact"
        spec = reference if reference is not None else NutsReference(name, lambda: model)
        entry = self.entries.get(spec.key)
        stale = entry is not None and not math.isclose(
            entry["fingerprint"], _fingerprint(spec.build()), rel_tol=1e-9, abs_tol=1e-9
        )
        if entry is None or (self.refresh and spec.key not in self._refreshed):
            entry = compute_nuts_reference(spec, cores=self.cores)
            self.entries[spec.key] = entry
            self._refreshed.add(spec.key)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.entries, indent=1, sort_keys=True) + "\n")
        elif stale:
            raise RuntimeError(
                f"the cached reference {spec.key!r} was computed for a different model (its log density "
                f"at the initial point changed); rerun with --refresh-reference --posteriors {name}"
            )
        params = {k: (float(m), float(s)) for k, (m, s) in entry["params"].items()}
        source = (f"{entry['method']} on {spec.description}: max R-hat {entry['max_rhat']:.4f}, "
                  f"min bulk ESS {entry['min_ess']:.0f}, {entry['divergences']} divergences")
        return params, source
