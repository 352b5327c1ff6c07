"""DiscreteMetropolis: discrete variables beside a pseudo-marginal term, with one pm.sample call.

The model: k ~ Poisson(2), theta ~ N(0, 1), z_j ~ N(theta + k, 1), y_j | z_j ~ N(z_j, 1), so
y | k, theta ~ N((theta + k) 1, 2 I) and, with theta integrated out, y | k ~ N(k 1, 2 I + 1 1^T):
the posterior of k is exact by summation. The likelihood is estimated by importance sampling.
"""

import math
import warnings

import numpy as np
import pymc as pm
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal, norm, poisson

from pymc_kameleon import (
    DiscreteMetropolis,
    KameleonMetropolis,
    PseudoMarginalMisuseError,
    PseudoMarginalPotential,
    importance_sampling_estimator,
)
from pymc_kameleon.testing import SAMPLE_KW
from pymc_kameleon.testing import mcse_of_mean as _mcse_of_mean

Y = np.array([3.1, 2.2, 4.0, 2.9, 3.5])
K_GRID = np.arange(40)
_COV = 2 * np.eye(5) + 1
_log_post = poisson.logpmf(K_GRID, 2.0) + [multivariate_normal(k + 0 * Y, _COV).logpdf(Y) for k in K_GRID]
K_POST = np.exp(_log_post - logsumexp(_log_post))
Z_MAX = 4.0


def latent_estimator(n=20):
    def log_weight(z, theta, k):
        return norm.logpdf(Y, z, 1.0)  # (n, 5)

    return importance_sampling_estimator(
        log_weight, lambda theta, k, n, rng: theta + k + rng.standard_normal((n, Y.size)), n
    )


def poisson_model(estimator=None):
    with pm.Model() as model:
        k = pm.Poisson("k", 2.0)
        theta = pm.Normal("theta", 0, 1)
        PseudoMarginalPotential("lik", estimator or latent_estimator(), inputs=[theta, k])
    return model


class Recorder:
    """Deterministic scripted 'estimator' of k alone: log N(3; k, 1) plus recorded noise."""

    def __init__(self):
        self.noise = np.random.default_rng(0)
        self.calls = []

    def __call__(self, k, rng):
        value = float(norm.logpdf(3.0, k, 1.0) + self.noise.normal())
        self.calls.append((int(k), value))
        return value


# ------------------------------------------------------------------- exact bookkeeping
def test_exact_ratio_with_the_kept_estimate():
    recorder = Recorder()
    with pm.Model() as model:
        k = pm.Poisson("k", 2.0)
        PseudoMarginalPotential("lik", recorder, inputs=[k])
        step = DiscreteMetropolis(rng=3)
    point = model.initial_point()
    y, kept = recorder.calls[0] if recorder.calls else (None, None)
    n_accepted = 0
    for i in range(300):
        before = len(recorder.calls)
        point, stats = step.step(point)
        calls = recorder.calls[before:]
        if i == 0:  # the start's estimate, made twice in tuning (the randomness check), then the kept one's
            assert calls[0][0] == calls[1][0]
            (y, kept), calls = calls[1], calls[2:]
        assert len(calls) == stats[0]["estimator_calls"] - (2 if i == 0 else 0) <= 1  # none if k' < 0
        if calls:
            x, value = calls[0]
            log_alpha = poisson.logpmf(x, 2.0) + value - poisson.logpmf(y, 2.0) - kept
            # rel 1e-8: PyMC's Poisson log-pmf and SciPy's differ in the 9th digit
            assert stats[0]["accept"] == pytest.approx(math.exp(min(0.0, log_alpha)), rel=1e-8)
            if stats[0]["accepted"]:
                y, kept = x, value
                n_accepted += 1
        else:
            assert stats[0]["accept"] == 0.0  # a proposal below 0 has zero prior: rejected, no estimate
        assert point["k"] == y and stats[0]["loglik_estimate"] == kept
    assert 30 < n_accepted < 270


def test_integer_jumps_are_symmetric_and_never_zero():
    """Monte Carlo check of the proposal: P(delta = j) = P(delta = -j), and delta = 0 never occurs."""
    with pm.Model():
        pm.Poisson("k", 2.0)
        pm.Potential("flat", pm.math.constant(0.0))
        step = DiscreteMetropolis(scaling=2.0, rng=4)
    jumps = np.array([step._jump(0) for _ in range(40_000)])
    assert not np.any(jumps == 0)
    for j in (1, 2, 3):
        p, m = np.mean(jumps == j), np.mean(jumps == -j)
        assert abs(p - m) < 4 * math.sqrt((p + m) / jumps.size)
    # the symmetry check can fail: a one-sided jump is caught
    p, m = np.mean(np.abs(jumps) == 1), 0.0
    assert abs(p - m) > 4 * math.sqrt((p + m) / jumps.size)


