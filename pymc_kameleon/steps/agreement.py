"""The chains compared with each other (pooled tuning): the split R-hat of their last tuning states and
of their first draws, and the warning if those disagree (decision records 0048 and 0058)."""

from __future__ import annotations

import math
import warnings

import arviz as az
import numpy as np

__all__ = [
    "CROSS_CHAIN_CLEAR_RHAT",
    "CROSS_CHAIN_DRAWS",
    "CROSS_CHAIN_MORE_DRAWS",
    "CROSS_CHAIN_RHAT",
    "DrawsAgreement",
    "coordinate_name",
    "cross_chain_disagreement",
    "cross_chain_rhat",
]

#: Pooled tuning: chains whose states have a split R-hat above this in some coordinate disagree (over
#: their last tuning states, or their first draws: the warning, once, from chain 0).
CROSS_CHAIN_RHAT = 1.1
#: Pooled tuning: the first draws over which the chains are compared (DrawsAgreement): the draws'
#: kernel can mix far better, or worse, than the tuning walk (decision record 0048).
CROSS_CHAIN_DRAWS = 500
#: Over the first CROSS_CHAIN_DRAWS draws a split R-hat between CROSS_CHAIN_RHAT and this is judged again
#: over the first CROSS_CHAIN_MORE_DRAWS (decision record 0058): a chain mixing a few effective draws per
#: hundred reaches 1.1-1.2 over 500 draws by chance (a new user's converged hierarchical regression, 2 of
#: 10 runs), while the failures measured stand above 1.3 there or above 1.1 over 1000.
CROSS_CHAIN_CLEAR_RHAT = 1.3
CROSS_CHAIN_MORE_DRAWS = 1000


def coordinate_name(coordinate_names, j: int) -> str:
    """The user's name of the sampler's coordinate ``j`` (``coordinate j`` without names)."""
    return coordinate_names[j] if coordinate_names is not None else f"coordinate {j}"


def cross_chain_rhat(population_states, min_chains: int = 2) -> tuple[float, int]:
    """The largest split R-hat over coordinates (ArviZ's, rank-normalised) of the chains' last tuning
    states, and its coordinate: NaN and -1 with fewer than ``min_chains`` chains or 100 states (one
    chain: its halves compared).

    ``population_states`` holds, per step, every chain's state (rows).
    """
    states = np.asarray(list(population_states), dtype=float)  # (steps, chains, d)
    if states.ndim != 3 or states.shape[0] < 100 or states.shape[1] < min_chains:
        return math.nan, -1
    by_chain = states.transpose(1, 0, 2)
    if by_chain.shape[0] == 1:  # one chain: its halves as two (ArviZ gives NaN for a single chain)
        half = by_chain.shape[1] // 2
        by_chain = by_chain[0, : 2 * half].reshape(2, half, -1)
    rhat = np.array([_split_rhat(by_chain[:, :, j]) for j in range(by_chain.shape[2])])
    if np.all(np.isnan(rhat)):
        return math.nan, -1
    j = int(np.nanargmax(rhat))
    return float(rhat[j]), j


def _split_rhat(chains) -> float:
    """ArviZ's rank-normalised split R-hat of (chains, steps); where every chain kept one value, inf if
    the values differ and NaN if not. (ArviZ gives NaN there, or on ArviZ 1 a figure like 5.6e15; chains
    frozen at points of their own disagree completely.)"""
    if np.all(chains.max(axis=1) == chains.min(axis=1)):
        return math.inf if np.ptp(chains[:, 0]) > 0 else math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(az.rhat(chains))


def _rhat_text(rhat: float) -> str:
    if math.isinf(rhat):
        return "infinite: each chain stayed at a point of its own"
    return f"{rhat:.3g}" if rhat >= 1000 else f"{rhat:.3f}"


