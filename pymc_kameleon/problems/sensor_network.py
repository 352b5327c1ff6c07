r"""Sensor-network localisation: the KASS paper's multi-modal target (section 5.2).

:math:`S` sensors with unknown locations :math:`x_1, \dots, x_S \in \mathbb R^2` and :math:`B` base
sensors with known locations :math:`x_{S+1}, \dots, x_{S+B}`. Every pair of sensors that involves
at least one unknown sensor (base sensors do not observe each other) observes its distance with
probability decaying in the squared distance,

.. math::
    Z_{ij} \sim \operatorname{Bernoulli}\!\left(
        \exp\!\left(-\frac{\lVert x_i - x_j \rVert^2}{2R^2}\right)\right),
    \qquad
    Y_{ij} \mid Z_{ij} = 1 \sim \mathcal N(\lVert x_i - x_j \rVert, \sigma^2),

and the prior is :math:`x_{i,k} \sim \mathcal N(0.5, 1)` independently. The log likelihood sums, over
the pairs,
:math:`-\lVert x_i - x_j\rVert^2 / (2R^2) + \log \mathcal N(Y_{ij}; \lVert x_i - x_j\rVert, \sigma^2)`
for observed pairs and :math:`\log(1 - \exp(-\lVert x_i - x_j\rVert^2 / (2R^2)))` for unobserved ones
(both the indicator and the distance terms).

**Why the posterior is multi-modal.** Distances do not change under a reflection, and with two
base sensors the likelihood is exactly invariant under the reflection of *all* unknown sensors
across the line through the base sensors; only the prior (centred at 0.5) tells the two mirror
images apart. Sensors seen by few others add partial reflections and rings.

**The data.** The dataset of Lan et al. (2014) used in the paper is not available offline, so
:func:`sensor_network_data` simulates one: all five locations uniform on :math:`[0.1, 0.9]^2`, then
:math:`Z` and :math:`Y` from the model, from ``numpy.random.default_rng(DEFAULT_SEED)`` with
:math:`S = 3`, :math:`B = 2`, :math:`R = 0.3`, :math:`\sigma^2 = 0.02` (the paper's values).
Seed 38 was chosen among the first 40 seeds because every unknown sensor observes at least one
distance and multi-start optimisation finds two posterior modes of equal height (the mirror
images across the base line, which lies near :math:`y = 0.49`). Six of the nine pairs observe a
distance; a noisy distance can be negative (base 0 to unknown 1). The modes are *connected*: at
:math:`\sigma^2 = 0.02` a random-walk chain crosses between them within a few thousand steps
(``benchmarks/results/kass_smc_sensor.md``: among seeds 0-399, none kept most chains on one side). With it:

=========  ================  =============================================
sensor     true location     observed distances :math:`Y_{ij}` (noisy)
=========  ================  =============================================
unknown 0  (0.489, 0.300)    to unknown 1 (0.159), unknown 2 (0.444), base 1 (0.146)
unknown 1  (0.676, 0.608)    to unknown 0, base 0 (-0.057), base 1 (0.193)
unknown 2  (0.846, 0.132)    to unknown 0, base 0 (0.556)
base 0     (0.768, 0.497)    known
base 1     (0.451, 0.488)    known
=========  ================  =============================================

(:func:`sensor_network_data` returns the exact values; ``tests/problems/test_sensor_network.py``
pins them.) All functions here are NumPy, except :func:`sensor_network_model`, which imports PyMC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pymc_kameleon.problems.base import Problem

__all__ = [
    "DEFAULT_SEED",
    "SensorNetworkData",
    "sensor_network_data",
    "sensor_network_model",
    "side_of_base_line",
    "simulate_sensor_network",
]

#: The seed of the documented dataset (see the module docstring).
DEFAULT_SEED = 38
_LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class SensorNetworkData(Problem):
    """A sensor-network dataset: locations, observed pairs and distances, and the model constants.

    It is the problem (a :class:`~.base.Problem`): :meth:`log_density` is the NumPy log posterior
    and :meth:`pymc_model` the PyMC model.

    Attributes
    ----------
    true_locations : array (S, 2)
        Locations of the unknown sensors the data were simulated from.
    base_locations : array (B, 2)
        Known locations of the base sensors.
    pairs : int array (P, 2)
        Indices ``(i, j)``, ``i < j``, into the stacked locations ``[unknown; base]``; every pair
        with at least one unknown sensor.
    observed : bool array (P,)
        :math:`Z_{ij}`.
    distances : array (P,)
        :math:`Y_{ij}` where observed, 0 elsewhere.
    R, sigma2 : float
        Observation range and distance-noise variance.
    prior_mean, prior_sd : float
        The prior :math:`\\mathcal N(\\text{prior\\_mean}, \\text{prior\\_sd}^2)` of every unknown coordinate.
    """

    true_locations: np.ndarray
    base_locations: np.ndarray
    pairs: np.ndarray
    observed: np.ndarray
    distances: np.ndarray
    R: float
    sigma2: float
    prior_mean: float = 0.5
    prior_sd: float = 1.0

    @property
    def n_sensors(self) -> int:
        return int(self.true_locations.shape[0])

    @property
    def dim(self) -> int:
        """Number of unknown coordinates, :math:`2S`."""
        return 2 * self.n_sensors

    def _locations(self, x) -> np.ndarray:
        """Stack unknown (..., S, 2) and base locations into (..., S + B, 2)."""
        x = np.asarray(x, dtype=float).reshape(*np.shape(x)[:-1], -1)
        if x.shape[-1] != self.dim:
            raise ValueError(
                f"x must have {self.dim} coordinates per point (S = {self.n_sensors} sensors), "
                f"got shape {np.shape(x)}."
            )
        unknown = x.reshape(*x.shape[:-1], self.n_sensors, 2)
        base = np.broadcast_to(self.base_locations, (*x.shape[:-1], *self.base_locations.shape))
        return np.concatenate([unknown, base], axis=-2)

    def log_likelihood(self, x) -> np.ndarray:
        """Log likelihood (indicator and distance terms) at points of shape (..., 2S), batched.

        Also accepts (..., S, 2). A point where an unobserved pair coincides exactly gets :math:`-\\infty`.
        """
        x = np.asarray(x, dtype=float)
        if x.ndim >= 2 and x.shape[-2:] == (self.n_sensors, 2):
            x = x.reshape(*x.shape[:-2], self.dim)
        locations = self._locations(x)
        diff = locations[..., self.pairs[:, 0], :] - locations[..., self.pairs[:, 1], :]
        sq = np.sum(diff**2, axis=-1)
        log_p = -sq / (2.0 * self.R**2)
        dist = np.sqrt(sq)
        seen = (
            log_p
            - (self.distances - dist) ** 2 / (2.0 * self.sigma2)
            - 0.5 * (_LOG_2PI + math.log(self.sigma2))
        )
        with np.errstate(divide="ignore"):
            unseen = np.log(-np.expm1(log_p))  # log(1 - p), accurate for p near 0 and near 1
        return np.sum(np.where(self.observed, seen, unseen), axis=-1)

    def log_prior(self, x) -> np.ndarray:
        """Normalised log prior density at points of shape (..., 2S)."""
        z = (np.asarray(x, dtype=float).reshape(*np.shape(x)[:-1], -1) - self.prior_mean) / self.prior_sd
        return np.sum(-0.5 * z**2 - 0.5 * _LOG_2PI - math.log(self.prior_sd), axis=-1)

    def log_posterior(self, x) -> np.ndarray:
        """Unnormalised log posterior (prior plus likelihood), batched over leading axes."""
        return self.log_prior(x) + self.log_likelihood(x)

    # -- the Problem interface -------------------------------------------------
    name = "sensor_network"

    @property
    def true_values(self) -> np.ndarray:
        """The simulated unknown locations, flattened to shape (2S,) like a point ``x``."""
        return self.true_locations.reshape(-1)

    def log_density(self, x) -> np.ndarray:
        """:meth:`log_posterior`."""
        return self.log_posterior(x)

    def pymc_model(self):
        """:func:`sensor_network_model` of this dataset (a fresh model per call)."""
        return sensor_network_model(self)


def simulate_sensor_network(
    seed: int = DEFAULT_SEED,
    n_sensors: int = 3,
    n_base: int = 2,
    R: float = 0.3,
    sigma2: float = 0.02,
    low: float = 0.1,
    high: float = 0.9,
) -> SensorNetworkData:
    """Simulate locations (uniform on ``[low, high]^2``), indicators and distances from the model.

    The draws, in this order from ``numpy.random.default_rng(seed)``: the ``n_sensors + n_base``
    locations (unknown first), one uniform per pair for :math:`Z`, one standard normal per pair
    for the distance noise (drawn for every pair so the stream does not depend on :math:`Z`).
    """
    if n_sensors < 1 or n_base < 0:
        raise ValueError(f"need n_sensors >= 1 and n_base >= 0, got {n_sensors} and {n_base}.")
    if R <= 0 or sigma2 <= 0:
        raise ValueError(f"R and sigma2 must be positive, got {R} and {sigma2}.")
    rng = np.random.default_rng(seed)
    locations = rng.uniform(low, high, size=(n_sensors + n_base, 2))
    pairs = np.array(
        [(i, j) for i in range(n_sensors) for j in range(i + 1, n_sensors + n_base)], dtype=int
    ).reshape(-1, 2)
    dist = np.linalg.norm(locations[pairs[:, 0]] - locations[pairs[:, 1]], axis=1)
    observed = rng.random(len(pairs)) < np.exp(-(dist**2) / (2.0 * R**2))
    noise = rng.standard_normal(len(pairs))
    distances = np.where(observed, dist + math.sqrt(sigma2) * noise, 0.0)
    return SensorNetworkData(
        locations[:n_sensors], locations[n_sensors:], pairs, observed, distances, float(R), float(sigma2)
    )


def sensor_network_data() -> SensorNetworkData:
    """The documented dataset: :func:`simulate_sensor_network` with the paper's constants and seed 38."""
    return simulate_sensor_network(DEFAULT_SEED)


