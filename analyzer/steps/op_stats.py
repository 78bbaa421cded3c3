"""Per-op and per-step statistics over the measured steps."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..capture.build import Capture
from . import codes as code_tables
from .codes import among, first_rows
from .windows import PS_PER_S, Steps, assigned_steps, with_busy_time

OP_KEY = ["module", "program_id", "op_name"]


def op_statistics(step_ops: pd.DataFrame, steps: Steps) -> pd.DataFrame:
    """One row per HLO op (module, program, name) with its measured times.

    ``measured_s_per_step`` is the op's time on one device in one step, averaged over
    devices and steps (the number a roofline prediction compares against, times the
    occurrences per step); ``share_of_step`` divides it by the mean step time.
    """
    columns = ["op_id", *OP_KEY,
        "occurrences", "occurrences_per_step", "total_s", "mean_s", "min_s", "max_s",
        "measured_s_per_step", "share_of_step",
    ]
    if step_ops.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    device_steps = max(len(steps.after_warmup), 1)
    stats = _per_op(step_ops)
    stats["occurrences_per_step"] = stats["occurrences"] / device_steps
    stats["measured_s_per_step"] = stats["total_s"] / device_steps
    mean_step = steps.mean_s
    stats["share_of_step"] = stats["measured_s_per_step"] / mean_step if mean_step > 0 else np.nan
    stats = stats.sort_values("measured_s_per_step", ascending=False, kind="stable").reset_index(drop=True)
    return stats[columns]


def _per_op(step_ops: pd.DataFrame) -> pd.DataFrame:
    """op_id, the op's key, and its duration's count, sum, mean, min and max over ``step_ops``."""
    op_id = step_ops["op_id"].to_numpy(np.int64)
    duration_s = step_ops["duration_ps"].to_numpy() / PS_PER_S
    n_ops = int(op_id.max()) + 1
    count = np.bincount(op_id, minlength=n_ops) if op_id.min() >= 0 else np.zeros(1, np.int64)
    if count.min() == 0:  # not a dense code: group the column
        g = step_ops.assign(duration_s=duration_s).groupby("op_id", sort=True)
        return g.agg(**{c: (c, "first") for c in OP_KEY}, occurrences=("duration_s", "size"),
                     total_s=("duration_s", "sum"), mean_s=("duration_s", "mean"), min_s=("duration_s", "min"),
                     max_s=("duration_s", "max")).reset_index()
    # A dense code is a categorical key as is (no hashing of millions of rows); pandas' own sum keeps its
    # compensated summation, so the numbers are those of a groupby on the column (its mean is that same sum
    # over the count). Count, min and max do not depend on the order of the values: numpy's.
    # Every category is observed (count > 0): observed=False spares pandas a unique over the codes.
    # copy=False: pandas 3 copies an array given to Series (40 MB on 5M events) unless told not to.
    by = pd.Categorical.from_codes(op_id, categories=np.arange(n_ops), validate=False)
    g = pd.Series(duration_s, copy=False).groupby(by, observed=False, sort=True)
    first = first_rows(op_id, n_ops)
    low, high = np.full(n_ops, np.inf), np.full(n_ops, -np.inf)
    np.minimum.at(low, op_id, duration_s)
    np.maximum.at(high, op_id, duration_s)
    stats = pd.DataFrame({"op_id": np.arange(n_ops, dtype=np.int64),
                          **{c: step_ops[c].take(first).reset_index(drop=True) for c in OP_KEY}})
    total = g.sum().to_numpy()
    for name, values in (("occurrences", count), ("total_s", total), ("mean_s", total / count), ("min_s", low),
                         ("max_s", high)):
        stats[name] = values
    return stats


def first_seen_ids(keys: pd.DataFrame) -> np.ndarray:
    """Per row, its key's number in order of first appearance (``groupby(sort=False).ngroup()``), from the
    columns' category codes: -1 where a key is missing."""
    cols = [keys[c] if isinstance(keys[c].dtype, pd.CategoricalDtype) else keys[c].astype("category") for c in keys]
    sizes = [len(c.cat.categories) for c in cols]
    if not len(keys) or np.prod(np.array(sizes, np.float64) + 1) >= 2**62:  # the codes overflow one int64
        return keys.groupby(list(keys.columns), sort=False, observed=True).ngroup().fillna(-1).to_numpy(np.int64)
    combined, missing = np.zeros(len(keys), np.int64), None
    for col, size in zip(cols, sizes):
        codes = col.cat.codes.to_numpy()
        if codes.min() < 0:
            missing = (codes < 0) if missing is None else missing | (codes < 0)
        combined *= size
        combined += codes
    n, n_keys = len(keys), int(np.prod(sizes))
    if missing is not None or n_keys > 4 * n + 2**20:  # no table per possible key: a hash pass
        out = np.full(n, -1, np.int64)
        keep = slice(None) if missing is None else ~missing
        out[keep] = pd.factorize(combined[keep])[0]
        return out
    first = first_rows(combined, n_keys)  # each key's first row
    seen = np.flatnonzero(first < n)
    number = np.full(n_keys, -1, np.int64)
    number[seen[np.argsort(first[seen], kind="stable")]] = np.arange(len(seen))
    for at in range(0, n, code_tables.CHUNK):  # in place, a chunk at a time: no second array as long as the keys
        combined[at:at + code_tables.CHUNK] = number[combined[at:at + code_tables.CHUNK]]
    return combined


