"""Hostile HLO dumps (the second round of a fuzz campaign on --xla_dump_to output): every bad value is a warning
naming the file and what is wrong, plus an unknown where it was; the rest of the report stands, and no count
goes negative, past the step, or through Python's stack."""

from __future__ import annotations

import math
import warnings

import pytest

from builders import hlo_snippets as hs
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.hlo.control_flow import MAX_TRIPS, trip_count
from xladiag.analyzer.hlo.costs import instruction_costs, instruction_flops
from xladiag.parsers.hlo_instruction import MAX_CONFIG_DEPTH, config_too_deep
from xladiag.parsers.hlo_text import parse_hlo_module
from xladiag.parsers.xla_memory_reports import (
    MAX_PLAUSIBLE_BYTES,
    MemoryReportError,
    parse_buffer_assignment,
    parse_memory_usage_report,
)
from xladiag.rules import mxu_padding

HLO_NAME = "module_0001.jit_step.cpu_after_optimizations.txt"
DOT_FLOPS = 2 * 64**3  # one trip of hs.loop_module


def _analysis(tmp_path, text: str, **files: str):
    (tmp_path / HLO_NAME).write_text(text)
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a Python warning escaping the analysis would reach the user's terminal
        return analyze(hlo_dir=tmp_path, chip="v6e")