def test_binary_variables_flip():
    with pm.Model() as model:
        b = pm.Bernoulli("b", 0.5, shape=3)
        PseudoMarginalPotential("lik", lambda b, rng: float(b.sum()), inputs=[b])
        step = DiscreteMetropolis(rng=1)
    point = model.initial_point()
    for i in range(20):
        new, stats = step.step(point)
        assert np.all(np.abs(new["b"] - point["b"]) <= 1) and set(np.unique(new["b"])) <= {0, 1}
        assert stats[0]["logp_evals"] == 3 + (i == 0)  # one flip per element (and the start)
        point = new


def test_which_variables_are_flipped():
    """Bernoulli and two-category Categorical elements flip; other integers jump."""
    with pm.Model():
        pm.Bernoulli("b", 0.5, shape=2)
        pm.Categorical("c2", p=[0.4, 0.6])
        pm.Categorical("c3", p=[0.2, 0.3, 0.5])
        pm.Poisson("k", 2.0)
        pm.Potential("flat", pm.math.constant(0.0))
        step = DiscreteMetropolis()
    flags = dict(zip([v.name for v in step.vars], np.split(step._binary, [2, 3, 4])))
    assert flags["b"].tolist() == [True, True] and flags["c2"].tolist() == [True]
    assert flags["c3"].tolist() == [False] and flags["k"].tolist() == [False]
    # the three-category one moves among its categories; only k walks
    assert step._categories.tolist() == [2, 2, 2, 3, 0] and step._walks.tolist() == [False] * 4 + [True]


def test_categories_move_to_another_uniformly():
    """Monte Carlo check of a Categorical's proposal (K = 4, from category 1): each other category with
    probability 1/3, never the same one, never outside 0..3; so it is symmetric."""
    with pm.Model():
        pm.Categorical("c", p=[0.1, 0.2, 0.3, 0.4])
        step = DiscreteMetropolis(rng=5)
    proposed = np.array([step._proposed_value(0, 1) for _ in range(30_000)])
    assert set(np.unique(proposed)) == {0, 2, 3}
    for category in (0, 2, 3):
        share = np.mean(proposed == category)
        assert abs(share - 1 / 3) < 4 * math.sqrt(2 / 9 / proposed.size), (category, share)
    # the uniformity check can fail: a walk to the neighbours (0 or 2, each half the time) is caught
    neighbours = 1 + np.where(step.rng.random(proposed.size) < 0.5, -1, 1)
    assert abs(np.mean(neighbours == 2) - 1 / 3) > 4 * math.sqrt(2 / 9 / neighbours.size)


def _indexed_model(kind):
    """A discrete variable used as an index into a vector of three means, observed through y: a walk past
    either end evaluates mu[3] or mu[-1] (a new user's mixture crashed there on PyMC 5, with IndexError).
    Returns the model and the exact posterior of the variable by enumeration."""
    mu, prior = np.array([-1.0, 0.5, 2.0]), np.array([0.2, 0.3, 0.5])
    y = np.array([0.9, 1.6, 0.2])
    with pm.Model() as model:
        if kind == "categorical":
            z = pm.Categorical("z", p=prior)
        else:  # an integer walk: DiscreteUniform's prior is flat
            z = pm.DiscreteUniform("z", 0, 2)
            prior = np.full(3, 1 / 3)
        pm.Normal("y", pm.math.constant(mu)[z], 1.0, observed=y)
    log_post = np.log(prior) + norm.logpdf(y[:, None], mu, 1.0).sum(axis=0)
    return model, np.exp(log_post - logsumexp(log_post))


@pytest.mark.parametrize("kind", ["categorical", "integer-walk"])
def test_a_discrete_index_samples_its_exact_posterior(kind):
    """Every category's frequency within 4 MCSE of the exact posterior, and the walk's proposals past the
    ends rejected without evaluating the model (no IndexError). Negative control: the same draws are far
    from the prior, so the check can fail."""
    model, exact = _indexed_model(kind)
    with model:
        idata = pm.sample(step=DiscreteMetropolis(), tune=500, draws=2000, chains=2, cores=1, random_seed=3,
                          **SAMPLE_KW)
    z = idata.posterior["z"].values

    def worst(target):
        return max(abs(np.mean(z == j) - target[j]) / _mcse_of_mean((z == j).astype(float)) for j in range(3))

    assert worst(exact) < Z_MAX, (z.mean(), exact)
    prior = np.array([0.2, 0.3, 0.5]) if kind == "categorical" else np.full(3, 1 / 3)
    assert worst(prior) > Z_MAX


