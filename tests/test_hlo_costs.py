"""FLOPs and bytes per HLO instruction, checked against hand arithmetic and XLA's own numbers."""

import json
import math
import re
import warnings
from pathlib import Path

import pytest

from xladiag.analyzer.hlo.costs import (
    convolution_flops,
    dot_flops,
    instruction_costs,
    instruction_flops,
    top_level_computations,
)
from xladiag.analyzer.hlo.op_bytes import instruction_bytes
from xladiag.parsers.hlo_text import parse_hlo_file, parse_hlo_module

V6E = Path(__file__).resolve().parent.parent / "sample_profiles" / "hlo_maxtext_llama3_8b_v6e4" / "maxtext_llama3_8b_v6e4.after_optimizations.txt"
CPU_SAMPLE = Path(__file__).resolve().parents[1] / "sample_profiles" / "cpu_jax_train_step"

# Llama-3 8B dimensions; the v6e module runs 128 tokens per device per matmul.
HIDDEN, MLP, VOCAB, KV, TOKENS = 4096, 14336, 128256, 8 * 128, 128


@pytest.fixture(scope="module")
def v6e():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_hlo_file(V6E)


@pytest.fixture(scope="module")
def v6e_costs(v6e):
    return instruction_costs(v6e).set_index("name")


def _all(module, opcode):
    return [i for c in module.computations.values() for i in c.instructions if i.opcode == opcode]


# --- the real v6e module ----------------------------------------------------------------------

