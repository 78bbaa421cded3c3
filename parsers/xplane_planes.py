"""One XPlane of an XSpace decoded into columns: the part of the parse that runs per plane, in this process or
in a worker process (:func:`decode_planes`), so the planes of one big host file are read on every core.

A plane's result numbers its lines and events from 0; ``xplane`` offsets them when it joins the planes.
"""

from __future__ import annotations

import multiprocessing
import re
from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError

from ..errors import InputError
from . import event_stat_values
from .duplicate_lines import repeats_a_line
from .worker_start import capped_workers
from .xevent_columns import parse_plane_raw_events, read_events, read_lines_events
from .xevent_runs import PlaneEvents, padded_plane, plane_index
from .xplane_metadata import _text, metadata_rows, plane_stats
from .xspace_wire import PlaneBytes


class PlaneError(InputError):
    """A plane that cannot be decoded; the message is the reason, without the file (``xplane`` adds it)."""


# Per-event stats kept as columns (everything else is dropped while decoding).
# step_num: jax.profiler.StepTraceAnnotation, the user's step, on the host thread that ran it; _r, iter_num:
# TensorFlow's step markers without XLA (analyzer/capture/host_steps.py): a root TraceMe, its iteration.
EVENT_STAT_NAMES = ("hlo_op", "hlo_module", "program_id", "correlation_id", "run_id", "device_ordinal", "step_num",
                    "_r", "iter_num")
_INT_EVENT_STATS = {"correlation_id", "run_id", "device_ordinal", "step_num", "_r", "iter_num"}
# On TPU captures the host threads' stats are read column-wise, integers only: the user's steps and
# which program execution each host event launched (run_id, device_ordinal match the XLA Modules line).
_TPU_HOST_INT_STATS = ("step_num", "run_id", "device_ordinal")

# Lines whose per-event stats we never need (the hot, op-per-event lines on accelerators).
_LINES_WITHOUT_EVENT_STATS = {"XLA Ops", "XLA TraceMe", "Sparse Core Ops", "Overlay"}

_TPU_DEVICE_PLANE = re.compile(r"^/device:TPU:\d+$")

# TPU op events carry the device's own measurement. The host-timeline duration of an event
# is sometimes clipped to 0 and its time given to a neighbouring op (45 of 1504 events on one
# core of the real v6e sample, and others stretched); xprof reads device_duration_ps, and so
# do we for what an op costs. The timeline itself (start, span) stays the host one,
# consistent with module and step events (device_offset_ps is not on the same clock).
_DEVICE_DURATION_STAT = "device_duration_ps"


@dataclass
class PlaneTables:
    """One plane's rows; ``line`` values and ``stat_rows`` / ``int_stats["event"]`` count from 0 in this plane."""

    plane_row: tuple
    plane_stats: dict
    digest: bytes  # of the plane's bytes, for the file's fingerprint (xspace_wire.fingerprint)
    meta_rows: list = field(default_factory=list)
    hlo_protos: list = field(default_factory=list)
    line_rows: list = field(default_factory=list)  # (line, line_id, name, display_name, timestamp_ns)
    events: dict = field(default_factory=dict)  # line, metadata_id, start_ps, span_ps, duration_ps: lists of parts
    stat_rows: list = field(default_factory=list)  # per named line: event rows that carry a wanted stat
    stat_parts: dict = field(default_factory=dict)  # per stat name: its values on those rows, line by line
    int_stats: list = field(default_factory=list)  # integer stats read column-wise (TPU host threads): columns
    unrepresentable_starts: int = 0
    duplicate_lines: int = 0  # lines whose events repeat an earlier line's of the plane, left out


def decode_plane(plane_idx: int, plane_name: str, data: bytes, tpu_capture: bool) -> PlaneTables:
    """Decode one serialized plane; raise :class:`PlaneError` (one line) when it is corrupt.

    ``tpu_capture``: on TPU captures op identity lives in the device planes' metadata; the host threads'
    per-event stats are never read (decoding them would be the slowest part of the parse)."""
    raw, digest = padded_plane(data)  # copied out of the file's map now (xspace_wire.PlaneBytes), once
    try:
        plane = parse_plane_raw_events(raw)
    except DecodeError as exc:
        raise PlaneError(f"not a readable XSpace protobuf (truncated or corrupt): {exc}") from None
    index = data.index if isinstance(data, PlaneBytes) and data.index is not None else plane_index(raw, len(data))
    del data
    stat_names = {k: _text(v.name) for k, v in plane.stat_metadata.items()}
    out = PlaneTables((plane_idx, plane.id, plane_name), plane_stats(plane.stats, stat_names), digest)
    places = PlaneEvents(raw, index, len(plane.lines), len(plane.event_metadata))
    out.meta_rows, out.hlo_protos = metadata_rows(plane_idx, plane_name, plane, stat_names, places)
    _decode_lines(out, plane.lines, _WantedStats.of(stat_names, tpu_capture and plane_name.startswith("/host:")),
                  places)
    return out