# ------------------------------------------------------------------- assignment and errors
def test_pm_sample_assigns_the_discrete_step_automatically():
    with poisson_model(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(step=KameleonMetropolis(), tune=100, draws=50, chains=1, random_seed=1, **SAMPLE_KW)
    assert "k" in idata.posterior and np.issubdtype(idata.posterior["k"].dtype, np.integer)
    assert "estimator_calls" in idata.sample_stats


def test_models_without_estimates_keep_pymc_assignment():
    """Competence is INCOMPATIBLE without a pseudo-marginal term, so PyMC's own steps are chosen."""
    from pymc.sampling.mcmc import assign_step_methods

    with pm.Model() as model:
        pm.Poisson("k", 2.0)
        pm.Bernoulli("b", 0.3)
        _, selected = assign_step_methods(model, None)
    assert DiscreteMetropolis not in selected
    assert {cls.__name__ for cls in selected} <= {"Metropolis", "BinaryGibbsMetropolis"}


def test_outside_the_model_context_the_error_names_the_step():
    model = poisson_model()
    with pytest.raises(PseudoMarginalMisuseError, match="DiscreteMetropolis"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pm.sample(
                model=model, step=KameleonMetropolis(model=model), tune=10, draws=10, chains=1, **SAMPLE_KW
            )


def test_bad_options_and_variables():
    with poisson_model() as model:
        with pytest.raises(ValueError, match=r"\['k'\] is discrete.*DiscreteMetropolis"):
            KameleonMetropolis([model["theta"], model["k"]])
        with pytest.raises(ValueError, match=r"discrete variables only, but \['theta'\]"):
            DiscreteMetropolis([model["theta"]])
        with pytest.raises(ValueError, match="scaling must be a finite number > 0"):
            DiscreteMetropolis(scaling=0)
        with pytest.raises(ValueError, match="target_accept must be in"):
            DiscreteMetropolis(target_accept=1.5)
    with pm.Model():
        pm.Normal("x")
        with pytest.raises(ValueError, match="this model has none"):
            DiscreteMetropolis()


# ------------------------------------------------------------------- exactness (slow)
class MonteCarloWithinGibbs(DiscreteMetropolis):
    """Negative control: re-estimates the likelihood at the current state before every sweep."""

    def astep(self, q0):
        self._target._cur = None
        for term in self._target.terms:
            term.op.current.clear()
        return super().astep(q0)


def _k_scores(discrete_step, seed, n=1):
    with poisson_model(latent_estimator(n)) as model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        steps = [KameleonMetropolis([model["theta"]]), discrete_step([model["k"]])]
        idata = pm.sample(step=steps, tune=1000, draws=1250, chains=4, cores=1, random_seed=seed, **SAMPLE_KW)
    k = idata.posterior["k"].values
    scores = {"mean": abs(k.mean() - (K_GRID * K_POST).sum()) / _mcse_of_mean(k)}
    for j in (1, 2, 3, 4):
        inside = (k == j).astype(float)
        scores[f"P(k={j})"] = abs(inside.mean() - K_POST[j]) / _mcse_of_mean(inside)
    return scores


@pytest.mark.slow
def test_exact_posterior_of_the_discrete_variable():
    """One importance sample per estimate (very noisy): the posterior of k within 4 MCSE of the exact sum
    (measured with 2500 draws a chain: at most 2.5 MCSE at seeds 21 and 22; with the 1250 used here,
    1.2 and 2.3)."""
    scores = _k_scores(DiscreteMetropolis, seed=21)
    assert max(scores.values()) < Z_MAX, scores


@pytest.mark.slow
def test_negative_control_re_estimating_the_current_state_is_wrong():
    """Measured with 2500 draws a chain: P(k = 2) and P(k = 3) 7.3 to 7.9 MCSE off at seeds 21 and 22;
    with the 1250 used here, 5.9 and 6.6."""
    scores = _k_scores(MonteCarloWithinGibbs, seed=21)
    assert max(scores.values()) > Z_MAX, scores
