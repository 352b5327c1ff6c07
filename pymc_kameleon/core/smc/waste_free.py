r"""Waste-free rejuvenation in tempered SMC (Dau and Chopin 2022), without PyMC: a stage resamples
:math:`M` particles and runs each as a Markov chain, keeping every state (:func:`run_chains`), with the
option checks and the default chain lengths of :class:`pymc_kameleon.smc.KASS`'s ``waste_free=True``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_kameleon.core.smc.population import population_mh_move
from pymc_kameleon.core.validation import check_number

__all__ = [
    "WASTE_FREE_CHAINS",
    "WASTE_FREE_FINAL_THINNING",
    "WASTE_FREE_MIN_CHAINS",
    "WASTE_FREE_MIN_LENGTH",
    "WASTE_FREE_SHORT_LENGTH",
    "WasteFreeChains",
    "check_waste_free_options",
    "run_chains",
    "waste_free_chain_length",
    "waste_free_chains",
    "waste_free_final_thinning",
]

# Waste-free chains per stage with chain_length="auto" (decision 0042): chains long enough to mix on
# the gallery ODE and the banana, enough of them for the error bar. With fewer than 500 particles the
# chains hold WASTE_FREE_SHORT_LENGTH states as long as WASTE_FREE_MIN_CHAINS chains remain (decision
# 0054: chains of 10 at N = 200 warned in 108 of 120 runs and covered log Z in 78-87%), and never fewer
# than WASTE_FREE_MIN_LENGTH.
WASTE_FREE_CHAINS = 20
WASTE_FREE_SHORT_LENGTH = 25
WASTE_FREE_MIN_CHAINS = 4
WASTE_FREE_MIN_LENGTH = 10
# Moves between the kept states at the last stage (beta = 1), whose states are the posterior draws
# (decision 0053): on the gallery ODE the worst posterior mean of 5 seeds went from 0.23 to 0.08 sd for
# 44% more solves (10 moves: 0.08 for 100% more).
WASTE_FREE_FINAL_THINNING = 5


def check_waste_free_options(waste_free, chain_length, n_steps, draws: int, final_thinning=None) -> None:
    """Raise a ValueError (TypeError for a non-bool ``waste_free``) naming what is wrong with KASS's
    waste-free options; ``n_steps`` and ``final_thinning`` are the user's (None when not given)."""
    if not isinstance(waste_free, bool | np.bool_):
        raise TypeError(f"waste_free must be True or False, got {waste_free!r}.")
    if isinstance(chain_length, str):
        if chain_length != "auto":
            raise ValueError(f'chain_length must be "auto" or an integer >= 2, got {chain_length!r}.')
    else:
        check_number("chain_length", chain_length, integer=True, minimum=2, strict=False)
    if not waste_free and chain_length != "auto":
        raise ValueError(
            f"chain_length={chain_length!r} applies only to waste-free runs: pass waste_free=True as well "
            "(without it, each stage sweeps all particles by the n_steps rule)."
        )
    if final_thinning is not None:
        check_number("final_thinning", final_thinning, integer=True, minimum=1, strict=False)
        if not waste_free:
            raise ValueError(
                f"final_thinning={final_thinning!r} applies only to waste-free runs: pass waste_free=True as "
                "well (without it, the last stage sweeps all particles by the n_steps rule)."
            )
    if waste_free and n_steps is not None:
        raise ValueError(
            "n_steps does not apply with waste_free=True: each stage runs chains of chain_length states "
            f"(N - N/chain_length moves in all), got n_steps={n_steps!r}. Drop n_steps, or set chain_length."
        )
    if waste_free and not isinstance(chain_length, str) and chain_length > draws:
        raise ValueError(
            f"chain_length={chain_length} is more than the {draws} particles: there would be less than one "
            "chain. Use a chain_length of at most draws (draws / chain_length chains are resampled)."
        )


