"""One host of a multi-host TPU capture, decoded and reduced where it is read (a worker process, a Dask
worker) to what the report needs; its events are freed there. :mod:`.host_merge` adds the hosts up.

What a host keeps, everything keyed by ``(program_id, op_name)`` (a TPU op's module follows from its
program id, which the merge resolves over all hosts), devices numbered from 0 on the host:

- per-op aggregates of the events in measured steps (count, summed / least / most device time, and the
  first event in start-time order, which numbers the ops as the single-capture path does), and of the
  events outside them (the other programs' ops);
- per measured device-step the busy time, and per step the union of the host's busy intervals (time any
  device works on the step is a union over every host);
- the async transfer spans that end in a measured step, the events of the done ops they wait for, and
  per op the device time on the devices that recorded such spans (the transfer exposure);
- the events of one representative step per device (the median-duration one, the step the timeline
  draws), the events the rules that read events see;
- the small tables steps are found from (annotations, ``Steps`` line, module executions), so the merge
  can find the steps over all hosts and send back a host whose own choice differs.

Steps are found on the host alone; the merge checks them against the steps of the whole run (the dominant
program is a sum over hosts) and reduces a host again, with the run's steps, where they differ.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..parsers.xplane import XSpaceTables, read_xspace
from .capture import Capture, build_capture
from .intervals import blocks
from .plane_tables import TPU_PLANE
from .sanity import checked_space
from .steps import Steps, assign_steps, find_steps, step_rows, with_busy_time

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
    step_ops: pd.DataFrame | None = None  # KEY + occurrences, total_ps, min_ps, max_ps, first_start_ps, first_device, first_event
    other_ops: pd.DataFrame | None = None  # KEY + occurrences, total_ps, min_ps, max_ps, first_device, first_event
    busy_blocks: pd.DataFrame | None = None  # step, start_ps, end_ps: union of the host's step events
    rep_events: pd.DataFrame | None = None  # tables.STEP_EVENTS without op_id; event = row on the host
    done_events: pd.DataFrame | None = None  # device, step, KEY, start_ps, duration_ps
    span_ops: pd.DataFrame | None = None  # KEY + duration_ps over the devices with spans in steps
    spans: pd.DataFrame | None = None  # the async spans ending in a measured step (capture.async_spans rows)
    recording: tuple = ()  # devices whose capture recorded any async span


def key_codes(frame: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Per row, a dense code of its (program_id, op_name), and the keys in code order."""
    pid = frame["program_id"].astype(object).where(frame["program_id"].notna(), "").astype(str)
    codes, keys = pd.MultiIndex.from_arrays([pid, frame["op_name"].astype(str)]).factorize()
    return codes.astype(np.int64), pd.DataFrame(list(keys), columns=KEY) if len(keys) else pd.DataFrame(columns=KEY)


def _aggregate(frame: pd.DataFrame, first_cols: list[str]) -> pd.DataFrame:
    """Per op key: occurrences, summed / least / most duration_ps, and ``first_cols`` of its first row."""
    if frame.empty:
        return pd.DataFrame(columns=[*KEY, "occurrences", "total_ps", "min_ps", "max_ps",
                                     *(f"first_{c}" for c in first_cols)])
    codes, keys = key_codes(frame)
    dur = frame["duration_ps"].to_numpy(np.int64)
    n = len(keys)
    out = keys.assign(occurrences=np.bincount(codes, minlength=n).astype(np.int64))
    total = np.zeros(n, np.int64)
    np.add.at(total, codes, dur)
    lo = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(lo, codes, dur)
    hi = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(hi, codes, dur)
    _, first = np.unique(codes, return_index=True)  # codes number keys by first appearance: first[k] is key k's
    out = out.assign(total_ps=total, min_ps=lo, max_ps=hi)
    for col in first_cols:
        out[f"first_{col}"] = frame[col].to_numpy(np.int64)[first]
    return out


