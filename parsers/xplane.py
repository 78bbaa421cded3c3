"""Read one ``<host>.xplane.pb`` (a serialized XSpace) into columnar tables.

Only this module knows the wire format. It returns pandas tables, built column by
column from the protobuf, and keeps no per-event Python objects once it returns.

Hot-path notes:
- upb parses each plane with each line's events left as serialized payloads, and
  ``xevent_columns`` decodes them all at once with numpy, where they lie in the plane's bytes
  (``xevent_runs``; no Python object per event kept). Op metadata is decoded the same way (``xmetadata_columns``).
- TPU ``XLA Ops`` lines hold most of a capture's events; of their stats only
  ``device_duration_ps`` is read. Events on the other lines, which carry names as stats,
  are decoded one by one, and only the names in ``EVENT_STAT_NAMES`` are kept.
- Strings are bytes in our schema and are decoded leniently, field by field.
"""

from __future__ import annotations

import mmap
import re
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from ..text_safety import clean_text
from . import event_stat_values
from .early_read import claim
from .input_files import open_input, read_input_bytes
from .storage import RemotePath, as_path
from .worker_start import fork_is_safe, usable_cores
from .xplane_metadata import _NUMERIC_METADATA_STATS, META_COLUMNS, _text
from .xplane_planes import _INT_EVENT_STATS, _TPU_DEVICE_PLANE, EVENT_STAT_NAMES, PlaneError, decode_planes
from .xspace_wire import PlaneTooLarge, WireError, fingerprint, split_space


class XPlaneError(InputError):
    """A file that is not a readable xplane capture; the message names the file."""


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
    # What was left out while reading, by kind: oversize_names, cut_names, duplicate_planes, unrepresentable_starts,
    # duplicate_lines.
    anomalies: dict = field(default_factory=dict)


def parse_xspace_bytes(data: bytes, path: Path | str = "<bytes>", workers: int = 1) -> XSpaceTables:
    return _parse(data, as_path(path), workers)


def _parse(buf, path: Path, workers: int = 1, early: tuple | None = None) -> XSpaceTables:
    """Tables of the XSpace in ``buf`` (bytes or a read-only mmap); ``workers`` processes decode its planes
    (none but this one for a small file, whatever was asked: a pool costs more than it saves); ``early``:
    (layout, plane queue) already started on ``buf`` (early_read)."""
    if len(buf) < _PARALLEL_BYTES:
        workers = 1
    layout, queue = early if early is not None else (_layout(buf, path), None)
    decoded = _decode(layout, path, workers, queue)
    return _tables(layout, decoded, path)


def _layout(buf, path: Path):
    try:
        layout = split_space(buf)
    except WireError as exc:
        kind = _other_format(bytes(buf[:64]))
        if kind:  # a file named .xplane.pb that is something else: say what, not "unsupported wire type 3"
            raise XPlaneError(f"{path}: {kind}, not an XSpace protobuf; point at the .xplane.pb files "
                              "jax.profiler.trace writes (plugins/profile/<run>/<host>.xplane.pb)") from None
        raise XPlaneError(f"{path}: not a readable XSpace protobuf (truncated or corrupt): {exc}") from None
    except PlaneTooLarge as exc:
        raise XPlaneError(f"{path}: {exc}") from None
    if not layout.planes:
        raise XPlaneError(f"{path}: no planes in this file; it is not an xplane capture (or it is empty)")
    return layout


def _tables(layout, decoded: list, path: Path) -> XSpaceTables:
    joined = _JoinedPlanes.of(decoded)
    plane_rows = [p.plane_row for p in decoded]
    plane_stats = [p.plane_stats for p in decoded]
    meta_rows = [row for p in decoded for row in p.meta_rows]
    hlo_protos = [entry for p in decoded for entry in p.hlo_protos]
    host_fingerprint = fingerprint([p.digest for p in decoded])
    del decoded

    hostnames = [_text(h) for h in layout.hostnames]
    return XSpaceTables(
        path=path,
        hostname=hostnames[0] if hostnames else _hostname_from_path(path),
        planes=pd.DataFrame(plane_rows, columns=["plane", "plane_id", "name"]),
        plane_stats=tuple(plane_stats),
        lines=pd.DataFrame(joined.line_rows,
                           columns=["line", "plane", "line_id", "name", "display_name", "timestamp_ns"]),
        events=joined.events(),
        event_stats=joined.event_stats(),
        event_metadata=_event_metadata(meta_rows),
        hlo_protos=tuple(hlo_protos),
        fingerprint=host_fingerprint,
        anomalies={"oversize_names": layout.oversize_names, "cut_names": layout.cut_names,
                   "duplicate_planes": layout.duplicate_planes,
                   "unrepresentable_starts": joined.unrepresentable_starts,
                   "duplicate_lines": joined.duplicate_lines},
    )


