"""Build TPU-shaped xplane captures with known, injected answers (test and benchmark fixtures).

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

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from xladiag.parsers.xspace_schema import XLine, XPlane, XSpace

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


# --------------------------------------------------------------------------------------------------
# HLO text helpers
# --------------------------------------------------------------------------------------------------

_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "f64": 8}


def tpu_shape(dtype: str, dims: Sequence[int], minor_to_major: Sequence[int] | None = None,
              memory_space: int | None = None) -> str:
    """An HLO array shape with a TPU tiled layout, e.g. ``bf16[1024,4096]{1,0:T(8,128)(2,1)}``.

    Tiling follows what the v6e compiler prints: ``T(8,128)`` for 32-bit types, an extra ``(2,1)`` (bf16) or
    ``(4,1)`` (8-bit) sub-tile for packed types; rank 1 uses ``T(1024)``; scalars ``T(128)``/``T(256)``.
    """
    dims = list(dims)
    nbytes = _DTYPE_BYTES[dtype]
    pack = {2: "(2,1)", 1: "(4,1)"}.get(nbytes, "")
    if not dims:
        tiling = "T(256)" if nbytes == 2 else "T(128)"
        layout = f":{tiling}"
    else:
        order = list(minor_to_major) if minor_to_major is not None else list(range(len(dims) - 1, -1, -1))
        if len(dims) == 1:
            tiling = "T(1024)" + ("(128)" + pack if pack else "")
        else:
            tiling = "T(8,128)" + pack
        layout = ",".join(str(d) for d in order) + ":" + tiling
    if memory_space:
        layout += f"S({memory_space})"
    return f"{dtype}[{','.join(str(d) for d in dims)}]{{{layout}}}"


def array_bytes(dtype: str, dims: Sequence[int]) -> int:
    """Logical size; the fixtures use tile-aligned dims so this equals the padded size."""
    return _DTYPE_BYTES[dtype] * math.prod(dims)


def tuple_shape(*shapes: str) -> str:
    return "(" + ", ".join(shapes) + ")"


def instruction(name: str, result: str, opcode: str, operands: Iterable[tuple[str, str]] = (),
                attrs: str = "") -> str:
    """``%name = <result> opcode(<shape> %operand, ...), attrs`` as in TPU xplane op metadata names."""
    args = ", ".join(f"{shape} %{op}" for shape, op in operands)
    text = f"%{name} = {result} {opcode}({args})"
    return f"{text}, {attrs}" if attrs else text


def fusion_text(name: str, result: str, operands: Iterable[tuple[str, str]], kind: str, calls: str) -> str:
    return instruction(name, result, "fusion", operands, f"kind={kind}, calls=%{calls}")


def iota_replica_groups(group_size: int, num_devices: int) -> str:
    """Compact iota form: ``[num_groups,group_size]<=[num_devices]`` (e.g. ``[1,4]<=[4]``)."""
    return f"[{num_devices // group_size},{group_size}]<=[{num_devices}]"


def all_gather_start_text(name: str, shard: str, full: str, operand: str, *, dimension: int,
                          group_size: int = 4, num_devices: int = 4, channel_id: int = 1) -> str:
    return instruction(
        name, tuple_shape(shard, full), "all-gather-start", [(shard, operand)],
        f"channel_id={channel_id}, replica_groups={iota_replica_groups(group_size, num_devices)}, "
        f"dimensions={{{dimension}}}, use_global_device_ids=true")


def all_gather_done_text(name: str, shard: str, full: str, start_name: str) -> str:
    return instruction(name, full, "all-gather-done", [(tuple_shape(shard, full), start_name)])


def copy_text(name: str, result: str, operand_shape: str, operand: str) -> str:
    return instruction(name, result, "copy", [(operand_shape, operand)])


def copy_start_text(name: str, dest: str, source: str, operand: str) -> str:
    # Tuple is (destination, source, context) as in the sample's host-offload copies.
    return instruction(name, tuple_shape(dest, source, "u32[]{:S(2)}"), "copy-start", [(source, operand)])


def copy_done_text(name: str, dest: str, source: str, start_name: str) -> str:
    return instruction(name, dest, "copy-done", [(tuple_shape(dest, source, "u32[]{:S(2)}"), start_name)])


_RESULT_SHAPE = re.compile(r"^%\S+ = (.*?) [a-z][a-z0-9\-_]*\(")


def result_shape_of(hlo_text: str) -> str:
    m = _RESULT_SHAPE.match(hlo_text)
    return m.group(1) if m else ""


def matmul_cost(m: int, k: int, n: int, dtype: str = "bf16") -> tuple[int, int]:
    """(flops, HBM bytes) of [m,k]x[k,n]: 2mkn FLOPs; operands read once, output written once."""
    b = _DTYPE_BYTES[dtype]
    return 2 * m * k * n, b * (m * k + k * n + m * n)


_ARRAY = re.compile(r"\b(pred|s8|u8|bf16|f16|s32|u32|f32|s64|f64)\[([\d,]*)\]")


def shape_bytes(shape_text: str) -> int:
    """Bytes of every array in a (possibly tuple) shape string."""
    return sum(array_bytes(t, [int(d) for d in dims.split(",") if d]) for t, dims in _ARRAY.findall(shape_text))


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


# --------------------------------------------------------------------------------------------------
# Column-wise protobuf encoding of XLA Ops events
# --------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------
# The builder
# --------------------------------------------------------------------------------------------------

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
        self._host_events: list[tuple[str, int, int]] = []  # name, start, dur
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

    def add_host_event(self, name: str, start_ps: int, duration_ps: int) -> None:
        """An event on the host's ``main/<tid>`` thread line (e.g. ``PjitFunction(train_step)``)."""
        self._host_events.append((name, int(start_ps), int(duration_ps)))

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
        for name, start, dur in sorted(self._host_events, key=lambda e: e[1]):
            mid = md_ids.setdefault(name, len(md_ids) + 1)
            plane.event_metadata[mid].id = mid
            plane.event_metadata[mid].name = name.encode()
            line.events.add(metadata_id=mid, offset_ps=start - line.timestamp_ns * 1000, duration_ps=dur)
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


