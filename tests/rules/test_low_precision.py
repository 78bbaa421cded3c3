"""low-precision: compute-bound bf16/f32 matmuls on chips with a 2x 8-bit peak (FP8 on TPU7x and GPUs, int8 on
TPU v5e/v5p/v6e).

Known answers: sample_profiles/hlo_rules_matmul_* (bf16 [8192,8192] x [8192,8192] and x [8192,256], compiled by
JAX on CPU, which upcasts the dot to f32) carry their roofline per chip from hardware.md's figures; the timed
case is the TPU-shaped remat capture (bf16 matmul fusions at 1.3x their roofline).
"""

from __future__ import annotations

import json

import pytest

from builders import scenarios
from conftest import SAMPLES
from rule_helpers import REL, analyze_scenario, only
from xladiag.analyzer.analysis import analyze
from xladiag.rules import low_precision
from xladiag.rules.registry import run_rules

COMPUTE = SAMPLES / "hlo_rules_matmul_compute_bound"
MEMORY = SAMPLES / "hlo_rules_matmul_memory_bound"


def _check(folder, chip):
    return low_precision.check(analyze(hlo_dir=folder, chip=chip))


@pytest.mark.parametrize("chip,precision,recipe", [("v6e", "int8", "int8"), ("tpu7x", "fp8", "fp8_full")])
def test_compute_bound_matmul_is_flagged_with_the_peak_ratio_bound(chip, precision, recipe):
    known = json.loads((COMPUTE / "known_answers.json").read_text())
    roof = known["roofline"][chip]
    assert roof["compute_bound"] and known["hlo_dot_dtype"] == "f32"
    (f,) = _check(COMPUTE, chip)
    assert f.details["precision"] == precision and f.details["recipe"] == recipe
    assert f.details["peak_ratio"] == pytest.approx(roof["peak_ratio"]) == pytest.approx(2.0)
    assert f.time_s_per_step == pytest.approx(roof["compute_s"], rel=1e-6)
    assert f.est_savings_s_per_step == pytest.approx(roof["low_precision_savings_s"], rel=1e-6)
    assert f.benefit == "throughput" and "estimate" in f.title and "upper bound" in f.evidence
    assert f"use_qwix_quantization=true quantization={recipe}" in f.fix
    assert "chip table" in f.details["peak_source"]
    if chip == "tpu7x":  # the guide's measured end-to-end figure is quoted beside the bound
        assert f.details["measured_end_to_end_speedup"] == 1.3 and "1.3x end to end" in f.evidence
    else:
        assert f.details["measured_end_to_end_speedup"] is None


@pytest.mark.parametrize("chip", ["v6e", "tpu7x", "h100"])
def test_memory_bound_matmul_is_not_flagged(chip):
    known = json.loads((MEMORY / "known_answers.json").read_text())
    assert not any(v["compute_bound"] for v in known["roofline"].values())
    assert _check(MEMORY, chip) == []


@pytest.mark.parametrize("chip,flagged,recipe", [("v4", False, None), ("v5p", True, "int8"), ("a100", False, None),
                                                 ("h100", True, "fp8_gpu"), ("mi300x", True, "nanoo_fp8")])
def test_only_chips_with_a_faster_8_bit_peak_get_the_lever(chip, flagged, recipe):
    findings = _check(COMPUTE, chip)
    assert bool(findings) == flagged  # v4 int8 = bf16 rate; A100 has no FP8 (int8 is no training recipe there)
    if flagged:
        assert findings[0].details["recipe"] == recipe


def test_measured_matmuls_and_the_ones_remat_keeps(tmp_path):
    """Timed: the remat capture's six bf16 matmul fusions are compute-bound on v6e (at 35 % remat the clones
    run slower than their roofline too); two are recomputed, and remat-overhead counts those."""
    analysis, exp = analyze_scenario(tmp_path, scenarios.remat_fusions, 35.0)
    per_op = exp["op_self_s_per_step"]
    matmuls = ["fusion.12", "fusion.14", "fusion.31", "fusion.33", "fusion.12.remat", "fusion.14.remat2"]
    f = only(low_precision.check(analysis), "low-precision")
    assert {d["op"] for d in f.details["dots"]} == set(matmuls)
    assert f.time_s_per_step == pytest.approx(sum(per_op[m] for m in matmuls), rel=REL)
    assert f.est_savings_s_per_step == pytest.approx(0.5 * f.time_s_per_step, rel=1e-9)
    assert f.details["times_are"] == "measured" and f.confidence == "medium"
    ranked = run_rules(analysis)
    lp = only(ranked, "low-precision")
    kept = [m for m in matmuls if "remat" not in m]
    assert lp.counted_s_per_step == pytest.approx(0.5 * sum(per_op[m] for m in kept), rel=REL)
    assert lp.est_savings_s_per_step == pytest.approx(f.est_savings_s_per_step)  # alone: all six
    assert {op for op, _ in lp.related} == {"fusion.12.remat", "fusion.14.remat2"}
    # Ranked with every other finding by the time it frees per step.
    savings = [g.est_savings_s_per_step for g in ranked]
    assert savings == sorted(savings, reverse=True)


def _matmul_steps(tmp_path, over_rooflines):
    template = [scenarios.matmul_fusion(f"fusion.{i}", 4096, 4096, 4096, over_roofline=k)
                for i, k in enumerate(over_rooflines)]
    template.append(scenarios.loop_fusion("add_fusion", [4096, 4096]))
    b, _ = scenarios.build_train_steps(template)
    b.write(tmp_path)
    return analyze(tmp_path)


def test_matmuls_far_from_the_peak_are_told_to_tune_first(tmp_path):
    """Three bf16 matmuls at 3x their compute roofline (33 % of the bf16 peak, as real captures ran at 25-42 %):
    no 8-bit recipe, a note that saves nothing and says to tune them first."""
    f = only(low_precision.check(_matmul_steps(tmp_path, [3.0, 3.0, 3.0])), "low-precision")
    assert f.details["tune_first"] is True
    assert f.details["achieved_fraction"] == pytest.approx(1 / 3.0, rel=0.02)
    assert f.est_savings_s_per_step == 0 and f.severity == "info"
    assert "tune them before" in f.title and "33" in f.title
    assert "quantization" not in f.fix and "Tune these matmuls first" in f.fix
    assert {d["op"] for d in f.details["dots"]} == {"fusion.0", "fusion.1", "fusion.2"}


def test_only_matmuls_near_the_peak_get_the_8_bit_recipe(tmp_path):
    """Two matmuls at 1.3x their roofline (77 % of the peak) and one at 3x: the recipe prices the two alone."""
    f = only(low_precision.check(_matmul_steps(tmp_path, [1.3, 1.3, 3.0])), "low-precision")
    assert f.details["tune_first"] is False
    assert {d["op"] for d in f.details["dots"]} == {"fusion.0", "fusion.1"}
    assert f.details["achieved_fraction"] == pytest.approx(1 / 1.3, rel=0.02)
    assert f.est_savings_s_per_step == pytest.approx(0.5 * f.time_s_per_step, rel=1e-9)
    assert "use_qwix_quantization=true quantization=int8" in f.fix
