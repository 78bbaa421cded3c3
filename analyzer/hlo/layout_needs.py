"""Relayouts the consumer's semantics need: a copy or transpose that is not layout-only.

A transpose or layout copy moves an array's dimensions. Some consumers need that move whatever layouts XLA
picks, so the op is part of the computation, not a layout choice:

* an ``fft`` transforms its operand's last ``len(fft_length)`` dimensions: a move of one of them brings the
  transformed axis where the FFT reads it;
* an ``all-to-all`` splits and concatenates along ``dimensions`` (``split_dimension`` / ``concat_dimension``):
  a move of that dimension feeds (or, right after an all-to-all, undoes) the exchange;
* a ``dot`` contracts ``*_contracting_dims``: a move of the contracting dimension of an array that other ops
  read in its own order gives the dot the order it needs (one array read in two orders needs one transpose;
  an array read by the dot alone could be written in its order instead: that one stays layout-only; of k
  relayouts of one array that nothing reads as it is, the first scheduled stays layout-only).

A GEMM library call (cuBLAS / hipBLASLt custom call) or a fusion holding a dot counts as a dot. Consumers are
followed through ``bitcast`` / ``reshape`` (where the dimensions cannot be followed, any move counts).
"""

from __future__ import annotations

from ...parsers.hlo_text import HloModule, Instruction
from ...parsers.hlo_tokens import parse_ints
from .kernel_costs import backend_json

_PASS_THROUGH = ("bitcast", "reshape")
_SEMANTIC = ("fft", "all-to-all", "dot")
_MOVES = frozenset({"parameter", "copy", "transpose", "bitcast", "reshape", "tuple", "get-tuple-element"})
_ROOTS = ("copy", "transpose", "bitcast", "reshape")


def _moved(ins: Instruction, module: HloModule) -> set[int] | None:
    """Dimensions of the result (logical, or physical order for a copy) that the op moves; None: unknown."""
    op = ins
    if ins.opcode == "fusion":
        body = module.fusion_body(ins)
        op = body.root if body is not None else None
        if op is None or op.opcode not in ("transpose", "copy"):
            return None
    if op.opcode == "transpose":
        perm = parse_ints(op.attrs.get("dimensions", ""))
        return {i for i, p in enumerate(perm) if p != i} if perm else None
    operands = module.resolve_operand_shapes(op) if op.operand_names else ()
    before, after = (operands[0].layout if operands else None), op.shape.layout
    if before is None or after is None or len(before) != len(after):
        return None
    return {d for d in after if after.index(d) != before.index(d)}


_USERS: dict[int, tuple] = {}  # id(computation) -> (computation, name -> [(user, operand index)]), a few kept


def _users(comp, name: str) -> list[tuple[Instruction, int]]:
    cached = _USERS.get(id(comp))
    if cached is None or cached[0] is not comp:
        table: dict[str, list] = {}
        for u in comp.instructions:
            for i, o in enumerate(u.operand_names):
                table.setdefault(o, []).append((u, i))
        if len(_USERS) >= 8:
            _USERS.clear()
        cached = _USERS[id(comp)] = (comp, table)
    return cached[1].get(name, [])


def _consumers(comp, ins: Instruction) -> list[tuple[Instruction, int, bool]]:
    """(consumer, operand index, reached through a bitcast / reshape) of ``ins``'s result."""
    out, todo, seen = [], [(ins.name, False)], set()
    while todo:
        name, reshaped = todo.pop()
        for user, index in _users(comp, name):
            if user.opcode in _PASS_THROUGH and user.name not in seen:
                seen.add(user.name)
                todo.append((user.name, True))
            else:
                out.append((user, index, reshaped))
    return out


def _source(comp, ins: Instruction) -> Instruction | None:
    """The array the op reads, above any bitcast / reshape."""
    src = comp.by_name.get(ins.operand_names[0]) if ins.operand_names else None
    while src is not None and src.opcode in _PASS_THROUGH and src.operand_names:
        src = comp.by_name.get(src.operand_names[0])
    return src


