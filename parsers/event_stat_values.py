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


def _spread(keys: np.ndarray, convert) -> np.ndarray:
    """``convert(k)`` for each key, computed once per distinct key (object array)."""
    distinct, inverse = np.unique(keys, return_inverse=True)
    table = np.empty(len(distinct), object)
    table[:] = [convert(k) for k in distinct.tolist()]
    return table[inverse.reshape(-1)]


def text_values(v: StatValues, rows: np.ndarray, stat_names: dict) -> np.ndarray:
    """A name-like stat (hlo_op, hlo_module, program_id) as Python objects, None where absent:
    refs resolved to their stat name, strings and bytes decoded, numbers as upb gives them."""
    kind, value, text = v.kind[rows], v.value[rows], v.text[rows]
    out = np.full(len(rows), None, object)
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
        out[sel] = _spread(keys[sel], convert)
    return out


def int_values(v: StatValues, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An id-like stat as (int64 with uint64 wrapped to two's complement, present-and-integer mask)."""
    kind = v.kind[rows]
    return v.value[rows].view(np.int64), (kind == KIND_UINT64) | (kind == KIND_INT64)


def text_column(parts: list[np.ndarray]):
    """Name-like stat values (object arrays) as one column (a pandas Series): str, missing where None."""
    import pandas as pd  # here: the plane decoders (workers) use this module without pandas

    series = pd.Series(np.concatenate(parts) if parts else np.zeros(0, object), dtype="object")
    # program ids are uint64 (they overflow int64): kept, like names, as strings.
    return series.astype(str).where(series.notna(), None)


def int_column(parts: list[tuple[np.ndarray, np.ndarray]]):
    """Id-like stat values as one nullable Int64 column (a pandas Series)."""
    import pandas as pd

    values = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    present = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, bool)
    return pd.Series(pd.arrays.IntegerArray(values.copy(), ~present))


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
