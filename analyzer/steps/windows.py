"""Training steps: the windows every per-step number is measured over.

In order of preference:
1. The user's step annotations (``StepTraceAnnotation`` on the host, every platform): a step is the
   annotation's span, host gaps (data loading, callbacks) included, and the device work it launched
   belongs to it even where the device runs it after the span (JAX dispatches asynchronously).
2. A ``Steps`` line (TPU captures that have one).
3. Executions of the dominant program (the one, by program id, with the most device time), which is
   what a ``jit_train_step`` looks like in the trace.
4. The whole capture.
The first step carries compilation and warm-up, so it is dropped whenever there is more than one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pandas as pd

from ..capture.build import Capture
from ..capture.intervals import blocks, locate, union_length
from .gather import take_frame

PS_PER_S = 1e12


@dataclass(frozen=True)
class Steps:
    table: pd.DataFrame  # device, step, start_ps, end_ps, duration_ps, is_warmup
    program: str  # the module whose executions are the steps ('' when from a Steps line)
    source: str  # how the steps were found, for the report
    warmup_excluded: bool
    # Per measured device-step (rows of ``after_warmup``): time some op runs, the union of the op events' spans
    # (concurrent streams and async ops count once). None until :func:`with_busy_time` has seen the events.
    busy_ps: np.ndarray | None = None
    program_id: str = ""  # the id of ``program`` ('' when the capture has none): names repeat, ids do not
    # Annotated steps: ops belong to the step whose span launched them (events' launch_ps), not the one
    # their device time falls in.
    by_launch: bool = False
    annotation: str = ""  # the annotation's name, as the user gave it ('' when not annotated)
    # Per measured step (the distinct values of after_warmup["step"], in order): time at least one device is
    # busy. With annotated steps, duration minus this is time every device waits for the host.
    busy_any_ps: np.ndarray | None = None
    # Steps that are a program's executions: its share of the capture's program device time, and every other
    # program as (name, id, share), most first (a small share means the "step" may not be the training step).
    program_share: float | None = None
    other_programs: tuple = ()
    # Hosts reduced where read (analyzer/hosts): step -> its events' first launch (a device op's start where
    # none is recorded), which the step events, then one step per device, no longer show. None: read them.
    first_launch: pd.Series | None = None

    def __repr__(self) -> str:
        return f"<Steps {self.count} measured of {self.mean_s:.6g} s mean ({self.source})>"

    @cached_property  # read dozens of times per host; never modified (a frozen table)
    def after_warmup(self) -> pd.DataFrame:
        """The steps analysis runs over (warm-up excluded)."""
        return self.table[~self.table["is_warmup"]]

    # The per-step distribution, one value per measured device-step (compare mode, stragglers).
    @property
    def duration_s(self) -> np.ndarray:
        return self.after_warmup["duration_ps"].to_numpy(np.float64) / PS_PER_S

    @property
    def busy_s(self) -> np.ndarray:
        busy = self.busy_ps if self.busy_ps is not None else np.full(len(self.after_warmup), np.nan)
        return busy.astype(np.float64) / PS_PER_S

    @property
    def idle_s(self) -> np.ndarray:
        return np.clip(self.duration_s - self.busy_s, 0.0, None)

    def device_steps(self) -> pd.DataFrame:
        """One row per measured (device, step): duration, busy and idle seconds (tables.DEVICE_STEPS)."""
        m = self.after_warmup
        return pd.DataFrame({"device": m["device"].to_numpy(), "step": m["step"].to_numpy(),
                             "duration_s": self.duration_s, "busy_s": self.busy_s, "idle_s": self.idle_s})

    @property
    def annotated(self) -> bool:
        """The steps are the user's annotations (their host gaps count)."""
        return self.by_launch

    def host_wait_s(self) -> pd.DataFrame:
        """Per measured step: ``step``, ``step_num``, ``duration_s`` (mean over devices), ``busy_any_s`` (time
        at least one device works on it) and ``all_idle_s`` (duration minus that, >= 0: no device busy)."""
        m = self.after_warmup
        per = m.groupby("step", sort=True).agg(step_num=("step_num", "first"), duration_ps=("duration_ps", "mean"))
        busy = self.busy_any_ps if self.busy_any_ps is not None else np.full(len(per), np.nan)
        duration = per["duration_ps"].to_numpy(np.float64) / PS_PER_S
        busy_s = np.asarray(busy, np.float64) / PS_PER_S
        return pd.DataFrame({"step": per.index.to_numpy(), "step_num": per["step_num"].to_numpy(),
                             "duration_s": duration, "busy_any_s": busy_s,
                             "all_idle_s": np.clip(duration - busy_s, 0.0, None)})

    @property
    def count(self) -> int:
        return int(self.after_warmup["step"].nunique())

    @property
    def mean_s(self) -> float:
        m = self.after_warmup
        if m.empty:
            return float("nan")
        # Mean over device-steps: devices may run their executions staggered in time, and
        # per-op "per step" numbers use the same denominator.
        return float(m["duration_ps"].mean() / PS_PER_S)


