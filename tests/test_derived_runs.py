"""Program executions derived from op events (GPU, CPU) on integer codes equal the plain pandas group-by they
replace: same runs, order and column types, with and without run ids, missing op names and program ids."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xladiag.analyzer.capture.derived_runs import derived_module_runs
from xladiag.analyzer.capture.planes import MODULE_COLUMNS


def _by_group_by(events: pd.DataFrame) -> pd.DataFrame:
    """The definition: sort by (device, module, program, start); a run restarts at the group's first op."""
    events = events[events["module"].astype(str) != ""]
    events = events.assign(program_id=events["program_id"].astype(object).where(events["program_id"].notna(), ""))
    key = ["device", "module", "program_id"]
    o = events.sort_values([*key, "start_ps"], kind="stable")
    if "run_id" in o and o["run_id"].notna().all():
        run = o["run_id"].astype("int64")
    else:
        first_op = o.groupby(key)["op_name"].transform("first")
        run = (o["op_name"] == first_op).astype(np.int64).groupby([o[k] for k in key]).cumsum()
    o = o.assign(run_id=run, end_ps=o["start_ps"] + o["span_ps"])
    runs = o.groupby([*key, "run_id"], as_index=False).agg(start_ps=("start_ps", "min"), end_ps=("end_ps", "max"))
    runs["duration_ps"] = runs["end_ps"] - runs["start_ps"]
    return runs[MODULE_COLUMNS]


@pytest.mark.parametrize("seed", range(12))
def test_runs_equal_the_group_by(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    events = pd.DataFrame({
        "device": rng.integers(0, 3, n), "module": rng.choice(["", "jit_a", "jit_b", "Z"], n),
        "program_id": pd.Series(rng.choice(["1", "2", None], n), dtype=object if seed % 2 else "str"),
        "op_name": pd.Series(rng.choice(["f.1", "f.2", "", None], n), dtype="str"),
        "start_ps": rng.integers(0, 50, n), "span_ps": rng.integers(0, 9, n)})
    if seed % 3 == 0:
        events["run_id"] = pd.array(rng.integers(0, 5, n), dtype="Int64")
        if seed % 2:
            events.loc[0, "run_id"] = None  # one missing run id: runs counted from the first op
    expected = _by_group_by(events)
    assert len(expected) > 1
    pd.testing.assert_frame_equal(derived_module_runs(events), expected)


def test_no_program_no_runs():
    events = pd.DataFrame({"device": [0], "module": [""], "program_id": [None], "op_name": ["memcpy"],
                           "start_ps": [0], "span_ps": [1]})
    assert derived_module_runs(events).empty
