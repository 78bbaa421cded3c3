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

from .hlo_instruction import SECTION_HEADERS, Instruction, InstructionReader, parse_instruction
from .hlo_replica_groups import parse_mesh_axes, parse_replica_groups, parse_source_target_pairs
from .hlo_shapes import Shape, parse_shape
from .hlo_tokens import HloParseError, depth

__all__ = [
    "HloParseError", "Shape", "Instruction", "Computation", "HloModule", "parse_shape",
    "parse_hlo_module", "parse_hlo_file", "parse_instruction", "find_hlo_dumps",
    "parse_replica_groups", "parse_mesh_axes", "parse_source_target_pairs",
]


@dataclass(frozen=True)
class Computation:
    name: str
    is_entry: bool
    instructions: tuple[Instruction, ...]

    @cached_property
    def by_name(self) -> dict:
        return {ins.name: ins for ins in self.instructions}

    @property
    def root(self) -> Instruction | None:
        for ins in self.instructions:
            if ins.is_root:
                return ins
        return self.instructions[-1] if self.instructions else None


@dataclass(frozen=True)
class HloModule:
    """A parsed module. ``truncated`` is True when the text ended inside a computation."""

    name: str
    computations: dict
    entry: str
    is_scheduled: bool
    source: str = "<string>"
    truncated: bool = False
    _by_name: dict = field(default_factory=dict, repr=False, compare=False)

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
        return tuple((local.get(n) or self._by_name[n]).shape for n in instr.operand_names)

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
                             ins.attrs.get("kind", ""), comp.is_entry))
        cols = ["computation", "name", "opcode", "dtype", "dims", "result_bytes", "layout",
                "memory_space", "op_name", "source_file", "source_line", "calls", "kind", "is_entry"]
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
        self.ends_cleanly = text.endswith("\n")
        self.strict = strict

    def run(self) -> HloModule:
        name, entry, scheduled = "", "", False
        comps: dict[str, Computation] = {}
        current: tuple[str, bool, int] | None = None
        body: list[tuple[Instruction, int]] = []
        section = None
        lines, i = self.lines, 0
        while i < len(lines):
            line = lines[i]
            i += 1
            lineno, stripped = i, line.strip()
            if current is not None:
                if stripped == "}":
                    self.check_operands(body)
                    comps[current[0]] = Computation(current[0], current[1],
                                                    tuple(ins for ins, _ in body))
                    current, body = None, []
                elif stripped:
                    # Attributes may span lines (frontend_attributes with a newline inside):
                    # join lines until the brackets balance.
                    level = depth(line)
                    while level > 0 and i < len(lines):
                        level += depth(lines[i])
                        line += "\n" + lines[i]
                        i += 1
                    if level > 0:
                        raise self.error(lineno, "unbalanced brackets at the end of the text "
                                                 "(truncated line?)")
                    body.append((self.instruction(line, lineno, current[0]), lineno))
                continue
            if not stripped:
                section = None
            elif stripped.startswith("HloModule"):
                m = re.match(r"HloModule\s+([^\s,]+)", stripped)
                if not m:
                    raise self.error(lineno, "HloModule header without a name")
                name = m.group(1)
                scheduled = "is_scheduled=true" in stripped
            elif stripped in SECTION_HEADERS:
                section = stripped
            elif section and re.match(r"\d+\s", stripped):
                key, _, value = stripped.partition(" ")
                self.tables[section][int(key)] = value.strip()
            elif stripped.endswith("{") and not line[0].isspace():
                is_entry = stripped.startswith("ENTRY ")
                head = stripped[6:].lstrip() if is_entry else stripped
                cname = re.split(r"[\s(]", head, maxsplit=1)[0].lstrip("%")
                if not cname or cname == "{":
                    raise self.error(lineno, "computation header without a name")
                if is_entry:
                    entry = cname
                current, body = (cname, is_entry, lineno), []
            else:
                raise self.error(lineno, f"expected a computation header, got {stripped[:60]!r}")
        truncated = current is not None
        if truncated and not self.ends_cleanly:
            raise self.error(len(self.lines), "the last line is cut (truncated text)")
        if truncated:
            msg = (f"{self.source}:{len(self.lines)}: text ends inside computation "
                   f"%{current[0]} (opened at line {current[2]}); truncated dump?")
            if self.strict:
                raise HloParseError(msg)
            warnings.warn(msg + " Keeping the instructions read so far.", stacklevel=3)
            comps[current[0]] = Computation(current[0], current[1], tuple(i for i, _ in body))
        if not comps:
            raise self.error(len(self.lines), "no computation found")
        if not entry and self.strict:
            raise self.error(len(self.lines), "no ENTRY computation")
        by_name: dict[str, Instruction] = {}
        for comp in comps.values():
            for ins in comp.instructions:
                by_name.setdefault(ins.name, ins)
        return HloModule(name or Path(self.source).name, comps, entry, scheduled, self.source,
                         truncated, by_name)

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
    path = Path(path)
    return parse_hlo_module(path.read_text(encoding="utf-8"), str(path), strict)


def find_hlo_dumps(directory) -> list[Path]:
    """The ``*after_optimizations.txt`` modules under ``directory`` (recursive), without the
    ``-buffer-assignment``/``-memory-usage-report``/``-live-range`` reports."""
    directory = Path(directory)
    if directory.is_file():
        return [directory] if directory.name.endswith("after_optimizations.txt") else []
    return sorted(p for p in directory.rglob("*after_optimizations.txt") if p.is_file())


def find_hlo_dumps(directory) -> list[Path]:
    """The ``*after_optimizations.txt`` modules under ``directory`` (recursive), without the
    ``-buffer-assignment``/``-memory-usage-report``/``-live-range`` reports."""
    directory = Path(directory)
    if directory.is_file():
        return [directory] if directory.name.endswith("after_optimizations.txt") else []
    return sorted(p for p in directory.rglob("*after_optimizations.txt") if p.is_file())
