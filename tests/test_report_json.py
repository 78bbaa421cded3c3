"""The JSON report is the public contract: valid JSON, documented fields, the analysis' own numbers."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from conftest import HLO_PROGRAM
from xladiag import __version__
from xladiag.analyzer.analysis import analyze
from xladiag.report.json_out import SCHEMA_VERSION, clean, render_json, report_to_dict
from xladiag.report.model import Report
from xladiag.rules.base import OpEvidence, Priced, make_finding

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_profiles"
CAPTURES = ("tpu_v6e_host_offload", "gpu_mi300_jax_conv", "cpu_jax_train_step")
HLO_SAMPLE = "hlo_maxtext_llama3_8b_v6e4"  # an HLO text dump only: analysed with --chip v6e
ALL_SAMPLES = CAPTURES + (HLO_SAMPLE,)

HLO_TEXT = """HloModule jit_f, entry_computation_layout={(bf16[1024,1024]{1,0}, bf16[1024,1024]{1,0})->bf16[1024,1024]{1,0}}

%fused_add (p0: bf16[1024,1024], p1: bf16[1024,1024]) -> bf16[1024,1024] {
  %p0 = bf16[1024,1024]{1,0} parameter(0)
  %p1 = bf16[1024,1024]{1,0} parameter(1)
  ROOT %add.1 = bf16[1024,1024]{1,0} add(%p0, %p1)
}

ENTRY %main (a: bf16[1024,1024], b: bf16[1024,1024]) -> bf16[1024,1024] {
  %a = bf16[1024,1024]{1,0} parameter(0)
  %b = bf16[1024,1024]{1,0} parameter(1)
  %dot.1 = bf16[1024,1024]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %fusion.1 = bf16[1024,1024]{1,0} fusion(%dot.1, %b), kind=kLoop, calls=%fused_add
}
"""


@cache
def capture_analysis(name: str):
    if name == HLO_SAMPLE:
        return analyze(hlo_dir=SAMPLES / name, chip="v6e", program=HLO_PROGRAM)
    return analyze(SAMPLES / name)


def hlo_analysis(tmp_path: Path):
    (tmp_path / "module_0001.jit_f.after_optimizations.txt").write_text(HLO_TEXT)
    return analyze(hlo_dir=tmp_path, chip="v6e")


def crafted_report(analysis, n_ops: int = 3) -> Report:
    """A report with one finding over the analysis' top ops (independent of the rules in progress)."""
    ops = analysis.ops[analysis.ops["in_step"].astype(bool)].head(n_ops)
    evidence = tuple(
        OpEvidence(str(r.op_name), float(r.measured_s_per_step), float(r.predicted_s_per_step), "test detail")
        for r in ops.itertuples()
    )
    cost = float(np.nansum(ops["measured_s_per_step" if analysis.measured else "predicted_s_per_step"]))
    finding = make_finding(
                  rule="test-rule",
                  priced=Priced(time_s_per_step=cost, est_savings_s_per_step=cost / 2, step_s=analysis.step_s, confidence="medium", ops=evidence),
                  title="Top ops are slow", evidence="they take the time", fix="set --xla_test_flag=true", details={"np_float": np.float32(1.5), "np_int": np.int64(3), "nan": float("nan"), "inf": np.inf,
                 "nested": {"array": np.array([1.0, np.nan])}, "path": ROOT})
    return Report(analysis=analysis, findings=(finding,), headline="test headline")


def strict_loads(text: str):
    def reject(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=reject)


@pytest.mark.parametrize("name", CAPTURES)
def test_json_carries_the_analysis_numbers(name):
    a = capture_analysis(name)
    report = crafted_report(a)
    data = strict_loads(render_json(report))

    assert data["schema_version"] == SCHEMA_VERSION == 2
    assert data["tool"] == {"name": "xladiag", "version": __version__}
    assert data["platform"] == a.platform and data["measured"] is True
    assert data["devices"] == len(a.devices) and data["hosts"] == list(a.hosts)
    assert data["run"]["name"] == a.files.run_name
    # Steps: count and mean recomputed from the step table (warm-up rows excluded).
    measured = a.steps.table[~a.steps.table["is_warmup"]]
    assert data["steps"]["count"] == measured["step"].nunique()
    assert data["steps"]["mean_s"] == pytest.approx(measured["duration_ps"].mean() / 1e12, rel=1e-12)
    assert data["steps"]["source"] == a.steps.source and data["steps"]["warmup_excluded"] is True
    assert set(data["breakdown"]) >= {"compute", "memory", "collective", "host_transfer", "idle"}
    for key, value in a.breakdown.items():
        assert data["breakdown"][key] == pytest.approx(value)
    # Chip with per-number sources.
    chip = data["chip"]
    assert chip["peak_flops_per_s"] == pytest.approx(a.chip.peak_bf16_flops_per_s)
    assert chip["hbm_bytes_per_s"] == pytest.approx(a.chip.hbm_bytes_per_s)
    assert chip["source"]["peak_flops_per_s"] == a.chip.number_sources.get("peak_bf16_flops_per_s", "chip table")
    assert chip["source"]["hbm_bytes_per_s"] == a.chip.number_sources["hbm_bytes_per_s"]
    # One op record per row of the ops table, with the same numbers.
    assert len(data["ops"]) == len(a.ops)
    top = a.ops.iloc[0]
    rec = data["ops"][0]
    assert rec["name"] == top["op_name"] and rec["occurrences"] == int(top["occurrences"])
    assert rec["measured_s_per_step"] == pytest.approx(float(top["measured_s_per_step"]))
    assert isinstance(rec["in_step"], bool)