# --------------------------------------------------------------------------------------------------
# Train-step scenarios with injected answers
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OpSpec:
    """One op instance in a step template; ``async_done`` marks a start op and names its done op."""

    name: str
    text: str
    category: str
    duration_ps: int
    flops: int = 0
    bytes_accessed: int = 0
    tf_op: str | None = None
    source: str | None = None
    async_done: str | None = None
    async_display_name: str | None = None


_PEAK_FLOPS_PER_S = V6E_PEAK_TFLOPS * 1e12
_PEAK_HBM_BYTES_PER_S = V6E_PEAK_HBM_GBPS * 1e9
_TF_FWD = "jit(train_step)/jvp(Transformer)/while/body/closed_call"
_TF_BWD = "jit(train_step)/transpose(jvp(Transformer))/while/body/closed_call"
_SRC = "maxtext/layers/linears.py"


def roofline_ps(flops: int, bytes_accessed: int) -> float:
    """max(compute, memory) time at the v6e trace peaks (918 TF/s, 1637.99 GB/s), in ps."""
    return max(flops / _PEAK_FLOPS_PER_S, bytes_accessed / _PEAK_HBM_BYTES_PER_S) * PS_PER_S


def matmul_fusion(name: str, m: int, k: int, n: int, *, over_roofline: float = 1.3, lhs: str = "param.1",
                  rhs: str = "param.2", calls: str | None = None, tf_op: str | None = None,
                  duration_ps: int | None = None) -> OpSpec:
    """A ``kind=kOutput`` dot fusion [m,k]x[k,n] in bf16 taking ``over_roofline`` times its roofline."""
    flops, nbytes = matmul_cost(m, k, n)
    text = fusion_text(name, tpu_shape("bf16", [m, n]),
                       [(tpu_shape("bf16", [m, k]), lhs), (tpu_shape("bf16", [k, n]), rhs)],
                       "kOutput", calls or f"fused_computation.{name.split('.', 1)[-1]}")
    dur = duration_ps if duration_ps is not None else round(over_roofline * roofline_ps(flops, nbytes))
    return OpSpec(name, text, "convolution fusion", dur, flops, nbytes, tf_op or f"{_TF_FWD}/dot_general",
                  f"{_SRC}:120")


