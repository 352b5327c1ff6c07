"""KASS's evidence on a regression whose prior is a million times wider than its posterior (a new user's).

y = b0 + b1 age + b2 income + N(0, sigma^2), n = 50, age in years (20-70), income in dollars (about
36 000), b ~ N(0, 10^2) (shape 3), sigma ~ HalfNormal(5). Along b2 the prior's sd (10) is 1.4e6 times
the posterior's, and the log-likelihood varies by about 1e12 nats over the prior's draws. The
coefficients integrate out given sigma, so log Z is exact by a 1-d quadrature (-89.874). Each seed runs
``pm.sample_smc(draws=1000, kernel=KASS, chains=2)`` and prints each chain's log Z error, standard error
and evidence lag, and the package's warnings.
Results: ``benchmarks/results/kass_unstandardised_regression.md``.

    OPENBLAS_NUM_THREADS=1 python benchmarks/kass_vague_prior_regression.py 4 [std=1] [draws=4000] [k=v ...]

``k=v`` are KASS options (``independence_weight=0``, ``n_steps=50``, ``threshold=0.9``); ``draws=N`` sets
the particles; ``std=1`` standardises age and income (a different model, with its own exact log Z).
"""

import sys
import time
import warnings

import numpy as np
import pymc as pm
from scipy import integrate, stats

from pymc_kameleon import KASS
from pymc_kameleon.smc import evidence_lags, log_evidence

N_OBS, PRIOR_SD = 50, 10.0


def make_data(standardise=False):
    """The user's data (seed 21): the design matrix (intercept, age, income) and y."""
    rng = np.random.default_rng(21)
    age = rng.uniform(20, 70, N_OBS)
    income = rng.lognormal(10.5, 0.5, N_OBS)
    y = 5.0 + 0.05 * age + 2e-5 * income + rng.normal(0, 0.8, N_OBS)
    if standardise:
        age, income = ((v - v.mean()) / v.std() for v in (age, income))
    return np.column_stack([np.ones(N_OBS), age, income]), y


def log_marginal_given_sigma(X, y, sigma):
    """log p(y | sigma) with b integrated out, in the stable Woodbury form (scipy's multivariate normal on
    sigma^2 I + T^2 X X^T is numerically singular here)."""
    A = X.T @ X / sigma**2 + np.eye(X.shape[1]) / PRIOR_SD**2
    L = np.linalg.cholesky(A)
    logdet = 2 * N_OBS * np.log(sigma) + 2 * np.sum(np.log(np.diag(L))) + X.shape[1] * np.log(PRIOR_SD**2)
    v = np.linalg.solve(L, X.T @ y / sigma**2)
    return -0.5 * (N_OBS * np.log(2 * np.pi) + logdet + y @ y / sigma**2 - v @ v)


def exact_log_z(X, y):
    """log Z by quadrature over sigma (shifted by 80 nats so that the integrand is not underflowing)."""
    def integrand(s):
        return np.exp(log_marginal_given_sigma(X, y, s) + stats.halfnorm(scale=5).logpdf(s) + 80)

    return np.log(integrate.quad(integrand, 1e-4, 30, points=[0.5, 0.8, 1, 2], limit=400)[0]) - 80


def main(argv):
    n_seeds, options = int(argv[0]), {}
    for item in argv[1:]:
        key, value = item.split("=")
        options[key] = float(value) if "." in value else int(value)
    standardise, draws = bool(options.pop("std", 0)), options.pop("draws", 1000)
    X, y = make_data(standardise)
    exact = exact_log_z(X, y)
    print(f"exact log Z {exact:.4f}")
    errors = []
    for seed in range(n_seeds):
        start = time.time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pm.Model():
                b = pm.Normal("b", 0, PRIOR_SD, shape=3)
                sigma = pm.HalfNormal("sigma", 5)
                pm.Normal("y", X @ b, sigma, observed=y)
                idata = pm.sample_smc(draws=draws, kernel=KASS, chains=2, cores=1, random_seed=40 + seed,
                                      progressbar=False, **options)
            evidence, lag = log_evidence(idata), evidence_lags(idata)
        errors += [(z - exact, se) for z, se in zip(evidence.log_z, evidence.std_error, strict=True)]
        seconds = time.time() - start
        print(f"seed {seed}: err {np.round(evidence.log_z - exact, 3)} se {np.round(evidence.std_error, 3)} "
              f"lag {np.round(lag.lag, 3)} +- {np.round(lag.std_error, 3)} {seconds:.0f}s", flush=True)
        ours = {str(w.message)[:160] for w in caught if "Kameleon" in type(w.message).__name__}
        for message in sorted(ours):
            print("   WARN:", message.replace("\n", " "))
    e = np.array(errors)
    covered = int(np.sum(np.abs(e[:, 0]) <= 2 * e[:, 1]))
    print(f"== {options} draws={draws} std={int(standardise)}: mean err {e[:, 0].mean():+.3f} "
          f"sd {e[:, 0].std(ddof=1):.3f} mean se {e[:, 1].mean():.3f} cover {covered}/{len(e)}")


if __name__ == "__main__":
    main(sys.argv[1:])
