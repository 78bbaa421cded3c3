"""Per-op and per-step statistics over the measured steps."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .capture import Capture
from .steps import PS_PER_S, Steps, assign_steps, with_busy_time

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
    keyed = step_ops.assign(duration_s=step_ops["duration_ps"] / PS_PER_S)
    g = keyed.groupby("op_id", sort=True)
    stats = g.agg(
        module=("module", "first"),
        program_id=("program_id", "first"),
        op_name=("op_name", "first"),
        occurrences=("duration_s", "size"),
        total_s=("duration_s", "sum"),
        mean_s=("duration_s", "mean"),
        min_s=("duration_s", "min"),
        max_s=("duration_s", "max"),
    ).reset_index()
    stats["occurrences_per_step"] = stats["occurrences"] / device_steps
    stats["measured_s_per_step"] = stats["total_s"] / device_steps
    mean_step = steps.mean_s
    stats["share_of_step"] = stats["measured_s_per_step"] / mean_step if mean_step > 0 else np.nan
    stats = stats.sort_values("measured_s_per_step", ascending=False, kind="stable").reset_index(drop=True)
    return stats[columns]


def _other_program_ops(capture: Capture, steps: Steps, step_ops: pd.DataFrame, step_table: pd.DataFrame) -> pd.DataFrame:
    """Ops outside the measured steps that are not the step program's (e.g. a one-off ``jit__psum``,
    driver copies before the first step): listed, but not per step."""
    outside = capture.events.drop(index=step_ops["event"].to_numpy())
    if steps.program:
        pid = outside["program_id"].astype(str)
        others = outside[(outside["module"] != steps.program) | (pid != steps.program_id)]
    elif steps.annotated:  # ops that never run inside an annotated step (init, eval between steps)
        in_step = pd.MultiIndex.from_frame(step_ops[OP_KEY].astype(str))
        others = outside[~pd.MultiIndex.from_frame(outside[OP_KEY].astype(str)).isin(in_step)]
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


def measure(capture: Capture, steps: Steps) -> tuple[pd.DataFrame, pd.DataFrame, Steps]:
    """(op events inside measured steps, per-op statistics, ``steps`` with their busy times).

    Both tables carry ``op_id``: the same integer for an op's events and its statistics row
    (-1 for ops outside the steps).

    The statistics list the step program's ops first (ranked by time per step), then the
    ops of every other program in the capture, whose per-step columns are NaN.
    """
    step_ops = assign_steps(capture.events, steps)
    # op_id numbers the step's ops once; rules and renderers join events to the ops table through it
    # (one integer column, instead of three string keys over millions of events).
    step_ops["op_id"] = step_ops.groupby(OP_KEY, sort=False, observed=True).ngroup().astype(np.int64)
    table = op_statistics(step_ops, steps)
    table["in_step"] = True
    for col in OP_KEY:
        table[col] = table[col].astype(str)
    others = _other_program_ops(capture, steps, step_ops, table)
    if len(others):
        others = others.assign(in_step=False, op_id=-1, **{c: others[c].astype(str) for c in OP_KEY})
        table = pd.concat([table, others], ignore_index=True)
    return step_ops, table, with_busy_time(steps, step_ops)