def loop_fusion(name: str, dims: Sequence[int], *, inputs: int = 2, over_roofline: float = 1.3,
                operand: str = "param.3", calls: str | None = None, duration_ps: int | None = None) -> OpSpec:
    """An elementwise ``kind=kLoop`` fusion over bf16 ``dims``: ``inputs`` reads and one write."""
    shape = tpu_shape("bf16", dims)
    elems = math.prod(dims)
    nbytes = (inputs + 1) * array_bytes("bf16", dims)
    text = fusion_text(name, shape, [(shape, f"{operand}.{i}" if i else operand) for i in range(inputs)],
                       "kLoop", calls or f"fused_computation.{name.split('.', 1)[-1]}")
    dur = duration_ps if duration_ps is not None else round(over_roofline * roofline_ps(elems, nbytes))
    return OpSpec(name, text, "loop fusion", dur, elems, nbytes, f"{_TF_FWD}/add", f"{_SRC}:88")


def all_gather_pair(start: str, done: str, shard_dims: Sequence[int], group_size: int, *, done_ps: int,
                    operand: str = "fusion.1", dimension: int = 0, channel_id: int = 1,
                    num_devices: int = 4) -> tuple[OpSpec, OpSpec]:
    full_dims = list(shard_dims)
    full_dims[dimension] *= group_size
    shard, full = tpu_shape("bf16", shard_dims), tpu_shape("bf16", full_dims)
    nbytes = array_bytes("bf16", full_dims)
    tf = f"{_TF_FWD}/all_gather"
    s = OpSpec(start, all_gather_start_text(start, shard, full, operand, dimension=dimension,
                                            group_size=group_size, num_devices=num_devices,
                                            channel_id=channel_id),
               "all-gather-start", START_OP_PS, 0, nbytes, tf, async_done=done)
    d = OpSpec(done, all_gather_done_text(done, shard, full, start), "all-gather-done", done_ps, 0, nbytes, tf)
    return s, d


@dataclass(frozen=True)
class StepLayout:
    """Where a scenario's steps landed: module start per (step, device), step length, gap."""

    step_ps: int
    warmup_step_ps: int
    step_gap_ps: int
    num_steps: int
    warmup: bool


def build_train_steps(template: Sequence[OpSpec], *, steps: int = 5, warmup: bool = True,
                      warmup_factor: float = 3.0, step_gap_ps: int = 10 * PS_PER_US,
                      device_stagger_ps: int = 250_000, builder: TpuCaptureBuilder | None = None,
                      program_name: str = TRAIN_STEP_PROGRAM, program_id: int = TRAIN_STEP_PROGRAM_ID,
                      ) -> tuple[TpuCaptureBuilder, StepLayout]:
    """Lay ``template`` back to back inside one ``XLA Modules`` event per step per device.

    The optional warm-up step comes first with every duration scaled by ``warmup_factor`` (compilation and
    cold caches make real first steps slower). Device d runs ``d * device_stagger_ps`` behind device 0.
    """
    b = builder or TpuCaptureBuilder()
    warm = [replace(op, duration_ps=round(op.duration_ps * warmup_factor)) for op in template]
    plans = ([warm] if warmup else []) + [list(template)] * steps
    step_ps = sum(op.duration_ps for op in template)
    warm_ps = sum(op.duration_ps for op in warm)
    for dev in range(b.num_devices):
        t = FIRST_STEP_START_PS + dev * device_stagger_ps
        for run, plan in enumerate(plans):
            module_start = t
            starts: dict[str, int] = {}
            for op in plan:
                b.add_op(dev, op.name, op.text, op.category, t, op.duration_ps, program_id=program_id,
                         flops=op.flops, bytes_accessed=op.bytes_accessed, tf_op=op.tf_op, source=op.source)
                starts[op.name] = t
                t += op.duration_ps
                for s_op in plan:
                    if s_op.async_done == op.name:
                        b.add_async(dev, s_op.name, s_op.text, op.name, starts[s_op.name], t,
                                    display_name=s_op.async_display_name)
            b.add_module_run(dev, program_name, program_id, module_start, t - module_start, run + 1)
            if dev == 0:
                # Host dispatch precedes the device work.
                b.add_host_event("PjitFunction(train_step)", module_start - 40 * PS_PER_US, 30 * PS_PER_US)
            t += step_gap_ps
    return b, StepLayout(step_ps, warm_ps, step_gap_ps, steps, warmup)


