"""Is KASS's log-evidence error bar right on a small nonlinear model? Coverage of log Z +- 2 SE over seeds.

A new user's check (session 92): an exponential decay y(t) = A exp(-k t) + c observed at five times with
noise sd s, A, k ~ LogNormal, c ~ Normal, s ~ HalfNormal, the likelihood a Potential; six KASS runs
(2000 particles) spread 0.060 about their mean against a mean error bar of 0.044, which looked
optimistic. The reference log Z is an importance-sampling estimate with 400 000 draws from a
multivariate t (5 degrees of freedom) fitted to a NUTS run on the unconstrained space, whose own
standard error is printed. Per seed, KASS's log Z, its error bar and the z-score; then the spread of
the estimates, the mean error bar, the z-scores' mean and sd, and the share within +-2 SE.

    OPENBLAS_NUM_THREADS=1 python -W ignore benchmarks/kass_logz_decay.py [--seeds 30] [--particles 2000]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread  # noqa: E402

one_blas_thread()  # before NumPy is imported

import numpy as np  # noqa: E402

TIMES = np.array([0.5, 1.0, 2.0, 4.0, 8.0])


def decay_model():
    """The user's model: the data from seed 3, A = 5, k = 0.3, c = 1, s = 0.3."""
    import pymc as pm
    import pytensor.tensor as pt

    rng = np.random.default_rng(3)
    y = 5 * np.exp(-0.3 * TIMES) + 1.0 + rng.normal(0, 0.3, TIMES.size)
    with pm.Model() as model:
        a = pm.LogNormal("A", np.log(5), 1)
        k = pm.LogNormal("k", np.log(0.3), 1)
        c = pm.Normal("c", 0, 3)
        s = pm.HalfNormal("s", 1)
        residuals = (y - (a * pt.exp(-k * TIMES) + c)) / s
        pm.Potential("lik", -0.5 * pt.sum(residuals**2) - TIMES.size * pt.log(s))
    return model


def reference_log_z(model, draws: int = 400_000, seed: int = 1) -> tuple[float, float]:
    """Importance sampling from a t_5 fitted (covariance x 1.5) to NUTS draws of the unconstrained
    parameters: (log Z, its standard error by the delta method)."""
    import pymc as pm
    import pytensor
    from pymc.pytensorf import join_nonshared_inputs
    from scipy import stats
    from scipy.special import logsumexp

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(2000, tune=2000, chains=4, target_accept=0.95, random_seed=99, progressbar=False,
                          cores=1, idata_kwargs={"include_transformed": True})
    names = [v.name for v in model.value_vars]
    u = np.column_stack([idata.posterior[n].values.ravel() for n in names])
    proposal = stats.multivariate_t(u.mean(0), np.cov(u.T) * 1.5, df=5, seed=seed)
    x = proposal.rvs(draws)
    point, values = model.initial_point(), model.value_vars
    [logp], inputs = join_nonshared_inputs(point, [model.logp(jacobian=True)], values)
    density = pytensor.function([inputs], logp)
    log_w = np.array([density(row) for row in x]) - proposal.logpdf(x)
    log_z = float(logsumexp(log_w) - np.log(draws))
    w = np.exp(log_w - log_w.max())
    se = float(np.std(w, ddof=1) / np.sqrt(draws) / np.mean(w))  # sd of the mean weight, relative
    return log_z, se


def main(argv=None):
    import pymc as pm

    from pymc_kameleon import KASS
    from pymc_kameleon.smc import log_evidence

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--particles", type=int, default=2000)
    parser.add_argument("--is-draws", type=int, default=400_000)
    args = parser.parse_args(argv)
    print(f"# {environment_line()}")
    model = decay_model()
    log_z, log_z_se = reference_log_z(model, args.is_draws)
    print(f"reference log Z {log_z:.4f} +- {log_z_se:.4f} (importance sampling, {args.is_draws} draws)")
    rows = []
    for seed in range(1, args.seeds + 1):
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample_smc(draws=args.particles, kernel=KASS, chains=1, random_seed=seed,
                                  progressbar=False)
        evidence = log_evidence(idata)
        estimate, se = float(np.ravel(evidence.log_z)[0]), float(np.ravel(evidence.std_error)[0])
        rows.append((estimate, se))
        print(f"seed {seed}: log Z {estimate:.3f} +- {se:.3f}, z {(estimate - log_z) / se:+.2f}", flush=True)
    e = np.array(rows)
    z = (e[:, 0] - log_z) / e[:, 1]
    print(
        f"{len(z)} runs of {args.particles} particles: spread of the estimates (sd) "
        f"{e[:, 0].std(ddof=1):.3f}, "
        f"mean error bar {e[:, 1].mean():.3f}; mean error {(e[:, 0] - log_z).mean():+.3f}; z-scores mean "
        f"{z.mean():+.2f}, sd {z.std(ddof=1):.2f}; within +-2 SE: {(np.abs(z) <= 2).sum()} of {len(z)}"
    )
    return z


if __name__ == "__main__":
    main()
