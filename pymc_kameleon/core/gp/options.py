r"""The options of the GP surrogate in GP delayed acceptance, validated once per step.

:class:`GPTrainingOptions` holds what the user chose (and the defaults that depend on the
dimension); :meth:`GPTrainingOptions.new_gp` builds an empty
:class:`~pymc_kameleon.core.gp.surrogate.GPSurrogate` from them. The schedule that trains
it is :mod:`pymc_kameleon.core.gp.training`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_kameleon.core.gp.surrogate import GPSurrogate
from pymc_kameleon.core.validation import check_number

__all__ = [
    "GP_AFTER_TUNING",
    "GPTrainingOptions",
    "check_hyperparameters",
]


GP_AFTER_TUNING = ("grow", "freeze")
_HYPERPARAMETER_KEYS = ("lengthscales", "signal_variance", "noise_variance", "mean")


def check_hyperparameters(hyperparameters, d: int) -> dict | None:
    """Validate user-given GP hyperparameters; lengthscales are broadcast to ``d`` values."""
    if hyperparameters is None:
        return None
    if not isinstance(hyperparameters, dict) or not set(hyperparameters) <= set(_HYPERPARAMETER_KEYS):
        raise ValueError(
            f"hyperparameters must be a dict with keys among {_HYPERPARAMETER_KEYS}, got {hyperparameters!r}."
        )
    out = {}
    if "lengthscales" in hyperparameters:
        ell = np.asarray(hyperparameters["lengthscales"], dtype=float)
        try:
            ell = np.broadcast_to(ell, (d,)).copy()
        except ValueError:
            raise ValueError(
                f"hyperparameters['lengthscales'] must be a number or have length {d}, got shape {ell.shape}."
            ) from None
        if not (np.all(np.isfinite(ell)) and np.all(ell > 0)):
            raise ValueError(f"hyperparameters['lengthscales'] must be positive, got {ell!r}.")
        out["lengthscales"] = ell
    if "signal_variance" in hyperparameters:
        check_number("hyperparameters['signal_variance']", hyperparameters["signal_variance"], minimum=0)
        out["signal_variance"] = float(hyperparameters["signal_variance"])
    if "noise_variance" in hyperparameters:
        value = hyperparameters["noise_variance"]
        check_number("hyperparameters['noise_variance']", value, minimum=0, strict=False)
        out["noise_variance"] = float(value)
    if "mean" in hyperparameters:
        check_number("hyperparameters['mean']", hyperparameters["mean"])
        out["mean"] = float(hyperparameters["mean"])
    return out


@dataclass(frozen=True)
class GPTrainingOptions:
    """The GP's options, validated once per step (:meth:`from_user`); shared by its chains."""

    dim: int
    gradients: bool  # derivative observations: each point adds d + 1 rows
    initial_points: int
    max_points: int
    fit_max_points: int
    fit_hyperparameters: bool
    fixed_hyperparameters: dict | None  # user-given, validated; without "mean"
    gp_mean: object  # "gls" or a fixed constant
    noise_variance: object  # "auto", "fit" or a number, as given
    fit_noise: bool
    jitter: float
    gp_after_tuning: str

    @classmethod
    def from_user(
        cls,
        dim: int,
        *,
        gradients: bool,
        noisy_likelihood: bool,
        initial_points=None,
        max_points=None,
        fit_max_points=None,
        fit_hyperparameters=True,
        hyperparameters=None,
        noise_variance="auto",
        jitter=1e-8,
        gp_after_tuning="grow",
    ) -> GPTrainingOptions:
        """Validate the options (a ValueError names the bad one) and fill in the defaults.

        Defaults: ``initial_points`` :math:`\\max(10, 2(d+1))`; ``max_points``
        :math:`\\max(1000/r, 2\\,` ``initial_points`` :math:`)` and ``fit_max_points``
        :math:`\\max(20, 300/r)`, with :math:`r = d + 1` rows per point with gradients, else 1.
        ``noise_variance="auto"`` fits a noise variance when the likelihood is noisy (estimated).
        """
        if gp_after_tuning not in GP_AFTER_TUNING:
            raise ValueError(f"gp_after_tuning must be one of {GP_AFTER_TUNING}, got {gp_after_tuning!r}.")
        if not isinstance(fit_hyperparameters, bool):
            raise ValueError(f"fit_hyperparameters must be True or False, got {fit_hyperparameters!r}.")
        if isinstance(noise_variance, str):
            if noise_variance not in ("auto", "fit"):
                raise ValueError(
                    f'noise_variance must be "auto", "fit" or a number >= 0, got {noise_variance!r}.'
                )
        else:
            check_number("noise_variance", noise_variance, minimum=0, strict=False)
        check_number("jitter", jitter, minimum=0, strict=False)
        rows = dim + 1 if gradients else 1
        if initial_points is None:
            initial_points = max(10, 2 * (dim + 1))
        check_number("initial_points", initial_points, integer=True, minimum=1, strict=False)
        if max_points is None:
            max_points = max(1000 // rows, 2 * initial_points)
        check_number("max_points", max_points, integer=True, minimum=1, strict=False)
        if max_points < initial_points:
            raise ValueError(
                f"max_points ({max_points}) must be at least initial_points ({initial_points}): the GP "
                "is seeded with initial_points exact evaluations."
            )
        if fit_max_points is None:
            fit_max_points = max(20, 300 // rows)
        check_number("fit_max_points", fit_max_points, integer=True, minimum=2, strict=False)
        fixed = check_hyperparameters(hyperparameters, dim)
        gp_mean = fixed.pop("mean", "gls") if fixed else "gls"
        fit_noise = noisy_likelihood if noise_variance == "auto" else noise_variance == "fit"
        return cls(
            dim=int(dim),
            gradients=bool(gradients),
            initial_points=int(initial_points),
            max_points=int(max_points),
            fit_max_points=int(fit_max_points),
            fit_hyperparameters=fit_hyperparameters,
            fixed_hyperparameters=fixed,
            gp_mean=gp_mean,
            noise_variance=noise_variance,
            fit_noise=bool(fit_noise),
            jitter=float(jitter),
            gp_after_tuning=gp_after_tuning,
        )

    def new_gp(self) -> GPSurrogate:
        """An empty GP with the fixed hyperparameters (or unit ones)."""
        hyper = dict(self.fixed_hyperparameters or {})
        noise = hyper.pop("noise_variance", None)
        if noise is None:
            noise = 0.0 if isinstance(self.noise_variance, str) else float(self.noise_variance)
        return GPSurrogate(
            self.dim,
            lengthscales=hyper.get("lengthscales", 1.0),
            signal_variance=hyper.get("signal_variance", 1.0),
            noise_variance=noise,
            fit_noise=self.fit_noise,
            mean=self.gp_mean,
            jitter=self.jitter,
            max_points=self.max_points,
            gradients=self.gradients,
        )
