"""Where to look in the trace: one representative occurrence of each op, so a finding's ops can be found
in xprof's Trace Viewer or Perfetto.

The representative step of a device is its median-duration measured step (the one the HTML timeline
draws; a host reduced in a worker keeps exactly that step's events, :mod:`.host_reduce`). Among an op's
events in those steps (every device), its representative occurrence is the median-duration one, ties
broken by device then start: deterministic, and the same whether every step's events were kept or only
the representative steps'. Times are picoseconds on the capture's clock (the xplane line's
``timestamp_ns`` x 1000 + the event's ``offset_ps``), the event's extent on its timeline line.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .windows import Steps

NONE = -1  # an op without an occurrence in a representative step (other programs, no trace)
COLUMNS = ("occurrence_device", "occurrence_step", "occurrence_start_ps", "occurrence_end_ps")


def representative_steps(steps: Steps) -> pd.DataFrame:
    """(device, step) of the median-duration measured step of each device (the lower median; ties by step)."""
    m = steps.after_warmup.sort_values(["device", "duration_ps", "step"], kind="stable")
    m = m.assign(rank=m.groupby("device").cumcount(), n=m.groupby("device")["step"].transform("size"))
    return m.loc[m["rank"] == (m["n"] - 1) // 2, ["device", "step"]]


def _in_steps(step_ops: pd.DataFrame, rep: pd.DataFrame) -> np.ndarray:
    """Per event of ``step_ops``: whether its (device, step) is one of ``rep``'s: a lookup table over (device,
    step), no search per event."""
    device, step = step_ops["device"].to_numpy(np.int64), step_ops["step"].to_numpy(np.int64)
    width = int(max(step.max(), rep["step"].max() if len(rep) else 0)) + 1
    table = np.zeros((int(max(device.max(), rep["device"].max() if len(rep) else 0)) + 1) * width, bool)
    table[rep["device"].to_numpy(np.int64) * width + rep["step"].to_numpy(np.int64)] = True
    key = device * width
    key += step
    return table[key]


def representative_occurrences(step_ops: pd.DataFrame, steps: Steps | None) -> pd.DataFrame:
    """One row per op_id with an event in a representative step: ``op_id``, :data:`COLUMNS` and
    ``occurrence_line`` (the trace line). Vectorized: one lexsort over those events."""
    empty = pd.DataFrame({"op_id": pd.Series(dtype="int64"), **{c: pd.Series(dtype="int64") for c in COLUMNS},
                          "occurrence_line": pd.Series(dtype="object")})
    if steps is None or step_ops is None or step_ops.empty:
        return empty
    rep = representative_steps(steps)
    chosen = _in_steps(step_ops, rep)
    chosen &= step_ops["op_id"].to_numpy(np.int64) >= 0
    if not chosen.any():
        return empty
    ev = step_ops[chosen]
    op_id = ev["op_id"].to_numpy(np.int64)
    device = ev["device"].to_numpy(np.int64)
    start = ev["start_ps"].to_numpy(np.int64)
    order = np.lexsort((start, device, ev["duration_ps"].to_numpy(np.int64), op_id))
    ids, first, count = np.unique(op_id[order], return_index=True, return_counts=True)
    pick = order[first + (count - 1) // 2]  # the lower median of each op's durations
    extent = ev["span_ps"].to_numpy(np.int64)[pick]
    return pd.DataFrame({
        "op_id": ids,
        "occurrence_device": device[pick],
        "occurrence_step": ev["step"].to_numpy(np.int64)[pick],
        "occurrence_start_ps": start[pick],
        "occurrence_end_ps": start[pick] + extent,
        "occurrence_line": ev["line"].astype(object).to_numpy()[pick],
    })


def with_occurrences(op_table: pd.DataFrame, step_ops: pd.DataFrame, steps: Steps | None) -> pd.DataFrame:
    """``op_table`` with the occurrence columns (-1 and null where an op has none), joined by op_id."""
    occ = representative_occurrences(step_ops, steps).set_index("op_id")
    op_id = op_table["op_id"]
    out = op_table.copy()
    for c in COLUMNS:
        out[c] = op_id.map(occ[c]).fillna(NONE).astype("int64").to_numpy()
    out["occurrence_line"] = op_id.map(occ["occurrence_line"]).to_numpy()
    return out
