"""What the HTML report's pictures plot, read from the analysis: the roofline's op points and the
timeline of one representative step per device (drawn by :mod:`.svg`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyzer.steps.occurrences import in_device_steps, representative_steps
from .trace_links import analysis_thread_labels

MAX_TIMELINE_DEVICES = 16
MAX_LINES_PER_DEVICE = 4


def roofline_points(analysis) -> tuple[pd.DataFrame, str]:
    """Ops to place on the roofline (in-step, FLOPs > 0, bytes > 0) and a note on what was left out."""
    ops = analysis.ops
    if ops.empty:
        return pd.DataFrame(), "no ops"
    in_step = ops["in_step"].astype(bool)
    flops = pd.to_numeric(ops["flops"], errors="coerce")
    if analysis.measured:
        per_occ = pd.to_numeric(ops["mean_s"], errors="coerce")
        weight = pd.to_numeric(ops["measured_s_per_step"], errors="coerce")
    else:
        per_occ = pd.to_numeric(ops["predicted_s"], errors="coerce")
        weight = pd.to_numeric(ops["predicted_s_per_step"], errors="coerce")
    achieved = flops / per_occ.where(per_occ > 0)
    intensity = pd.to_numeric(ops["arithmetic_intensity"], errors="coerce")
    ok = in_step & (flops > 0) & (intensity > 0) & achieved.notna() & np.isfinite(achieved)
    points = pd.DataFrame(
        {
            "label": ops["op_name"].astype(str),
            "intensity": intensity,
            "achieved_flops_per_s": achieved,
            "weight_s": weight,
            "bound_by": ops["bound_by"].astype(str),
        }
    )[ok]
    left_out = int(in_step.sum() - ok.sum())
    if ok.sum() == 0:
        note = ("no FLOPs or bytes for any op (no HLO dump): pass --hlo-dir"
                if flops.notna().sum() == 0 else "no op with FLOPs > 0 and bytes > 0 to place")
    else:
        note = (f"{int(ok.sum())} ops shown; "
                f"{left_out} with no FLOPs (copies, collectives, waits) or unknown costs left out")
    return points, note


def representative_step_events(analysis, max_devices: int = MAX_TIMELINE_DEVICES):
    """Op events of the median-duration measured step of each device, times from that step's start.

    Returns (events, lanes, span_s, note); events is empty when nothing was measured.
    """
    steps = analysis.steps
    so = analysis.step_ops
    if steps is None or so is None or so.empty:
        return pd.DataFrame(), [], float("nan"), "no trace: nothing measured to draw"
    chosen = representative_steps(steps).merge(steps.after_warmup, on=["device", "step"])
    devices = sorted(chosen["device"].unique())
    note = "median step of each device"
    if len(devices) > max_devices:
        note += f"; first {max_devices} of {len(devices)} devices shown"
        devices = devices[:max_devices]
    chosen = chosen[chosen["device"].isin(devices)][["device", "step", "start_ps", "duration_ps"]]
    # The chosen device-steps' events first (one integer key), so the merge sees thousands of rows, not millions.
    so = so[in_device_steps(so, chosen)]
    ev = so.merge(chosen.rename(columns={"start_ps": "step_start_ps", "duration_ps": "step_ps"}), on=["device", "step"])
    ops = analysis.ops
    time_class = ops.loc[ops["op_id"] >= 0].drop_duplicates("op_id").set_index("op_id")["time_class"]
    ev = ev.assign(time_class=ev["op_id"].map(time_class))
    ev["time_class"] = ev["time_class"].fillna("other")
    ev = ev.sort_values(["device", "start_ps"], kind="stable").reset_index(drop=True)
    line = ev["line"].fillna("").astype(str)
    threads = analysis_thread_labels(analysis)  # 'CPU thread 2 (tf_XLAEigen)' for a thread id
    line = line.map(lambda s: threads.get(s, s)) if threads else line
    # Streams/threads of a device get their own lane only when its ops overlap in time (GPU
    # streams), so concurrent ops do not hide each other; sequential threads share one lane.
    # Geometry uses the event's extent on the timeline (span_ps); duration_ps is what the op cost.
    extent = ev["span_ps"]
    end = ev["start_ps"] + extent
    prev_end = end.groupby(ev["device"]).cummax().groupby(ev["device"]).shift()
    overlaps = (ev["start_ps"] < prev_end).groupby(ev["device"]).transform("any")
    split = overlaps & (line.groupby(ev["device"]).transform("nunique") > 1)
    rank = line.groupby(ev["device"]).rank(method="dense").astype(int)
    lane_line = line.where(rank <= MAX_LINES_PER_DEVICE, "other lines")
    device_lane = "device " + ev["device"].astype(str)
    ev["lane"] = device_lane.where(~split, device_lane + " · " + lane_line)
    ev["start_s"] = (ev["start_ps"] - ev["step_start_ps"]) / 1e12
    ev["duration_s"] = extent / 1e12
    ev["label"] = ev["op_name"].astype(str)
    lanes_frame = ev[["device", "lane"]].drop_duplicates().sort_values(["device", "lane"])
    span_s = float(chosen["duration_ps"].max() / 1e12)
    events = ev[["lane", "start_s", "duration_s", "time_class", "label"]].sort_values(["lane", "start_s"])
    return events.reset_index(drop=True), list(lanes_frame["lane"]), span_s, note
