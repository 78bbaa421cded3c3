"""--trace-out: the representative step as Chrome Trace Event JSON, checked against the format's rules."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import CPU_SAMPLE, SAMPLES, diagnosed
from xladiag import cli
from xladiag.analyzer.scopes import scope_of
from xladiag.report.trace_export import representative_step

TPU_SAMPLE = SAMPLES / "tpu_v6e_host_offload"
PHASES = {"X": ("name", "pid", "tid", "ts", "dur"), "M": ("name", "pid", "tid", "args"),
          "s": ("name", "id", "pid", "tid", "ts"), "f": ("name", "id", "pid", "tid", "ts", "bp")}


def check_structure(trace: dict) -> list[dict]:
    """The rules of the Trace Event Format's JSON object form that Perfetto and chrome://tracing rely on."""
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] in ("ms", "ns")
    for e in events:
        assert set(PHASES[e["ph"]]) <= set(e), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert np.isfinite(e["ts"]) and e["ts"] >= 0
        if e["ph"] == "X":
            assert np.isfinite(e["dur"]) and e["dur"] >= 0
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys()  # every arrow has both ends, on one device, forward in time
    for i, s in starts.items():
        assert ends[i]["pid"] == s["pid"] and ends[i]["ts"] >= s["ts"]
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"} <= named  # every slice's line has a name
    return events


@pytest.mark.parametrize("sample", [CPU_SAMPLE, TPU_SAMPLE], ids=["cpu", "tpu"])
def test_trace_holds_the_representative_step_and_every_finding_op(sample):
    report = diagnosed(sample)
    trace = json.loads(report.to_trace())
    events = check_structure(trace)
    step = representative_step(report.analysis)
    assert trace["otherData"]["step"] == step
    in_step = report.analysis.step_ops[report.analysis.step_ops["step"] == step]
    slices = [e for e in events if e["ph"] == "X" and e["cat"] not in ("step", "idle")]
    assert len(slices) == len(in_step)  # one slice per op event of the step, on every device
    assert {e["pid"] for e in slices} == set(in_step["device"].astype(int))
    names = {e["name"] for e in slices}
    for f in report.findings:
        for op in f.ops:
            if op.name in set(in_step["op_name"].astype(str)):
                tagged = [e for e in slices if e["name"] == op.name]
                assert op.name in names and all(f.key in {t["finding"] for t in e["args"]["findings"]}
                                                for e in tagged)
    # each slice names its op's scope, as the report's scopes add it up
    scope = {int(i): "/".join(scope_of(t)) for i, t in zip(report.analysis.ops["op_id"], report.analysis.ops["tf_op"])}
    scoped = [e for e in slices if e["args"].get("scope")]
    known = set(report.scopes["scope"])
    assert scoped and all(e["args"]["scope"] in known for e in scoped)
    by_name = dict(zip(in_step["op_name"].astype(str), in_step["op_id"].astype(int)))
    assert all(e["args"].get("scope", "") == scope[by_name[e["name"]]] for e in slices)
    # the step slice spans its ops on each device
    for device in in_step["device"].unique():
        step_slice = next(e for e in events if e.get("cat") == "step" and e["pid"] == int(device))
        mine = [e for e in slices if e["pid"] == int(device)]
        assert min(e["ts"] for e in mine) == pytest.approx(step_slice["ts"])
        assert max(e["ts"] + e["dur"] for e in mine) == pytest.approx(step_slice["ts"] + step_slice["dur"])


def test_tpu_async_copies_are_arrows():
    events = json.loads(diagnosed(TPU_SAMPLE).to_trace())["traceEvents"]
    arrows = [e for e in events if e["ph"] == "s"]
    assert arrows and {e["name"] for e in arrows} == {"async-copy"}  # the sample's host-offload copies
    slices = {(e["pid"], e["tid"], e["ts"]) for e in events if e["ph"] == "X"}
    for a in arrows:  # an arrow starts where a slice starts: the async start op
        assert (a["pid"], a["tid"], a["ts"]) in slices


def test_cli_writes_the_trace_beside_the_report(tmp_path):
    out, trace = tmp_path / "r.json", tmp_path / "step.trace.json"
    result = CliRunner().invoke(cli.main, [str(CPU_SAMPLE), "-o", str(out), "--trace-out", str(trace)])
    assert result.exit_code == 0, result.output
    check_structure(json.loads(trace.read_text()))
    bad = CliRunner().invoke(cli.main, [str(CPU_SAMPLE), "-o", str(out), "--trace-out", str(tmp_path / "no/x.json")])
    assert bad.exit_code == 2 and "does not exist" in bad.output  # refused before the work
