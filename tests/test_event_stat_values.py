"""Name-like event stats travel from the plane workers as codes into a table of distinct values
(event_stat_values.text_codes) and are typed once per distinct value (text_column): the column must be the one
typing every row gives."""

from __future__ import annotations

import numpy as np
import pandas as pd

from xladiag.parsers.event_stat_values import text_codes, text_column, text_values
from xladiag.parsers.xevent_columns import (
    KIND_BYTES,
    KIND_DOUBLE,
    KIND_INT64,
    KIND_NONE,
    KIND_REF,
    KIND_STR,
    KIND_UINT64,
    StatValues,
)

_TEXTS = [b"fusion.1", b"op\xff\xfename", b"", b"1"]
_NAMES = {5: "copy-done.9", 6: "1"}


def _stat_values() -> StatValues:
    """One row of each kind, and repeats: equal numbers of other types (1, 1.0, "1") must stay apart."""
    rows = [(KIND_REF, 5, -1), (KIND_UINT64, 2**64 - 3, -1), (KIND_INT64, (-7) % 2**64, -1),
            (KIND_DOUBLE, np.float64(1.0).view(np.uint64), -1), (KIND_DOUBLE, np.float64(np.nan).view(np.uint64), -1),
            (KIND_STR, 8, 0), (KIND_BYTES, 10, 1), (KIND_STR, 0, 2), (0, 0, -1), (KIND_NONE, 0, -1),
            (KIND_UINT64, 1, -1), (KIND_STR, 1, 3), (KIND_REF, 6, -1), (KIND_REF, 99, -1), (KIND_REF, 5, -1),
            (KIND_STR, 8, 0), (KIND_UINT64, 1, -1)]
    kind, value, text = (np.array(c, dtype) for c, dtype in zip(zip(*rows), (np.int8, np.uint64, np.int64)))
    return StatValues(kind, value, text, _TEXTS)


def test_codes_give_the_values_and_the_column_is_typed_as_row_by_row():
    v = _stat_values()
    parts, objects = [], []
    for rows in (np.arange(9), np.arange(9, 17), np.arange(0), np.array([3, 0, 5])):
        codes, table = text_codes(v, rows, _NAMES)
        assert codes.dtype == np.int32 and table[0] is None
        values = text_values(v, rows, _NAMES)
        assert [(type(x), repr(x)) for x in table[codes]] == [(type(x), repr(x)) for x in values]  # nan: repr
        parts.append((codes, table))
        objects += list(values)
    assert objects[:4] == ["copy-done.9", 2**64 - 3, -7, 1.0] and objects[10:13] == [1, "1", "1"]
    expected = pd.Series(np.array(objects, object), dtype="object")
    expected = expected.astype(str).where(expected.notna(), None)
    got = text_column(parts)
    pd.testing.assert_series_equal(got, expected, check_exact=True)
    assert list(got.iloc[[3, 10, 11]]) == ["1.0", "1", "1"] and got.isna().sum() == 4  # nan, no stat, no value, #99


def test_no_parts_give_an_empty_column_of_the_same_type():
    expected = pd.Series(np.zeros(0, object), dtype="object")
    pd.testing.assert_series_equal(text_column([]), expected.astype(str).where(expected.notna(), None))
