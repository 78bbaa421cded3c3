"""Which dump module is which traced program.

Names repeat in a dump (a recompile, helpers jitted at init), so a name alone never picks a module:
- by program id: XLA names dump files ``module_<unique id>`` and the trace calls the same id
  ``program_id``; within one process the id is the program. The module's ops must still agree with
  the traced ops (most traced op names among its instructions), since ids restart in every process.
- by content otherwise (a dump from another run of the same script): the module of that name holding
  every traced op name, and the closest one (Jaccard over op names) when several do; a tie is
  ambiguous and joins nothing.
A traced program that matches no module gets a warning and no dump numbers; dump modules that match
no traced program are listed in one note and ignored. Without a trace, the program with the most FLOPs
is analysed (of several compiles of it, the latest: the highest module id) unless ``program`` names
another, and the rest are listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ...errors import InputError
from .dump import DumpModule
from .op_categories import COMMAND_BUFFER_NAME

# By id the traced names only confirm the process: tolerate a few names the dump prints differently.
_ID_CONFIRM = 0.9


class ProgramSelectionError(InputError):
    """``program`` names no module of the dump, or the dump holds no program."""


@dataclass(frozen=True)
class DumpMatch:
    """``by_program``: (module name, program_id) of the op table -> its dump module.
    ``table``: one row per dump module (module, module_id, file, program_id, matched_by, flops)."""

    by_program: dict
    table: pd.DataFrame
    notes: tuple[str, ...] = field(default_factory=tuple)


def _scores(traced: set, dm: DumpModule) -> tuple[float, float]:
    """(share of traced op names the module has, Jaccard of traced and module op names)."""
    inter = len(traced & dm.op_names)
    contained = len(traced & dm.instruction_names)
    union = len(traced | dm.op_names)
    return contained / max(len(traced), 1), inter / max(union, 1)


def _table(dump: tuple[DumpModule, ...], matched: dict[int, tuple[str, str]]) -> pd.DataFrame:
    rows = []
    for i, dm in enumerate(dump):
        pid, how = matched.get(i, ("", ""))
        rows.append((dm.name, -1 if dm.module_id is None else dm.module_id, str(dm.path or ""), pid, how,
                     dm.total_flops))
    return pd.DataFrame(rows, columns=["module", "module_id", "file", "program_id", "matched_by", "flops"])


def _summary(dump: tuple[DumpModule, ...], idx: list[int]) -> str:
    counts: dict[str, int] = {}
    for i in idx:
        counts[dump[i].name] = counts.get(dump[i].name, 0) + 1
    return ", ".join(n + (f" x{c}" if c > 1 else "") for n, c in counts.items())


def _instruction_names(names: pd.Series) -> set[str]:
    """The traced op names a dump can hold: not an unknown op, nor a CUDA-graph replay (no instruction)."""
    return {n for n in set(names.astype(str)) - {"<unknown op>"} if not COMMAND_BUFFER_NAME.match(n)}


def match_traced(dump: tuple[DumpModule, ...], op_table: pd.DataFrame) -> DumpMatch:
    """Match dump modules to the programs of a measured op table (columns module, program_id, op_name)."""
    notes: list[str] = []
    cut = [i for i, dm in enumerate(dump) if not dm.has_program]
    for i in cut:
        notes.append(f"HLO dump module {dump[i].label} is cut before its ENTRY computation (truncated dump): "
                     "it has no program and is ignored")
    usable = [i for i in range(len(dump)) if dump[i].has_program]
    named = op_table[op_table["module"].astype(str) != ""]
    traced = named.groupby([named["module"].astype(str), named["program_id"].astype(str)])["op_name"].agg(
        _instruction_names)
    by_program, matched = {}, {}
    for (name, pid), ops in traced.items():
        same_name = [i for i in usable if dump[i].name == name]
        if not same_name or not ops:
            continue
        by_id = [i for i in same_name if pid.isdigit() and dump[i].module_id == int(pid)]
        # Several dumps in one dir may share an id: the one whose ops agree best.
        confirmed = sorted(((j, -i) for i in by_id for c, j in [_scores(ops, dump[i])] if c >= _ID_CONFIRM),
                           reverse=True)
        if confirmed:
            i = -confirmed[0][1]
            by_program[(name, pid)], matched[i] = dump[i], (pid, "program id")
            continue
        scored = [(i, *_scores(ops, dump[i])) for i in same_name]
        full = sorted(((j, i) for i, c, j in scored if c == 1.0), reverse=True)
        program = f"{name}({pid})" if pid else name
        if full and (len(full) == 1 or full[0][0] > full[1][0]):
            i = full[0][1]
            by_program[(name, pid)], matched[i] = dump[i], (pid, "content")
            if by_id:
                notes.append(f"dump module {dump[by_id[0]].label} has the id of the traced {program} but not its "
                             f"ops (a dump of another process?); matched {dump[i].label} by its ops instead")
        elif full:
            notes.append(f"traced program {program}: {len(full)} dump modules named {name} fit its ops equally "
                         f"({', '.join(dump[i].label for _, i in full)}); none is used (dump and trace of "
                         "different processes?)")
        else:
            best = max(scored, key=lambda t: t[1])
            notes.append(f"traced program {program} does not match its dump module{'s' if len(scored) > 1 else ''} "
                         f"{', '.join(dump[i].label for i, _, _ in scored)} (at best {best[1]:.0%} of its "
                         f"{len(ops)} traced ops are in it): is the dump from another program? Its FLOPs and "
                         "bytes are not used")
    if usable and not by_program:
        programs = ", ".join(f"{n}({p})" if p else n for n, p in traced.index[:5])
        notes.append(f"the HLO dump ({len(usable)} modules: {_summary(dump, usable)}) matches none of the traced "
                     f"programs ({programs or 'none named'}): FLOPs, bytes and layouts come from the trace only")
    elif len(matched) < len(usable):
        rest = [i for i in usable if i not in matched]
        notes.append(f"{len(rest)} HLO dump modules are not among the traced programs and were ignored: "
                     f"{_summary(dump, rest)}")
    return DumpMatch(by_program, _table(dump, matched), tuple(notes))


def choose_program(dump: tuple[DumpModule, ...], program: str | None = None) -> DumpMatch:
    """Without a trace: the module to analyse (``program`` by name, ``name(id)`` or ``module_NNNN``;
    else the most FLOPs), with the others listed in a note."""
    usable = [i for i, dm in enumerate(dump) if dm.has_program]
    cut_note = [f"HLO dump module {dm.label} is cut before its ENTRY computation (truncated dump): it has no "
                "program and is ignored" for dm in dump if not dm.has_program] if usable else []
    if not usable:  # only texts cut before ENTRY: no program; analysed only when the user names one
        if not program or not any(_names(dm, program) for dm in dump):
            raise ProgramSelectionError(
                f"{dump[0].label}: the HLO text is cut before its ENTRY computation (truncated dump), so there is "
                f"no program to analyse; --program {dump[0].name} analyses the computations it holds anyway")
        usable = list(range(len(dump)))
        cut_note = [f"{dump[0].label}: the HLO text ends before its ENTRY computation (truncated dump); analysing "
                    "the computations it holds, the predicted step covers only them"]
    candidates = usable
    if program:
        candidates = [i for i in usable if _names(dump[i], program)]
        if not candidates:
            names = ", ".join(sorted({dump[i].name for i in usable}))
            raise ProgramSelectionError(f"program {program!r}: no such module in the HLO dump; modules: {names}")
    # The program with the most FLOPs; of its recompiles (same name), the latest, which replaced the others.
    top = max(candidates, key=lambda i: (dump[i].total_flops, -i))
    chosen = max((i for i in candidates if dump[i].name == dump[top].name),
                 key=lambda i: (-1 if dump[i].module_id is None else dump[i].module_id, dump[i].total_flops, -i))
    notes = []
    if len(usable) > 1:
        rest = [i for i in usable if i != chosen]
        why = f"named by program={program!r}" if program else "the program with the most FLOPs (its latest compile)"
        notes.append(f"the HLO dump holds {len(usable)} programs; analysing {dump[chosen].label}, {why}. Others: "
                     f"{_summary(dump, rest)} (pick one with --program NAME)")
    pid = "" if dump[chosen].module_id is None else str(dump[chosen].module_id)
    how = "program argument" if program else "most FLOPs" if len(usable) > 1 else "only module"
    return DumpMatch({(dump[chosen].name, ""): dump[chosen]}, _table(dump, {chosen: (pid, how)}),
                     tuple(cut_note + notes))


def _names(dm: DumpModule, program: str) -> bool:
    """``program`` names ``dm`` (by name, label, ``name(id)`` or ``module_NNNN``)."""
    return program in (dm.name, dm.label, _with_id(dm), f"module_{dm.module_id or 0:04d}")


def _with_id(dm: DumpModule) -> str:
    return f"{dm.name}({dm.module_id})" if dm.module_id is not None else dm.name