def _representative(steps: Steps) -> pd.DataFrame:
    """(device, step) of the median-duration measured step of each device (as the timeline picks it)."""
    m = steps.after_warmup.sort_values(["device", "duration_ps", "step"], kind="stable")
    m = m.assign(rank=m.groupby("device").cumcount(), n=m.groupby("device")["step"].transform("size"))
    return m.loc[m["rank"] == (m["n"] - 1) // 2, ["device", "step"]]


def _extents(events: pd.DataFrame) -> pd.DataFrame:
    """Per device: first and last start and last end (what a whole-capture step is made of)."""
    g = events.groupby("device")
    ends = (events["start_ps"] + events["span_ps"]).groupby(events["device"]).max()
    return pd.DataFrame({"first_start_ps": g["start_ps"].min(), "last_start_ps": g["start_ps"].max(),
                         "end_ps": ends}).reset_index()


def _in_keys(frame: pd.DataFrame, keys: pd.DataFrame) -> np.ndarray:
    pid = frame["program_id"].astype(object).where(frame["program_id"].notna(), "").astype(str)
    want = pd.MultiIndex.from_frame(keys.astype(str))
    return pd.MultiIndex.from_arrays([pid, frame["op_name"].astype(str)]).isin(want)


def _transfers(capture: Capture, steps: Steps, step_ops: pd.DataFrame):
    """(spans ending in a measured step, the events of the done ops they wait for, per-op device time on the
    devices that recorded such spans, devices that recorded any span)."""
    spans = capture.async_spans
    recording = tuple(sorted(int(d) for d in pd.unique(spans["device"]))) if len(spans) else ()
    if spans.empty:
        empty = step_ops.iloc[0:0]
        return spans, empty[["device", "step", *KEY, "start_ps", "duration_ps"]], _sum_by_key(empty), recording
    rows = step_rows(steps, spans["device"].to_numpy(np.int64), spans["end_ps"].to_numpy(np.int64) - 1)
    spans = spans[rows >= 0].reset_index(drop=True)
    done_keys = pd.DataFrame({"program_id": spans["program_id"].astype(object).fillna("").astype(str),
                              "op_name": spans["done_op"].astype(object).fillna("").astype(str)}).drop_duplicates()
    done = step_ops[_in_keys(step_ops, done_keys)][["device", "step", *KEY, "start_ps", "duration_ps"]]
    on_span = step_ops[step_ops["device"].isin(spans["device"].unique())]
    return spans, done.reset_index(drop=True), _sum_by_key(on_span), recording


def _sum_by_key(frame: pd.DataFrame) -> pd.DataFrame:
    agg = _aggregate(frame, [])
    return agg[[*KEY, "total_ps"]].rename(columns={"total_ps": "duration_ps"})


def reduce_capture(capture: Capture, path: str, hostname: str, fingerprint: str, checks: Counter,
                   hlo: HostHlo, forced: Steps | None = None) -> HostPart:
    """The reduction of one host's single-host capture (``forced``: the run's steps for its devices)."""
    steps = forced if forced is not None else find_steps(capture)
    events = capture.events
    step_ops = assign_steps(events, steps)
    steps = with_busy_time(steps, step_ops)
    in_step = np.zeros(len(events), bool)
    in_step[step_ops["event"].to_numpy(np.int64)] = True
    outside = events[~in_step].assign(event=np.flatnonzero(~in_step))
    rep = _representative(steps).merge(step_ops.reset_index(drop=True), on=["device", "step"])
    rep = rep.sort_values(["start_ps", "event"], kind="stable")[[*events.columns, "event", "step"]]
    bg, bs, be = blocks(step_ops["start_ps"].to_numpy(np.int64),
                        step_ops["start_ps"].to_numpy(np.int64) + step_ops["span_ps"].to_numpy(np.int64),
                        step_ops["step"].to_numpy(np.int64))
    spans, done, span_ops, recording = _transfers(capture, steps, step_ops)
    return HostPart(
        path=path, hostname=hostname, fingerprint=fingerprint, checks=checks, platform=capture.platform,
        devices=capture.devices, n_events=len(events), modules=capture.modules, steps_line=capture.steps_line,
        annotations=capture.step_annotations, extents=_extents(events), op_metadata=capture.op_metadata,
        hlo=hlo, steps=replace(steps, busy_any_ps=None),
        step_ops=_aggregate(step_ops, ["start_ps", "device", "event"]),
        other_ops=_aggregate(outside, ["device", "event"]),
        busy_blocks=pd.DataFrame({"step": bg, "start_ps": bs, "end_ps": be}),
        rep_events=rep.reset_index(drop=True), done_events=done, span_ops=span_ops, spans=spans,
        recording=recording,
    )


def reduce_host(path: str, forced: Steps | None = None, raw: bool = False) -> HostPart:
    """Read one host file and reduce it (the map step; runs in a worker). Not a TPU host, or ``raw``: the
    parsed space itself comes back, for the all-events path."""
    space = read_xspace(path)
    base = dict(path=str(path), hostname=space.hostname, fingerprint=space.fingerprint)
    checked, checks = checked_space(space)
    if raw or not checked.planes["name"].str.match(TPU_PLANE).any():
        return HostPart(**base, checks=Counter(), platform="", space=space)
    hlo = HostHlo(space.path, space.hlo_protos)
    del space
    capture = build_capture([checked], checked=True)
    del checked
    return reduce_capture(capture, **base, checks=checks, hlo=hlo, forced=forced)
