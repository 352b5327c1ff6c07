r"""The five targets of Table 1 of the GP-surrogate delayed-acceptance paper, as PyMC models.

Benavoli, Wyse & White ("Gaussian Processes to speed up MCMC with automatic
exploratory-exploitation effect", section 4 and Appendix A) compare two-stage GP samplers
with MH and MALA on five posteriors. Each builder here simulates the data from a ``seed``
(the paper draws new data in every repetition) and returns a :class:`Table1Target`: the
model, the data, the true parameter values, the reported parameters and whether the model
has gradients.

=====  ==========================================================  ======  =========
name   posterior                                                   dim     gradients
=====  ==========================================================  ======  =========
T1     curvature and scale (a, b) of a Haario-type banana          2       yes
T2     Michaelis-Menten regression (a, b, sigma)                   3       yes
T3     GP-classifier hyperparameters (l1, l2, sigma^2), Laplace    3       no (Op)
T4     SIR ODE (beta, gamma, sigma1, sigma2), ``solve_ivp`` Op     4       no (Op)
T5     logistic regression (beta_0..beta_4)                        5       yes
=====  ==========================================================  ======  =========

**Counting likelihood evaluations.** Every target's likelihood goes through one Python
``perform`` that increments ``target.counter.calls``: the black-box Ops of T3 and T4 count
their own solves, and in T1, T2 and T5 the log-likelihood is a ``pm.Potential`` wrapped in
:class:`CountingIdentity`, an identity Op whose gradient passes through. The count is what
the compiled functions actually did, for any sampler: ``pm.Metropolis`` computes
``logp(proposal) - logp(current)`` in one compiled call (two likelihood evaluations, or one
where PyTensor merges identical ones) per variable and vector element, NUTS one per leapfrog step.
The counter lives in the process that runs the Op, so counts are only complete with
``cores=1``.

**Conventions.** "N(m, v)" in Appendix A is read as mean and *variance*, as its
``b ~ N(30, 15^2)`` shows; so T3's N(0, 10) has sd sqrt(10) and T5's N(0, 100) has sd 10.
The reported parameters (``Table1Target.params``) are on the paper's natural scale (sigma, not
log sigma), and the squared errors of the benchmark are computed there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.special import expit

from pymc_kameleon.problems.base import Problem
from pymc_kameleon.problems.gp_classification import GPClassificationLikelihood

# The SIR solve (T4's black box) lives with the other ODEs; its names stay importable from here.
from pymc_kameleon.problems.ode import SIR_SOLVER, SIR_TIMES, SIR_Y0, SIRSolveOp, sir_solution

__all__ = [
    "PAPER_TABLE1",
    "SIR_SOLVER",
    "SIR_TIMES",
    "SIR_Y0",
    "TARGETS",
    "CallCounter",
    "CountingIdentity",
    "GPClassifierLaplaceOp",
    "SIRSolveOp",
    "Table1Target",
    "banana_ab",
    "build",
    "gp_classifier",
    "logistic_regression",
    "michaelis_menten",
    "sir",
    "sir_solution",
]

#: Table 1 of the paper: AR, ESS, ESJD, Eval% (likelihood evaluations in the 2000 posterior
#: iterations) and SD (squared distance of the posterior mean from the truth), averaged over 30
#: repetitions and over parameters, by target and sampler. MALA was not run on T4.
PAPER_TABLE1 = {
    "T1": {"MH": (0.37, 90, 0.13, 100, 0.02), "GP-MH": (0.36, 113, 0.13, 41, 0.02),
           "MALA": (0.26, 73, 0.2, 100, 0.03), "GP-MALA": (0.26, 75, 0.2, 35, 0.02)},
    "T2": {"MH": (0.28, 138, 32.6, 100, 339), "GP-MH": (0.27, 133, 31, 39, 339),
           "MALA": (0.26, 220, 51, 100, 316), "GP-MALA": (0.21, 147, 29, 43, 255)},
    "T3": {"MH": (0.42, 137, 0.44, 100, 4.1), "GP-MH": (0.42, 135, 0.38, 42, 3.5),
           "MALA": (0.44, 133, 0.48, 100, 4.1), "GP-MALA": (0.43, 134, 0.45, 45, 3.5)},
    "T4": {"MH": (0.1, 51, 0.003, 100, 0.009), "GP-MH": (0.1, 45, 0.003, 15, 0.009)},
    "T5": {"MH": (0.29, 98, 0.002, 100, 0.006), "GP-MH": (0.29, 102, 0.002, 35, 0.006),
           "MALA": (0.67, 339, 0.009, 100, 0.006), "GP-MALA": (0.67, 368, 0.009, 68, 0.006)},
}
PAPER_COLUMNS = ("AR", "ESS", "ESJD", "Eval%", "SD")


@dataclass
class CallCounter:
    """Number of exact likelihood evaluations (``perform`` calls) made so far."""

    calls: int = 0


class CountingIdentity(Op):
    r"""Identity on a float64 scalar that counts its evaluations; its gradient passes through.

    Wrapping a log-likelihood expression :math:`\ell` as ``CountingIdentity(counter)(ell)``
    leaves the model (and its gradient, :math:`\partial\ell/\partial\theta`) unchanged, while
    every compiled evaluation of :math:`\ell` runs this Op's Python ``perform`` once, and so is
    counted. It costs a few microseconds per call.
    """

    # No __props__: two instances (two counters) must never be merged by PyTensor.

    def __init__(self, counter: CallCounter):
        self.counter = counter

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        if x.type.ndim != 0:
            raise ValueError("CountingIdentity wraps a scalar log-likelihood.")
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        self.counter.calls += 1
        output_storage[0][0] = np.array(inputs[0], dtype=node.outputs[0].dtype)

    def L_op(self, inputs, outputs, output_grads):  # PyTensor 2
        return [output_grads[0]]

    def pullback(self, inputs, outputs, output_grads):  # PyTensor >= 3
        return [output_grads[0]]


@dataclass
class Table1Target(Problem):
    """One Table-1 posterior: the model and everything a benchmark needs (a :class:`~.base.Problem`).

    Attributes
    ----------
    name : str
        ``"T1"`` ... ``"T5"``.
    title : str
    model : pymc.Model
    params : tuple of (label, variable name, index)
        The reported parameters on the paper's scale: ``posterior[variable name]`` (a free
        variable or a ``pm.Deterministic``), at ``index`` if the variable is a vector.
    true_values : ndarray
        True values of ``params``, in the same order, used to simulate the data.
    data : dict
        The simulated data.
    has_gradient : bool
        Whether the log density is differentiable in PyTensor (False for the black-box Ops).
    counter : CallCounter
        Counts exact likelihood evaluations.
    seed : int
        Seed the data were simulated from.
    paper : dict
        This target's rows of Table 1 (:data:`PAPER_TABLE1`).
    """

    name: str
    title: str
    model: pm.Model
    params: tuple
    true_values: np.ndarray
    data: dict
    has_gradient: bool
    counter: CallCounter
    seed: int
    paper: dict = field(default_factory=dict)

    def pymc_model(self) -> pm.Model:
        """:attr:`model`, built with this target's data and counter (:class:`~.base.Problem` interface)."""
        return self.model

    @property
    def dim(self) -> int:
        """Number of sampled coordinates (the sizes of the model's free variables)."""
        return int(sum(np.size(v) for v in self.model.initial_point().values()))

    @property
    def labels(self) -> list[str]:
        return [p[0] for p in self.params]

    def draws(self, idata) -> np.ndarray:
        """Posterior draws of ``params`` as an array (chain, draw, len(params)).

        Works with ArviZ 0.x InferenceData and ArviZ 1 DataTree.
        """
        cols = []
        for _, var, index in self.params:
            values = np.asarray(idata.posterior[var].values, dtype=float)
            cols.append(values if index is None else values[..., index])
        return np.stack(cols, axis=-1)


