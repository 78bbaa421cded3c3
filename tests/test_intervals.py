"""The interval module against brute force: unit timelines painted cell by cell on random intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xladiag.analyzer.capture import intervals

SPAN = 60  # small integer timelines: brute force paints every picosecond


def _random(rng, n, groups, max_len=15):
    start = rng.integers(0, SPAN, n)
    end = start + rng.integers(0, max_len, n)  # zero-length intervals included
    return start, end, rng.integers(0, groups, n)


def _painted(start, end, group, groups):
    cells = np.zeros((groups, SPAN + 20), bool)
    for s, e, g in zip(start, end, group):
        cells[g, s:e] = True
    return cells


@pytest.mark.parametrize("seed", range(25))
def test_union_length_matches_painting(seed):
    rng = np.random.default_rng(seed)
    groups = int(rng.integers(1, 5))
    start, end, group = _random(rng, int(rng.integers(0, 40)), groups)
    got = intervals.union_length(start, end, group, groups)
    assert got.tolist() == _painted(start, end, group, groups).sum(axis=1).tolist()


@pytest.mark.parametrize("seed", range(25))
def test_covered_matches_painting(seed):
    rng = np.random.default_rng(100 + seed)
    groups = int(rng.integers(1, 4))
    start, end, group = _random(rng, int(rng.integers(0, 30)), groups)
    qs, qe, qg = _random(rng, 20, groups, max_len=30)
    cells = _painted(start, end, group, groups)
    want = [int(cells[g, s:e].sum()) for s, e, g in zip(qs, qe, qg)]
    assert intervals.covered(qs, qe, qg, start, end, group).tolist() == want


def test_covered_by_merged_blocks():
    # Blocks [0,30) [20,50) merge to [0,50); [80,90) stays alone.
    got = intervals.covered([10, 40, 60, 0], [70, 85, 75, 100], [0] * 4, [0, 20, 80], [30, 50, 90], [0] * 3)
    assert got.tolist() == [40, 15, 0, 60]


def test_blocks_merge_touching_and_overlapping_intervals():
    g, s, e = intervals.blocks([0, 5, 10, 20, 22, 0], [10, 10, 15, 25, 23, 3], [0, 0, 0, 0, 0, 1])
    assert list(zip(g.tolist(), s.tolist(), e.tolist())) == [(0, 0, 15), (0, 20, 25), (1, 0, 3)]


@pytest.mark.parametrize("seed", range(15))
def test_locate_finds_the_window_holding_each_point(seed):
    rng = np.random.default_rng(200 + seed)
    groups = 3
    # Disjoint windows per group, shuffled: [10k, 10k + w) with w < 10 leaves gaps.
    ws = np.repeat(np.arange(6) * 10, groups)
    wg = np.tile(np.arange(groups), 6)
    we = ws + rng.integers(1, 10, len(ws))
    perm = rng.permutation(len(ws))
    ws, we, wg = ws[perm], we[perm], wg[perm]
    points, pg = rng.integers(-5, 70, 50), rng.integers(0, groups + 1, 50)  # group 3 has no windows
    want = []
    for t, g in zip(points, pg):
        hits = [i for i in range(len(ws)) if wg[i] == g and ws[i] <= t < we[i]]
        want.append(hits[0] if hits else -1)
    assert intervals.locate(points, pg, ws, we, wg).tolist() == want


@pytest.mark.parametrize("seed", range(40))
def test_locate_points_in_order_as_shuffled(seed):
    # Points in (group, time) order (a capture's events) take the no-sort path; windows may overlap, repeat
    # or be empty: the one that starts last at or before a point wins, as for points in any order.
    rng = np.random.default_rng(400 + seed)
    groups, n = int(rng.integers(1, 5)), int(rng.integers(1, 80))
    ws = rng.integers(-5, 50, int(rng.integers(1, 12)))
    we, wg = ws + rng.integers(-3, 20, len(ws)), rng.integers(0, groups + 1, len(ws))
    points, pg = rng.integers(0, 50, n), rng.integers(0, groups, n)
    order = np.lexsort((points, pg))
    points, pg = points[order], pg[order]
    want = []
    for t, g in zip(points, pg):
        started = [i for i in range(len(ws)) if wg[i] == g and ws[i] <= t]
        last = max(started, key=lambda i: (ws[i], i)) if started else -1
        want.append(last if last >= 0 and t < we[last] else -1)
    assert intervals.locate(points, pg, ws, we, wg).tolist() == want
    shuffle = rng.permutation(n)
    assert intervals.locate(points[shuffle], pg[shuffle], ws, we, wg).tolist() == [want[i] for i in shuffle]


@pytest.mark.parametrize("seed", range(15))
def test_first_at_or_after(seed):
    rng = np.random.default_rng(300 + seed)
    points, pg = rng.integers(0, 50, 30), rng.integers(0, 3, 30)
    queries, qg = rng.integers(-5, 60, 40), rng.integers(0, 4, 40)
    got = intervals.first_at_or_after(queries, qg, points, pg)
    for q, g, i in zip(queries, qg, got):
        later = [p for p, h in zip(points, pg) if h == g and p >= q]
        if later:
            assert i >= 0 and pg[i] == g and points[i] == min(later)
        else:
            assert i == -1


def test_union_length_ignores_intervals_outside_every_group():
    assert intervals.union_length([0, 0, 5], [10, 4, 9], [-1, 0, 0], 1).tolist() == [8]


def test_times_too_far_apart_for_one_key():
    # Groups times a span near 2**62 do not fit one int64 key: ranks of the times keep the order.
    far = 2**61
    start, end, group = [0, 5, far, far + 1, 0], [10, 12, far + 5, far + 3, 4], [0, 0, 3, 3, 2]
    assert intervals.union_length(start, end, group, 4).tolist() == [12, 0, 4, 5]
    assert intervals.covered([far + 2], [far + 9], [3], start, end, group).tolist() == [3]
    assert intervals.locate([far + 4, 3], [3, 2], [far, 0], [far + 5, 4], [3, 2]).tolist() == [0, 1]


def test_empty_inputs():
    assert intervals.union_length([], [], [], 2).tolist() == [0, 0]
    assert intervals.covered([0], [5], [0], [], [], []).tolist() == [0]
    assert intervals.locate([1], [0], [], [], []).tolist() == [-1]
    assert intervals.first_at_or_after([], [], [1], [0]).tolist() == []


@pytest.mark.parametrize("top", [10**6, 2**62])  # one packed sort key; values too wide for one (lexsort)
def test_group_median_matches_pandas(top):
    rng = np.random.default_rng(7)
    group, value = rng.integers(-1, 40, 5000), rng.integers(0, top, 5000)
    expected = pd.Series(value[group >= 0]).groupby(group[group >= 0]).median().reindex(range(45)).to_numpy()
    np.testing.assert_array_equal(intervals.group_median(group, value, 45), expected)
    assert np.isnan(intervals.group_median(group, value, 45)[40:]).all()  # groups without values