def cross_chain_disagreement(population_states, window_steps: int = 0) -> tuple[float, int, int] | None:
    """``(R-hat, coordinate, states)`` if the chains disagreed at the end of tuning (their last tuning
    states' largest split R-hat is above :data:`CROSS_CHAIN_RHAT`), else None.

    ``window_steps``: the steps of the adaptation window tuning ended in, the last of the states. If
    it holds at least 100 and the chains agreed over it, they agreed: the proposal they keep was
    made at its start (on the 50-d Gaussian the independence component's exact shape turns on 200
    steps before the end, and the walk before it disagreed, R-hat 1.3-1.4, while the draws converge,
    R-hat 1.004 or less; decision record 0044). A chain still walking in, or in a mode of its own,
    disagrees over both.
    """
    rhat, j = cross_chain_rhat(population_states)
    if not rhat > CROSS_CHAIN_RHAT:  # NaN: nothing to compare
        return None
    states = list(population_states)
    if 0 < window_steps < len(states):
        last_window, _ = cross_chain_rhat(states[-window_steps:])  # NaN below 100 states
        if math.isfinite(last_window) and last_window <= CROSS_CHAIN_RHAT:
            return None
    return rhat, j, len(states)


class DrawsAgreement:
    """The chains of a pooled population compared over their first :data:`CROSS_CHAIN_DRAWS` draws:
    the warning, if they disagree (decision record 0048). A split R-hat there above
    :data:`CROSS_CHAIN_RHAT` but not above :data:`CROSS_CHAIN_CLEAR_RHAT` is judged again over the
    first :data:`CROSS_CHAIN_MORE_DRAWS` draws (decision record 0058).

    The draws, not the last tuning states, decide. The tuning walk can disagree where the draws do not:
    when tuning ends the exam may turn on the independence component, whose draws mix far faster
    (the 17-d mixed-scale regression: tuning states' split R-hat 1.11, the first 500 draws' 1.02-1.05,
    all draws' 1.004). And chains whose last tuning states agreed can disagree over the draws (the
    8-d banana, seed 2025: 1.72 over the first 500 draws, 1.061 over all, means 0.31 sd off). A chain
    in a mode of its own, or a kernel that mixes too slowly, disagrees over the draws.

    Parameters
    ----------
    step_name : str
    tuning : tuple or None
        ``(R-hat, coordinate, states)`` of the last tuning states if they disagreed
        (:func:`cross_chain_disagreement`), else None.
    coordinate_names : list of str, optional
    differentiable : callable, optional
        Whether the model's log density has gradients (asked only when the warning is due): then the
        warning names NUTS too.
    gradient_split : callable, optional
        The block's variables (names) that enter a black-box Op, the others NUTS could take, and whether
        NUTS would run the Op then (:meth:`~pymc_kameleon.steps.target_density.TargetDensity.gradient_split`;
        asked only when the warning is due and the log density has no gradient): where both lists have
        names, the warning names the split that lets NUTS sample the others, and its cost.
    improper : set of int, optional
        The coordinates with an improper prior (``pm.Flat``, ``pm.HalfFlat``): where the chains disagree
        most in one of them, the warning first names an improper posterior, which no longer tuning cures
        (collinear predictors under flat priors: the chains drifted apart by 1e5 sds).
    smc_start : bool, default False
        Whether the run started from an SMC run (``start='smc'``): the warning does not advise it again.
    """

    def __init__(self, step_name: str, tuning=None, coordinate_names=None, differentiable=None,
                 improper=frozenset(), gradient_split=None, smc_start: bool = False):
        self.step_name = step_name
        self.smc_start = smc_start
        self.tuning = tuning
        self.coordinate_names = coordinate_names
        self.differentiable = differentiable
        self.improper = improper
        self.gradient_split = gradient_split
        self.rows = []
        self.done = False

    def _split_remedy(self) -> str:
        """Where only some of the block's variables enter a black-box Op: give the step those, NUTS the
        rest (a new user's model, a black-box decay curve beside a hierarchy: R-hat 1.28 with
        KameleonMetropolis on every variable, 1.003 split)."""
        black_box, rest, through_black_box = (
            self.gradient_split() if self.gradient_split is not None else ([], [], False)
        )
        if not black_box or not rest:
            return " Remedies:"
        cost = (
            f" (NUTS then runs the black-box Op at every leapfrog step, several times a draw, since {rest} "
            "share a term with it: worth it where one evaluation is cheap)" if through_black_box else ""
        )
        return (
            f" Only {black_box} enter a black-box Op; the log density has gradients in {rest}: give "
            f"{self.step_name} only {black_box} (step=[{self.step_name}([...])]) and pm.sample assigns "
            f"NUTS to the rest, which mixes where gradient-free steps do not{cost}. Otherwise:"
        )

    def _name(self, j: int) -> str:
        return coordinate_name(self.coordinate_names, j)

    def record(self, population) -> str | None:
        """Add one draw iteration's population (rows: every chain's state; None: nothing to compare).
        At the :data:`CROSS_CHAIN_DRAWS`-th (and, where that was not clear, the
        :data:`CROSS_CHAIN_MORE_DRAWS`-th), the warning's text if the draws disagree (else None); once
        judged, nothing more."""
        if self.done or population is None:
            return None
        self.rows.append(np.asarray(population, dtype=float))
        n = len(self.rows)
        alone = self.rows[0].shape[0] == 1
        if n not in ((CROSS_CHAIN_MORE_DRAWS,) if alone else (CROSS_CHAIN_DRAWS, CROSS_CHAIN_MORE_DRAWS)):
            return None
        rhat, j = cross_chain_rhat(self.rows, min_chains=1)
        if n == CROSS_CHAIN_DRAWS and CROSS_CHAIN_RHAT < rhat <= CROSS_CHAIN_CLEAR_RHAT:
            return None  # judged again over CROSS_CHAIN_MORE_DRAWS
        self.done = True
        spread = np.concatenate([rows[:, j] for rows in self.rows]) if j in self.improper else None
        self.rows = []
        if not rhat > CROSS_CHAIN_RHAT:  # NaN: nothing to compare
            return None
        draws = f"{_rhat_text(rhat)} in {self._name(j)}, above {CROSS_CHAIN_RHAT}"
        cause = "the chains mix too slowly for the tuning they had, or one sits in a mode of its own."
        if alone:
            # A new user's single chain of a 24-parameter hierarchy: a scale 2.5 sds off, ESS 1, no warning
            # (PyMC compares no chains, and the check below needed two).
            said = f"the halves of the chain's first {n} draws disagree (split R-hat {draws})"
            cause = (
                "the chain mixes too slowly for the tuning it had, or moved between modes. With one chain "
                "PyMC compares no chains, so this is the only sign: run 4 chains (they also tune together)."
            )
        elif self.tuning is None:
            said = f"the chains disagree over their first {n} draws (split R-hat {draws})"
        else:
            tuning_rhat, tuning_j, tuning_states = self.tuning
            said = (
                f"the chains disagreed at the end of tuning (the split R-hat of their last {tuning_states} "
                f"tuning states is {_rhat_text(tuning_rhat)} in {self._name(tuning_j)}) and still disagree "
                f"over their first {n} draws ({draws})"
            )
        improper = "" if spread is None else (
            f" {self._name(j)} has an improper prior (pm.Flat or pm.HalfFlat; draws from {spread.min():.3g} "
            f"to {spread.max():.3g}): if the data do not identify it (collinear predictors, an intercept "
            "given twice), the posterior is improper and no sampler converges on it; give it a proper prior."
        )
        gradients = self.differentiable is not None and self.differentiable()
        nuts = (
            " The model's log density has gradients (no black-box Op): NUTS, pm.sample's default step, "
            "converges on curved posteriors where gradient-free steps mix too slowly. Otherwise:"
            if gradients else self._split_remedy()
        )
        if self.smc_start:
            smc = "more particles (SMCStart(particles=...)) for this start='smc' run"
        else:
            smc = "KameleonMetropolis(start='smc') (a tempered SMC run first; many more evaluations)"
        return (
            f"{self.step_name}: {said}: {cause}{nuts} increase `tune` and `draws`; for a curved posterior "
            f"that longer tuning does not fix, {smc}; reparameterise (a weakly informed hierarchy "
            "non-centred, a mixture's locations ordered: transform=pm.distributions.transforms.ordered); "
            "tune each chain alone, tuning='per_chain', where the modes are copies of one another (swapped "
            "mixture labels, angles whose modes lie pi apart); pm.sample_smc(kernel=KASS) for well-separated "
            f"modes; initvals nearer the posterior.{improper} The tuning guide's table of warnings explains "
            "each remedy. Check R-hat over all the draws."
        )
