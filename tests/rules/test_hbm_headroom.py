"""hbm-headroom: the program's peak memory (XLA's memory-usage report) against the chip's HBM capacity.

Known answers: sample_profiles/hlo_rules_hbm_* were compiled by JAX on CPU (make_hlo_rule_fixtures.py),
which recorded each module's memory-usage report total and jax's `compiled.memory_analysis()`; capacities
are the chip table's published figures (v6e 32 GiB, TPU7x 192 GiB over two TensorCores, v5e 16 GB).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from builders import scenarios
from conftest import CPU_SAMPLE, SAMPLES
from rule_helpers import REL, analyze_scenario, only
from xladiag.analyzer.analysis import analyze
from xladiag.rules import hbm_headroom, remat_overhead
from xladiag.rules.registry import RULES, run_rules

NEAR_FULL = SAMPLES / "hlo_rules_hbm_near_full"
REMAT = SAMPLES / "hlo_rules_hbm_remat"
CAPACITY = {"v6e": 32 * 2**30, "tpu7x": 192 * 2**30 / 2, "v5e": 16e9}


def _known(folder):
    known = json.loads((folder / "known_answers.json").read_text())
    (module,) = known["dump_modules"]
    return known, module["memory_usage_total_bytes"], known["memory_analysis"]


def _check(folder, chip):
    return hbm_headroom.check(analyze(hlo_dir=folder, chip=chip))


def test_a_32_gb_peak_is_near_full_on_v6e_and_says_so_before_anything_is_added():
    known, total, mem = _known(NEAR_FULL)
    # jax's memory analysis and XLA's report agree on the peak: 3 inputs + 2 outputs of f32[40000,40000].
    assert total == mem["argument_size_in_bytes"] + mem["output_size_in_bytes"] + mem["temp_size_in_bytes"] \
        - mem["alias_size_in_bytes"]
    (f,) = _check(NEAR_FULL, "v6e")
    assert f.key == "hbm-headroom:near-full:" and f.details["verdict"] == "near-full"
    assert f.details["peak_memory_bytes"] == total
    assert f.details["hbm_capacity_bytes"] == CAPACITY["v6e"]
    assert f.details["used_fraction"] == pytest.approx(total / CAPACITY["v6e"])
    assert f.details["used_fraction"] >= hbm_headroom.NEAR_FULL
    assert f.details["headroom_bytes"] == pytest.approx(CAPACITY["v6e"] - total)
    module = known["dump_modules"][0]["file"][:-4]
    assert f.details["peak_source"] == f"memory-usage report {module}-memory-usage-report.txt"
    assert "chip table" in f.details["capacity_source"]
    assert f.time_s_per_step == 0 and f.est_savings_s_per_step == 0 and f.benefit == "step_time"
    assert "Do not raise per_device_batch_size" in f.fix and "ici_fsdp_parallelism" in f.fix
    assert "93" in f.title


def test_the_same_program_has_room_on_a_tpu7x_tensorcore_and_does_not_fit_a_v5e():
    _, total, mem = _known(NEAR_FULL)
    (roomy,) = _check(NEAR_FULL, "tpu7x")
    assert roomy.details["verdict"] == "headroom" and roomy.benefit == "throughput"
    assert roomy.details["hbm_capacity_bytes"] == CAPACITY["tpu7x"]
    assert roomy.details["headroom_bytes"] == pytest.approx(CAPACITY["tpu7x"] - total)
    # No activations in an elementwise update: nothing to scale with the batch, so no growth figure.
    assert roomy.details["temp_bytes"] == mem["temp_size_in_bytes"] == 0
    assert roomy.details["batch_growth_limit"] is None
    assert roomy.est_savings_s_per_step == 0 and "per_device_batch_size" in roomy.fix
    (over,) = _check(NEAR_FULL, "v5e")
    assert over.details["verdict"] == "over-capacity" and over.key == "hbm-headroom:near-full:"
    assert over.details["used_fraction"] == 1.0 and over.details["headroom_bytes"] == 0.0
    assert f"{total / CAPACITY['v5e']:.0%}" in over.evidence


def test_headroom_with_remat_prices_the_recomputation_it_frees_once():
    _, total, mem = _known(REMAT)
    analysis = analyze(hlo_dir=REMAT, chip="v6e")
    (f,) = hbm_headroom.check(analysis)
    assert f.details["verdict"] == "headroom" and f.benefit == "step_time"
    assert f.details["peak_memory_bytes"] == total
    assert f.details["temp_bytes"] == mem["temp_size_in_bytes"]
    assert f.details["batch_growth_limit"] == pytest.approx(1 + (CAPACITY["v6e"] - total) / mem["temp_size_in_bytes"])
    # The recomputed ops are remat-overhead's: the same time and bytes, read from the same columns.
    (remat,) = remat_overhead.check(analysis)
    assert f.details["remat_s_per_step"] == pytest.approx(remat.details["remat_s_per_step"])
    assert f.details["remat_extra_hbm_bytes"] == remat.details["extra_hbm_bytes"]
    assert f.time_s_per_step == pytest.approx(remat.time_s_per_step)
    assert f.est_savings_s_per_step == pytest.approx(remat.est_savings_s_per_step)  # the same lever, priced alike
    assert "remat_policy full -> save_qkv_proj" in f.fix and "per_device_batch_size" in f.fix
    # Both fire: remat-overhead counts the ops, hbm-headroom counts nothing more in the total (its fix alone
    # would still save the same time: the same lever).
    both = {g.rule: g for g in run_rules(analysis)}
    assert both["remat-overhead"].est_savings_s_per_step == pytest.approx(remat.est_savings_s_per_step)
    assert both["hbm-headroom"].counted_s_per_step == 0.0
    assert both["hbm-headroom"].est_savings_s_per_step == pytest.approx(remat.est_savings_s_per_step)
    assert {key for _, key in both["hbm-headroom"].related} == {"remat-overhead::"}
    # Without remat-overhead selected, hbm-headroom carries the saving.
    alone = run_rules(analysis, tuple(r for r in RULES if r.id != "remat-overhead"))
    assert only(alone, "hbm-headroom").est_savings_s_per_step == pytest.approx(remat.est_savings_s_per_step)


def test_measured_remat_is_priced_from_the_trace(tmp_path):
    """A TPU-shaped capture with 20 % remat, its peak set to 17 MB short of the capacity, then to half of it."""
    analysis, exp = analyze_scenario(tmp_path, scenarios.remat_fusions, 20.0)
    assert hbm_headroom.check(analysis) == []  # no memory report: peak unknown, nothing said
    capacity = analysis.chip.hbm_capacity_bytes
    dump = dataclasses.replace(analysis.dump, peak_memory_bytes=capacity - 17_000_000, peak_memory_file="m.txt")
    f = only(hbm_headroom.check(dataclasses.replace(analysis, dump=dump)), "hbm-headroom")
    assert f.details["verdict"] == "near-full"  # 17 MB free of 32 GiB
    dump = dataclasses.replace(dump, peak_memory_bytes=0.5 * capacity)
    f = only(hbm_headroom.check(dataclasses.replace(analysis, dump=dump)), "hbm-headroom")
    assert f.details["times_are"] == "measured" and f.confidence == "medium"
    assert f.time_s_per_step == pytest.approx(exp["remat_s_per_step"], rel=REL)
    # the saving is remat-overhead's named policy on the same trace (all outputs fit in half the HBM)
    remat = only(remat_overhead.check(dataclasses.replace(analysis, dump=dump)), "remat-overhead")
    assert f.est_savings_s_per_step == pytest.approx(remat.est_savings_s_per_step)


def test_silent_on_cpu_captures_and_between_the_thresholds():
    assert hbm_headroom.check(analyze(CPU_SAMPLE)) == []  # host memory is not HBM
    # 80 % used: neither near-full nor worth spending.
    _, total, _ = _known(NEAR_FULL)
    analysis = analyze(hlo_dir=NEAR_FULL, chip="v6e")
    dump = dataclasses.replace(analysis.dump, peak_memory_bytes=0.8 * analysis.chip.hbm_capacity_bytes)
    assert hbm_headroom.check(dataclasses.replace(analysis, dump=dump)) == []
