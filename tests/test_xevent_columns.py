"""The vectorized XEvent decoder against upb: real captures, hand-built edge cases, random events, bad input.

The oracle is always upb parsing the same bytes with our regular schema (``XEvent``), read one event at a time.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from xladiag.parsers import xevent_columns
from xladiag.parsers.xevent_columns import parse_space_raw_events, read_line_events
from xladiag.parsers.xspace_schema import XEvent, XSpace

U64 = (1 << 64) - 1
INT_STATS = ("device_duration_ps", "device_offset_ps", "correlation_id", "group_id", "run_id", "step_num")


# ---- an independent little protobuf encoder -----------------------------------------------------

def varint(value: int) -> bytes:
    value &= U64  # negative int64: 10-byte two's complement, as protobuf writes it
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, wire: int, value) -> bytes:
    tag = varint(number << 3 | wire)
    if wire == 0:
        return tag + varint(value)
    if wire == 1:
        return tag + struct.pack("<d", value) if isinstance(value, float) else tag + struct.pack("<Q", value)
    if wire == 2:
        return tag + varint(len(value)) + value
    return tag + struct.pack("<I", value)  # wire 5


def stat(metadata_id: int, **values) -> bytes:
    wires = {"double": (2, 1), "uint64": (3, 0), "int64": (4, 0), "str": (5, 2), "bytes": (6, 2), "ref": (7, 0)}
    return field(1, 0, metadata_id) + b"".join(field(*wires[k], v) for k, v in values.items())


# ---- the oracle ------------------------------------------------------------------------------------

def expected_columns(payloads, timestamp_ns: int, wanted: dict[str, int]) -> dict[str, np.ndarray]:
    events = [XEvent.FromString(bytes(p)) for p in payloads]
    out = {
        "metadata_id": np.array([e.metadata_id for e in events], np.int64),
        "start_ps": np.array([timestamp_ns * 1000 + e.offset_ps for e in events], np.int64),
        "start_valid": np.ones(len(events), bool),  # real starts fit in int64
        "duration_ps": np.array([e.duration_ps for e in events], np.int64),
    }
    for name, stat_id in wanted.items():
        column = []
        for e in events:  # the event's first stat with this id that holds an integer
            hit = next((s for s in e.stats if s.metadata_id == stat_id
                        and s.WhichOneof("value") in ("int64_value", "uint64_value")), None)
            column.append(U64 if hit is None else getattr(hit, hit.WhichOneof("value")) & U64)  # U64: -1
        out[name] = np.array(column, np.uint64).view(np.int64)  # uint64 >= 2**63 keep their bits
    return out


def assert_same(got: dict, want: dict):
    assert set(got) == set(want)
    for key in want:
        assert got[key].dtype == (bool if key == "start_valid" else np.int64), key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


# ---- real captures ---------------------------------------------------------------------------------

@pytest.mark.parametrize("capture", ["tpu_xplane", "gpu_xplane", "cpu_xplane"])
def test_real_capture_matches_upb_event_by_event(request, capture):
    data = request.getfixturevalue(capture).read_bytes()
    raw, space = parse_space_raw_events(data), XSpace.FromString(data)
    checked = with_stat = 0
    for raw_plane, plane in zip(raw.planes, space.planes, strict=True):
        wanted = {v.name.decode(): k for k, v in plane.stat_metadata.items() if v.name.decode() in INT_STATS}
        for raw_line, line in zip(raw_plane.lines, plane.lines, strict=True):
            assert (raw_line.name, raw_line.timestamp_ns) == (line.name, line.timestamp_ns)
            got = read_line_events(raw_line.events, raw_line.timestamp_ns, wanted)  # the upb container itself
            want = expected_columns(raw_line.events, line.timestamp_ns, wanted)
            np.testing.assert_array_equal(want["metadata_id"], [e.metadata_id for e in line.events])
            assert_same(got, want)
            checked += len(line.events)
            with_stat += sum(int((got[name] != -1).sum()) for name in wanted)
    assert checked > 3000 and with_stat > 400  # the samples hold thousands of events, hundreds with these stats


def test_tpu_op_events_carry_device_duration(tpu_xplane):
    """On the v6e sample every XLA Ops event has device_duration_ps; it differs from the host span on some."""
    raw = parse_space_raw_events(tpu_xplane.read_bytes())
    plane = next(p for p in raw.planes if p.name.startswith(b"/device:TPU:"))
    stat_ids = {v.name.decode(): k for k, v in plane.stat_metadata.items()}
    line = next(ln for ln in plane.lines if ln.name == b"XLA Ops")
    got = read_line_events(line.events, line.timestamp_ns, {"device_duration_ps": stat_ids["device_duration_ps"]})
    assert len(got["metadata_id"]) > 1000
    assert (got["device_duration_ps"] >= 0).all()
    assert (got["device_duration_ps"] != got["duration_ps"]).any()


# ---- hand-built events -----------------------------------------------------------------------------

DUR, OFF = 7, 9  # stat metadata ids used below
WANTED = {"device_duration_ps": DUR, "device_offset_ps": OFF}


def test_hand_built_edge_cases():
    s_dur = field(4, 2, stat(DUR, uint64=1234))
    cases = [
        b"",  # empty event: all zeros, no stats
        field(3, 0, 50) + s_dur + field(1, 0, 12) + field(2, 0, 1000),  # out of order
        field(1, 0, 3) + field(1, 0, 4) + field(3, 0, 5) + field(3, 0, 6),  # repeated: the last wins
        field(5, 0, 17) + field(3, 0, 8),  # num_occurrences instead of offset: offset reads 0
        field(2, 0, 99) + field(5, 0, 17),  # oneof: num_occurrences came last
        field(5, 0, 17) + field(2, 0, 99),  # oneof: offset came last
        field(1, 0, 1) + field(4, 2, stat(DUR, int64=-5)) + field(4, 2, stat(OFF, int64=-(1 << 63))),
        field(4, 2, stat(DUR, uint64=(1 << 64) - 2)) + field(4, 2, stat(OFF, uint64=(1 << 63) + 5)),
        field(3, 0, -7) + field(1, 0, -1),  # negative int64 event fields: 10-byte varints
        field(4, 2, stat(DUR, double=2.5)) + field(4, 2, stat(OFF, str=b"x")),  # not integers: -1
        field(4, 2, stat(DUR, uint64=5, str=b"y")) + field(4, 2, stat(OFF, str=b"y", int64=6)),  # oneof last
        field(4, 2, stat(DUR, uint64=1)) + field(4, 2, stat(DUR, uint64=2)),  # the same stat twice: first
        field(4, 2, stat(DUR, ref=3)) + field(4, 2, stat(DUR, uint64=4)),  # first with an integer value
        # unknown fields of every wire type, also with 2-byte tags (field >= 16), in events and stats
        field(6, 0, 1 << 60) + field(7, 1, 3.5) + field(8, 2, b"\xff" * 300) + field(9, 5, 77)
        + field(1, 0, 300) + field(100, 2, b"abc") + field(2000, 0, -1) + field(2, 0, 1 << 40)
        + field(4, 2, field(20, 5, 1) + stat(DUR, uint64=1 << 56) + field(9, 1, 5)),
        field(2, 0, (1 << 49) - 1) + field(3, 0, 1 << 49) + field(1, 0, 1 << 55),  # 7, 8 and 8-byte varints
        field(4, 0, 5) + field(1, 2, b"zz") + field(2, 0, 11),  # known numbers, wrong wire type: unknown
    ]
    ts = 1_700_000
    got = read_line_events(cases, ts, WANTED)
    assert_same(got, expected_columns(cases, ts, WANTED))
    # A few values spelled out, independently of upb.
    assert got["start_ps"][0] == ts * 1000 and got["metadata_id"][0] == 0 and got["device_duration_ps"][0] == -1
    assert (got["metadata_id"][1], got["start_ps"][1] - ts * 1000, got["duration_ps"][1]) == (12, 1000, 50)
    assert (got["metadata_id"][2], got["duration_ps"][2]) == (4, 6)
    assert [got["start_ps"][i] - ts * 1000 for i in (3, 4, 5)] == [0, 0, 99]
    assert (got["device_duration_ps"][6], got["device_offset_ps"][6]) == (-5, -(1 << 63))
    assert got["device_duration_ps"][7:8].view(np.uint64)[0] == (1 << 64) - 2
    assert got["device_offset_ps"][7:8].view(np.uint64)[0] == (1 << 63) + 5
    assert (got["duration_ps"][8], got["metadata_id"][8]) == (-7, -1)
    assert (got["device_duration_ps"][9], got["device_offset_ps"][9]) == (-1, -1)
    assert (got["device_duration_ps"][10], got["device_offset_ps"][10]) == (-1, 6)
    assert (got["device_duration_ps"][11], got["device_duration_ps"][12]) == (1, 4)
    assert (got["metadata_id"][13], got["start_ps"][13] - ts * 1000, got["device_duration_ps"][13]) == (
        300, 1 << 40, 1 << 56)
    assert (got["start_ps"][14] - ts * 1000, got["duration_ps"][14], got["metadata_id"][14]) == (
        (1 << 49) - 1, 1 << 49, 1 << 55)
    assert (got["metadata_id"][15], got["start_ps"][15] - ts * 1000) == (0, 11)


def test_no_events_and_no_wanted_stats():
    got = read_line_events([], 5, WANTED)
    assert all(len(v) == 0 and v.dtype == (bool if k == "start_valid" else np.int64) for k, v in got.items())
    assert set(got) >= set(WANTED)
    got = read_line_events([field(1, 0, 2) + field(4, 2, stat(DUR, uint64=3))], 0, {})
    assert set(got) == {"metadata_id", "start_ps", "start_valid", "duration_ps"} and got["metadata_id"][0] == 2


def random_value(rng: random.Random) -> int:
    return rng.getrandbits(rng.choice([0, 3, 7, 14, 21, 35, 49, 56, 57, 63, 64]))  # every varint length


def random_event(rng: random.Random) -> bytes:
    parts = []
    for _ in range(rng.randrange(0, 9)):
        kind = rng.randrange(8)
        if kind < 4:  # metadata_id, offset_ps, duration_ps, num_occurrences
            parts.append(field((1, 2, 3, 5)[kind], 0, random_value(rng)))
        elif kind < 7:  # stats, with random value kinds, extra and unknown fields
            s = [field(1, 0, rng.choice([DUR, OFF, 1, 300]))]
            for _ in range(rng.randrange(0, 3)):
                s.append(rng.choice([field(3, 0, random_value(rng)), field(4, 0, random_value(rng)),
                                     field(2, 1, rng.random()), field(5, 2, b"s" * rng.randrange(3)),
                                     field(7, 0, rng.randrange(10)), field(1, 0, rng.choice([DUR, OFF])),
                                     field(rng.choice([8, 30]), 5, 1)]))
            rng.shuffle(s)
            parts.append(field(4, 2, b"".join(s)))
        else:  # unknown field, any wire type
            wire = rng.choice([0, 1, 2, 5])
            value = {0: random_value(rng), 1: rng.getrandbits(64), 2: bytes(rng.randrange(200)), 5: 9}[wire]
            parts.append(field(rng.choice([6, 15, 16, 999]), wire, value))
    rng.shuffle(parts)
    return b"".join(parts)


@pytest.mark.parametrize("chunk", [None, 64])
def test_random_events_match_upb(monkeypatch, chunk):
    """4000 random events (any order, repeats, unknown fields, all varint lengths), also across chunks (of events,
    and of their stats: 3 stat records a slice cut an event's stats apart)."""
    if chunk:
        monkeypatch.setattr(xevent_columns, "_CHUNK", chunk)
        monkeypatch.setattr(xevent_columns, "_STAT_CHUNK", 3)
    rng = random.Random(chunk or 1)
    events = [random_event(rng) for _ in range(4000)]
    got = read_line_events(events, 123, WANTED)
    assert_same(got, expected_columns(events, 123, WANTED))
    assert (got["device_duration_ps"] != -1).sum() > 250  # the stats path was exercised


# ---- malformed input -------------------------------------------------------------------------------

MALFORMED = {
    "tag without value": b"\x08",
    "truncated varint": b"\x08\xff\xff",
    "over-long varint": b"\x08" + b"\xff" * 10 + b"\x01",
    "truncated 2-byte tag": b"\x80",
    "length past the end": b"\x22\x05\x08\x01",
    "huge length": b"\x22" + varint(1 << 63),
    "largest length": b"\x22" + varint(U64),
    "truncated fixed64": b"\x09\x00\x00",
    "truncated fixed32": b"\x0d\x00",
    "field number 0": b"\x00\x01",
    "field number 0, 2-byte tag": b"\x80\x00\x01",
    "wire type 6": b"\x0e\x01",
    "wire type 7": b"\x0f\x01",
    "group (wire type 3)": b"\x0b\x0c",
    "truncated varint in a stat": field(4, 2, b"\x08\xff"),
    "field past the end of its stat": field(4, 2, b"\x2a\x05ab") + field(1, 0, 1) + field(2, 0, 1),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_event_raises_value_error(name):
    good = [field(1, 0, 1) + field(2, 0, 10) + field(3, 0, 5)] * 3
    for events in ([MALFORMED[name]], good + [MALFORMED[name]] + good):
        with pytest.raises(ValueError, match="malformed protobuf"):
            read_line_events(events, 0, WANTED)


def test_parse_space_raw_events_gives_event_payloads(gpu_xplane):
    data = gpu_xplane.read_bytes()
    raw, space = parse_space_raw_events(data), XSpace.FromString(data)
    p, i = next((p, i) for p, plane in enumerate(space.planes) for i, line in enumerate(plane.lines) if line.events)
    line, raw_line = space.planes[p].lines[i], raw.planes[p].lines[i]
    assert len(raw_line.events) == len(line.events) > 0
    assert isinstance(raw_line.events[0], bytes)
    assert [XEvent.FromString(p) for p in raw_line.events] == list(line.events)


def _upb_value(stat):
    """What upb holds for a stat: (oneof field name, value) of the last value field; ('', None) without one."""
    which = stat.WhichOneof("value")
    return (which or "", None if which is None else getattr(stat, which))


@pytest.mark.parametrize("chunk", [None, 64])
def test_random_events_stat_values_match_upb(monkeypatch, chunk):
    """Values of any kind (ints, doubles, strings, refs, none) of the wanted ids, the event's last such stat."""
    if chunk:
        monkeypatch.setattr(xevent_columns, "_CHUNK", chunk)
        monkeypatch.setattr(xevent_columns, "_STAT_CHUNK", 3)
    rng = random.Random(50 + (chunk or 0))
    payloads = [random_event(rng) for _ in range(3000)]
    wanted = {"dur": (DUR,), "either": (OFF, 300)}
    got = read_line_events(payloads, 0, {}, wanted)["stat_values"]
    kinds = {"uint64_value": 1, "int64_value": 2, "double_value": 3, "str_value": 4, "bytes_value": 5,
             "ref_value": 6, "": 7}
    seen = set()
    for i, e in enumerate(XEvent.FromString(p) for p in payloads):
        for name, ids in wanted.items():
            v = got[name]
            hits = [s for s in e.stats if s.metadata_id in ids]
            if not hits:
                assert v.kind[i] == 0
                continue
            which, value = _upb_value(hits[-1])
            seen.add(which)
            assert v.kind[i] == kinds[which], (i, name)
            if which in ("str_value", "bytes_value"):
                assert v.texts[v.text[i]] == value
            elif which == "double_value":
                assert v.value[i].view(np.float64) == value
            elif which:
                assert int(v.value[i]) == value & U64
    assert seen >= {"uint64_value", "int64_value", "double_value", "str_value", "ref_value"}
