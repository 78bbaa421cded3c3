"""Parser for XLA HLO text dumps (``*after_optimizations.txt``: TPU, GPU and CPU): modules and computations.

One pass over the lines: the module header, the stack-frame index tables, then each computation's
instruction lines (read by :mod:`.hlo_instruction`). A 300 kB module parses in a few tens of
milliseconds. Shapes live in :mod:`.hlo_shapes`, replica groups in :mod:`.hlo_replica_groups`;
their public names are re-exported here, the parser's entry point.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from .hlo_call_graph import call_cycles
from .hlo_instruction import SECTION_HEADERS, Instruction, InstructionReader, parse_instruction
from .hlo_replica_groups import (
    MeshAxis,
    ReplicaGroupList,
    parse_mesh_axes,
    parse_replica_group_list,
    parse_replica_groups,
    parse_source_target_pairs,
)
from .hlo_shapes import Shape, parse_shape
from .hlo_tokens import Brackets, HloParseError, closing_attrs, split_top, unquote
from .input_files import read_input_bytes
from .storage import as_path

# Lines that start a statement: a continuation line (string or constant rows) never looks so.
_NEXT_STATEMENT = re.compile(r"(?:\s+(?:ROOT\s+)?%[\w.\-]+ = \S|\}$|ENTRY\s|HloModule\s)")
MAIN_THREAD = "main"  # XLA's HloInstruction::kMainExecutionThread

__all__ = [
    "HloParseError", "Shape", "Instruction", "Computation", "HloModule", "parse_shape",
    "parse_hlo_module", "parse_hlo_file", "parse_instruction", "find_hlo_dumps",
    "parse_replica_groups", "parse_replica_group_list", "ReplicaGroupList", "MeshAxis",
    "parse_mesh_axes", "parse_source_target_pairs",
]


@dataclass(frozen=True)
class Computation:
    name: str
    is_entry: bool
    instructions: tuple[Instruction, ...]
    execution_thread: str = MAIN_THREAD  # "sparsecore" etc. for computations printed with one

    @cached_property
    def by_name(self) -> dict:
        return {ins.name: ins for ins in self.instructions}

    @property
    def root(self) -> Instruction | None:
        for ins in self.instructions:
            if ins.is_root:
                return ins
        return self.instructions[-1] if self.instructions else None

    def __repr__(self) -> str:
        return f"<Computation {self.name}: {len(self.instructions)} instructions{' (ENTRY)' if self.is_entry else ''}>"


@dataclass(frozen=True)
class HloModule:
    """A parsed module. ``truncated`` is True when the text ended inside a computation; ``call_cycles``: each
    computation that calls itself (through others) -> the cycle, as text (a damaged dump; walkers skip them)."""

    name: str
    computations: dict
    entry: str
    is_scheduled: bool
    source: str = "<string>"
    truncated: bool = False
    _by_name: dict = field(default_factory=dict, repr=False, compare=False)
    call_cycles: dict = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:  # a module prints as hundreds of kB of instructions otherwise
        n = sum(len(c.instructions) for c in self.computations.values())
        return (f"<HloModule {self.name}: {len(self.computations)} computations, {n} instructions"
                f"{', truncated' if self.truncated else ''}; from {self.source}>")

    def instruction(self, name: str) -> Instruction:
        ins = self._by_name.get(name.lstrip("%"))
        if ins is None:
            raise KeyError(f"no instruction {name!r} in module {self.name}")
        return ins

    def fusion_body(self, instr: Instruction) -> Computation | None:
        """The computation a ``fusion`` (or ``call``/``async-start``) instruction calls."""
        called = instr.called_computations()
        return self.computations.get(called[0]) if called else None

    def resolve_operand_shapes(self, instr: Instruction) -> tuple[Shape, ...]:
        """Operand shapes: from the line when printed there, else from the operands' definitions."""
        if instr.operand_shapes:
            return instr.operand_shapes
        comp = self.computations.get(instr.computation)
        local = comp.by_name if comp is not None else {}
        found = tuple((local.get(n) or self._by_name[n]).shape for n in instr.operand_names)
        return tuple(s.element(e) for s, e in zip(found, instr.operand_elements)) + found[len(instr.operand_elements):]

    @cached_property
    def _instructions_frame(self) -> pd.DataFrame:
        rows = []
        for comp in self.computations.values():
            for ins in comp.instructions:
                s = ins.shape
                rows.append((comp.name, ins.name, ins.opcode, s.dtype,
                             "(" + ", ".join(str(e) for e in s.elements) + ")" if s.is_tuple
                             else ",".join(map(str, s.dims)),
                             s.padded_bytes, s.layout_str, s.memory_space, ins.op_name,
                             ins.source_file, ins.source_line, ins.attrs.get("calls", "").lstrip("%"),
                             ins.attrs.get("kind", ""), comp.is_entry, comp.execution_thread))
        cols = ["computation", "name", "opcode", "dtype", "dims", "result_bytes", "layout",
                "memory_space", "op_name", "source_file", "source_line", "calls", "kind", "is_entry",
                "execution_thread"]
        df = pd.DataFrame(rows, columns=cols)
        df["source_line"] = df["source_line"].astype("Int64")
        return df

    def instructions(self) -> pd.DataFrame:
        """One row per instruction over all computations (result_bytes at padded size)."""
        return self._instructions_frame.copy()

    def computation_roles(self) -> dict[str, str]:
        """Role of each computation: entry, control (while/conditional/call target), fusion,
        async (wrapped by async-start), applied (reducer/comparator), or orphan (called by
        nothing; in a truncated dump an orphan with a single tuple parameter is taken for a
        while body/condition whose caller was cut off, and marked control)."""
        roles = {self.entry: "entry"} if self.entry else {}
        for comp in self.computations.values():
            for ins in comp.instructions:
                for called in ins.called_computations():
                    if ins.opcode == "fusion":
                        role = "fusion"
                    elif ins.opcode in ("while", "conditional", "call"):
                        role = "control"
                    elif ins.opcode == "async-start" or ins.opcode.endswith("-start"):
                        role = "async"
                    else:
                        role = "applied"
                    roles.setdefault(called, role)
        for name, comp in self.computations.items():
            if name in roles:
                continue
            params = [i for i in comp.instructions if i.opcode == "parameter"]
            looks_like_loop = len(params) == 1 and params[0].shape.is_tuple
            roles[name] = "control" if looks_like_loop else "orphan"
        return roles


