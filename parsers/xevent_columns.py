"""Decode all the events of one XLine at once, column-wise with numpy (the parser's hot path).

Reading 1M events through upb ``XEvent`` objects costs seconds of per-event Python attribute access.
Instead we parse with a twin schema in which ``XLine.events`` (field 4) is ``repeated bytes``: that is
wire-compatible, and upb then hands us each event's serialized payload as one bytes object, made in C.
From their lengths ``xevent_runs`` finds the events in the plane's own bytes (else we join the payloads
into one buffer), and we walk every event's fields together: one numpy "round"
decodes the next field of every event that still has bytes left, so the number of rounds is the
number of fields per event (about five), not the number of events. Stats (XStat) are nested
length-delimited ranges inside the events and are walked the same way.

The rounds themselves are ``wire_rounds``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from google.protobuf import descriptor_pb2

from . import xspace_schema
from .proto_descriptors import message_classes
from .wire_rounds import _ALL, _U, EventBuffer, _fields, _pick
from .xevent_rows import distinct_payloads, starts

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
# Tags (field number << 3 | wire type) of the XEvent and XStat fields we read (xplane.proto).
_EV_METADATA_ID, _EV_OFFSET_PS, _EV_DURATION_PS = 1 << 3, 2 << 3, 3 << 3
_EV_STATS, _EV_NUM_OCCURRENCES = 4 << 3 | _LEN, 5 << 3  # num_occurrences shares a oneof with offset_ps
_ST_METADATA_ID, _ST_UINT64, _ST_INT64 = 1 << 3, 3 << 3, 4 << 3
_ST_DOUBLE, _ST_STR, _ST_BYTES, _ST_REF = 2 << 3 | _FIXED64, 5 << 3 | _LEN, 6 << 3 | _LEN, 7 << 3
# XStat value kinds (the oneof's field that came last); 0: the stat is absent from the event.
KIND_UINT64, KIND_INT64, KIND_DOUBLE, KIND_STR, KIND_BYTES, KIND_REF, KIND_NONE = 1, 2, 3, 4, 5, 6, 7
_VALUE_KINDS = ((_ST_UINT64, KIND_UINT64), (_ST_INT64, KIND_INT64), (_ST_DOUBLE, KIND_DOUBLE),
                (_ST_STR, KIND_STR), (_ST_BYTES, KIND_BYTES), (_ST_REF, KIND_REF))


# 16 zero bytes after the joined payloads: the 8-byte load at any cursor (< end <= size) and the
# 9th/10th byte of a long varint stay inside the buffer.
_PAD = bytes(16)
_CHUNK = 1 << 15  # events decoded per pass (see read_line_events)
_STAT_CHUNK = 1 << 14  # stat records decoded per pass (stat_records): their temporaries stay in cache




def _raw_events_classes(*names: str):
    """Our schema with XLine.events declared ``repeated bytes`` (its own pool, same names)."""
    bytes_field = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    messages = dict(xspace_schema.MESSAGES)
    messages["XLine"] = [(n, num, bytes_field, label, None, o) if num == 4 else (n, num, t, label, tn, o)
                         for n, num, t, label, tn, o in messages["XLine"]]
    classes = message_classes(xspace_schema.PACKAGE, messages, xspace_schema.ONEOFS, xspace_schema.MAP_ENTRIES)
    return [classes[n] for n in names]


XSpaceRawEvents, XPlaneRawEvents = _raw_events_classes("XSpace", "XPlane")


def parse_plane_raw_events(data: bytes):
    """Parse one serialized XPlane; ``plane.lines[i].events`` is a list-like of event payload bytes."""
    plane = XPlaneRawEvents()
    plane.ParseFromString(data)  # raises google.protobuf.message.DecodeError on a corrupt plane
    return plane


def parse_space_raw_events(data: bytes):
    """Parse a serialized XSpace; ``plane.lines[i].events`` is then a list-like of event payload bytes."""
    space = XSpaceRawEvents()
    space.ParseFromString(data)  # raises google.protobuf.message.DecodeError on a corrupt file
    return space



class StatValues(NamedTuple):
    """One stat's value on each event of a line: its last record there (a dict of the stats keeps the last)."""

    kind: np.ndarray  # int8 KIND_*; KIND_NONE for a record without a value, 0 where the event has none
    value: np.ndarray  # uint64: the integer, the ref id (KIND_REF), the double's bits, or a str/bytes length
    text: np.ndarray  # int64: for KIND_STR/KIND_BYTES the index into ``texts``, else -1
    texts: list  # the distinct str/bytes payloads (bytes)