def _counted_potential(name: str, loglik, counter: CallCounter):
    """The log-likelihood as a counted potential (the steps see it as the likelihood)."""
    return pm.Potential(name, CountingIdentity(counter)(loglik))


# --------------------------------------------------------------------------- T1
def banana_ab(seed: int = 0, n: int = 30, a: float = 0.2, b: float = 2.0) -> Table1Target:
    r"""T1: the posterior over the curvature ``a`` and scale ``b`` of a banana distribution.

    The paper gives only "the 2D posterior of the parameters a, b of the banana shape
    distribution (true a = 0.2, b = 2)" with a "zero" (flat) prior. We use the banana of Haario,
    Saksman & Tamminen (1999), a twisted Gaussian with curvature :math:`a` and first-coordinate
    sd :math:`b`: the :math:`n` observations :math:`z_j \in \mathbb R^2` are

    .. math::
        z_{j1} = b\,u_{j1}, \qquad z_{j2} = u_{j2} - a\,(z_{j1}^2 - b^2), \qquad u_j \sim \mathcal N(0, I_2),

    so (the map :math:`u \mapsto z` has unit Jacobian in :math:`u_2`)

    .. math::
        \log p(z \mid a, b) = \sum_{j=1}^n \Big[-\log b - \frac{z_{j1}^2}{2b^2}
            - \tfrac12\big(z_{j2} + a(z_{j1}^2 - b^2)\big)^2\Big] - n \log 2\pi.

    Every sampler starts at :math:`a = 0, b = 1` (``initval``). Why this one: it is the standard
    banana with exactly two parameters, both identified
    (:math:`b` by the spread of :math:`z_1`, :math:`a` by the bend of :math:`z_2` in
    :math:`z_1`), and with :math:`a = 0.2, b = 2` the data form a visible banana
    (:math:`a b^2 = 0.8` against unit noise). Priors: flat on :math:`a`, flat on :math:`b > 0`
    (``pm.Flat``, ``pm.HalfFlat``), the paper's "zero prior"; the posterior is proper for
    :math:`n \ge 2`, and with :math:`n = 30` it is right-skewed in :math:`b` (a scale with a flat
    prior), which matches the paper's "heavy tailed". The posterior couples :math:`a` and
    :math:`b` through :math:`a b^2`.
    """
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((n, 2))
    z1 = b * u[:, 0]
    z2 = u[:, 1] - a * (z1**2 - b**2)
    counter = CallCounter()
    with pm.Model() as model:
        a_ = pm.Flat("a", initval=0.0)
        b_ = pm.HalfFlat("b", initval=1.0)
        loglik = pt.sum(
            -pt.log(b_) - z1**2 / (2 * b_**2) - 0.5 * (z2 + a_ * (z1**2 - b_**2)) ** 2
        ) - n * math.log(2 * math.pi)
        _counted_potential("loglik", loglik, counter)
    return Table1Target(
        "T1", "banana posterior over (a, b)", model, (("a", "a", None), ("b", "b", None)),
        np.array([a, b]), {"z1": z1, "z2": z2}, True, counter, seed, paper=PAPER_TABLE1["T1"],
    )


