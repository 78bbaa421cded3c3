"""One HLO instruction line: name, result shape, opcode, operands, attributes and metadata.

``%fusion.3 = bf16[32,4096]{1,0} fusion(bf16[32,8192]{1,0} %p.1), kind=kLoop, calls=%fc.3,
metadata={op_name="jit(f)/dot" source_file="m.py" source_line=12}``. Unknown attributes are kept
as raw text in ``Instruction.attrs``; operands carry their shapes in newer dumps only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .hlo_shapes import Shape, parse_shape, shape_end
from .hlo_tokens import QUOTED, Brackets, HloParseError, match_close, split_top, strip_comments, unquote

__all__ = ["Instruction", "InstructionReader", "parse_instruction", "SECTION_HEADERS", "config_too_deep",
           "MAX_CONFIG_DEPTH"]

_METADATA_FIELD = re.compile(rf'(\w+)=({QUOTED}|[^\s}}]+)')
# Source lines and parameter numbers are int32 in practice (XLA's LineNumber, a program with a
# billion parameters); larger values are damage: the line is dropped, the parameter refused.
_MAX_SOURCE_LINE = 2**31 - 1
_MAX_PARAMETER_DIGITS = 9
_OPCODE = re.compile(r"([a-z][a-z0-9\-_]*)\(")
# Index tables printed after the module header; metadata stack_frame_id points into them.
SECTION_HEADERS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
# XLA's backend configs (loop trip counts, GPU/TPU kernel configs) nest a handful of levels; deeper ones are
# damage, refused before a JSON parser recurses through them (Python's stack ends near 1000 levels).
MAX_CONFIG_DEPTH = 64
_CALLED_ATTRS = ("calls", "to_apply", "body", "condition", "branch_computations",
                 "true_computation", "false_computation", "select", "scatter")


@dataclass(frozen=True)
class Instruction:
    """One HLO instruction line. ``attrs`` holds each attribute's raw text."""

    name: str
    opcode: str
    shape: Shape
    operand_names: tuple[str, ...]
    operand_shapes: tuple[Shape, ...]
    attrs: dict
    op_name: str
    source_file: str
    source_line: int | None
    computation: str
    is_root: bool
    text: str = field(repr=False)
    # Per operand, the tuple element it reads (`%fusion.14#0`, newer XLA's short form of a get-tuple-element);
    # -1: the whole result. Empty when no operand names an element.
    operand_elements: tuple[int, ...] = ()

    def called_computations(self) -> tuple[str, ...]:
        """Names of computations this instruction calls (fusion body, reducer, loop body …)."""
        out = []
        for key in _CALLED_ATTRS:
            raw = self.attrs.get(key)
            if raw:
                out.extend(n.strip().lstrip("%") for n in raw.strip("{}").split(",") if n.strip())
        return tuple(out)


