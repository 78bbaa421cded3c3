"""From a finding to the trace: each finding op's representative occurrence is a real event of that op in
the device's median step, the median-duration one; the same when hosts are reduced in workers; shown in
the JSON, Markdown, HTML and text reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders.large_capture import multi_host_capture
from conftest import SAMPLES, diagnosed
from test_host_map import _all_events
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.steps.occurrences import representative_steps
from xladiag.api import build_report, diagnose
from xladiag.report.trace_links import capture_ms, occurrence_label

CAPTURES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and any(p.glob("plugins/profile/*/*.xplane.pb")))


@pytest.mark.parametrize("name", CAPTURES)
def test_each_op_occurrence_is_its_median_event_in_the_representative_steps(name):
    a = analyze(SAMPLES / name)
    rep = representative_steps(a.steps)
    ev = a.step_ops.merge(rep, on=["device", "step"])
    ops = a.ops[a.ops["in_step"]]
    has = ops[ops["occurrence_device"] >= 0]
    assert len(has) == ev["op_id"].nunique() > 0  # every op that ran in those steps has one
    assert (a.ops.loc[~a.ops["in_step"], "occurrence_device"] == -1).all()
    for row in has.itertuples():
        mine = ev[ev["op_id"] == row.op_id].sort_values(["duration_ps", "device", "start_ps"], kind="stable")
        median = mine.iloc[(len(mine) - 1) // 2]
        assert (row.occurrence_device, row.occurrence_step, row.occurrence_start_ps) == (
            median["device"], median["step"], median["start_ps"])
        assert row.occurrence_end_ps == median["start_ps"] + median["span_ps"]
        assert row.occurrence_line == str(median["line"])


@pytest.mark.parametrize("name", CAPTURES)
def test_finding_ops_carry_their_occurrence_in_every_format(name):
    report = diagnosed(SAMPLES / name)
    data = json.loads(report.to_json())
    a = report.analysis
    hosts = dict(zip(a.devices["device"], a.devices["host"]))
    shown = 0
    for f in data["findings"]:
        for op in f["ops"]:
            occ = op["occurrence"]
            if occ is None:
                continue
            shown += 1
            assert occ["host"] == hosts[occ["device"]] and occ["start_ps"] < occ["end_ps"]
            row = a.ops[(a.ops["op_name"] == op["name"]) & (a.ops["occurrence_start_ps"] == occ["start_ps"])]
            assert len(row) >= 1 and int(row["occurrence_device"].iloc[0]) == occ["device"]
    if not any(f["ops"] for f in data["findings"]):
        return  # e.g. input-bound: the host's wait names no op
    assert shown, "no finding op was located in the trace"
    first = next(op["occurrence"] for f in data["findings"] for op in f["ops"] if op["occurrence"])
    label = occurrence_label(first)
    assert capture_ms(first["start_ps"]) in label and first["plane"] in label
    html, text = report.to_html(), report.to_text()
    assert "In the trace" in html and capture_ms(first["start_ps"]) in html
    assert capture_ms(first["start_ps"]) in report.to_markdown()
    assert capture_ms(first["start_ps"]) in text


def test_no_trace_no_occurrence():
    data = json.loads(diagnose(hlo_dir=SAMPLES / "hlo_rules_attention_naive", chip="v6e").to_json())
    ops = [op for f in data["findings"] for op in f["ops"]]
    assert ops and all(op["occurrence"] is None for op in ops)


def test_capture_ms_is_exact_beyond_float_precision():
    assert capture_ms(21068920252250) == "21,068.920252 ms"
    assert capture_ms(1_700_000_000_123_456_789_000) == "1,700,000,000,123.456789 ms"  # epoch clock in ps


def test_occurrences_survive_the_per_host_reduction(tmp_path, monkeypatch):
    """--workers keeps one representative step's events per device: the occurrences must not change."""
    run_dir = multi_host_capture(tmp_path, hosts=2, events_per_host=4_000, ops_per_step=120)[0].parent
    reduced = analyze(run_dir, workers=1)
    full = _all_events(run_dir, monkeypatch)
    assert reduced.step_ops.groupby("device")["step"].nunique().eq(1).all()
    assert len(full.step_ops) > len(reduced.step_ops)
    cols = ["op_id", "occurrence_device", "occurrence_step", "occurrence_start_ps", "occurrence_end_ps"]
    np.testing.assert_array_equal(reduced.ops[cols].to_numpy(), full.ops[cols].to_numpy())
    assert (reduced.ops["occurrence_device"] >= 0).any()
    as_json = [[op["occurrence"] for f in json.loads(build_report(a).to_json())["findings"] for op in f["ops"]]
               for a in (reduced, full)]
    assert as_json[0] == as_json[1]
