"""Lookups on integer codes (op ids, devices, key codes): tables over the codes' range, no sort or join.

A table as long as the codes' range replaces sorts, hash joins and ``np.isin`` over millions of events."""

from __future__ import annotations

import numpy as np
import pandas as pd


def unique_codes(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(codes, return_index=True, return_inverse=True)`` of codes in [0, size): by counting, no sort,
    where the range is small."""
    if size > 4 * len(codes) + 1024:
        return np.unique(codes, return_index=True, return_inverse=True)
    present = np.bincount(codes, minlength=size) > 0
    distinct = np.flatnonzero(present)
    return distinct, first_rows(codes, size)[distinct], (np.cumsum(present) - 1)[codes]


CHUNK = 1 << 20  # rows per pass: a row-number temporary of 8 MB, not one as long as the events


def first_rows(codes: np.ndarray, size: int) -> np.ndarray:
    """Per code in [0, size): the first row holding it, ``len(codes)`` where none does."""
    first = np.full(size, len(codes), np.int64)
    for at in range(0, len(codes), CHUNK):
        part = codes[at:at + CHUNK]
        np.minimum.at(first, part, np.arange(at, at + len(part)))
    return first


def among(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``np.isin(values, codes)`` for int codes (negative ones never match): one lookup table over their range."""
    codes = codes[codes >= 0]
    size = max(int(values.max(initial=-1)), int(codes.max(initial=-1))) + 1
    table = np.zeros(size + 1, bool)  # the last slot stays False: a negative value reads it
    table[codes] = True
    return table[values] if values.min(initial=0) >= 0 else table[np.where(values >= 0, values, size)]


def op_rows(ops: pd.DataFrame, op_id: np.ndarray) -> np.ndarray:
    """Per op_id, the row in ``ops`` with that op_id, -1 where none: a lookup table, not a join of millions."""
    ids = ops["op_id"].to_numpy(np.int64)
    size = max(int(ids.max(initial=-1)), int(op_id.max(initial=-1))) + 1
    table = np.full(size + 1, -1, np.int64)  # the last slot stays -1: op_id -1 (no op) reads it
    known = np.flatnonzero(ids >= 0)
    table[ids[known]] = known
    return table[np.where(op_id >= 0, op_id, size)]
