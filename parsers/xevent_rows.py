"""Event start times on each line's timebase, and the distinct string payloads of stats.

Helpers of ``xevent_columns`` (a module of their own to keep that one short)."""

from __future__ import annotations

import numpy as np

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def distinct_payloads(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list]:
    """(index of each payload ``u8[start:start + length]`` among the distinct ones, those as bytes).

    Payloads of one length are compared as fixed-size byte records (a strided view, no copy per byte), so
    the work is per distinct length, not per payload."""
    codes = np.zeros(len(start), np.int64)
    texts: list[bytes] = []
    for size in np.unique(length).tolist():
        sel = np.flatnonzero(length == size)
        if size == 0:
            codes[sel] = len(texts)
            texts.append(b"")
            continue
        records = np.ndarray((u8.size - size + 1,), f"V{size}", u8, 0, (1,))[start[sel]]
        distinct, inverse = np.unique(records, return_inverse=True)
        codes[sel] = len(texts) + inverse.reshape(-1)
        texts.extend(d.tobytes() for d in distinct)
    return codes, texts


def _line_base(timestamp_ns: int) -> tuple[int, int, int]:
    """(base ps, lowest and highest offset whose sum with it fits in int64); lowest > highest: none does."""
    base = timestamp_ns * 1000  # a Python int: cannot overflow
    lowest, highest = max(_INT64_MIN, _INT64_MIN - base), min(_INT64_MAX, _INT64_MAX - base)
    if not _INT64_MIN <= base <= _INT64_MAX or lowest > highest:
        return 0, 1, 0
    return base, lowest, highest


def starts(timestamps_ns: list[int], counts: np.ndarray, offset_ps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``timestamp_ns * 1000 + offset_ps`` (each line's ``counts`` events take its timestamp; computed in
    ``offset_ps``) and where it fits in int64 (elsewhere it would wrap)."""
    if len(set(timestamps_ns)) <= 1:  # one line, or lines on one timebase (the usual case): scalars
        base, lowest, highest = _line_base(timestamps_ns[0] if timestamps_ns else 0)
    else:
        base, lowest, highest = (np.repeat(np.array(c, np.int64), counts)
                                 for c in zip(*map(_line_base, timestamps_ns)))
    valid = (offset_ps >= lowest) & (offset_ps <= highest)
    offset_ps += base if isinstance(base, np.ndarray) else np.int64(base)  # in place; wraps only where not valid
    return offset_ps, valid
