"""The search for a start before tuning (``start="search"``), connected to a PyMC model.

The search itself is :func:`pymc_kameleon.core.starts.search_start`; this module draws its candidates
from the model's prior with PyMC's own initial-point machinery
(:func:`pymc.initial_point.make_initial_point_fn` with the ``"prior"`` strategy, in the step's
transformed coordinates), and builds the plausible box from :data:`BOX_DRAWS` prior draws
(:data:`BLOCK_BOX_DRAWS` for a step on a block of the model's variables beside other steps). A
variable with a flat prior (``pm.Flat``, ``pm.HalfFlat``) cannot be drawn: its candidates are the
start jittered by U(-1, 1) (PyMC's jitter) and its coordinates are not bounded.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
from pymc.initial_point import make_initial_point_fn
from pytensor.graph import ancestors

from pymc_kameleon.core.linalg import same_array
from pymc_kameleon.core.starts import (
    SEARCH_EVALS_PER_DIM,
    SEARCH_MAX_EVALS,
    PlausibleBox,
    SearchResult,
    search_start,
)
from pymc_kameleon.steps.population import variables_outside_block
from pymc_kameleon.steps.variables import has_improper_prior

__all__ = [
    "BLOCK_BOX_DRAWS", "BOX_DRAWS", "PROBE_BOX_WIDENING", "SEARCH_CANDIDATES", "STARTS", "StartSearch",
    "ZERO_DENSITY_DRAWS",
]

STARTS = ("search", "initial_point")
#: Prior draws each chain searches from (besides keeping its given start).
SEARCH_CANDIDATES = 2
#: Prior draws that span the plausible box (a fixed seed: the same box for every chain): their range
#: reaches about 2.5 prior sds.
BOX_DRAWS = 100
#: The same for a step that samples a block of the model's variables beside other steps: about 3.3
#: prior sds. There the search optimises the block's density with the other variables fixed, and a
#: refused result leaves the block at PyMC's initial point, often the prior mean, which can trap the
#: other steps: with `KameleonMetropolis([theta])` beside `pm.NUTS([s])` on a centred hierarchy, the
#: effects' conditional mode (one at -2.64) lay beyond the range of 100 draws (down to -1.95), every
#: effect stayed at 0, NUTS followed s into the funnel's neck and 6 of 10 chains never left it; with
#: 1000 none did. A step over all the variables keeps 100: with 1000 more chains of the non-centred
#: latent GP started at the search's optimum instead of walking in, and its median R-hat over 8 seeds
#: went from 1.14 to 1.32 (failing either way). A half-Cauchy(5) scale reaches 0.018 in 1000 draws
#: (0.04 in 100): a run into a funnel's neck still ends far below. The draws cost about 0.15 s, once
#: per process.
BLOCK_BOX_DRAWS = 1000
#: The independence component's probes and exam draws beyond the plausible box widened this many times
#: (about 10 prior sds from the prior's centre, or 13 for a block) are not evaluated, but count as a log
#: density of -inf: they only inform the adaptation, and a new user's SIR ODE, asked by a probe of an
#: extrapolated fitted shape for gamma = 3.3e6 (33 prior sds out), never finished its solve.
PROBE_BOX_WIDENING = 4.0
#: Prior draws a chain whose given start has zero density may evaluate (beyond its candidates) until
#: :data:`SEARCH_CANDIDATES` of them have a finite density: Powell cannot leave a point of zero density,
#: and a prior's draws can miss a support that the data cut (pm.Uniform(0, 1000) for a maximum the data
#: say is at least 620: PyMC's initial point, 500, has zero density, and so do 62% of the draws).
ZERO_DENSITY_DRAWS = 100
_BOX_SEED = 20261127


class StartSearch:
    """Candidates and plausible box for one step's block of variables; compiled at first use.

    Parameters
    ----------
    model : pm.Model
    vars : list of value variables
        The step's block, in its raveled order.
    """

    def __init__(self, model, vars):
        self._model = model
        self._names = [v.name for v in vars]
        in_block = bool(variables_outside_block(model, vars, "the start search"))
        self._box_draws = BLOCK_BOX_DRAWS if in_block else BOX_DRAWS
        self._rvs = [model.values_to_rvs[v] for v in vars]
        # (draw function, plausible box, probe box), or False if the prior cannot be drawn
        self._compiled = None
        # The pm.Data containers the prior draws read (a prior sd held in pm.Data), and their values
        # when the box was built
        graph = set(ancestors(model.free_RVs))
        self._prior_data = [v for v in model.data_vars if v in graph]
        self._compiled_for = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_compiled"] = None  # compiled functions are rebuilt in a worker process
        return state

    def _compile(self):
        model = self._model
        flat = {rv for rv in model.free_RVs if has_improper_prior(rv)}
        draw = make_initial_point_fn(
            model=model,
            overrides={rv: "support_point" if rv in flat else "prior" for rv in model.free_RVs},
            jitter_rvs=flat,
            default_strategy="prior",
            return_transformed=True,
        )
        point = draw(0)
        unbounded = np.concatenate(
            [np.full(np.size(point[name]), rv in flat) for name, rv in zip(self._names, self._rvs)]
        )
        return draw, unbounded

    def _draws(self, draw, seeds) -> np.ndarray:
        rows = []
        with _quietly():
            for seed in seeds:
                point = draw(int(seed))
                rows.append(np.concatenate([np.ravel(point[name]) for name in self._names]))
        return np.array(rows, dtype=float)

    def _prior_data_values(self) -> list[np.ndarray]:
        return [np.array(v.get_value(), copy=True) for v in self._prior_data]

    def forget_if_prior_data_changed(self) -> None:
        """A chain starts: forget the box if ``pm.set_data`` has changed data the prior reads since it was
        built. A step object sampled again after a prior's sd held in ``pm.Data`` went from 1 to 1000 kept
        the old box, which refused the search's start and every probe of the independence component
        (R-hat 1.28 against a new step's 1.001, warned only as 'increase tune'; a new user's trial)."""
        if self._compiled is None or not self._prior_data:
            return
        if not all(same_array(a, b) for a, b in zip(self._compiled_for, self._prior_data_values())):
            self._compiled = None

    def _ready(self) -> bool:
        """Compile the prior's draws and the box at first use; False if the prior cannot be drawn."""
        if self._compiled is None:
            self._compiled_for = self._prior_data_values()
            try:
                with _quietly():
                    draw, unbounded = self._compile()
                    seeds = np.random.default_rng(_BOX_SEED).integers(2**31, size=self._box_draws)
                    box_draws = self._draws(draw, seeds)
                    box = PlausibleBox.from_draws(box_draws, unbounded)
                    self._compiled = (draw, box, box.widened(PROBE_BOX_WIDENING))
            except Exception:  # noqa: BLE001 - any failure to draw from the prior means: no search
                self._compiled = False
        return self._compiled is not False

    def probe_box(self) -> PlausibleBox | None:
        """Where the independence component's probes are evaluated: the plausible box widened
        :data:`PROBE_BOX_WIDENING` times about its centre; None (no limit) if the prior cannot be drawn."""
        return self._compiled[2] if self._ready() else None

    def run(self, target, start, start_log_density, rng, run_elsewhere=None) -> SearchResult | None:
        """Search from :data:`SEARCH_CANDIDATES` prior draws (seeded from ``rng``); None if the model's
        prior cannot be drawn (a variable without a random generator, or a draw that raises): the chain
        keeps its start. The search is an aid, never a reason for sampling to fail.
        ``run_elsewhere``: as for :func:`~pymc_kameleon.core.starts.search_start`."""
        if not self._ready():
            return None
        draw, box, _ = self._compiled
        seeds = rng.integers(2**31, size=SEARCH_CANDIDATES)
        try:
            candidates = self._draws(draw, seeds)
        except Exception:  # noqa: BLE001 - as above, for this chain's draws
            return None
        dim = candidates.shape[1]
        if not np.isfinite(start_log_density):
            finite = self._finite_draws(draw, candidates, target, rng)
            candidates = np.array(finite) if finite else candidates  # none: the search keeps the start
        return search_start(
            lambda x: target.evaluate(x).logp, start, start_log_density, candidates, box,
            min(SEARCH_EVALS_PER_DIM * dim, SEARCH_MAX_EVALS), run_elsewhere,
        )

    def _finite_draws(self, draw, candidates, target, rng) -> list[np.ndarray]:
        """For a start of zero density: of ``candidates`` and then up to :data:`ZERO_DENSITY_DRAWS` more
        prior draws (seeded from ``rng``), the first :data:`SEARCH_CANDIDATES` with a finite density (an
        empty list if none has one)."""
        finite = [x for x in candidates if np.isfinite(target.evaluate(x).logp)]
        for seed in rng.integers(2**31, size=ZERO_DENSITY_DRAWS):
            if len(finite) >= SEARCH_CANDIDATES:
                break
            try:
                (x,) = self._draws(draw, [seed])
            except Exception:  # noqa: BLE001 - as for the candidates: no search
                break
            if np.isfinite(target.evaluate(x).logp):
                finite.append(x)
        return finite[:SEARCH_CANDIDATES]

    def finds_finite(self, target) -> bool:
        """Whether prior draws (the candidates of :meth:`run` for a start of zero density, from a generator
        of their own) include one of finite density: a search from such a start will find one."""
        if not self._ready():
            return False
        draw = self._compiled[0]
        seeds = np.random.default_rng(_BOX_SEED + 1).integers(2**31, size=SEARCH_CANDIDATES)
        try:
            candidates = self._draws(draw, seeds)
        except Exception:  # noqa: BLE001 - as in run
            return False
        return bool(self._finite_draws(draw, candidates, target, np.random.default_rng(_BOX_SEED + 2)))


@contextlib.contextmanager
def _quietly():
    """The search's own prior draws and box, with warnings ignored: they are the search's, not the
    user's, and a filter that turns warnings into errors (``-W error``, a notebook's
    ``warnings.simplefilter("error")``) made a prior draw's warning (a ``pm.CustomDist`` random that
    warns) an exception that switched the search off without a word: the chain started at PyMC's
    initial point and other draws followed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
