"""Facts about how an instruction lays data out, kept from the parse so rules need not re-parse:
result bytes at padded size, operand/result layouts (tiling included), the opcodes a fusion is made
of, whether an op only moves elements into another layout, and which ops are recomputation.
"""

from __future__ import annotations

import re

import pandas as pd

from ...parsers.hlo_text import HloModule, Instruction, Shape

# What a fusion may hold and still only move data (plus at least one copy or transpose).
_MOVE_OPCODES = frozenset({"parameter", "copy", "transpose", "bitcast", "reshape", "tuple", "get-tuple-element"})
_REMAT_NAME = re.compile(r"\.remat\d*(?:\.|$)")

LAYOUT_CHANGE_COLUMNS = ["module", "computation", "name", "change", "operand_layout", "result_layout",
                         "op_name", "result_bytes"]


def layout_change(result: Shape | None, operand: Shape | None) -> str | None:
    """'layout' | 'tiling' | 'transpose' | 'relayout' when result holds the operand's elements moved; else None.

    A TPU copy may also convert (f32 -> bf16): then only a changed dimension order counts, since the
    tiling follows the element type.
    """
    if result is None or operand is None or result.is_tuple or operand.is_tuple:
        return None
    if result.num_elements != operand.num_elements:
        return None
    if tuple(result.dims) == tuple(operand.dims):
        if result.layout is not None and operand.layout is not None and tuple(result.layout) != tuple(operand.layout):
            return "layout"
        if result.dtype == operand.dtype and tuple(result.tiles) != tuple(operand.tiles):
            return "tiling"
        return None  # same layout: a convert, a memory-space move or a plain copy
    return "transpose" if sorted(result.dims) == sorted(operand.dims) else "relayout"


def fused_opcodes(ins: Instruction, module: HloModule | None) -> str | None:
    """Sorted, comma-separated opcodes of a fusion's body; None when not a fusion or the body is unknown."""
    if ins.opcode != "fusion" or module is None:
        return None
    body = module.fusion_body(ins)
    return ",".join(sorted({i.opcode for i in body.instructions})) if body is not None else None


def layout_facts(ins: Instruction, operand_shapes, fused: str | None) -> dict:
    """result_bytes, result/operand layouts, fused_opcodes; ``layout_change`` of a copy, transpose or
    fusion (its result against its largest operand); ``is_data_movement``: a copy, a transpose, or a
    fusion whose body only moves data (with at least one copy or transpose)."""
    arrays = [s for s in operand_shapes if not s.is_tuple]
    first = operand_shapes[0] if operand_shapes else None
    body = set(fused.split(",")) if fused else set()
    change = None
    if ins.opcode in ("copy", "transpose", "fusion") and arrays:
        change = layout_change(ins.shape, max(arrays, key=lambda s: s.num_elements))
    return {
        "result_bytes": float(ins.shape.padded_bytes),
        "result_layout": ins.shape.layout_str if not ins.shape.is_tuple else None,
        "operand_layout": first.layout_str if first is not None and not first.is_tuple else None,
        "fused_opcodes": fused,
        "layout_change": change,
        "is_data_movement": ins.opcode in ("copy", "transpose")
        or (bool(body) and body <= _MOVE_OPCODES and bool(body & {"copy", "transpose"})),
    }


def is_recomputed(op_names: pd.Series, jax_names: pd.Series) -> pd.Series:
    """Recomputed ops: XLA remat clones by name (``fusion.12.remat2``), ``jax.checkpoint`` recomputation
    by JAX name path (``rematted_computation`` in ``op_name`` / ``tf_op``)."""
    by_name = op_names.astype(str).str.contains(_REMAT_NAME)
    by_path = jax_names.fillna("").astype(str).str.contains("rematted_computation", regex=False)
    return by_name | by_path


def recomputed_instructions(module: HloModule) -> int:
    """Instructions of a module (every computation, fused ones included) that belong to recomputation."""
    inst = module.instructions()
    return int(is_recomputed(inst["name"], inst["op_name"]).sum())


def dump_layout_changes(module: HloModule) -> pd.DataFrame:
    """Every copy / transpose of a module (fused ones included) that changes a layout, with its origin."""
    rows = []
    inst = module.instructions()
    for comp, name in inst.loc[inst["opcode"].isin(["copy", "transpose"]), ["computation", "name"]].itertuples(
            index=False):
        try:
            ins = module.instruction(name)
            operands = [s for s in module.resolve_operand_shapes(ins) if not s.is_tuple]
        except (KeyError, ValueError):
            continue
        kind = layout_change(ins.shape, operands[0]) if operands else None
        if kind is not None:
            rows.append((module.name, comp, name, kind, operands[0].layout_str, ins.shape.layout_str,
                         ins.op_name, float(ins.shape.padded_bytes)))
    return pd.DataFrame(rows, columns=LAYOUT_CHANGE_COLUMNS)
