"""Reading xplane planes into tables: device planes, their stats, events joined with their stats.

Shared by the per-platform op extraction of :mod:`.capture` (TPU) and :mod:`.gpu_cpu_ops` (GPU, CPU).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...parsers.xplane import XSpaceTables
from ..chips.plausible import plausible

# Device planes, one per accelerator (xplane.md).
TPU_PLANE = re.compile(r"^/device:TPU:(\d+)$")
GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
# The capture's ``modules`` table: one row per program execution on a device.
MODULE_COLUMNS = ["device", "module", "program_id", "run_id", "start_ps", "duration_ps"]


def empty_table(columns) -> pd.DataFrame:
    """A table with these columns and no rows."""
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def line_ids(space: XSpaceTables, plane_rows, line_name: str) -> pd.Series:
    """Ids of the lines called ``line_name`` on these planes."""
    lines = space.lines
    return lines.loc[lines["plane"].isin(plane_rows) & (lines["name"] == line_name), "line"]


def device_planes(space: XSpaceTables, pattern: re.Pattern, device_base: int):
    """Device planes in index order, numbered from ``device_base`` (devices are global across hosts)."""
    planes = space.planes[space.planes["name"].str.match(pattern)].copy()
    planes["local_index"] = planes["name"].str.extract(pattern, expand=False).astype(int)
    planes = planes.sort_values("local_index")
    planes["device"] = device_base + np.arange(len(planes))
    return planes, dict(zip(planes["plane"], planes["device"]))


_TEXT_COLUMNS = ("device_type", "vendor")


def device_table(space: XSpaceTables, planes: pd.DataFrame, **from_stats) -> pd.DataFrame:
    """One row per device plane; each keyword maps the plane's stats to one column."""
    stats = [space.plane_stats[p] for p in planes["plane"]]
    devices = pd.DataFrame(
        {
            "device": planes["device"].to_numpy(),
            "host": space.hostname,
            "plane_name": planes["name"].to_numpy(),
            "local_index": planes["local_index"].to_numpy(),
        }
    )
    for column, extract in from_stats.items():
        values = [extract(st) for st in stats]
        if column in _TEXT_COLUMNS:  # a stat missing or of another type (a damaged file): unknown, as text
            values = [v if isinstance(v, str) else "" for v in values]
        devices[column] = values
    devices["plane_stats"] = stats
    return devices


def scaled_peak(value, factor: float, field: str) -> float:
    """A plane stat's peak times ``factor``; NaN when absent, not a number, or not a plausible value of the
    chip number ``field`` (chips/plausible.py)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return np.nan
    value = float(value) * factor if value > 0 else np.nan
    return value if plausible(field, value) else np.nan


def events_with_stats(space: XSpaceTables, plane_rows, line_name_or_pred, columns) -> pd.DataFrame:
    """Events of some lines with the given per-event stat columns joined (NaN where absent)."""
    pred = line_name_or_pred if callable(line_name_or_pred) else (lambda n: n == line_name_or_pred)
    lines = space.lines[space.lines["plane"].isin(plane_rows) & pred(space.lines["name"])]
    from .event_runs import select_lines  # (event_runs builds on this module)
    runs = select_lines(space, lines["line"])
    ev = pd.DataFrame({c: runs.take(space.events[c].to_numpy()) for c in space.events.columns},
                      index=runs.row_numbers(), copy=False)
    ev = ev.join(space.event_stats[["event", *columns]].set_index("event"), how="left")
    # Each event's line name as a categorical of the few line names (sorted), looked up per line.
    codes, names = pd.factorize(lines["name"], sort=True)
    at = pd.Index(lines["line"]).get_indexer(ev["line"])
    ev = ev.assign(line_name=pd.Categorical.from_codes(np.append(codes, -1)[at], categories=names))
    return ev


def metadata_rows(meta: pd.DataFrame, plane: np.ndarray, metadata_id: np.ndarray) -> np.ndarray:
    """Per event (plane, metadata_id): the position of its row in ``meta`` (-1 where it has none).

    One int64 key per metadata row, looked up (a dense table, else a sorted search) for every event: no
    per-event index or merge."""
    m_plane, m_id = meta["plane"].to_numpy(np.int64), meta["metadata_id"].to_numpy(np.int64)
    plane, metadata_id = np.asarray(plane, np.int64), np.asarray(metadata_id, np.int64)
    if len(meta) == 0 or len(plane) == 0:
        return np.full(len(plane), -1, np.int64)
    lo = min(int(m_id.min()), int(metadata_id.min()))
    width = max(int(m_id.max()), int(metadata_id.max())) - lo + 1
    top = max(int(m_plane.max()), int(plane.max())) + 1
    if width * top >= 2**62:  # ids spread past one key (damaged metadata): join on the pair
        position = pd.Series(np.arange(len(meta)), index=pd.MultiIndex.from_arrays([m_plane, m_id]))
        found = position.reindex(pd.MultiIndex.from_arrays([plane, metadata_id])).to_numpy()
        return np.where(np.isnan(found), -1, found).astype(np.int64)
    key = m_plane * width + (m_id - lo)
    if width * top <= max(4 * len(plane), 1 << 16):  # a dense table: one gather per event
        table = np.full(width * top, -1, np.int64)
        table[key] = np.arange(len(key))
        wanted = plane * width
        wanted += metadata_id
        wanted -= lo
        return table[wanted]
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    wanted = plane * width + (metadata_id - lo)
    at = np.minimum(np.searchsorted(sorted_key, wanted), len(key) - 1)
    return np.where(sorted_key[at] == wanted, order[at], -1)


def line_events(space: XSpaceTables, plane_rows, line_name: str) -> np.ndarray:
    """Rows in ``space.events`` of the events on the lines called ``line_name`` of these planes."""
    return np.flatnonzero(on_lines(space.events["line"].to_numpy(), line_ids(space, plane_rows, line_name)))


def on_lines(event_line: np.ndarray, ids) -> np.ndarray:
    """Per event: whether its line (a row of ``space.lines``) is one of ``ids``; a lookup table indexed by
    line, one gather per event instead of np.isin's pass per id."""
    ids = np.asarray(ids, np.int64)
    if len(event_line) == 0 or len(ids) == 0:
        return np.zeros(len(event_line), bool)
    low, high = int(event_line.min()), int(event_line.max())
    if low < 0 or high >= 1 << 24:  # not row numbers (a damaged table): the generic test
        return np.isin(event_line, ids)
    table = np.zeros(high + 1, bool)
    table[ids[(ids >= 0) & (ids <= high)]] = True
    return table[event_line]
