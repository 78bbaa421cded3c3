"""HLO text parser: the real v6e module, a CPU-style and a GPU-style module, shapes, errors."""

import re
import time
import tracemalloc
import warnings
from pathlib import Path

import pytest

from xladiag.parsers.hlo_text import (
    HloParseError,
    find_hlo_dumps,
    parse_hlo_file,
    parse_hlo_module,
    parse_mesh_axes,
    parse_replica_groups,
)

V6E = Path(__file__).resolve().parent.parent / "sample_profiles" / "hlo_maxtext_llama3_8b_v6e4" / "maxtext_llama3_8b_v6e4.after_optimizations.txt"
REPO = Path(__file__).resolve().parents[1]
SAMPLE_DUMPS = [p for d in sorted(REPO.glob("sample_profiles/*/hlo")) for p in find_hlo_dumps(d)]


@pytest.fixture(scope="module")
def v6e():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_hlo_file(V6E)


# --- the real TPU v6e module ------------------------------------------------------------------

def test_v6e_parses_whole_and_fast():
    text = V6E.read_text()
    start = time.perf_counter()
    with pytest.warns(UserWarning, match="truncated"):
        m = parse_hlo_module(text, str(V6E))
    assert time.perf_counter() - start < 0.5
    # Independent counts: computation header lines and instruction lines ("  [ROOT ]%x = ").
    headers = re.findall(r"^(?:ENTRY )?%\S+ .*\{$", text, flags=re.M)
    instr_lines = re.findall(r"^  (?:ROOT )?%\S+ = ", text, flags=re.M)
    assert len(m.computations) == len(headers) == 176
    assert sum(len(c.instructions) for c in m.computations.values()) == len(instr_lines)
    assert m.name == "jit_train_step" and m.is_scheduled
    # The shared file is cut at line 2000 inside a fused computation and has no ENTRY.
    assert m.truncated and m.entry == ""


def test_v6e_instruction_fields(v6e):
    ag = v6e.instruction("all-gather.101")
    assert ag.opcode == "all-gather" and ag.computation.startswith("wide.region_1.6")
    assert ag.shape.dims == (1, 14336, 4096) and ag.shape.dtype == "bf16"
    assert ag.attrs["dimensions"] == "{2}" and ag.attrs["channel_id"] == "105"
    assert ag.operand_names == ("dynamic-slice_convert_fusion.39",) and ag.operand_shapes == ()
    assert v6e.resolve_operand_shapes(ag)[0].dims == (1, 14336, 1024)
    assert ag.op_name == "jit(train_step)/jvp()/while/body/closed_call/dot_general"
    # A custom-call whose frontend_attributes span three lines.
    splash = v6e.instruction("splash_mha_fwd_segmented_residuals.3")
    assert splash.attrs["custom_call_target"] == '"tpu_custom_call"'
    assert "xprof_metadata" in splash.attrs["frontend_attributes"]
    assert splash.op_name.endswith("pallas_call") and len(splash.operand_names) == 8
    assert splash.shape.is_tuple and len(splash.shape.elements) == 5
    nxt = v6e.instruction("get-tuple-element.1380")
    assert nxt.attrs["index"] == "3"
    root = v6e.computations["fused_computation.408"].root
    assert root.is_root and root.name == "bitcast.559"
    body = v6e.fusion_body(v6e.instruction("fusion.500"))
    assert any(i.opcode == "convolution" for i in body.instructions)


def test_v6e_instructions_frame(v6e):
    df = v6e.instructions()
    assert len(df) == 1459
    assert {"computation", "name", "opcode", "dtype", "dims", "result_bytes", "layout",
            "memory_space", "op_name", "source_file", "source_line", "calls", "kind",
            "is_entry"} <= set(df.columns)
    # hlo.md: 186 ops carry jax.checkpoint's rematted_computation marker.
    assert df["op_name"].str.contains("rematted_computation").sum() == 186
    ag = df.set_index("name").loc["all-gather.98"]
    assert ag["memory_space"] == 1 and ag["result_bytes"] == 4096 * 32 * 128 * 2
    assert ag["layout"] == "{1,3,2,0:T(8,128)(2,1)S(1)}"
    fusion = df.set_index("name").loc["fusion.500"]
    assert fusion["kind"] == "kOutput" and fusion["calls"].startswith("fused_computation")


