"""The ops table as JSON records, a column at a time: numpy columns become Python lists in one call and only
object columns go through :func:`json_out.clean` cell by cell (thousands of ops x 40 fields)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyzer.tables import OPS

# ops-table columns of the contract -> analysis.ops column they come from (declared in analyzer/tables.py).
OP_FIELDS = {c.json: c.name for c in OPS.public()}
# Text fields of an op record; None when missing.
# flops_source/bytes_source: 'trace' (trace metadata) | 'hlo' (HLO dump).
TEXT_FIELDS = frozenset(c.json for c in OPS.public() if c.dtype in ("text", "category") and c.json != "hlo_text")


def column_values(column: pd.Series, clean) -> list:
    """``[clean(v) for v in column]``, with plain numpy columns converted whole (NaN/inf -> None)."""
    kind = column.dtype.kind if isinstance(column.dtype, np.dtype) else "O"
    if kind in "iub":
        return column.to_numpy().tolist()
    if kind == "f":
        values = column.to_numpy()
        out = values.tolist()
        for i in np.flatnonzero(~np.isfinite(values)).tolist():
            out[i] = None
        return out
    # An extension column (pandas' str, Categorical, Int64) as one object array: iterating it is per-cell Python.
    return [clean(v) for v in column.to_numpy(dtype=object)]


def _field(key: str, values: list) -> list:
    """One field's cleaned values as the contract wants them: text None when empty, hlo_text '' when none,
    in_step a bool."""
    if key in TEXT_FIELDS:
        return [None if v is None or v == "" else str(v) for v in values]
    if key == "hlo_text":
        return [("" if v is None or v == "" else str(v)) for v in values]
    if key == "in_step":
        return [bool(v) if v is not None else False for v in values]
    return values


def ops_records(ops: pd.DataFrame, clean) -> list[dict]:
    """The ops table as records in the contract's field names (one per HLO op), already JSON-clean."""
    if ops is None or ops.empty:
        return []
    columns = [_field(key, column_values(ops[col], clean)) for key, col in OP_FIELDS.items()]
    keys = list(OP_FIELDS)
    return [dict(zip(keys, row)) for row in zip(*columns)]