class InstructionReader:
    """Reads instruction lines of one source; errors name ``source:line``."""

    def __init__(self, source: str, tables: dict[str, dict[int, str]] | None = None):
        self.source = source
        self.tables = tables if tables is not None else {k: {} for k in SECTION_HEADERS}
        self.notes: list[str] = []  # what was dropped from the lines read, one line each (the parser warns)

    def error(self, lineno: int, what: str) -> HloParseError:
        return HloParseError(f"{self.source}:{lineno}: {what}")

    def instruction(self, line: str, lineno: int, comp: str) -> Instruction:
        s = line.strip()
        is_root = s.startswith("ROOT ")
        if is_root:
            s = s[5:].lstrip()
        eq = s.find(" = ")
        if eq <= 0:
            raise self.error(lineno, f"not an instruction: {s[:60]!r}")
        name, rest = s[:eq].lstrip("%"), s[eq + 3:]
        end = shape_end(rest)
        if end < 0:
            raise self.error(lineno, f"%{name}: cannot read the result shape (truncated line?)")
        shape_text, rest = rest[:end], rest[end:].lstrip()
        m = _OPCODE.match(rest)
        if not m:
            raise self.error(lineno, f"%{name}: no opcode(operands) after the shape")
        opcode = m.group(1)
        close = match_close(rest, m.end() - 1)
        if close < 0:
            raise self.error(lineno, f"%{name}: unbalanced operand list (truncated line?)")
        operands_text, tail = rest[m.end(): close], rest[close + 1:].strip()
        try:
            shape = parse_shape(shape_text)
        except ValueError as exc:
            raise self.error(lineno, f"%{name}: {exc}") from None
        attrs: dict[str, str] = {}
        if tail:
            if not tail.startswith(","):
                raise self.error(lineno, f"%{name}: unexpected text after operands: {tail[:40]!r}")
            if tail.endswith(",") or match_close("(" + tail + ")", 0) != len(tail) + 1:
                raise self.error(lineno, f"%{name}: unbalanced attributes (truncated line?)")
            for part in split_top(tail[1:]):
                key, _, value = part.partition("=")
                attrs[key.strip()] = value.strip()
        if "backend_config" in attrs and config_too_deep(attrs["backend_config"]):
            del attrs["backend_config"]
            self.notes.append(f"{self.source}:{lineno}: %{name}: backend_config nested more than "
                              f"{MAX_CONFIG_DEPTH} levels deep: ignored (read as absent)")
        names, shapes, elements = self.operands(opcode, operands_text, attrs, name, lineno)
        op_name, source_file, source_line = self.metadata(attrs.get("metadata", ""))
        return Instruction(name, opcode, shape, tuple(names),
                           tuple(shapes) if len(shapes) == len(names) else (), attrs, op_name,
                           source_file, source_line, comp, is_root, line,
                           tuple(elements) if any(e >= 0 for e in elements) else ())

    def operands(self, opcode: str, operands_text: str, attrs: dict, name: str, lineno: int) -> tuple[list, list, list]:
        """(operand names, their printed shapes, the tuple element each reads or -1); a parameter's number and
        a constant's literal go to ``attrs`` instead."""
        names, shapes, elements = [], [], []
        if opcode == "parameter":
            number = strip_comments(operands_text).strip()
            if not number.isdigit() or len(number) > _MAX_PARAMETER_DIGITS:
                raise self.error(lineno, f"%{name}: parameter number {operands_text[:40]!r} "
                                         "is not a small non-negative integer")
            attrs["parameter_number"] = number
        elif opcode in ("constant", "iota"):
            if operands_text.strip():
                attrs["literal"] = operands_text.strip()
        else:
            for op in split_top(strip_comments(operands_text)):
                shape_part, _, op_name = op.rpartition(" ")
                ref, hash_, element = op_name.lstrip("%").rpartition("#")  # `%x#1`: element 1 of x's tuple
                tuple_element = bool(hash_) and element.isdigit()
                names.append(ref if tuple_element else op_name.lstrip("%"))
                elements.append(int(element) if tuple_element else -1)
                if shape_part.strip():
                    try:
                        shapes.append(parse_shape(shape_part))
                    except ValueError as exc:
                        raise self.error(lineno, f"%{name}: operand {op!r}: {exc}") from None
        return names, shapes, elements

    def metadata(self, raw: str) -> tuple[str, str, int | None]:
        if not raw:
            return "", "", None
        fields = {k: unquote(v) for k, v in _METADATA_FIELD.findall(raw)}
        source_file, line = fields.get("source_file", ""), fields.get("source_line")
        frame = fields.get("stack_frame_id")
        if not source_file and frame and frame.isdigit() and 0 < len(frame) <= 18:
            source_file, line = self.frame_location(int(frame))
        ok = line is not None and line.isdigit() and line.isascii() and len(line) <= 10
        number = int(line) if ok else None
        return fields.get("op_name", ""), source_file, number if ok and number <= _MAX_SOURCE_LINE else None

    def frame_location(self, frame_id: int) -> tuple[str, str | None]:
        """Innermost frame of a stack_frame_id, through the StackFrames/FileLocations tables."""
        frame = self.tables["StackFrames"].get(frame_id, "")
        loc_id = re.search(r"file_location_id=(\d{1,18})\b", frame)
        loc = self.tables["FileLocations"].get(int(loc_id.group(1)), "") if loc_id else ""
        file_id, line = re.search(r"file_name_id=(\d{1,18})\b", loc), re.search(r"\bline=(\d+)", loc)
        file_name = self.tables["FileNames"].get(int(file_id.group(1)), "") if file_id else ""
        return unquote(file_name), line.group(1) if line else None


def config_too_deep(raw: str) -> bool:
    """Whether a backend_config's JSON (raw, or as a quoted string) nests past MAX_CONFIG_DEPTH: a bracket
    count, so that no JSON parser meets it."""
    if raw.count("[") + raw.count("{") <= MAX_CONFIG_DEPTH:
        return False
    text = unquote(raw) if raw.startswith('"') else raw
    return any(level > MAX_CONFIG_DEPTH for _, _, level in Brackets().walk(text))


def parse_instruction(text: str, source: str = "<instruction>") -> Instruction:
    """One instruction line on its own (a TPU trace stores each op's full HLO text)."""
    return InstructionReader(source).instruction(text, 1, "")