@dataclass(frozen=True)
class _WantedStats:
    """Which per-event stats to read on the lines of one plane."""

    names: dict  # stat metadata id -> name
    value_ids: tuple  # ids of the EVENT_STAT_NAMES
    device_duration_id: int | None
    tpu_host: bool  # a host plane of a TPU capture: only _TPU_HOST_INT_STATS, column-wise

    @classmethod
    def of(cls, stat_names: dict, tpu_host: bool) -> _WantedStats:
        wanted = set(EVENT_STAT_NAMES)
        return cls(stat_names, tuple({k for k, v in stat_names.items() if v in wanted}),
                   next((k for k, v in stat_names.items() if v == _DEVICE_DURATION_STAT), None), tpu_host)

    def for_line(self, line_name: str) -> tuple[bool, dict, dict]:
        """(read device durations, integer stats name -> id, value stats name -> ids) for one line."""
        # A host plane's "XLA Ops" line (a damaged or renamed device plane) is read as a host line.
        want_duration = self.device_duration_id is not None and line_name == "XLA Ops" and not self.tpu_host
        wanted_ints = {_DEVICE_DURATION_STAT: self.device_duration_id} if want_duration else {}
        if self.tpu_host:
            wanted_ints = {k: v for v, k in self.names.items() if k in _TPU_HOST_INT_STATS}
        value_ids: dict[str, list] = {}
        if line_name not in _LINES_WITHOUT_EVENT_STATS and self.value_ids and not self.tpu_host:
            for k in self.value_ids:
                value_ids.setdefault(self.names[k], []).append(k)
        return want_duration, wanted_ints, value_ids


_EVENT_COLUMNS = ("line", "metadata_id", "start_ps", "span_ps", "duration_ps")


# Consecutive lines read alike are decoded in one call, up to this many events: a plane of 50k one-event
# lines (host threads) would otherwise pay numpy's per-call overhead 50k times (18-26 s).
_BATCH_EVENTS = 1 << 16


def _decode_lines(out: PlaneTables, lines, wanted: _WantedStats, places: PlaneEvents) -> None:
    """``line_rows`` and the event columns of every line, events numbered in line order."""
    columns: dict[str, list] = {k: [] for k in _EVENT_COLUMNS}
    num_events, batch, batch_events, batch_key = 0, [], 0, None
    seen: dict[tuple, list] = {}
    for line in lines:
        line_idx = len(out.line_rows)
        line_name = _text(line.name)
        out.line_rows.append((line_idx, line.id, line_name, _text(line.display_name), line.timestamp_ns))
        n = len(line.events)  # serialized XEvent payloads (see xevent_columns)
        if n == 0:
            continue
        if repeats_a_line(line, seen):
            out.duplicate_lines += 1
            continue
        key = wanted.for_line(line_name)
        if batch and (key != batch_key or batch_events + n > _BATCH_EVENTS):
            num_events += _decode_line_events(out, batch, wanted, columns, num_events, places)
            batch, batch_events = [], 0
        batch.append((line_idx, line_name, line))
        batch_events, batch_key = batch_events + n, key
    if batch:
        _decode_line_events(out, batch, wanted, columns, num_events, places)
    out.events = columns  # the parts are joined once, with the other planes' (xplane)


def _read_events(batch: list, wanted_ints: dict, value_ids: dict, places: PlaneEvents) -> dict:
    """The event columns of the lines in ``batch``, decoded where they lie in the plane's bytes (else from their
    payloads joined); a corrupt event is a PlaneError naming its line."""
    events, timestamps = [line.events for *_, line in batch], [line.timestamp_ns for *_, line in batch]
    try:
        located = places.payloads([idx for idx, *_ in batch], events)
        if located is not None:
            return read_events(places.buf, *located, timestamps, wanted_ints, value_ids)
        return read_lines_events(events, timestamps, wanted_ints, value_ids)
    except ValueError as exc:
        for _, name, line in batch:  # which line (only on this error path: one line at a time)
            try:
                read_lines_events([line.events], [line.timestamp_ns], wanted_ints, value_ids)
            except ValueError as line_exc:
                raise PlaneError(f"corrupt event on line {name!r}: {line_exc}") from None
        raise PlaneError(f"corrupt event on line {batch[0][1]!r}: {exc}") from None