def test_json_nan_and_numpy_become_plain_json():
    a = capture_analysis("gpu_mi300_jax_conv")  # no dump; kernels without an HLO op have no costs
    data = strict_loads(render_json(crafted_report(a)))
    unknown = [o for o in data["ops"] if o["flops_source"] is None]
    assert unknown and all(o["flops"] is None and o["predicted_s"] is None and o["efficiency"] is None
                           and o["bound_by"] == "unknown" for o in unknown)
    conv = next(o for o in data["ops"] if o["name"] == "cudnn-conv.1")  # priced from the captured HLO
    assert isinstance(conv["flops"], float) and conv["flops_source"] == "hlo"
    # Ops of other programs have no per-step numbers: null, never NaN.
    other = [o for o in data["ops"] if not o["in_step"]]
    assert other and all(o["measured_s_per_step"] is None for o in other)
    details = data["findings"][0]["details"]
    assert details == {"np_float": 1.5, "np_int": 3, "nan": None, "inf": None,
                       "nested": {"array": [1.0, None]}, "path": str(ROOT)}
    assert type(details["np_int"]) is int


def test_findings_keep_rank_and_fields():
    a = capture_analysis("cpu_jax_train_step")
    base = crafted_report(a)
    small = make_finding(
                rule="small",
                priced=Priced(time_s_per_step=1e-4, est_savings_s_per_step=1e-4, step_s=a.step_s, confidence="low", ops=()),
                title="small one", evidence="e", fix="f")
    report = dataclasses.replace(base, findings=base.findings + (small,))
    findings = strict_loads(render_json(report))["findings"]
    assert [f["rule"] for f in findings] == ["test-rule", "small"]
    f = findings[0]
    assert set(f) == {"rule", "kind", "key", "severity", "title", "time_s_per_step", "est_savings_s_per_step",
                      "counted_s_per_step", "fraction_of_step", "confidence", "lever", "benefit", "related_ops", "ops",
                      "evidence", "fix", "details"}
    top3 = a.ops[a.ops["in_step"]].head(3)
    assert f["time_s_per_step"] == pytest.approx(top3["measured_s_per_step"].sum())
    assert f["fraction_of_step"] == pytest.approx(top3["measured_s_per_step"].sum() / a.steps.mean_s)
    assert [o["name"] for o in f["ops"]] == list(top3["op_name"])
    assert set(f["ops"][0]) == {"name", "measured_s_per_step", "predicted_s_per_step", "detail", "occurrence"}


def test_real_hlo_sample_is_valid_json_with_predictions():
    a = capture_analysis(HLO_SAMPLE)
    data = strict_loads(render_json(crafted_report(a)))
    assert data["platform"] == "hlo" and data["chip"]["key"] == "v6e" and data["devices"] == 0
    assert len(data["ops"]) == len(a.ops) > 0
    predicted = [o["predicted_s_per_step"] for o in data["ops"] if o["predicted_s_per_step"] is not None]
    assert data["ideal_step_s"] == pytest.approx(sum(predicted))
    assert all(o["measured_s_per_step"] is None for o in data["ops"])


def test_hlo_only_report_says_predicted(tmp_path):
    a = hlo_analysis(tmp_path)
    data = strict_loads(render_json(crafted_report(a)))
    assert data["platform"] == "hlo" and data["measured"] is False
    assert data["steps"]["count"] == 0 and data["steps"]["source"].startswith("predicted")
    dot = next(o for o in data["ops"] if o["name"] == "dot.1")
    # 2·1024³ FLOPs of a 1024² bf16 matmul, from the HLO dump; nothing measured.
    assert dot["flops"] == pytest.approx(2 * 1024**3) and dot["flops_source"] == "hlo"
    assert dot["measured_s_per_step"] is None and dot["predicted_s"] > 0
    assert data["step_s"] == pytest.approx(a.ideal_step_s)


def test_clean_rejects_nothing_json_cannot_hold():
    value = clean({"a": np.float64("nan"), "b": [np.int32(2), np.bool_(True)], "c": (np.float16(0.5),)})
    assert value == {"a": None, "b": [2, True], "c": [0.5]}
    assert type(value["b"][1]) is bool


def test_schema_doc_lists_every_field():
    """docs/json_schema.md documents every key the JSON report emits (top level, chip, steps, ops, findings)."""
    doc = (ROOT / "docs" / "json_schema.md").read_text()
    documented = set(re.findall(r"`([a-z_]+)`", doc))
    data = report_to_dict(crafted_report(capture_analysis("cpu_jax_train_step")))
    keys = set(data) | set(data["chip"]) | set(data["steps"]) | set(data["run"]) | set(data["ops"][0])
    keys |= set(data["findings"][0]) | set(data["findings"][0]["ops"][0]) | set(data["tool"])
    assert keys - documented == set()
    assert math.isfinite(data["step_s"])
