"""When each buffer-assignment value is live, on the scheduled entry computation of an HLO module.

XLA writes the live ranges itself (``*-live-range.txt``), but recordings drop that file; the scheduled
HLO text is enough to rebuild them the way XLA's HloLiveRange does for the entry computation: a value is
live from the position of its defining instruction to its last use (inclusive), to the end of the program
when it is live out. Users reached through an alias (bitcast, get-tuple-element, tuple) count as users of
the value. An instruction of a called computation (fusion body, loop body, branch) is placed at its
caller's position: the whole loop is one moment here, where XLA's flattened schedule has many.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...parsers.hlo_text import HloModule

# Instructions that name part or all of another value without a buffer of their own.
ALIASING = frozenset({"bitcast", "get-tuple-element", "tuple"})
BACKWARD_MARK = "transpose("  # JAX names the ops of a gradient's backward pass transpose(jvp(...))/...


@dataclass(frozen=True)
class Schedule:
    position: dict  # instruction name -> position in the entry schedule (called ones: their caller's)
    last_use: dict  # instruction name -> latest position any user (through aliases) reads it
    backward_use: frozenset  # instructions some backward-pass instruction reads (through aliases)
    live_out: frozenset  # instructions whose result leaves the program (the root, its tuple elements)
    length: int  # instructions in the entry schedule: the 'end of program' position
    # Instructions of called computations (loop bodies...) -> the entry instruction that runs them, for those
    # whose result leaves their computation (its root, or an element of its root tuple): a scan's stacked
    # outputs are the loop's result, kept or not as the loop's result is.
    carried_by: dict = field(default_factory=dict)


def schedule_of(module: HloModule) -> Schedule:
    entry = module.computations.get(module.entry)
    seq = entry.instructions if entry is not None else ()
    position = {ins.name: k for k, ins in enumerate(seq)}
    carried_by: dict[str, str] = {}
    for k, ins in enumerate(seq):
        for name in _called_instructions(module, ins):
            position.setdefault(name, k)
        for comp in _called_computations(module, ins):
            for name in _result_of(module, comp):
                carried_by.setdefault(name, ins.name)
    last_use: dict[str, int] = {}
    backward: set[str] = set()
    for k in range(len(seq) - 1, -1, -1):  # reverse: an alias's users are known before its operands
        ins = seq[k]
        passes = ins.opcode in ALIASING
        reads_back = BACKWARD_MARK in ins.op_name or (passes and ins.name in backward)
        for op in ins.operand_names:
            last_use[op] = max(last_use.get(op, -1), last_use.get(ins.name, k) if passes else k)
            if reads_back:
                backward.add(op)
    live_out = _result_of(module, entry) if entry is not None else set()
    return Schedule(position, last_use, frozenset(backward), frozenset(live_out), len(seq), carried_by)


def _result_of(module: HloModule, comp) -> set[str]:
    """The instructions whose values are ``comp``'s result: its root, through tuples and other aliases."""
    out: set[str] = set()
    stack = [comp.root] if comp.root is not None else []
    while stack:
        ins = stack.pop()
        if ins.name in out:
            continue
        out.add(ins.name)
        if ins.opcode in ALIASING:
            stack.extend(_known(module, ins.operand_names))
    return out


def _known(module: HloModule, names) -> list:
    out = []
    for name in names:
        try:
            out.append(module.instruction(name))
        except KeyError:
            continue
    return out


def _called_computations(module: HloModule, ins) -> list:
    """Every computation ``ins`` runs, nested calls included (each once)."""
    out, seen, todo = [], set(), list(ins.called_computations())
    while todo:
        name = todo.pop()
        comp = module.computations.get(name)
        if comp is None or name in seen:
            continue
        seen.add(name)
        out.append(comp)
        for inner in comp.instructions:
            todo.extend(inner.called_computations())
    return out


def _called_instructions(module: HloModule, ins) -> list[str]:
    return [inner.name for comp in _called_computations(module, ins) for inner in comp.instructions]


def live_ranges(values, schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) per row of a buffer-assignment values frame, inclusive; a value whose bytes another value
    of its allocation takes over at its last use (an in-place update) ends one position earlier, and an
    instruction missing from the module is live throughout (nothing says when it is free)."""
    n = schedule.length
    start = np.array([schedule.position.get(i, 0) for i in values["instruction"]], dtype=np.int64)
    end = np.array([n if i in schedule.live_out or i not in schedule.position
                    else max(schedule.last_use.get(i, schedule.position[i]), schedule.position[i])
                    for i in values["instruction"]], dtype=np.int64)
    starts: dict[tuple, list[int]] = {}
    alloc, lo = values["allocation"].to_numpy(), values["offset_bytes"].to_numpy()
    hi = lo + values["size_bytes"].to_numpy()
    for j in range(len(values)):
        starts.setdefault((int(alloc[j]), int(start[j])), []).append(j)
    for j in range(len(values)):
        taken = any(lo[k] < hi[j] and lo[j] < hi[k] for k in starts.get((int(alloc[j]), int(end[j])), ()) if k != j)
        if taken and end[j] > start[j]:
            end[j] -= 1
    return start, end


def peak_position(start: np.ndarray, end: np.ndarray, sizes: np.ndarray, length: int) -> int:
    """The last schedule position where the most bytes are live, as XLA's live-range report picks it (0 for an
    empty program)."""
    live = np.zeros(length + 2, dtype=np.float64)
    np.add.at(live, np.clip(start, 0, length + 1), sizes)
    np.add.at(live, np.clip(end + 1, 0, length + 1), -sizes)
    if not length:
        return 0
    per_position = np.cumsum(live)[: length + 1]
    return int(np.flatnonzero(per_position == per_position.max())[-1])