# A device plane's index (``/device:TPU:<n>``) past this is damage: no host has 2**31 devices, and the index
# must fit the integer columns that number devices.
_MAX_DEVICE_INDEX = 2**31 - 1
_DEVICE_INDEX = re.compile(r"^/device:[^:]*:(\d+)$")


def _check_device_names(layout, path: Path) -> None:
    for name, _ in layout.planes:
        m = _DEVICE_INDEX.match(name)
        if m and (len(m.group(1)) > 10 or int(m.group(1)) > _MAX_DEVICE_INDEX):
            shown = name if len(name) <= 80 else name[:77] + "..."
            raise XPlaneError(f"{path}: plane name {shown!r}: device index past {_MAX_DEVICE_INDEX} "
                              "(a damaged file?)")


def _decode(layout, path: Path, workers: int, queue=None) -> list:
    """Every plane of the file decoded (xplane_planes), a failure named with the file."""
    try:
        _check_device_names(layout, path)
    except XPlaneError:
        if queue is not None:  # started early on this file: its workers are not wanted
            from .plane_queue import close

            close(queue, abandon=True)
        raise
    tpu_capture = any(_TPU_DEVICE_PLANE.match(name) for name, _ in layout.planes)
    try:
        return decode_planes(layout.planes, tpu_capture, workers, queue)
    except PlaneError as exc:
        raise XPlaneError(f"{path}: {exc}") from None
    except BrokenProcessPool:
        raise XPlaneError(f"{path}: a process decoding its planes died (out of memory?): "
                          "rerun with --workers 1") from None


_EVENT_COLUMNS = ("plane", "line", "metadata_id", "start_ps", "span_ps", "duration_ps")


@dataclass
class _JoinedPlanes:
    """The planes' lines, events and event stats, renumbered from the plane's own 0 to the whole file's."""

    line_rows: list = field(default_factory=list)
    ev_parts: list = field(default_factory=list)  # per plane: (plane index, first line, its event columns)
    stat_rows: list = field(default_factory=list)
    stat_parts: dict = field(default_factory=dict)
    int_stats: list = field(default_factory=list)
    num_events: int = 0
    unrepresentable_starts: int = 0
    duplicate_lines: int = 0

    @classmethod
    def of(cls, decoded: list) -> _JoinedPlanes:
        out = cls()
        for plane in decoded:  # numbered from 0 in each plane: offset into the whole file's lines and events
            plane_idx, line_base = plane.plane_row[0], len(out.line_rows)
            out.line_rows += [(line_base + i, plane_idx, *rest) for i, *rest in plane.line_rows]
            n = sum(map(len, plane.events["line"]))
            out.ev_parts.append((plane_idx, line_base, plane.events))
            out.stat_rows += [out.num_events + rows for rows in plane.stat_rows]
            for name, parts in plane.stat_parts.items():
                out.stat_parts.setdefault(name, []).extend(parts)
            out.int_stats += [_int_stats_frame(part, out.num_events) for part in plane.int_stats]
            out.unrepresentable_starts += plane.unrepresentable_starts
            out.duplicate_lines += plane.duplicate_lines
            out.num_events += n
        return out

    def events(self) -> pd.DataFrame:
        if not self.num_events:
            return pd.DataFrame({c: pd.Series(dtype="int64") for c in _EVENT_COLUMNS})
        counts = [sum(map(len, columns["line"])) for *_, columns in self.ev_parts]
        out = {"plane": np.repeat(np.array([plane for plane, *_ in self.ev_parts], np.int32), counts)}
        for c in _EVENT_COLUMNS[1:]:  # column by column, each part freed once copied: the peak is the parts
            out[c] = column = np.empty(self.num_events, np.int32 if c == "line" else np.int64)  # and one column
            at = 0
            for _, line_base, columns in self.ev_parts:
                for part in columns.pop(c):  # each plane's parts (runs of its lines), in order
                    column[at:at + len(part)] = part
                    if c == "line":
                        column[at:at + len(part)] += np.int32(line_base)
                    at += len(part)
        self.ev_parts = []
        # copy=False: one block per column, no 2-D copy of millions of rows (pandas consolidates otherwise).
        return pd.DataFrame(out, copy=False)

    def event_stats(self) -> pd.DataFrame:
        stat_rows = self.stat_rows
        columns = {"event": np.concatenate(stat_rows) if stat_rows else np.zeros(0, np.int64)}
        for name in EVENT_STAT_NAMES:
            parts = self.stat_parts.pop(name, [])
            columns[name] = (event_stat_values.int_column(parts) if name in _INT_EVENT_STATS
                             else event_stat_values.text_column(parts))
        event_stats = pd.DataFrame(columns, copy=False)  # no copy of each column as it is added
        if self.int_stats:
            event_stats = pd.concat([event_stats, *self.int_stats], ignore_index=True)
        return event_stats


