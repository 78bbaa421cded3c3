"""The xplane parser on the real captures and on small hand-built XSpace messages."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import xladiag.parsers.xplane as xplane_module
from builders.xspace_encoder import _varint_bytes as _varint
from xladiag.parsers.xplane import XPlaneError, parse_xspace_bytes, read_xspace
from xladiag.parsers.xspace_schema import MemoryAccessBreakdown, XPlane, XSpace


def _hand_space() -> XSpace:
    """One TPU-like plane: stat metadata, ref-valued and non-UTF-8 strings, two lines."""
    space = XSpace(hostnames=[b"host-a"])
    plane = space.planes.add(id=7, name=b"/device:TPU:0")
    names = {1: b"device_type_string", 2: b"hlo_category", 3: b"flops", 4: b"hlo_op", 5: b"copy-done.9",
             6: b"memory_access_breakdown", 7: b"program_id", 8: b"run_id"}
    for k, v in names.items():
        plane.stat_metadata[k].id = k
        plane.stat_metadata[k].name = v
    plane.stats.add(metadata_id=1, str_value=b"TPU v6 Lite")
    md = plane.event_metadata[10]
    md.id, md.name, md.display_name = 10, b"%fusion.1 = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop", b"fusion.1"
    md.stats.add(metadata_id=2, str_value=b"loop fusion")
    md.stats.add(metadata_id=3, uint64_value=1234)
    md.stats.add(metadata_id=7, uint64_value=12190760917235803885)  # > int64 max: must survive
    breakdown = MemoryAccessBreakdown()
    breakdown.memory_accessed.add(operation_type=1, memory_space=1, bytes=100)
    breakdown.memory_accessed.add(operation_type=2, memory_space=1, bytes=28)
    breakdown.memory_accessed.add(operation_type=1, memory_space=3, bytes=999)  # not HBM
    md.stats.add(metadata_id=6, bytes_value=breakdown.SerializeToString())
    bad = plane.event_metadata[11]
    bad.id, bad.name = 11, b"op\xff\xfename"  # invalid UTF-8, as real captures have
    ops = plane.lines.add(id=3, name=b"XLA Ops", timestamp_ns=1_000)
    ops.events.add(metadata_id=10, offset_ps=500, duration_ps=2_000)
    ops.events.add(metadata_id=11, offset_ps=3_000, duration_ps=7)
    async_line = plane.lines.add(id=4, name=b"Async XLA Ops", timestamp_ns=2_000)
    ev = async_line.events.add(metadata_id=10, offset_ps=0, duration_ps=10)
    ev.stats.add(metadata_id=4, ref_value=5)  # hlo_op given by reference to a stat-metadata name
    ev.stats.add(metadata_id=8, int64_value=42)
    return space


def test_hand_built_space_decodes_every_field():
    tables = parse_xspace_bytes(_hand_space().SerializeToString(), "host-a.xplane.pb")
    assert tables.hostname == "host-a"
    assert tables.planes["name"].tolist() == ["/device:TPU:0"]
    assert tables.plane_stats[0]["device_type_string"] == "TPU v6 Lite"
    ev = tables.events
    # start = line.timestamp_ns * 1000 + offset_ps
    assert ev["start_ps"].tolist() == [1_000_500, 1_003_000, 2_000_000]
    assert ev["duration_ps"].tolist() == [2_000, 7, 10]
    md = tables.event_metadata.set_index("metadata_id")
    assert md.loc[10, "hlo_category"] == "loop fusion"
    assert md.loc[10, "flops"] == 1234
    assert md.loc[10, "program_id"] == "12190760917235803885"
    assert md.loc[10, "hbm_bytes"] == 128  # HBM read + write only
    assert md.loc[11, "name"].startswith("op") and "\ufffd" in md.loc[11, "name"]
    # Event stats are kept only where present, keyed by event row; XLA Ops events are skipped.
    stats = tables.event_stats
    assert stats["event"].tolist() == [2]
    assert stats.loc[0, "hlo_op"] == "copy-done.9"
    assert stats.loc[0, "run_id"] == 42


def test_real_tpu_capture_tables(tpu_xplane):
    t = read_xspace(tpu_xplane)
    assert t.hostname == "t1v-n-0"
    assert t.planes["name"].tolist()[:4] == [f"/device:TPU:{i}" for i in range(4)]
    lines = t.lines.merge(t.planes[["plane", "name"]].rename(columns={"name": "plane_name"}), on="plane")
    xla_ops = lines[(lines["plane_name"] == "/device:TPU:0") & (lines["name"] == "XLA Ops")]["line"]
    ops = t.events[t.events["line"].isin(xla_ops)]
    assert len(ops) == 1504
    # 45 events are clipped to zero on the host timeline; the device's own duration is kept.
    clipped = ops[(ops["span_ps"] == 0) & (ops["duration_ps"] > 0)]
    assert len(clipped) == 45
    # What the host timeline loses on clipped events it hands to their neighbours: totals agree.
    assert abs(int(ops["span_ps"].sum()) - int(ops["duration_ps"].sum())) < 0.001 * int(ops["duration_ps"].sum())
    assert t.plane_stats[0]["peak_teraflops_per_second"] == 918.0
    md = t.event_metadata
    done = md[(md["plane"] == 0) & (md["display_name"] == "copy-done.2")].iloc[0]
    assert done["hlo_category"] == "copy-done"
    assert done["bytes_accessed"] == 5368709120
    assert done["name"].startswith("%copy-done.2 = f32[5,1024,1024,256]")
    assert np.issubdtype(t.events["start_ps"].dtype, np.integer)


def test_real_gpu_capture_has_correlation_ids(gpu_xplane):
    t = read_xspace(gpu_xplane)
    assert (t.planes["name"].str.startswith("/device:GPU:")).sum() == 8
    assert t.event_stats["correlation_id"].notna().sum() > 100
    assert t.plane_stats[1]["device_vendor"] == "AMD"


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"", "empty file"),
        (b"this is not a protobuf at all \x00\xff", "not a readable XSpace"),
        (b"\x0a\x05\x08\x01", "not a readable XSpace"),  # a plane whose length runs past the end
    ],
)
def test_bad_bytes_raise_one_line_errors(tmp_path, payload, message):
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(payload)
    with pytest.raises(XPlaneError) as err:
        read_xspace(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_truncated_real_capture_is_rejected(tmp_path, tpu_xplane):
    data = tpu_xplane.read_bytes()
    path = tmp_path / "cut.xplane.pb"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(XPlaneError, match="truncated or corrupt"):
        read_xspace(path)


def test_valid_protobuf_without_planes_is_not_a_profile(tmp_path):
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(XSpace(hostnames=[b"h"]).SerializeToString())
    with pytest.raises(XPlaneError, match="no planes"):
        read_xspace(path)


def test_odd_but_valid_content_is_kept(tmp_path):
    """Ops without metadata, uint64 ids above 2**63: kept, not crashed on, not dropped."""
    space = _hand_space()
    plane = space.planes[0]
    plane.lines[0].events.add(metadata_id=999, offset_ps=9_000, duration_ps=5)  # no such metadata
    plane.lines[1].events[0].stats.add(metadata_id=8, uint64_value=2**64 - 5)  # run_id as a huge uint64
    path = tmp_path / "odd.xplane.pb"
    path.write_bytes(space.SerializeToString())
    tables = read_xspace(path)
    assert tables.event_stats.loc[0, "run_id"] == -5  # two's complement, as the numpy decoder keeps it
    from xladiag.analyzer.capture.build import build_capture

    ops = build_capture([tables]).events
    assert len(ops) == 3
    assert "<unknown op>" in set(ops["op_name"].astype(str))


def test_corrupt_stats_on_a_named_line_is_an_input_error(tmp_path):
    """A damaged stat inside an 'Async XLA Ops' event (a line whose stats we decode) is one clear error."""
    space = _hand_space()
    plane = space.planes[0]
    event = plane.lines[1].events[0]
    payload = event.SerializeToString() + b"\x22\x03\x08\xff\xff"  # a stat whose varint never ends
    del plane.lines[1].events[:]
    # XLine field 4 (events) carrying the raw payload; XPlane field 3 (lines) carrying that line.
    line_bytes = plane.lines[1].SerializeToString() + b"\x22" + _varint(len(payload)) + payload
    del plane.lines[1]
    plane_bytes = plane.SerializeToString() + b"\x1a" + _varint(len(line_bytes)) + line_bytes
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(b"\x0a" + _varint(len(plane_bytes)) + plane_bytes)
    with pytest.raises(XPlaneError, match="corrupt event"):
        read_xspace(path)



# The forked child only decodes planes: JAX, imported by other tests of this process, never runs there.
FORK_OK = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")


@FORK_OK
@pytest.mark.parametrize("capture", ["tpu_xplane", "gpu_xplane"])
def test_planes_decoded_in_worker_processes_give_the_same_tables(request, capture, monkeypatch):
    """Two processes (this one and a forked worker) decode the planes: every table is the one-process one."""
    monkeypatch.setattr(xplane_module, "_PARALLEL_BYTES", 0)  # a small file is read without a pool otherwise
    path = request.getfixturevalue(capture)
    one, two = read_xspace(path, workers=1), read_xspace(path, workers=2)
    for name in ("planes", "lines", "events", "event_stats", "event_metadata"):
        pd.testing.assert_frame_equal(getattr(one, name), getattr(two, name), check_exact=True)
    assert one.plane_stats == two.plane_stats and one.hlo_protos == two.hlo_protos
    assert one.anomalies == two.anomalies and one.fingerprint == two.fingerprint


@FORK_OK
def test_a_corrupt_plane_in_a_worker_is_one_line_naming_the_file(tmp_path, monkeypatch):
    """A plane whose events are damaged fails the same way whichever process decodes it."""
    monkeypatch.setattr(xplane_module, "_PARALLEL_BYTES", 0)
    good = XPlane(id=1, name=b"/device:TPU:0")
    bad = XPlane(id=2, name=b"/device:TPU:1")
    bad.lines.add(name=b"XLA Ops").events.add(metadata_id=1, offset_ps=5, duration_ps=3)
    space = XSpace()
    space.planes.extend([good, bad])
    data = space.SerializeToString().replace(b"\x10\x05\x18\x03", b"\x10\xff\x18\x03")  # offset varint cut
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(data)
    for workers in (1, 2):
        with pytest.raises(XPlaneError, match="bad.xplane.pb: .*corrupt") as err:
            read_xspace(path, workers=workers)
        assert "\n" not in str(err.value)


def _fingerprint_of(planes: list[bytes]) -> str:
    """The fingerprint's definition, computed here from the planes' bytes: blake2b of their SHA-256 heads."""
    import hashlib

    host = hashlib.blake2b(digest_size=16)
    for data in planes:
        host.update(hashlib.sha256(data).digest()[:16])
    return host.hexdigest()


@FORK_OK
@pytest.mark.parametrize("workers", [1, 2])
def test_repeated_planes_are_left_out_and_the_fingerprint_is_of_the_planes_kept(tmp_path, monkeypatch, workers):
    """Planes are hashed while they are decoded (in the workers): a plane repeated byte for byte (a file
    concatenated with itself, an unnamed plane twice) is still left out and counted, an unnamed plane of the same
    size but other bytes kept, and the fingerprint is that of the planes kept, in order."""
    monkeypatch.setattr(xplane_module, "_PARALLEL_BYTES", 0)
    space = _hand_space()
    space.planes.add(id=1, name=b"/host:CPU").lines.add(id=1, name=b"python3").events.add(metadata_id=1)
    for k in (1, 2, 2):  # unnamed planes: two alike, one of the same size but other bytes
        space.planes.add(id=k).lines.add(id=k, name=b"t").events.add(metadata_id=k)
    planes = [p.SerializeToString() for p in space.planes]
    data = space.SerializeToString()
    once = parse_xspace_bytes(data, workers=workers)
    twice = parse_xspace_bytes(data + data, workers=workers)
    assert len(planes[2]) == len(planes[3]) and planes[2] != planes[3] and planes[3] == planes[4]
    assert once.anomalies["duplicate_planes"] == 1 and twice.anomalies["duplicate_planes"] == 1 + len(planes)
    assert list(once.planes["plane_id"]) == [7, 1, 1, 2]
    assert once.fingerprint == twice.fingerprint == _fingerprint_of(planes[:4])
    for name in ("planes", "lines", "events", "event_stats", "event_metadata"):
        pd.testing.assert_frame_equal(getattr(once, name), getattr(twice, name), check_exact=True)
