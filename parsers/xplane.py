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
import os
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from . import event_stat_values
from .storage import RemotePath, as_path
from .worker_start import fork_is_safe
from .xplane_planes import (EVENT_STAT_NAMES, METADATA_STAT_NAMES, PlaneError, _INT_EVENT_STATS,
                            _NUMERIC_METADATA_STATS, _TPU_DEVICE_PLANE, _text, decode_planes)
from .xspace_wire import WireError, split_space


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
    # What was left out while reading, by kind: oversize_names, duplicate_planes, unrepresentable_starts.
    anomalies: dict = field(default_factory=dict)


def parse_xspace_bytes(data: bytes, path: Path | str = "<bytes>", workers: int = 1) -> XSpaceTables:
    return _parse(data, as_path(path), workers)


def _parse(buf, path: Path, workers: int = 1) -> XSpaceTables:
    """Tables of the XSpace in ``buf`` (bytes or a read-only mmap); ``workers`` processes decode its planes."""
    try:
        layout = split_space(buf)
    except WireError as exc:
        raise XPlaneError(f"{path}: not a readable XSpace protobuf (truncated or corrupt): {exc}") from None
    if not layout.planes:
        raise XPlaneError(f"{path}: no planes in this file; it is not an xplane capture (or it is empty)")
    anomalies = {"oversize_names": layout.oversize_names, "duplicate_planes": layout.duplicate_planes,
                 "unrepresentable_starts": 0}

    tpu_capture = any(_TPU_DEVICE_PLANE.match(name) for name, _ in layout.planes)
    try:
        decoded = decode_planes(layout.planes, tpu_capture, workers)
    except PlaneError as exc:
        raise XPlaneError(f"{path}: {exc}") from None
    except BrokenProcessPool:
        raise XPlaneError(f"{path}: a process decoding its planes died (out of memory?): rerun with --workers 1") from None

    line_rows, ev_parts, stat_rows, stat_parts, int_stats = [], [], [], {}, []
    num_events = 0
    for plane in decoded:  # numbered from 0 in each plane: offset into the whole file's lines and events
        plane_idx, line_base = plane.plane_row[0], len(line_rows)
        line_rows += [(line_base + i, plane_idx, *rest) for i, *rest in plane.line_rows]
        n = len(plane.events["line"])
        ev_parts.append({"plane": np.full(n, plane_idx, np.int32), **plane.events,
                         "line": plane.events["line"] + np.int32(line_base)})
        stat_rows += [num_events + rows for rows in plane.stat_rows]
        for name, parts in plane.stat_parts.items():
            stat_parts.setdefault(name, []).extend(parts)
        int_stats += [frame.assign(event=frame["event"] + num_events) for frame in plane.int_stats]
        anomalies["unrepresentable_starts"] += plane.unrepresentable_starts
        num_events += n
    plane_rows = [p.plane_row for p in decoded]
    plane_stats = [p.plane_stats for p in decoded]
    meta_rows = [row for p in decoded for row in p.meta_rows]
    hlo_protos = [entry for p in decoded for entry in p.hlo_protos]
    del decoded

    hostnames = [_text(h) for h in layout.hostnames]

    planes = pd.DataFrame(plane_rows, columns=["plane", "plane_id", "name"])
    lines = pd.DataFrame(line_rows, columns=["line", "plane", "line_id", "name", "display_name", "timestamp_ns"])
    core = ("plane", "line", "metadata_id", "start_ps", "span_ps", "duration_ps")
    if num_events:
        # copy=False: one block per column, no 2-D copy of millions of rows (pandas consolidates otherwise).
        events = pd.DataFrame({c: np.concatenate([part[c] for part in ev_parts]) for c in core}, copy=False)
    else:
        events = pd.DataFrame({c: pd.Series(dtype="int64") for c in core})
    event_stats = pd.DataFrame({"event": np.concatenate(stat_rows) if stat_rows else np.zeros(0, np.int64)})
    for name in EVENT_STAT_NAMES:
        parts = stat_parts.get(name, [])
        event_stats[name] = (event_stat_values.int_column(parts) if name in _INT_EVENT_STATS
                             else event_stat_values.text_column(parts))
    if int_stats:
        event_stats = pd.concat([event_stats, *int_stats], ignore_index=True)
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


_PARALLEL_BYTES = 32 << 20  # below this a file parses in well under a second: no worker worth its start


def _default_workers(size: int) -> int:
    """Cores for a large file read by a plain, single-threaded main process (the command line); 1 elsewhere:
    a per-host worker reads its host alone, and forking a multithreaded process (JAX running
    ``xladiag.profile``) risks a child waiting on a lock no thread will release."""
    import multiprocessing

    if size < _PARALLEL_BYTES or multiprocessing.parent_process() is not None or not fork_is_safe():
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _hostname_from_path(path: Path) -> str:
    name = path.name
    return name[: -len(".xplane.pb")] if name.endswith(".xplane.pb") else path.stem


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
            data = path.read_bytes() or _empty(path)
            return _parse(data, path, _default_workers(len(data)) if workers is None else workers)
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
