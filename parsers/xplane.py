"""Read one ``<host>.xplane.pb`` (a serialized XSpace) into columnar tables.

Only this module knows the wire format. It returns pandas tables, built column by
column from the protobuf, and keeps no per-event Python objects once it returns.

Hot-path notes:
- upb parses the file with each line's events left as serialized payloads, and
  ``xevent_columns`` decodes them all at once with numpy (no Python object per event).
- TPU ``XLA Ops`` lines hold most of a capture's events; of their stats only
  ``device_duration_ps`` is read. Events on the other lines, which carry names as stats,
  are decoded one by one, and only the names in ``EVENT_STAT_NAMES`` are kept.
- Strings are bytes in our schema and are decoded leniently, field by field.
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from google.protobuf.message import DecodeError

from ..errors import InputError
from . import event_stat_values
from .storage import RemotePath, as_path
from .xevent_columns import parse_plane_raw_events, read_line_events
from .xspace_schema import MemoryAccessBreakdown
from .xspace_wire import WireError, split_space


class XPlaneError(InputError):
    """A file that is not a readable xplane capture; the message names the file."""


# Per-event stats kept as columns (everything else is dropped while decoding).
EVENT_STAT_NAMES = (
    "hlo_op",
    "hlo_module",
    "program_id",
    "correlation_id",
    "run_id",
    "device_ordinal",
    "step_num",  # jax.profiler.StepTraceAnnotation: the user's step, on the host thread that ran it
)
_INT_EVENT_STATS = {"correlation_id", "run_id", "device_ordinal", "step_num"}
# On TPU captures the host threads' stats are read column-wise, integers only: the user's steps and
# which program execution each host event launched (run_id, device_ordinal match the XLA Modules line).
_TPU_HOST_INT_STATS = ("step_num", "run_id", "device_ordinal")

# Per-op metadata stats written by XLA on TPU (and some GPU) captures.
METADATA_STAT_NAMES = (
    "hlo_category",
    "program_id",
    "flops",
    "model_flops",
    "bytes_accessed",
    "raw_bytes_accessed",
    "shape_with_layout",
    "tf_op",
    "source",
    "deduplicated_name",
)
_NUMERIC_METADATA_STATS = {"flops", "model_flops", "bytes_accessed", "raw_bytes_accessed"}

# Lines whose per-event stats we never need (the hot, op-per-event lines on accelerators).
_LINES_WITHOUT_EVENT_STATS = {"XLA Ops", "XLA TraceMe", "Sparse Core Ops", "Overlay"}

_MEMORY_SPACE_HBM = 1
_TPU_DEVICE_PLANE = re.compile(r"^/device:TPU:\d+$")

# TPU op events carry the device's own measurement. The host-timeline duration of an event
# is sometimes clipped to 0 and its time given to a neighbouring op (45 of 1504 events on one
# core of the real v6e sample, and others stretched); xprof reads device_duration_ps, and so
# do we for what an op costs. The timeline itself (start, span) stays the host one,
# consistent with module and step events (device_offset_ps is not on the same clock).
_DEVICE_DURATION_STAT = "device_duration_ps"


# Longer strings are damage (the longest real ones are HLO instruction texts of a few KB): cut, so
# that a garbage length never turns into a str many times its size.
_MAX_TEXT_BYTES = 1 << 20


def _text(raw: bytes) -> str:
    return raw[:_MAX_TEXT_BYTES].decode("utf-8", errors="replace")


@dataclass(frozen=True)
class XSpaceTables:
    """One host's capture as tables. ``plane``/``line`` columns index ``planes``/``lines``."""

    path: Path
    hostname: str
    planes: pd.DataFrame  # plane, plane_id, name
    plane_stats: tuple  # per plane row: {stat name: value}
    lines: pd.DataFrame  # line, plane, line_id, name, display_name, timestamp_ns
    # span_ps: the event's length on the host timeline (for interval arithmetic);
    # duration_ps: what the op cost: the device's device_duration_ps where present (TPU), else span_ps.
    events: pd.DataFrame  # plane, line, metadata_id, start_ps, span_ps, duration_ps
    # Sparse: one row per event that carries any of EVENT_STAT_NAMES; ``event`` is its row in ``events``.
    event_stats: pd.DataFrame
    event_metadata: pd.DataFrame  # plane, metadata_id, name, display_name, METADATA_STAT_NAMES…, hbm_bytes
    # Each compiled program's optimized module as serialized xla.HloProto, from the /host:metadata
    # plane: (program_id as text, program name e.g. 'jit_train_step', bytes). Read by parsers.hlo_proto.
    hlo_protos: tuple = ()
    fingerprint: str = ""  # of the planes kept: byte-identical host files share it
    # What was left out while reading, by kind: oversize_names, duplicate_planes, unrepresentable_starts.
    anomalies: dict = field(default_factory=dict)


