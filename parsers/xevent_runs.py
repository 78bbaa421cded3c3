"""Where each XLine's events lie in its plane's own bytes, so that ``xevent_columns`` decodes them in place.

upb parses the plane with ``XLine.events`` as ``repeated bytes`` (``xevent_columns``): that gives the structure
and each event's length, but copying 5M payloads into bytes objects and joining them cost more than decoding
them. An XLine serialized by XLA/xprof holds its events as one run of fields (tag byte ``0x22``, varint length,
payload) after its few scalar fields. From the line's position in the plane, a short walk of its fields up to
the first event and upb's lengths, every event's position follows; it is then checked, all events at once:
each predicted tag byte is ``0x22`` and the varint after it is the event's length, encoded as short as it can
be, and the run ends inside the line. Fields interleaved with the events (valid protobuf, written by no
exporter we know) fail that check, and the caller falls back to joining the payloads.
"""

from __future__ import annotations

import hashlib
import itertools

import numpy as np

from .wire_rounds import EventBuffer
from .xspace_wire import INDEXED_FIELDS, PlaneBytes, WireError, fields, plane_digest, release_pages

_EVENT_TAG = 4 << 3 | 2  # XLine.events: field 4, length-delimited
_MAX_HEADER_FIELDS = 32  # fields before a line's first event (real lines: id, name, timestamp_ns)
_MAX_LENGTH = 1 << 40  # a length past any plane (< 2 GiB): damage; also keeps the sums below from wrapping
_CHUNK = 1 << 16  # events whose lengths are checked at once


# 16 bytes after the plane, for :class:`EventBuffer` (it loads 8-byte words at any position before the end):
# one field upb keeps as unknown (XPlane field 2047, 13 bytes), so that upb parses the padded bytes as they are
# (it copies a memoryview's bytes first, not a bytearray's), and the padding costs no second copy of the plane.
_PAD_FIELD = b"\xfa\x7f\x0d" + bytes(13)
_SLICE = 1 << 24  # bytes copied out of the file's map at a time


def padded_plane(data) -> tuple[bytearray, bytes]:
    """The plane's bytes (bytes, or ``xspace_wire.PlaneBytes`` still in the file's map) copied once, followed by
    ``_PAD_FIELD``, and their ``xspace_wire.plane_digest`` (hashed here, slice by slice while it is in cache).
    The plane's own fields end where it starts (``xspace_wire.split_space`` checked them)."""
    size = len(data)
    src, start = (data.buf, data.start) if isinstance(data, PlaneBytes) else (data, 0)
    out = bytearray(size + len(_PAD_FIELD))
    out[size:] = _PAD_FIELD
    sha = hashlib.sha256()
    with memoryview(src) as view, memoryview(out) as copy:  # released at once: a map with an exported view
        for at in range(0, size, _SLICE):  # slice by slice, each one's file pages dropped once copied (cannot close)
            end = min(at + _SLICE, size)
            copy[at:end] = view[start + at:start + end]
            sha.update(copy[at:end])
            release_pages(src, start + at, start + end)
    return out, plane_digest(sha)


