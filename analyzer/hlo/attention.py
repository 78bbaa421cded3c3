"""Attention whose score matrix goes through HBM: matmul -> softmax ops -> matmul in the scheduled HLO.

A fused (flash / Splash / cuDNN) attention kernel is one custom call; an unfused one is two matmuls whose
first result (the scores, [batch, heads, q_len, kv_len]) is written out, read back by the softmax ops
(an exponential and a reduction among them) and read again by the second matmul. The first matmul must
be batched (batch and heads are dot batch dims), which keeps the logits -> log-softmax -> backward dot of a
cross-entropy loss out. The facts here mark those ops so a rule
can price the traffic from the ops table without walking the graph itself.
"""

from __future__ import annotations

from ...parsers.hlo_text import HloModule, Instruction
from .costs import matmul_dims

MAX_CHAIN_OPS = 24  # softmax, scale, mask, max / sum reductions: a handful of ops; larger searches are not attention


def _body_opcodes(ins: Instruction, module: HloModule) -> set[str]:
    if ins.opcode != "fusion":
        return {ins.opcode}
    body = module.fusion_body(ins)
    return {i.opcode for i in body.instructions} if body is not None else set()


def _is_matmul(ops: set[str]) -> bool:
    return bool(ops & {"dot", "convolution"})


def attention_roles(module: HloModule) -> dict[str, tuple[str, str]]:
    """instruction name -> (role, scores op name) for every scores -> softmax -> context chain of the
    module's top-level computations; role is ``scores``, ``softmax`` or ``context``."""
    roles: dict[str, tuple[str, str]] = {}
    comp_roles = module.computation_roles()
    for cname, comp in module.computations.items():
        if comp_roles.get(cname) not in ("entry", "control"):
            continue
        opcodes = {i.name: _body_opcodes(i, module) for i in comp.instructions}
        users: dict[str, list[Instruction]] = {}
        for ins in comp.instructions:
            for name in ins.operand_names:
                users.setdefault(name, []).append(ins)
        for head in comp.instructions:
            if not _is_matmul(opcodes[head.name]) or head.shape.is_tuple or len(head.shape.dims or ()) < 3:
                continue
            try:
                dims = matmul_dims(head, module)
            except (ValueError, IndexError, KeyError):
                dims = None
            if not dims or dims["batch"] <= 1:
                continue
            chain, context = _softmax_chain(head, users, opcodes)
            ops = set().union(*(opcodes[n] for n in chain)) if chain else set()
            ops |= set().union(*(opcodes[c] for c in context)) if context else set()
            if not context or "exponential" not in ops | opcodes[head.name] or "reduce" not in ops:
                continue
            roles.setdefault(head.name, ("scores", head.name))
            for name in chain:
                roles.setdefault(name, ("softmax", head.name))
            for name in context:
                roles.setdefault(name, ("context", head.name))
    return roles


def _softmax_chain(head: Instruction, users: dict, opcodes: dict) -> tuple[list[str], list[str]]:
    """Non-matmul ops reachable from ``head`` before a matmul, and the matmuls reached (not head)."""
    chain: list[str] = []
    context: list[str] = []
    seen = {head.name}
    todo = [head.name]
    while todo and len(chain) <= MAX_CHAIN_OPS:
        for user in users.get(todo.pop(), ()):
            if user.name in seen:
                continue
            seen.add(user.name)
            if _is_matmul(opcodes[user.name]):
                context.append(user.name)
            elif user.opcode not in ("tuple", "get-tuple-element", "while", "conditional", "call") \
                    and not user.opcode.endswith("-start"):
                chain.append(user.name)
                todo.append(user.name)
    if len(chain) > MAX_CHAIN_OPS:
        return [], []
    return chain, context