def side_of_base_line(data: SensorNetworkData, x) -> np.ndarray:
    """Which side of the line through the first two base sensors each unknown sensor is on.

    Returns a boolean array of shape (..., S): ``True`` on the left of base 0 → base 1. The
    pattern over the sensors labels the reflection-symmetric modes.
    """
    b0, b1 = data.base_locations[0], data.base_locations[1]
    xs = np.asarray(x, dtype=float).reshape(*np.shape(x)[:-1], data.n_sensors, 2)
    cross = (b1[0] - b0[0]) * (xs[..., 1] - b0[1]) - (b1[1] - b0[1]) * (xs[..., 0] - b0[0])
    return cross > 0


def sensor_network_model(data: SensorNetworkData | None = None):
    """A PyMC model of the posterior: ``x`` (shape (S, 2)) with the prior, and the likelihood as a potential.

    The likelihood is one ``pm.Potential("likelihood", ...)`` (so ``pm.sample_smc`` tempers it and
    it vectorises with ``vectorize_graph``), equal to :meth:`SensorNetworkData.log_likelihood`.
    """
    import pymc as pm
    import pytensor.tensor as pt

    data = sensor_network_data() if data is None else data
    with pm.Model() as model:
        x = pm.Normal("x", data.prior_mean, sigma=data.prior_sd, shape=(data.n_sensors, 2))
        locations = pt.concatenate([x, pt.as_tensor_variable(data.base_locations)], axis=0)
        diff = locations[data.pairs[:, 0]] - locations[data.pairs[:, 1]]
        sq = pt.sum(diff**2, axis=-1)
        log_p = -sq / (2.0 * data.R**2)
        seen = (
            log_p
            - (data.distances - pt.sqrt(sq)) ** 2 / (2.0 * data.sigma2)
            - 0.5 * (_LOG_2PI + math.log(data.sigma2))
        )
        unseen = pt.log1mexp(log_p)
        pm.Potential("likelihood", pt.sum(pt.switch(data.observed, seen, unseen)))
    return model
