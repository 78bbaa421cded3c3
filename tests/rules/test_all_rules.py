"""All rules together: a clean capture fires none; an HLO dump alone runs every static part."""

from __future__ import annotations

import json
import warnings

import pytest

from builders import scenarios
from conftest import HLO_PROGRAM, HLO_SAMPLE
from rule_helpers import analyze_scenario
from xladiag.analyzer.analysis import analyze
from xladiag.rules import latency_bound_collective
from xladiag.rules.registry import run_rules


def test_clean_profile_fires_no_rule(tmp_path):
    analysis, exp = analyze_scenario(tmp_path, scenarios.clean_profile)
    findings = run_rules(analysis)
    assert [f for f in findings if f.severity == "high"] == [] and exp["high_severity_findings"] == 0
    # Nothing wrong: the only finding is the option any compute-bound bf16 step on v6e has (int8 matmuls),
    # labelled as a throughput lever.
    assert [(f.rule, f.benefit) for f in findings] == [("low-precision", "throughput")]


def test_v6e_hlo_only_runs_every_static_part():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analysis = analyze(hlo_dir=HLO_SAMPLE, chip="v6e", program=HLO_PROGRAM)
    assert analysis.platform == "hlo"
    findings = run_rules(analysis)
    by_rule = {f.rule: f for f in findings}
    for f in findings:
        assert f.confidence == "low" and "predicted" in f.evidence, f.rule
        json.dumps(f.details, allow_nan=False)
    # Remat ops counted: every instruction under jax.checkpoint recomputation, fused ones included.
    assert by_rule["remat-overhead"].details["remat_instructions_in_dump"] == 186
    # Layout copies listed: the five f32 -> bf16 weight copies that also change the dimension order
    # (e.g. copy.237: f32[1024,4,14336]{2,1,0:T(4,128)} -> bf16{2,0,1:T(8,128)(2,1)}), inside fusions.
    listed = by_rule["retiling-copy"].details["dump_layout_changes"]
    assert {c["name"] for c in listed} == {f"copy.{i}" for i in range(235, 240)}
    assert all(c["change"] == "layout" and "kernel" in c["op_name"] for c in listed)
    # Collective payloads classified: the seven FSDP weight all-gathers over 4 devices move megabytes per hop.
    table = latency_bound_collective.classify_collectives(analysis)
    assert len(table) == 7 and set(table["collective_kind"]) == {"all-gather"}
    assert (table["collective_per_hop_bytes"] > 90e3).all() and not table["latency_bound"].any()
    assert "latency-bound-collective" not in by_rule
    gathers = by_rule["exposed-collective"]
    assert gathers.details["kind"] == "all-gather" and len(gathers.details["ops"]) == 7
    assert gathers.time_s_per_step == pytest.approx(float(table["predicted_s_per_step"].sum()), rel=1e-9)