def _stat_value(stat, stat_names: dict[int, str]):
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    if kind == "ref_value":
        return stat_names.get(value)
    if kind == "str_value":
        return _text(value)
    return value  # numbers; bytes_value stays bytes


def _stats_dict(stats, stat_names: dict[int, str]) -> dict:
    return {stat_names.get(s.metadata_id, f"#{s.metadata_id}"): _stat_value(s, stat_names) for s in stats}


def _hbm_bytes(breakdown: bytes | None) -> float:
    """HBM bytes read+written from the ``memory_access_breakdown`` stat; NaN when absent/empty."""
    if not breakdown:
        return np.nan
    msg = MemoryAccessBreakdown()
    try:
        msg.ParseFromString(breakdown)
    except DecodeError:
        return np.nan
    total = sum(m.bytes for m in msg.memory_accessed if m.memory_space == _MEMORY_SPACE_HBM)
    return float(total) if msg.memory_accessed else np.nan


def parse_xspace_bytes(data: bytes, path: Path | str = "<bytes>") -> XSpaceTables:
    return _parse(data, as_path(path))


def _parse(buf, path: Path) -> XSpaceTables:
    """Tables of the XSpace in ``buf`` (bytes or a read-only mmap), one plane in memory at a time."""
    try:
        layout = split_space(buf)
    except WireError as exc:
        raise XPlaneError(f"{path}: not a readable XSpace protobuf (truncated or corrupt): {exc}") from None
    if not layout.planes:
        raise XPlaneError(f"{path}: no planes in this file; it is not an xplane capture (or it is empty)")
    anomalies = {"oversize_names": layout.oversize_names, "duplicate_planes": layout.duplicate_planes,
                 "unrepresentable_starts": 0}

    plane_rows, plane_stats, line_rows, meta_rows = [], [], [], []
    hlo_protos: list[tuple[str, str, bytes]] = []
    ev_plane, ev_line, ev_meta, ev_start, ev_span, ev_dur = [], [], [], [], [], []
    stat_rows: list[np.ndarray] = []  # per named line: event rows that carry a wanted stat
    stat_parts: dict[str, list] = {}  # per stat name: its values on those rows, line by line
    int_stat_frames: list[pd.DataFrame] = []  # integer stats read column-wise (TPU host threads)
    wanted_stats = set(EVENT_STAT_NAMES)
    num_events = 0

    # On TPU captures op identity lives in the device planes' metadata; the host threads' per-event
    # stats are never read, and decoding them would be the slowest part of the parse.
    tpu_capture = any(_TPU_DEVICE_PLANE.match(name) for name, _ in layout.planes)
    for plane_idx, (plane_name, _) in enumerate(layout.planes):
        try:
            plane = parse_plane_raw_events(layout.planes[plane_idx][1])
        except DecodeError as exc:
            raise XPlaneError(f"{path}: not a readable XSpace protobuf (truncated or corrupt): {exc}") from None
        layout.planes[plane_idx] = (plane_name, b"")  # its bytes are in the message now
        is_host_plane = plane_name.startswith("/host:")
        stat_names = {k: _text(v.name) for k, v in plane.stat_metadata.items()}
        plane_rows.append((plane_idx, plane.id, plane_name))
        plane_stats.append(_stats_dict(plane.stats, stat_names))

        is_metadata_plane = plane_name == _METADATA_PLANE
        for md_id, md in plane.event_metadata.items():
            stats = _stats_dict(md.stats, stat_names)
            if is_metadata_plane and isinstance(stats.get(_HLO_PROTO_STAT), bytes):
                hlo_protos.append(_program_entry(_text(md.name), stats))
                continue
            row = {
                "plane": plane_idx,
                "metadata_id": md_id,
                "name": _text(md.name),
                "display_name": _text(md.display_name),
                "hbm_bytes": _hbm_bytes(stats.get("memory_access_breakdown")),
            }
            for key in METADATA_STAT_NAMES:
                value = stats.get(key)
                if isinstance(value, bytes):
                    value = _text(value)
                elif key == "program_id" and value is not None:
                    value = str(value)
                row[key] = value
            meta_rows.append(row)

        wanted_ids = {k for k, v in stat_names.items() if v in wanted_stats}
        device_duration_id = next((k for k, v in stat_names.items() if v == _DEVICE_DURATION_STAT), None)
        for line in plane.lines:
            line_idx = len(line_rows)
            line_name = _text(line.name)
            line_rows.append((line_idx, plane_idx, line.id, line_name, _text(line.display_name), line.timestamp_ns))
            raw_events = list(line.events)  # serialized XEvent payloads (see xevent_columns)
            n = len(raw_events)
            if n == 0:
                continue
            want_duration = device_duration_id is not None and line_name == "XLA Ops"
            wanted_ints = {_DEVICE_DURATION_STAT: device_duration_id} if want_duration else {}
            if tpu_capture and is_host_plane:
                wanted_ints = {k: v for v, k in stat_names.items() if k in _TPU_HOST_INT_STATS}
            value_ids = {}
            if line_name not in _LINES_WITHOUT_EVENT_STATS and wanted_ids and not (tpu_capture and is_host_plane):
                for k in wanted_ids:
                    value_ids.setdefault(stat_names[k], []).append(k)
            try:
                cols = read_line_events(raw_events, line.timestamp_ns, wanted_ints, value_ids)
            except ValueError as exc:
                raise XPlaneError(f"{path}: corrupt event on line {line_name!r}: {exc}") from None
            valid = cols.pop("start_valid")
            values = cols.pop("stat_values", None)
            kept = np.cumsum(valid) - 1  # each event's row among the kept ones of this line
            if not valid.all():  # a start past the int64 range (damaged timestamp or offset): dropped
                anomalies["unrepresentable_starts"] += int(n - kept[-1] - 1)
                cols = {key: column[valid] for key, column in cols.items()}  # stat values: rows chosen below
            span = cols["duration_ps"]
            duration = np.where(cols[_DEVICE_DURATION_STAT] >= 0, cols[_DEVICE_DURATION_STAT], span) if want_duration else span
            ev_meta.append(cols["metadata_id"])
            ev_start.append(cols["start_ps"])
            ev_span.append(span)
            ev_dur.append(duration)
            ev_plane.append(np.full(len(span), plane_idx, np.int32))
            ev_line.append(np.full(len(span), line_idx, np.int32))
            if tpu_capture and is_host_plane and wanted_ints:
                host_ints = {k: cols[k] for k in wanted_ints}
                has = np.zeros(len(span), bool)
                for k in ("step_num", "run_id"):
                    has |= host_ints.get(k, np.full(len(span), -1)) >= 0
                if has.any():
                    int_stat_frames.append(pd.DataFrame(
                        {"event": num_events + np.flatnonzero(has),
                         **{k: pd.Series(v[has], dtype="Int64").where(v[has] >= 0)  # -1: absent
                            for k, v in host_ints.items()}}))
            if value_ids:
                # Names (hlo_op, hlo_module) are strings or references: decoded column-wise, converted once
                # per distinct value (event_stat_values).
                kinds = np.stack([values[name].kind for name in value_ids])
                has = np.flatnonzero((kinds != 0).any(axis=0) & valid)
                stat_rows.append(num_events + kept[has])
                for name in EVENT_STAT_NAMES:
                    v = values.get(name)
                    if name in _INT_EVENT_STATS:
                        part = (event_stat_values.int_values(v, has) if v is not None
                                else (np.zeros(has.size, np.int64), np.zeros(has.size, bool)))
                    else:
                        part = (event_stat_values.text_values(v, has, stat_names) if v is not None
                                else np.full(has.size, None, object))
                    stat_parts.setdefault(name, []).append(part)
            num_events += len(span)
        del plane  # release this plane's protobuf arena before reading the next

    hostnames = [_text(h) for h in layout.hostnames]

    planes = pd.DataFrame(plane_rows, columns=["plane", "plane_id", "name"])
    lines = pd.DataFrame(line_rows, columns=["line", "plane", "line_id", "name", "display_name", "timestamp_ns"])
    core = ("plane", "line", "metadata_id", "start_ps", "span_ps", "duration_ps")
    if ev_meta:
        # copy=False: one block per column, no 2-D copy of millions of rows (pandas consolidates otherwise).
        events = pd.DataFrame(
            dict(zip(core, map(np.concatenate, (ev_plane, ev_line, ev_meta, ev_start, ev_span, ev_dur)))), copy=False
        )
    else:
        events = pd.DataFrame({c: pd.Series(dtype="int64") for c in core})
    event_stats = pd.DataFrame({"event": np.concatenate(stat_rows) if stat_rows else np.zeros(0, np.int64)})
    for name in EVENT_STAT_NAMES:
        parts = stat_parts.get(name, [])
        event_stats[name] = (event_stat_values.int_column(parts) if name in _INT_EVENT_STATS
                             else event_stat_values.text_column(parts))
    if int_stat_frames:
        event_stats = pd.concat([event_stats, *int_stat_frames], ignore_index=True)
    meta_cols = ["plane", "metadata_id", "name", "display_name", *METADATA_STAT_NAMES, "hbm_bytes"]
    event_metadata = pd.DataFrame(meta_rows, columns=meta_cols)
    for key in _NUMERIC_METADATA_STATS:
        event_metadata[key] = pd.to_numeric(event_metadata[key], errors="coerce")

    hostname = hostnames[0] if hostnames else _hostname_from_path(path)
    return XSpaceTables(
        path=path,
        hostname=hostname,
        planes=planes,
        plane_stats=tuple(plane_stats),
        lines=lines,
        events=events,
        event_stats=event_stats,
        event_metadata=event_metadata,
        hlo_protos=tuple(hlo_protos),
        fingerprint=layout.fingerprint,
        anomalies=anomalies,
    )


