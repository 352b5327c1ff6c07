"""How a step's warnings reach the user's session, and name the user's line.

**Warnings from worker processes.** ``pm.sample(cores>1)`` (PyMC's default on a machine with
several cores) and ``pm.sample_smc(cores>1)`` run each chain in a worker process, and a warning
raised there never reaches the user: it is neither shown nor caught by ``warnings.catch_warnings``.
What does reach the session is each draw's statistics (or, for SMC, the kernel's settings),
pickled. So a step in a worker keeps its warnings (:class:`StepWarnings`) and attaches them to
the next statistic it reports, as a float (or int) subclass whose unpickling in the session raises
them there and leaves the plain number (:func:`carry_warnings`).

**The user's line.** A warning names the first frame outside the package, PyMC, PyTensor and the
standard library's pickling and process machinery (:func:`user_stacklevel`): the user's ``pm.sample``.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import sys
import threading
import warnings

import numpy as np
import pymc
import pytensor

from pymc_kameleon.core.warning_categories import KameleonWarning

__all__ = [
    "RunSessions",
    "StepWarnings",
    "carry_warnings",
    "in_pymc_worker",
    "shown_text",
    "spawn_key",
    "user_stacklevel",
]

# pm.sample(cores>1) and pm.sample_smc(cores>1) name their worker processes so (PyMC 5.28 and 6), and
# the population sampler (pooled tuning with cores>1) its chains' processes.
_PYMC_WORKER_PREFIXES = ("worker_chain_", "smc_worker_chain_", "ChainWalker")


def in_pymc_worker() -> bool:
    """Whether this code runs in one of PyMC's sampling worker processes (``cores>1``)."""
    return multiprocessing.current_process().name.startswith(_PYMC_WORKER_PREFIXES)


# Where a frame's code lives inside these, it is not the user's: a step's warning names the first frame
# outside them (the user's pm.sample call), not PyMC's step loop (a new user's warning pointed at
# pymc/step_methods/arraystep.py).
_LIBRARY_DIRS = tuple(
    os.path.dirname(module.__file__) + os.sep
    for module in (pymc, pytensor, pickle, threading, multiprocessing)  # stdlib: pickle's directory
) + (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)


