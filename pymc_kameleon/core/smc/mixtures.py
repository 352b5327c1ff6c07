r"""KASS's proposal mixtures: the Kameleon moves mixed with a global walk, or with independent draws.

Both Hastings terms are the whole mixture's density
(:func:`~pymc_kameleon.core.proposals.mixture_log_density`), so the move is exact whichever component drew it.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from pymc_kameleon.core.proposals import mixture_log_density

__all__ = [
    "GlobalWalkMixture",
    "IndependenceMixture",
]


class _LocalMovesMixture:
    r"""A batched proposal family mixed with one other component of weight :math:`w`:
    :math:`q(x \mid y) = (1 - w)\, q_{\mathrm{family}}(x \mid y) + w\, q_{\mathrm{other}}(x \mid y)`.

    Subclasses give the other component's draws (``_draw_other``) and log density (``_log_other``).
    Both Hastings terms are the full mixture density, so the MH ratio is exact whichever component
    drew the move. The batch methods are those of
    :class:`~pymc_kameleon.core.kameleon.family.KameleonProposal` (``factor_batch``, ``sample_batch``,
    ``log_density_batch``); factors are ``family``'s.
    """

    def __init__(self, family, weight: float):
        self.family = family
        self.weight = float(weight)
        self.dim = family.dim

    Z = property(lambda self: self.family.Z)
    nu2 = property(lambda self: self.family.nu2)
    gamma2 = property(lambda self: self.family.gamma2)
    kernel = property(lambda self: self.family.kernel)

    def _draw_other(self, Y, rng) -> np.ndarray:
        raise NotImplementedError

    def _log_other(self, X, Y) -> np.ndarray:
        raise NotImplementedError

    def factor_batch(self, Y, chunk_size=None):
        return self.family.factor_batch(Y, chunk_size=chunk_size)

    def sample_batch(self, Y, rng, chunk_size=None, factors=None):
        # Both components draw for every row and a uniform picks one, so the random stream does not
        # depend on which component wins.
        main, log_main = self.family.sample_batch(Y, rng, chunk_size=chunk_size, factors=factors)
        other = self._draw_other(Y, rng)
        picked = rng.random(Y.shape[0]) < self.weight
        X = np.where(picked[:, None], other, main)
        if picked.any():  # the family's density of the other component's draws (its own draws know theirs)
            rows = None if factors is None else (factors[0][picked], factors[1][picked])
            log_main[picked] = self.family.log_density_batch(
                X[picked], Y[picked], chunk_size=chunk_size, factors=rows
            )
        return X, mixture_log_density(log_main, self._log_other(X, Y), self.weight)

    def log_density_batch(self, X, Y, chunk_size=None, factors=None):
        log_main = self.family.log_density_batch(X, Y, chunk_size=chunk_size, factors=factors)
        X, Y = np.asarray(X, dtype=float), np.asarray(Y, dtype=float)
        return mixture_log_density(log_main, self._log_other(X, Y), self.weight)


class GlobalWalkMixture(_LocalMovesMixture):
    r"""A batched Kameleon family mixed with a global random walk, both in whitened coordinates.

    .. math::
        q(x \mid y) = (1 - \rho)\, q_K(x \mid y) + \rho\, \mathcal N(x;\ y,\ \sigma^2 I),

    with :math:`q_K` the Kameleon family and :math:`\sigma^2` the optimal random-walk variance
    of the stage (so the walk is ASMC's move in whitened coordinates). The walk moves particles
    where the Kameleon covariance carries little information (far from :math:`Z`), as in
    :class:`~pymc_kameleon.core.kameleon.scale_free.ScaleFreeProposal`.

    Parameters
    ----------
    family : KameleonProposal
    walk_variance : float
        :math:`\sigma^2`.
    weight : float
        :math:`\rho` in (0, 1).
    """

    def __init__(self, family, walk_variance: float, weight: float):
        super().__init__(family, weight)
        self.walk_variance = float(walk_variance)

    def covariance(self, y) -> np.ndarray:
        """Covariance of the move from ``y``: the components' covariances, weighted."""
        rho = self.weight
        return (1 - rho) * self.family.covariance(y) + rho * self.walk_variance * np.eye(self.dim)

    def _draw_other(self, Y, rng):
        return Y + np.sqrt(self.walk_variance) * rng.standard_normal(Y.shape)

    def _log_other(self, X, Y):
        r2 = np.einsum("ij,ij->i", X - Y, X - Y)
        return -0.5 * (r2 / self.walk_variance + self.dim * np.log(2 * np.pi * self.walk_variance))


class IndependenceMixture(_LocalMovesMixture):
    r"""Local moves mixed with independent draws from the particles' Gaussian, in whitened coordinates.

    .. math::
        q(x \mid y) = (1 - \iota)\, q_{\mathrm{local}}(x \mid y)
            + \iota\, \frac{\mathcal N(x;\ 0,\ I)\, \mathbb 1\{\lVert x \rVert \le R\}}
                          {F_{\chi^2_d}(R^2)},

    with :math:`q_{\mathrm{local}}` the Kameleon family (or its :class:`GlobalWalkMixture`). In the
    coordinates whitened by the particles' mean and covariance, :math:`\mathcal N(0, I)` is the
    Gaussian fitted to the particles: the proposal of PyMC's ``IMH`` kernel. Where the tempered
    target is close to Gaussian, one accepted independent draw decorrelates a particle, which the
    local moves need many sweeps for; where it is not (a banana, several modes) those draws are
    mostly rejected and the local moves do the work.

    The independent draws are truncated to the ball of radius :math:`R`, the particles' largest
    whitened radius, so they never reach further than the particles do: the Gaussian of a small,
    skewed cloud otherwise proposes points where an ODE likelihood can take seconds. The ball's
    :math:`N(0, I)` mass is :math:`F_{\chi^2_d}(R^2)`, so the density stays exact.

    Parameters
    ----------
    family : KameleonProposal or GlobalWalkMixture
        The local moves, fitted on whitened particles.
    weight : float
        :math:`\iota` in (0, 1).
    radius : float
        :math:`R`, in whitened units.
    """

    def __init__(self, family, weight: float, radius: float):
        super().__init__(family, weight)
        self.radius = float(radius)
        if not self.radius > 0:
            raise ValueError(f"radius must be positive, got {radius!r}.")
        # log F(R^2), the N(0, I) mass of the ball.
        self._log_mass = float(stats.chi2.logcdf(self.radius**2, self.dim))

    def covariance(self, y) -> np.ndarray:
        r"""Covariance of the move from ``y``.

        .. math::
            (1-\iota)\,\Sigma_{\mathrm{local}}(y) + \iota c I + \iota(1-\iota)\, y y^\top

        (the components are centred at :math:`y` and at 0, so the gap between them adds spread);
        :math:`c = F_{\chi^2_{d+2}}(R^2) / F_{\chi^2_d}(R^2)` is the truncated draws' variance per
        coordinate.
        """
        y = np.asarray(y, dtype=float).reshape(-1)
        iota = self.weight
        local = (1 - iota) * self.family.covariance(y)
        c = np.exp(stats.chi2.logcdf(self.radius**2, self.dim + 2) - self._log_mass)
        return local + iota * c * np.eye(self.dim) + iota * (1 - iota) * np.outer(y, y)

    def _draw_other(self, Y, rng):
        # A direction uniform on the sphere and a squared radius by inversion of the chi-squared
        # distribution truncated at R^2: exact, and one draw per row whatever R is.
        direction = rng.standard_normal(Y.shape)
        u = rng.random(Y.shape[0])
        r2 = np.minimum(stats.chi2.ppf(u * np.exp(self._log_mass), self.dim), self.radius**2)
        norms = np.sqrt(np.einsum("ij,ij->i", direction, direction))
        return direction * (np.sqrt(r2) / norms)[:, None]

    def _log_other(self, X, Y):
        r2 = np.einsum("ij,ij->i", X, X)
        log_q = -0.5 * (r2 + self.dim * np.log(2 * np.pi)) - self._log_mass
        return np.where(r2 <= self.radius**2, log_q, -np.inf)
