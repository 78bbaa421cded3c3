"""The plane walk's fast path (one-byte keys and lengths) agrees with the general varint walk, and a plane's
id-only stats (a call-stack tree of 300k id pairs on JAX 0.11 GPU captures) are left out of its properties."""

from __future__ import annotations

from pathlib import Path

import pytest

from xladiag.parsers.xplane import parse_xspace_bytes
from xladiag.parsers.xspace_schema import XSpace
from xladiag.parsers.xspace_wire import WireError, _slow_field, fields, split_space

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "sample_profiles").rglob("*.xplane.pb"))


def _general_walk(buf, start: int, end: int) -> list[tuple]:
    out, pos = [], start
    while pos < end:
        nxt, value_start, key = _slow_field(buf, pos, end)
        out.append((key >> 3, key & 7, pos, value_start, nxt))
        pos = nxt
    return out


@pytest.mark.parametrize("path", SAMPLES[:6], ids=lambda p: p.parent.parent.parent.parent.name)
def test_fast_walk_matches_the_general_walk_on_real_planes(path):
    buf = path.read_bytes()
    top = list(fields(buf, 0, len(buf)))
    assert top == _general_walk(buf, 0, len(buf))
    for number, wire, _, start, end in top:
        if number == 1 and wire == 2:  # each plane's own fields
            assert list(fields(buf, start, end)) == _general_walk(buf, start, end)


@pytest.mark.parametrize("damaged, message", [(b"\x00\x01", "field number 0"), (b"\x12\x05ab", "claims 5 bytes"),
                                              (b"\x0b\x01", "unsupported wire type"), (b"\x08", "truncated varint")])
def test_fast_walk_keeps_the_one_line_errors(damaged, message):
    with pytest.raises(WireError, match=message):
        list(fields(damaged, 0, len(damaged)))


def test_unnamed_plane_stats_are_not_properties():
    space = XSpace()
    plane = space.planes.add(id=7, name=b"/host:__ScopeRangeCallStack__")
    plane.stat_metadata[1].id = 1
    plane.stat_metadata[1].name = b"process_id"
    plane.stats.add(metadata_id=1, int64_value=42)
    for i in range(1000, 6000):  # id pairs with no stat metadata: a tree, not properties
        plane.stats.add(metadata_id=i, int64_value=i - 1)
    data = space.SerializeToString()
    assert len(split_space(data).planes) == 1
    tables = parse_xspace_bytes(data)
    assert tables.plane_stats == ({"process_id": 42},)