def _other_program_ops(capture: Capture, steps: Steps, step_ops: pd.DataFrame,
                       step_table: pd.DataFrame) -> pd.DataFrame:
    """Ops outside the measured steps that are not the step program's (e.g. a one-off ``jit__psum``,
    driver copies before the first step): listed, but not per step."""
    outside_rows = np.ones(len(capture.events), bool)
    outside_rows[step_ops["event"].to_numpy(np.int64)] = False
    outside = capture.events[outside_rows]
    if steps.program:
        pid = outside["program_id"].astype(str)
        others = outside[(outside["module"] != steps.program) | (pid != steps.program_id)]
    elif steps.annotated:  # ops that never run inside an annotated step (init, eval between steps)
        others = outside[_never_inside(capture.events, outside_rows)]
    else:
        return step_table.iloc[0:0]
    if others.empty:
        return step_table.iloc[0:0]
    d = others.assign(duration_s=others["duration_ps"] / PS_PER_S)
    stats = d.groupby(OP_KEY, sort=False, observed=True).agg(
        occurrences=("duration_s", "size"), total_s=("duration_s", "sum"), mean_s=("duration_s", "mean"),
        min_s=("duration_s", "min"), max_s=("duration_s", "max"),
    ).reset_index()
    # Per-step numbers stay NaN: these programs do not run inside the step.
    return stats.sort_values("total_s", ascending=False, kind="stable")


def _never_inside(events: pd.DataFrame, outside_rows: np.ndarray) -> np.ndarray:
    """Per outside row (``outside_rows``): whether no row inside has its op (OP_KEY). On the key columns'
    category codes (one int64 per row, a lookup table), not on their strings: a GPU capture's millions."""
    cols = [events[c] for c in OP_KEY]
    sizes = np.array([len(c.cat.categories) + 1 if isinstance(c.dtype, pd.CategoricalDtype) else 0 for c in cols],
                     np.float64)
    if sizes.min() == 0 or np.prod(sizes) >= 2**62:  # not categorical, or the codes overflow one int64
        in_step = pd.MultiIndex.from_frame(events.loc[~outside_rows, OP_KEY].astype(str))
        return ~pd.MultiIndex.from_frame(events.loc[outside_rows, OP_KEY].astype(str)).isin(in_step)
    key = np.zeros(len(events), np.int64)
    for col, size in zip(cols, sizes):
        key *= int(size)
        key += col.cat.codes.to_numpy()
        key += 1  # a missing value (code -1) is a key value of its own
    mine, inside = key[outside_rows], key[~outside_rows]
    if np.prod(sizes) > 4 * len(key) + 2**20:  # too wide a range for a table: a sort
        return ~np.isin(mine, inside)
    return ~among(mine, inside)


def measure(capture: Capture, steps: Steps) -> tuple[pd.DataFrame, pd.DataFrame, Steps]:
    """(op events inside measured steps, per-op statistics, ``steps`` with their busy times).

    Both tables carry ``op_id``: the same integer for an op's events and its statistics row
    (-1 for ops outside the steps).

    The statistics list the step program's ops first (ranked by time per step), then the
    ops of every other program in the capture, whose per-step columns are NaN.
    """
    step_ops, step_rows = assigned_steps(capture.events, steps)
    # Busy time first: the rows' step codes (one int64 per event) are not held through what follows.
    steps = with_busy_time(steps, step_ops, (capture.events, step_rows))
    del step_rows
    # op_id numbers the step's ops once; rules and renderers join events to the ops table through it
    # (one integer column, instead of three string keys over millions of events).
    step_ops["op_id"] = first_seen_ids(step_ops[OP_KEY])
    table = op_statistics(step_ops, steps)
    table["in_step"] = True
    for col in OP_KEY:
        table[col] = table[col].astype(str)
    others = _other_program_ops(capture, steps, step_ops, table)
    if len(others):
        others = others.assign(in_step=False, op_id=-1, **{c: others[c].astype(str) for c in OP_KEY})
        table = pd.concat([table, others], ignore_index=True)
    return step_ops, table, steps
