r"""Pseudo-marginal likelihood for Bayesian GP classification on UCI Glass (KAMH paper, section 5.1).

The model (Filippone & Girolami 2014; Sejdinovic et al. 2014, section 5.1) is

.. math::
    \theta_d \sim \mathcal N(0, 5), \qquad
    \mathbf f \mid \theta \sim \mathcal N(0, K_\theta), \qquad
    p(y_i = 1 \mid f_i) = \sigma(f_i) = \frac{1}{1 + e^{-f_i}},

with the ARD squared-exponential kernel of unit signal variance

.. math::
    (K_\theta)_{ij} = \exp\Big(-\tfrac12 \sum_{d=1}^{D} \frac{(x_{id} - x_{jd})^2}{\exp(\theta_d)}\Big)
    + \epsilon\, \delta_{ij},

so :math:`\theta_d = \log \ell_d^2` and :math:`\epsilon` is a small ridge. The marginal likelihood
:math:`p(\mathbf y \mid \theta) = \int p(\mathbf y \mid \mathbf f)\, \mathcal N(\mathbf f; 0, K_\theta)\,
d\mathbf f` is intractable; :class:`GPClassificationLikelihood` returns the log of an unbiased
importance-sampling estimate of it, which is what a pseudo-marginal sampler needs.

This module uses NumPy and SciPy only (no PyMC, no PyTensor). The PyMC model looks like::

    import numpy as np
    import pymc as pm
    from pymc_kameleon import KameleonMetropolis, PseudoMarginalPotential
    from pymc_kameleon.problems import GPClassificationLikelihood, load_glass

    X, y = load_glass()
    with pm.Model():
        theta = pm.Normal("theta", 0.0, sigma=np.sqrt(5.0), shape=X.shape[1])
        PseudoMarginalPotential("lik", GPClassificationLikelihood(X, y), inputs=[theta])
        idata = pm.sample(step=KameleonMetropolis())
"""

from __future__ import annotations

import csv
import math
import warnings
from dataclasses import dataclass
from importlib import resources

import numpy as np
from scipy.linalg import cho_solve, cholesky, solve_triangular
from scipy.spatial.distance import pdist, squareform
from scipy.special import expit, log_expit, logsumexp

from pymc_kameleon.core.linalg import SingularCovarianceError, jittered_cholesky
from pymc_kameleon.core.warning_categories import KameleonRuntimeWarning

__all__ = [
    "GLASS_FEATURES",
    "GLASS_WINDOW_TYPES",
    "GPClassificationLikelihood",
    "LaplaceApproximation",
    "load_glass",
]

GLASS_FEATURES = ("RI", "Na", "Mg", "Al", "Si", "K", "Ca", "Ba", "Fe")
"""Column names of the nine covariates, in the order of the columns of ``X``."""

GLASS_WINDOW_TYPES = ("WinF", "WinNF", "Veh")
"""Glass types labelled ``y = 1`` (window glass); Con, Tabl and Head are ``y = 0``."""

# exp(-theta/2) is capped here so that theta_d < -1400 gives an "infinitely short" lengthscale
# (K_ij -> 0 unless x_id == x_jd) instead of 0 * inf = NaN; below the cap K is unchanged.
_MAX_INV_LENGTHSCALE = 1e150