def _common_expected(b: TpuCaptureBuilder, layout: StepLayout, template: Sequence[OpSpec]) -> dict:
    per_op: dict[str, float] = {}
    for op in template:
        per_op[op.name] = per_op.get(op.name, 0.0) + op.duration_ps / PS_PER_S
    return {
        "program_name": TRAIN_STEP_PROGRAM,
        "program_id": TRAIN_STEP_PROGRAM_ID,
        "device_type": V6E_DEVICE_TYPE,
        "num_devices": b.num_devices,
        "num_steps": layout.num_steps,  # steady steps, warm-up excluded
        "warmup_steps": int(layout.warmup),
        "step_s": layout.step_ps / PS_PER_S,  # XLA Modules event duration of a steady step
        "step_period_s": (layout.step_ps + layout.step_gap_ps) / PS_PER_S,  # module start to next start
        "warmup_step_s": layout.warmup_step_ps / PS_PER_S if layout.warmup else 0.0,
        "peak_flops_per_s": _PEAK_FLOPS_PER_S,
        "peak_hbm_bytes_per_s": _PEAK_HBM_BYTES_PER_S,
        "op_self_s_per_step": per_op,  # per device, per steady step
    }


def _run(template: list[OpSpec], steps: int, warmup: bool) -> tuple[TpuCaptureBuilder, dict]:
    b, layout = build_train_steps(template, steps=steps, warmup=warmup)
    return b, _common_expected(b, layout, template)


def exposed_all_gather(n_us: float = 250.0, *, steps: int = 5, warmup: bool = True):
    """fusion.1 -> all-gather-start -> all-gather-done waiting exactly ``n_us`` -> fusion.2 -> add_fusion.

    Nothing else runs on the op line while the done waits, so all of it is exposed.
    """
    ag_s, ag_d = all_gather_pair("all-gather-start", "all-gather-done", [256, 4096], 4,
                                 done_ps=round(n_us * PS_PER_US), operand="fusion.1")
    template = [matmul_fusion("fusion.1", 256, 4096, 4096),
                ag_s, ag_d,
                matmul_fusion("fusion.2", 1024, 4096, 4096, lhs="all-gather-done"),
                loop_fusion("add_fusion", [1024, 4096])]
    b, exp = _run(template, steps, warmup)
    exp.update(exposed_collective_s_per_step=ag_d.duration_ps / PS_PER_S,
               exposed_all_gather_s_per_step=ag_d.duration_ps / PS_PER_S,
               exposed_ops=["all-gather-done"], all_gather_bytes=ag_d.bytes_accessed, replica_group_size=4)
    return b, exp


def hidden_all_gather(*, steps: int = 5, warmup: bool = True):
    """all-gather-start, a ~360 µs matmul fusion, then a 2.5 ns all-gather-done: nothing exposed."""
    ag_s, ag_d = all_gather_pair("all-gather-start", "all-gather-done", [512, 4096], 4, done_ps=2_500,
                                 operand="fusion.1")
    template = [matmul_fusion("fusion.1", 512, 4096, 4096),
                ag_s,
                matmul_fusion("fusion.2", 2048, 4096, 16384, over_roofline=1.2),
                ag_d,
                matmul_fusion("fusion.3", 2048, 4096, 4096, lhs="all-gather-done")]
    b, exp = _run(template, steps, warmup)
    exp.update(exposed_collective_s_per_step=ag_d.duration_ps / PS_PER_S,  # 2.5e-9, i.e. ~0
               hidden_collective_span_s_per_step=(START_OP_PS + template[2].duration_ps + ag_d.duration_ps)
               / PS_PER_S,
               all_gather_bytes=ag_d.bytes_accessed, replica_group_size=4)
    return b, exp


