"""Reading xplane planes into tables: device planes, their stats, events joined with their stats.

Shared by the per-platform op extraction of :mod:`.capture` (TPU) and :mod:`.gpu_cpu_ops` (GPU, CPU).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..parsers.xplane import XSpaceTables

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
        devices[column] = [extract(st) for st in stats]
    devices["plane_stats"] = stats
    return devices


def scaled_peak(value, factor: float) -> float:
    """A plane stat's peak times ``factor``; NaN when absent, not a number or not positive."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return np.nan
    return value * factor if value > 0 else np.nan


def events_with_stats(space: XSpaceTables, plane_rows, line_name_or_pred, columns) -> pd.DataFrame:
    """Events of some lines with the given per-event stat columns joined (NaN where absent)."""
    pred = line_name_or_pred if callable(line_name_or_pred) else (lambda n: n == line_name_or_pred)
    lines = space.lines[space.lines["plane"].isin(plane_rows) & pred(space.lines["name"])]
    mask = space.events["line"].isin(lines["line"])
    ev = space.events[mask]
    ev = ev.join(space.event_stats.set_index("event")[list(columns)], how="left")
    names = lines.set_index("line")["name"]
    ev = ev.assign(line_name=ev["line"].map(names))
    return ev
