"""Bytes per HLO instruction, split by memory space, for captures whose trace has no ``bytes_accessed``.

Operands read once + result written once, at padded size, split by memory space
(S(0) HBM, S(1) VMEM, S(5) host, anything else ``other``). A fusion counts only its own operands
and result. Free ops (parameter, constant, tuple, get-tuple-element, bitcast, control flow): 0.
Slices and gathers read only the slice. In-place dynamic-update-slice and scatter, plain or as
a fusion root, read and write the update, not the whole buffer; a fusion parameter used only by
slices is read at the slices' size. Asynchronous pairs: the data moved is put on the ``*-start``
(where the transfer is issued), the ``*-done`` gets 0.
"""

from __future__ import annotations

from ...parsers.hlo_text import Computation, HloModule, Instruction, Shape
from .kernel_costs import custom_call_kind

__all__ = ["ByteCounter", "data_shape", "instruction_bytes", "wrapped_instruction"]

# Ops that touch no memory of their own (aliases, plumbing, control flow whose bodies have rows).
_FREE = frozenset("""
parameter constant get-tuple-element tuple bitcast after-all add-dependency partition-id
replica-id opt-barrier optimization-barrier domain while conditional call get-dimension-size
""".split())

_SPACE_COLUMN = {0: "hbm_bytes", 1: "vmem_bytes", 5: "host_bytes"}


def data_shape(shape: Shape) -> Shape:
    """The data part of a result: element 0 of a tuple (cuBLAS/cuDNN append a workspace)."""
    while shape.is_tuple and shape.elements:
        shape = shape.elements[0]
    return shape

def kernel_results(shape: Shape) -> list[Shape]:
    """A library kernel's (cuBLAS, cuDNN, TransformerEngine) outputs: its result tuple less the trailing
    u8/s8 workspace it appends (scratch whose traffic nobody reports), an epilogue's aux output kept."""
    if not shape.is_tuple:
        return [shape]
    out = list(shape.elements)
    if len(out) > 1 and not out[-1].is_tuple and out[-1].dtype in ("u8", "s8") and len(out[-1].dims) == 1:
        out.pop()
    return out


class ByteCounter:
    """Per-module memo of fusion bodies' users, and the byte split of one instruction."""

    def __init__(self, module: HloModule):
        self.module = module
        self.users: dict[str, dict[str, list[Instruction]]] = {}

    def users_in(self, comp: Computation) -> dict[str, list[Instruction]]:
        if comp.name not in self.users:
            users: dict[str, list[Instruction]] = {}
            for ins in comp.instructions:
                for n in ins.operand_names:
                    users.setdefault(n, []).append(ins)
            self.users[comp.name] = users
        return self.users[comp.name]

    def fusion_reads(self, instr: Instruction, operands: tuple[Shape, ...]) -> list[tuple[Shape, float]]:
        """(operand, bytes read) for a fusion, applying the slice-only and in-place rules."""
        body = self.module.fusion_body(instr)
        if body is None:
            return [(s, s.padded_bytes) for s in operands]
        users = self.users_in(body)
        params = {int(p.attrs.get("parameter_number", -1)): p for p in body.instructions
                  if p.opcode == "parameter"}
        inplace = {p for p, _ in _inplace_updates(body)}
        out = []
        for idx, shape in enumerate(operands):
            p = params.get(idx)
            if p is not None and p.name in inplace:
                continue
            uses = _through_bitcasts(p, users) if p is not None else []
            if uses and all(u.opcode in ("slice", "dynamic-slice", "gather")
                            and u.operand_names[0] in _alias_names(p, users) for u in uses):
                share = shape.padded_bytes / max(shape.num_elements, 1)
                out.append((shape, sum(data_shape(u.shape).num_elements for u in uses) * share))
            else:
                out.append((shape, shape.padded_bytes))
        return out


    def split(self, instr: Instruction) -> dict:
        """Bytes by memory-space column (only the non-zero ones)."""
        op, module = instr.opcode, self.module
        acc: dict[str, float] = {}
        if op in _FREE or op.endswith("-done"):
            return acc
        operands = module.resolve_operand_shapes(instr)
        if op == "async-start":
            inner = wrapped_instruction(module, instr)
            if inner is not None and inner.opcode in ("slice", "dynamic-slice", "gather"):
                out = _async_output(instr)
                _add(acc, operands[0], data_shape(out).num_elements * _share(operands[0]))
                _add(acc, out)
                return acc
        if op.endswith("-start"):
            for s in operands:
                _add(acc, s)
            _add(acc, _async_output(instr))
            return acc
        if op in ("slice", "dynamic-slice", "gather"):
            out = data_shape(instr.shape)
            _add(acc, operands[0], out.num_elements * _share(operands[0]))
            for s in operands[1:]:
                _add(acc, s)
            _add(acc, instr.shape)
            return acc
        if op in ("dynamic-update-slice", "scatter"):
            # In place: operand 0 is the buffer, only the update (and indices) move.
            update = operands[2] if op == "scatter" else operands[1]
            for s in operands[1:]:
                _add(acc, s)
            _add(acc, data_shape(instr.shape), update.num_elements * _share(data_shape(instr.shape)))
            return acc
        if op == "fusion":
            for s, nbytes in self.fusion_reads(instr, operands):
                _add(acc, s, nbytes)
            body = module.fusion_body(instr)
            updates = dict((ins.name, ins) for _, ins in _inplace_updates(body)) if body else {}
            if updates:
                _add_fusion_output(acc, instr, body, updates, module)
            else:
                _add(acc, instr.shape)
            return acc
        if op == "custom-call" and custom_call_kind(instr) in ("gemm", "conv", "attention"):
            for s in operands:
                _add(acc, s)
            for s in kernel_results(instr.shape):
                _add(acc, s)
            return acc
        for s in operands:
            _add(acc, s)
        _add(acc, instr.shape)
        return acc


