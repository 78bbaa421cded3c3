"""How many times each top-level computation runs per execution of the program (HLO-only mode).

Without a trace nothing counts executions, so the HLO must: a ``while`` body runs its trip count
times per run of its caller — ``backend_config={"known_trip_count":{"n":"32"}}`` (XLA's
WhileLoopBackendConfig, set by the loop analysis), else read from the loop condition
(``compare(counter, constant)``, assuming a counter from 0 by 1), else once (and a note says so).
Nested loops multiply. A trip count must be a whole number from 0 to 2^31 - 1 (JAX's scan and fori_loop
count in int32), and so must the runs of a nested body: anything else (a list, 1e400, a 400-digit or
negative count, INT64_MAX) is unknown, counted once, with a warning (``loop_warnings``). A ``conditional``
runs one branch: each branch computation is tagged with ``conditional=branch`` so the analysis can keep only
the most expensive one (an upper bound).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pandas as pd

from ...parsers.hlo_text import HloModule, Instruction
from ...units import format_seconds
from .kernel_costs import backend_json

_CONSTANT = re.compile(r"constant\((-?\d{1,19})\)")
MAX_TRIPS = 2**31 - 1


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


def _shown(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return repr(text if len(text) <= 24 else text[:20] + "...")


def _known_trips(instr: Instruction) -> tuple[int | None, str]:
    """(``known_trip_count.n`` of the backend config, None without one; what is wrong with it, '' if nothing)."""
    known = backend_json(instr).get("known_trip_count")
    n = known.get("n") if isinstance(known, dict) else known
    if n is None:
        return None, ""
    if isinstance(n, str) and re.fullmatch(r"-?[0-9]{1,19}", n):
        n = int(n)  # proto JSON prints int64 as a string
    if isinstance(n, bool) or not isinstance(n, int):
        return None, f"known_trip_count {_shown(n)} is not a whole number"
    if not 0 <= n <= MAX_TRIPS:
        return None, f"known_trip_count {n} is outside 0..{MAX_TRIPS}"
    return n, ""


def trip_count(module: HloModule, instr: Instruction) -> tuple[int | None, str]:
    """(trips of a ``while``, how it was found); None when neither the config nor the condition gives a count
    in 0..MAX_TRIPS. A damaged config falls back to the condition."""
    trips, problem = _known_trips(instr)
    if trips is not None:
        return trips, "known_trip_count"
    trips = _condition_trips(module, instr)
    if trips is not None and trips <= MAX_TRIPS:
        return trips, "loop condition (counter from 0, step 1)" + (f"; {problem}" if problem else "")
    return None, problem or (f"loop condition allows {trips} trips, past {MAX_TRIPS}" if trips else "")


def loop_warnings(module: HloModule) -> list[str]:
    """One line per ``while`` whose trip count was refused and not recovered from its condition."""
    out = []
    for comp in module.computations.values():
        for ins in comp.instructions:
            if ins.opcode == "while":
                (trips, how), problem = trip_count(module, ins), _known_trips(ins)[1]
                if problem or trips is None and how:
                    out.append(f"%{ins.name}: {problem or how}: " + (
                        f"{trips} trips read from its loop condition" if trips is not None
                        else "trip count unknown, its body counted once per run"))
    return out


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
                if trips is not None and here.runs * trips > MAX_TRIPS:  # nested counts past any real program's
                    trips, how = None, f"{here.runs:.0f} x {trips} runs per program run, past {MAX_TRIPS}"
                note = (f"runs {trips}x per run of {name} ({ins.name}: {how})" if trips is not None else
                        f"{ins.name}: trip count unknown" + (f" ({how})" if how else "") + ", counted once")
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
                     f"{format_seconds(cost.max())} per step predicted): an upper bound, the branch taken is not known")
    return ops, notes
