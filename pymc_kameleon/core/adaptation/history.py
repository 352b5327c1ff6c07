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
        if self.n_seen % self.stride == 0:
            if self._size == self.capacity:
                kept = self._points[: self._size : 2]
                self._size = kept.shape[0]
                self._points[: self._size] = kept
                self.stride *= 2
            if self.n_seen % self.stride == 0:
                self._points[self._size] = x
                self._size += 1
        self.n_seen += 1

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
