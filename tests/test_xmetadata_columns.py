"""Op metadata decoded column-wise (parsers/xmetadata_columns.py) gives the rows upb's objects give."""

from __future__ import annotations

import pandas as pd
import pytest

import xladiag.parsers.xplane_metadata as xplane_metadata
from builders.xspace_encoder import _varint_bytes as _varint
from xladiag.parsers.xplane import parse_xspace_bytes, read_xspace
from xladiag.parsers.xspace_schema import MemoryAccessBreakdown, XSpace


def _upb_planes(monkeypatch) -> list:
    """Record the planes whose metadata upb's objects read (the fallback)."""
    planes, upb_rows = [], xplane_metadata._upb_rows

    def spy(plane_idx, *args):
        planes.append(plane_idx)
        return upb_rows(plane_idx, *args)

    monkeypatch.setattr(xplane_metadata, "_upb_rows", spy)
    return planes


def _only_upb(monkeypatch) -> None:
    monkeypatch.setattr(xplane_metadata, "metadata_columns", lambda *args: None)


def _same_metadata(one, two) -> None:
    pd.testing.assert_frame_equal(one.event_metadata, two.event_metadata, check_exact=True)
    assert one.hlo_protos == two.hlo_protos


@pytest.mark.parametrize("capture", ["tpu_xplane", "gpu_xplane"])
def test_real_captures_metadata_column_wise_equals_upb(request, capture, monkeypatch):
    path = request.getfixturevalue(capture)
    by_upb = _upb_planes(monkeypatch)
    columns = read_xspace(path, workers=1)
    names = columns.planes.set_index("plane")["name"]
    assert all(names[p] == "/host:metadata" for p in by_upb)  # every other plane read column-wise
    assert len(columns.event_metadata) > 100
    _only_upb(monkeypatch)
    _same_metadata(columns, read_xspace(path, workers=1))


def _odd_space() -> XSpace:
    """Metadata stats of every kind, repeated, valueless, referenced, damaged."""
    space = XSpace(hostnames=[b"h"])
    plane = space.planes.add(id=1, name=b"/device:TPU:0")
    names = {1: b"hlo_category", 2: b"flops", 3: b"program_id", 4: b"memory_access_breakdown", 5: b"tf_op",
             6: b"bytes_accessed", 7: b"convolution", 8: b"source", 9: b"flops"}  # 9: a second id of one name
    for k, v in names.items():
        plane.stat_metadata[k].id, plane.stat_metadata[k].name = k, v
    good = MemoryAccessBreakdown()
    good.memory_accessed.add(operation_type=1, memory_space=1, bytes=64)
    stats = [
        dict(metadata_id=1, ref_value=7), dict(metadata_id=2, uint64_value=2**63 + 5),
        dict(metadata_id=3, int64_value=-3),
        dict(metadata_id=4, bytes_value=good.SerializeToString()), dict(metadata_id=5, str_value=b"a\xffb"),
        dict(metadata_id=6, double_value=1.5), dict(metadata_id=8, uint64_value=4),
    ]
    for i, extra in enumerate([
        [],
        [dict(metadata_id=2, str_value=b"12")],  # a count as text; the later stat wins
        [dict(metadata_id=9, int64_value=-7)],  # another id named flops
        [dict(metadata_id=1)],  # a stat without a value: None
        [dict(metadata_id=4, bytes_value=b"\xff\xff")],  # a breakdown that does not parse
        [dict(metadata_id=4, str_value=b"x"), dict(metadata_id=3, double_value=2.0)],
        [dict(metadata_id=4, bytes_value=b""), dict(metadata_id=77, uint64_value=1)],  # empty; unknown id
    ]):
        md = plane.event_metadata[100 + i]
        md.id, md.name, md.display_name = 100 + i, f"%op.{i} = f32[2] add()".encode(), f"op.{i}".encode()
        for stat in stats + extra:
            md.stats.add(**stat)
    plane.event_metadata[200].id = 200  # no name, no stats
    line = plane.lines.add(id=3, name=b"XLA Ops")
    line.events.add(metadata_id=100, offset_ps=1, duration_ps=2)
    return space


def test_odd_metadata_column_wise_equals_upb(monkeypatch):
    data = _odd_space().SerializeToString()
    by_upb = _upb_planes(monkeypatch)
    columns = parse_xspace_bytes(data, "h.xplane.pb")
    assert by_upb == [] and len(columns.event_metadata) == 8
    _only_upb(monkeypatch)
    _same_metadata(columns, parse_xspace_bytes(data, "h.xplane.pb"))
    row = columns.event_metadata.set_index("metadata_id").loc[101]
    assert row["flops"] == 12 and row["hlo_category"] == "convolution" and row["hbm_bytes"] == 64.0


def test_a_metadata_entry_given_twice_is_left_to_upb(monkeypatch):
    """Two map entries with one key (upb keeps the last): read by upb, the same rows as without the first."""
    space = _odd_space()
    plane = space.planes[0]
    first = XSpace()
    first.planes.add().event_metadata[103].name = b"overwritten"
    entry = first.planes[0].SerializeToString()  # one field 4: the entry for key 103
    body = entry + plane.SerializeToString()  # the stale entry first: the real one, later, wins
    data = b"\x0a" + _varint(len(body)) + body + b"\x22\x01h"
    by_upb = _upb_planes(monkeypatch)
    twice = parse_xspace_bytes(data, "h.xplane.pb")
    assert by_upb == [0]
    _same_metadata(twice, parse_xspace_bytes(space.SerializeToString(), "h.xplane.pb"))
