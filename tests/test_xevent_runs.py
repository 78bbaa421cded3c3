"""Events decoded where they lie in the plane's bytes (parsers/xevent_runs.py), and the join they fall back to."""

from __future__ import annotations

import pandas as pd
import pytest

import xladiag.parsers.xevent_runs as xevent_runs
import xladiag.parsers.xplane_planes as xplane_planes
from builders.xspace_encoder import _varint_bytes as _varint
from xladiag.parsers.xplane import XPlaneError, parse_xspace_bytes, read_xspace
from xladiag.parsers.xspace_schema import XEvent, XLine, XPlane, XSpace

_TABLES = ("planes", "lines", "events", "event_stats", "event_metadata")


def _same_tables(one, two) -> None:
    for name in _TABLES:
        pd.testing.assert_frame_equal(getattr(one, name), getattr(two, name), check_exact=True)
    assert one.plane_stats == two.plane_stats and one.hlo_protos == two.hlo_protos
    assert one.anomalies == two.anomalies


def _spy_joins(monkeypatch) -> list:
    """Record the lines whose payloads are joined (the fallback) instead of decoded in place."""
    joined, join = [], xplane_planes.read_lines_events

    def spy(events, *args, **kwargs):
        joined.append(sum(map(len, events)))  # events of the lines joined
        return join(events, *args, **kwargs)

    monkeypatch.setattr(xplane_planes, "read_lines_events", spy)
    return joined


def _never_in_place(monkeypatch) -> None:
    monkeypatch.setattr(xevent_runs, "event_payloads", lambda *args: None)


@pytest.mark.parametrize("capture", ["tpu_xplane", "gpu_xplane"])
def test_real_captures_are_decoded_in_place_with_the_joined_columns(request, capture, monkeypatch):
    path = request.getfixturevalue(capture)
    joined = _spy_joins(monkeypatch)
    in_place = read_xspace(path, workers=1)
    assert joined == [] and len(in_place.events) > 1000  # every line's events read from the plane's bytes
    _never_in_place(monkeypatch)
    by_join = read_xspace(path, workers=1)
    assert joined  # the fallback ran this time
    _same_tables(in_place, by_join)


def _field(payload: bytes) -> bytes:
    """An XLine.events field (4, length-delimited)."""
    return b"\x22" + _varint(len(payload)) + payload


def _interleaved(space: XSpace) -> bytes:
    """``space`` serialized with each line's ``display_id`` (field 10) between its first and second events, and
    its ``name`` after them: valid protobuf, the same message, but no single run of event fields."""
    planes = b""
    for plane in space.planes:
        lines = b""
        for line in plane.lines:
            head = XLine()
            head.CopyFrom(line)
            head.ClearField("events"), head.ClearField("display_id"), head.ClearField("name")
            head = head.SerializeToString()
            events = [_field(e.SerializeToString()) for e in line.events]
            display = b"\x50" + _varint(line.display_id)  # field 10, varint
            name = b"\x12" + _varint(len(line.name)) + line.name
            body = head + b"".join(events[:1]) + display + b"".join(events[1:]) + name
            lines += b"\x1a" + _varint(len(body)) + body
        rest = type(plane)()
        rest.CopyFrom(plane)
        del rest.lines[:]
        body = rest.SerializeToString() + lines
        planes += b"\x0a" + _varint(len(body)) + body
    return planes + b"".join(b"\x22" + _varint(len(h)) + h for h in space.hostnames)


def test_events_interleaved_with_line_fields_fall_back_to_the_same_columns(tpu_xplane, monkeypatch):
    space = XSpace.FromString(tpu_xplane.read_bytes())
    for plane in space.planes:
        for line in plane.lines:
            line.display_id = line.id + 1
    plain = parse_xspace_bytes(space.SerializeToString(), "host.xplane.pb")
    joined = _spy_joins(monkeypatch)
    odd = parse_xspace_bytes(_interleaved(space), "host.xplane.pb")
    assert sum(joined) > 1000  # the lines with two or more events were joined, not misread in place
    _same_tables(plain, odd)


def _damaged_capture(tmp_path):
    """A TPU plane whose second 'XLA Ops' event ends inside a varint."""
    events = [XEvent(metadata_id=1, offset_ps=10 * i, duration_ps=3).SerializeToString() for i in range(4)]
    events[1] += b"\x28\xff"  # num_occurrences, its varint cut by the event's end
    line = XLine(id=3, name=b"XLA Ops", timestamp_ns=5).SerializeToString() + b"".join(map(_field, events))
    plane = XPlane(id=1, name=b"/device:TPU:0").SerializeToString() + b"\x1a" + _varint(len(line)) + line
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(b"\x0a" + _varint(len(plane)) + plane)
    return path


def test_a_corrupt_event_is_the_same_one_line_error_in_place_and_joined(tmp_path, monkeypatch):
    path = _damaged_capture(tmp_path)
    joined = _spy_joins(monkeypatch)
    with pytest.raises(XPlaneError) as in_place:
        read_xspace(path, workers=1)
    _never_in_place(monkeypatch)
    with pytest.raises(XPlaneError) as by_join:
        read_xspace(path, workers=1)
    assert str(in_place.value) == str(by_join.value)
    assert "bad.xplane.pb: corrupt event on line 'XLA Ops': malformed protobuf" in str(in_place.value)
    assert "\n" not in str(in_place.value) and joined


def _locate(line: bytes, lengths: list):
    """event_payloads on one serialized XLine (its bytes as the plane's), with upb-like ``lengths``."""
    import numpy as np

    from xladiag.parsers.xevent_columns import EventBuffer

    buf = EventBuffer(line + bytes(16))
    return xevent_runs.event_payloads(buf, np.array([0]), np.array([len(line)]), np.array(lengths, np.int64),
                                      np.array([len(lengths)]))


def test_event_positions_follow_from_the_lengths_of_one_and_many_byte_varints():
    payloads = [XEvent(metadata_id=i, offset_ps=7).SerializeToString() + b"\x22" + _varint(size) + bytes(size)
                for i, size in ((1, 3), (2, 200), (3, 20_000))]  # length varints of 1, 2 and 3 bytes
    head = XLine(id=3, name=b"XLA Ops", timestamp_ns=9).SerializeToString()
    line = head + b"".join(map(_field, payloads)) + b"\x48\x05"  # duration_ps after the events
    start, end = _locate(line, [len(p) for p in payloads])
    assert [line[s:e] for s, e in zip(start.tolist(), end.tolist())] == payloads


@pytest.mark.parametrize("damage", ["interleaved", "long_length", "past_the_end", "wrong_length"])
def test_events_not_one_plain_run_are_not_located(damage):
    payloads = [XEvent(metadata_id=i, offset_ps=7).SerializeToString() for i in range(1, 4)]
    fields = [_field(p) for p in payloads]
    lengths = [len(p) for p in payloads]
    if damage == "interleaved":
        fields.insert(1, b"\x08\x03")  # the line's id between two events
    elif damage == "long_length":  # a length varint written in two bytes where one does
        fields[1] = b"\x22" + bytes([0x80 | lengths[1], 0]) + payloads[1]
    elif damage == "wrong_length":
        lengths[2] += 1
    line = XLine(id=3).SerializeToString() + b"".join(fields)
    if damage == "past_the_end":
        line = line[:-1]
    assert _locate(line, lengths) is None