def load_glass(standardize: bool = True):
    r"""The UCI Glass data as a binary window / non-window classification problem.

    214 glass fragments, 9 covariates: refractive index (RI, stored as in MASS ``fgl``, i.e.
    :math:`(n - 1.518) \times 1000`) and the weight percentages of the oxides of Na, Mg, Al,
    Si, K, Ca, Ba and Fe. The label is :math:`y = 1` for window glass (WinF 70, WinNF 76,
    Veh 17: 163 fragments) and :math:`y = 0` for the rest (Con 13, Tabl 9, Head 29: 51
    fragments). The data ship with the package; see ``data/README.md`` for the source.

    Parameters
    ----------
    standardize : bool, default True
        Centre every column and scale it to unit variance,
        :math:`x_{id} \leftarrow (x_{id} - \bar x_d) / s_d` with the population standard
        deviation :math:`s_d^2 = \tfrac1n \sum_i (x_{id} - \bar x_d)^2`. This is the
        "centred and whitened" preprocessing of the paper, done per feature (not with the
        full covariance), so that each :math:`\theta_d` stays the log squared lengthscale of
        one named covariate.

    Returns
    -------
    X : ndarray of shape (214, 9), float64
        Covariates, columns in the order of :data:`GLASS_FEATURES`.
    y : ndarray of shape (214,), int64
        1 for window glass, 0 otherwise.
    """
    path = resources.files("pymc_kameleon.problems").joinpath("data", "glass.csv")
    with path.open("r", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    if tuple(header) != (*GLASS_FEATURES, "type"):
        raise RuntimeError(f"Unexpected columns in the bundled glass.csv: {header}")
    X = np.array([[float(v) for v in row[:-1]] for row in body])
    y = np.array([row[-1] in GLASS_WINDOW_TYPES for row in body], dtype=np.int64)
    if standardize:
        X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, y


@dataclass(frozen=True)
class LaplaceApproximation:
    r"""The Laplace approximation :math:`q(\mathbf f) = \mathcal N(\hat{\mathbf f}, (K^{-1} + W)^{-1})`.

    Attributes
    ----------
    f_hat : ndarray of shape (n,)
        Posterior mode of :math:`\mathbf f`.
    a_hat : ndarray of shape (n,)
        :math:`\hat{\mathbf a} = K^{-1}\hat{\mathbf f}`, equal to
        :math:`\nabla \log p(\mathbf y \mid \hat{\mathbf f})` at the mode.
    W : ndarray of shape (n,)
        Diagonal of :math:`W = -\nabla\nabla \log p(\mathbf y\mid\hat{\mathbf f})`,
        :math:`W_{ii} = \sigma(\hat f_i)\,\sigma(-\hat f_i)`.
    log_marginal : float
        Laplace approximation of :math:`\log p(\mathbf y \mid \theta)` (GPML eq. 3.32).
    n_iter : int
        Newton iterations used.
    converged : bool
        Whether Newton's method met its tolerance within ``max_newton_iter``.
    """

    f_hat: np.ndarray
    a_hat: np.ndarray
    W: np.ndarray
    log_marginal: float
    n_iter: int
    converged: bool


@dataclass(frozen=True)
class _Proposal:
    """Everything the importance sampler needs at one theta (cached, deterministic in theta)."""

    L_K: np.ndarray  # lower Cholesky factor of K
    R: np.ndarray  # lower Cholesky factor of A = I + L_K^T W L_K
    u_hat: np.ndarray  # the mode in whitened coordinates, L_K^{-1} f_hat = L_K^T a_hat
    log_det_R: float
    laplace: LaplaceApproximation


class GPClassificationLikelihood:
    r"""Unbiased importance-sampling estimator of the GP-classification marginal likelihood.

    Calling the object, ``lik(theta, rng)``, returns :math:`\log \hat p(\mathbf y\mid\theta)` where

    .. math::
        \hat p(\mathbf y \mid \theta) = \frac1N \sum_{j=1}^N
        \frac{p(\mathbf y \mid \mathbf f^{(j)})\, \mathcal N(\mathbf f^{(j)}; 0, K_\theta)}
             {q(\mathbf f^{(j)})},
        \qquad \mathbf f^{(j)} \sim q = \mathcal N\big(\hat{\mathbf f}, (K_\theta^{-1} + W)^{-1}\big),

    :math:`p(\mathbf y\mid\mathbf f) = \prod_i \sigma(t_i f_i)` with :math:`t_i = 2y_i - 1`, and
    :math:`q` the Laplace approximation of :math:`p(\mathbf f \mid \mathbf y, \theta)`. Because
    :math:`q` is a deterministic function of :math:`\theta` that covers the support of the
    prior, :math:`\mathbb E[\hat p] = p(\mathbf y\mid\theta)` exactly (this is the estimator
    of eq. (6) of the KAMH paper). Note that :math:`\log \hat p` is *not* unbiased for
    :math:`\log p`, and does not need to be for pseudo-marginal MCMC.

    **Mode.** :math:`\hat{\mathbf f}` is found by Newton's method in the numerically stable
    form of Rasmussen & Williams (GPML), Algorithm 3.1, always started at
    :math:`\mathbf f = 0` (so the proposal depends on :math:`\theta` only, never on the
    history of calls), with :math:`B = I + W^{1/2} K W^{1/2}` and step halving whenever
    the objective :math:`\Psi(\mathbf f) = \log p(\mathbf y\mid\mathbf f)
    - \tfrac12 \mathbf f^\top K^{-1}\mathbf f` fails to increase.

    **Sampling.** With :math:`K = L_K L_K^\top` and whitened coordinates
    :math:`\mathbf u = L_K^{-1}\mathbf f`, the prior is :math:`\mathcal N(0, I)` and the proposal
    is :math:`\mathcal N(\hat{\mathbf u}, A^{-1})` with :math:`A = I + L_K^\top W L_K = R R^\top`
    (:math:`A` has eigenvalues in :math:`[1, 1 + n/4]`, so :math:`R` is always well
    conditioned, however ill-conditioned :math:`K` is). Drawing
    :math:`\mathbf u = \hat{\mathbf u} + R^{-\top}\mathbf z`, :math:`\mathbf z \sim \mathcal N(0, I)`,
    the Jacobians of :math:`\mathbf f \mapsto \mathbf u` cancel and the log weight is

    .. math::
        \log w = \log p(\mathbf y \mid L_K \mathbf u) - \tfrac12 \|\mathbf u\|^2
                 + \tfrac12 \|\mathbf z\|^2 - \log|R|,

    so no :math:`K^{-1}` is ever formed. All :math:`N` draws are done with one triangular
    solve and one matrix product, and :math:`\log \hat p = \operatorname{logsumexp}(\log w) - \log N`.

    Parameters
    ----------
    X : array_like of shape (n, D)
        Covariates (e.g. from :func:`load_glass`).
    y : array_like of shape (n,)
        Labels in {0, 1}.
    n_importance : int, default 100
        Number :math:`N` of importance samples per estimate, as in the paper. More samples
        lower the variance of :math:`\log\hat p` (roughly like :math:`1/\sqrt N`) at a cost
        linear in :math:`N`.
    ridge : float, default 1e-6
        :math:`\epsilon` added to the diagonal of :math:`K_\theta`; part of the model. It
        keeps :math:`K_\theta` positive definite when lengthscales are long. If a Cholesky
        factorisation still fails, a larger, deterministic jitter is added (the estimator then
        targets the model with that jitter, which is still a function of :math:`\theta` only).
    max_newton_iter : int, default 100
        Cap on Newton iterations. If it is reached a ``KameleonRuntimeWarning`` is issued; the
        estimate stays unbiased (any Gaussian proposal is valid), only its variance suffers.
    newton_tol : float, default 1e-10
        Stop when a full Newton step increases :math:`\Psi` by less than this.

    Attributes
    ----------
    n_calls : int
        Number of estimates returned so far (calls of the object).
    last_laplace : LaplaceApproximation or None
        The Laplace approximation used by the most recent estimate.

    Examples
    --------
    >>> import numpy as np
    >>> X, y = load_glass()
    >>> lik = GPClassificationLikelihood(X, y)
    >>> log_p_hat = lik(np.zeros(9), np.random.default_rng(0))
    """

    def __init__(
        self,
        X,
        y,
        n_importance: int = 100,
        ridge: float = 1e-6,
        max_newton_iter: int = 100,
        newton_tol: float = 1e-10,
    ):
        X = np.asarray(X, dtype=float)
        y = np.asarray(y)
        if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(f"X must be a non-empty 2-d array (n, D); got shape {X.shape}.")
        if not np.all(np.isfinite(X)):
            raise ValueError("X has non-finite entries; remove or impute them first.")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},) to match X; got {y.shape}.")
        if not np.all((y == 0) | (y == 1)):
            raise ValueError("y must contain only the labels 0 and 1.")
        if (
            isinstance(n_importance, bool)
            or not isinstance(n_importance, (int, np.integer))
            or n_importance < 1
        ):
            raise ValueError(f"n_importance must be a positive integer; got {n_importance!r}.")
        if not (np.isfinite(ridge) and ridge >= 0):
            raise ValueError(f"ridge must be a finite number >= 0; got {ridge!r}.")
        if not (isinstance(max_newton_iter, (int, np.integer)) and max_newton_iter >= 1):
            raise ValueError(f"max_newton_iter must be a positive integer; got {max_newton_iter!r}.")
        if not (np.isfinite(newton_tol) and newton_tol > 0):
            raise ValueError(f"newton_tol must be a finite number > 0; got {newton_tol!r}.")
        self.X = X
        self.y = y.astype(np.int64)
        self.n_importance = int(n_importance)
        self.ridge = float(ridge)
        self.max_newton_iter = int(max_newton_iter)
        self.newton_tol = float(newton_tol)
        self._t = 2.0 * self.y - 1.0  # labels as +-1: log p(y_i | f_i) = log sigma(t_i f_i)
        self.n_calls = 0
        self.last_laplace: LaplaceApproximation | None = None
        self._cache_key: bytes | None = None
        self._cache: _Proposal | None = None

    @property
    def n_features(self) -> int:
        """Number D of covariates, i.e. the length of ``theta``."""
        return self.X.shape[1]

    # ----------------------------------------------------------------- public API

    def __call__(self, theta, rng=None) -> float:
        r"""Log of an unbiased estimate of :math:`p(\mathbf y\mid\theta)`.

        Parameters
        ----------
        theta : array_like of shape (D,)
            Log squared lengthscales :math:`\theta_d = \log \ell_d^2`.
        rng : numpy.random.Generator, int or None
            Source of the importance draws (positional or ``rng=``). The pseudo-marginal
            potential passes a Generator derived from the sampler's seed.

        Returns
        -------
        float
            :math:`\log \hat p(\mathbf y\mid\theta)`; finite in practice, and never NaN.
        """
        theta = self._check_theta(theta)
        rng = np.random.default_rng(rng)  # a Generator is passed through unchanged
        prop = self._proposal(theta)
        self.last_laplace = prop.laplace
        n = self.X.shape[0]
        # (N, n) then transpose: draw j uses the j-th block of n normals, so the first draws
        # do not change when n_importance does.
        Z = rng.standard_normal((self.n_importance, n)).T
        U = prop.u_hat[:, None] + solve_triangular(prop.R, Z, lower=True, trans="T", check_finite=False)
        F = prop.L_K @ U
        log_w = (
            log_expit(self._t[:, None] * F).sum(axis=0)
            - 0.5 * np.einsum("ij,ij->j", U, U)
            + 0.5 * np.einsum("ij,ij->j", Z, Z)
            - prop.log_det_R
        )
        self.n_calls += 1
        return float(logsumexp(log_w) - math.log(self.n_importance))

    def laplace_log_marginal(self, theta) -> float:
        r"""Deterministic Laplace approximation of :math:`\log p(\mathbf y\mid\theta)`.

        .. math::
            \log q(\mathbf y\mid\theta) = -\tfrac12 \hat{\mathbf a}^\top \hat{\mathbf f}
            + \log p(\mathbf y\mid\hat{\mathbf f}) - \tfrac12\log|B|,
            \qquad B = I + W^{1/2} K W^{1/2}

        (GPML eq. 3.32). It is biased, unlike the estimator, but a useful sanity check.

        Parameters
        ----------
        theta : array_like of shape (D,)

        Returns
        -------
        float
        """
        return self.laplace(theta).log_marginal

    def laplace(self, theta) -> LaplaceApproximation:
        """The Laplace approximation at ``theta`` (mode, W, log marginal, Newton iterations).

        Parameters
        ----------
        theta : array_like of shape (D,)

        Returns
        -------
        LaplaceApproximation
        """
        return self._proposal(self._check_theta(theta)).laplace

    def kernel_matrix(self, theta) -> np.ndarray:
        r"""The covariance :math:`K_\theta` (ridge included) of the latent function at ``X``.

        Parameters
        ----------
        theta : array_like of shape (D,)

        Returns
        -------
        ndarray of shape (n, n)
        """
        return self._kernel(self._check_theta(theta))

    # ----------------------------------------------------------------- internals

    def _check_theta(self, theta) -> np.ndarray:
        try:
            theta = np.asarray(theta, dtype=float)
        except (TypeError, ValueError) as err:
            raise ValueError(f"theta must be a numeric array; got {theta!r}.") from err
        if theta.shape != (self.n_features,):
            raise ValueError(
                f"theta must have shape ({self.n_features},), one log squared lengthscale per "
                f"column of X; got shape {theta.shape}."
            )
        if not np.all(np.isfinite(theta)):
            raise ValueError(f"theta must be finite; got {theta}.")
        return theta

    def _kernel(self, theta) -> np.ndarray:
        with np.errstate(over="ignore"):
            inv_ell = np.minimum(np.exp(-0.5 * theta), _MAX_INV_LENGTHSCALE)
        sq = squareform(pdist(self.X * inv_ell, "sqeuclidean"))
        K = np.exp(-0.5 * sq)
        K[np.diag_indices_from(K)] += self.ridge
        return K

    def _proposal(self, theta) -> _Proposal:
        # One-entry cache keyed on the exact bytes of theta: the proposal is a function of
        # theta alone, so reusing it cannot change the estimator's distribution.
        key = theta.tobytes()
        if key == self._cache_key:
            return self._cache
        K = self._kernel(theta)
        try:
            L_K, jitter = jittered_cholesky(K, what="GP kernel")
        except SingularCovarianceError as err:
            raise ValueError(f"The GP kernel matrix at theta={theta} cannot be factorised: {err}") from err
        if jitter:
            K[np.diag_indices_from(K)] += jitter  # the prior is N(0, L_K L_K^T); Newton must use the same K
        laplace = self._newton(K, theta)
        # Whitened proposal precision A = I + L_K^T W L_K = R R^T (see the class docstring).
        M = np.sqrt(laplace.W)[:, None] * L_K
        A = M.T @ M
        A[np.diag_indices_from(A)] += 1.0
        R = cholesky(A, lower=True, check_finite=False)
        log_det_R = float(np.log(np.diagonal(R)).sum())
        u_hat = L_K.T @ laplace.a_hat  # = L_K^{-1} f_hat since f_hat = K a_hat = L_K L_K^T a_hat
        # log|R| = 1/2 log|A| = 1/2 log|B| (Sylvester), so the Laplace evidence reuses R.
        log_marginal = float(-0.5 * u_hat @ u_hat + log_expit(self._t * laplace.f_hat).sum() - log_det_R)
        laplace = LaplaceApproximation(
            laplace.f_hat, laplace.a_hat, laplace.W, log_marginal, laplace.n_iter, laplace.converged
        )
        prop = _Proposal(L_K=L_K, R=R, u_hat=u_hat, log_det_R=log_det_R, laplace=laplace)
        self._cache_key, self._cache = key, prop
        return prop

    def _psi(self, a, f) -> float:
        # Newton objective Psi = log p(y|f) - 1/2 f^T K^{-1} f, with K^{-1} f = a.
        return float(log_expit(self._t * f).sum() - 0.5 * a @ f)

    def _newton(self, K, theta) -> LaplaceApproximation:
        """GPML Algorithm 3.1 with step halving, started at f = 0. Returns mode, a, W."""
        n = K.shape[0]
        y = self.y
        a = np.zeros(n)
        f = np.zeros(n)
        psi = self._psi(a, f)
        converged = False
        it = 0
        for it in range(1, self.max_newton_iter + 1):  # noqa: B007 (it is read after the loop)
            W = expit(f) * expit(-f)  # -d2/df2 log sigma(t f); accurate for large |f|
            grad = y - expit(f)  # d/df log sigma(t f)
            sW = np.sqrt(W)
            B = sW[:, None] * K * sW[None, :]
            B[np.diag_indices_from(B)] += 1.0
            L = cholesky(B, lower=True, check_finite=False)  # eigenvalues of B are >= 1: never fails
            b = W * f + grad
            a_new = b - sW * cho_solve((L, True), sW * (K @ b), check_finite=False)
            # Step halving on the full Newton direction (in a, hence in f = K a).
            da = a_new - a
            step = 1.0
            improved = False
            for _ in range(30):
                a_try = a + step * da
                f_try = K @ a_try
                psi_try = self._psi(a_try, f_try)
                if psi_try >= psi:
                    improved = True
                    break
                step *= 0.5
            if not improved:  # no ascent even for tiny steps: at the mode to rounding error
                converged = True
                break
            gain = psi_try - psi
            a, f, psi = a_try, f_try, psi_try
            # Psi is concave and the direction is Newton's, so a tiny gain (after a full or a
            # halved step) means Psi is flat to rounding error: we are at the mode.
            if gain < self.newton_tol:
                converged = True
                break
        if not converged:
            warnings.warn(
                f"Newton's method for the Laplace mode did not converge in {self.max_newton_iter} "
                f"iterations at theta={theta}; the estimate stays unbiased but may be noisy. "
                "Increase max_newton_iter.",
                KameleonRuntimeWarning,
                stacklevel=4,
            )
        W = expit(f) * expit(-f)  # at the final mode, for the proposal covariance
        return LaplaceApproximation(f, a, W, float("nan"), it, converged)
