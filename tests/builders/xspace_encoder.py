"""The protobuf side of the test captures: a TPU-shaped XSpace written event by event (test fixtures).

The layout mirrors the real TPU v6e capture in sample_profiles/tpu_v6e_host_offload:

- one plane per TensorCore, ``/device:TPU:<n>`` (plane ids 2, 10, 18, ... as in the sample), with plane stats
  ``device_type_string``, ``peak_teraflops_per_second``, ``peak_hbm_bw_gigabytes_per_second`` ...;
- lines ``XLA Modules`` (id 2), ``XLA Ops`` (3), ``Async XLA Ops`` (4), ``XLA TraceMe`` (6), ``Overlay`` (7),
  all with ``timestamp_ns = 0`` by default and absolute picosecond offsets, as in the sample;
- one ``XStatMetadata`` per stat name per plane and one ``XEventMetadata`` per distinct op per plane;
  ``XLA Ops`` metadata ``name`` is the full HLO instruction text and ``display_name`` the op name; its stats
  (hlo_category, program_id, symbol_id, flops, ...) are typed as in the sample (int64 / uint64 / str);
  op events carry ``device_offset_ps`` and ``device_duration_ps`` (xprof reads the latter for op times);
- ``Async XLA Ops`` events reuse the start instruction's text as metadata name, ``display_name`` such as
  ``async-copy``, and an event stat ``hlo_op`` naming the done op; they span start-op start to done-op end;
- a ``/host:CPU`` plane with a ``main/<tid>`` thread line carrying ``PjitFunction(<fn>)`` dispatch events,
  and a ``Task Environment`` plane with profile start/stop times.

Times given to the builder are absolute picoseconds on the capture's timebase
(``line.timestamp_ns * 1000 + event.offset_ps``).

The ``XLA Ops`` line is encoded column-wise with numpy (``_encode_op_events``) rather than through one
protobuf object per event: that is what lets ``large_capture`` write ~1M events in seconds on two cores.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from xladiag.parsers.xspace_schema import XLine, XPlane, XSpace

from .hlo_snippets import result_shape_of, shape_bytes

PS_PER_US = 1_000_000
PS_PER_S = 1_000_000_000_000

V6E_DEVICE_TYPE = "TPU v6 Lite"
V6E_PEAK_TFLOPS = 918.0
V6E_PEAK_HBM_GBPS = 1637.993152512

# Secondary v6e plane stats copied from the real capture so planes look complete.
_V6E_EXTRA_PLANE_STATS: dict[str, float | int] = {
    "peak_cmem_rd_bw_gigabytes_per_second": 0.0,
    "peak_cmem_wr_bw_gigabytes_per_second": 0.0,
    "peak_vmem_rd_bw_gigabytes_per_second": 23296.0099876864,
    "peak_vmem_wr_bw_gigabytes_per_second": 16128.031693209601,
    "peak_sram_rd_bw_gigabytes_per_second": 23296.0099876864,
    "peak_sram_wr_bw_gigabytes_per_second": 16128.031693209601,
    "has_megacore": 0,
    "has_merged_vmem": 1,
}

# Line ids as in the real capture.
_LINE_MODULES, _LINE_OPS, _LINE_ASYNC, _LINE_TRACEME, _LINE_OVERLAY = 2, 3, 4, 6, 7

TRAIN_STEP_PROGRAM = "jit_train_step"
TRAIN_STEP_PROGRAM_ID = 7419372901264803517  # > 2**62, like real fingerprints (uint64)
FIRST_STEP_START_PS = 5_000_000_000_000  # 5 s into the timebase, like the sample's offsets
START_OP_PS = 5_000  # real copy-start / all-gather-start events last a few ns


def _varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Little-endian base-128 varints of non-negative ints: (n x width bytes, byte count per row)."""
    x = np.array(values, dtype=np.uint64, copy=True)
    n = x.shape[0]
    top = int(x.max()) if n else 0
    width = max(1, (top.bit_length() + 6) // 7)
    out = np.empty((n, width), np.uint8)
    lens = np.ones(n, np.int64)
    for i in range(width):
        out[:, i] = (x & np.uint64(0x7F)).astype(np.uint8)
        x >>= np.uint64(7)
        more = x != 0
        out[:, i] |= more.astype(np.uint8) << 7
        lens += more
    return out, lens


def _const(n: int, raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    return np.broadcast_to(np.frombuffer(raw, np.uint8), (n, len(raw))), np.full(n, len(raw), np.int64)


def _join_rows(parts: list[tuple[np.ndarray, np.ndarray]]) -> bytes:
    """Concatenate, row by row, the first lens[i] bytes of every part: one message per row."""
    mats = [m for m, _ in parts]
    masks = [np.arange(m.shape[1])[None, :] < lens[:, None] for m, lens in parts]
    return np.hstack(mats)[np.hstack(masks)].tobytes()


def _varint_bytes(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _encode_op_events(metadata_id: np.ndarray, offset_ps: np.ndarray, duration_ps: np.ndarray,
                      device_offset_ps: np.ndarray, offset_stat_id: int, duration_stat_id: int) -> bytes:
    """Serialized ``XLine.events`` entries (field 4) for XLA Ops events with the two device stats.

    XEvent: metadata_id=1, offset_ps=2, duration_ps=3, stats=4 (XStat: metadata_id=1, uint64_value=3).
    """
    n = len(metadata_id)
    if n == 0:
        return b""
    mid = _varint_matrix(metadata_id)
    off = _varint_matrix(offset_ps)
    dur = _varint_matrix(duration_ps)
    stat_parts = []
    stat_lens = np.zeros(n, np.int64)
    for sid, vals in ((offset_stat_id, device_offset_ps), (duration_stat_id, duration_ps)):
        sid_raw = b"\x08" + _varint_bytes(sid) + b"\x18"
        v = _varint_matrix(vals)
        body_len = len(sid_raw) + v[1]  # < 128 always: one length byte
        stat_parts += [_const(n, b"\x22"), (body_len.astype(np.uint8)[:, None], np.ones(n, np.int64)),
                       _const(n, sid_raw), v]
        stat_lens += 2 + body_len
    event_len = (1 + mid[1]) + (1 + off[1]) + (1 + dur[1]) + stat_lens
    parts = [_const(n, b"\x22"), _varint_matrix(event_len),
             _const(n, b"\x08"), mid, _const(n, b"\x10"), off, _const(n, b"\x18"), dur] + stat_parts
    return _join_rows(parts)


def _field_bytes(field: int, payload: bytes) -> bytes:
    return _varint_bytes((field << 3) | 2) + _varint_bytes(len(payload)) + payload


def memory_access_breakdown(entries: Iterable[tuple[int, int, int]]) -> bytes:
    """The ``memory_access_breakdown`` bytes stat: repeated {operation_type (1 read, 2 write),
    memory_space (1 HBM), bytes}, encoded as the v6e sample does."""
    out = b""
    for op_type, space, nbytes in entries:
        body = b"\x08" + _varint_bytes(op_type) + b"\x10" + _varint_bytes(space) + b"\x18" + _varint_bytes(nbytes)
        out += b"\x0a" + _varint_bytes(len(body)) + body
    return out


def default_breakdown(hlo_text: str, category: str, bytes_accessed: int) -> bytes:
    """HBM reads and writes for an op: the result is written, the rest of ``bytes_accessed`` read.
    Async start/done halves get an empty breakdown, as the sample's copy-start does."""
    if not bytes_accessed or category.endswith("-start") or category.endswith("-done"):
        return b""
    write = min(shape_bytes(result_shape_of(hlo_text)), bytes_accessed)
    return memory_access_breakdown([(1, 1, bytes_accessed - write), (2, 1, write)] if write < bytes_accessed
                                   else [(2, 1, write)])


def _core_details(index: int) -> bytes:
    """xprof's CoreDetails message (bytes stat) as the sample writes it: device_ordinal=2, local_chip_id=4,
    global_chip_id=5, global_core_id=6 (zero fields omitted); xprof warns when it is missing."""
    out = b""
    for field, value in ((2, index), (4, index), (5, index), (6, index)):
        if value:
            out += _varint_bytes(field << 3) + _varint_bytes(value)
    return out


class _StatTable:
    """One XStatMetadata per stat name per plane; strings as str_value or interned ref_value."""

    def __init__(self, plane, use_ref_values: bool):
        self.plane = plane
        self.ids: dict[bytes, int] = {}
        self.use_ref_values = use_ref_values

    def id(self, name: str | bytes) -> int:
        key = name.encode() if isinstance(name, str) else name
        sid = self.ids.get(key)
        if sid is None:
            sid = len(self.ids) + 1
            self.ids[key] = sid
            md = self.plane.stat_metadata[sid]
            md.id = sid
            md.name = key
        return sid

    def set(self, stat, name: str, value) -> None:
        stat.metadata_id = self.id(name)
        if isinstance(value, str):
            if self.use_ref_values:
                stat.ref_value = self.id(value)
            else:
                stat.str_value = value.encode()
        elif isinstance(value, bytes):
            stat.bytes_value = value
        elif isinstance(value, float):
            stat.double_value = value
        elif isinstance(value, _U64):
            stat.uint64_value = int(value)
        else:
            stat.int64_value = int(value)


class _U64(int):
    """Marks a stat value that the real capture stores as uint64_value."""


class _Device:
    def __init__(self, index: int, plane_id: int, use_ref_values: bool):
        self.index = index
        self.plane = XPlane(id=plane_id, name=f"/device:TPU:{index}".encode())
        self.stats = _StatTable(self.plane, use_ref_values)
        self.event_md: dict[tuple[str, str], int] = {}  # (kind, key) -> XEventMetadata id
        self.op_md_by_name: dict[str, int] = {}
        self.op_stats_source: dict[str, list] = {}  # op name -> metadata stats, reused by async events
        # XLA Ops events, column chunks: (metadata ids, start ps, duration ps)
        self.op_chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.op_pending: tuple[list[int], list[int], list[int]] = ([], [], [])
        self.modules: list[tuple[int, int, int, int]] = []  # start, dur, md id, run_id
        self.asyncs: list[tuple[int, int, int, str]] = []  # start, dur, md id, done op
        self.tracemes: list[tuple[int, int, int]] = []  # start, dur, md id

    def metadata(self, kind: str, key: str, name: str, display_name: str = "") -> tuple[int, bool]:
        mid = self.event_md.get((kind, key))
        if mid is not None:
            return mid, False
        mid = len(self.event_md) + 1
        self.event_md[(kind, key)] = mid
        md = self.plane.event_metadata[mid]
        md.id = mid
        md.name = name.encode()
        if display_name:
            md.display_name = display_name.encode()
        return mid, True


class TpuCaptureBuilder:
    """Accumulates TPU device activity and serializes it as one host's ``XSpace``."""

    def __init__(self, device_type: str = V6E_DEVICE_TYPE, peak_tflops: float = V6E_PEAK_TFLOPS,
                 peak_hbm_gbps: float = V6E_PEAK_HBM_GBPS, num_devices: int = 4, host: str = "t1v-n-test", *,
                 line_timestamp_ns: int = 0, device_clock_skew_ps: int = 225_045_750,
                 use_ref_values: bool = False, extra_plane_stats: dict | None = None):
        self.device_type = device_type
        self.peak_tflops = peak_tflops
        self.peak_hbm_gbps = peak_hbm_gbps
        self.num_devices = num_devices
        self.host = host
        # The sample's TPU lines use timestamp_ns=0; a non-zero base checks that readers add it.
        self.line_timestamp_ns = line_timestamp_ns
        # device_offset_ps is on the chip's own clock: a constant skew from the line timebase, as in the sample.
        self.device_clock_skew_ps = device_clock_skew_ps
        self.use_ref_values = use_ref_values
        self._devices = [_Device(i, 2 + 8 * i, use_ref_values) for i in range(num_devices)]
        self._next_symbol_id = 1
        plane_stats = {"device_type_string": device_type, "peak_teraflops_per_second": float(peak_tflops),
                       "peak_hbm_bw_gigabytes_per_second": float(peak_hbm_gbps)}
        plane_stats.update(_V6E_EXTRA_PLANE_STATS if extra_plane_stats is None else extra_plane_stats)
        for dev in self._devices:
            dev.stats.set(dev.plane.stats.add(), "core_details", _core_details(dev.index))
            for name, value in plane_stats.items():
                dev.stats.set(dev.plane.stats.add(), name, value)
        self._host_events: list[tuple[str, int, int, dict]] = []  # name, start, dur, stats
        self._host_tid = 3116817

    # -- metadata ----------------------------------------------------------------------------------
    def define_op(self, device: int, name: str, hlo_text: str, category: str, *, program_id: int,
                  flops: int = 0, bytes_accessed: int = 0, model_flops: int | None = None,
                  tf_op: str | None = None, source: str | None = None, shape_with_layout: str | None = None,
                  deduplicated_name: str | None = None, memory_breakdown: bytes | None = None) -> int:
        """The XEventMetadata id of op ``name`` on ``device``, created once per (device, name).

        ``memory_breakdown`` defaults to ``default_breakdown`` (result written, the rest read, all HBM).
        """
        dev = self._devices[device]
        mid, created = dev.metadata("op", name, hlo_text, name)
        if not created:
            return mid
        md = dev.plane.event_metadata[mid]
        values: list[tuple[str, object]] = [("hlo_category", category), ("program_id", _U64(program_id)),
                                            ("symbol_id", _U64(self._next_symbol_id))]
        self._next_symbol_id += 1
        if deduplicated_name:
            values.append(("deduplicated_name", deduplicated_name))
        values += [("flops", int(flops)), ("model_flops", int(flops if model_flops is None else model_flops)),
                   ("bytes_accessed", int(bytes_accessed)),
                   ("memory_access_breakdown", default_breakdown(hlo_text, category, bytes_accessed)
                    if memory_breakdown is None else memory_breakdown)]
        if source:
            values.append(("source", source))
        values += [("raw_bytes_accessed", int(bytes_accessed)),
                   ("shape_with_layout", shape_with_layout or result_shape_of(hlo_text))]
        if tf_op:
            values.append(("tf_op", tf_op))
        for stat_name, value in values:
            dev.stats.set(md.stats.add(), stat_name, value)
        dev.op_md_by_name[name] = mid
        dev.op_stats_source[name] = values
        return mid

    # -- events ------------------------------------------------------------------------------------
    def add_module_run(self, device: int, program_name: str, program_id: int, start_ps: int,
                       duration_ps: int, run_id: int) -> None:
        dev = self._devices[device]
        module = f"{program_name}({program_id})"
        mid, _ = dev.metadata("module", module, module)
        dev.modules.append((int(start_ps), int(duration_ps), mid, int(run_id)))
        # The runtime logs a short dependency-wait on XLA TraceMe at each launch.
        tid, _ = dev.metadata("traceme", "dependency-wait", "dependency-wait")
        dev.tracemes.append((int(start_ps) + 78, 1094, tid))

    def add_op(self, device: int, name: str, hlo_text: str, category: str, start_ps: int, duration_ps: int, *,
               program_id: int, flops: int = 0, bytes_accessed: int = 0, model_flops: int | None = None,
               tf_op: str | None = None, source: str | None = None, shape_with_layout: str | None = None,
               deduplicated_name: str | None = None) -> None:
        mid = self.define_op(device, name, hlo_text, category, program_id=program_id, flops=flops,
                             bytes_accessed=bytes_accessed, model_flops=model_flops, tf_op=tf_op, source=source,
                             shape_with_layout=shape_with_layout, deduplicated_name=deduplicated_name)
        ids, starts, durs = self._devices[device].op_pending
        ids.append(mid)
        starts.append(int(start_ps))
        durs.append(int(duration_ps))

    def add_ops_bulk(self, device: int, names_array, start_ps_array, duration_ps_array) -> None:
        """Many XLA Ops events at once; every name must already exist via ``define_op``."""
        dev = self._devices[device]
        names = np.asarray(names_array)
        uniq, inverse = np.unique(names, return_inverse=True)
        try:
            lookup = np.array([dev.op_md_by_name[str(u)] for u in uniq], dtype=np.int64)
        except KeyError as e:
            raise KeyError(f"op {e.args[0]!r} not defined on device {device}: call define_op first") from None
        dev.op_chunks.append((lookup[inverse.reshape(-1)],
                              np.asarray(start_ps_array, dtype=np.int64),
                              np.asarray(duration_ps_array, dtype=np.int64)))

    def add_async(self, device: int, start_name: str, start_text: str, done_op: str, start_ps: int,
                  end_ps: int, *, display_name: str | None = None) -> None:
        """An ``Async XLA Ops`` span from the start op's start to the done op's end.

        ``display_name`` defaults to ``async-<kind>`` (``async-copy`` as in the sample; ``async-all-gather``
        for all-gathers is our assumption). Metadata stats copy the start op's, as the sample does.
        """
        dev = self._devices[device]
        kind = re.sub(r"-start(\.\d+)?$", "", start_name).split(".")[0]
        disp = display_name or f"async-{kind}"
        mid, created = dev.metadata("async", start_name, start_text, disp)
        if created:
            md = dev.plane.event_metadata[mid]
            for stat_name, value in dev.op_stats_source.get(start_name, []):
                dev.stats.set(md.stats.add(), stat_name, value)
        dev.asyncs.append((int(start_ps), int(end_ps) - int(start_ps), mid, done_op))

    def add_host_event(self, name: str, start_ps: int, duration_ps: int, **stats) -> None:
        """An event on the host's ``main/<tid>`` thread line (e.g. ``PjitFunction(train_step)``); ``stats``
        as the runtime writes them: ``step_num`` on a ``StepTraceAnnotation``, ``run_id`` and
        ``device_ordinal`` on ``DoEnqueueProgram``."""
        self._host_events.append((name, int(start_ps), int(duration_ps), stats))

    # -- output ------------------------------------------------------------------------------------
    def _op_columns(self, dev: _Device) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        chunks = list(dev.op_chunks)
        ids, starts, durs = dev.op_pending
        if ids:
            chunks.append((np.array(ids, np.int64), np.array(starts, np.int64), np.array(durs, np.int64)))
        if not chunks:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty
        mid = np.concatenate([c[0] for c in chunks])
        start = np.concatenate([c[1] for c in chunks])
        dur = np.concatenate([c[2] for c in chunks])
        order = np.argsort(start, kind="stable")  # real lines are time-ordered
        return mid[order], start[order], dur[order]

    def _line(self, line_id: int, name: str, timestamp_ns: int, events: list, stats: _StatTable,
              stat_fn) -> bytes:
        line = XLine(id=line_id, name=name.encode(), timestamp_ns=timestamp_ns)
        base = timestamp_ns * 1000
        for ev in sorted(events, key=lambda e: e[0]):
            e = line.events.add(metadata_id=ev[2], offset_ps=ev[0] - base, duration_ps=ev[1])
            stat_fn(e, ev)
        return line.SerializeToString()

    def _device_plane_bytes(self, dev: _Device) -> bytes:
        ts = self.line_timestamp_ns
        st = dev.stats
        # Create every stat metadata the lines use before the plane header is serialized.
        for n in ("run_id", "replica_id", "queue_id", "core_type", "device_offset_ps", "device_duration_ps",
                  "hlo_op"):
            st.id(n)

        def module_stats(e, ev):
            st.set(e.stats.add(), "run_id", _U64(ev[3]))
            st.set(e.stats.add(), "replica_id", 0)
            st.set(e.stats.add(), "queue_id", _U64(0))
            st.set(e.stats.add(), "core_type", _U64(0))

        def async_stats(e, ev):
            st.set(e.stats.add(), "hlo_op", ev[3])

        modules = self._line(_LINE_MODULES, "XLA Modules", ts, dev.modules, st, module_stats)
        asyncs = self._line(_LINE_ASYNC, "Async XLA Ops", ts, dev.asyncs, st, async_stats)
        tracemes = self._line(_LINE_TRACEME, "XLA TraceMe", ts, dev.tracemes, st, lambda e, ev: None)
        overlay = XLine(id=_LINE_OVERLAY, name=b"Overlay", timestamp_ns=ts).SerializeToString()
        mid, start, dur = self._op_columns(dev)
        ops = XLine(id=_LINE_OPS, name=b"XLA Ops", timestamp_ns=ts).SerializeToString() + _encode_op_events(
            mid, start - ts * 1000, dur, start - self.device_clock_skew_ps,
            st.id("device_offset_ps"), st.id("device_duration_ps"))
        header = dev.plane.SerializeToString()  # after all stat ids exist (ref_values included)
        return header + b"".join(_field_bytes(3, ln) for ln in (modules, ops, asyncs, overlay, tracemes))

    def _time_range_ps(self) -> tuple[int, int]:
        lo, hi = [], []
        for dev in self._devices:
            ids, starts, durs = dev.op_pending
            chunks = dev.op_chunks + ([(None, np.array(starts, np.int64), np.array(durs, np.int64))] if ids else [])
            for _, start, dur in chunks:
                if len(start):
                    lo.append(int(start.min()))
                    hi.append(int((start + dur).max()))
            for s, d, *_ in dev.modules + dev.asyncs:
                lo.append(s)
                hi.append(s + d)
        return (min(lo), max(hi)) if lo else (0, 0)

    def _host_plane_bytes(self) -> bytes:
        plane = XPlane(id=0, name=b"/host:CPU")
        stats = _StatTable(plane, self.use_ref_values)
        stats.set(plane.stats.add(), "matrix_unit_utilization_percent", 0.0)
        line = plane.lines.add(id=self._host_tid, name=f"main/{self._host_tid}".encode(),
                               display_name=f"main/{self._host_tid}".encode(), timestamp_ns=212990)
        md_ids: dict[str, int] = {}
        for name, start, dur, event_stats in sorted(self._host_events, key=lambda e: e[1]):
            mid = md_ids.setdefault(name, len(md_ids) + 1)
            plane.event_metadata[mid].id = mid
            plane.event_metadata[mid].name = name.encode()
            event = line.events.add(metadata_id=mid, offset_ps=start - line.timestamp_ns * 1000, duration_ps=dur)
            for stat_name, value in event_stats.items():
                stats.set(event.stats.add(), stat_name, value)
        return plane.SerializeToString()

    def _task_env_plane_bytes(self) -> bytes:
        plane = XPlane(id=0, name=b"Task Environment")
        stats = _StatTable(plane, False)
        lo, hi = self._time_range_ps()
        stats.set(plane.stats.add(), "profile_start_time", _U64(lo // 1000))
        stats.set(plane.stats.add(), "profile_stop_time", _U64(hi // 1000 + 1))
        return plane.SerializeToString()

    def serialize(self) -> bytes:
        planes = [self._device_plane_bytes(d) for d in self._devices]
        planes += [self._host_plane_bytes(), self._task_env_plane_bytes()]
        return b"".join(_field_bytes(1, p) for p in planes) + _field_bytes(4, self.host.encode())

    def space(self):
        """The capture as an ``XSpace`` message (parsed back from the serialized bytes)."""
        s = XSpace()
        s.ParseFromString(self.serialize())
        return s

    def write(self, logdir, run: str = "2026_01_01_00_00_00") -> Path:
        """Write ``logdir/plugins/profile/<run>/<host>.xplane.pb`` (the jax.profiler.trace layout)."""
        path = Path(logdir) / "plugins" / "profile" / run / f"{self.host}.xplane.pb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.serialize())
        return path
