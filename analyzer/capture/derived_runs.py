"""Program executions where the capture records none (GPU, CPU), derived from the op events.

CPU op events carry the execution's ``run_id``. Without it (GPU kernels), a run of a program starts each
time the program's first op (in time order on the device) appears again: every op of a program runs once
per execution, so the count of that first op numbers the executions. Computed on integer codes of the
name columns (a million kernel events): one sort, no per-event strings compared or grouped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .planes import MODULE_COLUMNS, empty_table


def derived_module_runs(events: pd.DataFrame) -> pd.DataFrame:
    """One row per (device, module, program_id, run): MODULE_COLUMNS, in that key's order."""
    events = events[events["module"] != ""]  # kernels of no program (driver copies) form no runs
    if events.empty:
        return empty_table(MODULE_COLUMNS)
    # A program is its id, not its name: one jitted function compiled for six shapes is six programs.
    events = events.assign(program_id=events["program_id"].astype(object).where(events["program_id"].notna(), ""))
    # (device, module, program_id, start) order, each name by its sorted code (as a stable multi-column sort).
    keys = [_sort_code(events[k]) for k in ("device", "module", "program_id")]
    order = np.lexsort((events["start_ps"].to_numpy(np.int64), *keys[::-1]))
    o = events.iloc[order]
    key = np.stack([k[order] for k in keys])
    new_group = np.ones(len(o), bool)
    new_group[1:] = (key[:, 1:] != key[:, :-1]).any(axis=0)
    group = np.cumsum(new_group) - 1
    if "run_id" in o and o["run_id"].notna().all():
        run = o["run_id"].to_numpy(np.int64)
    else:
        run = _first_op_counts(o["op_name"], new_group, group)
    start = o["start_ps"].to_numpy(np.int64)
    end = start + o["span_ps"].to_numpy(np.int64)
    by_run = np.lexsort((run, group))  # (group, run) order: the group-by's
    g, r = group[by_run], run[by_run]
    first = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (r[1:] != r[:-1])])
    rows = o.iloc[by_run[first]]
    # Key columns typed as a group-by's keys are (an index of the values: all-text object keys become text).
    runs = pd.DataFrame({k: pd.Index(rows[k].to_numpy()) for k in ("device", "module", "program_id")})
    runs["run_id"] = r[first]
    runs["start_ps"] = np.minimum.reduceat(start[by_run], first)
    runs["duration_ps"] = np.maximum.reduceat(end[by_run], first) - runs["start_ps"].to_numpy()
    return runs[MODULE_COLUMNS]


def _sort_code(values: pd.Series) -> np.ndarray:
    """Codes in the values' sorted order (missing ones last)."""
    codes, uniques = pd.factorize(values, sort=True)
    return np.where(codes < 0, len(uniques), codes)


def _first_op_counts(op_name: pd.Series, new_group: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Per event (grouped rows in time order), how many times its group's first op (its first named one) has
    started so far, this event included."""
    op, _ = pd.factorize(op_name)  # -1: no name, equal to nothing
    n = len(op)
    starts = np.flatnonzero(new_group)
    first_named = np.minimum.reduceat(np.where(op >= 0, np.arange(n), n), starts)
    first_op = np.where(first_named < n, op[np.minimum(first_named, n - 1)], -1)
    hits = ((op == first_op[group]) & (op >= 0)).astype(np.int64)
    count = np.cumsum(hits)
    return count - (count - hits)[starts][group]
