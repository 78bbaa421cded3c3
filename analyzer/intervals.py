"""Interval arithmetic on timelines, in numpy over sorted arrays.

Every interval is half-open ``[start, end)`` in integer picoseconds and belongs to a group (an integer code:
a device, a device-step, ...); intervals of different groups never interact. Three operations cover what
the analysis needs:

* :func:`union_length` - time covered per group, overlaps counted once (busy time: GPU streams and async
  ops run concurrently on one device, so a plain sum over-counts);
* :func:`covered` - how much of each query interval the union of other intervals of its group covers
  (how much of a communication kernel compute hides);
* :func:`locate` - which window (e.g. a step) holds each point, and :func:`first_at_or_after` - the first
  point at or after each query point (a done op's end after a span's start).

All of them sort once (``np.lexsort`` on group then time) and work on the sorted arrays; no pandas
groupby, no Python loop over rows.
"""

from __future__ import annotations

import numpy as np


def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _count_at_or_before(key_group, key_time, q_group, q_time, *, inclusive: bool = True) -> np.ndarray:
    """Per query: how many keys (sorted by group, then time) come at or before (q_group, q_time)
    lexicographically (strictly before with ``inclusive=False``)."""
    nk = len(key_group)
    if len(q_group) == 0:
        return np.zeros(0, np.int64)
    groups = np.concatenate([key_group, q_group])
    times = np.concatenate([key_time, q_time])
    # On a tie the key sorts first when it counts as "at or before", else the query does.
    is_query = np.concatenate([np.zeros(nk, np.int8), np.ones(len(q_group), np.int8)])
    order = np.lexsort((is_query if inclusive else -is_query, times, groups))
    keys_so_far = np.cumsum(order < nk)
    counts = np.empty(len(q_group), np.int64)
    query_at = order >= nk
    counts[order[query_at] - nk] = keys_so_far[query_at]
    return counts


def blocks(start, end, group=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of the intervals as disjoint blocks: (group, start, end), sorted by group then start.

    A sweep over +1 at each start and -1 at each end: a block opens where the running count leaves 0 and
    closes where it returns to 0. Each group's deltas sum to zero, so the count restarts at every group.
    Empty intervals (end <= start) cover nothing.
    """
    s, e = _i64(start), _i64(end)
    g = np.zeros(len(s), np.int64) if group is None else _i64(group)
    keep = e > s
    s, e, g = s[keep], e[keep], g[keep]
    times = np.concatenate([s, e])
    delta = np.concatenate([np.ones(len(s), np.int64), -np.ones(len(e), np.int64)])
    groups = np.concatenate([g, g])
    order = np.lexsort((-delta, times, groups))  # at one instant, starts before ends: touching blocks merge
    delta, times, groups = delta[order], times[order], groups[order]
    running = np.cumsum(delta)
    opens = (delta > 0) & (running == 1)
    closes = (delta < 0) & (running == 0)
    return groups[opens], times[opens], times[closes]


def union_length(start, end, group, n_groups: int) -> np.ndarray:
    """Time covered per group code 0..n_groups-1 by the union of its intervals (int64); a negative code
    (no group) counts nowhere."""
    bg, bs, be = blocks(start, end, group)
    out = np.zeros(n_groups, np.int64)
    keep = bg >= 0
    np.add.at(out, bg[keep], (be - bs)[keep])
    return out


def covered(query_start, query_end, query_group, start, end, group) -> np.ndarray:
    """Per query interval: how much of it the union of the [start, end) intervals of its group covers."""
    qs, qe, qg = _i64(query_start), _i64(query_end), _i64(query_group)
    if len(qs) == 0:
        return np.zeros(0, np.int64)
    bg, bs, be = blocks(start, end, group)
    if len(bg) == 0:
        return np.zeros(len(qs), np.int64)
    length = be - bs
    before = np.concatenate([[0], np.cumsum(length)])  # covered time of all blocks before block j

    def covered_until(t):
        # Covered time up to t counting every block of lower groups: that offset cancels in the difference.
        k = _count_at_or_before(bg, bs, qg, t)
        j = np.maximum(k - 1, 0)
        same = (k > 0) & (bg[j] == qg)
        return np.where(same, before[j] + np.clip(t - bs[j], 0, length[j]), before[k])

    return np.maximum(covered_until(np.maximum(qe, qs)) - covered_until(qs), 0)


def locate(point, point_group, window_start, window_end, window_group) -> np.ndarray:
    """Per point: the index of the window of its group with start <= point < end (-1 if none).

    Windows of a group should not overlap; if they do, the one that starts last at or before the point wins.
    """
    t, tg = _i64(point), _i64(point_group)
    ws, we, wg = _i64(window_start), _i64(window_end), _i64(window_group)
    if len(ws) == 0 or len(t) == 0:
        return np.full(len(t), -1, np.int64)
    order = np.lexsort((ws, wg))
    k = _count_at_or_before(wg[order], ws[order], tg, t)
    j = order[np.maximum(k - 1, 0)]
    inside = (k > 0) & (wg[j] == tg) & (t < we[j])
    return np.where(inside, j, -1)


def first_at_or_after(query, query_group, point, point_group) -> np.ndarray:
    """Per query: the index of the earliest point of its group at or after it (-1 if none)."""
    q, qg = _i64(query), _i64(query_group)
    p, pg = _i64(point), _i64(point_group)
    if len(p) == 0 or len(q) == 0:
        return np.full(len(q), -1, np.int64)
    order = np.lexsort((p, pg))
    k = _count_at_or_before(pg[order], p[order], qg, q, inclusive=False)  # points strictly before
    j = order[np.minimum(k, len(p) - 1)]
    found = (k < len(p)) & (pg[j] == qg)
    return np.where(found, j, -1)
