"""A plane's op metadata decoded column-wise from the plane's bytes, as ``xevent_columns`` decodes events.

``XPlane.event_metadata`` is a map: each entry (field 4 of the plane) holds a key and an ``XEventMetadata``
(name, display_name, stats). Reading thousands of them through upb's objects, stat by stat, cost a second on a
large capture. Here the entries, then their metadata, then all their stats are walked together with numpy, one
round per field position, and only the wanted stats are turned into Python values, once per distinct value.

The values are those upb's objects give (``xplane_metadata._upb_rows``, the fallback): for a key given twice
the last entry, for a field given twice the last one, for a stat name given twice the last stat. A map entry
with two metadata fields (upb merges them) is left to upb: :func:`metadata_columns` returns None.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError

from .event_stat_values import text_values
from .wire_rounds import EventBuffer, _fields, _pick
from .xevent_columns import KIND_BYTES, KIND_NONE, KIND_STR, StatValues, stat_records
from .xevent_rows import distinct_payloads
from .xspace_schema import MemoryAccessBreakdown

_ENTRY_KEY, _ENTRY_VALUE = 1 << 3, 2 << 3 | 2
_MD_NAME, _MD_DISPLAY_NAME, _MD_STATS = 2 << 3 | 2, 4 << 3 | 2, 5 << 3 | 2
_MAX_TEXT_BYTES = 1 << 20  # as xplane_metadata._text
_MEMORY_SPACE_HBM = 1


def hbm_bytes(breakdown) -> float:
    """HBM bytes read+written from the ``memory_access_breakdown`` stat; NaN when absent, empty or not bytes
    (a damaged file can store any stat as a number or a string)."""
    if not breakdown or not isinstance(breakdown, bytes):
        return np.nan
    msg = MemoryAccessBreakdown()
    try:
        msg.ParseFromString(breakdown)
    except DecodeError:
        return np.nan
    total = sum(m.bytes for m in msg.memory_accessed if m.memory_space == _MEMORY_SPACE_HBM)
    return float(total) if msg.memory_accessed else np.nan


def _walk(buf: EventBuffer, start: np.ndarray, end: np.ndarray, last: tuple, repeated: int | None):
    """Walk the messages ``buf[start:end]``: for each tag of ``last`` the (value, payload start) of its last
    field per message (0, 0 where absent), and (message, start, end) of every ``repeated`` field in order."""
    found = {tag: (np.zeros(start.size, np.uint64), np.zeros(start.size, np.int64)) for tag in last}
    counts = np.zeros(start.size, np.int64)
    parts = []
    for rows, tags, value, after in _fields(buf, start, end):
        for tag, (values, where) in found.items():
            if hit := _pick(rows, tags, tag):
                values[hit[0]], where[hit[0]] = value[hit[1]], after[hit[1]]
                counts[hit[0]] += tag == _ENTRY_VALUE
        if repeated is not None and (hit := _pick(rows, tags, repeated)):
            at = after[hit[1]]
            parts.append((np.arange(start.size)[hit[0]], at, at + value[hit[1]].view(np.int64)))
    spans = tuple(np.concatenate(c) for c in zip(*parts)) if parts else (np.zeros(0, np.int64),) * 3
    return found, counts, spans


def _texts(buf: EventBuffer, value_where: tuple) -> list:
    """The (length, start) byte strings as text (cut past the limit, decoded leniently)."""
    length, start = value_where
    end = start + np.minimum(length.view(np.int64), _MAX_TEXT_BYTES)
    with memoryview(buf.u8) as view:  # str() decodes a slice of it in place: no bytes object per text
        return [str(view[s:e], "utf-8", "replace") for s, e in zip(start.tolist(), end.tolist())]


def _last_per_owner(owner: np.ndarray, match: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The last of the records ``match`` (in document order within each owner) of each owner: (match, owner)."""
    rows = owner[match]
    order = np.argsort(rows, kind="stable")
    match, rows = match[order], rows[order]
    last = np.r_[rows[1:] != rows[:-1], True] if rows.size else np.zeros(0, bool)
    return match[last], rows[last]


