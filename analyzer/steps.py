"""Training steps: the windows every per-step number is measured over.

A ``Steps`` line wins when the capture has one. Otherwise a step is one execution
of the dominant program (the one with the most device time), which is what a
``jit_train_step`` looks like in the trace. The first step carries compilation and
warm-up, so it is dropped whenever there is more than one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .capture import Capture

PS_PER_S = 1e12


@dataclass(frozen=True)
class Steps:
    table: pd.DataFrame  # device, step, start_ps, end_ps, duration_ps, is_warmup
    program: str  # the module whose executions are the steps ('' when from a Steps line)
    source: str  # how the steps were found, for the report
    warmup_excluded: bool

    @property
    def measured(self) -> pd.DataFrame:
        """The steps analysis runs over (warm-up excluded)."""
        return self.table[~self.table["is_warmup"]]

    @property
    def count(self) -> int:
        return int(self.measured["step"].nunique())

    @property
    def mean_s(self) -> float:
        m = self.measured
        if m.empty:
            return float("nan")
        # Mean over device-steps: devices may run their executions staggered in time, and
        # per-op "per step" numbers use the same denominator.
        return float(m["duration_ps"].mean() / PS_PER_S)


def _number(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.sort_values(["device", "start_ps"], kind="stable").copy()
    frame["step"] = frame.groupby("device").cumcount()
    frame["end_ps"] = frame["start_ps"] + frame["duration_ps"]
    n_steps = frame.groupby("device")["step"].transform("max") + 1
    frame["is_warmup"] = (frame["step"] == 0) & (n_steps > 1)
    return frame[["device", "step", "start_ps", "end_ps", "duration_ps", "is_warmup"]].reset_index(drop=True)


def dominant_program(capture: Capture) -> str:
    modules = capture.modules
    named = modules[modules["module"].astype(str) != ""]
    if named.empty:
        return ""
    return str(named.groupby("module")["duration_ps"].sum().idxmax())


def find_steps(capture: Capture) -> Steps:
    if not capture.steps_line.empty:
        table = _number(capture.steps_line.astype({"start_ps": "int64", "duration_ps": "int64"}))
        return Steps(table, "", "the capture's 'Steps' line", bool(table["is_warmup"].any()))

    program = dominant_program(capture)
    if program:
        runs = capture.modules[capture.modules["module"] == program][["device", "start_ps", "duration_ps"]]
        table = _number(runs.astype({"start_ps": "int64", "duration_ps": "int64"}))
        n = int(table["step"].max()) + 1
        return Steps(table, program, f"{n} executions of {program}", bool(table["is_warmup"].any()))

    # No program structure at all: the whole op span on each device is one step.
    ops = capture.ops
    spans = ops.groupby("device").agg(start_ps=("start_ps", "min"), end_ps=("start_ps", "max"))
    ends = (ops["start_ps"] + ops["span_ps"]).groupby(ops["device"]).max()
    spans["duration_ps"] = ends - spans["start_ps"]
    table = _number(spans.reset_index()[["device", "start_ps", "duration_ps"]])
    return Steps(table, "", "the whole capture (no program executions found)", False)


def assign_steps(ops: pd.DataFrame, steps: Steps) -> pd.DataFrame:
    """``ops`` restricted to measured steps, with ``step`` and ``event`` (row in ``ops``) columns."""
    measured = steps.measured
    if measured.empty or ops.empty:
        return ops.iloc[0:0].assign(step=pd.Series(dtype="int64"), event=pd.Series(dtype="int64"))
    left = ops.rename_axis("event").reset_index().sort_values("start_ps", kind="stable")
    right = measured[["device", "step", "start_ps", "end_ps"]].sort_values("start_ps", kind="stable")
    right = right.rename(columns={"start_ps": "step_start_ps"})
    joined = pd.merge_asof(
        left, right, left_on="start_ps", right_on="step_start_ps", by="device", direction="backward"
    )
    inside = joined["step"].notna() & (joined["start_ps"] < joined["end_ps"])
    joined = joined[inside].drop(columns=["step_start_ps", "end_ps"])
    return joined.astype({"step": "int64"})


def interval_union_ps(frame: pd.DataFrame, keys: list[str], length: str = "duration_ps") -> pd.Series:
    """Covered time per group of [start_ps, start_ps + length) intervals, overlaps counted once.

    Never a plain sum: GPU streams and async ops run concurrently on one device.
    """
    if frame.empty:
        return pd.Series(dtype="int64")
    f = frame.assign(end_ps=frame["start_ps"] + frame[length]).sort_values(keys + ["start_ps"], kind="stable")
    # Running max of the previous ends within the group: an interval starting after it opens a new block.
    f["run_end_ps"] = f.groupby(keys)["end_ps"].cummax()
    prev_end = f.groupby(keys)["run_end_ps"].shift(fill_value=np.iinfo(np.int64).min)
    new_block = f["start_ps"] > prev_end
    block = new_block.groupby([f[k] for k in keys]).cumsum()
    blocks = f.assign(block=block).groupby(keys + ["block"]).agg(start=("start_ps", "min"), end=("end_ps", "max"))
    return (blocks["end"] - blocks["start"]).groupby(level=list(range(len(keys)))).sum()