# --------------------------------------------------------------------------- T2
MM_X = np.array([28.0, 55.0, 83.0, 110.0, 138.0, 225.0, 375.0])


def michaelis_menten(seed: int = 0, a: float = 0.14, b: float = 50.0, sigma: float = 0.1) -> Table1Target:
    r"""T2: Michaelis-Menten regression :math:`y_i = a x_i / (x_i + b) + \epsilon_i`.

    The noise is :math:`\epsilon_i \sim N(0, \sigma^2)`.

    Appendix A: :math:`a \sim N(3, 1)`, :math:`b \sim N(30, 15^2)`, :math:`\log\sigma \sim N(-2, 1)`
    and :math:`x = (28, 55, 83, 110, 138, 225, 375)`; the true values are :math:`a = 0.14`,
    :math:`b = 50`, :math:`\sigma = 0.1`. We follow the paper although the prior on :math:`a`
    puts the truth 2.9 prior sd below its mean: with seven points and noise as large as the
    signal (:math:`a x/(x+b) \le 0.14`), the likelihood barely identifies :math:`a` and
    :math:`b` separately, the posterior is a long, thin ridge (the paper's "heavily
    anisotropic"), and the posterior mean is far from the truth (Table 1's SD of about 300 is
    that bias). The prior gives :math:`b < -28` (a pole at :math:`x + b = 0`) small mass; such
    states have a non-finite likelihood and are rejected.
    """
    rng = np.random.default_rng(seed)
    y = a * MM_X / (MM_X + b) + sigma * rng.standard_normal(MM_X.size)
    counter = CallCounter()
    with pm.Model() as model:
        a_ = pm.Normal("a", 3.0, 1.0)
        b_ = pm.Normal("b", 30.0, 15.0)
        log_sigma = pm.Normal("log_sigma", -2.0, 1.0)
        sigma_ = pm.Deterministic("sigma", pt.exp(log_sigma))
        mu = a_ * MM_X / (MM_X + b_)
        _counted_potential("loglik", pt.sum(pm.logp(pm.Normal.dist(mu, sigma_), y)), counter)
    return Table1Target(
        "T2", "Michaelis-Menten regression (a, b, sigma)", model,
        (("a", "a", None), ("b", "b", None), ("sigma", "sigma", None)),
        np.array([a, b, sigma]), {"x": MM_X.copy(), "y": y}, True, counter, seed,
        paper=PAPER_TABLE1["T2"],
    )


