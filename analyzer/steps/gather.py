"""Columns of millions of rows gathered by the same row numbers, a column per thread.

``np.take`` on numeric arrays runs without the GIL, so the columns of a table are gathered side by side on
the cores this process may use, instead of one after the other on one (the others are idle once the planes
are decoded).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from ...parsers.worker_start import usable_cores

_MIN_ROWS = 1 << 18  # below this, starting the work costs more than it saves


def take_frame(frame: pd.DataFrame, rows: np.ndarray, first: dict | None = None) -> pd.DataFrame:
    """``frame.take(rows)`` with a fresh index (after the columns ``first``), built from each column's array
    (categoricals: their codes): half the time of pandas' take on millions of rows, less again on 2+ cores."""
    arrays = {}
    for name, col in frame.items():
        if isinstance(col.dtype, pd.CategoricalDtype):
            arrays[name] = col.cat.codes.to_numpy()
        elif isinstance(col.dtype, np.dtype):
            arrays[name] = col.to_numpy()
    cores = usable_cores()
    if len(rows) >= _MIN_ROWS and cores > 1 and len(arrays) > 1:
        # A pool per call: no thread outlives it (a process with threads forks no plane workers after, fork_is_safe).
        with ThreadPoolExecutor(max_workers=min(cores, len(arrays))) as pool:
            taken = dict(zip(arrays, pool.map(lambda values: np.take(values, rows), arrays.values())))
    else:
        taken = {name: np.take(values, rows) for name, values in arrays.items()}
    columns = dict(first or {})
    for name, col in frame.items():
        if isinstance(col.dtype, pd.CategoricalDtype):
            columns[name] = pd.Categorical.from_codes(taken[name], dtype=col.dtype, validate=False)
        elif name in taken:
            columns[name] = taken[name]
        else:
            columns[name] = col.array.take(rows)
    return pd.DataFrame(columns, copy=False)
