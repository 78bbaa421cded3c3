"""Values no real capture holds, dropped where parsed tables become the analysis' input.

The parser decodes what the bytes say; a damaged or doctored file can say that an op ran for 2^63-1 ps,
for a negative time, or did more FLOPs than a hundred of the fastest chips could. Such values would
flow into every number of the report, so they are dropped here, each kind counted in one warning line:

- event starts far outside the capture window and durations that are negative or longer than twice
  the capture span (its stated window or its events' extent, at least 1 s) (events are dropped);
- per-op flops and bytes that imply a rate above ``_PEAK_MARGIN`` times the fastest chip in the catalog
  over the op's measured duration (the number is dropped, the op stays);
- program executions and steps (``XLA Modules``, ``Steps`` lines) of zero length (events are dropped);
- host files whose planes are byte-identical to another host's (counted once), plus what the parser
  already left out (duplicated planes and lines, oversize names, starts past the int64 range).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace

import numpy as np
import pandas as pd

from ...parsers.xplane import XSpaceTables
from ..chips.catalog import load_catalog
from .event_runs import every_event
from .intervals import group_median
from .planes import on_lines

_PEAK_MARGIN = 100.0
_PS_PER_S = 1e12
# The shortest span a capture is taken to cover: tiny or single-event captures without a stated window
# (older captures have no Task Environment plane) keep events of up to twice this.
_MIN_SPAN_PS = 10**12
# Lines whose events are program executions or steps (TPU device planes): each must last some time.
_EXECUTION_LINES = ("XLA Modules", "Steps")
_MIN_OP_PS = 1_000  # shorter measured durations are clock granularity: rates use at least 1 ns
# Async starts and dones move bytes while other ops run: their own durations bound no rate.
_ASYNC_OP = r"-start|-done|^send|^recv|^async"

_MESSAGES = {
    "duplicate_hosts": "{n} host file(s) repeat another host's planes byte for byte; each counted once",
    "duplicate_planes": "{n} plane(s) repeat an earlier plane of the same file (a file concatenated with "
                        "itself?); each counted once",
    "oversize_names": "{n} plane or host name(s) longer than 64 KiB ignored (a damaged file?)",
    "cut_names": "{n} op name(s) longer than 1 MiB cut there (a damaged file?)",
    "unrepresentable_starts": "{n} event(s) dropped: their start is past the 64-bit picosecond range",
    "duplicate_lines": "{n} line(s) repeat another line of the same plane event for event; each counted once",
    "empty_executions": "{n} program execution(s) or step(s) dropped: zero or negative length",
    "far_starts": "{n} event(s) dropped: they start far outside the capture window",
    "impossible_durations": "{n} event(s) dropped: negative duration or longer than twice the capture span",
    "implausible_flops": "{n} op(s) lose their trace FLOPs: the value implies more than "
                         f"{_PEAK_MARGIN:.0f}x the fastest chip's peak",
    "implausible_bytes": "{n} op(s) lose their trace byte counts: the value implies more than "
                         f"{_PEAK_MARGIN:.0f}x the fastest chip's memory bandwidth",
}


def checked_spaces(spaces: list[XSpaceTables]) -> tuple[list[XSpaceTables], list[str]]:
    """The spaces without duplicated hosts and impossible values, and one warning line per kind."""
    counts: Counter = Counter()
    unique, seen = [], set()
    for space in spaces:
        if space.fingerprint and space.fingerprint in seen:
            counts["duplicate_hosts"] += 1
            continue
        seen.add(space.fingerprint)
        space, found = checked_space(space)
        counts.update(found)
        unique.append(space)
    return unique, check_warnings(counts)


def checked_space(space: XSpaceTables) -> tuple[XSpaceTables, Counter]:
    """One host's space without impossible values, and what was dropped (the parser's anomalies included),
    by kind: a worker checks its host, the merge adds the counts up (:func:`check_warnings`)."""
    counts: Counter = Counter(space.anomalies)
    space, found = _checked_space(space)
    counts.update(found)
    return space, counts


def check_warnings(counts: Counter) -> list[str]:
    """One warning line per kind with a count, in the order the kinds were first counted."""
    return [f"capture: {_MESSAGES[kind].format(n=n)}" for kind, n in counts.items() if n]


def _window_ps(space: XSpaceTables) -> int:
    """The profiling window the capture states (``Task Environment`` plane), 0 when it states none."""
    for stats in space.plane_stats:
        start, stop = stats.get("profile_start_time"), stats.get("profile_stop_time")
        if isinstance(start, int) and isinstance(stop, int) and 0 < stop - start < 2**63 // 1000:
            return (stop - start) * 1000
    return 0


def _checked_space(space: XSpaceTables) -> tuple[XSpaceTables, Counter]:
    found: Counter = Counter()
    ev = space.events
    if ev.empty:
        return space, found
    start = ev["start_ps"].to_numpy()
    window = _window_ps(space)
    low, high = np.quantile(start, [0.05, 0.95])
    reach = max(window, high - low, _MIN_SPAN_PS)
    far = (start < low - 2 * reach) | (start > high + 2 * reach)
    near = start[~far] if far.any() else start
    extent = int(near.max()) - int(near.min()) if near.size else 0
    longest = 2 * max(window, extent, _MIN_SPAN_PS)
    dur, span = ev["duration_ps"].to_numpy(), ev["span_ps"].to_numpy()
    bad = ~far & ((dur < 0) | (span < 0) | (dur > longest) | (span > longest))
    # A program execution or a step holds ops: one of no length is damage, and a step window of none.
    empty = ~far & ~bad & (span <= 0) & _on_lines(space, _EXECUTION_LINES)
    found["far_starts"], found["impossible_durations"] = int(far.sum()), int(bad.sum())
    found["empty_executions"] = int(empty.sum())
    if far.any() or bad.any() or empty.any():
        space = _keep_events(space, ~(far | bad | empty))
    meta, flops_dropped, bytes_dropped = _plausible_costs(space, max(extent, window, _MIN_SPAN_PS))
    found["implausible_flops"], found["implausible_bytes"] = flops_dropped, bytes_dropped
    if flops_dropped or bytes_dropped:
        space = replace(space, event_metadata=meta)
    return space, found


def _on_lines(space: XSpaceTables, names: tuple[str, ...]) -> np.ndarray:
    """Per event: whether its line is called one of ``names``."""
    lines = space.lines
    return on_lines(space.events["line"].to_numpy(), lines.loc[lines["name"].isin(names), "line"])


def _keep_events(space: XSpaceTables, keep: np.ndarray) -> XSpaceTables:
    """The space with only the events ``keep`` marks; per-event stats follow their events."""
    new_row = np.cumsum(keep) - 1
    stats = space.event_stats
    stats = stats[keep[stats["event"].to_numpy()]].copy()
    stats["event"] = new_row[stats["event"].to_numpy()]
    return replace(space, events=space.events[keep].reset_index(drop=True), event_stats=stats.reset_index(drop=True))


@functools.lru_cache(maxsize=1)  # once per process: a worker checks many hosts against the same catalog
def _fastest() -> tuple[float, float]:
    """(FLOP/s, bytes/s): the highest peak and memory bandwidth of any chip in the catalog."""
    chips = load_catalog().values()
    flops = max(float(getattr(c, f) or 0) for c in chips for f in
                ("peak_bf16_flops_per_s", "peak_f32_flops_per_s", "peak_fp8_flops_per_s", "peak_int8_flops_per_s"))
    return flops, max(float(c.hbm_bytes_per_s or 0) for c in chips)


def _op_seconds(row: np.ndarray, duration_ps: np.ndarray, n_ops: int, capture_ps: int, suspect) -> np.ndarray:
    """Per metadata row: its events' median duration in seconds (the capture's when it has none), at least
    ``_MIN_OP_PS``. The median of every op costs a sort of all events: first each op's shortest event, a lower
    bound, then the median of only the ops whose costs that bound cannot clear (``suspect(seconds)``)."""
    keep = row >= 0
    if not keep.all():
        row, duration_ps = row[keep], duration_ps[keep]
    shortest = np.full(n_ops, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(shortest, row, duration_ps)
    measured = np.bincount(row, minlength=n_ops) > 0
    seconds = np.maximum(np.where(measured, shortest, capture_ps), _MIN_OP_PS) / _PS_PER_S
    check = suspect(seconds) & measured
    if check.any():
        chosen = check[row]
        typical = group_median(row[chosen], duration_ps[chosen], n_ops)
        seconds[check] = np.maximum(typical[check], _MIN_OP_PS) / _PS_PER_S
    return seconds


def _over(meta: pd.DataFrame, duration_s: np.ndarray, capture_ps: int, is_async: np.ndarray) -> dict:
    """Per kind (flops, bytes): (its columns, which metadata rows hold an impossible value in one of them)."""
    flops_peak, bytes_peak = _fastest()
    out = {}
    for kind, columns, peak, exempt in (("flops", ("flops", "model_flops"), flops_peak, False),
                                        ("bytes", ("bytes_accessed", "raw_bytes_accessed", "hbm_bytes"),
                                         bytes_peak, True)):
        bad = np.zeros(len(meta), bool)
        for column in columns:
            values = meta[column].to_numpy(dtype=float)
            over = (values < 0) | (values > _PEAK_MARGIN * peak * duration_s)
            if exempt:  # an async op's own duration bounds nothing; the whole capture still does
                over &= ~is_async | (values > _PEAK_MARGIN * peak * capture_ps / _PS_PER_S)
            bad |= over
        out[kind] = (columns, bad)
    return out


def _plausible_costs(space: XSpaceTables, capture_ps: int) -> tuple[pd.DataFrame, int, int]:
    """Event metadata with impossible flops/bytes set to NaN, and how many ops lost each."""
    meta = space.event_metadata
    if meta.empty:
        return meta, 0, 0
    ev = space.events
    row = every_event(space).metadata_rows(meta, ev["metadata_id"].to_numpy())
    text = meta["display_name"].fillna("").astype(str) + " " + meta["hlo_category"].fillna("").astype(str)
    is_async = text.str.contains(_ASYNC_OP, regex=True).to_numpy()
    # Ops never measured are held to the whole capture: no op does more than the capture could.
    duration_s = _op_seconds(row, ev["duration_ps"].to_numpy(np.int64), len(meta), capture_ps,
                             lambda seconds: _any_over(_over(meta, seconds, capture_ps, is_async)))
    over = _over(meta, duration_s, capture_ps, is_async)
    if not _any_over(over).any():
        return meta, 0, 0
    meta = meta.copy()
    for columns, bad in over.values():
        for column in columns:
            meta.loc[bad, column] = np.nan
    return meta, int(over["flops"][1].sum()), int(over["bytes"][1].sum())


def _any_over(over: dict) -> np.ndarray:
    return over["flops"][1] | over["bytes"][1]
