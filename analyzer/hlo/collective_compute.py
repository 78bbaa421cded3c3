"""The matmuls each collective feeds or follows: the compute a collective's transfer is weighed against.

The MaxText arithmetic ("FSDP needs tokens per device > C/W", "TP needs mlp_dim / TP > C/W") compares a
collective's bytes with the FLOPs of the matmuls that use what it moves: the dots an all-gather's result
reaches (the gathered weights' forward and backward matmuls), the dots whose results a reduce-scatter or
all-reduce reduces (the weight-gradient matmuls; a tensor-parallel layer's row-parallel matmul). Here that
link is read from the HLO graph: from the collective through ops that only reshape, convert or combine
elementwise (bitcasts, copies, converts, loop fusions), up to the first matmul on each path. Collectives
whose data reach no matmul (a loss scalar, an embedding gather) link none.
"""

from __future__ import annotations

from ...parsers.hlo_text import HloModule, Instruction

# Collectives whose result feeds compute (walk users) and those that reduce compute's result (walk operands).
FEEDS = ("all-gather", "all-to-all", "collective-permute")
FOLLOWS = ("reduce-scatter", "all-reduce")
MAX_STEPS = 6  # ops between a collective and its matmul: converts, bitcasts, a fusion or two
_STOP = ("tuple", "while", "conditional", "call", "parameter", "custom-call", "send", "recv", "infeed", "outfeed")


def _is_matmul(ins: Instruction, module: HloModule) -> bool:
    if ins.opcode in ("dot", "convolution"):
        return True
    if ins.opcode != "fusion":
        return False
    body = module.fusion_body(ins)
    return body is not None and any(i.opcode in ("dot", "convolution") for i in body.instructions)


def _passes(ins: Instruction) -> bool:
    """Whether the walk goes on through ``ins``: data plumbing, not control flow or another transfer."""
    op = ins.opcode
    return not (op in _STOP or op.endswith("-start") or op.endswith("-done") or op.startswith(("all-", "reduce-scatter",
                                                                                                "collective-")))


def _walk(first: list[str], step, by_name: dict, matmul: dict, size: int | None = None) -> tuple[str, ...]:
    """Matmuls reached from ``first`` through ops that keep the array's element count: a reduction (the loss
    scalar combined into a gradient all-reduce) or a slice ends the path, so only the compute that produces
    or consumes the transferred data itself counts."""
    found: list[str] = []
    seen: set[str] = set()
    frontier = [(name, size) for name in first]
    for _ in range(MAX_STEPS):
        nxt: list[tuple[str, int | None]] = []
        for name, size in frontier:
            ins = by_name.get(name)
            if name in seen or ins is None:
                continue
            if matmul.get(name, False):
                seen.add(name)
                found.append(name)
                continue
            own = None if ins.shape.is_tuple else ins.shape.num_elements
            if size is not None and own is not None and own != size:
                continue
            seen.add(name)
            if _passes(ins):
                nxt.extend((n, own if own is not None else size) for n in step(ins))
        frontier = nxt
        if not frontier:
            break
    return tuple(dict.fromkeys(found))


def module_graph(module: HloModule) -> tuple[dict, dict]:
    """(name -> Instruction, name -> is a matmul) over the module's top-level computations (entry, loop
    bodies, branches): where ops run, not fusion bodies."""
    roles = module.computation_roles()
    by_name: dict[str, Instruction] = {}
    matmul: dict[str, bool] = {}
    for cname, comp in module.computations.items():
        if roles.get(cname) in ("entry", "control"):
            for ins in comp.instructions:
                by_name[ins.name] = ins
                matmul[ins.name] = _is_matmul(ins, module)
    return by_name, matmul


def collective_matmuls(by_name: dict, matmul: dict, kinds: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """collective op name -> names of the matmuls it feeds or follows (empty tuple: none reached).

    ``by_name`` / ``matmul``: the program's instructions and which are matmuls (``module_graph``, or the
    trace's own instruction texts when no module is at hand). ``kinds``: op name -> collective kind, for the
    ops that carry a collective in the ops table (the synchronous op or the ``*-done``); a done op's operands
    are read through its start op."""
    users: dict[str, list[str]] = {}
    for ins in by_name.values():
        for operand in ins.operand_names:
            users.setdefault(operand, []).append(ins.name)
    out: dict[str, tuple[str, ...]] = {}
    for name, kind in kinds.items():
        ins = by_name.get(name)
        if ins is None:
            continue
        if kind in FEEDS:
            size = None if ins.shape.is_tuple else ins.shape.num_elements
            out[name] = _walk(users.get(name, []), lambda i: users.get(i.name, []), by_name, matmul, size)
        elif kind in FOLLOWS:
            source = ins
            if ins.opcode.endswith("-done"):  # the start holds the operands
                starts = [by_name[n] for n in ins.operand_names
                          if n in by_name and by_name[n].opcode.endswith("-start")]
                source = starts[0] if starts else ins
            out[name] = _walk(list(source.operand_names), lambda i: list(i.operand_names), by_name, matmul)
    return out