def test_v6e_replica_groups_mesh_form(v6e):
    ags = [i for c in v6e.computations.values() for i in c.instructions if i.opcode == "all-gather"]
    assert len(ags) == 7
    for ag in ags:
        text = ag.attrs["replica_groups"]
        assert text.startswith("mesh[")
        # v6e-4: every all-gather here runs over the one mesh axis of size 4.
        assert parse_replica_groups(text) == [[0, 1, 2, 3]]
    axes = parse_mesh_axes(v6e.instruction("all-gather.97").attrs["replica_groups"])
    assert axes == {"axis_0": 1, "axis_1": 1, "axis_2": 4}


def test_v6e_computation_roles(v6e):
    roles = v6e.computation_roles()
    assert roles["fused_computation.18.clone.1"] == "fusion"
    assert roles["async_computation.24"] == "async"
    assert roles["region_2.3"] == "applied"
    # The while body and condition lost their caller with the ENTRY; they are still loop bodies.
    assert roles["wide.region_1.6_spmd.sunk.clone.clone.clone.sunk"] == "control"
    assert roles["wide.region_4.7_spmd.clone.clone.clone"] == "control"


# --- CPU and GPU style modules ----------------------------------------------------------------

CPU_MODULE = """HloModule jit_loss, is_scheduled=true, entry_computation_layout={(f32[16,32]{1,0})->f32[16,32]{1,0}}, num_partitions=8

FileNames
1 "/tmp/prog.py"

FunctionNames
1 "layer"

FileLocations
1 {file_name_id=1 function_name_id=1 line=9 end_line=9 column=9 end_column=9}
2 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=21 end_column=21}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}


%region_3.0 (psum_invariant.6: f32[], psum_invariant.7: f32[]) -> f32[] {
  %psum_invariant.6 = f32[] parameter(0), metadata={op_name="psum_invariant"}
  %psum_invariant.7 = f32[] parameter(1), metadata={op_name="psum_invariant"}
  ROOT %add.4 = f32[] add(%psum_invariant.6, %psum_invariant.7), metadata={op_name="add" stack_frame_id=2}
}

ENTRY %main.0_spmd (param.10: f32[16,32]) -> f32[16,32] {
  %param.10 = f32[16,32]{1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}, metadata={op_name="w"}
  %all_gather.17 = f32[32,32]{1,0} all-gather(%param.10), channel_id=1, replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/shard_map/all_gather" stack_frame_id=1}
  %dot = f32[16,32]{1,0} dot(%param.10, %all_gather.17), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(loss)/shard_map/dot_general" stack_frame_id=2}
  ROOT %all-reduce.1 = f32[16,32]{1,0} all-reduce(%dot), channel_id=2, replica_groups={{0,2,4,6},{1,3,5,7}}, use_global_device_ids=true, to_apply=%region_3.0
}
"""


