"""HLO text parser: the real v6e module, a CPU-style and a GPU-style module, shapes, errors."""

import re
import time
import warnings
from pathlib import Path

import pytest

from xladiag.parsers.hlo_text import (
    HloParseError, find_hlo_dumps, parse_hlo_file, parse_hlo_module, parse_mesh_axes,
    parse_replica_groups, parse_shape, parse_source_target_pairs,
)

V6E = Path(__file__).resolve().parent.parent / "sample_profiles" / "hlo_maxtext_llama3_8b_v6e4" / "maxtext_llama3_8b_v6e4.after_optimizations.txt"
REPO = Path(__file__).resolve().parents[1]
SAMPLE_DUMPS = [p for d in sorted(REPO.glob("sample_profiles/*/hlo")) for p in find_hlo_dumps(d)]


@pytest.fixture(scope="module")
def v6e():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_hlo_file(V6E)


# --- shapes -----------------------------------------------------------------------------------

def test_padded_bytes_tpu_tiles():
    # 3x100 bf16 pads to one 8x128 tile: 1024 elements x 2 bytes.
    s = parse_shape("bf16[3,100]{1,0:T(8,128)(2,1)}")
    assert (s.logical_bytes, s.padded_bytes) == (600, 2048)
    assert s.tiles == ((8, 128), (2, 1)) and s.layout == (1, 0)
    # The (2,1) packing re-tiles the 128 tile, it must not double a rank-1 buffer.
    assert parse_shape("bf16[4096]{0:T(1024)(128)(2,1)}").padded_bytes == 8192
    assert parse_shape("bf16[100]{0:T(1024)(128)(2,1)}").padded_bytes == 2048
    # Layout order matters: {0,1} makes dim 0 minor, so [4096,4] is stored as 4 rows of 4096.
    assert parse_shape("f32[4096,4]{0,1:T(4,128)}").padded_bytes == 4096 * 4 * 4
    assert parse_shape("f32[4,4096]{1,0:T(8,128)}").padded_bytes == 8 * 4096 * 4
    assert parse_shape("f32[5,3]{0,1:T(8,128)}").padded_bytes == 8 * 128 * 4
    # Scalars: a T(128) scalar occupies a 128-element tile; SMEM S(2) has no tiles.
    scalar = parse_shape("f32[]{:T(128)}")
    assert scalar.dims == () and scalar.padded_bytes == 512
    smem = parse_shape("s32[]{:T(128)S(2)}")
    assert smem.memory_space == 2 and smem.padded_bytes == 512
    assert parse_shape("u32[]{:S(2)}").padded_bytes == 4


def test_shape_kinds():
    t = parse_shape("(f32[8]{0}, s32[]{:S(2)}, /*index=2*/bf16[2,3])")
    assert t.is_tuple and len(t.elements) == 3
    assert t.padded_bytes == 32 + 4 + 12 and t.num_elements == 8 + 1 + 6
    nested = parse_shape("((s8[64]{0}), s8[16]{0:S(1)}, s32[]{:S(2)})")
    assert nested.elements[0].is_tuple and nested.elements[1].memory_space == 1
    dyn = parse_shape("f32[<=8,4]{1,0}")
    assert dyn.dims == (8, 4) and dyn.dynamic_dims == (True, False)
    assert parse_shape("s4[1024]{0}").logical_bytes == 512
    assert parse_shape("s4[1024]").element_bytes == 0.5
    assert parse_shape("f8e4m3fn[16,16]").logical_bytes == 256
    assert parse_shape("pred[10]").element_bytes == 1
    assert parse_shape("c64[2]").logical_bytes == 16
    assert parse_shape("token[]").padded_bytes == 0
    assert parse_shape("f32[2,3]").layout is None
    host = parse_shape("f32[1024]{0:T(1024)S(5)}")
    assert host.memory_space == 5 and host.layout_str == "{0:T(1024)S(5)}"
    assert parse_shape("bf16[3,100]{1,0:T(8,128)(2,1)S(1)}").layout_str == "{1,0:T(8,128)(2,1)S(1)}"
    with pytest.raises(ValueError):
        parse_shape("q7[3]")


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


# --- replica groups ---------------------------------------------------------------------------

def test_replica_groups_forms():
    assert parse_replica_groups("{{0,1,2,3},{4,5,6,7}}") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # iota(8) as [2,4] = [[0,1,2,3],[4,5,6,7]], transposed -> [[0,4],[1,5],[2,6],[3,7]].
    assert parse_replica_groups("[4,2]<=[2,4]T(1,0)") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_replica_groups("[2,4]<=[8]") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_replica_groups("[1,8]<=[8]") == [list(range(8))]
    assert parse_replica_groups("{}") == []
    assert parse_replica_groups("{}", num_devices=4) == [[0, 1, 2, 3]]
    # Mesh [a=2, b=4] over devices 0..7 row-major: b varies fastest.
    assert parse_replica_groups("mesh['a'=2,'b'=4] {'b'}") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_replica_groups("mesh['a'=2,'b'=4] {'a'}") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_replica_groups("mesh['a'=2,'b'=4] {'a','b'}") == [list(range(8))]
    # Sub-axis a:(1)2 is the major half of a=8: devices 4 apart.
    assert parse_replica_groups("mesh['a'=8] {'a':(1)2}") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_replica_groups("mesh['a'=8] {'a':(4)2}") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert parse_source_target_pairs("{{0,1},{1,2},{2,0}}") == [(0, 1), (1, 2), (2, 0)]


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


# --- errors and dump discovery ----------------------------------------------------------------

def _line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def test_parse_errors_name_file_and_line():
    ag_line = _line_of(CPU_MODULE, "  %all_gather.17 = ")
    cut_in_brackets = CPU_MODULE[: CPU_MODULE.index("{2,3},{4,5}")]
    with pytest.raises(HloParseError, match=rf"^cut\.txt:{ag_line}: unbalanced brackets"):
        parse_hlo_module(cut_in_brackets, "cut.txt")
    cut_after_comma = CPU_MODULE[: CPU_MODULE.index("dimensions={0}")]
    with pytest.raises(HloParseError, match=rf"^cut\.txt:{ag_line}: %all_gather.17: unbalanced"):
        parse_hlo_module(cut_after_comma, "cut.txt")
    # Balanced but without its newline: the last line cannot be trusted.
    cut_mid_line = CPU_MODULE[: CPU_MODULE.index(", replica_groups={{0,1}")]
    with pytest.raises(HloParseError, match=rf"^cut\.txt:{ag_line}: the last line is cut"):
        parse_hlo_module(cut_mid_line, "cut.txt")
    cut_at_line = CPU_MODULE[: CPU_MODULE.index("  %dot = ")]
    with pytest.raises(HloParseError, match=rf"^cut\.txt:{ag_line}: text ends inside computation"):
        parse_hlo_module(cut_at_line, "cut.txt", strict=True)
    with pytest.warns(UserWarning):
        assert parse_hlo_module(cut_at_line, "cut.txt").truncated
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