def _is_relayout(ins: Instruction, module: HloModule) -> bool:
    if ins.opcode in ("copy", "transpose"):
        return True
    body = module.fusion_body(ins) if ins.opcode == "fusion" else None
    return body is not None and {i.opcode for i in body.instructions} <= _MOVES and body.root.opcode in _ROOTS


def _read_elsewhere(comp, ins: Instruction, module: HloModule) -> bool:
    """Whether the array the op moves must also exist in another order: another op reads it as it is, or other
    relayouts read it in their orders (then the producer can write one of those orders, the first scheduled:
    the others stay needed)."""
    src = _source(comp, ins)
    if src is None:
        return False
    readers = [user for user, _, _ in _consumers(comp, src) if user.name != ins.name]
    if any(not _is_relayout(user, module) for user in readers):
        return True
    order = {i.name: n for n, i in enumerate(comp.instructions)}
    return any(order[user.name] < order[ins.name] for user in readers)


def _needs(user: Instruction, index: int, reshaped: bool, moved: set[int] | None, comp, ins, module) -> bool:
    def hit(dims) -> bool:
        return reshaped or moved is None or bool(moved & set(dims))

    if user.opcode == "fft":
        count = len(parse_ints(user.attrs.get("fft_length", "")))
        shapes = module.resolve_operand_shapes(user)
        rank = len(shapes[0].dims) if shapes and shapes[0].dims else 0
        return hit(range(rank - count, rank)) if rank else True
    if user.opcode == "all-to-all":
        dims = parse_ints(user.attrs.get("dimensions", "")) or parse_ints(user.attrs.get("split_dimension", ""))
        return hit(dims) if dims else True
    if user.opcode == "dot":
        side = "lhs" if index == 0 else "rhs"
        return hit(parse_ints(user.attrs.get(f"{side}_contracting_dims", ""))) and _read_elsewhere(comp, ins, module)
    if _kind(user, module) == "dot":  # a GEMM library call or a matmul fusion
        dims = _gemm_contracting(user, index)
        return (hit(dims) if dims is not None else True) and _read_elsewhere(comp, ins, module)
    return False


def _kind(user: Instruction, module: HloModule) -> str:
    """The semantic consumer an instruction is: its opcode, ``dot`` for a GEMM custom call (cuBLAS, hipBLASLt)
    or a fusion whose body holds a dot."""
    if user.opcode == "custom-call":
        target = user.attrs.get("custom_call_target", "").lower()
        return "dot" if ("gemm" in target or "matmul" in target) else user.opcode
    if user.opcode == "fusion":
        body = module.fusion_body(user)
        return "dot" if body is not None and any(i.opcode == "dot" for i in body.instructions) else user.opcode
    return user.opcode


def _gemm_contracting(user: Instruction, index: int) -> list[int] | None:
    """A GEMM custom call's contracting dims of operand ``index`` (backend_config dot_dimension_numbers)."""
    numbers = backend_json(user).get("gemm_backend_config", {}).get("dot_dimension_numbers", {})
    dims = numbers.get(f"{'lhs' if index == 0 else 'rhs'}_contracting_dimensions") if index < 2 else None
    return [int(d) for d in dims] if isinstance(dims, list) else None


def semantic_need(ins: Instruction, module: HloModule | None) -> str | None:
    """``fft``, ``all-to-all`` or ``dot``: the consumer whose semantics need this copy / transpose (or, for an
    all-to-all, the exchange it undoes); None when it is layout-only as far as the dump tells."""
    if module is None or ins.opcode not in ("copy", "transpose", "fusion"):
        return None
    comp = module.computations.get(ins.computation)
    if comp is None:
        return None
    try:
        moved = _moved(ins, module)
        if moved is not None and not moved:
            return None
        src = _source(comp, ins)
        if src is not None and src.opcode == "all-to-all":
            return "all-to-all"
        for user, index, reshaped in _consumers(comp, ins):
            if _kind(user, module) in _SEMANTIC and _needs(user, index, reshaped, moved, comp, ins, module):
                return _kind(user, module)
    except (KeyError, ValueError, IndexError):  # an operand the dump does not define: say nothing
        return None
    return None
