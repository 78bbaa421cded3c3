"""The representative step of every device as a Chrome Trace Event file (Perfetto, chrome://tracing).

One step is exported: the measured step whose mean length over the devices is the median one, so the
timeline shows a typical step rather than the warm-up or an outlier. Per device (a trace "process"):
- each op event is a complete slice (``ph: X``) on its own trace line (a "thread"), with the op's roofline
  numbers in ``args`` (predicted time, bound, efficiency, FLOPs, bytes), its scope (the framework name path the
  report's ``scopes`` adds it up under, analyzer/scopes.py) and, for the ops a finding names, the finding's key
  and saving;
- asynchronous start -> done pairs (TPU collectives and copies) are flow arrows (``ph: s`` / ``ph: f``);
- a "step" line holds the step's slice and its idle gaps (no op running) longer than 1 % of the step.
Times are microseconds from the step's first event (the format's unit); names come from the profile and are
written as JSON strings, nothing else. The format: Google's "Trace Event Format" document (JSON Object Format,
complete events, flow events, metadata events).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..analyzer.scopes import scope_of

GAP_SHARE = 0.01  # idle gaps shorter than this share of the step stay unmarked: there are thousands
STEP_LINE = "step"


def representative_step(analysis) -> int | None:
    """The measured step number whose mean length over the devices is the median one."""
    steps = analysis.device_steps
    if steps is None or steps.empty:
        return None
    mean = steps.groupby("step")["duration_s"].mean().sort_values(kind="stable")
    return int(mean.index[(len(mean) - 1) // 2])


def _finding_tags(findings) -> dict[str, list[dict]]:
    tags: dict[str, list[dict]] = {}
    for f in findings:
        for op in f.ops:
            tags.setdefault(op.name, []).append({"finding": f.key, "rule": f.rule,
                                                 "saves_s_per_step": f.est_savings_s_per_step})
    return tags


def _op_args(ops: pd.DataFrame) -> dict[int, dict]:
    """Per op_id: the roofline numbers a slice carries (NaN left out: JSON has no NaN) and its scope."""
    cols = ["category", "predicted_s", "bound_by", "efficiency", "flops", "bytes_accessed"]  # tables.OPS
    scopes = {t: "/".join(scope_of(t)) for t in ops["tf_op"].unique()}
    out = {}
    for op_id, tf_op, row in zip(ops["op_id"].to_numpy(), ops["tf_op"], ops[cols].to_dict("records")):
        out[int(op_id)] = {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()
                           if not (isinstance(v, float) and np.isnan(v)) and v is not None}
        if scopes[tf_op]:
            out[int(op_id)]["scope"] = scopes[tf_op]
    return out


def _gaps(start: np.ndarray, end: np.ndarray, min_ps: float) -> list[tuple[int, int]]:
    """Idle stretches between the union of [start, end) intervals, longer than ``min_ps``."""
    if start.size < 2:
        return []
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    idle = s[1:] - e[:-1]
    keep = np.flatnonzero(idle > min_ps)
    return [(int(e[i]), int(s[i + 1])) for i in keep]


def trace_events(analysis, findings) -> dict:
    """The trace as a JSON-ready dict (``traceEvents`` plus what was exported in ``otherData``)."""
    step = representative_step(analysis)
    events = analysis.step_ops
    if step is None or events.empty:
        return {"traceEvents": [], "displayTimeUnit": "ms", "otherData": {"step": None}}
    events = events[events["step"] == step]
    t0 = int(events["start_ps"].min())
    args, tags = _op_args(analysis.ops), _finding_tags(findings)
    lines = {name: i + 1 for i, name in enumerate(sorted(map(str, events["line"].unique())))}
    out: list[dict] = []
    for device in sorted(int(d) for d in events["device"].unique()):
        out.append({"ph": "M", "name": "process_name", "pid": device, "tid": 0, "args": {"name": f"device {device}"}})
        out.append({"ph": "M", "name": "thread_name", "pid": device, "tid": 0, "args": {"name": STEP_LINE}})
    for line, tid in lines.items():
        for device in sorted(int(d) for d in events["device"].unique()):
            out.append({"ph": "M", "name": "thread_name", "pid": device, "tid": tid, "args": {"name": line}})
    out += _op_slices(events, t0, lines, args, tags)
    out += _step_slices(events, t0, step)
    out += _flows(analysis.async_spans, events, t0, lines)
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"tool": "xladiag", "step": step, "program": str(events["module"].iloc[0]),
                          "platform": analysis.platform, "chip": analysis.chip.name}}


def _op_slices(events, t0: int, lines: dict, args: dict, tags: dict) -> list[dict]:
    out = []
    cols = zip(events["device"].to_numpy(), events["op_name"].astype(str).to_numpy(),
               events["line"].astype(str).to_numpy(), events["start_ps"].to_numpy(),
               events["span_ps"].to_numpy(), events["op_id"].to_numpy())
    for device, name, line, start, span, op_id in cols:
        a = dict(args.get(int(op_id), {}))
        if name in tags:
            a["findings"] = tags[name]
        out.append({"ph": "X", "name": name, "cat": str(a.get("category", "op")), "pid": int(device),
                    "tid": lines[line], "ts": (int(start) - t0) / 1e6, "dur": max(int(span), 0) / 1e6, "args": a})
    return out


def _step_slices(events, t0: int, step: int) -> list[dict]:
    out = []
    for device, group in events.groupby("device", sort=True):
        start = group["start_ps"].to_numpy(np.int64)
        end = start + group["span_ps"].to_numpy(np.int64)
        first, last = int(start.min()), int(end.max())
        out.append({"ph": "X", "name": f"step {step}", "cat": "step", "pid": int(device), "tid": 0,
                    "ts": (first - t0) / 1e6, "dur": (last - first) / 1e6, "args": {"step": step}})
        for a, b in _gaps(start, end, GAP_SHARE * (last - first)):
            out.append({"ph": "X", "name": "idle", "cat": "idle", "pid": int(device), "tid": 0,
                        "ts": (a - t0) / 1e6, "dur": (b - a) / 1e6, "args": {"idle_s": (b - a) / 1e12}})
    return out


def _flows(spans: pd.DataFrame, events, t0: int, lines: dict) -> list[dict]:
    """An arrow from each async start to its done, where both are in the exported step."""
    if spans is None or spans.empty:
        return []
    where = {(int(d), str(n)): (int(s), lines[str(line)]) for d, n, s, line in zip(
        events["device"].to_numpy(), events["op_name"].astype(str).to_numpy(), events["start_ps"].to_numpy(),
        events["line"].astype(str).to_numpy())}
    out = []
    for i, (device, start_op, done_op, kind) in enumerate(zip(
            spans["device"].to_numpy(), spans["start_op"].astype(str), spans["done_op"].astype(str),
            spans["kind"].astype(str))):
        a, b = where.get((int(device), start_op)), where.get((int(device), done_op))
        if a is None or b is None or b[0] < a[0]:
            continue
        common = {"name": kind, "cat": "async", "id": i, "pid": int(device)}
        out.append({**common, "ph": "s", "tid": a[1], "ts": (a[0] - t0) / 1e6})
        out.append({**common, "ph": "f", "bp": "e", "tid": b[1], "ts": (b[0] - t0) / 1e6})
    return out


def render_trace(analysis, findings) -> str:
    return json.dumps(trace_events(analysis, findings), separators=(",", ":"), allow_nan=False)