def test_cpu_style_module_with_stack_frames():
    m = parse_hlo_module(CPU_MODULE, "cpu.txt", strict=True)
    assert m.entry == "main.0_spmd" and not m.truncated
    ag = m.instruction("all_gather.17")
    # stack_frame_id=1 -> file location 1 -> /tmp/prog.py:9.
    assert (ag.source_file, ag.source_line) == ("/tmp/prog.py", 9)
    assert "rematted_computation" in ag.op_name
    assert m.instruction("dot").source_line == 10
    assert m.instruction("param.10").source_line is None
    assert parse_replica_groups(m.instruction("all-reduce.1").attrs["replica_groups"]) == \
        [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert m.instruction("all-reduce.1").called_computations() == ("region_3.0",)
    assert m.computation_roles() == {"main.0_spmd": "entry", "region_3.0": "applied"}
    df = m.instructions()
    assert df["is_entry"].sum() == 4 and len(df) == 7


GPU_MODULE = """HloModule jit_step, is_scheduled=true, entry_computation_layout={(bf16[8192,1024]{1,0}, bf16[1024,4096]{1,0})->bf16[8192,4096]{1,0}}

%add.clone (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %x, f32[] %y)
}

%wrapped_reduce_scatter (p: f32[1024]) -> f32[128] {
  %p = f32[1024]{0} parameter(0)
  ROOT %rs = f32[128]{0} reduce-scatter(f32[1024]{0} %p), channel_id=3, replica_groups=[1,8]<=[8], dimensions={0}, to_apply=%add.clone
}

ENTRY %main.10 (Arg_0.1: bf16[8192,1024], Arg_1.2: bf16[128,4096], Arg_2.3: f32[1024]) -> bf16[8192,4096] {
  %Arg_0.1 = bf16[8192,1024]{1,0} parameter(0)
  %Arg_1.2 = bf16[128,4096]{1,0} parameter(1)
  %Arg_2.3 = f32[1024]{0} parameter(2)
  %all-gather-start = (bf16[128,4096]{1,0}, bf16[1024,4096]{1,0}) all-gather-start(bf16[128,4096]{1,0} %Arg_1.2), channel_id=1, replica_groups=[1,8]<=[8], dimensions={0}, use_global_device_ids=true, backend_config={"operation_queue_id":"0","collective_backend_config":{"is_sync":false}}
  %all-gather-done = bf16[1024,4096]{1,0} all-gather-done((bf16[128,4096]{1,0}, bf16[1024,4096]{1,0}) %all-gather-start)
  %reduce-scatter-start = ((f32[1024]{0}), f32[128]{0}) async-start(f32[1024]{0} %Arg_2.3), calls=%wrapped_reduce_scatter
  %reduce-scatter-done = f32[128]{0} async-done(((f32[1024]{0}), f32[128]{0}) %reduce-scatter-start)
  %custom-call.1 = (bf16[8192,4096]{1,0}, s8[33554432]{0}) custom-call(bf16[8192,1024]{1,0} %Arg_0.1, bf16[1024,4096]{1,0} %all-gather-done), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"epilogue":"DEFAULT"}}, metadata={op_name="jit(step)/dot_general" source_file="/x/model.py" source_line=42}
  ROOT %get-tuple-element.1 = bf16[8192,4096]{1,0} get-tuple-element((bf16[8192,4096]{1,0}, s8[33554432]{0}) %custom-call.1), index=0
}
"""


def test_gpu_style_module():
    m = parse_hlo_module(GPU_MODULE, "gpu.txt", strict=True)
    gemm = m.instruction("custom-call.1")
    assert gemm.attrs["custom_call_target"] == '"__cublas$gemm"'
    assert [s.dims for s in gemm.operand_shapes] == [(8192, 1024), (1024, 4096)]
    assert (gemm.source_file, gemm.source_line) == ("/x/model.py", 42)
    done = m.instruction("all-gather-done")
    assert done.operand_shapes[0].is_tuple and done.operand_names == ("all-gather-start",)
    rs_start = m.instruction("reduce-scatter-start")
    assert m.fusion_body(rs_start).root.opcode == "reduce-scatter"
    assert m.computation_roles()["wrapped_reduce_scatter"] == "async"
    rs = m.computations["wrapped_reduce_scatter"].root
    assert parse_replica_groups(rs.attrs["replica_groups"]) == [list(range(8))]


def test_bare_names_without_percent():
    text = "HloModule m\n\nENTRY main {\n  p = f32[4]{0} parameter(0)\n  ROOT n = f32[4]{0} negate(p)\n}\n"
    m = parse_hlo_module(text)
    assert m.entry == "main" and m.instruction("n").operand_names == ("p",)


@pytest.mark.skipif(not SAMPLE_DUMPS, reason="no sample_profiles/*/hlo dump committed yet")
@pytest.mark.parametrize("path", SAMPLE_DUMPS, ids=lambda p: p.name)
def test_sample_profile_dumps_parse(path):
    m = parse_hlo_file(path, strict=True)
    assert m.entry and m.computations[m.entry].is_entry
    for comp in m.computations.values():
        for ins in comp.instructions:
            assert len(m.resolve_operand_shapes(ins)) == len(ins.operand_names)


# --- forms current XLA prints -------------------------------------------------------------------

# Shaped after a MaxText DeepSeek-3 TPU module (SparseCore offload) and XLA's own printer tests:
# a header spanning lines, computations on another execution thread, async ops in both the
# generic and the syntax-sugar form, mesh/iota groups, and attribute strings holding braces,
# quotes, commas and a newline.
FORMS_MODULE = r"""HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[8,128]{1,0})->f32[8,128]{1,0}}, frontend_attributes={fingerprint_before_lhs="7f3a"}, origin_recovery_table={
  {"a.1" {0}} : {"b.1" {0}}
}


%add.sc (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %x, f32[] %y)
}, execution_thread="sparsecore"

%sc_gather (p0: f32[1024,128], p1: s32[64]) -> f32[64,128] {
  %p0 = f32[1024,128]{1,0} parameter(0)
  %p1 = s32[64]{0} parameter(1)
  ROOT %gather.1 = f32[64,128]{1,0} gather(f32[1024,128]{1,0} %p0, s32[64]{0} %p1), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,128}
}, execution_thread="sparsecore"

%fused_computation.7 (param_0.1: f32[8,128], param_1.2: f32[8,128]) -> f32[8,128] {
  %param_0.1 = f32[8,128]{1,0} parameter(0)
  %param_1.2 = f32[8,128]{1,0} parameter(1)
  %constant.9 = f32[2,2]{1,0} constant({ { 1, 2 },
{ 3, 4 } })
  %multiply.1 = f32[8,128]{1,0} multiply(f32[8,128]{1,0} %param_0.1, f32[8,128]{1,0} %param_1.2), statistics={visualizing_index=1,stat-1=33,stat-2=44}
  %negate.2 = f32[8,128]{1,0} negate(f32[8,128]{1,0} %multiply.1), origin={{"negate.2" {0}}}
  ROOT %add.3 = f32[8,128]{1,0} add(f32[8,128]{1,0} %negate.2, f32[8,128]{1,0} %param_0.1)
} // fused_computation.7

ENTRY %main.5 (Arg_0.1: f32[8,128], Arg_1.2: f32[1024,128], Arg_2.3: s32[64]) -> f32[8,128] {
  %Arg_0.1 = f32[8,128]{1,0} parameter(0), sharding={replicated}
  %Arg_1.2 = f32[1024,128]{1,0} parameter(1)
  %Arg_2.3 = s32[64]{0} parameter(/*index=2*/2)
  %c = f32[] constant(0)
  %custom-call.9 = (f32[8,128]{1,0}, s8[16]{0}) custom-call(f32[8,128]{1,0} %Arg_0.1), custom_call_target="tpu_custom_call", output_to_operand_aliasing={{0}: (0, {})}, custom_call_schedule=SCHEDULE_LATEST, api_version=API_VERSION_TYPED_FFI, sharding={{maximal device=0}, {replicated}}, domain={kind="sharding", entry={maximal device=0}, exit={replicated}}
  %slice.4 = f32[4,64]{1,0} slice(f32[8,128]{1,0} %Arg_0.1), slice={[0:8:2], [0:128:2]}
  %reduce-window.1 = f32[4,64]{1,0} reduce-window(f32[8,128]{1,0} %Arg_0.1, f32[] %c), window={size=2x2 stride=2x2 pad=0_0x0_0}, to_apply=%add.sc
  %gather-start = ((f32[1024,128]{1,0}, s32[64]{0}), f32[64,128]{1,0}, u32[]{:S(2)}) async-start(f32[1024,128]{1,0} %Arg_1.2, s32[64]{0} %Arg_2.3), async_execution_thread="sparsecore", calls=%sc_gather, frontend_attributes={_xla_stream_annotation="1",_scheduling_group_id="{2},\"x\""}
  %gather-done = f32[64,128]{1,0} async-done(((f32[1024,128]{1,0}, s32[64]{0}), f32[64,128]{1,0}, u32[]{:S(2)}) %gather-start)
  %all-reduce-start = f32[8,128]{1,0} all-reduce-start(f32[8,128]{1,0} %Arg_0.1), channel_id=1, replica_groups=mesh['axis_0'=8,'axis_1'=1] {'axis_0'}, use_global_device_ids=true, to_apply=%add.sc, backend_config="{\"is_sync\":false,\"note\":\"a } and a {\"}"
  %all-reduce-done = f32[8,128]{1,0} all-reduce-done(f32[8,128]{1,0} %all-reduce-start)
  %all-gather = f32[64,128]{1,0} all-gather(f32[8,128]{1,0} %all-reduce-done), channel_id=2, replica_groups=[1,8]<=[8], dimensions={0}, use_global_device_ids=true, control-predecessors={%gather-done}
  %custom-call-start = ((f32[8,128]{1,0}), f32[8,128]{1,0}, s32[]) custom-call-start(f32[8,128]{1,0} %Arg_0.1), async_execution_thread="parallel_thread", custom_call_target="foo"
  %custom-call-done = f32[8,128]{1,0} custom-call-done(((f32[8,128]{1,0}), f32[8,128]{1,0}, s32[]) %custom-call-start)
  ROOT %fusion.7 = f32[8,128]{1,0} fusion(f32[8,128]{1,0} %all-reduce-done, f32[8,128]{1,0} %custom-call-done), kind=kLoop, calls=%fused_computation.7, metadata={op_name="jit(step)/add" source_file="/x/a \"b\".py" source_line=7}
}

"""


def test_forms_current_xla_prints():
    m = parse_hlo_module(FORMS_MODULE, "forms.txt", strict=True)
    assert (m.name, m.entry, m.is_scheduled, m.truncated) == ("jit_step", "main.5", True, False)
    threads = {c.name: c.execution_thread for c in m.computations.values()}
    assert threads == {"add.sc": "sparsecore", "sc_gather": "sparsecore",
                       "fused_computation.7": "main", "main.5": "main"}
    df = m.instructions().set_index("name")
    assert df.loc["gather.1", "execution_thread"] == "sparsecore"
    start = m.instruction("gather-start")
    assert start.attrs["async_execution_thread"] == '"sparsecore"'
    assert start.called_computations() == ("sc_gather",)
    assert m.fusion_body(start).root.opcode == "gather"
    assert '\\"x\\"' in start.attrs["frontend_attributes"]
    assert m.computation_roles()["sc_gather"] == "async"
    ar = m.instruction("all-reduce-start")
    assert ar.attrs["backend_config"].startswith('"{') and "a } and a {" in ar.attrs["backend_config"]
    assert ar.attrs["replica_groups"] == "mesh['axis_0'=8,'axis_1'=1] {'axis_0'}"
    assert parse_replica_groups(ar.attrs["replica_groups"]) == [list(range(8))]
    assert m.instruction("all-gather").attrs["control-predecessors"] == "{%gather-done}"
    assert m.instruction("custom-call-start").attrs["custom_call_target"] == '"foo"'
    assert m.instruction("Arg_2.3").attrs["parameter_number"] == "2"
    assert m.instruction("constant.9").attrs["literal"].startswith("{ { 1, 2 },\n{ 3, 4 }")
    assert m.instruction("multiply.1").attrs["statistics"].startswith("{visualizing_index=1")
    assert m.instruction("negate.2").attrs["origin"] == '{{"negate.2" {0}}}'
    cc = m.instruction("custom-call.9")
    assert cc.attrs["output_to_operand_aliasing"] == "{{0}: (0, {})}"
    assert cc.attrs["domain"].endswith("exit={replicated}}") and cc.attrs["api_version"] == "API_VERSION_TYPED_FFI"
    assert m.instruction("slice.4").attrs["slice"] == "{[0:8:2], [0:128:2]}"
    rw = m.instruction("reduce-window.1")
    assert rw.attrs["window"] == "{size=2x2 stride=2x2 pad=0_0x0_0}" and rw.called_computations() == ("add.sc",)
    root = m.computations["main.5"].root
    assert root.name == "fusion.7" and (root.source_file, root.source_line) == ('/x/a "b".py', 7)


def test_hostile_values_become_one_line_errors_or_are_dropped():
    bad_param = CPU_MODULE.replace("parameter(0), sharding", "parameter(/*x*/), sharding")
    with pytest.raises(HloParseError, match=rf"^p\.txt:{_line_of(CPU_MODULE, '  %param.10')}: %param.10: parameter number"):
        parse_hlo_module(bad_param, "p.txt")
    # A source line beyond int32 is no line number: kept as unknown, the instruction stays.
    huge = GPU_MODULE.replace("source_line=42", "source_line=12345678901234567890")
    assert parse_hlo_module(huge, "h.txt").instruction("custom-call.1").source_line is None
    digits = GPU_MODULE.replace("source_line=42", "source_line=1" + "0" * 5000)
    assert parse_hlo_module(digits, "d.txt").instruction("custom-call.1").source_line is None
    deep = CPU_MODULE.replace("%dot = f32[16,32]{1,0} dot(", "%dot = " + "(" * 1000 + "f32[]" + ")" * 1000 + " dot(")
    with pytest.raises(HloParseError, match=r"^t\.txt:\d+: %dot: tuple shape nested"):
        parse_hlo_module(deep, "t.txt")
    second = CPU_MODULE + "HloModule again\n"
    with pytest.raises(HloParseError, match="a second HloModule header"):
        parse_hlo_module(second, "s.txt")


def test_long_strings_cost_memory_linear_in_their_length():
    # A 10 MB quoted string used to take ~1.8 GB in the tokenizer regex (~180x its length).
    size = 10_000_000
    text = GPU_MODULE.replace('op_name="jit(step)/dot_general"', 'op_name="' + "x" * size + '"')
    escapes = GPU_MODULE.replace('custom_call_target="__cublas$gemm"', 'custom_call_target="' + '\\"' * (size // 2) + '"')
    for hostile in (text, escapes):
        tracemalloc.start()
        try:
            m = parse_hlo_module(hostile, "long.txt", strict=True)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert m.instruction("custom-call.1").opcode == "custom-call"
        assert peak < 12 * len(hostile)  # a few copies of the line, never per-character state


# --- errors and dump discovery ----------------------------------------------------------------

def _line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def test_parse_errors_name_file_and_line():
    garbage = CPU_MODULE.replace("  %dot = f32[16,32]{1,0} dot(", "  %dot = f32[16,32]{1,0} (")
    dot_line = _line_of(CPU_MODULE, "  %dot = ")
    with pytest.raises(HloParseError, match=rf"^bad\.txt:{dot_line}: %dot: no opcode"):
        parse_hlo_module(garbage, "bad.txt")
    stray = "HloModule m\n  %x = f32[] constant(1)\n"
    with pytest.raises(HloParseError, match=r"^s\.txt:2: expected a computation header"):
        parse_hlo_module(stray, "s.txt")
    undefined = CPU_MODULE.replace("all-reduce(%dot)", "all-reduce(%dott)")
    ar_line = _line_of(CPU_MODULE, "  ROOT %all-reduce.1")
    with pytest.raises(HloParseError, match=rf"^u\.txt:{ar_line}: %all-reduce.1 uses undefined"):
        parse_hlo_module(undefined, "u.txt")
    with pytest.raises(HloParseError, match="no computation"):
        parse_hlo_module("HloModule empty\n", "e.txt")
    # A damaged line in the middle is an error even where the rest would parse.
    unbalanced = CPU_MODULE.replace("dimensions={0}, use_global", "dimensions={0, use_global")
    with pytest.raises(HloParseError, match=rf"^x\.txt:{_line_of(CPU_MODULE, '  %all_gather.17 = ')}:"):
        parse_hlo_module(unbalanced, "x.txt")


@pytest.mark.parametrize("cut_before, kept, why", [
    ("{2,3},{4,5}", ["param.10"], "last line is cut"),  # inside the brackets of a line
    ("dimensions={0}", ["param.10"], "last line is cut"),  # after an attribute's comma
    (", replica_groups={{0,1}", ["param.10"], "last line is cut"),  # balanced but no newline
    ("  %dot = ", ["param.10", "all_gather.17"], "ends inside computation"),  # at a line boundary
    ("ENTRY %main", [], "no ENTRY computation"),  # XLA prints ENTRY last: cut before it
])
def test_truncated_dumps_keep_what_parsed(cut_before, kept, why):
    text = CPU_MODULE[: CPU_MODULE.index(cut_before)]
    with pytest.warns(UserWarning, match=rf"^cut\.txt:\d+: .*{why}"):
        m = parse_hlo_module(text, "cut.txt")
    assert m.truncated
    entry = m.computations.get("main.0_spmd")
    assert [i.name for i in entry.instructions] == kept if entry else kept == []
    assert "region_3.0" in m.computations and m.computations["region_3.0"].root.name == "add.4"
    with pytest.raises(HloParseError, match=rf"^cut\.txt:\d+: .*{why}"):
        parse_hlo_module(text, "cut.txt", strict=True)


def test_text_without_final_newline_is_whole():
    m = parse_hlo_module(CPU_MODULE.rstrip("\n"), "n.txt", strict=True)
    assert m.entry == "main.0_spmd" and not m.truncated


def test_binary_file_is_one_line_error(tmp_path):
    path = tmp_path / "m.after_optimizations.txt"
    path.write_bytes(CPU_MODULE.encode().replace(b"%dot = ", b"%d\xffot = "))
    with pytest.raises(HloParseError, match=rf"m\.after_optimizations\.txt:{_line_of(CPU_MODULE, '  %dot = ')}: not UTF-8"):
        parse_hlo_file(path)


def test_find_hlo_dumps(tmp_path):
    sub = tmp_path / "run1"
    sub.mkdir()
    keep = [tmp_path / "module_0001.jit_f.cpu_after_optimizations.txt",
            sub / "module_0002.jit_g.sm_9.0_gpu_after_optimizations.txt"]
    skip = [tmp_path / "module_0001.jit_f.cpu_after_optimizations-buffer-assignment.txt",
            tmp_path / "module_0001.jit_f.cpu_after_optimizations-memory-usage-report.txt",
            tmp_path / "module_0001.jit_f.before_optimizations.txt"]
    for p in keep + skip:
        p.write_text("")
    assert find_hlo_dumps(tmp_path) == sorted(keep)


def test_an_operand_may_name_one_tuple_element():
    """Newer XLA prints a get-tuple-element as ``%producer#k`` (JAX 0.11 GPU dumps, e.g. the bundled H100 pair)."""
    text = """HloModule m, is_scheduled=true

%fused (p0: f32[4,8]) -> (f32[4,8], bf16[2]) {
  %p0 = f32[4,8]{1,0} parameter(0)
  %c = bf16[2]{0} constant({1, 2})
  ROOT %t = (f32[4,8]{1,0}, bf16[2]{0}) tuple(%p0, %c)
}

ENTRY %main (a: f32[4,8]) -> bf16[2] {
  %a = f32[4,8]{1,0} parameter(0)
  %two = (f32[4,8]{1,0}, bf16[2]{0}) fusion(%a), kind=kLoop, calls=%fused
  %first = f32[4,8]{1,0} negate(%two#0)
  ROOT %second = bf16[2]{0} copy(%two#1)
}
"""
    m = parse_hlo_module(text)
    first, second = m.instruction("first"), m.instruction("second")
    assert first.operand_names == ("two",) and first.operand_elements == (0,)
    assert m.resolve_operand_shapes(first)[0].dims == (4, 8)
    assert m.resolve_operand_shapes(second)[0].dtype == "bf16"
    assert m.instruction("two").operand_elements == ()  # a plain operand reads the whole result


def test_jax_gpu_dump_with_tuple_element_operands_parses():
    dump = REPO / "sample_profiles" / "gpu_h100_attention_pair" / "before" / "hlo"
    (path,) = dump.glob("*after_optimizations.txt")
    m = parse_hlo_module(path.read_text(), str(path))
    assert m.entry and not m.truncated
    users = [i for c in m.computations.values() for i in c.instructions if i.operand_elements]
    assert users, "the recording holds %x#k operands"
    for ins in users:
        assert len(m.resolve_operand_shapes(ins)) == len(ins.operand_names)