def tiny_all_gathers(k: int = 16, *, duration_us: float = 8.0, steps: int = 5, warmup: bool = True):
    """``k`` all-gathers of bf16[256,256] (128 KiB gathered, 32 KiB per shard over 4 devices), each done
    waiting ``duration_us`` exposed, interleaved with small loop fusions; one matmul closes the step.

    Per hop a ring moves one 32 KiB shard: below the ~45 kB latency-bound threshold (1 µs x 4.5e10 B/s).
    """
    template: list[OpSpec] = []
    for i in range(k):
        sfx = f".{i}" if i else ""
        template.append(loop_fusion(f"convert_fusion{sfx}", [64, 256], inputs=1,
                                    duration_ps=2 * PS_PER_US, operand=f"param.{10 + i}"))
        template += all_gather_pair(f"all-gather-start{sfx}", f"all-gather-done{sfx}", [64, 256], 4,
                                    done_ps=round(duration_us * PS_PER_US), operand=f"convert_fusion{sfx}",
                                    channel_id=i + 1)
    template.append(matmul_fusion("fusion.1", 1024, 4096, 4096))
    b, exp = _run(template, steps, warmup)
    done_ps = round(duration_us * PS_PER_US)
    exp.update(num_tiny_all_gathers_per_step=k, all_gather_bytes=array_bytes("bf16", [256, 256]),
               all_gather_shard_bytes=array_bytes("bf16", [64, 256]), replica_group_size=4,
               tiny_all_gather_s_per_step=k * done_ps / PS_PER_S,
               exposed_collective_s_per_step=k * done_ps / PS_PER_S,
               exposed_ops=[f"all-gather-done.{i}" if i else "all-gather-done" for i in range(k)])
    return b, exp


def remat_fusions(x_pct: float = 20.0, *, steps: int = 5, warmup: bool = True):
    """Forward/backward matmuls plus rematerialized clones (``fusion.12.remat``, ``fusion.14.remat2``,
    ``convert_reduce_fusion.3.remat``; tf_op ``.../checkpoint/rematted_computation/...``) taking
    ``x_pct`` % of the step (exact to one picosecond)."""
    if not 0 < x_pct < 100:
        raise ValueError("x_pct must be in (0, 100)")
    others = [matmul_fusion("fusion.12", 1024, 4096, 14336),
              matmul_fusion("fusion.14", 1024, 14336, 4096),
              loop_fusion("convert_reduce_fusion.3", [1024, 4096], inputs=1),
              matmul_fusion("fusion.31", 1024, 4096, 14336, tf_op=f"{_TF_BWD}/dot_general"),
              matmul_fusion("fusion.33", 4096, 1024, 14336, tf_op=f"{_TF_BWD}/dot_general"),
              loop_fusion("add_fusion.7", [1024, 4096])]
    other_ps = sum(op.duration_ps for op in others)
    remat_total = round(other_ps * x_pct / (100.0 - x_pct))
    tf_remat = f"{_TF_BWD}/checkpoint/rematted_computation"
    weights = [0.45, 0.45, 0.10]
    durs = [round(remat_total * w) for w in weights[:-1]]
    durs.append(remat_total - sum(durs))
    remats = [replace(others[0], name="fusion.12.remat", duration_ps=durs[0], tf_op=f"{tf_remat}/dot_general",
                      text=others[0].text.replace("%fusion.12 =", "%fusion.12.remat =")),
              replace(others[1], name="fusion.14.remat2", duration_ps=durs[1], tf_op=f"{tf_remat}/dot_general",
                      text=others[1].text.replace("%fusion.14 =", "%fusion.14.remat2 =")),
              replace(others[2], name="convert_reduce_fusion.3.remat", duration_ps=durs[2],
                      tf_op=f"{tf_remat}/convert_element_type",
                      text=others[2].text.replace("%convert_reduce_fusion.3 =",
                                                  "%convert_reduce_fusion.3.remat ="))]
    template = others[:3] + remats + others[3:]
    b, exp = _run(template, steps, warmup)
    exp.update(remat_s_per_step=remat_total / PS_PER_S,
               remat_fraction=remat_total / (other_ps + remat_total),  # == x_pct/100 to ~1e-12
               remat_ops=[op.name for op in remats])
    return b, exp


