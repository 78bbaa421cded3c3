"""How many times each top-level computation runs per execution of the program (HLO-only mode).

Without a trace nothing counts executions, so the HLO must: a ``while`` body runs its trip count
times per run of its caller — ``backend_config={"known_trip_count":{"n":"32"}}`` (XLA's
WhileLoopBackendConfig, set by the loop analysis), else read from the loop condition
(``compare(counter, constant)``, assuming a counter from 0 by 1), else once (and a note says so).
Nested loops multiply. A ``conditional`` runs one branch: each branch computation is tagged with
``conditional=branch`` so the analysis can keep only the most expensive one (an upper bound).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from ...parsers.hlo_text import HloModule, Instruction
from .kernel_costs import backend_json

_CONSTANT = re.compile(r"constant\((-?\d+)\)")


@dataclass(frozen=True)
class Runs:
    """``runs``: executions per program run; ``branches``: ``cond=i`` tags of the conditional branches it
    sits in, outermost first, ';'-joined ('' outside any); ``note``: how a trip count was found."""

    runs: float
    branches: str = ""
    note: str = ""


def _condition_trips(module: HloModule, instr: Instruction) -> int | None:
    """Trips from ``ROOT compare(counter, constant), direction=LT|LE`` (or the mirrored GT|GE)."""
    called = instr.attrs.get("condition", "").strip().lstrip("%")
    comp = module.computations.get(called)
    root = comp.root if comp is not None else None
    if root is None or root.opcode != "compare" or len(root.operand_names) != 2:
        return None
    consts = [comp.by_name.get(n) for n in root.operand_names]
    values = [int(m.group(1)) if c is not None and c.opcode == "constant" and (m := _CONSTANT.search(c.text))
              else None for c in consts]
    direction = root.attrs.get("direction", "")
    if values[1] is not None and values[0] is None:
        limit, strict = values[1], direction == "LT"
        ok = direction in ("LT", "LE")
    elif values[0] is not None and values[1] is None:
        limit, strict = values[0], direction == "GT"
        ok = direction in ("GT", "GE")
    else:
        return None
    return max(limit if strict else limit + 1, 0) if ok else None


def trip_count(module: HloModule, instr: Instruction) -> tuple[int | None, str]:
    """(trips of a ``while``, how it was found); None when neither the config nor the condition says."""
    n = backend_json(instr).get("known_trip_count", {}).get("n")
    try:
        if n is not None:
            return int(n), "known_trip_count"
    except (TypeError, ValueError):
        pass
    trips = _condition_trips(module, instr)
    if trips is not None:
        return trips, "loop condition (counter from 0, step 1)"
    return None, ""


def computation_runs(module: HloModule) -> dict[str, Runs]:
    """Runs per program run of ENTRY and every computation reached from it through while/conditional/call."""
    out: dict[str, Runs] = {}
    if not module.entry or module.entry not in module.computations:
        return out
    todo = [(module.entry, Runs(1.0))]
    while todo:
        name, here = todo.pop()
        if name in out or name not in module.computations:
            continue  # a computation called from two places keeps its first count
        out[name] = here
        for ins in module.computations[name].instructions:
            if ins.opcode == "while":
                trips, how = trip_count(module, ins)
                note = (f"runs {trips}x per run of {name} ({ins.name}: {how})" if trips is not None else
                        f"{ins.name}: trip count unknown, counted once")
                trips = 1 if trips is None else trips
                body = ins.attrs.get("body", "").strip().lstrip("%")
                cond = ins.attrs.get("condition", "").strip().lstrip("%")
                todo.append((body, Runs(here.runs * trips, here.branches, note)))
                todo.append((cond, Runs(here.runs * (trips + 1), here.branches, note)))
            elif ins.opcode == "conditional":
                for i, branch in enumerate(ins.called_computations()):
                    tag = f"{ins.name}={i}"
                    todo.append((branch, Runs(here.runs, f"{here.branches};{tag}".lstrip(";"), here.note)))
            elif ins.opcode == "call":
                for called in ins.called_computations():
                    todo.append((called, here))
    return out


def keep_costliest_branches(ops: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """HLO-only ops (columns ``branches``, ``predicted_s_per_step``, ``occurrences_per_step``, ``cost_note``):
    of each conditional, only the branch with the most predicted time per step keeps its counts; the others'
    rows run 0 times. Innermost conditionals first, so an outer branch is priced with its inner choice.
    Returns the ops and one note per conditional (the cost is an upper bound)."""
    ops = ops.copy()
    tags = ops["branches"].fillna("").astype(str)
    conds = {}
    for path in tags.unique():
        for depth, tag in enumerate(t for t in path.split(";") if t):
            cond, _, _ = tag.rpartition("=")
            conds[cond] = max(conds.get(cond, 0), depth)
    notes = []
    for cond in sorted(conds, key=conds.get, reverse=True):
        parts = tags.str.split(";")
        branch = parts.map(lambda p, c=cond: next((t.rpartition("=")[2] for t in p if t.rpartition("=")[0] == c),
                                                  None))
        inside = branch.notna()
        cost = ops.loc[inside, "predicted_s_per_step"].fillna(0.0).groupby(branch[inside]).sum()
        if cost.empty:
            continue
        best = cost.idxmax()
        losing = inside & (branch != best)
        ops.loc[losing, ["occurrences_per_step", "predicted_s_per_step"]] = 0.0
        ops.loc[losing, "occurrences"] = 0
        label = f"upper bound: {cond} priced at its costliest branch ({best} of {len(cost)})"
        winning = inside & (branch == best)
        ops.loc[winning, "cost_note"] = [f"{n}; {label}" if n else label for n in ops.loc[winning, "cost_note"]]
        notes.append(f"conditional {cond}: counted as its most expensive branch (branch {best} of {len(cost)}, "
                     f"{cost.max():.3g} s per step predicted): an upper bound, the branch taken is not known")
    return ops, notes
