"""The HLO each capture carries (`/host:metadata`, one optimized module per compiled program, and the
``<module>(<id>).hlo_proto.pb`` files xprof tooling leaves in the run folder).

Every xplane capture holds the module of each program by its program id, so FLOPs, bytes, shapes and
categories never depend on the user having dumped HLO. A program the dump does not cover (or no dump
at all) takes its module from the capture; where a dump module matched a traced program but its ops
differ from the capture's own module of that program, the dump is from another compile: the capture's
module wins and the report says so.
"""

from __future__ import annotations

import pandas as pd

from ...parsers.discovery import hlo_proto_program
from ...parsers.hlo_proto import parse_hlo_proto, parse_hlo_proto_file
from ...parsers.hlo_text import HloParseError
from .dump import DumpModule
from .dump_matching import DumpMatch

CAPTURE_ORIGIN = "capture"


def _traced_programs(op_table: pd.DataFrame) -> set[tuple[str, str]]:
    named = op_table[op_table["module"].astype(str) != ""]
    return set(zip(named["module"].astype(str), named["program_id"].fillna("").astype(str)))


def _carried(spaces, proto_files):
    """(program id, module parser) of every module the capture carries, planes first, then files."""
    for space in spaces:
        for program_id, name, data in space.hlo_protos:
            source = f"{space.path.name}: HLO of {name}({program_id})"
            yield program_id, (lambda d=data, s=source: parse_hlo_proto(d, s))
    for path in proto_files:
        yield hlo_proto_program(path)[0], (lambda p=path: parse_hlo_proto_file(p))


def embedded_modules(spaces, wanted: set[str], notes: list[str], proto_files=()) -> dict[str, DumpModule]:
    """program_id -> module, for the ids in ``wanted`` (parsing only what is traced; hosts repeat them)."""
    out: dict[str, DumpModule] = {}
    for program_id, parse in _carried(spaces, proto_files):
        if program_id not in wanted or program_id in out:
            continue
        try:
            module = parse()
        except HloParseError as exc:
            notes.append(f"{exc}; this program's FLOPs and bytes come from the trace only")
            continue
        out[program_id] = DumpModule(module, None, int(program_id) if program_id.isdigit() else None,
                                     origin=CAPTURE_ORIGIN)
    return out


def with_capture_hlo(match: DumpMatch | None, op_table: pd.DataFrame, spaces, proto_files=()) -> DumpMatch | None:
    """``match`` completed (and checked) with the modules the capture carries."""
    traced = _traced_programs(op_table)
    notes: list[str] = list(match.notes) if match else []
    embedded = embedded_modules(spaces, {pid for _, pid in traced if pid}, notes, proto_files)
    if not embedded:
        return match if match is None else DumpMatch(match.by_program, match.table, tuple(notes))
    by_program = dict(match.by_program) if match else {}
    rows = []
    for name, pid in sorted(traced):
        own = embedded.get(pid)
        if own is None or own.name != name:
            continue
        dumped = by_program.get((name, pid))
        if dumped is not None and dumped.op_names == own.op_names:
            continue  # the dump is this very program: keep it (it also brings memory reports)
        if dumped is not None:
            notes.append(f"dump module {dumped.label} matched the traced {name}({pid}) but its ops differ from "
                         "the HLO the capture carries for that program (another compile?): the capture's module "
                         "is used")
        by_program[(name, pid)] = own
        rows.append((name, -1, "(capture)", pid, "capture HLO", own.total_flops))
    table = match.table if match else pd.DataFrame(columns=["module", "module_id", "file", "program_id",
                                                              "matched_by", "flops"])
    if rows:
        extra = pd.DataFrame(rows, columns=list(table.columns))
        table = extra if table.empty else pd.concat([table, extra], ignore_index=True)
    return DumpMatch(by_program, table, tuple(notes))