def layout_copies(y_us: float = 120.0, *, variant: str = "copy", steps: int = 5, warmup: bool = True):
    """Layout-only changes taking ``y_us`` per step in total.

    variant "copy": ``copy`` (bf16[4096,1024]{1,0:T(8,128)(2,1)} -> {0,1:...}) and ``copy.1``
    (bf16[1024,4096] likewise), operand and result differing only in layout.
    variant "transpose_fusion": ``transpose_fusion`` / ``transpose_fusion.1`` (kind=kLoop) whose result is
    the logical transpose of the operand, physically the same relayout.
    """
    a_dims, b_dims = [4096, 1024], [1024, 4096]
    y_ps = round(y_us * PS_PER_US)
    d0 = round(y_ps * 0.6)
    durs = [d0, y_ps - d0]
    layout_ops: list[OpSpec] = []
    for i, dims in enumerate((a_dims, b_dims)):
        sfx = f".{i}" if i else ""
        src = tpu_shape("bf16", dims)
        nbytes = 2 * array_bytes("bf16", dims)
        if variant == "copy":
            name = f"copy{sfx}"
            text = copy_text(name, tpu_shape("bf16", dims, [0, 1]), src, f"fusion.{i + 1}")
            layout_ops.append(OpSpec(name, text, "data formatting", durs[i], 0, nbytes,
                                     f"{_TF_FWD}/transpose", f"{_SRC}:140"))
        elif variant == "transpose_fusion":
            name = f"transpose_fusion{sfx}"
            text = fusion_text(name, tpu_shape("bf16", dims[::-1]), [(src, f"fusion.{i + 1}")], "kLoop",
                               f"fused_transpose{sfx}")
            layout_ops.append(OpSpec(name, text, "loop fusion", durs[i], 0, nbytes,
                                     f"{_TF_FWD}/transpose", f"{_SRC}:140"))
        else:
            raise ValueError(f"unknown variant {variant!r}")
    template = [matmul_fusion("fusion.1", 4096, 4096, 1024), layout_ops[0],
                matmul_fusion("fusion.2", 1024, 4096, 4096), layout_ops[1],
                loop_fusion("add_fusion", [1024, 4096])]
    b, exp = _run(template, steps, warmup)
    exp.update(layout_change_s_per_step=y_ps / PS_PER_S, layout_ops=[op.name for op in layout_ops],
               layout_change_bytes_per_step=sum(op.bytes_accessed for op in layout_ops))
    return b, exp


def clean_profile(*, steps: int = 5, warmup: bool = True):
    """Matmul fusions at 1.05x their compute roofline, loop fusions at 1.1x their HBM roofline, and one
    all-gather fully hidden under a matmul (done: 2.5 ns). Nothing here deserves a high-severity finding."""
    ag_s, ag_d = all_gather_pair("all-gather-start", "all-gather-done", [512, 4096], 4, done_ps=2_500,
                                 operand="fusion.1")
    template = [matmul_fusion("fusion.1", 2048, 4096, 4096, over_roofline=1.05),
                ag_s,
                matmul_fusion("fusion.2", 2048, 4096, 14336, over_roofline=1.05),
                ag_d,
                loop_fusion("add_fusion", [2048, 4096], over_roofline=1.1),
                matmul_fusion("fusion.3", 2048, 14336, 4096, over_roofline=1.05, lhs="add_fusion"),
                loop_fusion("multiply_fusion", [2048, 14336], over_roofline=1.1)]
    b, exp = _run(template, steps, warmup)
    exp.update(exposed_collective_s_per_step=ag_d.duration_ps / PS_PER_S,  # 2.5e-9
               matmul_time_over_roofline=1.05, loop_fusion_time_over_roofline=1.1,
               high_severity_findings=0)
    return b, exp


