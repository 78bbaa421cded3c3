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

All of them sort once, on one int64 key per (group, time), and search the sorted arrays; no pandas
groupby, no Python loop over rows.
"""

from __future__ import annotations

import numpy as np


def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _keys(*pairs: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """One int64 key per (group, time), ordered as (group, time) is, consistent across all the pairs: sorting
    and searching on one key is several times faster than ``np.lexsort`` on two."""
    pairs = [(g, t) for g, t in pairs]
    filled = [(g, t) for g, t in pairs if len(t)]
    if not filled:
        return [np.zeros(0, np.int64) for _ in pairs]
    g_lo = min(int(g.min()) for g, _ in filled)
    g_hi = max(int(g.max()) for g, _ in filled)
    t_lo = min(int(t.min()) for _, t in filled)
    span = max(int(t.max()) for _, t in filled) - t_lo + 1
    if (g_hi - g_lo + 1) * span < 2**62:
        out = []
        for g, t in pairs:  # in place: no temporaries of millions of rows beyond the key itself
            key = g.astype(np.int64, copy=True)
            key -= g_lo
            key *= span
            key += t
            key -= t_lo
            out.append(key)
        return out
    # Times too far apart for one key: their ranks keep the order in a small range.
    _, ranks = np.unique(np.concatenate([t for _, t in pairs]), return_inverse=True)
    span = int(ranks.max()) + 1
    out, at = [], 0
    for g, t in pairs:
        out.append((g - g_lo) * span + ranks[at:at + len(t)].astype(np.int64))
        at += len(t)
    return out


def blocks(start, end, group=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of the intervals as disjoint blocks: (group, start, end), sorted by group then start.

    Intervals sorted by (group, start); one opens a block when it starts after every earlier end of its
    group (a running max; the keys keep groups apart, so it never carries across groups). Touching
    intervals merge; empty ones (end <= start) cover nothing.
    """
    s, e = _i64(start), _i64(end)
    g = np.zeros(len(s), np.int64) if group is None else _i64(group)
    keep = e > s
    if not keep.all():  # (copies of millions of rows only where some interval is empty)
        s, e, g = s[keep], e[keep], g[keep]
    del keep
    if len(s) == 0:
        return g, s, e
    ks, ke = _keys((g, s), (g, e))
    if not np.all(ks[1:] >= ks[:-1]):  # intervals given in (group, start) order need no sort
        order = np.argsort(ks, kind="stable")
        s, e, g, ks, ke = s[order], e[order], g[order], ks[order], ke[order]
    opens = np.ones(len(s), bool)
    opens[1:] = ks[1:] > np.maximum.accumulate(ke, out=ke)[:-1]  # in place: ke is not read again
    del ks, ke
    first = np.flatnonzero(opens)
    return g[first], s[first], np.maximum.reduceat(e, first)


def union_length(start, end, group, n_groups: int) -> np.ndarray:
    """Time covered per group code 0..n_groups-1 by the union of its intervals (int64); a negative code
    (no group) counts nowhere."""
    bg, bs, be = blocks(start, end, group)
    out = np.zeros(n_groups, np.int64)
    keep = bg >= 0
    bg, length = bg[keep], (be - bs)[keep]
    if len(bg):  # blocks come sorted by group: sum each group's run
        first = np.flatnonzero(np.concatenate([[True], bg[1:] != bg[:-1]]))
        out[bg[first]] = np.add.reduceat(length, first)
    return out


def covered(query_start, query_end, query_group, start, end, group) -> np.ndarray:
    """Per query interval: how much of it the union of the [start, end) intervals of its group covers."""
    qs, qe, qg = _i64(query_start), _i64(query_end), _i64(query_group)
    if len(qs) == 0:
        return np.zeros(0, np.int64)
    bg, bs, be = blocks(start, end, group)
    if len(bg) == 0:
        return np.zeros(len(qs), np.int64)
    qe = np.maximum(qe, qs)
    kb, kqs, kqe = _keys((bg, bs), (qg, qs), (qg, qe))
    length = be - bs
    before = np.concatenate([[0], np.cumsum(length)])  # covered time of all blocks before block j

    def covered_until(t, key):
        # Covered time up to t, counting every block of lower groups: that offset cancels in the difference.
        k = np.searchsorted(kb, key, side="right")  # blocks starting at or before t (lexicographically)
        j = np.maximum(k - 1, 0)
        same = (k > 0) & (bg[j] == qg)
        return np.where(same, before[j] + np.clip(t - bs[j], 0, length[j]), before[k])

    return covered_until(qe, kqe) - covered_until(qs, kqs)


