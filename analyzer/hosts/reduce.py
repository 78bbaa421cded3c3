"""One host of a multi-host capture, decoded and reduced where it is read (a worker process, a Dask
worker) to what the report needs; its events are freed there. :mod:`.host_merge` adds the hosts up.

What a host keeps, everything keyed by ``(program_id, op_name)`` (a TPU op's module follows from its
program id, which the merge resolves over all hosts), devices numbered from 0 on the host:

- per-op aggregates of the events in measured steps (count, summed / least / most device time, and the
  first event in start-time order, which numbers the ops as the single-capture path does), and of the
  events outside them (the other programs' ops);
- per measured device-step the busy time, and per step the union of the host's busy intervals (time any
  device works on the step is a union over every host);
- the async transfer spans that end in a measured step as sums (:mod:`.span_sums`: in-flight time per done
  op, unions per transfer kind), and per op the device time on the devices that recorded such spans (the
  transfer exposure); as rows only those of the representative steps (with the end of the done op each
  waits for);
- the events of one representative step per device (the median-duration one, the step the timeline
  draws), the events the rules that read events see;
- the small tables steps are found from (annotations, ``Steps`` line, module executions), so the merge
  can find the steps over all hosts and send back a host whose own choice differs.

A GPU or CPU host also keeps its transfer sums (:mod:`.transfer_totals`): which of its ops are transfers comes
from the HLO its file carries.

Steps are found on the host alone, as the user chose them (``--program``, ``--steps``) if they did; the
merge checks them against the steps of the whole run (the dominant program is a sum over hosts) and reduces a
host again, with the run's steps, where they differ.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import UsageError
from ...parsers.xplane import XSpaceTables, read_xspace
from ..capture.build import Capture, CaptureError, build_capture
from ..capture.intervals import blocks
from ..capture.sanity import checked_space
from ..steps.choice import StepChoice, choose_steps
from ..steps.occurrences import representative_steps
from ..steps.transfer_spans import done_ends
from ..steps.windows import Steps, assign_steps, find_steps, measured_rows, step_rows, with_busy_time
from .heap import release_freed
from .span_sums import SpanSums, span_sums
from .transfer_totals import HostSums, first_launch, op_roles, transfer_totals

KEY = ["program_id", "op_name"]


@dataclass(frozen=True)
class HostHlo:
    """The HLO a host file carries (the slice of ``XSpaceTables`` that ``embedded_hlo`` reads)."""

    path: Path
    hlo_protos: tuple


@dataclass(frozen=True)
class HostPart:
    """One host reduced; ``space`` instead when the host is not a TPU one (its events are all needed)."""

    path: str
    hostname: str
    fingerprint: str
    checks: Counter  # sanity counts by kind
    platform: str
    space: XSpaceTables | None = None
    devices: pd.DataFrame | None = None
    n_events: int = 0
    modules: pd.DataFrame | None = None
    steps_line: pd.DataFrame | None = None
    annotations: pd.DataFrame | None = None
    extents: pd.DataFrame | None = None  # device, first_start_ps, last_start_ps, end_ps
    op_metadata: pd.DataFrame | None = None
    hlo: HostHlo | None = None
    steps: Steps | None = None  # this host's steps (local devices), busy_ps set
    # Per op key: occurrences, total_ps, min_ps, max_ps and its first event's first_start_ps (in-step ops only),
    # first_device, first_event (its row in the host's events).
    step_ops: pd.DataFrame | None = None
    other_ops: pd.DataFrame | None = None
    busy_blocks: pd.DataFrame | None = None  # step, start_ps, end_ps: union of the host's step events
    rep_events: pd.DataFrame | None = None  # tables.STEP_EVENTS without op_id; event = row on the host
    span_ops: pd.DataFrame | None = None  # KEY + duration_ps over the devices with spans in steps
    # The async spans ending in a representative step (capture.async_spans rows), done_end_ps (transfers.done_ends).
    spans: pd.DataFrame | None = None
    recording: tuple = ()  # devices whose capture recorded any async span
    warnings: tuple = ()  # build_capture's warnings for this host alone
    step_marker: str = ""  # Capture.step_marker
    first_launch: pd.Series | None = None  # step -> its events' first launch (transfer_totals.first_launch)
    totals: HostSums | None = None  # GPU/CPU hosts: their transfer sums
    span_sums: SpanSums | None = None  # TPU/CPU hosts: their in-step async spans as sums


def _as_categorical(values: pd.Series) -> pd.Categorical:
    if isinstance(values.dtype, pd.CategoricalDtype):
        return values.array
    return pd.Categorical(values.astype(object).where(values.notna(), "").astype(str))


def _codes(values: pd.Categorical) -> np.ndarray:
    """Category codes, a missing value coded as the '' category where there is one: both are the key ''."""
    codes = values.codes.astype(np.int64)
    empty = np.flatnonzero(values.categories.astype(str) == "")
    return np.where(codes < 0, empty[0], codes) if len(empty) else codes


def key_codes(frame: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Per row, a dense code of its (program_id, op_name), and the keys in code order: from the columns'
    category codes (the events' are categorical), no string handled and no sort per row."""
    pid, name = _as_categorical(frame["program_id"]), _as_categorical(frame["op_name"])
    width = len(name.categories) + 1
    pair = (_codes(pid) + 1) * width + (_codes(name) + 1)  # code -1: missing
    present = np.zeros((len(pid.categories) + 1) * width, bool)
    present[pair] = True
    used = np.flatnonzero(present)
    dense = np.zeros(len(present), np.int64)
    dense[used] = np.arange(len(used))
    pid_values = np.append(pid.categories.astype(str).to_numpy(object), "")  # [-1]: missing -> ''
    name_values = np.append(name.categories.astype(str).to_numpy(object), "")
    keys = pd.DataFrame({"program_id": pid_values[used // width - 1], "op_name": name_values[used % width - 1]})
    return dense[pair], keys


def _aggregate(frame: pd.DataFrame, first_cols: list[str], coded=None) -> pd.DataFrame:
    """Per op key: occurrences, summed / least / most duration_ps, and ``first_cols`` of its first row.
    ``coded``: the frame's ``key_codes`` when already known (keys no row uses are left out)."""
    codes, keys = coded if coded is not None else key_codes(frame)
    dur = frame["duration_ps"].to_numpy(np.int64)
    n = len(keys)
    count = np.bincount(codes, minlength=n).astype(np.int64)
    total, lo, hi = np.zeros(n, np.int64), np.full(n, np.iinfo(np.int64).max), np.full(n, np.iinfo(np.int64).min)
    first = np.full(n, len(codes), np.int64)
    np.add.at(total, codes, dur)
    np.minimum.at(lo, codes, dur)
    np.maximum.at(hi, codes, dur)
    np.minimum.at(first, codes, np.arange(len(codes)))
    out = keys.assign(occurrences=count, total_ps=total, min_ps=lo, max_ps=hi)
    for col in first_cols:
        out[f"first_{col}"] = np.append(frame[col].to_numpy(np.int64), 0)[first]
    return out[count > 0].reset_index(drop=True)


def _extents(events: pd.DataFrame) -> pd.DataFrame:
    """Per device: first and last start and last end (what a whole-capture step is made of)."""
    g = events.groupby("device")
    ends = (events["start_ps"] + events["span_ps"]).groupby(events["device"]).max()
    return pd.DataFrame({"first_start_ps": g["start_ps"].min(), "last_start_ps": g["start_ps"].max(),
                         "end_ps": ends}).reset_index()


def _transfers(capture: Capture, steps: Steps, step_ops: pd.DataFrame, coded, hlo: HostHlo):
    """(the spans ending in a representative step, each with the end of the done op it waits for, per-op device
    time on the devices that recorded spans in measured steps, devices that recorded any span, the sums of the
    spans in measured steps (span_sums; None on GPU, whose transfer numbers come from its kernels))."""
    spans = capture.async_spans
    recording = tuple(sorted(int(d) for d in pd.unique(spans["device"]))) if len(spans) else ()
    codes, keys = coded
    rows = step_rows(steps, spans["device"].to_numpy(np.int64), spans["end_ps"].to_numpy(np.int64) - 1)
    spans = spans[rows >= 0].reset_index(drop=True)
    wanted = pd.DataFrame({"program_id": spans["program_id"].astype(object).fillna("").astype(str).to_numpy(),
                           "op_name": spans["done_op"].astype(object).fillna("").astype(str).to_numpy()})
    span_op = wanted.merge(keys.assign(code=np.arange(len(keys))), on=KEY, how="left")["code"]
    ev_start = step_ops["start_ps"].to_numpy(np.int64)
    spans["done_end_ps"] = done_ends(spans["start_ps"].to_numpy(np.int64), rows[rows >= 0],
                                     span_op.fillna(-1).to_numpy(np.int64),
                                     measured_rows(steps, step_ops["device"], step_ops["step"]), codes,
                                     ev_start + step_ops["duration_ps"].to_numpy(np.int64))
    on_span = np.isin(step_ops["device"].to_numpy(np.int64), spans["device"].unique())
    span_ops = _aggregate(step_ops[on_span], [], (codes[on_span], keys))
    span_ops = span_ops[[*KEY, "total_ps"]].rename(columns={"total_ps": "duration_ps"})
    rows = rows[rows >= 0]
    sums = None if capture.platform == "gpu" else span_sums(spans, rows, len(steps.after_warmup), step_ops,
                                                             capture.op_metadata, hlo)
    # Rows only of the representative steps (what the timeline and trace export draw): the numbers are sums.
    rep = np.zeros(len(steps.after_warmup), bool)
    rep[measured_rows(steps, *representative_steps(steps).to_numpy(np.int64).T)] = True
    spans = spans[rep[rows]].reset_index(drop=True)
    for col in ("program_id", "start_op", "done_op", "kind"):  # few distinct names over many spans
        spans[col] = spans[col].astype("category")
    return spans, span_ops, recording, sums


def _own_steps(capture: Capture, choice: StepChoice | None) -> Steps:
    """The host's steps as the user chose them; a choice that names nothing on this host alone (a program
    it does not run) is left to the merge, which judges it over the whole run."""
    try:
        return choose_steps(capture, choice)
    except UsageError:
        return find_steps(capture)


def reduce_capture(capture: Capture, path: str, hostname: str, fingerprint: str, checks: Counter,
                   hlo: HostHlo, forced: Steps | None = None, choice: StepChoice | None = None) -> HostPart | None:
    """The reduction of one host's single-host capture (``forced``: the run's steps for its devices;
    ``choice``: else the program or steps the user gave, step_choice). None: a GPU or CPU host lacking the HLO
    of a program it ran (transfer_totals.op_roles)."""
    steps = forced if forced is not None else _own_steps(capture, choice)
    events = capture.events
    step_ops = assign_steps(events, steps)
    steps = with_busy_time(steps, step_ops)
    totals = None
    if capture.platform != "tpu":
        roles = op_roles(step_ops, capture.op_metadata, hlo)
        if roles is None:
            return None
        totals = transfer_totals(step_ops, steps, roles, capture.platform == "gpu")
    in_step = np.zeros(len(events), bool)
    in_step[step_ops["event"].to_numpy(np.int64)] = True
    outside = events.loc[~in_step, [*KEY, "device", "duration_ps"]].assign(event=np.flatnonzero(~in_step))
    rep = representative_steps(steps).merge(step_ops.reset_index(drop=True), on=["device", "step"])
    rep = rep.sort_values(["start_ps", "event"], kind="stable")[[*events.columns, "event", "step"]]
    bg, bs, be = blocks(step_ops["start_ps"].to_numpy(np.int64),
                        step_ops["start_ps"].to_numpy(np.int64) + step_ops["span_ps"].to_numpy(np.int64),
                        step_ops["step"].to_numpy(np.int64))
    coded = key_codes(step_ops)
    spans, span_ops, recording, sums = _transfers(capture, steps, step_ops, coded, hlo)
    return HostPart(
        path=path, hostname=hostname, fingerprint=fingerprint, checks=checks, platform=capture.platform,
        devices=capture.devices, n_events=len(events), modules=capture.modules, steps_line=capture.steps_line,
        annotations=capture.step_annotations, extents=_extents(events), op_metadata=capture.op_metadata,
        hlo=hlo, steps=replace(steps, busy_any_ps=None),
        step_ops=_aggregate(step_ops, ["start_ps", "device", "event"], coded),
        other_ops=_aggregate(outside, ["device", "event"]),
        busy_blocks=pd.DataFrame({"step": bg, "start_ps": bs, "end_ps": be}),
        rep_events=rep.reset_index(drop=True), span_ops=span_ops, spans=spans,
        recording=recording, warnings=capture.warnings, step_marker=capture.step_marker,
        first_launch=first_launch(step_ops), totals=totals, span_sums=sums,
    )


def reduce_host(path: str, forced: Steps | None = None, raw: bool = False,
                choice: StepChoice | None = None) -> HostPart:
    """Read one host file and reduce it (the map step; runs in a worker). ``raw``, or a GPU/CPU host that
    cannot tell its transfers (``reduce_capture``): the parsed space itself comes back, for the all-events path.
    ``choice``: the user's program or steps, so a host is reduced once with them (not once with its own and
    again with the run's)."""
    space = read_xspace(path)
    base = dict(path=str(path), hostname=space.hostname, fingerprint=space.fingerprint)
    if raw:
        return HostPart(**base, checks=Counter(), platform="", space=space)
    checked, checks = checked_space(space)
    hlo = HostHlo(space.path, space.hlo_protos)
    del space
    try:
        capture = build_capture([checked], checked=True)
    except CaptureError:  # no op event on this host alone: the all-events path judges the run
        return HostPart(**base, checks=Counter(), platform="", space=read_xspace(path))
    del checked
    part = reduce_capture(capture, **base, checks=checks, hlo=hlo, forced=forced, choice=choice)
    del capture
    release_freed()  # a worker reads host after host: each one's events freed, not kept as heap holes
    return part if part is not None else HostPart(**base, checks=Counter(), platform="", space=read_xspace(path))