def waste_free_chain_length(chain_length, draws: int) -> int:
    """The states of the longest waste-free chain for ``chain_length`` :math:`P`: the number asked for,
    or for ``"auto"`` :math:`\\max(\\lfloor N/20 \\rfloor, \\min(25, \\lfloor N/4 \\rfloor), 10)`, at most
    :math:`N` (about :data:`WASTE_FREE_CHAINS` chains; with fewer than 500 particles chains of
    :data:`WASTE_FREE_SHORT_LENGTH` states while :data:`WASTE_FREE_MIN_CHAINS` chains remain, never
    shorter than :data:`WASTE_FREE_MIN_LENGTH`); then, as :math:`M = \\lceil N/P \\rceil` chains share
    the :math:`N` states, :math:`\\lceil N/M \\rceil` (:math:`P` itself when it divides :math:`N`; 500
    for :math:`P` = 600 and :math:`N` = 1000). The number of chains it gives is :math:`M` again."""
    if chain_length == "auto":
        short = min(WASTE_FREE_SHORT_LENGTH, draws // WASTE_FREE_MIN_CHAINS)
        chain_length = min(max(draws // WASTE_FREE_CHAINS, short, WASTE_FREE_MIN_LENGTH), draws)
    return -(-draws // waste_free_chains(draws, int(chain_length)))


def waste_free_chains(draws: int, chain_length: int) -> int:
    r"""The waste-free chains a stage starts, :math:`M = \lceil N/P \rceil`, for :math:`N` particles in
    chains of at most :math:`P` states."""
    return -(-draws // chain_length)


def waste_free_final_thinning(final_thinning) -> int:
    """The moves between kept states at the last stage: ``final_thinning``, or
    :data:`WASTE_FREE_FINAL_THINNING` for None."""
    return WASTE_FREE_FINAL_THINNING if final_thinning is None else int(final_thinning)


@dataclass(frozen=True)
class WasteFreeChains:
    """The states of one stage's waste-free chains, stored step by step (see :func:`run_chains`)."""

    X: np.ndarray  # (N, d): row p*M + m is step p of chain m (step 0 is the chain's start)
    log_prior: np.ndarray  # (N,)
    loglik: np.ndarray  # (N,)
    log_target: np.ndarray  # (N,)
    n_chains: int  # M
    mean_accept: float  # mean acceptance probability over all the stage's proposals
    steps: int  # moves of the longest chain (thin * (P - 1))
    unmoved: float  # expected fraction of chains that never moved: mean_m prod_s (1 - alpha_ms)


def run_chains(
    starts,
    log_prior,
    loglik,
    log_target,
    n_states: int,
    family,
    evaluate,
    beta: float,
    rng,
    *,
    chunk_size=None,
    cache_factors: bool = False,
    thin: int = 1,
) -> WasteFreeChains:
    r"""Waste-free rejuvenation (Dau and Chopin 2022): :math:`M` Markov chains from the resampled starts,
    every state kept.

    Chain :math:`m` starts at ``starts[m]`` and makes Metropolis-Hastings moves against :math:`\pi_t`
    with the stage's fixed family (each move leaves :math:`\pi_t` invariant, as in :func:`rejuvenate`)
    until the chains hold ``n_states`` :math:`= N` states in all: with :math:`N = qM + r`, the first
    :math:`r` chains have :math:`q + 1` states and the others :math:`q`, so a stage costs
    :math:`N - M` likelihood evaluations. With ``thin`` :math:`= k > 1` a chain makes :math:`k` moves
    between the states it keeps (its start, then every :math:`k`-th state): :math:`k (N - M)`
    evaluations for states :math:`k` times further apart in the chain. All chains move together, one
    :func:`~pymc_kameleon.core.smc.population.population_mh_move` per step. With starts drawn from the
    reweighted particles, the :math:`N` states are :math:`M` chains started at stationarity, which is
    what :func:`~pymc_kameleon.core.smc.evidence.waste_free_relative_variance` needs.

    Parameters
    ----------
    starts : array of shape (M, d)
        The resampled particles the chains start from.
    log_prior, loglik, log_target : arrays of shape (M,)
        Their log densities (kept, never recomputed).
    n_states : int
        :math:`N \ge M`.
    family, evaluate, beta, rng, chunk_size, cache_factors
        As in :func:`rejuvenate`.
    thin : int, default 1
        Moves between kept states.

    Returns
    -------
    WasteFreeChains
    """
    starts = np.asarray(starts, dtype=float)
    M, d = starts.shape
    if not (isinstance(thin, int | np.integer) and thin >= 1):
        raise ValueError(f"thin must be an integer >= 1, got {thin!r}.")
    if not M <= n_states:
        raise ValueError(f"n_states must be at least the number of chains ({M}), got {n_states}.")
    X = np.empty((n_states, d))
    columns = [np.empty(n_states) for _ in range(3)]
    current = [starts.copy(), *(np.array(v, dtype=float) for v in (log_prior, loglik, log_target))]
    X[:M] = current[0]
    for out, values in zip(columns, current[1:], strict=True):
        out[:M] = values
    factors = family.factor_batch(current[0], chunk_size=chunk_size) if cache_factors else None
    accept_sum, n_proposals, steps = 0.0, 0, 0
    stay = np.ones(M)
    filled = M
    while filled < n_states:
        k = min(M, n_states - filled)  # the chains that take this step
        for _ in range(thin):
            rows = None if factors is None else (factors[0][:k], factors[1][:k])
            move = population_mh_move(
                current[0][:k], current[3][:k], family, evaluate, beta, rng,
                chunk_size=chunk_size, current_factors=rows, cache_factors=cache_factors,
            )
            acc = np.flatnonzero(move.accepted)
            if cache_factors:
                factors[0][acc] = move.proposal_factors[0][acc]
                factors[1][acc] = move.proposal_factors[1][acc]
            for values, new in zip(current, (move.proposals, move.log_prior, move.loglik, move.log_target),
                                   strict=True):
                values[acc] = new[acc]
            accept_sum += float(np.sum(move.accept_prob))
            n_proposals += k
            stay[:k] *= 1.0 - move.accept_prob
        X[filled : filled + k] = current[0][:k]
        for out, values in zip(columns, current[1:], strict=True):
            out[filled : filled + k] = values[:k]
        filled += k
        steps += thin
    mean_accept = accept_sum / n_proposals if n_proposals else np.nan
    return WasteFreeChains(X, *columns, M, mean_accept, steps, float(np.mean(stay)))