def _matmul_flops_by_regex(text: str) -> float:
    """Independent count: every TPU matmul here is a convolution without batch dims, so for
    lhs [M,K], rhs [K,N] -> out [M,N] (in any dim order) K = sqrt(lhs * rhs / out) and the
    FLOPs are 2 * out * K. Only names and dims are read, no dim_labels nor windows."""
    dims = {m.group(1): math.prod(int(d) for d in m.group(2).split(",") if d)
            for m in re.finditer(r"^\s+(?:ROOT )?%(\S+) = [a-z0-9]+\[([\d,]*)\]", text, re.M)}
    total = 0.0
    for m in re.finditer(r"^\s+(?:ROOT )?%(\S+) = \S+ convolution\(%(\S+), %(\S+)\)", text, re.M):
        out, lhs, rhs = (dims[n] for n in m.groups())
        total += 2 * out * math.isqrt(lhs * rhs // out)
    return total


def test_v6e_every_convolution_has_flops(v6e):
    convs = _all(v6e, "convolution")
    assert len(convs) == 23 and not _all(v6e, "dot")  # TPU lowers every matmul to convolution
    flops = [convolution_flops(c, v6e) for c in convs]
    assert all(math.isfinite(f) and f > 0 for f in flops)
    # Hand count of the 23 matmuls (forward layer, remat'd layer, backward, logits):
    # 6 of hidden x hidden (q, o), 6 of hidden x kv (k, v), 9 of hidden x mlp, 2 of hidden x vocab.
    by_hand = 2 * TOKENS * (6 * HIDDEN * HIDDEN + 6 * HIDDEN * KV + 9 * HIDDEN * MLP
                            + 2 * HIDDEN * VOCAB)
    assert sum(flops) == by_hand == _matmul_flops_by_regex(V6E.read_text())


def test_v6e_padded_window_conv_counts_only_real_taps(v6e):
    # q projection written as a conv over a size-1 dim padded 31_31 with a 32-wide window:
    # each output meets one real input, so 2 * 128 * 32 heads * 128 * 4096, not 32x that.
    conv = v6e.instruction("convolution.160")
    assert conv.attrs["window"] == "{size=32 pad=31_31 rhs_reversal=1}"
    assert convolution_flops(conv, v6e) == 2 * TOKENS * 32 * 128 * HIDDEN


def test_v6e_top_level_rows(v6e, v6e_costs):
    # No ENTRY in the truncated file: the while body and condition are the top level.
    assert set(v6e_costs["computation"]) == set(top_level_computations(v6e))
    assert len(top_level_computations(v6e)) == 2
    assert (v6e_costs["flops_source"] == "hlo").all()
    mm = v6e_costs[v6e_costs["is_matmul"]]
    # Forward layer: q, o (hidden^2), k, v (hidden x kv), gate, up, down (hidden x mlp);
    # the fusions add their elementwise epilogues (< 0.1 %).
    layer = 2 * TOKENS * (2 * HIDDEN * HIDDEN + 2 * HIDDEN * KV + 3 * HIDDEN * MLP)
    assert len(mm) == 6
    assert layer <= mm["flops"].sum() < layer * 1.001
    assert (mm["dtype"] == "bf16").all()
    splash = v6e_costs.loc["splash_mha_fwd_segmented_residuals.3"]
    assert math.isnan(splash["flops"]) and "attention" in splash["flops_note"]
    assert not splash["is_matmul"]


def test_v6e_bytes_by_memory_space(v6e_costs):
    row = v6e_costs.loc
    mib = 1 << 20
    # all-gather of a bf16[1,14336,4096] weight over 4 devices: reads its quarter from VMEM,
    # writes the whole gathered weight to HBM.
    assert row["all-gather.101", "hbm_bytes"] == 14336 * 4096 * 2
    assert row["all-gather.101", "vmem_bytes"] == 14336 * 4096 * 2 / 4
    # Fusion slicing layer i out of a [4,32,128,1024] stack: reads one layer, not four.
    assert row["dynamic-slice_convert_fusion.35", "hbm_bytes"] == 32 * 128 * 1024 * 2
    assert row["dynamic-slice_convert_fusion.35", "vmem_bytes"] == 32 * 128 * 1024 * 2
    # In-place dynamic-update-slice fusion: the bf16[1,128,4096] update is read from VMEM
    # and written into the HBM stack; the s32 index sits in S(6) ("other"), one 128-tile.
    assert row["bitcast_dynamic-update-slice_fusion.5", "hbm_bytes"] == 1 * mib
    assert row["bitcast_dynamic-update-slice_fusion.5", "vmem_bytes"] == 1 * mib
    assert row["bitcast_dynamic-update-slice_fusion.5", "other_bytes"] == 512
    # Async slice of 4 MiB out of a 32 MiB s8 buffer into VMEM; the done moves nothing.
    assert (row["slice-start.24", "hbm_bytes"], row["slice-start.24", "vmem_bytes"]) == (4 * mib, 4 * mib)
    assert row["slice-done.24", "bytes_accessed"] == 0
    # copy-start HBM -> VMEM of bf16[1,128,4096]; the u32 context is not data.
    assert (row["copy-start.3", "hbm_bytes"], row["copy-start.3", "vmem_bytes"]) == (mib, mib)
    assert row["copy-done.3", "bytes_accessed"] == 0
    for free in ("wide.param.1", "get-tuple-element.1430", "bitcast.911", "tuple.241"):
        assert row[free, "bytes_accessed"] == 0
    total = v6e_costs[["hbm_bytes", "vmem_bytes", "host_bytes", "other_bytes"]].sum(axis=1)
    assert (total == v6e_costs["bytes_accessed"]).all()


# --- the recorded CPU sample against XLA's cost analysis --------------------------------------

@pytest.mark.skipif(not (CPU_SAMPLE / "cost_analysis.json").exists(), reason="no CPU sample")
def test_cpu_sample_matches_xla_cost_analysis():
    record = json.loads((CPU_SAMPLE / "cost_analysis.json").read_text())
    m = parse_hlo_file(CPU_SAMPLE / record["hlo_file"], strict=True)
    dots = sum(dot_flops(i, m) for i in _all(m, "dot"))
    assert dots == record["dot_flops_per_device_total"]
    df = instruction_costs(m)
    assert df["flops"].sum() == pytest.approx(record["flops_per_device"], rel=0.01)
    assert df["bytes_accessed"].sum() == pytest.approx(record["bytes_accessed_per_device"], rel=0.1)
    assert df.loc[df["is_matmul"], "flops"].sum() == dots


# --- inline modules ---------------------------------------------------------------------------

def _module(body: str, extra: str = "") -> object:
    return parse_hlo_module(f"HloModule t\n\n{extra}\nENTRY %main {{\n{body}\n}}\n", strict=True)


def test_dot_with_batch_dims():
    m = _module("""  %a = f32[4,16,32]{2,1,0} parameter(0)
  %b = f32[4,32,8]{2,1,0} parameter(1)
  ROOT %d = f32[4,16,8]{2,1,0} dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}""")
    # 4 batches of a 16x32 @ 32x8 matmul: 4 * 16 * 8 outputs, 32 multiply-adds each.
    assert dot_flops(m.instruction("d"), m) == 2 * 4 * 16 * 8 * 32
    row = instruction_costs(m).set_index("name").loc["d"]
    assert row["is_matmul"] and row["dtype"] == "f32"
    assert row["bytes_accessed"] == (4 * 16 * 32 + 4 * 32 * 8 + 4 * 16 * 8) * 4


def test_convolutions():
    m = _module("""  %x = f32[2,8,8,3]{3,2,1,0} parameter(0)
  %k = f32[3,3,3,16]{3,2,1,0} parameter(1)
  %valid = f32[2,6,6,16]{3,2,1,0} convolution(%x, %k), window={size=3x3}, dim_labels=b01f_01io->b01f
  %img = f32[1,10,10,8]{3,2,1,0} parameter(2)
  %dw = f32[3,3,1,8]{3,2,1,0} parameter(3)
  %depthwise = f32[1,10,10,8]{3,2,1,0} convolution(%img, %dw), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=8
  ROOT %t = (f32[2,6,6,16]{3,2,1,0}, f32[1,10,10,8]{3,2,1,0}) tuple(%valid, %depthwise)""")
    # VALID 3x3: every one of the 2*6*6*16 outputs takes 3*3*3 multiply-adds.
    assert convolution_flops(m.instruction("valid"), m) == 2 * (2 * 6 * 6 * 16) * 27
    # Depthwise SAME 3x3 on 10x10: one input channel per output channel, and per spatial dim
    # the 10 outputs x 3 taps lose the 2 taps that fall on padding: (30 - 2)^2 real taps.
    assert convolution_flops(m.instruction("depthwise"), m) == 2 * 8 * (30 - 2) ** 2
    costs = instruction_costs(m).set_index("name")
    assert costs.loc["depthwise", "is_matmul"] and costs.loc["t", "bytes_accessed"] == 0


def test_a_window_size_beyond_int64_leaves_the_op_without_flops(tmp_path):
    """A fuzzer's 23-digit reduce-window size gave 2.5e30 FLOPs; now the op's FLOPs are unknown, with a note."""
    body = """  %x = f32[1,1,18,32]{3,2,1,0} parameter(0)
  %c = f32[] constant(0)
  ROOT %rw = f32[1,1,1,1]{3,2,1,0} reduce-window(%x, %c), window={size=1x1xSIZEx32}, to_apply=%add"""
    add = "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n" \
          "  ROOT %s = f32[] add(%a, %b)\n}\n"
    fine = instruction_costs(_module(body.replace("SIZE", "18"), add)).set_index("name").loc["rw"]
    assert fine["flops"] == 18 * 32 and not fine["flops_note"]
    row = instruction_costs(_module(body.replace("SIZE", "18446744073709551616999"), add)).set_index("name").loc["rw"]
    assert math.isnan(row["flops"]) and "window size has 23 digits" in row["flops_note"]


def test_convolution_needs_dim_labels():
    m = _module("""  %x = f32[1,8,4]{2,1,0} parameter(0)
  %k = f32[3,4,4]{2,1,0} parameter(1)
  ROOT %c = f32[1,6,4]{2,1,0} convolution(%x, %k), window={size=3}, dim_labels=b0f""")
    with pytest.raises(ValueError, match="dim_labels"):
        convolution_flops(m.instruction("c"), m)


def test_fusion_flops_and_bytes():
    fused = """%fused_dot (p0: bf16[64,128], p1: bf16[128,256]) -> f32[64,256] {
  %p0 = bf16[64,128]{1,0} parameter(0)
  %p1 = bf16[128,256]{1,0} parameter(1)
  %d = f32[64,256]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %c = f32[] constant(0)
  %b = f32[64,256]{1,0} broadcast(%c), dimensions={}
  ROOT %r = f32[64,256]{1,0} maximum(%d, %b)
}

%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(%x, %y)
}
"""
    m = _module("""  %a = bf16[64,128]{1,0} parameter(0)
  %w = bf16[128,256]{1,0} parameter(1)
  %f = f32[64,256]{1,0} fusion(%a, %w), kind=kOutput, calls=%fused_dot
  %z = f32[] constant(0)
  %red = f32[64]{0} reduce(%f, %z), dimensions={1}, to_apply=%sum
  %e = f32[64,256]{1,0} exponential(%f)
  ROOT %cp = f32[64,256]{0,1} copy(%e)""", fused)
    costs = instruction_costs(m).set_index("name")
    # dot 2*64*256*128 plus one max per output element; broadcast and constant are free.
    assert costs.loc["f", "flops"] == 2 * 64 * 256 * 128 + 64 * 256
    assert costs.loc["f", "is_matmul"] and costs.loc["f", "dtype"] == "bf16"
    # A fusion moves only its operands and result, not its internals.
    assert costs.loc["f", "bytes_accessed"] == 64 * 128 * 2 + 128 * 256 * 2 + 64 * 256 * 4
    assert costs.loc["red", "flops"] == 64 * 256  # one add per input element
    assert costs.loc["e", "flops"] == 64 * 256
    assert costs.loc["cp", "flops"] == 0 and costs.loc["cp", "bytes_accessed"] == 2 * 64 * 256 * 4
    assert set(costs.index) == {"a", "w", "f", "z", "red", "e", "cp"}  # no fused/reducer rows
    assert instruction_flops(m.instruction("f"), m) == costs.loc["f", "flops"]


def test_tpu_padded_and_host_bytes():
    m = _module("""  %p = bf16[3,100]{1,0:T(8,128)(2,1)} parameter(0)
  %n = bf16[3,100]{1,0:T(8,128)(2,1)S(1)} negate(%p)
  %h = f32[1024]{0:T(1024)} parameter(1)
  %cs = (f32[1024]{0:T(1024)S(5)}, f32[1024]{0:T(1024)}, u32[]{:S(2)}) copy-start(%h)
  %cd = f32[1024]{0:T(1024)S(5)} copy-done(%cs)
  ROOT %t = (bf16[3,100]{1,0:T(8,128)(2,1)S(1)}, f32[1024]{0:T(1024)S(5)}) tuple(%n, %cd)""")
    b = instruction_bytes(m.instruction("n"), m)
    # Each bf16[3,100] buffer fills one 8x128 tile: 2048 bytes, read in HBM, written in VMEM.
    assert b == {"hbm_bytes": 2048.0, "vmem_bytes": 2048.0, "host_bytes": 0.0, "other_bytes": 0.0}
    offload = instruction_bytes(m.instruction("cs"), m)
    assert (offload["hbm_bytes"], offload["host_bytes"]) == (4096.0, 4096.0)
    assert sum(instruction_bytes(m.instruction("cd"), m).values()) == 0


def test_in_place_dynamic_update_slice():
    m = _module("""  %buf = f32[16,1024]{1,0} parameter(0)
  %upd = f32[1,1024]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %dus = f32[16,1024]{1,0} dynamic-update-slice(%buf, %upd, %i, %z)""")
    # Reads the 4 KiB update and two s32 indices, writes 4 KiB into the buffer: not 2 x 64 KiB.
    assert sum(instruction_bytes(m.instruction("dus"), m).values()) == 4096 + 4 + 4 + 4096


GPU = """%add.clone (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %x, f32[] %y)
}
"""


def test_gpu_custom_calls_and_async_collectives():
    m = _module("""  %a = bf16[8192,1024]{1,0} parameter(0)
  %w = bf16[128,4096]{1,0} parameter(1)
  %ags = (bf16[128,4096]{1,0}, bf16[1024,4096]{1,0}) all-gather-start(bf16[128,4096]{1,0} %w), channel_id=1, replica_groups=[1,8]<=[8], dimensions={0}
  %agd = bf16[1024,4096]{1,0} all-gather-done((bf16[128,4096]{1,0}, bf16[1024,4096]{1,0}) %ags)
  %gemm = (bf16[8192,4096]{1,0}, s8[33554432]{0}) custom-call(bf16[8192,1024]{1,0} %a, bf16[1024,4096]{1,0} %agd), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  %x = f32[8,32,32,16]{3,2,1,0} parameter(2)
  %k = f32[3,3,16,64]{3,2,1,0} parameter(3)
  %conv = (f32[8,32,32,64]{3,2,1,0}, u8[0]{0}) custom-call(%x, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convForward"
  %dy = f32[8,32,32,64]{3,2,1,0} parameter(4)
  %dk = (f32[3,3,16,64]{3,2,1,0}, u8[0]{0}) custom-call(%x, %dy), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convBackwardFilter"
  %dx = (f32[8,32,32,16]{3,2,1,0}, u8[0]{0}) custom-call(%dy, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convBackwardInput"
  %q = bf16[4,128,8,64]{3,2,1,0} parameter(5)
  %fmha = (bf16[4,128,8,64]{3,2,1,0}, u8[0]{0}) custom-call(%q, %q, %q), custom_call_target="__cudnn$fmhaSoftmax"
  %p = f32[1024]{0} parameter(6)
  %ars = f32[1024]{0} all-reduce-start(f32[1024]{0} %p), replica_groups={}, to_apply=%add.clone
  ROOT %ard = f32[1024]{0} all-reduce-done(f32[1024]{0} %ars)""", GPU)
    costs = instruction_costs(m).set_index("name")
    assert costs.loc["gemm", "flops"] == 2 * 8192 * 4096 * 1024
    assert costs.loc["gemm", "is_matmul"] and costs.loc["gemm", "dtype"] == "bf16"
    # The workspace s8[33554432] is scratch, not traffic.
    assert costs.loc["gemm", "bytes_accessed"] == (8192 * 1024 + 1024 * 4096 + 8192 * 4096) * 2
    # 3x3 SAME conv on 32x32: per spatial dim 32 outputs x 3 taps minus the 2 on padding.
    same_taps = (32 * 3 - 2) ** 2
    fwd = 2 * 8 * 16 * 64 * same_taps
    assert costs.loc["conv", "flops"] == fwd
    assert costs.loc["dk", "flops"] == fwd and costs.loc["dx", "flops"] == fwd
    # Fused attention without a config: Q, K as [B=4, S=128, H=8, D=64]; QK^T and PV: 4·B·H·Sq·Skv·D.
    assert costs.loc["fmha", "flops"] == 4 * 4 * 8 * 128 * 128 * 64
    assert "[B, S, H, D]" in costs.loc["fmha", "flops_note"]
    # The gather's data movement sits on the start: operand read + gathered output written.
    assert costs.loc["ags", "bytes_accessed"] == (128 + 1024) * 4096 * 2
    assert costs.loc["agd", "bytes_accessed"] == 0 and costs.loc["ard", "bytes_accessed"] == 0
    assert costs.loc["ars", "bytes_accessed"] == 2 * 1024 * 4
    assert costs.loc["ars", "flops"] == 0


def test_fft_flops_follow_the_5_n_log2_n_count_and_are_never_zero():
    """FFT ops had 0 FLOPs (an FFT program read compute 0 %, MFU n/a): 5 N log2 N per complex transform,
    2.5 N log2 N per real one, times the batch (the dump of the bundled H100 recording prints them so)."""
    from xladiag.analyzer.hlo.costs import fft_flops

    text = """HloModule m, is_scheduled=true

ENTRY %main (x: f32[8,1024], c: c64[4,256]) -> f32[8,1024] {
  %x = f32[8,1024]{1,0} parameter(0)
  %c = c64[4,256]{1,0} parameter(1)
  %r = c64[8,513]{1,0} fft(%x), fft_type=RFFT, fft_length={1024}
  %f = c64[4,256]{1,0} fft(%c), fft_type=FFT, fft_length={256}
  ROOT %i = f32[8,1024]{1,0} fft(%r), fft_type=IRFFT, fft_length={1024}
}
"""
    m = parse_hlo_module(text)
    assert fft_flops(m.instruction("r"), m) == pytest.approx(2.5 * 1024 * 10 * 8)
    assert fft_flops(m.instruction("i"), m) == pytest.approx(2.5 * 1024 * 10 * 8)
    assert fft_flops(m.instruction("f"), m) == pytest.approx(5 * 256 * 8 * 4)
