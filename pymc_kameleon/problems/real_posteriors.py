"""The posteriors real users bring: 24 models, each with its reference (the real-posteriors catalogue).

Regressions and GLMs with unstandardised predictors (:mod:`~pymc_kameleon.problems.regressions`),
eight schools, a mixture, GP hyperparameters and a centred latent Poisson GP
(:mod:`~pymc_kameleon.problems.hierarchical`), an AR(2) series and a GARCH(1,1) model
(:mod:`~pymc_kameleon.problems.time_series`), a Lotka-Volterra ODE behind a black-box ``solve_ivp``
Op on simulated data and on the Hudson's Bay lynx-hare pelts (:mod:`~pymc_kameleon.problems.ode`) and
PyMC's gallery version of it (:mod:`~pymc_kameleon.problems.gallery`),
normals on scales 1e-4 to 1e4 and a 50-d Gaussian (:mod:`~pymc_kameleon.problems.scales`), and
here the KAMH paper's 8-d banana and flower with exact references. :data:`POSTERIORS` maps the names that
``benchmarks/real_posteriors.py`` reports to the builders.

Every builder returns ``(model, reference, initvals)``; see :mod:`~pymc_kameleon.problems.reference`
for what ``reference`` holds. These modules import PyMC (the others of
:mod:`pymc_kameleon.problems` do so only inside the functions that build models), so
``pymc_kameleon.problems`` does not import them: import them by name.
"""

from collections.abc import Callable
from functools import lru_cache, partial

import numpy as np

from pymc_kameleon.problems.gallery import gallery_lotka_volterra
from pymc_kameleon.problems.hierarchical import (
    eight_schools_centred,
    eight_schools_noncentred,
    eight_schools_noncentred_far_start,
    gp_hyperparameters,
    gp_poisson_latent,
    gp_poisson_latent_noncentred,
    mixture,
)
from pymc_kameleon.problems.ode import lotka_volterra, lotka_volterra_far_start, lotka_volterra_lynx_hare
from pymc_kameleon.problems.reference import ExactReference
from pymc_kameleon.problems.regressions import (
    logistic_glm,
    logistic_uncentred,
    logistic_uncentred_far_start,
    regression_income,
    regression_mixed_scales,
)
from pymc_kameleon.problems.scales import gaussian_50d, normals_5d_scales, two_normals
from pymc_kameleon.problems.targets import banana, flower
from pymc_kameleon.problems.time_series import ar2, garch11

__all__ = ["POSTERIORS", "banana_8d", "flower_8d"]


def _target_reference(target, n_exact=2_000_000) -> ExactReference:
    """Exact mean; sd from the exact covariance, or from exact i.i.d. draws (seeded)."""
    mean = np.asarray(target.exact_mean, dtype=float)
    cov = target.exact_cov
    if cov is not None:
        sd = np.sqrt(np.diag(cov))
    else:
        sd = target.sample(n_exact, rng=20250108).std(axis=0)
    return {f"x[{i}]": (mean[i], sd[i]) for i in range(target.dim)}


def banana_8d():
    """The KAMH paper's strongly twisted 8-d banana B(0.1, 100) (Flat prior plus a Potential)."""
    target = banana(dim=8, b=0.1, v=100.0)
    return target.model(), _target_reference(target), None


@lru_cache(maxsize=1)
def _flower_reference() -> ExactReference:
    return _target_reference(flower(dim=8, r0=10.0, A=6.0, omega=6.0, sigma=1.0))


def flower_8d():
    """The KAMH paper's 8-d flower F(10, 6, 6, 1); sds from 2e6 exact i.i.d. draws (relative error 5e-4)."""
    target = flower(dim=8, r0=10.0, A=6.0, omega=6.0, sigma=1.0)
    return target.model(), _flower_reference(), None


#: The builders by the name ``benchmarks/real_posteriors.py`` reports; each returns
#: ``(model, reference, initvals)``.
POSTERIORS: dict[str, Callable[[], tuple]] = {
    "regression-income": regression_income,
    "regression-income-sigma-known": partial(regression_income, known_sigma=True),
    "logistic-glm": logistic_glm,
    "logistic-uncentred": logistic_uncentred,
    "logistic-uncentred-far-start": logistic_uncentred_far_start,
    "eight-schools-centred": eight_schools_centred,
    "eight-schools-noncentred": eight_schools_noncentred,
    "eight-schools-noncentred-far-start": eight_schools_noncentred_far_start,
    "ar2": ar2,
    "garch11": garch11,
    "mixture-2": mixture,
    "gp-hyperparameters": gp_hyperparameters,
    "lotka-volterra": lotka_volterra,
    "lotka-volterra-far-start": lotka_volterra_far_start,
    "banana-8d": banana_8d,
    "flower-8d": flower_8d,
    "two-normals": two_normals,
    "normals-5d-scales": normals_5d_scales,
    "gaussian-50d": gaussian_50d,
    "regression-17d-mixed-scales": regression_mixed_scales,
    # The frontier (issue 43): no gradient-free sampler converges here today; NUTS does on their twins.
    "lotka-volterra-lynx-hare": lotka_volterra_lynx_hare,
    "gp-poisson-latent": gp_poisson_latent,
    "gp-poisson-latent-noncentred": gp_poisson_latent_noncentred,
    # PyMC's gallery model as written there (issue 44's clock): odeint in an as_op Op, ~1.6 ms a solve.
    "gallery-lotka-volterra": gallery_lotka_volterra,
}