def read_line_events(line_raw_events: Sequence[bytes], timestamp_ns: int,
                     wanted_stat_ids: dict[str, int], value_stat_ids: dict[str, tuple] | None = None) -> dict:
    """Columns of one XLine's events, from their payloads (an ``XSpaceRawEvents`` line's ``.events``).

    Returns int64 arrays: ``metadata_id``, ``start_ps`` (``timestamp_ns * 1000 + offset_ps``; offset 0
    for an aggregated event that has ``num_occurrences`` instead; meaningless where the bool array
    ``start_valid`` is False: the sum is past the int64 range), ``duration_ps``, and per wanted stat
    name the integer (uint64/int64 field) value of the event's first stat with that metadata id, or -1.
    uint64 stat values keep their 64 bits: ``.view(np.uint64)`` recovers those >= 2**63.
    ``value_stat_ids`` (name -> metadata ids): the values of any kind of those stats, as ``stat_values``
    (name -> :class:`StatValues`).
    Raises ValueError on a malformed event (stats are decoded, hence checked, only if some are wanted).
    """
    return read_lines_events([line_raw_events], [timestamp_ns], wanted_stat_ids, value_stat_ids)


def read_lines_events(lines_raw_events: Sequence[Sequence[bytes]], timestamps_ns: Sequence[int],
                      wanted_stat_ids: dict[str, int], value_stat_ids: dict[str, tuple] | None = None) -> dict:
    """:func:`read_line_events` of several lines at once, their events one after the other: a plane of many
    lines of few events (50k threads of one event each) costs numpy's per-call overhead once, not per line.

    The payloads are joined into one buffer here; :func:`read_events` decodes events where they lie."""
    # One pass over upb's containers; a list is fast to measure and join.
    payloads = list(itertools.chain.from_iterable(lines_raw_events))
    n = len(payloads)
    lengths = np.fromiter(map(len, payloads), np.int64, n)
    payloads.append(_PAD)
    buf = EventBuffer(b"".join(payloads))
    del payloads
    end = np.cumsum(lengths)
    counts = np.fromiter(map(len, lines_raw_events), np.int64, len(lines_raw_events))
    return read_events(buf, end - lengths, end, counts, timestamps_ns, wanted_stat_ids, value_stat_ids)


def read_events(buf: EventBuffer, start: np.ndarray, end: np.ndarray, counts: np.ndarray,
                timestamps_ns: Sequence[int], wanted_stat_ids: dict[str, int],
                value_stat_ids: dict[str, tuple] | None = None) -> dict:
    """:func:`read_lines_events` of the event payloads ``buf[start:end]`` (in line order, ``counts`` per line)."""
    n = len(start)
    # int64 fields arrive as uint64 bits (two's complement), so the views below restore negatives.
    out = {key: np.zeros(n, np.uint64) for key in ("metadata_id", "offset_ps", "duration_ps")}
    out.update({name: np.full(n, -1, np.int64) for name in wanted_stat_ids})
    value_stat_ids = value_stat_ids or {}
    values = {name: (np.zeros(n, np.int8), np.zeros(n, np.uint64), np.zeros(n, np.int64)) for name in value_stat_ids}
    # Chunks of events: each round's temporaries then stay in cache and are reused by malloc instead
    # of being fresh pages (page faults cost a third of the time on whole 250k-event lines).
    for first in range(0, n, _CHUNK):
        part = slice(first, first + _CHUNK)
        _read_chunk(buf, start[part], end[part], {key: column[part] for key, column in out.items()}, wanted_stat_ids,
                    {name: tuple(c[part] for c in cols) for name, cols in values.items()}, value_stat_ids)
    start, start_valid = starts([int(t) for t in timestamps_ns], counts, out.pop("offset_ps").view(np.int64))
    stat_values = {}
    for name, (kind, value, where) in values.items():
        text = np.full(n, -1, np.int64)
        has_text = np.flatnonzero((kind == KIND_STR) | (kind == KIND_BYTES))
        text[has_text], texts = distinct_payloads(buf.u8, where[has_text], value[has_text].view(np.int64))
        stat_values[name] = StatValues(kind, value, text, texts)
    return {
        "metadata_id": out.pop("metadata_id").view(np.int64),
        "start_ps": start,
        "start_valid": start_valid,
        "duration_ps": out.pop("duration_ps").view(np.int64),
        **out,
        **({"stat_values": stat_values} if value_stat_ids else {}),
    }


