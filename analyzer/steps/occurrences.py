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


def in_device_steps(step_ops: pd.DataFrame, chosen: pd.DataFrame) -> np.ndarray:
    """Per event of ``step_ops``: whether its (device, step) is one of ``chosen``'s. One step per device (the
    representative steps): the device's step looked up in a table and compared, one gather per event, the keys
    read in their own type; else one integer key per pair, in a table when the keys are dense, else np.isin."""
    device, step = step_ops["device"].to_numpy(), step_ops["step"].to_numpy()
    want_device, want_step = chosen["device"].to_numpy(np.int64), chosen["step"].to_numpy(np.int64)
    if not len(device) or not len(want_device):
        return np.zeros(len(device), bool)
    top = int(max(device.max(), want_device.max())) + 1
    if min(int(device.min()), int(want_device.min())) >= 0 and top <= 4 * len(device) + (1 << 16) and \
            len(np.unique(want_device)) == len(want_device):
        step_of = np.full(top, np.iinfo(np.int64).min, np.int64)  # a device not chosen matches no step
        step_of[want_device] = want_step
        return step_of[device] == step
    device, step = device.astype(np.int64), step.astype(np.int64)
    width = int(max(step.max(), want_step.max())) + 1
    key = device * width + step
    wanted = want_device * width + want_step
    top = int(max(key.max(), wanted.max())) + 1
    if min(int(key.min()), int(wanted.min())) < 0 or top > 4 * len(key) + (1 << 16):
        return np.isin(key, wanted)
    table = np.zeros(top, bool)
    table[wanted] = True
    return table[key]


def representative_occurrences(step_ops: pd.DataFrame, steps: Steps | None) -> pd.DataFrame:
    """One row per op_id with an event in a representative step: ``op_id``, :data:`COLUMNS` and
    ``occurrence_line`` (the trace line). Vectorized: one lexsort over those events."""
    empty = pd.DataFrame({"op_id": pd.Series(dtype="int64"), **{c: pd.Series(dtype="int64") for c in COLUMNS},
                          "occurrence_line": pd.Series(dtype="object")})
    if steps is None or step_ops is None or step_ops.empty:
        return empty
    rep = representative_steps(steps)
    chosen = in_device_steps(step_ops, rep)
    chosen &= step_ops["op_id"].to_numpy() >= 0
    if not chosen.any():
        return empty
    # Only the columns read, and no copy of them where every event is in a representative step (hosts reduced
    # where read keep only those): a run of many hosts holds its representative events once.
    rows = None if chosen.all() else np.flatnonzero(chosen)

    def col(name: str) -> np.ndarray:  # in the column's own integer type: no int64 copy of the keys
        values = step_ops[name].to_numpy()
        return values if rows is None else values[rows]

    op_id, device, start = col("op_id"), col("device"), col("start_ps")
    order = np.lexsort((start, device, col("duration_ps"), op_id))
    # op_id leads the sort: each op's events are one stretch of ``order``, located by its count (no second sort).
    count = np.bincount(op_id)
    ids = np.flatnonzero(count)
    first = np.cumsum(count)[ids] - count[ids]
    pick = order[first + (count[ids] - 1) // 2]  # the lower median of each op's durations
    at = pick if rows is None else rows[pick]  # the picked events' rows in step_ops
    return pd.DataFrame({
        "op_id": ids,
        "occurrence_device": device[pick].astype(np.int64),
        "occurrence_step": step_ops["step"].to_numpy()[at].astype(np.int64),
        "occurrence_start_ps": start[pick],
        "occurrence_end_ps": start[pick] + step_ops["span_ps"].to_numpy(np.int64)[at],
        "occurrence_line": step_ops["line"].iloc[at].astype(object).to_numpy(),
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