# --------------------------------------------------------------------------- T3
class _ScaledGPClassification(GPClassificationLikelihood):
    r"""GP-classification Laplace evidence with a signal variance.

    Here :math:`\theta = (\log\ell_1^2, \ldots, \log\ell_D^2, \log\sigma^2)`.

    The kernel is :math:`\sigma^2 \exp(-\tfrac12 \sum_d (x_d - x'_d)^2/\ell_d^2)` plus the ridge;
    everything else (Newton's method, GPML Algorithm 3.1, and the evidence, GPML eq. 3.32) is
    :class:`~pymc_kameleon.problems.gp_classification.GPClassificationLikelihood`'s.
    """

    def _check_theta(self, theta):
        theta = np.asarray(theta, dtype=float)
        if theta.shape != (self.X.shape[1] + 1,) or not np.all(np.isfinite(theta)):
            raise ValueError(
                f"theta must be {self.X.shape[1] + 1} finite numbers (log squared lengthscales, then "
                f"log signal variance); got {theta!r}."
            )
        return theta

    def _kernel(self, theta):
        K = super()._kernel(theta[:-1])  # unit signal variance, ridge on the diagonal
        diag = np.diag_indices_from(K)
        K[diag] -= self.ridge
        K *= math.exp(theta[-1])
        K[diag] += self.ridge
        return K


