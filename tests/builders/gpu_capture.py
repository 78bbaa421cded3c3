"""A large GPU-shaped capture for the speed benchmark: a second shape, so that speed is not tuned to one file's.

Shaped like the real H100 sample it is cut from (``sample_profiles/gpu_h100_attention_pair_nocb/before``):

- ``/device:GPU:<n>`` planes (8 per host by default) with the sample's plane stats, event metadata (kernel
  names) and stat metadata; one ``Stream #14(MemcpyD2D,Compute,Memset)`` line of kernel events, each carrying
  the sample kernel's own per-event stats (``hlo_op``, ``hlo_module``, ``program_id``, ``tf_op``,
  ``kernel_details`` ... as ``ref_value`` strings) and a fresh ``correlation_id``. One step is the kernel
  sequence of one of the sample's steps (267 kernels of 246 HLO ops), durations jittered per step;
- a ``/host:CPU`` plane: a ``python3`` thread with ``train`` TraceMes (``_r``, ``step_num``) around
  ``PjitFunction(train_step)``, and per GPU a launch thread (``Host Threads/<tid>``) with one thunk TraceMe
  (the HLO op's name) and one ``cuLaunchKernel`` CUDA API event (``correlation_id``, ``device_id``) per kernel;
- a ``/host:metadata`` plane with the program's ``HloProto`` (the sample's ``jit_train_step``), and a
  ``Task Environment`` plane.

Events per host are ~3 per kernel (kernel, thunk, launch): ``num_events`` sets the number of steps. Lines
are encoded column-wise (``encode_events``), as ``xspace_encoder`` encodes TPU ops.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from xladiag.parsers.xspace_schema import XLine, XPlane, XSpace, XStat

from .xspace_encoder import PS_PER_US, _field_bytes, _join_rows, _varint_bytes, _varint_matrix

SAMPLE = (Path(__file__).resolve().parents[2] / "sample_profiles" / "gpu_h100_attention_pair_nocb" / "before"
          / "plugins" / "profile" / "2000_01_01_00_00_00" / "gpu-host.xplane.pb")
PROGRAM = "jit_train_step"
_DROPPED_STATS = {b"correlation_id", b"scope_range_id"}  # per event: made fresh here, or not needed
_HOST_STATS = ("correlation_id", "device_id", "step_num", "_r")
_U64, _I64 = 3, 4  # XStat fields: uint64_value, int64_value


def encode_events(mid, offset_ps, duration_ps, stats=(), blobs=None) -> bytes:
    """Serialized ``XLine.events`` (field 4) for rows of columns: ``stats`` = [(stat id, XStat field, values,
    present mask or None)] varint stats; ``blobs`` = (n x width uint8, lens) bytes appended to each event
    (already encoded stats, e.g. a kernel's constant ones)."""
    n = len(mid)
    if n == 0:
        return b""
    ones = np.ones(n, np.int64)
    body = [(np.full((n, 1), 0x08, np.uint8), ones), _varint_matrix(mid), (np.full((n, 1), 0x10, np.uint8), ones),
            _varint_matrix(offset_ps), (np.full((n, 1), 0x18, np.uint8), ones), _varint_matrix(duration_ps)]
    for sid, field, values, present in stats:
        head = b"\x08" + _varint_bytes(sid) + bytes([field << 3])
        val, val_lens = _varint_matrix(values)
        length = len(head) + val_lens  # under 128: one byte
        stat = np.hstack([np.full((n, 1), 0x22, np.uint8), length.astype(np.uint8)[:, None],
                          np.broadcast_to(np.frombuffer(head, np.uint8), (n, len(head))), val])
        lens = 2 + length
        body.append((stat, lens if present is None else np.where(present, lens, 0)))
    if blobs is not None:
        body.append(blobs)
    size = sum(lens for _, lens in body)
    return _join_rows([(np.full((n, 1), 0x22, np.uint8), ones), _varint_matrix(size), *body])


def _blob_table(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    width = max(1, max(map(len, blobs)))
    table = np.zeros((len(blobs), width), np.uint8)
    for i, b in enumerate(blobs):
        table[i, :len(b)] = np.frombuffer(b, np.uint8)
    return table, np.array([len(b) for b in blobs], np.int64)


@lru_cache(maxsize=1)
def sample_step() -> dict:
    """One steady-state step of the sample (its 2nd ``train`` span) and the planes' metadata to copy."""
    space = XSpace()
    space.ParseFromString(SAMPLE.read_bytes())
    planes = {p.name: p for p in space.planes}
    host = planes[b"/host:CPU"]
    trains = sorted(ln.timestamp_ns * 1000 + e.offset_ps for ln in host.lines for e in ln.events
                    if host.event_metadata[e.metadata_id].name == b"train")
    gpu = planes[b"/device:GPU:0"]
    names = {k: v.name for k, v in gpu.stat_metadata.items()}
    line = gpu.lines[0]
    kernels = [e for e in line.events if trains[1] <= line.timestamp_ns * 1000 + e.offset_ps < trains[2]]
    starts = np.array([line.timestamp_ns * 1000 + e.offset_ps for e in kernels], np.int64)
    hlo_op = [next(names[s.ref_value].decode() for s in e.stats if names[s.metadata_id] == b"hlo_op")
              for e in kernels]
    blobs = [b"".join(_field_bytes(4, s.SerializeToString()) for s in e.stats
                      if names[s.metadata_id] not in _DROPPED_STATS) for e in kernels]
    header = XPlane()
    header.CopyFrom(gpu)
    del header.lines[:]
    meta = XPlane()
    meta.CopyFrom(planes[b"/host:metadata"])
    for key in [k for k, v in meta.event_metadata.items() if not v.name.startswith(PROGRAM.encode() + b"(")]:
        del meta.event_metadata[key]
    return {"offset_ps": starts - starts[0], "duration_ps": np.array([e.duration_ps for e in kernels], np.int64),
            "metadata_id": np.array([e.metadata_id for e in kernels], np.int64), "hlo_op": hlo_op,
            "blobs": _blob_table(blobs), "gpu_header": header, "metadata_plane": meta,
            "correlation_stat": next(k for k, v in names.items() if v == b"correlation_id"),
            "line": (line.id, line.name), "step_ps": int(trains[2] - trains[1])}


def _kernel_times(step: dict, steps: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(start offset from the step's start, duration) per step and kernel: durations jittered +/-2%, the
    sample's gaps between kernels kept."""
    d0 = step["duration_ps"]
    gaps = np.diff(step["offset_ps"]) - d0[:-1]
    d = np.maximum((d0[None, :] * rng.uniform(0.98, 1.02, size=(steps, 1))).astype(np.int64), 1)
    ends = np.cumsum(d + np.concatenate([[0], np.maximum(gaps, 0)])[None, :], axis=1)
    return ends - d, d


def _device_plane(step: dict, device: int, step_starts: np.ndarray, times, first_corr: int) -> bytes:
    """GPU ``device``'s plane: the sample's header (renamed) and one stream line of every step's kernels."""
    start, dur = times
    steps, k = start.shape
    header = XPlane()
    header.CopyFrom(step["gpu_header"])
    header.id, header.name = 100 + device, f"/device:GPU:{device}".encode()
    table, lens = step["blobs"]
    idx = np.tile(np.arange(k), steps)
    corr = first_corr + np.arange(steps * k, dtype=np.int64)
    events = encode_events(np.tile(step["metadata_id"], steps), (step_starts[:, None] + start).reshape(-1),
                           dur.reshape(-1), [(step["correlation_stat"], _U64, corr, None)], (table[idx], lens[idx]))
    line_id, line_name = step["line"]
    line = XLine(id=line_id, name=line_name, timestamp_ns=0).SerializeToString() + events
    return header.SerializeToString() + _field_bytes(3, line)


def _interleave(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.stack([a, b], axis=-1).reshape(-1)


def _python_line(host_starts: np.ndarray, period_ps: int) -> bytes:
    """The ``python3`` thread: per step a ``train`` root TraceMe (``_r``, ``step_num``) holding the dispatch."""
    steps, us = len(host_starts), PS_PER_US
    is_train = np.tile([True, False], steps)
    events = encode_events(np.tile([1, 2], steps), _interleave(host_starts, host_starts + 20 * us),
                           np.tile([period_ps - 10 * us, period_ps // 3], steps),
                           [(3, _I64, np.repeat(np.arange(steps), 2), is_train),
                            (4, _I64, np.ones(2 * steps, np.int64), is_train)])
    return XLine(id=1, name=b"python3", timestamp_ns=0).SerializeToString() + events


def _launch_line(thunk_mid: np.ndarray, host_starts: np.ndarray, device: int, first_corr: int) -> bytes:
    """GPU ``device``'s launch thread: per kernel a thunk TraceMe, then ``cuLaunchKernel`` with the kernel's
    ``correlation_id`` and ``device_id``."""
    steps, k, us = len(host_starts), len(thunk_mid), PS_PER_US
    thunk_t = (host_starts[:, None] + 30 * us + np.arange(k)[None, :] * 3 * us).reshape(-1)
    corr = first_corr + np.arange(steps * k, dtype=np.int64)
    is_launch = np.tile([False, True], steps * k)
    events = encode_events(_interleave(np.tile(thunk_mid, steps), np.full(steps * k, 3)),
                           _interleave(thunk_t, thunk_t + us // 2), np.tile([5 * us // 2, 3 * us // 2], steps * k),
                           [(1, _U64, np.repeat(corr, 2), is_launch),
                            (2, _U64, np.full(2 * steps * k, device), is_launch)])
    tid = 4000 + device
    return XLine(id=tid, name=f"Host Threads/{tid}".encode(), timestamp_ns=0).SerializeToString() + events


def _host_plane(step: dict, host_starts: np.ndarray, period_ps: int, first_corrs: list[int]) -> bytes:
    """``/host:CPU``: the step TraceMes and one launch thread per GPU."""
    plane = XPlane(id=1, name=b"/host:CPU")
    for i, name in enumerate(_HOST_STATS, 1):
        plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, name.encode()
    ops = sorted(set(step["hlo_op"]))
    for i, name in enumerate(["train", "PjitFunction(train_step)", "cuLaunchKernel", *ops], 1):
        plane.event_metadata[i].id, plane.event_metadata[i].name = i, name.encode()
    thunk_mid = 4 + np.searchsorted(ops, step["hlo_op"])
    lines = [_python_line(host_starts, period_ps)]
    lines += [_launch_line(thunk_mid, host_starts, device, corr) for device, corr in enumerate(first_corrs)]
    return plane.SerializeToString() + b"".join(_field_bytes(3, ln) for ln in lines)


def _task_environment(lo_ps: int, hi_ps: int) -> bytes:
    plane = XPlane(id=0, name=b"Task Environment")
    times = (("profile_start_time", lo_ps // 1000), ("profile_stop_time", hi_ps // 1000 + 1))
    for i, (name, value) in enumerate(times, 1):
        plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, name.encode()
        plane.stats.append(XStat(metadata_id=i, uint64_value=value))
    return plane.SerializeToString()


def gpu_capture(path, num_events: int = 1_000_000, *, num_devices: int = 8, seed: int = 0,
                host: str = "gpu-host") -> Path:
    """Write a GPU-shaped capture of about ``num_events`` events (kernels, thunks and launches) and return its
    path. ``path``: a log dir (file at ``plugins/profile/<run>/<host>.xplane.pb``) or a ``.xplane.pb`` path."""
    step = sample_step()
    k = len(step["metadata_id"])
    steps = max(2, math.ceil(num_events / (3 * k * num_devices)))
    rng = np.random.default_rng(seed)
    times = [_kernel_times(step, steps, rng) for _ in range(num_devices)]
    span = max(int((s + d)[:, -1].max()) for s, d in times)
    period = max(step["step_ps"], span + 50 * PS_PER_US)
    t0 = 1_000_000 * PS_PER_US
    starts = t0 + np.arange(steps, dtype=np.int64) * period
    first_corrs = [1 + i * steps * k for i in range(num_devices)]  # unique per host, as CUPTI's
    planes = [_device_plane(step, i, starts + i * 7 * PS_PER_US, times[i], first_corrs[i]) for i in range(num_devices)]
    planes += [_host_plane(step, starts - 200 * PS_PER_US, period, first_corrs),
               step["metadata_plane"].SerializeToString(), _task_environment(t0 - 300 * PS_PER_US, t0 + steps * period)]
    data = b"".join(_field_bytes(1, p) for p in planes) + _field_bytes(4, host.encode())
    path = Path(path)
    if not path.name.endswith(".xplane.pb"):
        path = path / "plugins" / "profile" / "2026_01_01_00_00_00" / f"{host}.xplane.pb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def multi_host_gpu_capture(logdir, hosts: int = 16, events_per_host: int = 259_000, **kwargs) -> list[Path]:
    """One run of ``hosts`` GPU hosts (``gpu-host-<i>``, each its own seed) in ``logdir/plugins/profile/<run>/``."""
    return [gpu_capture(logdir, events_per_host, seed=i, host=f"gpu-host-{i:02d}", **kwargs) for i in range(hosts)]