def _first_events(buf: EventBuffer, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """The position of each line's first event tag, walking the fields before it (all lines at once); None
    where the structure is not the usual one (an event field not tagged ``0x22``, no event before the end)."""
    pos, active = start.copy(), np.arange(start.size)
    for _ in range(_MAX_HEADER_FIELDS):
        at = pos[active]
        tag, tag_length = buf.varints(at)
        on_event = (tag == _EVENT_TAG) & (tag_length == 1)
        if ((tag >> np.uint64(3) == 4) & ~on_event).any() or (tag < 8).any():
            return None
        keep = ~on_event
        active, at, tag, tag_length = active[keep], at[keep], tag[keep], tag_length[keep]
        if not active.size:
            return pos
        wire = (tag & np.uint64(7)).astype(np.int64)
        if not np.isin(wire, (0, 1, 2, 5)).all():
            return None
        value, length = buf.varints(np.minimum(at + tag_length, buf.u8.size - 10))
        if ((wire == 2) & (value >= _MAX_LENGTH)).any():
            return None
        size = np.where(wire == 0, length, np.where(wire == 2, length + value.astype(np.int64),
                                                    np.where(wire == 1, 8, 4)))
        nxt = at + tag_length + size
        if (nxt >= end[active]).any():  # a line with events ends after its first event's tag
            return None
        pos[active] = nxt
    return None


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of the shortest varint of each (non-negative) value (int8: one byte per event, not eight)."""
    size = np.ones(values.size, np.int8)
    longest = int(values.max(initial=0))
    for bits in range(7, 42, 7):
        if longest < 1 << bits:  # events are short: one or two passes
            break
        size += values >= (1 << bits)
    return size


def event_payloads(buf: EventBuffer, line_start: np.ndarray, line_end: np.ndarray, lengths: np.ndarray,
                   counts: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(start, end) in ``buf`` of the payloads of the lines ``buf[line_start:line_end]`` whose events, ``counts``
    per line (each > 0), have ``lengths`` (upb's); None unless every line holds them as one run of fields."""
    if (lengths >= _MAX_LENGTH).any():
        return None
    first = _first_events(buf, line_start, line_end)
    if first is None:
        return None
    # Few arrays the size of the events, computed in place: this runs on millions of events at once.
    length_size = _varint_sizes(lengths)
    at = lengths + length_size
    at += 1
    np.cumsum(at, out=at)  # where each field of the run ends, as if the lines' runs were one
    line_last = np.cumsum(counts) - 1
    before = np.r_[0, at[line_last[:-1]]]  # the runs of the earlier lines
    if (first + at[line_last] - before > line_end).any():
        return None
    at -= lengths
    at -= length_size
    at -= 1
    at += first[0] if len(counts) == 1 else np.repeat(first - before, counts)  # each event's tag
    if (buf.u8[at] != _EVENT_TAG).any():
        return None
    at += 1
    for part in range(0, at.size, _CHUNK):  # the varints after the tags, in slices
        value, value_size = buf.varints(at[part:part + _CHUNK])
        if (value.view(np.int64) != lengths[part:part + _CHUNK]).any() or (
                value_size != length_size[part:part + _CHUNK]).any():
            return None
    at += length_size
    return at, at + lengths


class PlaneEvents:
    """A plane's padded bytes, and ``(start, end)`` in them of each line and each op metadata entry, in order
    (None: unknown, or not as many as upb read)."""

    def __init__(self, raw: bytearray, index: dict | None, num_lines: int, num_metadata: int):
        self.buf = EventBuffer(raw)
        self.lines = _ranges(index, INDEXED_FIELDS[0], num_lines)
        self.metadata = _ranges(index, INDEXED_FIELDS[1], num_metadata)

    def payloads(self, line_indices: list, events: list) -> tuple | None:
        """(start, end, counts per line) of the events of the lines ``line_indices`` (upb's ``line.events`` of
        each, none empty), in place; None where they are not one run of fields (join them instead)."""
        if self.lines is None:
            return None
        counts = np.fromiter(map(len, events), np.int64, len(events))
        # Each payload's bytes object is made by upb and freed at once: only its length is kept.
        lengths = np.fromiter(map(len, itertools.chain.from_iterable(events)), np.int64, int(counts.sum()))
        where = self.lines[line_indices]
        located = event_payloads(self.buf, where[:, 0], where[:, 1], lengths, counts)
        return None if located is None else (*located, counts)


def _ranges(index: dict | None, number: int, count: int) -> np.ndarray | None:
    if index is None or len(index[number]) != count:  # a map key given twice: upb keeps one entry
        return None
    return np.array(index[number], np.int64).reshape(-1, 2)


def plane_index(raw: bytearray, size: int) -> dict | None:
    """``xspace_wire.PlaneBytes.index`` of the serialized plane ``raw[:size]``, walking its top-level fields."""
    index: dict = {number: [] for number in INDEXED_FIELDS}
    try:
        with memoryview(raw) as view:
            for number, wire, _, start, end in fields(view, 0, size):
                if number in index and wire == 2:
                    index[number].append((start, end))
    except WireError:  # upb read it: a structure our walk does not (groups); upb's objects are read instead
        return None
    return index