class GPClassifierLaplaceOp(Op):
    r"""Black-box Op: the Laplace log evidence of a GP classifier.

    Inputs :math:`(\log\ell_1, \log\ell_2, \log\sigma^2)`, output a float64 scalar.

    ``perform`` only (no gradient), as a user would wrap a NumPy likelihood. Each call finds the
    Laplace mode by Newton's method (an :math:`n \times n` Cholesky per iteration) and counts
    itself in ``counter``.
    """

    def __init__(self, X, y, counter: CallCounter):
        self.laplace = _ScaledGPClassification(X, y)
        self.counter = counter

    def make_node(self, log_ell1, log_ell2, log_sigma2):
        inputs = [pt.as_tensor_variable(v, dtype="float64") for v in (log_ell1, log_ell2, log_sigma2)]
        return Apply(self, inputs, [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        self.counter.calls += 1
        log_ell1, log_ell2, log_sigma2 = (float(v) for v in inputs)
        theta = np.array([2.0 * log_ell1, 2.0 * log_ell2, log_sigma2])  # log l^2, as the base class wants
        if not np.all(np.isfinite(theta)) or np.any(np.abs(theta) > 50):
            value = -np.inf  # kernel under/overflows: no information, reject
        else:
            value = self.laplace.laplace_log_marginal(theta)
        output_storage[0][0] = np.asarray(value, dtype="float64")


def gp_classifier(seed: int = 0, n: int = 200, sigma2: float = 5.0) -> Table1Target:
    r"""T3: hyperparameters of a GP classifier, with the Laplace-approximate evidence as likelihood.

    Appendix A: :math:`\log\ell_1, \log\ell_2, \log\sigma^2 \sim N(0, 10)` (variance 10), inputs
    :math:`x_1, x_2 \sim N(0, 1)`, true lengthscales uniform on :math:`[0.1, 1]` (drawn from
    ``seed``) and true :math:`\sigma^2 = 5`. Labels: :math:`f \sim GP(0, \sigma^2 k_\ell)` at
    the inputs, :math:`y_i \sim \text{Bernoulli}(\text{logistic}(f_i))`.

    The likelihood is the Laplace approximation of :math:`\log p(y \mid \ell, \sigma^2)`
    (GPML eq. 3.32), deterministic, in the black-box :class:`GPClassifierLaplaceOp`.
    **Deviation:** ``n = 200`` points instead of the paper's 1000. With 1000, one evaluation
    takes about 150 ms on this machine (a 1000 x 1000 Cholesky per Newton step), and
    ``pm.Metropolis``, which makes six evaluations per iteration here, would need 40 minutes
    per run; with 200 points an evaluation takes about 4 ms.
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    ell = rng.uniform(0.1, 1.0, size=2)
    sq = ((X[:, None, :] - X[None, :, :]) / ell) ** 2
    K = sigma2 * np.exp(-0.5 * sq.sum(-1)) + 1e-6 * np.eye(n)
    f = np.linalg.cholesky(K) @ rng.standard_normal(n)
    y = (rng.uniform(size=n) < expit(f)).astype(np.int64)
    counter = CallCounter()
    op = GPClassifierLaplaceOp(X, y, counter)
    sd = math.sqrt(10.0)
    with pm.Model() as model:
        log_ell1 = pm.Normal("log_ell1", 0.0, sd)
        log_ell2 = pm.Normal("log_ell2", 0.0, sd)
        log_sigma2 = pm.Normal("log_sigma2", 0.0, sd)
        pm.Deterministic("ell1", pt.exp(log_ell1))
        pm.Deterministic("ell2", pt.exp(log_ell2))
        pm.Deterministic("sigma2", pt.exp(log_sigma2))
        pm.Potential("loglik", op(log_ell1, log_ell2, log_sigma2))
    return Table1Target(
        "T3", "GP-classifier hyperparameters (l1, l2, sigma^2)", model,
        (("ell1", "ell1", None), ("ell2", "ell2", None), ("sigma2", "sigma2", None)),
        np.array([ell[0], ell[1], sigma2]), {"X": X, "y": y, "f": f}, False, counter, seed,
        paper=PAPER_TABLE1["T3"],
    )


# --------------------------------------------------------------------------- T4
def sir(seed: int = 0, beta: float = 4.0, gamma: float = 1.0, sigma=(0.2, 0.3)) -> Table1Target:
    r"""T4: the SIR model of Demetri Pananos's PyMC "ODE API introduction" example.

    :math:`S' = -\beta S I`, :math:`I' = \beta S I - \gamma I`, :math:`(S, I)(0) = (0.99, 0.01)`,
    observed at :math:`t = 0.25, 0.5, \ldots, 4.75` with log-normal noise,
    :math:`Y_{k,c} \sim \text{LogNormal}(\log x_c(t_k), \sigma_c)`, true :math:`\beta = 4`,
    :math:`\gamma = 1`, :math:`\sigma = (0.2, 0.3)`. Priors as in that example:
    :math:`\sigma_c \sim \text{HalfCauchy}(1)`, :math:`R_0 \sim N(2, 3^2)` truncated to
    :math:`R_0 > 1`, :math:`\lambda \sim \text{LogNormal}(\log 2, 2)`, and
    :math:`\gamma = \lambda`, :math:`\beta = \lambda R_0`. The sampler moves
    :math:`(R_0, \lambda, \sigma_1, \sigma_2)`; the reported parameters are the paper's
    :math:`(\beta, \gamma, \sigma_1, \sigma_2)`.

    The ODE is solved by ``solve_ivp`` (LSODA, rtol 1e-8, atol 1e-10) in the black-box
    :class:`SIRSolveOp`, which has no gradient. The model's starting point (``initval``) is :math:`R_0 = 2`,
    :math:`\lambda = 2`, :math:`\sigma = (0.5, 0.5)`, the same for every sampler (PyMC's default
    would put :math:`\lambda` at its prior mean, 14.8, where the likelihood is NaN).
    """
    rng = np.random.default_rng(seed)
    truth = sir_solution(beta, gamma)[1:]
    y = rng.lognormal(mean=np.log(truth), sigma=np.asarray(sigma))
    counter = CallCounter()
    op = SIRSolveOp(counter)
    with pm.Model() as model:
        sigma_ = pm.HalfCauchy("sigma", 1.0, shape=2, initval=np.array([0.5, 0.5]))
        R0 = pm.TruncatedNormal("R0", 2.0, 3.0, lower=1.0, initval=2.0)
        lam = pm.LogNormal("lambda", math.log(2.0), 2.0, initval=2.0)
        beta_ = pm.Deterministic("beta", lam * R0)
        pm.Deterministic("gamma", lam)
        curves = op(beta_, lam)
        pm.LogNormal("Y", mu=pt.log(curves), sigma=sigma_, observed=y)
    return Table1Target(
        "T4", "SIR ODE (beta, gamma, sigma1, sigma2)", model,
        (("beta", "beta", None), ("gamma", "gamma", None), ("sigma1", "sigma", 0), ("sigma2", "sigma", 1)),
        np.array([beta, gamma, sigma[0], sigma[1]]), {"times": SIR_TIMES[1:].copy(), "y": y}, False,
        counter, seed, paper=PAPER_TABLE1["T4"],
    )


# --------------------------------------------------------------------------- T5
LOGISTIC_FEATURES = ("1", "x1", "x2", "x1*x2", "x1^2")


def logistic_features(X) -> np.ndarray:
    """The five features (1, x1, x2, x1 x2, x1^2) of T5, as columns."""
    x1, x2 = X[:, 0], X[:, 1]
    return np.column_stack([np.ones_like(x1), x1, x2, x1 * x2, x1**2])


def logistic_regression(seed: int = 0, n: int = 1000) -> Table1Target:
    r"""T5: logistic regression, :math:`y_i \sim \text{Bernoulli}(\text{logistic}(\phi(x_i)^\top\beta))`.

    Appendix A: :math:`\beta_i \sim N(0, 100)` (variance 100, sd 10), 1000 points with
    :math:`x_1, x_2 \sim N(0, 1)` and true :math:`\beta_i \sim N(0, 1)` drawn from ``seed``. The
    paper does not list the five features; we use :math:`\phi(x) = (1, x_1, x_2, x_1 x_2, x_1^2)`
    (intercept, both main effects, their interaction and one square), which makes all five
    coefficients identifiable with non-trivial posterior correlations.
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    beta = rng.standard_normal(5)
    F = logistic_features(X)
    y = (rng.uniform(size=n) < expit(F @ beta)).astype(np.int64)
    counter = CallCounter()
    with pm.Model() as model:
        beta_ = pm.Normal("beta", 0.0, 10.0, shape=5)
        eta = pt.dot(F, beta_)
        _counted_potential("loglik", pt.sum(pm.logp(pm.Bernoulli.dist(logit_p=eta), y)), counter)
    return Table1Target(
        "T5", "logistic regression (beta_0..beta_4)", model,
        tuple((f"beta{i}", "beta", i) for i in range(5)),
        beta, {"X": X, "features": F, "y": y}, True, counter, seed, paper=PAPER_TABLE1["T5"],
    )


#: The builders of the five targets by name, ``"T1"`` ... ``"T5"`` (:func:`build` calls them).
TARGETS: dict[str, Callable[..., Table1Target]] = {
    "T1": banana_ab,
    "T2": michaelis_menten,
    "T3": gp_classifier,
    "T4": sir,
    "T5": logistic_regression,
}


def build(name: str, seed: int = 0) -> Table1Target:
    """Build Table-1 target ``name`` ("T1" ... "T5") with data simulated from ``seed``."""
    if name not in TARGETS:
        raise ValueError(f"Unknown target {name!r}; choose from {sorted(TARGETS)}.")
    return TARGETS[name](seed=seed)