def ordered(group, time) -> bool:
    """Whether the (group, time) pairs are in lexicographic order (a capture's events, per device by start)."""
    g, t = _i64(group), _i64(time)
    return bool(np.all((g[1:] > g[:-1]) | ((g[1:] == g[:-1]) & (t[1:] >= t[:-1]))))


def _first_at_least(t, lo, hi, x) -> np.ndarray:
    """Per query: the first index in [lo, hi) with t >= x, else hi (t ascending within each range). A binary
    search run on every query at once: log2(len(t)) steps over the queries, never a pass over t."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        below = active & (t[np.minimum(mid, len(t) - 1)] < x)
        lo = np.where(below, mid + 1, lo)
        hi = np.where(active & ~below, mid, hi)


def _locate_ordered(t, tg, ws, we, wg) -> np.ndarray:
    """:func:`locate` for points in (group, time) order: each window holds a run of consecutive points, found
    by searching the points for the windows' ends (few windows); no key, sort or search per point."""
    order = np.lexsort((ws, wg))  # stable: of windows starting together, the later one wins, as in locate
    ws, we, wg = ws[order], we[order], wg[order]
    group_lo = np.searchsorted(tg, wg, side="left")
    group_hi = np.searchsorted(tg, wg, side="right")
    first = _first_at_least(t, group_lo, group_hi, ws)  # first point of the window's group at or after its start
    # Its run ends at the next window's first point, the group's end or the window's end, whichever is first.
    run_end = np.minimum(np.append(first[1:], len(t)), group_hi)
    last = _first_at_least(t, first, run_end, we)
    gap = np.append(first[1:], len(t)) - last  # points after the window's run, before the next window's
    # One repeat writes every point's answer: the points before the first window, then per window its run and gap.
    values = np.append(-1, np.stack([order, np.full(len(order), -1, np.int64)], axis=1).reshape(-1))
    lengths = np.append(first[0], np.stack([last - first, gap], axis=1).reshape(-1))
    return np.repeat(values, lengths)


def locate(point, point_group, window_start, window_end, window_group) -> np.ndarray:
    """Per point: the index of the window of its group with start <= point < end (-1 if none).

    Windows of a group should not overlap; if they do, the one that starts last at or before the point wins.
    Points already in (group, time) order (a capture's events) need no sort.
    """
    t, tg = _i64(point), _i64(point_group)
    ws, we, wg = _i64(window_start), _i64(window_end), _i64(window_group)
    if len(ws) == 0 or len(t) == 0:
        return np.full(len(t), -1, np.int64)
    if ordered(tg, t):
        return _locate_ordered(t, tg, ws, we, wg)
    kw, kt = _keys((wg, ws), (tg, t))
    order = np.argsort(kw, kind="stable")
    k = np.searchsorted(kw[order], kt, side="right")
    j = order[np.maximum(k - 1, 0)]
    inside = (k > 0) & (wg[j] == tg) & (t < we[j])
    return np.where(inside, j, -1)


def first_at_or_after(query, query_group, point, point_group) -> np.ndarray:
    """Per query: the index of the earliest point of its group at or after it (-1 if none)."""
    q, qg = _i64(query), _i64(query_group)
    p, pg = _i64(point), _i64(point_group)
    if len(p) == 0 or len(q) == 0:
        return np.full(len(q), -1, np.int64)
    kp, kq = _keys((pg, p), (qg, q))
    order = np.argsort(kp, kind="stable")
    k = np.searchsorted(kp[order], kq, side="left")  # points strictly before
    j = order[np.minimum(k, len(p) - 1)]
    found = (k < len(p)) & (pg[j] == qg)
    return np.where(found, j, -1)


def group_median(group, value, n_groups: int) -> np.ndarray:
    """Median of the int64 values of each group code 0..n_groups-1 (NaN where a group has none; a negative
    code counts nowhere), as pandas computes it: the mean of the two middle values of an even count."""
    g, v = _i64(group), _i64(value)
    keep = g >= 0
    g, v = g[keep], v[keep]
    out = np.full(n_groups, np.nan)
    if len(v) == 0:
        return out
    low = int(v.min())
    bits = max(int(v.max()) - low, 1).bit_length()
    if n_groups < 2 ** (62 - bits):  # one sort on a single key: group in the high bits, value in the low
        key = np.sort((g << np.int64(bits)) | (v - low))
        v = (key & np.int64((1 << bits) - 1)) + low
    else:
        v = v[np.lexsort((v, g))]
    count = np.bincount(g, minlength=n_groups)
    first = np.cumsum(count) - count
    has = count > 0
    lo = v[(first + (count - 1) // 2)[has]].astype(np.float64)
    hi = v[(first + count // 2)[has]].astype(np.float64)
    out[has] = (lo + hi) / 2
    return out
