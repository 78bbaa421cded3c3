"""The events of some lines as stretches of consecutive rows, instead of one row number per event.

The decoder writes each line's events together, so the events of the lines a table wants (a TPU plane's
``XLA Ops``: most of a capture's millions of events) are a few stretches of rows: their columns are
copied slice by slice, and what an event's line says (its plane, its device) is filled in per stretch,
with no per-event row numbers, plane lookups or 64-bit keys. Events whose lines interleave (no decoder
writes them, but a table may) fall back to row numbers; both give the same values in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...parsers.xplane import XSpaceTables
from .planes import metadata_rows, on_lines

# More stretches than this: the per-stretch loop would cost more than row numbers.
_MAX_RUNS = 4096


@dataclass(frozen=True)
class EventRuns:
    """Events of some lines, in table order: stretches ``(line, start, stop)`` of rows, or ``rows``;
    ``line_plane``: the plane of each line id."""

    runs: tuple[tuple[int, int, int], ...] | None
    rows: np.ndarray | None
    event_line: np.ndarray  # the line of every event of the table
    line_plane: dict

    def __len__(self) -> int:
        if self.runs is None:
            return len(self.rows)
        return sum(stop - start for _, start, stop in self.runs)

    def take(self, values: np.ndarray) -> np.ndarray:
        """The selected events' values of a per-event column (a new array)."""
        if self.runs is None:
            return values[self.rows]
        if not self.runs:
            return values[:0].copy()
        return np.concatenate([values[start:stop] for _, start, stop in self.runs])

    def row_numbers(self) -> pd.Index:
        """The selected events' rows in the table (an index, as a boolean selection of the table gives)."""
        if self.runs is None:
            return pd.Index(self.rows, dtype=np.int64)
        if not self.runs:
            return pd.Index(np.zeros(0, np.int64))
        return pd.Index(np.concatenate([np.arange(start, stop) for _, start, stop in self.runs]))

    def by_plane(self, values: np.ndarray) -> np.ndarray:
        """Per selected event, ``values[its plane]``."""
        if self.runs is None:
            planes = pd.Series(self.line_plane, dtype=np.int64).reindex(self.event_line[self.rows])
            return values[planes.to_numpy(np.int64)]
        lengths = [stop - start for _, start, stop in self.runs]
        return np.repeat(values[[self.line_plane[line] for line, _, _ in self.runs]], lengths)

    def metadata_rows(self, meta: pd.DataFrame, metadata_id: np.ndarray) -> np.ndarray:
        """Per selected event, the position of its (plane, metadata_id) row in ``meta`` (-1 where none): as
        ``planes.metadata_rows``, with one small lookup table per plane and no per-event key."""
        if self.runs is None:
            return metadata_rows(meta, self.by_plane(np.arange(max(self.line_plane.values(), default=0) + 1)),
                                 metadata_id[self.rows])
        out = np.empty(len(self), np.int64)
        m_plane, m_id = meta["plane"].to_numpy(np.int64), meta["metadata_id"].to_numpy(np.int64)
        lookups: dict[int, _IdLookup] = {}
        at = 0
        for line, start, stop in self.runs:
            plane = self.line_plane[line]
            if plane not in lookups:
                of_plane = np.flatnonzero(m_plane == plane)
                lookups[plane] = _IdLookup(m_id[of_plane], of_plane)
            out[at: at + stop - start] = lookups[plane](metadata_id[start:stop])
            at += stop - start
        return out


class _IdLookup:
    """Row of each metadata id of one plane: a dense table over the ids' range, else a sorted search."""

    def __init__(self, ids: np.ndarray, rows: np.ndarray):
        ids, rows = (ids, rows) if len(ids) else (np.array([-1], np.int64), np.array([-1], np.int64))
        self.lo, self.hi = int(ids.min()), int(ids.max())
        self.width = self.hi - self.lo + 1
        self.dense = self.width <= max(8 * len(ids), 1 << 16)
        if self.dense:
            self.table = np.full(self.width + 1, -1, np.int64)  # the last entry: ids out of range
            self.table[ids - self.lo] = rows
        else:
            order = np.argsort(ids, kind="stable")
            self.ids, self.rows = ids[order], rows[order]

    def __call__(self, wanted: np.ndarray) -> np.ndarray:
        if self.dense:
            index = wanted - self.lo
            outside = (wanted < self.lo) | (wanted > self.hi)
            if outside.any():
                index[outside] = self.width
            return self.table[index]
        # The last row of an id, as the dense table (a plane's metadata is a map: ids do not repeat).
        at = np.maximum(np.searchsorted(self.ids, wanted, side="right") - 1, 0)
        return np.where(self.ids[at] == wanted, self.rows[at], -1)


def select_lines(space: XSpaceTables, ids) -> EventRuns:
    """The events of ``space`` whose line is one of ``ids``, as stretches of rows when the lines come in few."""
    line_plane = dict(zip(space.lines["line"].tolist(), space.lines["plane"].tolist()))
    return _stretches(space.events["line"].to_numpy(), np.asarray(ids, np.int64), line_plane)


def every_event(space: XSpaceTables) -> EventRuns:
    """Every event of ``space``, as stretches of one plane (its ``line`` here: the plane itself)."""
    plane = space.events["plane"].to_numpy()
    return _stretches(plane, None, {})


def _stretches(event_key: np.ndarray, ids: np.ndarray | None, line_plane: dict) -> EventRuns:
    """Stretches of the events whose key is one of ``ids`` (None: every event; its key is its plane)."""
    n = len(event_key)
    if n == 0 or (ids is not None and len(ids) == 0):
        return EventRuns((), None, event_key, line_plane)
    cuts = np.flatnonzero(event_key[1:] != event_key[:-1]) + 1
    if ids is None:
        line_plane.update((p, p) for p in np.unique(event_key[np.append(0, cuts)]).tolist())
    if len(cuts) >= _MAX_RUNS:
        every = np.arange(n) if ids is None else np.flatnonzero(on_lines(event_key, ids))
        return EventRuns(None, every, event_key, line_plane)
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [n]])
    keep = np.ones(len(starts), bool) if ids is None else on_lines(event_key[starts], ids)
    runs = zip(event_key[starts][keep].tolist(), starts[keep].tolist(), stops[keep].tolist())
    return EventRuns(tuple(runs), None, event_key, line_plane)