def _int_stats_frame(part: dict, first_event: int) -> pd.DataFrame:
    """A plane's integer host stats (-1: absent) as nullable columns, its events numbered in the file."""
    return pd.DataFrame({"event": part["event"] + first_event,
                         **{k: pd.Series(v, dtype="Int64").where(v >= 0) for k, v in part.items() if k != "event"}})


def _event_metadata(meta_rows: list) -> pd.DataFrame:
    event_metadata = pd.DataFrame(meta_rows, columns=list(META_COLUMNS))  # rows are tuples in this order
    for key in _NUMERIC_METADATA_STATS:
        event_metadata[key] = pd.to_numeric(event_metadata[key], errors="coerce")
    return event_metadata


_PARALLEL_BYTES = 32 << 20  # below this a file parses in well under a second: no worker worth its start


def _default_workers(size: int) -> int:
    """Cores for a large file read by a plain, single-threaded main process (the command line); 1 elsewhere:
    a per-host worker reads its host alone, and forking a multithreaded process (JAX running
    ``xladiag.profile``) risks a child waiting on a lock no thread will release."""
    import multiprocessing

    if size < _PARALLEL_BYTES or multiprocessing.parent_process() is not None or not fork_is_safe():
        return 1
    return usable_cores()


def _hostname_from_path(path: Path) -> str:
    name = clean_text(path.name)  # a file name of unknown encoding: shown in every report
    return name[: -len(".xplane.pb")] if name.endswith(".xplane.pb") else Path(name).stem


def _other_format(head: bytes) -> str | None:
    """What a file that is no XSpace holds, from its first bytes: JSON (a report, a Chrome trace), gzip."""
    start = head.lstrip()[:1]
    if start in (b"{", b"["):
        return "a JSON file (an xladiag report or a Chrome trace?)"
    if head[:2] == b"\x1f\x8b":
        return "a gzip file (a Chrome trace .trace.json.gz?)"
    return None


def _empty(path):
    raise XPlaneError(f"{path}: empty file")


def read_xspace(path: Path | str, workers: int | None = None) -> XSpaceTables:
    """Parse one ``.xplane.pb`` file; raise :class:`XPlaneError` with a one-line reason.

    The file is mapped, not read: only the planes are copied out of it. A remote one (``gs://...``,
    parsers/storage.py) is read whole. ``workers``: processes decoding its planes; by default the cores this
    process may use for a large file read by the main process (a worker of a per-host map reads its host
    alone), else 1.
    """
    path = as_path(path)
    if isinstance(path, RemotePath):
        try:
            data = read_input_bytes(path) or _empty(path)
            return _parse(data, path, _default_workers(len(data)) if workers is None else workers)
        except OSError as exc:
            raise XPlaneError(f"{path}: cannot read: {exc.strerror or exc}") from None
    early = claim(path)
    if early is not None:  # its planes are being decoded since the command started (early_read)
        buf, *started = early
        try:
            return _parse(buf, path, usable_cores(), tuple(started))
        finally:
            buf.close()
    size = 0
    try:
        with open_input(path) as f:  # a regular file within the read limit (input_files)
            try:
                buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file (mmap refuses those)
                buf = f.read()
            except OSError:  # a file system or special file without mmap: read it
                buf = f.read()
            size = len(buf)
            if not size:
                raise XPlaneError(f"{path}: empty file")
            if workers is None:
                workers = _default_workers(size)
            try:
                return _parse(buf, path, workers)
            finally:
                if isinstance(buf, mmap.mmap):
                    buf.close()
    except OSError as exc:
        raise XPlaneError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except MemoryError:
        raise XPlaneError(f"{path}: not enough memory to read this {size:,}-byte capture") from None
