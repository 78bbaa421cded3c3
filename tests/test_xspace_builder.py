"""The capture builder writes what it was told, in the real TPU layout, and xprof agrees on the per-op times."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from builders import hlo_snippets, large_capture, scenarios, xspace_encoder
from xladiag.parsers.xspace_schema import XLine, XSpace

_V6E_REL = "tpu_v6e_host_offload/plugins/profile/2025_12_01_00_00_00/t1v-n-0.xplane.pb"
V6E_SAMPLE = Path(__file__).resolve().parent.parent / "sample_profiles" / _V6E_REL


def _read(path) -> XSpace:
    s = XSpace()
    s.ParseFromString(path.read_bytes())
    return s


def _stat_value(plane, stat):
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return plane.stat_metadata[stat.ref_value].name.decode()
    value = getattr(stat, kind)
    return value.decode() if kind == "str_value" else value


def _stats(plane, stats) -> dict:
    return {plane.stat_metadata[s.metadata_id].name.decode(): _stat_value(plane, s) for s in stats}


def _line(plane, name: str):
    return next(ln for ln in plane.lines if ln.name.decode() == name)


def _events(plane, line_name: str) -> list[tuple[str, int, int]]:
    """(display name or name, absolute start ps, duration ps) per event."""
    ln = _line(plane, line_name)
    out = []
    for e in ln.events:
        md = plane.event_metadata[e.metadata_id]
        out.append(((md.display_name or md.name).decode(), ln.timestamp_ns * 1000 + e.offset_ps, e.duration_ps))
    return out


def _device_planes(space):
    return [p for p in space.planes if re.fullmatch(r"/device:TPU:\d+", p.name.decode())]


# ---------------------------------------------------------------------------------------------------------
# Round trip through our own schema
# ---------------------------------------------------------------------------------------------------------

def test_written_layout_and_plane_stats_match_the_real_v6e_capture(tmp_path):
    b, _ = scenarios.exposed_all_gather(250)
    path = b.write(tmp_path)
    assert path == tmp_path / "plugins/profile/2026_01_01_00_00_00/t1v-n-test.xplane.pb"
    if not V6E_SAMPLE.exists():
        pytest.skip("real v6e sample not available")
    ours, real = _read(path), _read(V6E_SAMPLE)

    ours_dev, real_dev = _device_planes(ours), _device_planes(real)
    assert [p.name for p in ours_dev] == [p.name for p in real_dev]
    assert [(ln.id, ln.name) for ln in ours_dev[0].lines] == [(ln.id, ln.name) for ln in real_dev[0].lines]
    ps, rs = _stats(ours_dev[0], ours_dev[0].stats), _stats(real_dev[0], real_dev[0].stats)
    for key in ("device_type_string", "peak_teraflops_per_second", "peak_hbm_bw_gigabytes_per_second"):
        assert ps[key] == rs[key]
    assert {"/host:CPU"} <= {p.name.decode() for p in ours.planes}

    # Same stat value kinds as the sample, per stat name, on op metadata and op events.
    def kinds(plane):
        out = {}
        for line_name in ("XLA Ops", "XLA Modules"):
            for e in _line(plane, line_name).events:
                md = plane.event_metadata[e.metadata_id]
                for s in list(md.stats) + list(e.stats):
                    out[plane.stat_metadata[s.metadata_id].name] = s.WhichOneof("value")
        return out
    ok, rk = kinds(ours_dev[0]), kinds(real_dev[0])
    shared = set(ok) & set(rk)
    assert {b"hlo_category", b"flops", b"bytes_accessed", b"program_id", b"device_duration_ps",
            b"run_id", b"tf_op", b"shape_with_layout"} <= shared
    assert {k: ok[k] for k in shared} == {k: rk[k] for k in shared}


def test_exposed_all_gather_round_trip_times_counts_and_metadata(tmp_path):
    b, exp = scenarios.exposed_all_gather(250)
    space = _read(b.write(tmp_path))
    devs = _device_planes(space)
    assert len(devs) == 4
    for plane in devs:
        modules = _events(plane, "XLA Modules")
        ops = _events(plane, "XLA Ops")
        assert len(modules) == 6 and len(ops) == 6 * 5  # warm-up + 5 steps, 5 ops each
        assert {m[0] for m in modules} == {f"jit_train_step({xspace_encoder.TRAIN_STEP_PROGRAM_ID})"}
        # The done op waits exactly 250 µs in every steady step (warm-up: 3x), alone on the op line.
        done = [o for o in ops if o[0] == "all-gather-done"]
        assert [d[2] for d in done] == [750_000_000] + [250_000_000] * 5
        starts = np.array([o[1] for o in ops])
        ends = starts + np.array([o[2] for o in ops])
        for _, s, d in done:
            others = [(a, z) for a, z in zip(starts, ends) if not (a == s)]
            assert all(z <= s or a >= s + d for a, z in others)
        # Ops are back to back inside their module; module = step.
        for i, (_, m_start, m_dur) in enumerate(modules):
            step_ops = ops[5 * i:5 * i + 5]
            assert step_ops[0][1] == m_start
            assert step_ops[-1][1] + step_ops[-1][2] == m_start + m_dur
            assert all(step_ops[j][1] + step_ops[j][2] == step_ops[j + 1][1] for j in range(4))
        assert modules[1][2] == pytest.approx(exp["step_s"] * 1e12)
        assert modules[2][1] - modules[1][1] == pytest.approx(exp["step_period_s"] * 1e12)

    # One XEventMetadata per distinct op per plane; one XStatMetadata per stat name per plane.
    plane = devs[0]
    op_md = [plane.event_metadata[e.metadata_id] for e in _line(plane, "XLA Ops").events]
    assert len({m.id for m in op_md}) == 5
    names = [m.name for m in plane.stat_metadata.values()]
    assert len(names) == len(set(names))
    done_md = next(m for m in op_md if m.display_name == b"all-gather-done")
    start_md = next(m for m in op_md if m.display_name == b"all-gather-start")
    assert start_md.name.decode().startswith("%all-gather-start = (bf16[256,4096]{1,0:T(8,128)(2,1)}, "
                                             "bf16[1024,4096]{1,0:T(8,128)(2,1)}) all-gather-start(")
    assert "replica_groups=[1,4]<=[4]" in start_md.name.decode()
    assert "dimensions={0}" in start_md.name.decode()
    st = _stats(plane, done_md.stats)
    assert st["hlo_category"] == "all-gather-done"
    assert st["program_id"] == xspace_encoder.TRAIN_STEP_PROGRAM_ID
    assert st["shape_with_layout"] == "bf16[1024,4096]{1,0:T(8,128)(2,1)}"
    fusion_md = next(m for m in op_md if m.display_name == b"fusion.2")
    fst = _stats(plane, fusion_md.stats)
    assert fst["flops"] == 2 * 1024 * 4096 * 4096
    assert fst["bytes_accessed"] == 2 * (1024 * 4096 + 4096 * 4096 + 1024 * 4096)
    assert "kind=kOutput" in fusion_md.name.decode()

    # Event stats: device clock offset (constant skew) and device duration = event duration.
    for e in _line(plane, "XLA Ops").events[:10]:
        es = _stats(plane, e.stats)
        assert es["device_duration_ps"] == e.duration_ps
        assert e.offset_ps - es["device_offset_ps"] == b.device_clock_skew_ps


def test_async_line_spans_start_to_done_and_names_the_done_op(tmp_path):
    b, _ = scenarios.host_offload_exposed(1500)
    plane = _device_planes(_read(b.write(tmp_path)))[1]
    ops = _events(plane, "XLA Ops")
    ln = _line(plane, "Async XLA Ops")
    assert len(ln.events) == 2 * 6
    for e in ln.events:
        md = plane.event_metadata[e.metadata_id]
        assert md.display_name == b"async-copy"
        assert md.name.decode().startswith("%copy-start")
        done = _stats(plane, e.stats)["hlo_op"]
        assert done in ("copy-done", "copy-done.1")
        start = e.offset_ps
        start_op = next(o for o in ops if o[1] == start)
        assert md.name.decode().startswith(f"%{start_op[0]} = ")
        done_op = next(o for o in ops if o[0] == done and o[1] >= start)
        assert start + e.duration_ps == done_op[1] + done_op[2]
        assert _stats(plane, md.stats)["hlo_category"] == "copy-start"
    texts = {plane.event_metadata[e.metadata_id].display_name: plane.event_metadata[e.metadata_id].name.decode()
             for e in _line(plane, "XLA Ops").events}
    # Reload: operand in host memory S(5); offload: result in S(5).
    assert "S(5)} %param)" in texts[b"copy-start"]
    assert texts[b"copy-done.1"].split(" copy-done(")[0].endswith("S(5)}")


def test_line_timestamp_and_ref_values_are_honoured():
    b = xspace_encoder.TpuCaptureBuilder(num_devices=1, line_timestamp_ns=1_000_000, use_ref_values=True)
    text = hlo_snippets.copy_text("copy.3", hlo_snippets.tpu_shape("f32", [128, 256], [0, 1]),
                                  hlo_snippets.tpu_shape("f32", [128, 256]), "p0")
    b.add_op(0, "copy.3", text, "data formatting", 2_000_000_000, 7_000_000, program_id=42, bytes_accessed=262144)
    b.add_op(0, "copy.3", text, "data formatting", 1_500_000_000, 5_000_000, program_id=42, bytes_accessed=262144)
    plane = _device_planes(b.space())[0]
    ln = _line(plane, "XLA Ops")
    assert ln.timestamp_ns == 1_000_000
    # Sorted by time, absolute start = timestamp_ns * 1000 + offset_ps.
    assert [(ln.timestamp_ns * 1000 + e.offset_ps, e.duration_ps) for e in ln.events] == [
        (1_500_000_000, 5_000_000), (2_000_000_000, 7_000_000)]
    md = plane.event_metadata[ln.events[0].metadata_id]
    assert len(plane.event_metadata) == 1
    cat = next(s for s in md.stats if plane.stat_metadata[s.metadata_id].name == b"hlo_category")
    assert cat.WhichOneof("value") == "ref_value"
    assert plane.stat_metadata[cat.ref_value].name == b"data formatting"
    assert _stats(plane, md.stats)["shape_with_layout"] == "f32[128,256]{0,1:T(8,128)}"


def test_bulk_encoding_is_byte_identical_to_protobuf():
    rng = np.random.default_rng(1)
    n = 3000
    mid = rng.integers(1, 5000, n)
    off = rng.integers(0, 2**45, n)
    off[:6] = [0, 127, 128, 16383, 16384, 2**62]
    dur = rng.integers(0, 2**40, n)
    dev_off = off + 5
    got = xspace_encoder._encode_op_events(mid, off, dur, dev_off, 17, 200)
    line = XLine()
    for i in range(n):
        e = line.events.add(metadata_id=int(mid[i]), offset_ps=int(off[i]), duration_ps=int(dur[i]))
        e.stats.add(metadata_id=17, uint64_value=int(dev_off[i]))
        e.stats.add(metadata_id=200, uint64_value=int(dur[i]))
    assert got == line.SerializeToString()


def test_bulk_and_single_adds_give_the_same_capture():
    def build(bulk: bool):
        b = xspace_encoder.TpuCaptureBuilder(num_devices=1)
        ops = [scenarios.matmul_fusion("fusion.1", 256, 512, 1024), scenarios.loop_fusion("add_fusion", [256, 1024])]
        starts = [10_000_000, 20_000_000, 30_000_000, 40_000_000]
        names = ["fusion.1", "add_fusion", "fusion.1", "add_fusion"]
        spec = {o.name: o for o in ops}
        for o in ops:
            b.define_op(0, o.name, o.text, o.category, program_id=9, flops=o.flops, bytes_accessed=o.bytes_accessed)
        if bulk:
            b.add_ops_bulk(0, names, starts, [spec[n].duration_ps for n in names])
        else:
            for n, s in zip(names, starts):
                o = spec[n]
                b.add_op(0, n, o.text, o.category, s, o.duration_ps, program_id=9)
        return b.serialize()
    assert build(True) == build(False)
    with pytest.raises(KeyError, match="define_op"):
        xspace_encoder.TpuCaptureBuilder(num_devices=1).add_ops_bulk(0, ["nope"], [0], [1])


# ---------------------------------------------------------------------------------------------------------
# Scenario answers, re-derived from the parsed capture
# ---------------------------------------------------------------------------------------------------------

def _steady_op_seconds(plane, predicate) -> float:
    """Seconds per steady step (warm-up = first module excluded) of ops whose display name matches."""
    modules = _events(plane, "XLA Modules")
    first_end = modules[0][1] + modules[0][2]
    total = sum(d for n, s, d in _events(plane, "XLA Ops") if s >= first_end and predicate(n))
    return total / 1e12 / (len(modules) - 1)


def test_remat_share_of_the_step(tmp_path):
    b, exp = scenarios.remat_fusions(20.0)
    plane = _device_planes(_read(b.write(tmp_path)))[2]
    remat_s = _steady_op_seconds(plane, lambda n: ".remat" in n)
    step_s = _events(plane, "XLA Modules")[1][2] / 1e12
    assert remat_s / step_s == pytest.approx(0.20, abs=1e-9)
    assert exp["remat_fraction"] == pytest.approx(0.20, abs=1e-9)
    assert remat_s == pytest.approx(exp["remat_s_per_step"], rel=1e-12)
    for e in _line(plane, "XLA Ops").events:
        md = plane.event_metadata[e.metadata_id]
        tf_op = _stats(plane, md.stats)["tf_op"]
        assert ("rematted_computation" in tf_op) == (b".remat" in md.display_name)


@pytest.mark.parametrize("variant", ["copy", "transpose_fusion"])
def test_layout_changes_are_layout_only(tmp_path, variant):
    b, exp = scenarios.layout_copies(120.0, variant=variant)
    plane = _device_planes(_read(b.write(tmp_path)))[0]
    assert _steady_op_seconds(plane, lambda n: n in exp["layout_ops"]) == pytest.approx(120e-6, rel=1e-12)
    shape = re.compile(r"(\w+)\[([\d,]*)\]\{([\d,]*):([^}]*)\}")
    for md in plane.event_metadata.values():
        if md.display_name.decode() not in exp["layout_ops"]:
            continue
        (rt, rdims, rlayout, rtile), (ot, odims, olayout, otile) = shape.findall(md.name.decode())
        r_order = [int(d) for d in rlayout.split(",")]
        o_order = [int(d) for d in olayout.split(",")]
        r_dims = [int(d) for d in rdims.split(",")]
        o_dims = [int(d) for d in odims.split(",")]
        # Physical (major-to-minor) extents agree: only the layout (or a transpose of it) differs.
        assert [r_dims[i] for i in r_order] == [o_dims[i] for i in o_order][::-1] or \
            [r_dims[i] for i in reversed(r_order)] == [o_dims[i] for i in o_order]
        assert rt == ot == "bf16" and rtile == otile == "T(8,128)(2,1)"
        if variant == "copy":
            assert r_dims == o_dims and r_order != o_order


def test_clean_profile_runs_near_roofline_with_nothing_exposed(tmp_path):
    b, exp = scenarios.clean_profile()
    plane = _device_planes(_read(b.write(tmp_path)))[3]
    ps = _stats(plane, plane.stats)
    peak_flops = ps["peak_teraflops_per_second"] * 1e12
    peak_bw = ps["peak_hbm_bw_gigabytes_per_second"] * 1e9
    warmup = _events(plane, "XLA Modules")[0]
    ratios = {}
    for e in _line(plane, "XLA Ops").events:
        md = plane.event_metadata[e.metadata_id]
        st = _stats(plane, md.stats)
        if "fusion" in st["hlo_category"] and e.offset_ps >= warmup[1] + warmup[2]:
            roofline_s = max(st["flops"] / peak_flops, st["bytes_accessed"] / peak_bw)
            ratios.setdefault(st["hlo_category"], set()).add(round(e.duration_ps / 1e12 / roofline_s, 6))
    assert ratios == {"convolution fusion": {1.05}, "loop fusion": {1.1}}
    assert _steady_op_seconds(plane, lambda n: n.endswith("-done")) < 1e-8


def test_tiny_all_gathers_are_latency_sized(tmp_path):
    b, exp = scenarios.tiny_all_gathers(12, duration_us=8.0)
    plane = _device_planes(_read(b.write(tmp_path)))[0]
    starts = [md for md in plane.event_metadata.values() if md.display_name.startswith(b"all-gather-start")]
    assert len(starts) == 12
    for md in starts:
        full = re.search(r"\(bf16\[64,256\]\{[^}]*\}, bf16\[(\d+),(\d+)\]", md.name.decode())
        total_bytes = 2 * int(full.group(1)) * int(full.group(2))
        assert total_bytes == 131072 and total_bytes / 4 < 45e3
    assert _steady_op_seconds(plane, lambda n: n.startswith("all-gather-done")) == pytest.approx(12 * 8e-6)
    assert exp["exposed_collective_s_per_step"] == pytest.approx(12 * 8e-6)


def test_hidden_all_gather_overlaps_a_long_fusion(tmp_path):
    b, exp = scenarios.hidden_all_gather()
    plane = _device_planes(_read(b.write(tmp_path)))[0]
    spans = _line(plane, "Async XLA Ops").events
    assert len(spans) == 6
    ops = _events(plane, "XLA Ops")
    for e in spans[1:]:
        inside = [o for o in ops if o[1] >= e.offset_ps and o[1] + o[2] <= e.offset_ps + e.duration_ps]
        assert [o[0] for o in inside] == ["all-gather-start", "fusion.2", "all-gather-done"]
        assert inside[1][2] > 300e6 and inside[2][2] == 2_500
    assert exp["exposed_collective_s_per_step"] == 2.5e-9


# ---------------------------------------------------------------------------------------------------------
# Cross-check with xprof's own converter
# ---------------------------------------------------------------------------------------------------------

def _xprof_hlo_stats(path) -> dict[str, dict]:
    raw = pytest.importorskip("xprof.convert.raw_to_tool_data")
    data, content_type = raw.xspace_to_tool_data([str(path)], "hlo_stats", {"use_saved_result": False})
    assert content_type == "application/json"
    table = json.loads(data)
    cols = [c["id"] for c in table["cols"]]
    return {r["hlo_op_name"]: r for r in (dict(zip(cols, [c.get("v") for c in row["c"]])) for row in table["rows"])}


@pytest.mark.parametrize("scenario", ["exposed_all_gather", "remat_fusions", "host_offload_exposed"])
def test_xprof_reads_our_capture_with_the_injected_per_op_times(tmp_path, scenario):
    b, exp = scenarios.SCENARIOS[scenario]()
    rows = _xprof_hlo_stats(b.write(tmp_path))
    assert set(rows) == set(exp["op_self_s_per_step"])
    # 4 devices x (5 steady steps + 1 warm-up step at 3x the durations).
    runs = 4 * (5 + 3)
    for name, per_step_s in exp["op_self_s_per_step"].items():
        assert rows[name]["occurrences"] == 24
        assert rows[name]["total_self_time"] == pytest.approx(runs * per_step_s * 1e6, rel=1e-9, abs=1e-6)
        assert rows[name]["program_id"] == str(xspace_encoder.TRAIN_STEP_PROGRAM_ID)
    if scenario == "exposed_all_gather":
        assert rows["all-gather-done"]["total_self_time"] == pytest.approx(4 * (5 + 3) * 250.0)
        assert rows["fusion.2"]["bound_by"] == "Compute" and rows["add_fusion"]["bound_by"] == "HBM"
    if scenario == "remat_fusions":
        assert {n for n, r in rows.items() if r["hlo_rematerialization"] == "Yes"} == set(exp["remat_ops"])
    if scenario == "host_offload_exposed":
        assert rows["copy-done"]["total_self_time"] == pytest.approx(4 * (5 + 3) * 1500.0)


# ---------------------------------------------------------------------------------------------------------
# Large capture
# ---------------------------------------------------------------------------------------------------------

def test_large_capture_small_and_full_size(tmp_path):
    path = large_capture.large_capture(tmp_path / "small", num_events=40_000, ops_per_step=500)
    space = _read(path)
    devs = _device_planes(space)
    assert len(devs) == 4
    for plane in devs:
        ops = _line(plane, "XLA Ops").events
        assert len(ops) == 10_000
        assert len({e.metadata_id for e in ops}) == 500
        assert len(_line(plane, "XLA Modules").events) == 20
        offs = np.array([e.offset_ps for e in ops])
        assert (np.diff(offs) >= 0).all()

    t0 = time.perf_counter()
    big = large_capture.large_capture(tmp_path / "big.xplane.pb")
    build_s = time.perf_counter() - t0
    assert big == tmp_path / "big.xplane.pb"
    assert build_s < 30
    assert 35e6 < big.stat().st_size < 60e6
    space = _read(big)
    devs = _device_planes(space)
    assert sum(len(_line(p, "XLA Ops").events) for p in devs) == 1_000_000
    assert 1900 <= len({e.metadata_id for e in _line(devs[0], "XLA Ops").events}) <= 2100


def test_memory_access_breakdown_encodes_like_the_sample():
    # broadcast_add_fusion in the v6e sample: 10.74 GB accessed, f32[5,1024,1024,256] result.
    text = ("%broadcast_add_fusion = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} fusion(f32[5,1024,1024,256]"
            "{3,2,1,0:T(8,128)} %copy-done.4), kind=kLoop, calls=%fused_computation")
    sample = b"\n\n\x08\x01\x10\x01\x18\x80\x80\x80\x80\x14\n\n\x08\x02\x10\x01\x18\x80\x80\x80\x80\x14"
    assert xspace_encoder.default_breakdown(text, "loop fusion", 10737418240) == sample
    assert xspace_encoder.default_breakdown(text, "copy-start", 5368709120) == b""
