r"""A bounded, evenly thinned record of a chain's history.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "HistoryBuffer",
]


class HistoryBuffer:
    r"""Bounded, evenly thinned record of a chain's history.

    Points are kept with a stride that doubles whenever the buffer fills: the
    buffer then drops every other stored point. It therefore always holds points
    evenly spaced over the whole history, at most ``capacity`` of them, with
    amortised :math:`O(d)` cost per step. :meth:`subsample` draws the Kameleon
    subsample :math:`Z` from the later part of the history, leaving out the
    transient at the start of tuning.

    A step may give several points at once (:meth:`append_rows`: every chain's state, pooled
    tuning); the stride and the thinning then count steps, so that a thinned history still holds
    every chain's states. (Counted by points, a population of four chains kept chain 0's and 2's
    states alone once the buffer first filled, and chain 0's alone after the second time.)

    Parameters
    ----------
    dim : int
        Dimension of the points.
    capacity : int
        Maximal number of stored points (at least 2).
    """

    def __init__(self, dim: int, capacity: int):
        if capacity < 2:
            raise ValueError(f"history capacity must be at least 2, got {capacity!r}.")
        self.dim = int(dim)
        self.capacity = int(capacity)
        self._points = np.empty((self.capacity, self.dim))
        self._steps = np.empty(self.capacity, dtype=np.int64)  # the step (n_seen) each point came at
        self._size = 0
        self.stride = 1
        self.n_seen = 0

    def __len__(self) -> int:
        return self._size

    def clear(self) -> None:
        self._size = 0
        self.stride = 1
        self.n_seen = 0

    def append(self, x) -> None:
        """Record one step's point."""
        if self.n_seen % self.stride == 0:
            if self._size == self.capacity:
                self._thin()
            if self.n_seen % self.stride == 0:
                self._points[self._size] = x
                self._steps[self._size] = self.n_seen
                self._size += 1
        self.n_seen += 1

    def append_rows(self, rows) -> None:
        """Record one step's points (rows, at most ``capacity``): kept or dropped together."""
        rows = np.atleast_2d(rows)
        n = rows.shape[0]
        if n > self.capacity:
            raise ValueError(f"a step's {n} points exceed the history's capacity {self.capacity}.")
        while self.n_seen % self.stride == 0 and self._size + n > self.capacity:
            self._thin()
        if self.n_seen % self.stride == 0:
            self._points[self._size : self._size + n] = rows
            self._steps[self._size : self._size + n] = self.n_seen
            self._size += n
        self.n_seen += 1

    def _thin(self) -> None:
        """Drop every other stored step's points and double the stride."""
        # The stored steps are the multiples of the stride: those of twice the stride are kept. With one
        # point per step this is every other point.
        kept = self._steps[: self._size] % (2 * self.stride) == 0
        size = int(np.count_nonzero(kept))
        self._points[:size] = self._points[: self._size][kept]
        self._steps[:size] = self._steps[: self._size][kept]
        self._size = size
        self.stride *= 2

    @property
    def points(self) -> np.ndarray:
        """Stored points, oldest first (a view; do not modify)."""
        return self._points[: self._size]

    def subsample(self, n: int, rng: np.random.Generator, discard_fraction: float = 0.5) -> np.ndarray:
        """Uniform subsample without replacement of at most ``n`` stored points.

        Parameters
        ----------
        n : int
            Subsample size.
        rng : numpy.random.Generator
        discard_fraction : float
            Leading fraction of the (time-ordered) history that is left out.
        """
        start = int(discard_fraction * self._size)
        pool = self._points[start : self._size]
        if pool.shape[0] <= n:
            return pool.copy()
        idx = rng.choice(pool.shape[0], size=n, replace=False)
        idx.sort()
        return pool[idx].copy()