_METADATA_PLANE = "/host:metadata"
_HLO_PROTO_STAT = "Hlo Proto"
_PROGRAM_NAME = re.compile(r"^(.*)\((\d+)\)$")


def _program_entry(name: str, stats: dict) -> tuple[str, str, bytes]:
    """(program id, program name, HloProto bytes); the id from the stat, else from 'name(<id>)'."""
    m = _PROGRAM_NAME.match(name)
    program = stats.get("program_id")
    program_id = str(program % 2**64) if isinstance(program, int) else (m.group(2) if m else "")
    return program_id, m.group(1) if m else name, stats[_HLO_PROTO_STAT]


def _hostname_from_path(path: Path) -> str:
    name = path.name
    return name[: -len(".xplane.pb")] if name.endswith(".xplane.pb") else path.stem


def _empty(path):
    raise XPlaneError(f"{path}: empty file")


def read_xspace(path: Path | str) -> XSpaceTables:
    """Parse one ``.xplane.pb`` file; raise :class:`XPlaneError` with a one-line reason.

    The file is mapped, not read: only the planes (one at a time) are copied out of it. A remote one
    (``gs://...``, parsers/storage.py) is read whole.
    """
    path = as_path(path)
    if isinstance(path, RemotePath):
        try:
            return _parse(path.read_bytes() or _empty(path), path)
        except OSError as exc:
            raise XPlaneError(f"{path}: cannot read: {exc.strerror or exc}") from None
    size = 0
    try:
        with open(path, "rb") as f:
            try:
                buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file (mmap refuses those)
                buf = f.read()
            except OSError:  # a file system or special file without mmap: read it
                buf = f.read()
            size = len(buf)
            if not size:
                raise XPlaneError(f"{path}: empty file")
            try:
                return _parse(buf, path)
            finally:
                if isinstance(buf, mmap.mmap):
                    buf.close()
    except OSError as exc:
        raise XPlaneError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except MemoryError:
        raise XPlaneError(f"{path}: not enough memory to read this {size:,}-byte capture") from None