def host_offload_exposed(exposed_us: float = 1500.0, *, steps: int = 5, warmup: bool = True):
    """Host offload in the style of the v6e sample: ``copy-start`` reloads an activation from host memory
    ``S(5)``, ``copy-done`` waits ``exposed_us`` exposed; ``copy-start.1`` offloads a result to ``S(5)``
    and its ``copy-done.1`` completes in 3.75 ns (hidden)."""
    dims = [16, 1024, 4096]
    hbm, host = tpu_shape("bf16", dims), tpu_shape("bf16", dims, memory_space=5)
    nbytes = array_bytes("bf16", dims)
    tf = "jit(train_step)/jit(main)/device_put"
    reload_s = OpSpec("copy-start", copy_start_text("copy-start", hbm, host, "param"), "copy-start",
                      START_OP_PS, 0, nbytes, tf, async_done="copy-done", async_display_name="async-copy")
    reload_d = OpSpec("copy-done", copy_done_text("copy-done", hbm, host, "copy-start"), "copy-done",
                      round(exposed_us * PS_PER_US), 0, nbytes, tf)
    offload_s = OpSpec("copy-start.1", copy_start_text("copy-start.1", host, hbm, "broadcast_add_fusion"),
                       "copy-start", START_OP_PS, 0, nbytes, tf, async_done="copy-done.1",
                       async_display_name="async-copy")
    offload_d = OpSpec("copy-done.1", copy_done_text("copy-done.1", host, hbm, "copy-start.1"), "copy-done",
                       3_750, 0, nbytes, tf)
    add = loop_fusion("broadcast_add_fusion", [16 * 1024, 4096], inputs=1, operand="copy-done")
    add = replace(add, text=fusion_text("broadcast_add_fusion", hbm, [(hbm, "copy-done")], "kLoop",
                                        "fused_computation.2"))
    template = [reload_s, matmul_fusion("fusion.1", 4096, 4096, 4096), reload_d, add, offload_s,
                matmul_fusion("fusion.3", 4096, 4096, 4096), offload_d]
    b, exp = _run(template, steps, warmup)
    exp.update(exposed_host_transfer_s_per_step=(reload_d.duration_ps + offload_d.duration_ps) / PS_PER_S,
               exposed_collective_s_per_step=0.0, host_transfer_bytes_per_step=2 * nbytes,
               exposed_ops=["copy-done"], host_memory_space=5)
    return b, exp


SCENARIOS = {
    "exposed_all_gather": exposed_all_gather,
    "hidden_all_gather": hidden_all_gather,
    "tiny_all_gathers": tiny_all_gathers,
    "remat_fusions": remat_fusions,
    "layout_copies": layout_copies,
    "clean_profile": clean_profile,
    "host_offload_exposed": host_offload_exposed,
}


# --------------------------------------------------------------------------------------------------
# Large capture for the speed benchmark
# --------------------------------------------------------------------------------------------------

