"""FLOPs (and bytes) of custom-call kernels whose work XLA's cost analysis cannot see.

- Pallas/Mosaic TPU kernels (``tpu_custom_call``): the ``cost_estimate`` JAX serializes into
  ``backend_config={"custom_call_config": {..., "cost_estimate": {"flops", "transcendentals",
  "bytes_accessed", ...}}}`` (jax/_src/tpu_custom_call.py, CustomCallBackendConfig.to_json), when the
  kernel author gave one.
- cuDNN fused attention (``__cudnn$fmha*``): from Q and K: 4·B·H·Sq·Skv·D forward (two matmuls),
  2.5x that backward (five), half when ``mask_type`` is causal. B·H, Sq and D come from
  ``bmm1_dot_dimension_numbers`` of ``cudnn_fmha_backend_config`` (Q's batch, free and contracting
  dims; Skv = K's free dims); without them Q and K are read as JAX's [B, S, H, D].
Anything else: unknown (NaN) — never 0, so it is not taken for a memory-bound op.
"""

from __future__ import annotations

import json
import math
import re

from ...parsers.hlo_text import HloModule, Instruction

_ATTENTION = re.compile(r"flash|attention|fmha|\bmha|_mha|splash|sdpa", re.IGNORECASE)
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
    elif len(q.dims) == 4 and len(k.dims) == 4:
        bh, sq, d, skv = q.dims[0] * q.dims[2], q.dims[1], q.dims[3], k.dims[1]
        how = "Q, K read as [B, S, H, D]"
    else:
        return math.nan, f"attention custom-call {target(instr)}: shapes not understood"
    flops = 4.0 * bh * sq * skv * d
    backward = "Backward" in target(instr)
    if backward:
        flops *= 2.5
    causal = "CAUSAL" in str(config.get("mask_type", "")).upper()
    if causal:
        flops /= 2
    return flops, (f"fused attention {'backward' if backward else 'forward'}: 4·B·H·Sq·Skv·D"
                   f"{' x2.5' if backward else ''}{', causal /2' if causal else ''} ({how})")


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
