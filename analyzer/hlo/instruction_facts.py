"""Facts about one HLO instruction, read from the dump's ``Instruction`` or the trace's per-op HLO text:
what it is (opcode, collective or transfer kind, category, matmul, dtype, layouts), whether it moves bytes to
or from the host, its matmul dimensions, the start op a ``*-done`` waits on and a collective's payload and
replica groups. ``facts`` joins them to the measured ops.
"""

from __future__ import annotations

import functools

import numpy as np

from ...parsers.hlo_text import HloModule, HloParseError, Instruction, parse_instruction
from .collective_kinds import KINDS, kind_of
from .costs import matmul_dims
from .layout_needs import semantic_need
from .layouts import fused_opcodes, layout_facts
from .op_bytes import wrapped_instruction
from .op_categories import category_from_hlo, category_from_name

HOST_MEMORY_SPACE = 5
# Per-instruction facts with their value when an op has no HLO at all.
NO_HLO = {"opcode": None, "fusion_kind": None, "hlo_text": None, "is_async_start": False, "is_async_done": False,
          "is_host_transfer": False, "host_bytes": 0.0, "collective_kind": None, "category": None,
          "is_matmul": False, "dtype": None, "operand_layout": None, "result_layout": None,
          "result_bytes": np.nan, "fused_opcodes": None, "layout_change": None, "is_data_movement": False,
          "layout_needed_by": None,
          "collective_payload": np.nan, "replica_groups": None, "source_target_pairs": None,
          "transfer_kind": None, "start_op": None,
          "matmul_m": np.nan, "matmul_n": np.nan, "matmul_k": np.nan, "matmul_batch": np.nan}


def instruction_facts(ins, module, trace_text, op_name: str, trace_lookup, category=None) -> dict:
    """The NO_HLO columns of one op: from its dump instruction ``ins`` (in ``module``), else from
    ``trace_text``; ``trace_lookup(name)`` finds the trace's other instructions (a done op's start)."""
    if ins is None:
        ins = parse_trace_text(trace_text)
    category = category if isinstance(category, str) else None
    if ins is None:
        return _unparsed_facts(op_name, category)
    operand_shapes = module.resolve_operand_shapes(ins) if module is not None else ins.operand_shapes
    facts = _identity_facts(ins, module, operand_shapes, op_name, category)
    facts.update(_matmul_facts(ins, module))
    # The one start<->done pairing: a done op's operand that is a start op (dump or trace text).
    start = _partner(ins, _module_lookup(module) if module is not None else trace_lookup) \
        if facts["is_async_done"] else None
    facts["start_op"] = start.name if start is not None else None
    kind = facts["collective_kind"]
    if kind is not None and not facts["is_async_start"]:
        facts.update(_collective_facts(kind, ins, operand_shapes, start, module))
    return facts


def _unparsed_facts(op_name: str, category: str | None) -> dict:
    """An op without readable HLO: its kind and async role from the trace's category or its name."""
    transfer = kind_of(category=category, name=op_name)
    kind = transfer if transfer in KINDS else None
    # Unparsed text (damaged, or a form we do not read): the trace's category or the op's name still
    # says whether it is an async start or done; a done op timed as compute gave efficiency ~1e6.
    opcode = (category or op_name or "").rsplit(".", 1)[0]
    return {**NO_HLO, "transfer_kind": transfer, "collective_kind": kind,
            "category": _category(None, op_name, kind, False), "is_matmul": False,
            "is_async_start": opcode.endswith("-start"), "is_async_done": opcode.endswith("-done")}


def _identity_facts(ins: Instruction, module, operand_shapes, op_name: str, category: str | None) -> dict:
    """What the instruction is and does: opcode, transfer/collective kind, category, dtype, layouts, host bytes."""
    wrapped = wrapped_instruction(module, ins) if module is not None else None
    to_host = ins.opcode in ("copy-start", "copy-done") and _touches_host(ins, operand_shapes)
    transfer = kind_of(ins.opcode, wrapped=wrapped.opcode if wrapped is not None else None, category=category,
                       to_host=to_host)
    kind = transfer if transfer in KINDS else None  # the ring model's collectives; send/recv are not priced
    is_matmul = ins.opcode in ("dot", "convolution")
    layout = layout_facts(ins, operand_shapes, fused_opcodes(ins, module))
    # A fusion that only moves data (a transpose/copy fusion) is data formatting whatever its kind.
    moves_data_only = layout["is_data_movement"] and not kind
    category = "data formatting" if moves_data_only else _category(ins, op_name, kind, is_matmul)
    facts: dict = dict(NO_HLO)
    facts.update(
        opcode=ins.opcode,
        fusion_kind=ins.attrs.get("kind"),
        hlo_text=ins.text.strip(),
        is_async_start=ins.opcode.endswith("-start"),
        is_async_done=ins.opcode.endswith("-done"),
        transfer_kind=transfer,
        collective_kind=kind,
        category=category,
        is_matmul=is_matmul,
        dtype=(operand_shapes[0].dtype if is_matmul and operand_shapes else _array_shapes(ins.shape)[0].dtype),
        **layout,
        layout_needed_by=semantic_need(ins, module) if layout["layout_change"] else None,
    )
    if to_host:
        facts["is_host_transfer"] = True
        operand_arrays = [s for sh in operand_shapes for s in _array_shapes(sh)]
        facts["host_bytes"] = _largest_bytes(_array_shapes(ins.shape) + operand_arrays)
    return facts


