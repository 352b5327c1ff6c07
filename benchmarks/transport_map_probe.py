"""Probe, not a sampler of the package: is the latent Poisson GP's difficulty its curvature, and would
a learned triangular map remove it? (Issue 43.)

The non-centred latent GP (``gp-poisson-latent-noncentred``) defeats every gradient-free sampler at
4 x (3000 + 6000). Its posterior is a curved ridge (the counts pin f = alpha L(rho) f_tilde, so
f_tilde moves along a curve as alpha does). This script separates the two things a sampler must
learn there, by fitting a map from a set of draws and running Metropolis in the map's coordinates:

- *linear*: y = L^-1 (x - m), the learned whitening every KAMH component uses (m, C the draws'
  mean and covariance);
- *quadratic*: a lower-triangular map with unit diagonal, y_k = z_k - h_k(z_<k), h_k the
  least-squares quadratic in the earlier whitened coordinates (variables in the model's order:
  hyperparameters before the latent values); its Jacobian is 1;
- *quadratic+scale*: y_k = (z_k - h_k(z_<k)) exp(-s_k(z_<k)), s_k linear (a funnel's changing
  width), log Jacobian sum_k s_k (Parno and Marzouk 2018, "Transport map accelerated MCMC").

The Metropolis chains run in y with the target pi(x(y)) |dx/dy|, a random walk scaled to 0.234
acceptance during tuning, alone or mixed half and half with an independence proposal from the
Gaussian fitted to the draws in y (inflated 1.2 times). The draws the map is fitted to come from
NUTS (the posterior itself), from KAMH's defaults (2000 tuning + 1000 draws, 4 chains: what a
tuning schedule would have), from ``pm.sample_smc`` (2000 particles, PyMC's IMH kernel) or, with
``--sources kass``, from ``pm.sample_smc(kernel=KASS)`` (2000 particles; its evaluations printed).
The chains start at draws of the fit's set and run 4 x (1000 + 6000); with KAMH and SMC draws the
map is refitted once, from those draws and the first 500 tuning states.

    python benchmarks/transport_map_probe.py --seeds 1 2
    python benchmarks/transport_map_probe.py --seeds 1 2 3 --sources kass
    python benchmarks/transport_map_probe.py --seeds 1 2 3 --sources kass --map package

Its own ``TriangularMap`` is kept as measured; the package's, ``core/adaptation/transport_map.py``, sets
the width's level from the scaled residuals and clips the widths to the fitted draws' range
(``map_shape_probe.py`` uses it).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, also when loaded by path
from _common import environment_line, one_blas_thread

one_blas_thread()  # before NumPy is imported

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
from scipy import stats  # noqa: E402

from pymc_kameleon import KASS, KameleonMetropolis  # noqa: E402
from pymc_kameleon.core.adaptation import transport_map  # noqa: E402
from pymc_kameleon.core.adaptation.transport_map import map_features as _features  # noqa: E402
from pymc_kameleon.problems.real_posteriors import POSTERIORS  # noqa: E402
from pymc_kameleon.smc import stage_stats  # noqa: E402

NAME = "gp-poisson-latent-noncentred"


class TriangularMap:
    """x = m + L z, z_k = y_k exp(s_k(z_<k)) + h_k(z_<k), fitted to draws ``X`` (module docstring)."""

    def __init__(self, X: np.ndarray, quadratic: bool, scale: bool, ridge: float = 1e-3):
        self.quadratic, self.dim = quadratic, X.shape[1]
        self.mean = X.mean(0)
        self.chol = np.linalg.cholesky(np.cov(X.T))
        Z = np.linalg.solve(self.chol, (X - self.mean).T).T
        self.shift, self.log_width = [], []
        for k in range(self.dim):
            F = _features(Z[:, :k], quadratic)
            coef = np.linalg.solve(F.T @ F + ridge * len(Z) * np.eye(F.shape[1]), F.T @ Z[:, k])
            residual = Z[:, k] - F @ coef
            width = np.zeros(k + 1)
            if scale:  # log residual^2 on [1, z_<k]; half its slopes are s_k's, the mean sets s_k's level
                G = _features(Z[:, :k], False)
                width = 0.5 * np.linalg.lstsq(G, np.log(residual**2 + 1e-12), rcond=None)[0]
                width[0] = 0.5 * np.log(np.mean(residual**2))
            self.shift.append(coef)
            self.log_width.append(width)

    def _terms(self, z_before: np.ndarray, k: int) -> tuple[float, float]:
        s = self.log_width[k][0] + self.log_width[k][1:] @ z_before
        h = _features(z_before[None], self.quadratic)[0] @ self.shift[k]
        return s, h

    def to_x(self, y: np.ndarray) -> tuple[np.ndarray, float]:
        """x(y) and log |dx/dy| (up to the constant log |L|)."""
        z, log_jacobian = np.empty(self.dim), 0.0
        for k in range(self.dim):
            s, h = self._terms(z[:k], k)
            z[k] = y[k] * np.exp(s) + h
            log_jacobian += s
        return self.mean + self.chol @ z, log_jacobian

    def to_y(self, x: np.ndarray) -> np.ndarray:
        z, y = np.linalg.solve(self.chol, x - self.mean), np.empty(self.dim)
        for k in range(self.dim):
            s, h = self._terms(z[:k], k)
            y[k] = (z[k] - h) * np.exp(-s)
        return y


class PackageMap:
    """The package's map (``core/adaptation/transport_map.py``) with this probe's method names."""

    def __init__(self, X: np.ndarray, quadratic: bool, scale: bool):
        self.fitted = transport_map.TriangularMap.fit(X, quadratic=quadratic, scale=scale)

    def to_x(self, y: np.ndarray) -> tuple[np.ndarray, float]:
        return self.fitted.to_model(y)  # its log Jacobian includes log |L|, a constant

    def to_y(self, x: np.ndarray) -> np.ndarray:
        return self.fitted.to_reference(x)[0]


MAPS = {"probe": TriangularMap, "package": PackageMap}


def unconstrained(posterior) -> np.ndarray:
    """(chains, draws, 13): log rho, log alpha, f_tilde."""
    return np.concatenate(
        [np.log(posterior["rho"].values)[..., None], np.log(posterior["alpha"].values)[..., None],
         posterior["f_tilde"].values], axis=-1)


def fit_draws(model, source: str, seed: int) -> np.ndarray:
    with model:
        if source == "nuts":
            idata = pm.sample(1000, tune=1000, chains=4, cores=1, target_accept=0.95, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
            return unconstrained(idata.posterior)
        if source == "kamh":
            idata = pm.sample(1000, tune=2000, chains=4, cores=1, step=KameleonMetropolis(), random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
            return unconstrained(idata.posterior)
        kernel = KASS if source == "kass" else pm.smc.kernels.IMH
        idata = pm.sample_smc(2000, kernel=kernel, chains=1, cores=1, random_seed=seed, progressbar=False,
                              compute_convergence_checks=False)
        if source == "kass":
            evaluations = 2000 + int(stage_stats(idata, "likelihood_evals")[0].sum())
            print(f"# seed {seed}: KASS's 2000 particles: {evaluations} log-density evaluations", flush=True)
        return unconstrained(idata.posterior).reshape(4, 500, -1)


def run(log_density, draws_for_fit, seed, quadratic, scale, independence, refit, tune=1000, draws=6000,
        map_class=TriangularMap):
    rng = np.random.default_rng(seed)
    chains, _, d = draws_for_fit.shape
    fit_set = draws_for_fit.reshape(-1, d)

    def setup(fit_set):
        tmap = map_class(fit_set, quadratic, scale)
        Y = np.array([tmap.to_y(x) for x in fit_set[::2]])
        q = stats.multivariate_normal(Y.mean(0), np.cov(Y.T) * 1.2**2)
        return tmap, q, np.linalg.cholesky(q.cov)

    def in_map(x, log_jacobian):
        """The target in the map's coordinates at the y whose image is x: pi(x) |dx/dy|."""
        value = log_density(x)
        return value + log_jacobian if np.isfinite(value) else -np.inf

    tmap, q, q_chol = setup(fit_set)
    xs = [draws_for_fit[c, -1] for c in range(chains)]
    ys = [tmap.to_y(x) for x in xs]
    current = [in_map(x, tmap.to_x(y)[1]) for x, y in zip(xs, ys)]
    log_step = np.full(chains, np.log(2.38 / np.sqrt(d)))
    states = np.empty((chains, tune + draws, d))
    for t in range(tune + draws):
        if refit and t == tune // 2:
            tmap, q, q_chol = setup(np.concatenate([fit_set, states[:, :t].reshape(-1, d)]))
            ys = [tmap.to_y(x) for x in xs]
            current = [in_map(x, tmap.to_x(y)[1]) for x, y in zip(xs, ys)]
        for c in range(chains):
            jump = independence and rng.random() < 0.5
            if jump:
                y_new = q.mean + q_chol @ rng.standard_normal(d)
                correction = q.logpdf(ys[c]) - q.logpdf(y_new)
            else:
                y_new = ys[c] + np.exp(log_step[c]) * rng.standard_normal(d)
                correction = 0.0
            x_new, log_jacobian = tmap.to_x(y_new)
            new = in_map(x_new, log_jacobian)
            accept = min(1.0, np.exp(new - current[c] + correction)) if np.isfinite(new) else 0.0
            if rng.random() < accept:
                xs[c], ys[c], current[c] = x_new, y_new, new
            if t < tune and not jump:
                log_step[c] += (accept - 0.234) / (t + 1) ** 0.6
            states[c, t] = xs[c]
    return states[:, tune:]


