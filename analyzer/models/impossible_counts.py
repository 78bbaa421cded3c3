"""Counts the measured time makes impossible: an op bound by one resource that beat its roofline by more than
the table's own uncertainty moved more FLOPs or HBM bytes per second than the chip can, so the count is wrong
(a damaged stat, the wrong chip), not the chip's peak. Those counts become unknown, with a note and a warning."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...units import format_number
from .roofline import predict_ops

# A compute-bound op that ran this much faster than its compute roofline did more FLOPs per second than
# the chip can: its FLOP count is wrong (a damaged stat, a wrong chip), not the chip's peak. 1.5x leaves
# room for the table's own uncertainty (trace peaks within 1.5x of the table are accepted as they are).
IMPOSSIBLE_EFFICIENCY = 1.5


# (bound, columns dropped, what they count, the peak's name): an op bound by one resource that beat its roofline
# by IMPOSSIBLE_EFFICIENCY moved more FLOPs or HBM bytes per second than the chip can.
_IMPOSSIBLE = (("compute", ["flops", "model_flops"], "FLOPs", "peak"),
               ("hbm", ["bytes_accessed", "hbm_bytes"], "HBM bytes", "HBM bandwidth"))


def drop_impossible_counts(ops: pd.DataFrame, chip, notes: list[str]) -> pd.DataFrame:
    """FLOPs or HBM bytes that the measured time makes impossible on this chip become unknown, with a note and a
    warning. Async starts and dones are exempt: their bytes move while other ops run."""
    dropped = False
    for bound, columns, what, peak in _IMPOSSIBLE:
        bad = (ops["bound_by"] == bound) & (ops["efficiency"] > IMPOSSIBLE_EFFICIENCY)
        if bound == "hbm":
            bad &= ~(ops["is_async_start"].fillna(False).astype(bool) | ops["is_async_done"].fillna(False).astype(bool))
        if not bad.any():
            continue
        worst = float(ops.loc[bad, "efficiency"].max())
        ops = ops.copy()
        ops.loc[bad, [c for c in columns if c in ops]] = np.nan
        why = f"{what} dropped: more than the chip's {peak} allows in the measured time"
        ops.loc[bad, "cost_note"] = [f"{n}; {why}" if isinstance(n, str) and n else why
                                     for n in ops.loc[bad, "cost_note"]]
        notes.append(f"{int(bad.sum())} ops report more {what} than the {chip.name} allows in their measured time "
                     f"(up to {format_number(worst)}x its {peak}): their {what} are treated as unknown (damaged "
                     "counts, or the wrong --chip?)")
        dropped = True
    return predict_ops(ops, chip) if dropped else ops