def user_stacklevel(default: int) -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the caller name the first frame outside the
    package, PyMC, PyTensor and the standard library's pickling and process machinery; ``default`` if
    every frame is inside them."""
    frame, level = sys._getframe(2), 2
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_LIBRARY_DIRS) and not filename.startswith("<frozen"):
            return level
        frame, level = frame.f_back, level + 1
    return default


# Per sampling run (a step's ``_warning_session``): each kind of warning shown so far -> its first text and
# the chains (spawn keys) that showed it.
_SHOWN: dict[str, dict[str, tuple[str, set]]] = {}
# A figure in a message: what differs between two chains' warnings of one kind.
_FIGURE = re.compile(r"[-+]?(?:\d[\d_,]*\.?\d*|\.\d+)(?:e[-+]?\d+)?%?")
# The end of a message's first sentence: a full stop before a capital (not "pm.sample", not "e.g. x").
_FIRST_SENTENCE_END = re.compile(r"\.\s+(?=[A-Z])")


def shown_text(message: str, session: str | None, chain=None) -> str:
    """What to show of ``message`` in a sampling run: all of it, unless another chain of the run
    (``session``) has shown a warning of the same kind (the same text but for its figures), then its
    first sentence, with its own figures, and a pointer to the other: four chains' long warnings of one
    kind read as one. ``chain`` (its generator's spawn key, if known): a chain that showed this kind in the
    session already is in a new run that kept the session (a step sampled again with the same seed and
    ``cores>1``, whose workers never tell the step of a run), which starts afresh."""
    if session is None:
        return message
    kind = _FIGURE.sub("#", message)
    shown = _SHOWN.setdefault(session, {})
    if chain is not None and chain in shown.get(kind, ("", ()))[1]:
        shown.clear()
    first_of_kind, chains = shown.setdefault(kind, (message, set()))
    if chain is not None:
        chains.add(chain)
    if message == first_of_kind:  # shown once: Python's filter keeps an identical text from repeating
        return message
    first = _FIRST_SENTENCE_END.split(message, maxsplit=1)[0].rstrip(".")
    return f"{first}. (Another chain said the same above, with its remedy.)"


class RunSessions:
    """Which sampling run a chain belongs to: the ``session`` of its warnings (:func:`shown_text`).

    ``pm.sample`` (PyMC 5 and 6) spawns each run's chain generators from one seed sequence, chain i's
    with spawn key ``(i,)``. A chain of another sequence starts a new run, and so does a chain whose key
    the current run has seen already: the step sampled again with the same ``random_seed``. One object
    is shared by PyMC's copies of a step (pooled tuning) and pickled with it to worker processes, where
    every chain of a run reads the same session from the same state. A session names the step's own
    (``first``, made with the step), so that another step object sampled with the same seed has another;
    before the first chain, and for a generator PyMC did not spawn, it is the step's own.

    Without it a step object sampled again said "Another chain said the same above" of the previous
    run's warnings, and cut them to their first sentence, their remedy dropped (a new user's trial).
    """

    def __init__(self, first: str):
        self.session = self._step = first
        self._entropy, self._keys, self._generation = None, set(), 0

    def join(self, rng) -> str:
        """The session of a chain whose generator is ``rng`` (PyMC's per-chain hooks)."""
        entropy, key = _seed_sequence(rng)
        if entropy is None:
            return self.session
        if entropy != self._entropy:
            self._entropy, self._keys, self._generation = entropy, set(), 0
        elif key in self._keys:
            self._keys, self._generation = set(), self._generation + 1
        self._keys.add(key)
        self.session = f"{self._step}-{entropy}-{self._generation}"  # another step object: another session
        return self.session


def _seed_sequence(rng):
    sequence = getattr(getattr(rng, "bit_generator", None), "seed_seq", None)
    return getattr(sequence, "entropy", None), tuple(getattr(sequence, "spawn_key", ()))


def spawn_key(rng):
    """Which chain of its run ``rng`` belongs to: its seed sequence's spawn key (None if PyMC did not spawn
    it from one)."""
    entropy, key = _seed_sequence(rng)
    return key if entropy is not None and key else None


def _warn_in_session(value, messages):
    for message, category, *run in messages:  # run: the session and the chain, where the step knows them
        session, chain = (list(run) + [None, None])[:2]
        text = shown_text(message, session, chain)
        warnings.warn(text, category, stacklevel=user_stacklevel(2))
    return value


class _Carried:
    """A number that raises ``messages`` when it is unpickled (mixed into float or int)."""

    def __new__(cls, value, messages):
        obj = super().__new__(cls, value)
        obj.messages = messages
        return obj

    def __reduce__(self):
        return _warn_in_session, (self._plain(self), self.messages)


class _CarriedFloat(_Carried, float):
    _plain = float


class _CarriedInt(_Carried, int):
    _plain = int


def carry_warnings(value, messages):
    """``value`` (a number), made to raise ``messages`` (``(text, category)`` pairs) when unpickled."""
    if not messages:
        return value
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("carry_warnings needs a float or int statistic, not a bool.")
    if isinstance(value, (int, np.integer)):
        return _CarriedInt(int(value), tuple(messages))
    return _CarriedFloat(float(value), tuple(messages))


class StepWarnings:
    """A step's warnings: raised at once in the session, kept for the next statistics in a worker."""

    def __init__(self, session: str | None = None):
        self.pending = []
        self.n_warned = 0  # this chain's warnings so far
        #: The sampling run the chain belongs to (its step's), for :func:`shown_text`; None: show all.
        self.session = session
        #: The chain's generator's spawn key (:func:`spawn_key`), for :func:`shown_text`; None if unknown.
        self.chain = None

    def warn(self, message: str, category=KameleonWarning, stacklevel: int = 2) -> None:
        self.n_warned += 1
        if in_pymc_worker():
            self.pending.append((message, category, self.session, self.chain))
        else:
            text = shown_text(message, self.session, self.chain)
            warnings.warn(text, category, stacklevel=user_stacklevel(stacklevel + 1))

    def attach(self, stats: dict, key: str) -> dict:
        """Attach the kept warnings to ``stats[key]`` (they are raised when the session unpickles it)."""
        if self.pending:
            stats[key] = carry_warnings(stats[key], self.pending)
            self.pending = []
        return stats