def score(states, model, reference) -> dict:
    """real_posteriors.py's errors against the reference and its diagnostics."""
    import real_posteriors as rp

    posterior = {"rho": np.exp(states[..., 0]), "alpha": np.exp(states[..., 1]), "f_tilde": states[..., 2:]}
    draws = rp.scalar_draws(az.from_dict(posterior=posterior).posterior, rp.free_variable_names(model))
    return rp.compare(draws, reference)


VARIANTS = [  # (map, independence)
    ("linear", False), ("quadratic", False), ("quadratic+scale", False), ("linear", True),
    ("quadratic+scale", True),
]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    sources = ["nuts", "kamh", "smc", "kass"]
    parser.add_argument("--sources", nargs="+", choices=sources, default=sources[:3])
    parser.add_argument("--map", choices=sorted(MAPS), default="probe",
                        help="this probe's map as measured, or the package's (the last variant only)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import real_posteriors as rp

    model, reference, _ = POSTERIORS[NAME]()
    store = rp.ReferenceStore(rp.REFERENCE_FILE)
    reference, _ = store.get(NAME, model, reference)
    logp = model.compile_logp()
    names = [v.name for v in model.value_vars]
    shapes = [np.shape(model.initial_point()[n]) for n in names]
    sizes = [int(np.prod(s)) for s in shapes]

    def log_density(x):
        values, start = {}, 0
        for name, shape, size in zip(names, shapes, sizes):
            values[name] = x[start:start + size].reshape(shape)
            start += size
        value = float(logp(values))
        return value if np.isfinite(value) else -np.inf

    print(environment_line())
    print(f"{NAME}: Metropolis in a map's coordinates, 4 x (1000 + 6000)\n")
    print("| seed | draws fitted | map | moves | min ESS | max R-hat | mean err (sd) | sd err (log ratio) |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        for source in args.sources:
            draws_for_fit = fit_draws(model, source, seed)
            for kind, independence in VARIANTS if args.map == "probe" else VARIANTS[-1:]:
                states = run(log_density, draws_for_fit, seed, kind != "linear", kind.endswith("scale"),
                             independence, refit=source != "nuts", map_class=MAPS[args.map])
                s = score(states, model, reference)
                moves = "walk + independence" if independence else "walk"
                print(f"| {seed} | {source} | {kind} | {moves} | {s['min_ess']:.0f} | {s['max_rhat']:.3f} | "
                      f"{s['mean_err']:.3f} | {s['log_sd_err']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
