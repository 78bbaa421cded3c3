"""FLOPs (and bytes) of custom-call kernels whose work XLA's cost analysis cannot see.

- Pallas/Mosaic TPU kernels (``tpu_custom_call``): the ``cost_estimate`` JAX serializes into
  ``backend_config={"custom_call_config": {..., "cost_estimate": {"flops", "transcendentals",
  "bytes_accessed", ...}}}`` (jax/_src/tpu_custom_call.py, CustomCallBackendConfig.to_json), when the
  kernel author gave one. Pallas on GPU (``__gpu$xla.gpu.triton``) serializes only name, ir, num_stages,
  num_warps, grid_x/y/z, debug (jax/_src/pallas/triton/pallas_call_registration.py): no estimate, unknown.
- Fused attention: forward 4·B·H·Sq·Skv·D (two matmuls, Q·Kᵀ and P·V), backward 2.5x that (five matmuls:
  dV, dP, dQ, dK and the recomputed scores, the count FlashAttention-2's paper, Dao 2023, §4, uses for its
  backward TFLOP/s), half when the mask is causal.
  cuDNN (``__cudnn$fmha*``, older XLA ``__cudnn$fhma*``; Softmax, ScaleBiasSoftmax, ...Dropout, F8, and
  their ``Backward``): B·H, Sq and D from ``bmm1_dot_dimension_numbers`` of ``cudnn_fmha_backend_config``
  (Q's batch, free and contracting dims; Skv = K's free dims); without them (the backward carries
  ``bmm1_grad_gemm*`` instead) Q and K are read as JAX's [B, S, H, D]; causal: ``mask_type`` names CAUSAL;
  a ``sliding_window_length`` W < Skv caps each query at W keys (4·B·H·Sq·W·D, not halved).
  TransformerEngine (``te_fused_attn_forward_ffi`` / ``_backward_ffi``, CUDA and ROCm): the FFI attributes
  ``input_batch``, ``attn_heads``, ``q_max_seqlen``, ``kv_max_seqlen``, ``head_dim``; causal when
  ``mask_type`` (NVTE_Mask_Type) is 2-5 (CAUSAL, PADDING_CAUSAL and their BOTTOM_RIGHT forms); a
  ``window_size_left`` L >= 0 is a window of L + 1 keys, as above.
- cuBLAS / cuBLASLt / hipBLASLt gemms: the dot (costs.py) plus their epilogue: one FLOP per output element
  for each of bias add, activation (relu, gelu, silu) and a beta·C accumulate (HloCostAnalysis counts an
  elementwise op as one FLOP per element).
Anything else: unknown (NaN) — never 0, so it is not taken for a memory-bound op.
"""

from __future__ import annotations

import json
import math
import re

from ...parsers.hlo_text import HloModule, Instruction

_ATTENTION = re.compile(r"flash|attention|fused_attn|fmha|fhma|\bmha|_mha|splash|sdpa", re.IGNORECASE)
# Custom-call targets that only move, mark or reinterpret data.
_ZERO_FLOP_TARGETS = frozenset("""
AssumeGatherIndicesInBound ConcatBitcast Sharding SPMDFullToShardShape SPMDShardToFullShape
MoveToHost MoveToDevice annotate_device_placement AllocateBuffer PadToStatic SliceToDynamic
LayoutConstraint X64Combine X64SplitLow X64SplitHigh InspectSharding
""".split())


def target(instr: Instruction) -> str:
    return instr.attrs.get("custom_call_target", "").strip('"')


def backend_json(instr: Instruction) -> dict:
    """The instruction's ``backend_config`` as a dict ({} when absent or not JSON)."""
    raw = instr.attrs.get("backend_config", "")
    try:
        if raw.startswith('"'):
            raw = json.loads(raw)
        out = json.loads(raw) if raw else {}
    except (ValueError, TypeError):
        return {}
    return out if isinstance(out, dict) else {}


def _number(value) -> float:
    try:
        out = float(value)  # proto JSON prints int64 as strings
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) and out >= 0 else math.nan


def pallas_cost_estimate(instr: Instruction) -> dict | None:
    """{'flops', 'bytes_accessed', 'transcendentals'} of a ``tpu_custom_call`` that carries a cost estimate."""
    config = backend_json(instr).get("custom_call_config", {})
    est = config.get("cost_estimate") if isinstance(config, dict) else None
    if not isinstance(est, dict) or "flops" not in est:
        return None
    return {k: _number(est.get(k)) for k in ("flops", "bytes_accessed", "transcendentals")}


def _free_dims(rank: int, *used) -> list[int]:
    taken = {int(d) for dims in used for d in dims}
    return [d for d in range(rank) if d not in taken]


def mlir_attrs(instr: Instruction) -> dict:
    """A typed-FFI call's ``backend_config={name = 16 : i64, rate = 0.1 : f64, ...}`` as name -> text."""
    raw = instr.attrs.get("backend_config", "")
    return dict(re.findall(r'(\w+)\s*=\s*("[^"]*"|[-+\w.]+)', raw)) if raw.lstrip().startswith("{") else {}


