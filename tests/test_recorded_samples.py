"""Facts of the recorded JAX samples themselves (sample_profiles/make_*.py), read back independently.

These pin what the recordings are, so a re-recording that loses a property the other tests rely on
(two modules of one name, annotated steps with a host wait, ids shared by dump and capture) fails here.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from functools import cache

import pytest

from conftest import SAMPLES, only_xplane

# The recording scripts are not part of the installed package: import them as they run, from their folder.
sys.path.insert(0, str(SAMPLES))
import _recording  # noqa: E402

FSDP = SAMPLES / "jax_fsdp_tp_train"


def answers(sample):
    return json.loads((sample / _recording.ANSWERS).read_text())


@cache
def read_back(sample, step_name):
    return _recording.trace_answers(only_xplane(sample), step_name)


def dump_modules(dump_dir):
    rows = []
    for f in sorted(dump_dir.glob("module_*after_optimizations.txt")):
        module_id, name = re.match(r"module_(\d+)\.(.+?)\.", f.name).groups()
        header = re.match(r"HloModule (\S+?),", f.read_text())
        rows.append((int(module_id), name, header.group(1) if header else None))
    return rows


def test_fsdp_dump_holds_every_module_of_the_script():
    rows = dump_modules(FSDP / "hlo")
    names = Counter(name for _, name, _ in rows)
    # The recompile and the random init are why module names repeat: the point of this sample.
    assert names["jit_train_step"] == 2 and names["jit__normal"] == 4
    assert len({module_id for module_id, _, _ in rows}) == len(rows)
    assert all(header == name for _, name, header in rows)
    for row in answers(FSDP)["dump_modules"]:
        assert row["memory_usage_total_bytes"] == _recording.memory_report_total(FSDP / "hlo" / row["file"]) > 0
    assert [r["file"] for r in answers(FSDP)["dump_modules"]] == [
        f.name for f in sorted((FSDP / "hlo").glob("module_*after_optimizations.txt"))]


def test_fsdp_capture_programs_are_the_dump_modules_by_id():
    rows = {module_id: name for module_id, name, _ in dump_modules(FSDP / "hlo")}
    traced = read_back(FSDP, "train")
    listed = {p["program_id"]: p["name"] for p in traced["programs_in_capture_metadata"]}
    assert listed == {i: f"{n}({i})" for i, n in rows.items()}
    executed = {p["program_id"]: p["name"] for p in traced["programs_executed"]}
    # Only the second jit_train_step runs in the trace; the first (FSDP-only inputs) ran in warm-up.
    train_ids = sorted(i for i, n in rows.items() if n == "jit_train_step")
    assert executed == {train_ids[1]: "jit_train_step", **{i: n for i, n in executed.items() if n != "jit_train_step"}}
    assert sorted(executed.values()) == ["jit_global_norm", "jit_train_step"]


def test_fsdp_steps_are_annotated_and_include_the_loader_wait():
    known = answers(FSDP)
    steps = read_back(FSDP, "train")["steps"]
    assert [s["step_num"] for s in steps] == list(range(known["profiled_steps"]))
    assert steps == known["steps"]  # the committed answers are what the committed capture says
    for s in steps:
        host_only = s["annotated_ms"] - s["device_busy_ms_any_device"]
        assert known["loader_wait_ms"] <= host_only < known["loader_wait_ms"] * 1.5, s
        assert s["executions"] == 2  # one train step, one global norm, launched inside the span


MANY = SAMPLES / "jax_many_programs"


def test_many_programs_share_one_name_and_one_op_name():
    known = answers(MANY)
    rows = dump_modules(MANY / "hlo")
    assert {name for _, name, _ in rows} == {"jit_dot"} and len(rows) == len(known["programs"]) == 6
    executed = read_back(MANY, None)["programs_executed"]
    assert [p["program_id"] for p in executed] == [p["program_id"] for p in known["programs"]]
    # Same module name and same op name in every program: only the program id tells them apart.
    assert {tuple(p["op_names"]) for p in executed} == {("ynn_fusion",)}
    assert [p["executions"] for p in executed] == [p["executions"] for p in known["programs"]] == [6, 5, 4, 3, 2, 1]
    # The biggest dot (most FLOPs) runs once; it is the longest by far, as its FLOPs say.
    spans = [p["execution_span_ms"]["mean"] for p in executed]
    assert spans[-1] == max(spans) and spans[-1] > 100 * spans[0]


def test_many_programs_dump_shapes_are_the_recorded_ones():
    for program in answers(MANY)["programs"]:
        m, k, n = program["m_k_n"]
        pattern = f"module_{program['program_id']:04d}.jit_dot.*after_optimizations.txt"
        text = next((MANY / "hlo").glob(pattern)).read_text()
        assert f"f32[{m},{k}]" in text and f"f32[{k},{n}]" in text and f"f32[{m},{n}]" in text
        assert program["flops"] == 2 * m * k * n


# --- the HLO rule fixtures (make_hlo_rule_fixtures.py) ------------------------------------------

import make_hlo_rule_fixtures as fixtures  # noqa: E402


def fixture_module(name):
    (path,) = (SAMPLES / name / "hlo").glob("module_*after_optimizations.txt")
    return path.read_text()


@pytest.mark.parametrize("name", sorted(fixtures.FIXTURES))
def test_rule_fixture_answers_match_its_hlo(name):
    known = answers(SAMPLES / name)
    facts = fixtures.hlo_facts(fixture_module(name))
    assert known["spec"] == fixtures.FIXTURES[name]
    assert facts["dots"] == known["dots"] and facts["collectives"] == known["collectives"]
    # No library fusion hides the dots: each is a top-level instruction of the entry computation.
    entry = fixture_module(name).split("\nENTRY ", 1)[1]
    assert (facts["dots"] or known["spec"]["kind"] == "elementwise") and "__ynn_fusion" not in entry
    assert all(f"%{d['name']} = " in entry for d in facts["dots"])


def test_padding_fixtures_padded_fraction():
    bad, good = answers(SAMPLES / "hlo_rules_dot_k200_n72"), answers(SAMPLES / "hlo_rules_dot_aligned_1024")
    (dot,) = bad["dots"]
    assert dot["contracting"] == 200 and dot["result"] == [1024, 72]
    assert bad["padded_flops_fraction"]["v6e/tpu7x"] == round(1 - 200 * 72 / 256**2, 4) == 0.7803
    assert bad["padded_flops_fraction"]["v5e/v5p/v4"] == round(1 - 200 * 72 / (256 * 128), 4)
    assert good["padded_flops_fraction"] == {"v5e/v5p/v4": 0.0, "v6e/tpu7x": 0.0}


def test_attention_fixture_materializes_the_score_matrix_and_the_mlp_does_not():
    attention, mlp = answers(SAMPLES / "hlo_rules_attention_naive"), answers(SAMPLES / "hlo_rules_mlp_same_flops")
    assert (attention["flops"] == mlp["flops"] == attention["dot_flops_per_device_from_hlo"]
            == mlp["dot_flops_per_device_from_hlo"])
    scores, out = attention["dots"]
    assert scores["result"] == attention["score_matrix"] == [4, 8, 2048, 2048]
    assert attention["score_matrix_bytes_f32"] == 4 * 8 * 2048 * 2048 * 4
    entry = fixture_module("hlo_rules_attention_naive").split("\nENTRY ", 1)[1]
    readers = [line for line in entry.splitlines() if f"%{scores['name']})" in line or f"%{scores['name']}," in line]
    assert readers and all(" dot(" not in line for line in readers)  # the softmax reads the scores
    assert "f32[4,8,2048,2048]" not in fixture_module("hlo_rules_mlp_same_flops")


def test_fsdp_fixtures_intensity_follows_tokens_per_device():
    small, large = answers(SAMPLES / "hlo_rules_fsdp_256_tokens"), answers(SAMPLES / "hlo_rules_fsdp_16k_tokens")
    assert (small["tokens_per_device"], large["tokens_per_device"]) == (256, 16384)
    # Same weights gathered, 64x the tokens: 64x the forward FLOPs per gathered (f32) byte.
    assert small["all_gather_result_bytes_per_device"] == large["all_gather_result_bytes_per_device"]
    for known in (small, large):
        assert known["forward_flops_per_all_gather_byte"] == known["tokens_per_device"] / 2
    assert small["forward_flops_per_all_gather_byte"] < 2500 and large["forward_flops_per_all_gather_byte"] > 5100


INPUT_BOUND = SAMPLES / "jax_input_bound"


def test_input_bound_steps_wait_for_the_loader():
    known = answers(INPUT_BOUND)
    steps = read_back(INPUT_BOUND, "train")["steps"]
    assert [s["step_num"] for s in steps] == list(range(known["profiled_steps"])) == [0, 1, 2, 3, 4]
    for mine, theirs in zip(steps, known["steps"]):
        assert {k: theirs[k] for k in mine} == mine  # the committed answers are what the capture says
        assert mine["executions"] == 1 and mine["programs_executed"] == [0]
        # The device idles at least the loader's own time, and the step is mostly that idle time.
        assert theirs["loader_ms_perf_counter"] >= known["loader_wait_ms"]
        assert theirs["device_idle_ms"] >= theirs["loader_ms_perf_counter"] - 1
        assert theirs["device_idle_ms"] > 2 * mine["device_busy_ms_any_device"]
