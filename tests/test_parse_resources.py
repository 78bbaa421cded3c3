"""Time and memory of the xplane parser stay linear in the input with a small constant, on hostile captures:
a huge op name, a plane past protobuf's limit or the memory budget, a sparse file's holes, many one-event
lines. Peaks are measured in a fresh process (``ru_maxrss`` after the imports vs after the read) on inputs of
a few MB, and asserted as a ratio to the input with generous margins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from builders.xspace_encoder import _varint_bytes as _varint
from xladiag.parsers.xplane import XPlaneError, read_xspace
from xladiag.parsers.xspace_schema import XSpace
from xladiag.parsers.xspace_wire import BUDGET_ENV, MAX_TEXT_BYTES

_MEASURE = """
import json, resource, sys, time
import xladiag.parsers.xplane as xp
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
try:
    s = xp.read_xspace(sys.argv[1], workers=1)
    out = {"events": len(s.events), "names": [len(n) for n in s.event_metadata["name"]], "anomalies": s.anomalies}
except Exception as exc:
    out = {"error": str(exc)}
out["seconds"] = time.perf_counter() - t
out["peak_bytes"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
print(json.dumps(out))
"""


def _measured(path, **env) -> dict:
    proc = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)



def _sparse_plane(path, claimed: int, line_start: bytes = b"") -> None:
    """A file whose one plane holds an XLine field (3) of ``claimed`` bytes, ``line_start`` then holes (zeros),
    written sparse."""
    plane = b"\x12\x0d/device:TPU:0" + b"\x1a" + _varint(claimed) + line_start
    claimed -= len(line_start)
    head = b"\x0a" + _varint(len(plane) + claimed) + plane
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + claimed)
    if os.stat(path).st_blocks * 512 > claimed // 2:
        pytest.skip("this file system writes holes out")


def test_a_huge_op_name_is_cut_at_parse_time_without_being_copied(tmp_path):
    """A 20 MB XEventMetadata name: cut to 1 MiB with a marker and counted; the peak stays near the kept
    name (it was 4x the file: the plane copied, upb's copy, the name's bytes object)."""
    size = 20_000_000
    space = XSpace()
    plane = space.planes.add(id=1, name=b"/device:TPU:0")
    plane.event_metadata[1].id = 1
    plane.event_metadata[1].name = b"a" * size
    plane.lines.add(id=3, name=b"XLA Ops").events.add(metadata_id=1, offset_ps=5, duration_ps=3)
    path = tmp_path / "long.xplane.pb"
    path.write_bytes(space.SerializeToString())
    got = _measured(path)
    assert got["names"] == [MAX_TEXT_BYTES] and got["anomalies"]["cut_names"] == 1
    assert got["peak_bytes"] < 0.5 * size, got
    name = read_xspace(path).event_metadata["name"][0]
    assert name.startswith("aaaa") and name.endswith(f"[{size:,} bytes, cut]")


def test_a_plane_past_protobufs_limit_is_refused_before_a_copy(tmp_path):
    """2.2 GB (sparse): one line naming the plane and the limit, at once (it was 4.3 GB of memory, 30 s, and
    'not a readable XSpace')."""
    path = tmp_path / "big.xplane.pb"
    _sparse_plane(path, 2_200_000_000, line_start=b"\x08\x01")  # XLine.id = 1, then holes
    got = _measured(path)
    assert "plane '/device:TPU:0' is 2,200,000,021 bytes, past the 2 GiB" in got["error"], got
    assert got["seconds"] < 5 and got["peak_bytes"] < 50 << 20, got


def test_a_sparse_holes_plane_fails_on_its_first_byte(tmp_path):
    """A 300 MB plane of zeros: 'field number 0' before the plane is hashed, copied and parsed (it was 2x the
    plane in memory)."""
    path = tmp_path / "holes.xplane.pb"
    _sparse_plane(path, 300_000_000)
    got = _measured(path)
    assert "field number 0 at byte" in got["error"] and path.name in got["error"], got
    assert got["seconds"] < 5 and got["peak_bytes"] < 50 << 20, got


def test_a_plane_over_the_memory_budget_is_one_line_before_allocating(tmp_path, tpu_xplane):
    got = _measured(tpu_xplane, **{BUDGET_ENV: "100000"})
    assert "reading it needs at least" in got["error"] and BUDGET_ENV in got["error"], got
    assert str(tpu_xplane) in got["error"] and "\n" not in got["error"]
    assert got["peak_bytes"] < 50 << 20


def _many_lines(path, n: int) -> list[tuple[int, int]]:
    """``n`` host-thread lines of one event each (with a string stat), on differing timebases; (timestamp_ns,
    offset_ps) of each."""
    space = XSpace()
    plane = space.planes.add(id=1, name=b"/host:CPU")
    plane.event_metadata[1].id = 1
    plane.event_metadata[1].name = b"op"
    plane.stat_metadata[1].id = 1
    plane.stat_metadata[1].name = b"hlo_op"
    times = []
    for i in range(n):
        line = plane.lines.add(id=i, name=f"thread {i}".encode(), timestamp_ns=1000 + i % 7)
        event = line.events.add(metadata_id=1, offset_ps=5 + i, duration_ps=3)
        event.stats.add(metadata_id=1, str_value=f"fusion.{i % 3}".encode())
        times.append((1000 + i % 7, 5 + i))
    path.write_bytes(space.SerializeToString())
    return times


def test_many_one_event_lines_cost_little_per_line(tmp_path):
    """10k lines of one event: numpy's per-call cost is paid per batch of lines, not per line (it was ~5 ms a
    line: 50k lines took minutes); every event keeps its own line and timebase."""
    path = tmp_path / "lines.xplane.pb"
    times = _many_lines(path, 10_000)
    t0 = time.perf_counter()
    space = read_xspace(path, workers=1)
    per_line = (time.perf_counter() - t0) / len(times)
    assert per_line < 300e-6, f"{per_line * 1e6:.0f} us per line"
    events = space.events
    assert events["line"].tolist() == list(range(len(times)))
    assert events["start_ps"].tolist() == [ts * 1000 + off for ts, off in times]
    assert space.event_stats["hlo_op"].tolist() == [f"fusion.{i % 3}" for i in range(len(times))]


def test_a_corrupt_event_in_a_batch_of_lines_names_its_line(tmp_path):
    path = tmp_path / "lines.xplane.pb"
    _many_lines(path, 50)
    data = path.read_bytes()
    at = data.index(b"thread 31")
    cut = data.index(b"\x10\x24\x18\x03", at)  # thread 31's event: offset_ps 36 (0x24), duration 3
    path.write_bytes(data[:cut] + b"\x10\xff\x18\x03" + data[cut + 4:])  # the offset's varint never ends
    with pytest.raises(XPlaneError, match="corrupt event on line 'thread 31'"):
        read_xspace(path, workers=1)


def test_a_real_shaped_capture_peaks_at_a_few_times_its_size(tmp_path):
    """~100k op events (a few MB): the peak over the imports is a small multiple of the file (4.2x now)."""
    from builders.large_capture import large_capture

    path = large_capture(tmp_path, 100_000)
    got = _measured(path)
    assert got["events"] > 90_000
    assert got["peak_bytes"] < 8 * os.path.getsize(path), (got["peak_bytes"], os.path.getsize(path))