def _parse(text: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = parse_hlo_module(text, "m.txt")
    return module, [str(w.message) for w in caught]


def _op(analysis, name: str):
    return analysis.ops.set_index("op_name").loc[name]


# ---- 1. trip counts ------------------------------------------------------------------------------------------

BAD_TRIP_COUNTS = {
    "a list": '{"known_trip_count":[1]}',
    "a list n": '{"known_trip_count":{"n":[32]}}',
    "1e400": '{"known_trip_count":{"n":1e400}}',
    "400 digits": '{"known_trip_count":{"n":"' + "9" * 400 + '"}}',
    "negative string": '{"known_trip_count":{"n":"-5"}}',
    "negative number": '{"known_trip_count":{"n":-5}}',
    "INT64_MAX": '{"known_trip_count":{"n":"9223372036854775807"}}',
    "2^31": '{"known_trip_count":{"n":"2147483648"}}',
    "a boolean": '{"known_trip_count":{"n":true}}',
    "a fraction": '{"known_trip_count":{"n":3.5}}',
}


@pytest.mark.parametrize("config", BAD_TRIP_COUNTS.values(), ids=BAD_TRIP_COUNTS.keys())
def test_bad_known_trip_count_falls_back_to_the_condition_with_a_warning(tmp_path, config):
    a = _analysis(tmp_path, hs.loop_module(config, limit=32))
    assert _op(a, "y")["occurrences_per_step"] == 32
    assert "known_trip_count" in _op(a, "y")["cost_note"]
    (warning,) = [w for w in a.warnings if "known_trip_count" in w]
    assert HLO_NAME in warning and "%loop" in warning and "32 trips read from its loop condition" in warning


@pytest.mark.parametrize("config", BAD_TRIP_COUNTS.values(), ids=BAD_TRIP_COUNTS.keys())
def test_bad_known_trip_count_without_a_condition_is_unknown_and_counted_once(tmp_path, config):
    a = _analysis(tmp_path, hs.loop_module(config, limit=None))
    assert _op(a, "y")["occurrences_per_step"] == 1
    assert "trip count unknown" in _op(a, "y")["cost_note"]
    assert any("%loop" in w and "trip count unknown" in w for w in a.warnings)
    assert 0 < a.step_s < 1e-3  # one 64^3 dot, not 1,470 years nor a negative step
    assert _op(a, "y")["flops"] == DOT_FLOPS


def test_trip_counts_at_the_bounds():
    def trips(config, limit=None):
        module, _ = _parse(hs.loop_module(config, limit))
        return trip_count(module, module.instruction("loop"))[0]

    assert trips('{"known_trip_count":{"n":"0"}}') == 0
    assert trips(f'{{"known_trip_count":{{"n":"{MAX_TRIPS}"}}}}') == MAX_TRIPS
    assert trips(f'{{"known_trip_count":{{"n":{MAX_TRIPS + 1}}}}}') is None
    assert trips("", limit=MAX_TRIPS) == MAX_TRIPS  # i < limit: limit trips
    assert trips("", limit=2**63 - 1) is None
    assert trips("", limit=-4) == 0  # a loop whose condition is false at once runs 0 times


def test_nested_loops_past_the_bound_are_unknown(tmp_path):
    # The loop runs 2^20 times inside an outer loop of 2^20 trips: 2^40 runs of its body per program run.
    inner = hs.loop_module('{"known_trip_count":{"n":"1048576"}}', limit=None)
    outer = inner.replace("ENTRY %main", "%inner_main").replace("HloModule jit_loop\n", "")
    state = "(s32[], f32[64,64]{1,0})"
    text = "HloModule jit_nested\n" + outer + f"""
%obody (q: {state}) -> {state} {{
  %q = {state} parameter(0)
  %qi = s32[] get-tuple-element(%q), index=0
  %qx = f32[64,64]{{1,0}} get-tuple-element(%q), index=1
  %qy = f32[64,64]{{1,0}} call(%qx), to_apply=%inner_main
  ROOT %qt = {state} tuple(%qi, %qy)
}}

%ocond (oc: {state}) -> pred[] {{
  %oc = {state} parameter(0)
  %oci = s32[] get-tuple-element(%oc), index=0
  ROOT %olt = pred[] compare(%oci, %oci), direction=LT
}}

ENTRY %main (z: f32[64,64]) -> f32[64,64] {{
  %z = f32[64,64]{{1,0}} parameter(0)
  %z0 = s32[] constant(0)
  %zi = {state} tuple(%z0, %z)
  %oloop = {state} while(%zi), condition=%ocond, body=%obody, backend_config={{"known_trip_count":{{"n":"1048576"}}}}
  ROOT %zo = f32[64,64]{{1,0}} get-tuple-element(%oloop), index=1
}}
"""
    a = _analysis(tmp_path, text)
    assert _op(a, "y")["occurrences_per_step"] == 2**20  # the inner loop is counted once per outer trip
    assert "past 2147483647" in _op(a, "y")["cost_note"]


# ---- 2. call cycles ------------------------------------------------------------------------------------------

CYCLES = {"self-fusion": "%f1 -> %f1", "fusion-pair": "%f1 -> %f2 -> %f1", "call-pair": "%f1 -> %f2 -> %f1",
          "while-body": "%f1 -> %f1", "branch": "%f1 -> %f1"}


@pytest.mark.parametrize("kind", CYCLES)
def test_call_cycles_are_named_in_one_warning_and_the_report_stands(tmp_path, kind):
    module, caught = _parse(hs.cyclic_module(kind))
    assert [w for w in caught if "call cycle" in w] == [
        f"m.txt: call cycle {CYCLES[kind]} (a damaged dump: XLA's call graphs have none): FLOPs through it are "
        "unknown, loops on it run once"]
    assert set(module.call_cycles) == ({"f1", "f2"} if "pair" in kind else {"f1"})
    a = _analysis(tmp_path, hs.cyclic_module(kind))
    assert any(CYCLES[kind] in w and HLO_NAME in w for w in a.warnings)
    entry = a.ops[a.ops["op_name"] == "d"]
    assert (entry["flops"] == 2 * 8**3).all() and a.step_s > 0


@pytest.mark.parametrize("kind", ["self-fusion", "fusion-pair"])
def test_a_fusion_on_a_cycle_has_unknown_flops(tmp_path, kind):
    module, _ = _parse(hs.cyclic_module(kind))
    assert math.isnan(instruction_flops(module.computations["main"].root, module))
    costs = instruction_costs(module).set_index("name")
    assert "on call cycle" in costs.loc["r", "flops_note"]


def test_two_cycles_in_one_group_do_not_trap_the_walk():
    # %a <-> %b and %c <-> %d, with %a <-> %c: one group; the cycle named runs through %a, yet the walk must
    # also stop at %c and %d.
    comps = {"a": "fusion(%d), kind=kLoop, calls=%b", "b": "fusion(%d), kind=kLoop, calls=%a",
             "c": "fusion(%d), kind=kLoop, calls=%d", "d": "fusion(%d), kind=kLoop, calls=%c"}
    text = "HloModule m\n\n" + "".join(hs._computation(n, root) for n, root in comps.items())
    text = text.replace("calls=%b\n", "calls=%b\n  %to_c = f32[8,8]{1,0} fusion(%a), kind=kLoop, calls=%c\n", 1)
    text = text.replace("calls=%d\n}", "calls=%d\n  %to_a = f32[8,8]{1,0} fusion(%a), kind=kLoop, calls=%a\n}", 1)
    text += "\n" + hs._computation("main", "fusion(%d), kind=kLoop, calls=%c", entry=True)
    module, caught = _parse(text)
    assert set(module.call_cycles) == {"a", "b", "c", "d"}
    assert len([w for w in caught if "call cycle" in w]) == 1
    assert math.isnan(instruction_flops(module.computations["main"].root, module))


def test_a_deep_acyclic_fusion_chain_is_counted_without_recursion(tmp_path):
    depth = 1500  # past Python's default recursion limit (1000) once, and twice its frames per level
    a = _analysis(tmp_path, hs.fusion_chain_module(depth))
    assert _op(a, "r")["flops"] == depth * 2 * 8**3 + 8 * 8  # every body's dot, and the last body's add
    assert not any("cycle" in w for w in a.warnings)


# ---- 3. deep backend_config ----------------------------------------------------------------------------------

@pytest.mark.parametrize("quoted", [False, True], ids=["raw", "quoted"])
def test_a_deeply_nested_backend_config_is_ignored_with_a_warning(tmp_path, quoted):
    deep = '{"known_trip_count":{"n":"7"},"x":' + hs.nested_json(100_000) + "}"
    config = '"' + deep.replace('"', '\\"') + '"' if quoted else deep
    text = hs.loop_module(config, limit=32)
    module, caught = _parse(text)
    assert "backend_config" not in module.instruction("loop").attrs
    line = text[: text.index("%loop =")].count("\n") + 1
    assert [w for w in caught if "backend_config" in w] == [
        f"m.txt:{line}: %loop: backend_config nested more than {MAX_CONFIG_DEPTH} levels deep: "
        "ignored (read as absent)"]
    a = _analysis(tmp_path, hs.loop_module(config, limit=32))
    assert _op(a, "y")["occurrences_per_step"] == 32  # the config is absent: the condition counts
    assert any("backend_config nested" in w and HLO_NAME in w for w in a.warnings)


def test_config_depth_limit_counts_brackets_outside_strings():
    assert not config_too_deep(hs.nested_json(MAX_CONFIG_DEPTH))
    assert config_too_deep(hs.nested_json(MAX_CONFIG_DEPTH + 1))
    assert not config_too_deep('{"s":"' + "[" * 1000 + '"}')  # brackets in a string nest nothing
    assert config_too_deep('"' + hs.nested_json(MAX_CONFIG_DEPTH + 1).replace('"', '\\"') + '"')
    # A depth-64 config is kept and read.
    module, caught = _parse(hs.loop_module('{"known_trip_count":{"n":"7"},"x":' + hs.nested_json(62) + "}",
                                           limit=None))
    assert not caught and trip_count(module, module.instruction("loop"))[0] == 7


# ---- 4. unknown and damaged dims -----------------------------------------------------------------------------

UNKNOWN_FLOPS = {
    "dynamic lhs": ("f32[?,64]{1,0}", "f32[64,32]{1,0}", "f32[?,32]{1,0}", None, "dot"),
    "dynamic contracted": ("f32[8,?]{1,0}", "f32[?,32]{1,0}", "f32[8,32]{1,0}", None, "dot"),
    "negative index": ("f32[8,64]{1,0}", "f32[64,32]{1,0}", "f32[8,32]{1,0}",
                       "lhs_contracting_dims={-1}, rhs_contracting_dims={0}", "dot"),
    "index past rank": ("f32[8,64]{1,0}", "f32[64,32]{1,0}", "f32[8,32]{1,0}",
                        "lhs_contracting_dims={2}, rhs_contracting_dims={0}", "dot"),
    "repeated index": ("f32[64,64]{1,0}", "f32[64,64]{1,0}", "f32[64]{0}",
                       "lhs_contracting_dims={1,1}, rhs_contracting_dims={0,0}", "dot"),
    "sizes disagree": ("f32[8,64]{1,0}", "f32[32,32]{1,0}", "f32[8,32]{1,0}", None, "dot"),
    "dynamic conv": ("f32[1,?,8]{2,1,0}", "f32[3,8,16]{2,1,0}", "f32[1,30,16]{2,1,0}",
                     "window={size=3}, dim_labels=b0f_0io->b0f", "convolution"),
    "stride 0": ("f32[1,32,8]{2,1,0}", "f32[3,8,16]{2,1,0}", "f32[1,30,16]{2,1,0}",
                 "window={size=3 stride=0}, dim_labels=b0f_0io->b0f", "convolution"),
    "no feature groups": ("f32[1,32,8]{2,1,0}", "f32[3,8,16]{2,1,0}", "f32[1,30,16]{2,1,0}",
                          "window={size=3}, dim_labels=b0f_0io->b0f, feature_group_count=0", "convolution"),
}


@pytest.mark.parametrize("case", UNKNOWN_FLOPS.values(), ids=UNKNOWN_FLOPS.keys())
def test_unknown_or_damaged_dims_make_flops_unknown_never_negative(case):
    lhs, rhs, out, attrs, opcode = case
    module, _ = _parse(hs.dot_module(lhs, rhs, out, *([attrs] if attrs else []), opcode=opcode))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's divide-by-zero warning included
        costs = instruction_costs(module).set_index("name")
    assert math.isnan(costs.loc["y", "flops"]), costs.loc["y", "flops"]
    assert "unknown" in costs.loc["y", "flops_note"] or "cannot count FLOPs" in costs.loc["y", "flops_note"]


def test_a_negative_window_size_is_unknown_not_negative():
    module, _ = _parse(hs.dot_module("f32[64,64]{1,0}", "f32[]", "f32[64,64]{1,0}",
                                     "window={size=-3x1}, to_apply=%add", opcode="reduce-window"))
    assert math.isnan(instruction_costs(module).set_index("name").loc["y", "flops"])


def test_consistent_dots_still_count():
    module, _ = _parse(hs.dot_module("f32[8,64]{1,0}", "f32[64,32]{1,0}", "f32[8,32]{1,0}"))
    assert instruction_costs(module).set_index("name").loc["y", "flops"] == 2 * 8 * 64 * 32
    batched = hs.dot_module("f32[4,8,64]{2,1,0}", "f32[4,64,32]{2,1,0}", "f32[4,8,32]{2,1,0}",
                            "lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                            "rhs_batch_dims={0}, rhs_contracting_dims={1}")
    module, _ = _parse(batched)
    assert instruction_costs(module).set_index("name").loc["y", "flops"] == 2 * 4 * 8 * 64 * 32


def test_unknown_flops_reach_the_report_as_unknown(tmp_path):
    a = _analysis(tmp_path, hs.dot_module("f32[8,?]{1,0}", "f32[?,32]{1,0}", "f32[8,32]{1,0}"))
    assert math.isnan(_op(a, "y")["flops"]) and (a.ops["flops"].fillna(0) >= 0).all()


# ---- 5. scalar dot operands, shares of the step ---------------------------------------------------------------

@pytest.mark.parametrize("rhs", ["f32[]", "f32[200]{0}"])
def test_a_dot_operand_that_contradicts_the_result_is_not_priced_as_padding(tmp_path, rhs):
    # The fuzz mutant: the weight of a [1024,200] x [200,72] dot made a scalar. Its sizes read N = 1, and
    # mxu-padding priced a 99.7 % padded dot at 15x the step. The shapes do not make a dot: unknown.
    a = _analysis(tmp_path, hs.dot_module("f32[1024,200]{1,0}", rhs, "f32[1024,72]{1,0}"))
    y = _op(a, "y")
    assert math.isnan(y["flops"]) and math.isnan(y["matmul_n"]) and "cannot count FLOPs: " in y["cost_note"]
    assert mxu_padding.check(a) == []


def test_a_finding_costing_more_than_the_step_is_the_whole_step(tmp_path):
    # A consistent but degenerate dot (K = N = 1): its padded MXU work at peak is ~30x its HBM-bound roofline
    # time, which is all the step holds. The cost stays what the rule priced; its share is capped at 1.
    a = _analysis(tmp_path, hs.dot_module("f32[4096,1]{1,0}", "f32[1,1]{1,0}", "f32[4096,1]{1,0}"))
    (finding,) = mxu_padding.check(a)
    assert finding.time_s_per_step > 10 * a.step_s
    assert finding.fraction_of_step == 1.0
    assert finding.est_savings_s_per_step <= a.step_s


# ---- 6. memory reports ---------------------------------------------------------------------------------------

REPORT_NAME = HLO_NAME.replace(".txt", "-memory-usage-report.txt")
BUFFERS_NAME = HLO_NAME.replace(".txt", "-buffer-assignment.txt")


@pytest.mark.parametrize("total", ["1" + "0" * 40, "9" * 5000, str(MAX_PLAUSIBLE_BYTES + 1)])
def test_an_implausible_memory_report_is_a_note_and_unknown(tmp_path, total):
    a = _analysis(tmp_path, hs.dot_module("f32[8,64]{1,0}", "f32[64,32]{1,0}", "f32[8,32]{1,0}"),
                  **{REPORT_NAME: hs.memory_usage_report(total)})
    assert a.dump.peak_memory_bytes is None
    (note,) = [w for w in a.warnings if REPORT_NAME in w]
    assert "over 2^50" in note and "'Total bytes' of memory space default" in note and "\n" not in note
    assert _op(a, "y")["flops"] == 2 * 8 * 64 * 32  # the rest of the report stands


def test_memory_sizes_at_the_bound():
    assert parse_memory_usage_report(hs.memory_usage_report(MAX_PLAUSIBLE_BYTES)).peak_bytes == MAX_PLAUSIBLE_BYTES
    with pytest.raises(MemoryReportError, match=r"^b\.txt: the size of allocation 3 is .* over 2\^50"):
        parse_buffer_assignment(f"allocation 3: size {2**60}, parameter 0\n", "b.txt")
    with pytest.raises(MemoryReportError, match="past 64 bits"):
        parse_buffer_assignment("allocation " + "9" * 5000 + ": size 8\n", "b.txt")


# ---- the same damage in an HloProto (a capture's metadata plane, *.hlo_proto.pb) -------------------------------

def test_a_damaged_hlo_proto_warns_and_costs_like_its_text():
    from conftest import CPU_SAMPLE, only_xplane
    from xladiag.parsers.hlo_proto import parse_hlo_proto
    from xladiag.parsers.hlo_proto_schema import HloProto
    from xladiag.parsers.xplane import read_xspace

    _, _, data = read_xspace(only_xplane(CPU_SAMPLE)).hlo_protos[0]
    proto = HloProto()
    proto.ParseFromString(data)
    # The first fusion of the entry computation calls its own computation and carries a 1000-deep config.
    comp = next(c for c in proto.hlo_module.computations
                if any(i.opcode in (b"fusion", "fusion") for i in c.instructions))
    fusion = next(i for i in comp.instructions if i.opcode in (b"fusion", "fusion"))
    callee = next(c for c in proto.hlo_module.computations if c.id == fusion.called_computation_ids[0])
    inner = next(i for i in callee.instructions if i.opcode not in (b"parameter", "parameter"))
    inner.opcode = b"fusion"
    inner.called_computation_ids[:] = [callee.id]
    fusion.backend_config = hs.nested_json(1000).encode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = parse_hlo_proto(proto.SerializeToString(), "step.hlo_proto.pb")
    messages = [str(w.message) for w in caught]
    name = callee.name.decode() if isinstance(callee.name, bytes) else callee.name
    assert any(m.startswith(f"step.hlo_proto.pb: call cycle %{name} -> %{name} ") for m in messages), messages
    assert any("backend_config nested more than" in m for m in messages), messages
    costs = instruction_costs(module).set_index("name")
    fusion_name = fusion.name.decode() if isinstance(fusion.name, bytes) else fusion.name
    assert math.isnan(costs.loc[fusion_name, "flops"]) and not (costs["flops"] < 0).any()
