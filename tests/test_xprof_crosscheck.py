"""Our per-op times against xprof's own C++ converter (hlo_stats) on the real TPU capture.

xprof is the reference for what a TPU op took; where it is right we must agree with it.
"""

from __future__ import annotations

import json
import shutil

import pytest

from xladiag.analyzer.capture.build import build_capture
from xladiag.parsers.xplane import read_xspace

raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data", reason="xprof is not installed")


def _hlo_stats(path) -> dict[str, dict]:
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(path)], "hlo_stats", {})
    table = json.loads(data)
    cols = [c["id"] for c in table["cols"]]
    rows = [dict(zip(cols, (cell.get("v") if cell else None for cell in row["c"]))) for row in table["rows"]]
    return {(r["program_id"], r["hlo_op_name"]): r for r in rows}


def test_per_op_totals_match_xprof_hlo_stats(tmp_path, tpu_xplane):
    # xprof caches beside the file it reads: give it a private copy.
    path = tmp_path / tpu_xplane.name
    shutil.copy(tpu_xplane, path)
    theirs = _hlo_stats(path)

    ops = build_capture([read_xspace(tpu_xplane)]).events
    ours = ops.groupby(["program_id", "op_name"]).agg(n=("duration_ps", "size"), total_ps=("duration_ps", "sum"))

    compared = 0
    for (program_id, op_name), row in theirs.items():
        if (program_id, op_name) not in ours.index:
            continue
        mine = ours.loc[(program_id, op_name)]
        assert mine["n"] == row["occurrences"], op_name
        # hlo_stats reports microseconds; ours are picoseconds.
        assert mine["total_ps"] / 1e6 == pytest.approx(row["total_self_time"], rel=1e-3, abs=0.01), op_name
        compared += 1
    big = {name for (_, name), r in theirs.items() if r["total_self_time"] > 1e5}
    assert {"copy-done", "copy-done.2", "broadcast_add_fusion.2", "all-reduce"} <= big
    assert compared >= 15