def _read_chunk(buf: EventBuffer, start: np.ndarray, end: np.ndarray, out: dict, wanted_stat_ids: dict,
                values: dict, value_stat_ids: dict) -> None:
    """Decode the events ``[start, end)`` into the (sliced) columns ``out`` and ``values``."""
    stats: list[tuple] = []  # per round: (event row, start, end) of its stats fields
    for rows, tags, value, after in _fields(buf, start, end):
        for tag, key in ((_EV_METADATA_ID, "metadata_id"), (_EV_OFFSET_PS, "offset_ps"),
                         (_EV_DURATION_PS, "duration_ps")):
            if hit := _pick(rows, tags, tag):
                out[key][hit[0]] = value[hit[1]]
        if hit := _pick(rows, tags, _EV_NUM_OCCURRENCES):
            out["offset_ps"][hit[0]] = 0  # the oneof now holds num_occurrences: offset_ps reads 0
        if (wanted_stat_ids or value_stat_ids) and (hit := _pick(rows, tags, _EV_STATS)):
            at = after[hit[1]]
            stats.append((np.arange(start.size)[hit[0]], at, at + value[hit[1]].view(np.int64)))
    if not stats:
        return
    # Concatenated round by round: within one event, its stats stay in document order.
    event, start, end = (np.concatenate(c) for c in zip(*stats))
    metadata_id, kind, value, where = stat_records(buf, start, end)

    is_int = (kind == KIND_UINT64) | (kind == KIND_INT64)
    for name, stat_id in wanted_stat_ids.items():
        match = np.flatnonzero(is_int & (metadata_id == _U(stat_id)))
        rows = event[match]
        if _repeated(rows):
            # The same stat twice in one event: keep the first, as the upb path does (order: event, position).
            order = np.lexsort((start[match], rows))
            match, rows = match[order], rows[order]
            first = np.r_[True, rows[1:] != rows[:-1]]
            match, rows = match[first], rows[first]
        out[name][rows] = value[match].view(np.int64)
    for name, stat_ids in value_stat_ids.items():
        match = np.flatnonzero(np.isin(metadata_id, np.asarray(stat_ids, _U)))
        rows = event[match]
        if _repeated(rows):  # twice in one event: the last record counts
            order = np.lexsort((start[match], rows))
            match, rows = match[order], rows[order]
            last = np.r_[rows[1:] != rows[:-1], True]
            match, rows = match[last], rows[last]
        out_kind, out_value, out_where = values[name]
        out_kind[rows] = np.where(kind[match] == 0, KIND_NONE, kind[match])
        out_value[rows] = value[match]
        out_where[rows] = where[match]


def _repeated(rows: np.ndarray) -> bool:
    """Whether an event number repeats in ``rows``: counted only where they do not simply increase (records of
    one round, the usual case, are one per event, in order)."""
    if rows.size < 2 or (rows[1:] > rows[:-1]).all():
        return False
    return bool(np.bincount(rows).max() > 1)


def stat_records(buf: EventBuffer, start: np.ndarray, end: np.ndarray) -> tuple:
    """The XStat messages ``buf[start:end]`` as (metadata_id uint64, kind int8 KIND_* or 0 without a value,
    value uint64: the integer, ref id, double's bits or str/bytes length, where: the str/bytes payload's start)."""
    out = tuple(np.zeros(start.size, dtype) for dtype in (_U, np.int8, _U, np.int64))
    # In slices, as events are (read_events): an event has ten stats or more on GPU streams.
    for first in range(0, start.size, _STAT_CHUNK):
        part = slice(first, first + _STAT_CHUNK)
        _stat_chunk(buf, start[part], end[part], *(column[part] for column in out))
    return out


def _stat_chunk(buf: EventBuffer, start: np.ndarray, end: np.ndarray, metadata_id, kind, value, where) -> None:
    for rows, tags, val, after in _fields(buf, start, end):
        if hit := _pick(rows, tags, _ST_METADATA_ID):
            metadata_id[hit[0]] = val[hit[1]]
        # The value fields are one oneof: the last one present decides.
        if not isinstance(tags, int):  # mixed tags: each field's kind from a table, in one pass
            _mixed_values(buf, rows, tags, val, after, (kind, value, where))
            continue
        for tag, code in _VALUE_KINDS:
            if hit := _pick(rows, tags, tag):
                kind[hit[0]] = code
                at = after[hit[1]]
                value[hit[0]] = buf.word[at] if tag == _ST_DOUBLE else val[hit[1]]  # str/bytes: the length
                where[hit[0]] = at


_KIND_OF_TAG = np.zeros(257, np.int8)  # by tag (256: any tag of two bytes or more): KIND_*, 0 for no value field
for _tag, _code in _VALUE_KINDS:
    _KIND_OF_TAG[_tag] = _code


def _mixed_values(buf: EventBuffer, rows, tags: np.ndarray, val: np.ndarray, after: np.ndarray, out: tuple) -> None:
    """Record the value fields of one round of mixed tags in ``out`` (kind, value, where) of stat_records."""
    code = _KIND_OF_TAG[tags if tags.dtype == np.uint8 else np.minimum(tags, _U(256)).view(np.int64)]
    sel = np.flatnonzero(code)
    if not sel.size:
        return
    kind, value, where = out
    dest = sel if rows is _ALL else rows[sel]
    code, at, v = code[sel], after[sel], val[sel]
    double = np.flatnonzero(code == KIND_DOUBLE)
    if double.size:  # its 8 bytes, not a varint
        v[double] = buf.word[at[double]]
    kind[dest], value[dest], where[dest] = code, v, at