def _stat_column(buf: EventBuffer, records: tuple, owner: np.ndarray, ids: list, n: int) -> StatValues:
    """The value of the last stat with one of ``ids`` on each of the ``n`` owners (kind 0: none there)."""
    metadata_id, kind, value, where = records
    match, rows = _last_per_owner(owner, np.flatnonzero(np.isin(metadata_id, np.asarray(ids, np.uint64))))
    out_kind, out_value, out_where = np.zeros(n, np.int8), np.zeros(n, np.uint64), np.zeros(n, np.int64)
    out_kind[rows] = np.where(kind[match] == 0, KIND_NONE, kind[match])
    out_value[rows], out_where[rows] = value[match], where[match]
    text = np.full(n, -1, np.int64)
    has_text = np.flatnonzero((out_kind == KIND_STR) | (out_kind == KIND_BYTES))
    text[has_text], texts = distinct_payloads(buf.u8, out_where[has_text], out_value[has_text].view(np.int64))
    return StatValues(out_kind, out_value, text, texts)


def _typed(key: str, values: list, numeric: set) -> list:
    """A stat's column as ``event_stat_values.metadata_value`` types it (values here are str, int, float, None)."""
    if key in numeric:
        return values
    if key == "program_id":
        return [None if v is None else str(v) for v in values]
    return [v if type(v) is str else None for v in values]


def _hbm_column(v: StatValues | None, n: int) -> list:
    if v is None:
        return [np.nan] * n
    per_text = [hbm_bytes(t) for t in v.texts]
    return [per_text[t] if k == KIND_BYTES else np.nan for k, t in zip(v.kind.tolist(), v.text.tolist())]


def _entry_rows(buf: EventBuffer, entries: np.ndarray, keys: list) -> tuple | None:
    """(value start, end) of the metadata of each of ``keys`` (upb's map order): its last entry's."""
    found, counts, _ = _walk(buf, entries[:, 0].copy(), entries[:, 1].copy(), (_ENTRY_KEY, _ENTRY_VALUE), None)
    if counts.max(initial=0) > 1:
        return None  # two values in one entry: upb merges them
    last = {k: i for i, k in enumerate(found[_ENTRY_KEY][0].view(np.int64).tolist())}
    try:
        rows = np.array([last[k] for k in keys], np.int64)
    except KeyError:
        return None
    length, start = found[_ENTRY_VALUE]
    start = start[rows]
    return start, start + length[rows].view(np.int64) * (counts[rows] > 0)


def metadata_columns(buf: EventBuffer, entries: np.ndarray, keys: list, stat_names: dict, wanted: tuple,
                     numeric: set) -> tuple | None:
    """(keys, names, display names, a column per ``wanted`` stat, hbm bytes) of the metadata entries at
    ``entries`` ((start, end) per entry) in the order of ``keys``; None where upb must read them."""
    located = _entry_rows(buf, entries, keys)
    if located is None:
        return None
    n = len(keys)
    found, _, (owner, start, end) = _walk(buf, *located, (_MD_NAME, _MD_DISPLAY_NAME), _MD_STATS)
    records = stat_records(buf, start, end)
    ids_of: dict[str, list] = {}
    for stat_id, name in stat_names.items():
        ids_of.setdefault(name, []).append(stat_id)
    columns = []
    for key in wanted:
        v = _stat_column(buf, records, owner, ids_of[key], n) if key in ids_of else None
        values = text_values(v, np.arange(n), stat_names).tolist() if v is not None else [None] * n
        columns.append(_typed(key, values, numeric))
    breakdown = ids_of.get("memory_access_breakdown")
    hbm = _hbm_column(_stat_column(buf, records, owner, breakdown, n) if breakdown else None, n)
    return (keys, _texts(buf, found[_MD_NAME]), _texts(buf, found[_MD_DISPLAY_NAME]), *columns, hbm)