def _matmul_facts(ins: Instruction, module) -> dict:
    """matmul_m/n/k/batch of a dot, convolution or matmul fusion; nothing when they cannot be read."""
    if ins.opcode not in ("dot", "convolution", "fusion"):
        return {}
    try:
        dims = matmul_dims(ins, module)
    except (ValueError, IndexError, KeyError):  # odd labels or a missing body: dims unknown
        return {}
    return {f"matmul_{k}": float(v) for k, v in dims.items()} if dims else {}


def _collective_facts(kind: str, ins: Instruction, operand_shapes, start: Instruction | None, module) -> dict:
    """A collective's payload, replica groups and source-target pairs; a done op reads them from its start."""
    payload = _collective_payload(kind, ins, operand_shapes)
    if start is not None:
        # The start holds the replica groups (and, for async-start wrappers, the shapes).
        start_operands = module.resolve_operand_shapes(start) if module is not None else start.operand_shapes
        payload = payload or _collective_payload(kind, start, start_operands)
        ins = start
    # The replica groups and payload are facts; their place on the mesh and their time depend on the chip
    # (models/collective_pricing.py).
    return {"collective_payload": payload, "replica_groups": ins.attrs.get("replica_groups"),
            "source_target_pairs": ins.attrs.get("source_target_pairs")}


def _array_shapes(shape) -> list:
    return list(shape.elements) if shape.is_tuple else [shape]


def _largest_bytes(shapes) -> float:
    sizes = [s.logical_bytes for s in shapes if not s.is_tuple and s.dims is not None]
    return float(max(sizes)) if sizes else 0.0


def _total_bytes(shapes) -> float:
    return float(sum(s.logical_bytes for s in shapes if not s.is_tuple and s.dims is not None))


def _collective_payload(kind: str, ins: Instruction, operand_shapes) -> float:
    """V of one device's collective: the buffer it holds after (all-gather) or before (reduce-scatter) the
    collective; a variadic (combined, tuple-shaped) collective moves the sum of its members. The caller
    scales an all-to-all's per-device buffer to the global array."""
    result = _array_shapes(ins.shape)
    operands = [s for shape in operand_shapes for s in _array_shapes(shape)]
    if ins.opcode.endswith("-start") and ins.shape.is_tuple and len(result) == 2 and result[-1].is_tuple:
        result = _array_shapes(result[-1])  # all-gather-start: ((operands), (results))
    if kind == "reduce-scatter":
        return _total_bytes(operands) or _total_bytes(result)
    return _total_bytes(result) or _total_bytes(operands)


def _touches_host(ins: Instruction, operand_shapes) -> bool:
    shapes = _array_shapes(ins.shape) + [s for shape in operand_shapes for s in _array_shapes(shape)]
    return any(getattr(s, "memory_space", 0) == HOST_MEMORY_SPACE for s in shapes)


def _category(ins: Instruction | None, op_name: str, kind: str | None, is_matmul: bool) -> str:
    if kind:
        return kind
    return category_from_name(op_name) if ins is None else category_from_hlo(ins, is_matmul)


def parse_trace_text(text) -> Instruction | None:
    """The instruction of a trace's per-op HLO text; None when there is none or it does not parse."""
    if not isinstance(text, str) or not text.startswith("%"):
        return None
    return _parsed_text(text)


@functools.lru_cache(maxsize=4096)  # the op facts and the collective graph read the same texts: parsed once
def _parsed_text(text: str) -> Instruction | None:
    try:
        return parse_instruction(text)
    except (HloParseError, ValueError):
        return None


def _partner(done: Instruction, lookup) -> Instruction | None:
    """The *-start op a *-done waits on (its operand), found through ``lookup(name)``."""
    for name in done.operand_names:
        ins = lookup(name)
        if ins is not None and ins.opcode.endswith("-start"):
            return ins
    return None


def _module_lookup(module: HloModule):
    def lookup(name):
        try:
            return module.instruction(name)
        except KeyError:
            return None
    return lookup