def _attention_note(sizes: tuple, backward: bool, causal: bool, window: float, how: str) -> tuple[float, str]:
    """(FLOPs, note) from (B·H, Sq, Skv, D); a sliding window of W keys (W < Skv) caps each query's keys at W
    instead of halving them."""
    bh, sq, skv, d = sizes
    windowed = 0 < window < skv
    flops = 4.0 * bh * sq * (window if windowed else skv) * d * (2.5 if backward else 1.0)
    flops /= 2 if causal and not windowed else 1
    shape = f"4·B·H·Sq·{f'W(={window:g})' if windowed else 'Skv'}·D"
    return flops, (f"fused attention {'backward' if backward else 'forward'}: {shape}"
                   f"{' x2.5' if backward else ''}{', causal /2' if causal and not windowed else ''} ({how})")


def is_fmha(target_name: str) -> bool:
    return target_name.startswith(("__cudnn$fmha", "__cudnn$fhma"))


def is_te_attention(target_name: str) -> bool:
    return target_name.startswith("te_") and "fused_attn" in target_name


def fmha_flops(instr: Instruction, module: HloModule) -> tuple[float, str]:
    """(FLOPs, note) of a cuDNN fused-attention custom-call (rule in the module doc)."""
    q, k = module.resolve_operand_shapes(instr)[:2]
    config = backend_json(instr).get("cudnn_fmha_backend_config", {})
    dnums = config.get("bmm1_dot_dimension_numbers") or {}
    if dnums.get("lhs_contracting_dimensions"):
        q_batch = dnums.get("lhs_batch_dimensions", [])
        q_contract = dnums["lhs_contracting_dimensions"]
        k_free = _free_dims(len(k.dims), dnums.get("rhs_batch_dimensions", []),
                            dnums.get("rhs_contracting_dimensions", []))
        bh = math.prod(q.dims[int(d)] for d in q_batch)
        d = math.prod(q.dims[int(i)] for i in q_contract)
        sq = math.prod(q.dims[i] for i in _free_dims(len(q.dims), q_batch, q_contract))
        skv = math.prod(k.dims[i] for i in k_free)
        how = "from bmm1 dimension numbers"
    elif len(q.dims or ()) == 4 and len(k.dims or ()) == 4:
        bh, sq, d, skv = q.dims[0] * q.dims[2], q.dims[1], q.dims[3], k.dims[1]
        how = "Q, K read as [B, S, H, D]"
    else:
        return math.nan, f"attention custom-call {target(instr)}: shapes not understood"
    causal = "CAUSAL" in str(config.get("mask_type", "")).upper() or config.get("is_causal_mask") is True
    window = _number(config.get("sliding_window_length", 0))
    return _attention_note((bh, sq, skv, d), "Backward" in target(instr), causal, window, how)


_TE_DIMS = ("input_batch", "attn_heads", "q_max_seqlen", "kv_max_seqlen", "head_dim")
_TE_CAUSAL_MASKS = {2, 3, 4, 5}  # NVTE_Mask_Type: CAUSAL, PADDING_CAUSAL, and their BOTTOM_RIGHT forms


def te_attention_flops(instr: Instruction) -> tuple[float, str]:
    """(FLOPs, note) of a TransformerEngine fused-attention FFI call, from its attributes (module doc)."""
    attrs = mlir_attrs(instr)
    dims = [_number(attrs.get(name)) for name in _TE_DIMS]
    if any(math.isnan(x) or x <= 0 for x in dims):
        return math.nan, f"attention custom-call {target(instr)}: no {'/'.join(_TE_DIMS)} attributes"
    batch, heads, sq, skv, d = dims
    mask = _number(attrs.get("mask_type"))
    window = _number(attrs.get("window_size_left"))  # -1 (NaN here): no window
    return _attention_note((batch * heads, sq, skv, d), "backward" in target(instr), mask in _TE_CAUSAL_MASKS,
                           0.0 if math.isnan(window) else window + 1, "from the TransformerEngine attributes")


# Epilogue -> elementwise steps on the output (XLA GemmBackendConfig.Epilogue).
_EPILOGUE_STEPS = {"DEFAULT": 0, "RELU": 1, "GELU": 1, "GELU_AUX": 1, "SILU": 1, "BIAS": 1, "BIAS_RELU": 2,
                   "BIAS_GELU": 2, "BIAS_GELU_AUX": 2, "BIAS_SILU": 2}


def gemm_epilogue_steps(instr: Instruction) -> tuple[int, str]:
    """(elementwise FLOPs per output element, note) a cuBLAS/hipBLASLt gemm adds after its dot."""
    config = backend_json(instr).get("gemm_backend_config", {})
    config = config if isinstance(config, dict) else {}
    epilogue = str(config.get("epilogue", "DEFAULT") or "DEFAULT")
    steps = _EPILOGUE_STEPS.get(epilogue, 0)
    beta = _number(config.get("beta", 0))
    steps += 1 if beta > 0 else 0  # C accumulated into the result
    parts = ([f"epilogue {epilogue}"] if _EPILOGUE_STEPS.get(epilogue) else []) + (["beta·C"] if beta > 0 else [])
    return steps, (f"gemm + {' + '.join(parts)}: {steps} FLOP per output element" if steps else "")


def custom_call_kind(instr: Instruction) -> str:
    """'gemm', 'conv', 'zero' (moves or marks data), 'attention' or 'unknown'."""
    target_name = target(instr)
    if target_name.startswith("__cublas") or target_name.startswith("__hipblas"):
        return "gemm"
    if target_name.startswith("__cudnn$conv"):
        return "conv"
    if target_name in _ZERO_FLOP_TARGETS:
        return "zero"
    if _ATTENTION.search(target_name) or _ATTENTION.search(instr.name) or _ATTENTION.search(instr.op_name):
        return "attention"
    return "unknown"
