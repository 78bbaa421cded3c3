"""Per-event stats of the named lines (host threads, GPU streams, ``Async XLA Ops``) as columns.

:func:`xevent_columns.read_line_events` hands us, per wanted stat, each event's value kind, its integer
(or ref id, or double bits) and an index into the line's distinct strings. Here those become the values
upb would give (``_stat_value`` in ``xplane``): every conversion to Python objects is done once per
distinct value, then spread over the events by a numpy take. :func:`metadata_value` types an op metadata
stat for its column the same lenient way.
"""

from __future__ import annotations

import numpy as np

from .xevent_columns import KIND_BYTES, KIND_DOUBLE, KIND_INT64, KIND_REF, KIND_STR, KIND_UINT64, StatValues

_MAX_TEXT_BYTES = 1 << 20  # as xplane._text: longer strings are damage


def _text(raw: bytes) -> str:
    return raw[:_MAX_TEXT_BYTES].decode("utf-8", errors="replace")


def text_codes(v: StatValues, rows: np.ndarray, stat_names: dict) -> tuple[np.ndarray, np.ndarray]:
    """A name-like stat (hlo_op, hlo_module, program_id) on ``rows`` as (codes, table): ``table[codes]`` holds
    its values as Python objects, None where absent: refs resolved to their stat name, strings and bytes decoded,
    numbers as upb gives them. Each distinct value is converted once; the codes travel from a plane worker as
    numbers, not millions of objects, and :func:`text_column` types the table, not every row."""
    kind, value, text = v.kind[rows], v.value[rows], v.text[rows]
    codes = np.zeros(len(rows), np.int32)  # 0: None
    table = [None]
    texts = None
    for code, convert, keys in (
        (KIND_REF, lambda k: stat_names.get(k), value),
        (KIND_UINT64, int, value),
        (KIND_INT64, int, value.view(np.int64)),
        (KIND_DOUBLE, float, value.view(np.float64)),
        (KIND_STR, None, text),
        (KIND_BYTES, None, text),
    ):
        sel = np.flatnonzero(kind == code)
        if not sel.size:
            continue
        if convert is None:
            texts = texts if texts is not None else v.texts
            convert = lambda k, texts=texts: _text(texts[k])  # noqa: E731 (bytes are decoded like strings)
        distinct, inverse = np.unique(keys[sel], return_inverse=True)
        codes[sel] = len(table) + inverse.reshape(-1)
        table += [convert(k) for k in distinct.tolist()]
    out = np.empty(len(table), object)
    out[:] = table
    return codes, out


def text_values(v: StatValues, rows: np.ndarray, stat_names: dict) -> np.ndarray:
    """:func:`text_codes` as one object array, a value per row."""
    codes, table = text_codes(v, rows, stat_names)
    return table[codes]


def int_values(v: StatValues, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An id-like stat as (int64 with uint64 wrapped to two's complement, present-and-integer mask)."""
    kind = v.kind[rows]
    return v.value[rows].view(np.int64), (kind == KIND_UINT64) | (kind == KIND_INT64)


def text_column(parts: list[tuple[np.ndarray, np.ndarray]]):
    """Name-like stat values (:func:`text_codes` parts) as one column (a pandas Series): str, missing where None."""
    import pandas as pd  # here: the plane decoders (workers) use this module without pandas

    codes, tables, size = [], [], 0
    for part_codes, table in parts:
        codes.append(part_codes + size)  # int64: a column may hold more than 2**31 distinct values in all
        tables.append(table)
        size += len(table)
    table = pd.Series(np.concatenate(tables) if tables else np.zeros(0, object), dtype="object")
    # program ids are uint64 (they overflow int64): kept, like names, as strings. Typed value by value, as a
    # column of every row would be, once per distinct value.
    table = table.astype(str).where(table.notna(), None)
    return pd.Series(table.array.take(np.concatenate(codes) if codes else np.zeros(0, np.int64)), copy=False)


def int_column(parts: list[tuple[np.ndarray, np.ndarray]]):
    """Id-like stat values as one nullable Int64 column (a pandas Series)."""
    import pandas as pd

    values = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    present = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, bool)
    return pd.Series(pd.arrays.IntegerArray(values, ~present), copy=False)  # both arrays are new: no copy


def metadata_value(key: str, value, numeric: bool):
    """One op metadata stat as its column holds it: a count (``numeric``) as a number or text the table coerces,
    program_id as a string, a name as text; a value of another type (a damaged file) is None, not a crash later."""
    if isinstance(value, bytes):
        value = _text(value)
    if numeric:
        return value if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None
    if key == "program_id":
        return None if value is None else str(value)
    return value if isinstance(value, str) else None
