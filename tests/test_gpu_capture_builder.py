"""The benchmark's GPU-shaped capture builder (tests/builders/gpu_capture.py): wire bytes, shape, and what
``diagnose`` and xprof read from it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders.gpu_capture import encode_events, gpu_capture, multi_host_gpu_capture, sample_step
from builders.xspace_encoder import _field_bytes
from xladiag.parsers.hlo_proto_schema import HloProto
from xladiag.parsers.xspace_schema import XLine, XSpace, XStat


def _read(path) -> XSpace:
    space = XSpace()
    space.ParseFromString(path.read_bytes())
    return space


def _stats(plane, event) -> dict[str, object]:
    names = {k: v.name.decode() for k, v in plane.stat_metadata.items()}
    return {names[s.metadata_id]: names[s.ref_value] if s.WhichOneof("value") == "ref_value"
            else getattr(s, s.WhichOneof("value")) for s in event.stats}


def test_column_encoding_is_byte_identical_to_protobuf():
    rng = np.random.default_rng(1)
    n = 50
    mid, off, dur = rng.integers(1, 300, n), rng.integers(0, 2**40, n), rng.integers(1, 2**30, n)
    corr, present = rng.integers(0, 2**63, n, dtype=np.uint64), rng.random(n) < 0.5
    # Blobs: already encoded constant stats (a kernel's hlo_op ...), some events none, some several.
    consts = [[XStat(metadata_id=9, ref_value=int(v)) for v in rng.integers(1, 2**20, c)]
              for c in rng.integers(0, 4, n)]
    blobs = [b"".join(_field_bytes(4, s.SerializeToString()) for s in stats) for stats in consts]
    table = np.zeros((n, max(map(len, blobs))), np.uint8)
    for i, b in enumerate(blobs):
        table[i, :len(b)] = np.frombuffer(b, np.uint8)
    ours = encode_events(mid, off, dur, [(7, 3, corr, present), (300, 4, off, None)],
                         (table, np.array([len(b) for b in blobs])))
    line = XLine()
    for i in range(n):
        e = line.events.add(metadata_id=int(mid[i]), offset_ps=int(off[i]), duration_ps=int(dur[i]))
        if present[i]:
            e.stats.add(metadata_id=7, uint64_value=int(corr[i]))
        e.stats.add(metadata_id=300, int64_value=int(off[i]))
        e.stats.extend(consts[i])
    assert ours == line.SerializeToString()


def test_shape_kernels_launches_and_the_program_proto(tmp_path):
    step = sample_step()
    k = len(step["metadata_id"])
    path = gpu_capture(tmp_path, 40_000, num_devices=2)
    space = _read(path)
    planes = {p.name.decode(): p for p in space.planes}
    assert sorted(planes) == ["/device:GPU:0", "/device:GPU:1", "/host:CPU", "/host:metadata", "Task Environment"]
    steps = -(-40_000 // (3 * k * 2))
    events = sum(len(ln.events) for p in space.planes for ln in p.lines)
    assert events == 2 * 3 * k * steps + 2 * steps and events >= 40_000
    gpu = planes["/device:GPU:1"]
    kernels = list(gpu.lines[0].events)
    assert gpu.lines[0].name.startswith(b"Stream #") and len(kernels) == k * steps
    starts = np.array([e.offset_ps for e in kernels])
    assert (np.diff(starts) > 0).all()  # a stream's kernels are in time order
    first = _stats(gpu, kernels[0])
    assert first["hlo_module"] == "jit_train_step" and first["program_id"] == 16600
    host = planes["/host:CPU"]
    launches = {_stats(host, e)["correlation_id"]: e for ln in host.lines[1:] for e in ln.events
                if host.event_metadata[e.metadata_id].name == b"cuLaunchKernel"}
    corr = [_stats(gpu, e)["correlation_id"] for e in kernels]
    assert len(set(corr)) == len(corr) and set(corr) <= set(launches)
    # Each kernel is launched before it runs.
    launch_end = np.array([launches[c].offset_ps + launches[c].duration_ps for c in corr])
    assert (launch_end < starts).all()
    (program,) = planes["/host:metadata"].event_metadata.values()
    hlo = HloProto()
    hlo.ParseFromString(program.stats[0].bytes_value)
    names = {i.name.decode() for c in hlo.hlo_module.computations for i in c.instructions}
    assert {_stats(gpu, e)["hlo_op"] for e in kernels} <= names
    assert len(multi_host_gpu_capture(tmp_path / "m", hosts=2, events_per_host=10_000, num_devices=1)) == 2


@pytest.mark.slow
def test_diagnose_and_xprof_read_the_program_and_its_steps(tmp_path):
    from xladiag.analyzer.analysis import analyze

    step = sample_step()
    path = gpu_capture(tmp_path, 60_000, num_devices=2)
    a = analyze(tmp_path)
    assert a.num_devices == 2 and a.platform == "gpu"
    assert a.step_s == pytest.approx(step["step_ps"] / 1e12, rel=0.05)
    in_step = a.ops[a.ops["in_step"]]
    assert len(in_step) == len(set(step["hlo_op"])) and in_step["predicted_s"].notna().mean() > 0.9
    xprof = pytest.importorskip("xprof.convert.raw_to_tool_data")
    data, _ = xprof.xspace_to_tool_data([str(path)], "hlo_stats", {"use_saved_result": False})
    for cached in path.parent.glob("*.op_stats*.pb"):
        cached.unlink()
    table = json.loads(data)
    cols = [c["id"] for c in table["cols"]]
    rows = [dict(zip(cols, [c.get("v") for c in r["c"]])) for r in table["rows"]]
    assert {r["hlo_op_name"] for r in rows} == set(step["hlo_op"])
    steps = -(-60_000 // (3 * len(step["metadata_id"]) * 2))
    per_op = {op: step["hlo_op"].count(op) for op in step["hlo_op"]}
    assert all(r["occurrences"] == per_op[r["hlo_op_name"]] * steps * 2 for r in rows)