class _ModuleParser(InstructionReader):
    def __init__(self, text: str, source: str, strict: bool):
        super().__init__(source)
        self.lines = text.splitlines()
        self.strict = strict
        self.cut: list[tuple[int, str]] = []  # why the text looks truncated, and where
        self.module_name, self.entry, self.scheduled = "", "", False
        self.comps: dict[str, Computation] = {}
        self.current: tuple[str, bool, int] | None = None  # the open computation: name, is entry, first line
        self.body: list[tuple[Instruction, int]] = []  # its instructions so far, with their line numbers
        self.section: str | None = None  # the table section (SECTION_HEADERS) being read
        if self.lines and not text.endswith(("\n", "\r")) and closing_attrs(self.lines[-1].strip()) is None:
            # A text that stops mid-line: the last line cannot be trusted, even if it parses.
            self.truncate(len(self.lines), "the last line is cut")
            self.lines.pop()

    def truncate(self, lineno: int, what: str) -> None:
        if self.strict:
            raise self.error(lineno, what)
        self.cut.append((lineno, what))

    def joined(self, i: int, in_computation: bool = True) -> tuple[str, int]:
        """The statement starting at line ``i`` with the lines that close its brackets and strings
        (attributes may hold newlines); returns it and the index of the next line."""
        lines, brackets = self.lines, Brackets()
        parts = [lines[i]]
        brackets.feed(lines[i])
        i += 1
        while not brackets.balanced and brackets.level >= 0 and i < len(lines):
            if in_computation and _NEXT_STATEMENT.match(lines[i]):
                break  # an open bracket or quote ran into the next line: damage, not truncation
            brackets.feed("\n" + lines[i])
            parts.append(lines[i])
            i += 1
        if not brackets.balanced and brackets.level >= 0 and i == len(lines):
            return "", i  # ran into the end of the text
        return "\n".join(parts), i

    def run(self) -> HloModule:
        i = 0
        while i < len(self.lines):
            if self.current is not None:
                i = self.computation_line(i)
            elif self.lines[i].strip().startswith("HloModule"):
                i = self.module_header(i)
            else:
                i = self.top_level_line(i)
        return self.module()

    def computation_line(self, i: int) -> int:
        """Read the statement at line ``i`` inside the open computation; return the next line's index."""
        lineno, stripped = i + 1, self.lines[i].strip()
        closing = closing_attrs(stripped)
        if closing is not None:
            self.check_operands(self.body)
            name, is_entry, _ = self.current
            self.comps[name] = Computation(name, is_entry, tuple(ins for ins, _ in self.body), self.thread(closing))
            self.current, self.body = None, []
            return i + 1
        if not stripped:
            return i + 1
        text, i = self.joined(i)
        if not text:
            self.truncate(lineno, f"unbalanced brackets at the end of the text in %{self.current[0]}")
            return len(self.lines)  # nothing after it can be read
        self.body.append((self.instruction(text, lineno, self.current[0]), lineno))
        return i

    def module_header(self, i: int) -> int:
        """The ``HloModule name, fields...`` header (one per text), possibly on several lines."""
        lineno, stripped, lines = i + 1, self.lines[i].strip(), self.lines
        if self.module_name:
            raise self.error(lineno, "a second HloModule header (one module per text; "
                                     f"the first is {self.module_name})")
        header, i = self.joined(i, in_computation=False)
        while header and i < len(lines) and lines[i].startswith(", "):
            more, i = self.joined(i, in_computation=False)  # fields after a multi-line one
            header += more
        m = re.match(r"HloModule\s+([^\s,]+)", stripped)
        if not header or not m:
            raise self.error(lineno, "HloModule header without a name or with unbalanced brackets")
        self.module_name, self.scheduled = m.group(1), bool(re.search(r"\bis_scheduled=true\b", header))
        return i

    def top_level_line(self, i: int) -> int:
        """A line outside computations: a blank, a table section and its rows, or a computation header."""
        lineno, stripped = i + 1, self.lines[i].strip()
        if not stripped:
            self.section = None
        elif stripped in SECTION_HEADERS:
            self.section = stripped
        elif self.section and re.match(r"\d{1,18}\s", stripped):
            key, _, value = stripped.partition(" ")
            self.tables[self.section][int(key)] = value.strip()
        elif stripped.endswith("{") and not self.lines[i][0].isspace():
            is_entry = stripped.startswith("ENTRY ")
            head = stripped[6:].lstrip() if is_entry else stripped
            cname = re.split(r"[\s(]", head, maxsplit=1)[0].lstrip("%")
            if not cname or cname == "{":
                raise self.error(lineno, "computation header without a name")
            if is_entry:
                self.entry = cname
            self.current, self.body = (cname, is_entry, lineno), []
        else:
            raise self.error(lineno, f"expected a computation header, got {stripped[:60]!r}")
        return i + 1

    def module(self) -> HloModule:
        """The module read, after the checks that only the end of the text allows."""
        comps = self.comps
        if self.current is not None:
            self.truncate(len(self.lines), f"text ends inside computation %{self.current[0]} "
                                           f"(opened at line {self.current[2]})")
            comps[self.current[0]] = Computation(self.current[0], self.current[1], tuple(i for i, _ in self.body))
        if not comps:
            raise self.error(len(self.lines), "no computation found")
        if not self.entry:
            self.truncate(len(self.lines), "no ENTRY computation (XLA prints it last)")
        notes = [f"{self.source}:{self.cut[0][0]}: truncated dump? " + "; ".join(what for _, what in self.cut)
                 + ". Keeping what was read before."] if self.cut else []
        cycles = call_cycles(comps)
        notes += [f"{self.source}: call cycle {cycle} (a damaged dump: XLA's call graphs have none): FLOPs "
                  "through it are unknown, loops on it run once" for cycle in dict.fromkeys(cycles.values())]
        notes += self.notes[:3] + [f"{self.source}: {len(self.notes) - 3} more as above"] * (len(self.notes) > 3)
        for note in notes:
            warnings.warn(note, stacklevel=4)
        by_name: dict[str, Instruction] = {}
        for comp in comps.values():
            for ins in comp.instructions:
                by_name.setdefault(ins.name, ins)
        return HloModule(self.module_name or Path(self.source).name, comps, self.entry, self.scheduled,
                         self.source, bool(self.cut), by_name, cycles)

    def thread(self, attrs: str) -> str:
        """``}, execution_thread="sparsecore"``: the thread a computation runs on (main if absent)."""
        if not attrs:
            return MAIN_THREAD
        for part in split_top(attrs):
            key, _, value = part.partition("=")
            if key.strip() == "execution_thread":
                return unquote(value.strip())
        return MAIN_THREAD

    def check_operands(self, body: list) -> None:
        """Operands come from the same computation; a missing one means a damaged dump."""
        defined = {ins.name for ins, _ in body}
        for ins, lineno in body:
            for name in ins.operand_names:
                if name not in defined:
                    raise self.error(lineno, f"%{ins.name} uses undefined operand %{name}")