def _decode_line_events(out: PlaneTables, batch: list, wanted: _WantedStats, columns: dict, first_event: int,
                        places: PlaneEvents) -> int:
    """Append the event columns (and wanted stats) of the lines ``batch`` ((index, name, line) of lines read
    alike) to ``columns``/``out``; return their kept events."""
    want_duration, wanted_ints, value_ids = wanted.for_line(batch[0][1])
    cols = _read_events(batch, wanted_ints, value_ids, places)
    counts = np.fromiter((len(line.events) for *_, line in batch), np.int64, len(batch))
    line_column = np.repeat(np.array([idx for idx, *_ in batch], np.int32), counts)
    valid = cols.pop("start_valid")
    values = cols.pop("stat_values", None)
    kept = None  # each event's row among the kept ones of these lines, where some are dropped
    if not valid.all():  # a start past the int64 range (damaged timestamp or offset): dropped
        kept = np.cumsum(valid) - 1
        out.unrepresentable_starts += int(valid.size - kept[-1] - 1)
        cols = {key: column[valid] for key, column in cols.items()}  # stat values: rows chosen below
        line_column = line_column[valid]
    span = cols["duration_ps"]
    duration = span
    if want_duration:  # the device's, where the event has it (in place: no other array the size of the line)
        duration = cols[_DEVICE_DURATION_STAT]
        np.copyto(duration, span, where=duration < 0)
    for key, column in (("line", line_column), ("metadata_id", cols["metadata_id"]),
                        ("start_ps", cols["start_ps"]), ("span_ps", span), ("duration_ps", duration)):
        columns[key].append(column)
    if wanted.tpu_host and wanted_ints:
        _add_host_int_stats(out, {k: cols[k] for k in wanted_ints}, first_event, len(span))
    if value_ids:
        _add_event_stat_parts(out, values, list(value_ids), valid, kept, first_event, wanted.names)
    return len(span)


def _add_host_int_stats(out: PlaneTables, host_ints: dict, first_event: int, n: int) -> None:
    """The TPU host events that carry a step number or a run id, with their integer stats (-1: absent; xplane
    makes the table: no pandas here, so that a worker decoding planes never imports it)."""
    has = np.zeros(n, bool)
    for k in ("step_num", "run_id"):
        has |= host_ints.get(k, np.full(n, -1)) >= 0
    if has.any():
        out.int_stats.append({"event": first_event + np.flatnonzero(has), **{k: v[has] for k, v in host_ints.items()}})


def _add_event_stat_parts(out: PlaneTables, values: dict, names: list, valid: np.ndarray, kept: np.ndarray | None,
                          first_event: int, stat_names: dict) -> None:
    """The rows of one line's events that carry a wanted stat, and every EVENT_STAT_NAMES column on them.

    Names (hlo_op, hlo_module) are strings or references: decoded column-wise, converted once per distinct
    value (event_stat_values)."""
    kinds = np.stack([values[name].kind for name in names])
    has = np.flatnonzero((kinds != 0).any(axis=0) & valid)
    out.stat_rows.append(first_event + (has if kept is None else kept[has]))
    for name in EVENT_STAT_NAMES:
        v = values.get(name)
        if name in _INT_EVENT_STATS:
            part = (event_stat_values.int_values(v, has) if v is not None
                    else (np.zeros(has.size, np.int64), np.zeros(has.size, bool)))
        else:
            part = (event_stat_values.text_codes(v, has, stat_names) if v is not None
                    else (np.zeros(has.size, np.int32), np.full(1, None, object)))
        out.stat_parts.setdefault(name, []).append(part)


def decode_planes(planes: list[tuple[str, bytes]], tpu_capture: bool, workers: int, queue=None) -> list[PlaneTables]:
    """Every plane decoded, in order. With ``workers`` > 1 (Linux) forked processes decode planes alongside
    this one (plane_queue); ``queue``: those processes, already started on these planes (early_read).
    ``workers`` is capped by the cores and the planes (worker_start.capped_workers)."""
    from . import plane_queue  # (it imports this module)

    if queue is not None:
        return plane_queue.finish(queue)
    workers = capped_workers(workers, len(planes))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        results = []
        for i in range(len(planes)):
            results.append(decode_plane(i, planes[i][0], planes[i][1], tpu_capture))
            planes[i] = (planes[i][0], b"")
        return results
    return plane_queue.finish(plane_queue.start(planes, tpu_capture, workers - 1))  # and this process
