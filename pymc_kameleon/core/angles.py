r"""Angles: coordinates in which the target's density is :math:`2\pi`-periodic.

PyMC samples a ``pm.VonMises`` variable through its circular transform: the sampler's coordinate is an
unbounded real number and the model reads the angle wrapped, so the density repeats every :math:`2\pi`
and the posterior has a copy in every period. A chain may sit in any copy; what it learns must not
mix copies. Tuning draws from two copies (two chains that found the posterior at :math:`\pi` and at
:math:`-\pi`) taught a covariance :math:`2\pi` wide in the angle, and chains sampling a 2-parameter
posterior with it had 1/10 of the concentration's sd (R-hat 2.63). So tuning keeps every chain's
angles, and every draw it learns from, in one period: the one centred on the tuning draws' mean
direction (:class:`AngleFrame`). Moving an angle by a multiple of :math:`2\pi` changes no density.
"""

from __future__ import annotations

import numpy as np

__all__ = ["AngleFrame", "mean_direction", "wrap_about"]

TWO_PI = 2.0 * np.pi


def mean_direction(angles, axis: int = 0) -> np.ndarray:
    r"""The mean direction :math:`\operatorname{atan2}(\overline{\sin x}, \overline{\cos x})` of
    ``angles`` along ``axis``."""
    return np.arctan2(np.mean(np.sin(angles), axis=axis), np.mean(np.cos(angles), axis=axis))


def wrap_about(x, centre, columns) -> np.ndarray:
    r"""``x`` (a point or rows of points) with each coordinate in ``columns`` moved by the multiple of
    :math:`2\pi` that puts it in :math:`[c - \pi, c + \pi)`, :math:`c` the ``centre`` of that column.

    Only coordinates outside the period change (a coordinate inside keeps its bits). Returns ``x``
    itself where nothing moves, else a copy.
    """
    x = np.asarray(x, dtype=float)
    columns = np.asarray(columns, dtype=int)
    if columns.size == 0:
        return x
    angles = x[..., columns]
    turns = np.floor((angles - centre + np.pi) / TWO_PI)
    if not np.any(turns):
        return x
    x = np.array(x, copy=True)
    x[..., columns] = np.where(turns != 0, angles - turns * TWO_PI, angles)
    return x


class AngleFrame:
    r"""The period a chain's tuning keeps its angles in: centred on the mean direction of the draws
    recorded in the current and the previous adaptation window (a chain walking in is forgotten
    window by window, as the learned covariance forgets it).

    Pooled tuning records every chain's states, so every chain of a population has the same frame.

    Parameters
    ----------
    columns : sequence of int
        The angle coordinates of the sampler's vector.
    """

    def __init__(self, columns):
        self.columns = np.asarray(columns, dtype=int)
        k = self.columns.size
        # Sums of sin and cos over the current window's rows, and over the previous window's.
        self._current = np.zeros((2, k))
        self._previous = np.zeros((2, k))
        #: The period's centre, None before any row is recorded. It moves continuously: of a mean
        #: direction's representatives, the one nearest the last centre (atan2's jumps between pi and
        #: -pi put a window's rows in the copy beside the learned mean's: no independent draw accepted).
        self.centre = None

    def wrap(self, x) -> np.ndarray:
        """``x`` (a point or rows) moved into the frame's period (:func:`wrap_about`); ``x`` itself before
        any row is recorded."""
        x = np.asarray(x, dtype=float)
        return x if self.centre is None else wrap_about(x, self.centre, self.columns)

    def record(self, rows) -> np.ndarray:
        """Rows a window records, moved into the period (about their own mean direction if none was
        recorded before), and counted in the centre. Returns the moved rows."""
        rows = np.atleast_2d(np.asarray(rows, dtype=float))
        centre = self.centre
        if centre is None:
            centre = mean_direction(rows[:, self.columns])
        rows = wrap_about(rows, centre, self.columns)
        angles = rows[:, self.columns]
        self._current[0] += np.sin(angles).sum(axis=0)
        self._current[1] += np.cos(angles).sum(axis=0)
        sums = self._current + self._previous
        direction = np.arctan2(sums[0], sums[1])
        self.centre = centre + np.mod(direction - centre + np.pi, TWO_PI) - np.pi
        return rows

    def next_window(self) -> None:
        """A window ended: its rows become the previous window's."""
        self._previous, self._current = self._current, np.zeros_like(self._current)