def _number(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.sort_values(["device", "start_ps"], kind="stable").copy()
    frame["step"] = frame.groupby("device").cumcount()
    frame["end_ps"] = frame["start_ps"] + frame["duration_ps"]
    if "step_num" not in frame:
        frame["step_num"] = frame["step"]
    n_steps = frame.groupby("device")["step"].transform("max") + 1
    frame["is_warmup"] = (frame["step"] == 0) & (n_steps > 1)
    columns = ["device", "step", "step_num", "start_ps", "end_ps", "duration_ps", "is_warmup"]
    return frame[columns].reset_index(drop=True)


def _annotated_steps(capture: Capture) -> Steps | None:
    ann = capture.step_annotations
    if ann.empty:
        return None
    frame = pd.DataFrame({"device": ann["device"].astype("int64"), "step_num": ann["step_num"].astype("int64"),
                          "start_ps": ann["start_ps"].astype("int64"),
                          "duration_ps": (ann["end_ps"] - ann["start_ps"]).astype("int64")})
    table = _number(frame)
    n = int(table["step"].max()) + 1
    marker = capture.step_marker or "StepTraceAnnotation on the host"
    source = f"{n} annotated step{'s' if n != 1 else ''} '{ann['name'].iloc[0]}' ({marker})"
    return Steps(table, "", source, bool(table["is_warmup"].any()), by_launch=True,
                 annotation=str(ann["name"].iloc[0]))


def program_times(capture: Capture) -> pd.Series:
    """Device time (ps) of each program's executions, all devices, by (name, program id), most first: by id,
    since one name can be several programs (a function jitted for several shapes, a recompile)."""
    modules = capture.modules
    named = modules[modules["module"].astype(str) != ""]
    pid = named["program_id"].astype(object).where(named["program_id"].notna(), "").astype(str)
    # Summed as floats: int64 picoseconds wrap past 106 days of device time (a damaged clock gets there).
    time = named["duration_ps"].astype(np.float64).groupby([named["module"].astype(str), pid]).sum()
    return time.sort_values(ascending=False, kind="stable")


def dominant_program(capture: Capture) -> tuple[str, str]:
    """(name, program id) of the program with the most device time."""
    time = program_times(capture)
    if time.empty:
        return "", ""
    name, program_id = time.index[0]
    return str(name), str(program_id)


def program_steps(capture: Capture, program: str, program_id: str) -> Steps:
    """The executions of one program (by name and id) as the steps."""
    modules = capture.modules
    pid = modules["program_id"].astype(object).where(modules["program_id"].notna(), "").astype(str)
    runs = modules[(modules["module"] == program) & (pid == program_id)][["device", "start_ps", "duration_ps"]]
    table = _number(runs.astype({"start_ps": "int64", "duration_ps": "int64"}))
    n = int(table["step"].max()) + 1
    named = f"{program}({program_id})" if program_id else program
    time = program_times(capture)
    total = float(time.sum())
    shares = [(str(k[0]), str(k[1]), float(v) / total if total > 0 else 0.0) for k, v in time.items()]
    share = next((s for name, pid, s in shares if (name, pid) == (program, program_id)), None)
    others = tuple(p for p in shares if (p[0], p[1]) != (program, program_id))
    covers = f", {share:.0%} of the programs' device time" if share is not None and others else ""
    return Steps(table, program, f"{n} execution{'s' if n != 1 else ''} of {named}{covers}",
                 bool(table["is_warmup"].any()), program_id=program_id, program_share=share, other_programs=others)


def find_steps(capture: Capture) -> Steps:
    annotated = _annotated_steps(capture)
    if annotated is not None:
        return annotated
    if not capture.steps_line.empty:
        table = _number(capture.steps_line.astype({"start_ps": "int64", "duration_ps": "int64"}))
        return Steps(table, "", "the capture's 'Steps' line", bool(table["is_warmup"].any()))

    program, program_id = dominant_program(capture)
    if program:
        return program_steps(capture, program, program_id)

    # No program structure at all: the whole op span on each device is one step.
    ops = capture.events
    spans = ops.groupby("device").agg(start_ps=("start_ps", "min"), end_ps=("start_ps", "max"))
    ends = (ops["start_ps"] + ops["span_ps"]).groupby(ops["device"]).max()
    spans["duration_ps"] = ends - spans["start_ps"]
    table = _number(spans.reset_index()[["device", "start_ps", "duration_ps"]])
    return Steps(table, "", "the whole capture (no program executions found)", False)


def measured_rows(steps: Steps, device, step) -> np.ndarray:
    """Row position in ``steps.after_warmup`` of each (device, step) pair, -1 for a pair not measured.

    The row is the device-step's integer code: interval sums group by it."""
    measured = steps.after_warmup
    device, step = np.asarray(device, np.int64), np.asarray(step, np.int64)
    if measured.empty or len(device) == 0:
        return np.full(len(device), -1, np.int64)
    md, ms = measured["device"].to_numpy(np.int64), measured["step"].to_numpy(np.int64)
    n_steps = int(max(ms.max(), step.max(initial=0))) + 1
    lookup = np.full((int(max(md.max(), device.max(initial=0))) + 1) * n_steps, -1, np.int64)
    lookup[md * n_steps + ms] = np.arange(len(md))
    ok = (device >= 0) & (step >= 0)
    return np.where(ok, lookup[np.where(ok, device * n_steps + step, 0)], -1)


def with_busy_time(steps: Steps, step_ops: pd.DataFrame,
                   in_capture_order: tuple[pd.DataFrame, np.ndarray] | None = None) -> Steps:
    """``steps`` with ``busy_ps``: per measured device-step, the union of its events' [start, start + span).

    ``step_ops``: from :func:`assign_steps` (tables.STEP_EVENTS). ``in_capture_order``: (the capture's events,
    their rows from :func:`assigned_steps`): the same intervals in the capture's (device, start) order.
    ``busy_any_ps``, per step the union over every device, is the union of the per-device blocks: far fewer
    intervals than events."""
    step_values = np.unique(steps.after_warmup["step"].to_numpy(np.int64))
    step_of_row = np.searchsorted(step_values, steps.after_warmup["step"].to_numpy(np.int64))
    if in_capture_order is not None:
        group, block_start, block_end = _blocks_in_chunks(*in_capture_order)
        return replace(steps, busy_ps=union_length(block_start, block_end, group, len(steps.after_warmup)),
                       busy_any_ps=union_length(block_start, block_end, step_of_row[group], len(step_values)))
    # The events by their row in the capture, (device, start), which blocks needs no sort for.
    order = _by_event(step_ops["event"].to_numpy(np.int64))
    start = step_ops["start_ps"].to_numpy(np.int64)[order]
    end = start + step_ops["span_ps"].to_numpy(np.int64)[order]  # the timeline extent: streams, async ops overlap
    step = step_ops["step"].to_numpy(np.int64)[order]
    rows = measured_rows(steps, step_ops["device"].to_numpy(np.int64)[order], step)
    # Busy on any device, per step: its code is the step's rank among the measured steps.
    if (rows < 0).any():  # events outside the measured device-steps still count for their step
        any_rows = np.searchsorted(step_values, step)
        return replace(steps, busy_ps=union_length(start, end, rows, len(steps.after_warmup)),
                       busy_any_ps=union_length(start, end, any_rows, len(step_values)))
    group, block_start, block_end = blocks(start, end, rows)
    return replace(steps, busy_ps=union_length(block_start, block_end, group, len(steps.after_warmup)),
                   busy_any_ps=union_length(block_start, block_end, step_of_row[group], len(step_values)))


_BUSY_CHUNK = 1 << 20  # events per pass: the temporaries (keys, extents) stay a few tens of MB on any capture


def _blocks_in_chunks(events: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``blocks`` of the measured events (``rows`` >= 0: their device-step row) taken a million rows of the capture
    at a time. Blocks cut at a chunk's edge are merged again by ``union_length``, which unions the blocks: the
    same busy time, without five event-sized temporaries at once (the peak of a 5M-event run)."""
    start_all, span_all = events["start_ps"].to_numpy(np.int64), events["span_ps"].to_numpy(np.int64)
    parts = []
    for at in range(0, len(rows), _BUSY_CHUNK):
        r = rows[at:at + _BUSY_CHUNK]
        inside = r >= 0
        start = start_all[at:at + _BUSY_CHUNK][inside]
        end = span_all[at:at + _BUSY_CHUNK][inside]
        end += start
        parts.append(blocks(start, end, r[inside]))
    if not parts:
        return blocks(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    return tuple(np.concatenate(c) for c in zip(*parts))


def _by_event(event: np.ndarray) -> np.ndarray:
    """The positions of the (distinct) capture rows ``event`` in ascending order: a scatter into the capture's
    rows, no sort (the step events' time order interleaves the devices' runs: no runs for a sort to reuse)."""
    if len(event) == 0:
        return np.zeros(0, np.int64)
    at = np.full(int(event.max()) + 1, -1, np.int64)
    at[event] = np.arange(len(event))
    order = at[at >= 0]
    return order if len(order) == len(event) else np.argsort(event, kind="stable")  # (repeated rows: sort)


def step_rows(steps: Steps, device, time_ps) -> np.ndarray:
    """Row position in ``steps.after_warmup`` of the measured step each (device, time) falls in, -1 if none."""
    measured = steps.after_warmup
    return locate(time_ps, device, measured["start_ps"], measured["end_ps"], measured["device"])


def assign_steps(ops: pd.DataFrame, steps: Steps) -> pd.DataFrame:
    """``ops`` restricted to measured steps, with ``step`` and ``event`` (row in ``ops``) columns.

    Rows come in start-time order (stable: ties in the order of ``ops``), with a fresh index."""
    return assigned_steps(ops, steps)[0]


def assigned_steps(ops: pd.DataFrame, steps: Steps) -> tuple[pd.DataFrame, np.ndarray]:
    """(:func:`assign_steps`, per row of ``ops`` in its own order the row in ``steps.after_warmup`` of the
    measured step it belongs to, -1 outside them): the codes :func:`with_busy_time` groups by."""
    measured = steps.after_warmup
    if measured.empty or ops.empty:
        empty = ops.iloc[0:0].assign(step=pd.Series(dtype="int64"), event=pd.Series(dtype="int64"))
        return empty, np.full(len(ops), -1, np.int64)
    start = ops["start_ps"].to_numpy(np.int64)
    when = start
    if steps.by_launch and "launch_ps" in ops:
        launch = ops["launch_ps"].to_numpy(np.int64)
        when = np.where(launch >= 0, launch, start)  # the span that launched it, else where it ran
    # In the rows' own order: a capture's events come by (device, start), which locate needs no sort for.
    by_row = step_rows(steps, ops["device"].to_numpy(np.int64), when)
    del when
    events = _in_start_order(start, by_row)
    # Each column taken once, by np.take (about twice as fast as fancy indexing on millions of rows).
    out = take_frame(ops, events, first={"event": events})
    out["step"] = _step_of(measured["step"].to_numpy(np.int64), by_row, events)
    return out, by_row


# Rows per pass where a temporary as long as the events would otherwise be made: a few MB, reused from one pass
# to the next (every fresh array of millions of rows costs its page faults, more than the arithmetic on it).
_CHUNK = 1 << 20


def _in_start_order(start: np.ndarray, by_row: np.ndarray) -> np.ndarray:
    """The rows with ``by_row >= 0`` by (start, row): the stable sort of every row (per device already in
    order: a merge of sorted runs), the others dropped in place a chunk at a time."""
    order = np.argsort(start, kind="stable")
    kept = 0
    for at in range(0, len(order), _CHUNK):  # writes never pass reads: in place
        part = order[at:at + _CHUNK]
        part = part[np.take(by_row, part) >= 0]
        order[kept:kept + len(part)] = part
        kept += len(part)
    return order[:kept]


def _step_of(step: np.ndarray, by_row: np.ndarray, events: np.ndarray) -> np.ndarray:
    """``step[by_row[events]]``: each event's step number, a chunk of events at a time (no row temporary)."""
    out = np.empty(len(events), np.int64)
    for at in range(0, len(events), _CHUNK):
        np.take(step, np.take(by_row, events[at:at + _CHUNK]), out=out[at:at + _CHUNK])
    return out
