r"""Plots of Kameleon proposals and benchmark targets (matplotlib).

:func:`plot_proposal_contours` reproduces Figure 2 of Sejdinovic, Strathmann et
al. (2014): a heat map of the target's log density on a 2-D slice, the subsample
:math:`Z` that the proposal is built from, and the ``level`` contour of the
proposal :math:`\mathcal N(y, \gamma^2 I + \nu^2 M_y H M_y^\top)` at a few points
:math:`y`. The proposal is Gaussian, so the contour of its 2-D marginal
:math:`\mathcal N(y_{ij}, C_2)` is the ellipse

.. math::
    \{u : (u - y_{ij})^\top C_2^{-1} (u - y_{ij}) = \chi^2_{2}{}^{-1}(\text{level})\},

whose semi-axes are :math:`\sqrt{\chi^2_2{}^{-1}(\text{level})\,\lambda_k}` along the
eigenvectors of :math:`C_2 = V \operatorname{diag}(\lambda_1, \lambda_2) V^\top`.

matplotlib is imported lazily, so importing this module is cheap.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = ["ellipse_parameters", "plot_proposal_contours", "plot_target_density"]

# Exact draws used to choose default plot limits for a target (fixed seed: plots are reproducible).
_LIMIT_DRAWS = 4000
_LIMIT_QUANTILE = 0.005
_PAD = 0.05


def _check_dims(dims, d: int) -> tuple[int, int]:
    try:
        i, j = (int(v) for v in dims)
    except (TypeError, ValueError):
        raise ValueError(f"dims must be a pair of coordinate indices, got {dims!r}.") from None
    if i == j or not (0 <= i < d and 0 <= j < d):
        raise ValueError(f"dims must be two distinct indices in 0..{d - 1}, got {dims!r}.")
    return i, j


def _check_level(level) -> float:
    level = float(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be a probability in (0, 1), got {level!r}.")
    return level


def _check_n_grid(n_grid) -> int:
    if isinstance(n_grid, bool) or not isinstance(n_grid, (int, np.integer)) or n_grid < 2:
        raise ValueError(f"n_grid must be an integer >= 2, got {n_grid!r}.")
    return int(n_grid)


def _get_ax(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots()
    return ax


def ellipse_parameters(cov2, level: float = 0.95) -> tuple[float, float, float]:
    r"""Width, height and angle of the ``level`` contour of :math:`\mathcal N(\cdot, C_2)`.

    Parameters
    ----------
    cov2 : array of shape (2, 2)
        Symmetric positive semi-definite covariance :math:`C_2`.
    level : float in (0, 1), default 0.95
        Probability mass inside the ellipse.

    Returns
    -------
    width, height : float
        Full axis lengths :math:`2\sqrt{\chi^2_2{}^{-1}(\text{level})\,\lambda_k}` for the
        largest and smallest eigenvalue :math:`\lambda_1 \ge \lambda_2`.
    angle : float
        Counter-clockwise rotation of the major axis in degrees (matplotlib's convention).
    """
    level = _check_level(level)
    cov2 = np.asarray(cov2, dtype=float)
    if cov2.shape != (2, 2) or not np.all(np.isfinite(cov2)):
        raise ValueError(f"cov2 must be a finite (2, 2) matrix, got shape {cov2.shape}.")
    lam, vec = np.linalg.eigh(0.5 * (cov2 + cov2.T))  # ascending
    lam = np.clip(lam, 0.0, None)
    radius = math.sqrt(stats.chi2.ppf(level, 2))
    width = 2.0 * radius * math.sqrt(lam[1])
    height = 2.0 * radius * math.sqrt(lam[0])
    angle = math.degrees(math.atan2(vec[1, 1], vec[0, 1]))
    return width, height, angle


def _target_limits(target, dims):
    """Central 99% range of exact draws in each plotted coordinate, padded by 5%."""
    X = target.sample(_LIMIT_DRAWS, rng=np.random.default_rng(0))[:, list(dims)]
    lo = np.quantile(X, _LIMIT_QUANTILE, axis=0)
    hi = np.quantile(X, 1.0 - _LIMIT_QUANTILE, axis=0)
    return lo, hi


def _pad(lo, hi):
    span = np.where(hi > lo, hi - lo, 1.0)
    return lo - _PAD * span, hi + _PAD * span


def plot_target_density(
    target,
    dims=(0, 1),
    ax=None,
    *,
    slice_at=None,
    xlim=None,
    ylim=None,
    n_grid: int = 200,
    log: bool = True,
    clip: float = 20.0,
    cmap: str = "Greys",
    **imshow_kwargs,
):
    r"""Heat map of a target's density on a 2-D slice.

    The slice varies coordinates ``dims`` over a grid and holds the others at
    ``slice_at``.

    Parameters
    ----------
    target : pymc_kameleon.problems.Target
        Anything with ``dim`` and a batched ``logp(X)``; default limits also use ``sample``.
    dims : pair of int, default (0, 1)
        Coordinates on the horizontal and vertical axes.
    ax : matplotlib Axes, optional
        Created if not given.
    slice_at : array of shape (dim,), optional
        Values of the coordinates that are not plotted. Default: zeros.
    xlim, ylim : pair of float, optional
        Plot range. Default: the central 99% of exact draws, padded by 5%.
    n_grid : int, default 200
        Grid points per axis.
    log : bool, default True
        Show :math:`\log\pi` (clipped below at its maximum minus ``clip``) rather than :math:`\pi`.
    clip : float, default 20.0
        Dynamic range of the log-density colour scale.
    cmap : str, default "Greys"
    **imshow_kwargs
        Passed to :meth:`matplotlib.axes.Axes.imshow`.

    Returns
    -------
    matplotlib.axes.Axes
    """
    d = int(target.dim)
    i, j = _check_dims(dims, d)
    n_grid = _check_n_grid(n_grid)
    if not (np.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be a positive number, got {clip!r}.")
    base = np.zeros(d) if slice_at is None else np.array(slice_at, dtype=float)
    if base.shape != (d,):
        raise ValueError(f"slice_at must have shape ({d},), got {base.shape}.")
    if xlim is None or ylim is None:
        lo, hi = _pad(*_target_limits(target, (i, j)))
        xlim = (lo[0], hi[0]) if xlim is None else xlim
        ylim = (lo[1], hi[1]) if ylim is None else ylim
    xs = np.linspace(float(xlim[0]), float(xlim[1]), n_grid)
    ys = np.linspace(float(ylim[0]), float(ylim[1]), n_grid)
    gx, gy = np.meshgrid(xs, ys)
    pts = np.tile(base, (gx.size, 1))
    pts[:, i] = gx.ravel()
    pts[:, j] = gy.ravel()
    val = np.asarray(target.logp(pts), dtype=float).reshape(gx.shape)
    top = np.nanmax(np.where(np.isfinite(val), val, np.nan))
    if log:
        img = np.clip(val, top - clip, None)
    else:
        img = np.exp(val - top)
    ax = _get_ax(ax)
    kwargs = {"origin": "lower", "aspect": "auto", "cmap": cmap, "interpolation": "nearest", "alpha": 0.75}
    kwargs.update(imshow_kwargs)
    ax.imshow(img, extent=(xs[0], xs[-1], ys[0], ys[-1]), **kwargs)
    ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(ys[0], ys[-1])
    ax.set_xlabel(f"$x_{{{i + 1}}}$")
    ax.set_ylabel(f"$x_{{{j + 1}}}$")
    return ax


def _is_inference_data(obj) -> bool:
    """Whether ``obj`` is a run's InferenceData (ArviZ 0) or DataTree (ArviZ 1)."""
    return hasattr(obj, "posterior") and hasattr(obj, "sample_stats")


def _coordinate_labels(proposal, d, model=None) -> list[str]:
    r"""Axis labels: the sampled coordinates' names for a step or a run's InferenceData (``mu``,
    ``log(sigma)``, ``b[2]``), else :math:`x_1, \dots, x_d`."""
    if _is_inference_data(proposal):
        from pymc_kameleon.steps.tuned import value_space_labels

        names = value_space_labels(model)
    else:
        names = getattr(proposal, "_coordinate_names", None)
    if names is None or len(names) != d:
        return [f"$x_{{{k + 1}}}$" for k in range(d)]
    return list(names)


def _resolve_proposal(proposal, chain=0, model=None):
    """Accept a core KameleonProposal, a step exposing ``.proposal``, or a tuned run's InferenceData."""
    if _is_inference_data(proposal):
        from pymc_kameleon.steps.tuned import rebuild_proposal

        return rebuild_proposal(proposal, chain, model=model)
    if callable(getattr(proposal, "covariance", None)) and hasattr(proposal, "Z"):
        return proposal
    if hasattr(proposal, "proposal"):
        inner = proposal.proposal
        if inner is None and getattr(proposal, "transport_map", None) is not None:
            from pymc_kameleon.steps.tuned import THROUGH_MAP_MESSAGE

            raise ValueError(f"{type(proposal).__name__}'s chain {THROUGH_MAP_MESSAGE}")
        if inner is None:
            raise ValueError(
                f"{type(proposal).__name__} has not adapted yet, so it has no Kameleon proposal to plot "
                "(it is still in its random-walk warm-up, its Kameleon component has not joined: it joins "
                "after kameleon_after tuning steps, 10000 by default, or it tuned in worker processes: "
                "pm.sample(cores>1) tunes each chain in its own process). Sample with a longer tune or a "
                "smaller kameleon_after, or plot the run's InferenceData: "
                "plot_proposal_contours(idata, chain=0)."
            )
        return _resolve_proposal(inner)
    raise ValueError(
        f"proposal must be a KameleonProposal (with Z and covariance(y)) or a KameleonMetropolis step, "
        f"got {type(proposal).__name__}."
    )


def _default_points(Z, i, n_points=5):
    """``n_points`` rows of Z spread along coordinate ``i`` (deterministic)."""
    order = np.argsort(Z[:, i], kind="stable")
    k = min(n_points, Z.shape[0])
    # Skip the extreme 5% at both ends so the points are typical ones.
    lo, hi = int(0.05 * (len(order) - 1)), int(0.95 * (len(order) - 1))
    return Z[order[np.unique(np.linspace(lo, hi, k).round().astype(int))]]


def plot_proposal_contours(
    proposal,
    target=None,
    points=None,
    dims=(0, 1),
    level: float = 0.95,
    ax=None,
    n_grid: int = 200,
    show_subsample: bool = True,
    *,
    slice_at=None,
    n_points: int = 5,
    color: str = "red",
    subsample_color: str = "tab:blue",
    chain: int = 0,
    model=None,
):
    r"""Figure 2 of the Kameleon paper: ``level`` contours of the proposal at a few points.

    Draws (i) a heat map of ``target``'s log density on the 2-D slice through
    ``slice_at`` (if a target is given), (ii) the subsample :math:`Z` as small dots,
    and (iii) for each point :math:`y` the ``level`` ellipse of the 2-D marginal of
    :math:`q_Z(\cdot \mid y) = \mathcal N(y, \gamma^2 I + \nu^2 M_y H M_y^\top)` on
    ``dims`` (see :func:`ellipse_parameters`), with a marker at :math:`y`.

    Parameters
    ----------
    proposal : KameleonProposal, KameleonMetropolis or InferenceData
        A core :class:`pymc_kameleon.core.kameleon.family.KameleonProposal`, a step whose
        ``.proposal`` is one (i.e. a step that has been tuned in this process), or the
        InferenceData of a ``KameleonMetropolis`` run: then chain ``chain``'s tuned proposal is
        rebuilt with :func:`pymc_kameleon.rebuild_proposal` (the way to plot after
        ``pm.sample(cores>1)``, whose tuning happens in worker processes). Coordinates are the
        step's (value variables: a positive scale appears as its log).
    target : pymc_kameleon.problems.Target, optional
        Target whose log density is drawn underneath.
    points : array of shape (k, d) or (d,), optional
        Points :math:`y` at which to draw proposals. Default: ``n_points`` points of
        :math:`Z` spread along ``dims[0]``.
    dims : pair of int, default (0, 1)
        The two coordinates to plot.
    level : float in (0, 1), default 0.95
        Probability mass of the proposal inside each ellipse.
    ax : matplotlib Axes, optional
    n_grid : int, default 200
        Resolution of the heat map.
    show_subsample : bool, default True
        Plot :math:`Z`.
    slice_at : array of shape (d,), optional
        Values of the other coordinates for the heat map. Default: the point itself
        if exactly one point is given, else zeros.
    n_points : int, default 5
        Number of default points.
    color, subsample_color : str
        Colours of the ellipses and of :math:`Z`.
    chain : int, default 0
        With an InferenceData: the chain whose proposal is drawn.
    model : pm.Model, optional
        With an InferenceData: the model sampled (default: the model in context).

    Returns
    -------
    matplotlib.axes.Axes
        One :class:`matplotlib.patches.Ellipse` patch per point is added to ``ax.patches``.

    Raises
    ------
    ValueError
        If ``proposal`` is a step that has not adapted yet, or an option is invalid.
    """
    from matplotlib.patches import Ellipse

    prop = _resolve_proposal(proposal, chain, model)
    Z = np.asarray(prop.Z, dtype=float)
    d = Z.shape[1]
    i, j = _check_dims(dims, d)
    level = _check_level(level)
    n_grid = _check_n_grid(n_grid)
    if target is not None and int(target.dim) != d:
        raise ValueError(f"target has dim={target.dim} but the proposal lives in {d} dimensions.")
    if points is None:
        if isinstance(n_points, bool) or not isinstance(n_points, (int, np.integer)) or n_points < 1:
            raise ValueError(f"n_points must be a positive integer, got {n_points!r}.")
        pts = _default_points(Z, i, int(n_points))
    else:
        pts = np.atleast_2d(np.asarray(points, dtype=float))
        if pts.ndim != 2 or pts.shape[1] != d:
            raise ValueError(f"points must have shape (k, {d}) or ({d},), got {np.shape(points)}.")
    if slice_at is None and points is not None and pts.shape[0] == 1:
        slice_at = pts[0]

    ellipses = []
    for y in pts:
        cov = np.asarray(prop.covariance(y), dtype=float)
        width, height, angle = ellipse_parameters(cov[np.ix_((i, j), (i, j))], level)
        ellipses.append(((y[i], y[j]), width, height, angle))

    # Plot range: the target's typical set, Z and every ellipse's bounding box.
    los, his = [], []
    if target is not None:
        lo, hi = _target_limits(target, (i, j))
        los.append(lo)
        his.append(hi)
    if show_subsample or target is None:
        los.append(Z[:, [i, j]].min(axis=0))
        his.append(Z[:, [i, j]].max(axis=0))
    for (cx, cy), width, height, angle in ellipses:
        t = math.radians(angle)
        ex = 0.5 * math.hypot(width * math.cos(t), height * math.sin(t))
        ey = 0.5 * math.hypot(width * math.sin(t), height * math.cos(t))
        los.append(np.array([cx - ex, cy - ey]))
        his.append(np.array([cx + ex, cy + ey]))
    lo, hi = _pad(np.min(los, axis=0), np.max(his, axis=0))

    ax = _get_ax(ax)
    if target is not None:
        plot_target_density(
            target, (i, j), ax=ax, slice_at=slice_at, xlim=(lo[0], hi[0]), ylim=(lo[1], hi[1]), n_grid=n_grid
        )
    if show_subsample:
        ax.scatter(
            Z[:, i], Z[:, j], s=3, color=subsample_color, alpha=0.6, linewidths=0, label="subsample $Z$"
        )
    for (cx, cy), width, height, angle in ellipses:
        ax.add_patch(
            Ellipse((cx, cy), width, height, angle=angle, fill=False, edgecolor=color, linewidth=1.5)
        )
    ax.plot(pts[:, i], pts[:, j], "o", color=color, markersize=3, label=f"{level:.0%} proposal contours")
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    labels = _coordinate_labels(proposal, d, model)
    ax.set_xlabel(labels[i])
    ax.set_ylabel(labels[j])
    return ax