def _layer_template(layer: int, rng: np.random.Generator) -> list[OpSpec]:
    """~40 ops of one transformer layer (FSDP all-gathers, attention/MLP matmuls, norms, copies, remat)."""
    L = layer
    ops: list[OpSpec] = []
    d, f, s = 4096, 14336, 1024
    j = 40 * L  # unique numbering per layer

    def nm(base: str, k: int) -> str:
        return f"{base}.{j + k}"

    def jitter(op: OpSpec) -> OpSpec:
        return replace(op, duration_ps=int(op.duration_ps * rng.uniform(1.0, 1.6)))

    for k, (m_, k_, n_) in enumerate([(s, d, d), (s, d, 1024), (s, d, 1024), (s, d, d)]):
        ag_s, ag_d = all_gather_pair(nm("all-gather-start", k), nm("all-gather-done", k), [k_ // 4, n_], 4,
                                     done_ps=int(rng.uniform(0.2, 30) * PS_PER_US), operand=nm("fusion", 30 + k),
                                     channel_id=j + k + 1)
        ops += [ag_s, jitter(matmul_fusion(nm("fusion", k), m_, k_, n_, lhs=nm("add_rsqrt_fusion", 0))), ag_d]
    ops += [jitter(loop_fusion(nm("add_rsqrt_fusion", 0), [s, d], inputs=2)),
            jitter(loop_fusion(nm("softmax_fusion", 0), [32, s, s // 4], inputs=1)),
            jitter(matmul_fusion(nm("fusion", 5), s, d, f)), jitter(matmul_fusion(nm("fusion", 6), s, d, f)),
            jitter(loop_fusion(nm("multiply_fusion", 0), [s, f], inputs=2)),
            jitter(matmul_fusion(nm("fusion", 7), s, f, d)),
            jitter(loop_fusion(nm("add_fusion", 0), [s, d], inputs=2))]
    for k in range(8):
        ops.append(jitter(matmul_fusion(nm("fusion", 10 + k), s, d, 1024 * (1 + k % 4),
                                        tf_op=f"{_TF_BWD}/dot_general")))
        ops.append(jitter(loop_fusion(nm("convert_fusion", 10 + k), [s, 1024 * (1 + k % 4)], inputs=1)))
    cp_src = tpu_shape("bf16", [d, 1024])
    ops.append(OpSpec(nm("copy", 0), copy_text(nm("copy", 0), tpu_shape("bf16", [d, 1024], [0, 1]), cp_src,
                                               nm("fusion", 1)),
                      "data formatting", int(rng.uniform(5, 15) * PS_PER_US), 0, 2 * array_bytes("bf16", [d, 1024]),
                      f"{_TF_FWD}/transpose", f"{_SRC}:140"))
    remat = matmul_fusion(nm("fusion", 5), s, d, f, tf_op=f"{_TF_BWD}/checkpoint/rematted_computation/dot_general")
    ops.append(replace(remat, name=nm("fusion", 5) + ".remat",
                       text=remat.text.replace(f"%{nm('fusion', 5)} =", f"%{nm('fusion', 5)}.remat =")))
    ops += [jitter(loop_fusion(nm("reduce_fusion", k), [s, d], inputs=1)) for k in range(8)]
    return ops


def large_capture(path, num_events: int = 1_000_000, *, num_devices: int = 4, ops_per_step: int = 2000,
                  seed: int = 0) -> Path:
    """Write a TPU-shaped capture of about ``num_events`` XLA Ops events and return the .xplane.pb path.

    ~2k distinct ops (full HLO texts, metadata stats) per device, one ``jit_train_step`` module event per
    step and device, all-gather spans on ``Async XLA Ops``. ``path`` is a log dir (the file goes to
    ``plugins/profile/<run>/<host>.xplane.pb``) or a path ending in ``.xplane.pb``.
    """
    rng = np.random.default_rng(seed)
    template: list[OpSpec] = []
    layer = 0
    while len(template) < ops_per_step:
        template += _layer_template(layer, rng)
        layer += 1
    template = template[:ops_per_step]
    # A cut through a layer can leave a start op without its done: give that slot to a plain loop fusion.
    kept = {op.name for op in template}
    template = [op if op.async_done is None or op.async_done in kept
                else loop_fusion(f"reduce_fusion.{100_000 + i}", [1024, 4096], inputs=1)
                for i, op in enumerate(template)]
    n_per_step = len(template)
    steps = max(1, math.ceil(num_events / (num_devices * n_per_step)))
    b = TpuCaptureBuilder(num_devices=num_devices)
    names = np.array([op.name for op in template])
    durs = np.array([op.duration_ps for op in template], np.int64)
    step_ps = int(durs.sum())
    gap_ps = 20 * PS_PER_US
    pairs = [(i, names.tolist().index(op.async_done)) for i, op in enumerate(template) if op.async_done]
    for dev in range(num_devices):
        for op in template:
            b.define_op(dev, op.name, op.text, op.category, program_id=TRAIN_STEP_PROGRAM_ID, flops=op.flops,
                        bytes_accessed=op.bytes_accessed, tf_op=op.tf_op, source=op.source)
        step_starts = FIRST_STEP_START_PS + dev * 250_000 + np.arange(steps, dtype=np.int64) * (step_ps + gap_ps)
        # Per-step jitter of +/-2% on every op keeps per-op statistics non-degenerate.
        scale = rng.uniform(0.98, 1.02, size=(steps, 1))
        d = np.maximum((durs[None, :] * scale).astype(np.int64), 1)
        starts = step_starts[:, None] + np.concatenate([np.zeros((steps, 1), np.int64),
                                                        np.cumsum(d, axis=1)[:, :-1]], axis=1)
        b.add_ops_bulk(dev, np.tile(names, steps), starts.reshape(-1), d.reshape(-1))
        for st in range(steps):
            b.add_module_run(dev, TRAIN_STEP_PROGRAM, TRAIN_STEP_PROGRAM_ID, int(step_starts[st]),
                             int(d[st].sum()), st + 1)
            for i_s, i_d in pairs:
                b.add_async(dev, template[i_s].name, template[i_s].text, template[i_d].name,
                            int(starts[st, i_s]), int(starts[st, i_d] + d[st, i_d]))
    path = Path(path)
    if path.name.endswith(".xplane.pb"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b.serialize())
        return path
    return b.write(path)