def parse_hlo_module(text: str, source: str = "<string>", strict: bool = False) -> HloModule:
    """Parse one module's HLO text.

    A text that stops at a line boundary inside a computation (the shared v6e sample is cut that
    way and has no ENTRY) is kept with ``truncated=True`` and a warning, or raises with
    ``strict=True``. A damaged line (unbalanced brackets, no opcode) always raises.
    """
    return _ModuleParser(text, source, strict).run()


def parse_hlo_file(path, strict: bool = False) -> HloModule:
    """Parse a dump file; a byte that is not UTF-8 is an HloParseError naming its line."""
    data = read_input_bytes(path := as_path(path))  # a regular file within the read limit
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise HloParseError(f"{path}:{line}: not UTF-8 text (byte {data[exc.start]:#04x}); "
                            "expected an HLO text dump") from None
    return parse_hlo_module(text, str(path), strict)


def find_hlo_dumps(directory) -> list[Path]:
    """The ``*after_optimizations.txt`` modules under ``directory`` (recursive), without the
    ``-buffer-assignment``/``-memory-usage-report``/``-live-range`` reports."""
    directory = as_path(directory)
    if directory.is_file():
        return [directory] if directory.name.endswith("after_optimizations.txt") else []
    return sorted(p for p in directory.rglob("*after_optimizations.txt") if p.is_file())