def _alias_names(p: Instruction, users: dict) -> set[str]:
    names, todo = {p.name}, [p.name]
    while todo:
        for u in users.get(todo.pop(), []):
            if u.opcode == "bitcast" and u.name not in names:
                names.add(u.name)
                todo.append(u.name)
    return names


def _through_bitcasts(p: Instruction, users: dict) -> list[Instruction]:
    return [u for n in _alias_names(p, users) for u in users.get(n, []) if u.opcode != "bitcast"]


def _inplace_updates(body: Computation) -> list[tuple[str, Instruction]]:
    """(parameter name, dynamic-update-slice/scatter) pairs updating a parameter in place at the
    fusion root (directly, through bitcasts, or as a root tuple element)."""
    root = body.root
    if root is None:
        return []
    outs = [body.by_name.get(n) for n in root.operand_names] if root.opcode == "tuple" else [root]
    found = []
    for ins in outs:
        while ins is not None and ins.opcode == "bitcast":
            ins = body.by_name.get(ins.operand_names[0])
        if ins is None or ins.opcode not in ("dynamic-update-slice", "scatter"):
            continue
        buf = body.by_name.get(ins.operand_names[0])
        while buf is not None and buf.opcode == "bitcast":
            buf = body.by_name.get(buf.operand_names[0])
        if buf is not None and buf.opcode == "parameter":
            found.append((buf.name, ins))
    return found


def _add(acc: dict, shape: Shape, nbytes: float | None = None) -> None:
    """Add a shape's padded bytes (or ``nbytes`` in its memory space) to ``acc`` by space."""
    if shape.is_tuple and nbytes is None:
        for e in shape.elements:
            _add(acc, e)
        return
    space = 0 if shape.is_tuple else shape.memory_space
    col = _SPACE_COLUMN.get(space, "other_bytes")
    acc[col] = acc.get(col, 0.0) + (shape.padded_bytes if nbytes is None else nbytes)


def _async_output(instr: Instruction) -> Shape:
    """The buffer an async start writes: copy-start (dst, src, ctx) -> dst; all-gather-start,
    collective-permute-start and async-start ((operands), output, ctx…) -> element 1."""
    s = instr.shape
    if not s.is_tuple:
        return s
    if instr.opcode == "copy-start":
        return s.elements[0]
    if instr.opcode in ("all-gather-start", "collective-permute-start", "async-start") \
            and len(s.elements) > 1:
        return s.elements[1]
    return s


def _add_fusion_output(acc, instr, body, updates, module) -> None:
    """Output bytes of a fusion whose root (or root tuple elements) update a buffer in place."""
    root = body.root
    outs = list(root.operand_names) if root.opcode == "tuple" else [root.name]
    shapes = instr.shape.elements if instr.shape.is_tuple else (instr.shape,)
    for name, shape in zip(outs, shapes):
        ins = body.by_name.get(name)
        while ins is not None and ins.opcode == "bitcast":
            ins = body.by_name.get(ins.operand_names[0])
        if ins is not None and ins.name in updates:
            ops = module.resolve_operand_shapes(ins)
            update = ops[2] if ins.opcode == "scatter" else ops[1]
            _add(acc, shape, update.num_elements * _share(shape))
        else:
            _add(acc, shape)


def _share(shape: Shape) -> float:
    """Padded bytes per element, to price a part of a buffer."""
    return shape.padded_bytes / max(shape.num_elements, 1)


def wrapped_instruction(module: HloModule, instr: Instruction) -> Instruction | None:
    """The op an async wrapper (``async-start``/``-update``/``-done``) runs: its computation's root, looking
    past plumbing (tuples, bitcasts, parameters); None for any other op or a wrapper without a body."""
    if not instr.opcode.startswith("async-"):
        return None
    comp = module.fusion_body(instr)
    if comp is None:
        return None
    plumbing = {"parameter", "tuple", "get-tuple-element", "bitcast", "constant"}
    for ins in [comp.root, *comp.instructions]:
        if ins is not None and ins.opcode not in plumbing:
            return ins
    return None


def instruction_bytes(instr: Instruction, module: HloModule) -> dict:
    """Bytes by memory space: keys hbm_bytes, vmem_bytes, host_bytes, other_bytes."""
    acc = ByteCounter(module).split(instr)
    return {k: float(acc.get(k, 0.0)) for k in ("hbm_bytes", "vmem_bytes", "host_bytes",
                                                 "other_bytes")}
