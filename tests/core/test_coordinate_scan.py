"""The coordinate scan's step-size adaptation, in transit from a far start and at the posterior."""

import math

import numpy as np
import pytest

from pymc_kameleon.core.adaptation import scan as coordinate_scan
from pymc_kameleon.core.adaptation.scale_free import ScaleFreeAdaptation
from pymc_kameleon.core.adaptation.scan import SCAN_TARGET, TRANSIT_LOG_STEP, TRANSIT_STREAK, CoordinateScan
from pymc_kameleon.core.adaptation.state import TuningDraw
from pymc_kameleon.core.kameleon.kernels import make_kernel
from pymc_kameleon.core.kameleon.scale_free import ScaleFreeProposal
from pymc_kameleon.core.mh import metropolis_accept, mh_log_ratio


def _move(scan, y, step, accept_prob, accepted):
    """One scan step of the given size on a one-coordinate scan."""
    x = y + step
    y_new = x if accepted else y
    scan.adapt(accept_prob, y, x, y_new)
    return y_new


def test_in_transit_a_move_back_leaves_the_step_and_one_forward_grows_it_by_the_transit_step():
    """Hand-computed: after TRANSIT_STREAK accepted moves down, a rejected move up changes nothing,
    an accepted move down with probability 1 adds exactly TRANSIT_LOG_STEP to log s; one move up
    that is accepted ends the transit."""
    scan = CoordinateScan(1, 1.0, 1.0)
    y = np.zeros(1)
    for _ in range(TRANSIT_STREAK):
        y = _move(scan, y, -0.5, 1.0, True)
    assert scan.in_transit[0] and scan.direction[0] == -1.0
    before = scan.log_scale[0]
    y = _move(scan, y, +0.5, 0.0, False)
    assert scan.log_scale[0] == before
    y = _move(scan, y, -0.5, 1.0, True)
    assert scan.log_scale[0] == pytest.approx(before + TRANSIT_LOG_STEP)
    y = _move(scan, y, +0.5, 0.9, True)
    assert not scan.in_transit[0] and scan.streak[0] == 1 and scan.direction[0] == 1.0


def test_out_of_transit_a_rejected_move_shrinks_the_step_as_robbins_monro_does():
    """Control: with fewer than TRANSIT_STREAK accepted moves one way, a rejected move shrinks
    log s by gain x SCAN_TARGET (gain 0.7 + 2.3 exp(-n/8) after n moves)."""
    scan = CoordinateScan(1, 1.0, 1.0)
    y = _move(scan, np.zeros(1), -0.5, 1.0, True)
    before, n = scan.log_scale[0], scan.counts[0]
    _move(scan, y, +0.5, 0.0, False)
    gain = 0.7 + 2.3 * math.exp(-n / 8.0)
    assert scan.log_scale[0] == pytest.approx(before - gain * SCAN_TARGET)


def _scan_from(start_sds, seed, d=20):
    """Run only the coordinate scan on independent normals with sds 1e-3..1e3."""
    sds = np.logspace(-3, 3, d)
    rng = np.random.default_rng(seed)
    adaptation = ScaleFreeAdaptation(d, make_kernel("gaussian"))
    prop = ScaleFreeProposal(adaptation.state, 0.1)
    x = start_sds * sds
    cur = -0.5 * np.sum((x / sds) ** 2)
    for _ in range(adaptation.state.scan_steps):
        start = x
        move = prop.propose(x, rng)
        lp = -0.5 * np.sum((move.x / sds) ** 2)
        accepted, prob = metropolis_accept(mh_log_ratio(lp, cur, move.log_q_reverse, move.log_q_forward), rng)
        if accepted:
            x, cur = move.x, lp
        adaptation.adapt(TuningDraw(x, prob, move.component, start, move.x), rng)
    return np.abs(x / sds), adaptation.state.scan_scales / sds


@pytest.mark.parametrize("transit", [True, False], ids=["transit", "control-without"])
def test_the_scan_carries_coordinates_in_from_30_sd(transit, monkeypatch):
    """From 30 sd away (scales 1e-3..1e3, 20-d, 5 seeds) the scan leaves about 6 of 20 coordinates
    more than 5 sd out; without the transit rule about 13 (measured 5.7 and 12.6 over 20 seeds)."""
    if not transit:
        monkeypatch.setattr(coordinate_scan, "TRANSIT_STREAK", 10**9)
    far = np.mean([np.sum(_scan_from(30.0, seed)[0] > 5) for seed in range(5)])
    assert far < 9 if transit else far > 10


def test_at_the_posterior_the_scan_still_learns_about_two_sds():
    """From the posterior the transit rule rarely applies: step sizes stay about 2.4 sds (median
    2.5 over 20 seeds; 2.2 without the rule), and no coordinate wanders off."""
    dist, ratio = zip(*(_scan_from(0.0, seed) for seed in range(5)))
    assert 1.5 < np.median(ratio) < 4.0
    assert np.max(dist) < 5.0
