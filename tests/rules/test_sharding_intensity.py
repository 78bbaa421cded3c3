"""sharding-intensity on the recorded FSDP fixtures (256 vs 16,384 tokens per device, HLO compiled by JAX) and on
TPU-shaped captures of one FSDP layer: compute per byte against C / W, the threshold printed with its sources."""

from __future__ import annotations

import json
import math

import pytest

from builders import scenarios as xb
from conftest import SAMPLES
from rule_helpers import REL, V6E_LINK_ONEWAY_B_PER_S, analyze_scenario, only
from xladiag.analyzer.analysis import analyze
from xladiag.api import build_report
from xladiag.rules import sharding_intensity
from xladiag.rules.levers import LEVERS

SMALL, LARGE = SAMPLES / "hlo_rules_fsdp_256_tokens", SAMPLES / "hlo_rules_fsdp_16k_tokens"
V6E_PEAK = 9.18e14  # chip table (cloud.google.com/tpu/docs/v6e)


def _v6e_8_chip_gather_s_per_byte() -> float:
    """8 chips of v6e are a 2x4 slice without wraparound: a chip takes the 7/8 of V it lacks over its two
    inbound links (one per axis, one way each), which bounds the gather below the axes' own rings."""
    return (7 / 8) / (2 * V6E_LINK_ONEWAY_B_PER_S)


def test_256_tokens_per_device_is_flagged_with_its_threshold():
    known = json.loads((SMALL / "known_answers.json").read_text())
    (finding,) = sharding_intensity.check(analyze(hlo_dir=SMALL / "hlo", chip="v6e"))
    d = finding.details
    gathered, reduced = known["all_gather_result_bytes_per_device"], known["all_reduce_result_bytes_per_device"]
    # Every dot of the step feeds a gathered weight or a reduced gradient: the axis' compute is all of them.
    assert d["matmul_flops_per_step"] == known["dot_flops_per_device_from_hlo"]
    assert d["bytes_per_step"] == gathered + reduced
    assert d["intensity_flops_per_byte"] == pytest.approx(known["dot_flops_per_device_from_hlo"] / (gathered + reduced))
    # Link time: the all-gathers once, the all-reduce twice (reduce-scatter + all-gather) over the same slice.
    link_s = (gathered + 2 * reduced) * _v6e_8_chip_gather_s_per_byte()
    assert d["link_s_per_step"] == pytest.approx(link_s, rel=1e-6)
    threshold = V6E_PEAK * link_s / (gathered + reduced)
    assert d["threshold_flops_per_byte"] == pytest.approx(threshold, rel=1e-6)
    assert f"{threshold:,.0f}" in finding.title and f"{threshold:,.0f}" in finding.evidence
    assert "cloud.google.com/tpu/docs/v6e" in finding.evidence and "scaling-book" in finding.evidence
    assert d["intensity_flops_per_byte"] < known["fsdp_critical_tokens_per_device"]["v6e (4 links)"]
    # Nothing overlaps a predicted step: the cost is the link time the matmuls (at peak) cannot cover.
    assert finding.time_s_per_step == pytest.approx(link_s - known["dot_flops_per_device_from_hlo"] / V6E_PEAK,
                                                    rel=1e-6)
    factor = math.ceil(threshold / d["intensity_flops_per_byte"])
    assert f"per_device_batch_size at least {factor}x" in finding.fix
    assert "ici_fsdp_parallelism" in finding.fix and "ici_data_parallelism" in finding.fix
    assert all(k in LEVERS for k in ("ici_data_parallelism", "ici_expert_parallelism", "num_experts_per_tok"))
    assert {o["op"] for o in d["ops"]} == {c["name"] for c in known["collectives"]}
    assert finding.kind == "8-devices-0-7" and d["axis"] == "8 devices (0-7)"  # every gather / reduce: one axis
    assert finding.benefit == "step_time"  # an all-reduce on the axis: fewer tensor-parallel ways is a lever


def test_16k_tokens_per_device_is_not_flagged():
    for chip in ("v6e", "tpu7x"):
        assert sharding_intensity.check(analyze(hlo_dir=LARGE / "hlo", chip=chip)) == []


def test_gathers_counted_here_are_not_counted_again_as_exposed():
    report = build_report(analyze(hlo_dir=SMALL / "hlo", chip="v6e"))
    mine = only(report.findings, "sharding-intensity")
    exposed = [f for f in report.findings if f.rule == "exposed-collective"]
    assert exposed and all(f.counted_s_per_step == 0.0 for f in exposed)
    assert all(key == mine.key for f in exposed for _, key in f.related)


def test_timed_fsdp_layer_with_few_tokens_costs_what_its_matmul_cannot_hide(tmp_path):
    analysis, exp = analyze_scenario(tmp_path, xb.fsdp_weight_gather, 256, 150.0)
    finding = only(build_report(analysis).findings, "sharding-intensity")
    v = exp["all_gather_bytes"]
    # 4 chips: a 2x2 slice, no wraparound; 3/4 of V in over two one-way links.
    link_s = 0.75 * v / (2 * V6E_LINK_ONEWAY_B_PER_S)
    assert finding.details["intensity_flops_per_byte"] == pytest.approx(exp["layer_matmul_flops"] / v)
    assert finding.details["intensity_flops_per_byte"] == pytest.approx(exp["tokens"])  # bf16: FLOPs/byte = tokens
    assert finding.details["matmul_s_per_step"] == pytest.approx(exp["layer_matmul_s_per_step"], rel=REL)
    expected = min(exp["exposed_all_gather_s_per_step"], link_s - exp["layer_matmul_s_per_step"])
    assert finding.time_s_per_step == pytest.approx(expected, rel=REL)
    assert finding.est_savings_s_per_step == pytest.approx(expected, rel=REL)
    assert [c.op_name for c in finding.claims] == ["all-gather-done"]
    # Only FSDP gathers on the axis: more tokens per device is the lever, a throughput one (severity capped).
    assert finding.benefit == "throughput" and finding.severity == "medium"


def test_timed_fsdp_layer_with_many_tokens_is_a_schedule_problem_only(tmp_path):
    analysis, _ = analyze_scenario(tmp_path, xb.fsdp_weight_gather, 8192, 150.0)
    findings = build_report(analysis).findings
    assert not [f for f in findings if f.rule == "sharding-intensity"]
    assert only(findings, "exposed-collective").est_savings_s_per_step > 0


def test_a_throughput_lever_on_top_is_not_called_a_faster_step_in_the_headline():
    """The MaxText llama3-8b module on v6e: its top finding is the FSDP axis, whose lever (more tokens per
    device) makes each step do more work, not the same step faster: the headline says so."""
    from conftest import HLO_SAMPLE

    report = build_report(analyze(hlo_dir=HLO_SAMPLE, chip="v6e", program="jit_train_step"))
    top = report.findings[0]
    assert top.rule == "sharding-intensity" and top.benefit == "throughput" and top.est_savings_s_per_step > 0
    assert "biggest fix (a throughput lever)" in report.headline and "per step of today's work" in report.headline
    assert "(saves ~" not in report.headline
