"""Parser for XLA HLO text dumps (``*after_optimizations.txt``: TPU, GPU and CPU).

One pass over the lines with regexes and a small bracket matcher: a 300 kB module parses in a few
tens of milliseconds. Unknown attributes are kept as raw text in ``Instruction.attrs``.

Padded size rule (``Shape.padded_bytes``): the dims are put in physical order (major to minor,
from the layout's minor_to_major) and the tiles are applied one level after the other, as XLA's
tiled layouts define them: tile level k splits the minor-most ``len(tile)`` dims of the shape
produced by level k-1 into (ceil(d/t) outer, t inner) dims. A second level such as the bf16
``(2,1)`` packing therefore re-tiles the (8,128) tile of the first level, which it divides
exactly, so it adds no padding; it is not applied to the whole array (that would double a
rank-1 ``T(1024)(128)(2,1)`` buffer). Missing leading dims count as 1, so ``f32[]{:T(128)}``
occupies 128 elements. Without tiles the padded size is the logical size.
"""

from __future__ import annotations

from ..errors import InputError

import math
import re
import warnings
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "HloParseError", "Shape", "Instruction", "Computation", "HloModule", "parse_shape",
    "parse_hlo_module", "parse_hlo_file", "find_hlo_dumps", "parse_replica_groups",
    "parse_mesh_axes", "parse_source_target_pairs",
]

# Bits per element; sub-byte types are packed (s4 = half a byte).
_ELEMENT_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f4e2m1fn": 4, "f6e2m3fn": 6, "f6e3m2fn": 6, "f8e8m0fnu": 8,
    "token": 0, "opaque": 0, "tuple": 0,
}
_LAYOUT_ITEM = re.compile(r"([A-Z#*]*)\(([^()]*)\)")
_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")
_COMMENT = re.compile(r"/\*.*?\*/")
# Strings first so that brackets and commas inside quotes are skipped.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[()\[\]{},]')
_OPEN = {"(": ")", "[": "]", "{": "}"}
_METADATA_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')
_OPCODE = re.compile(r"([a-z][a-z0-9\-_]*)\(")
_SECTION_HEADERS = {"FileNames", "FunctionNames", "FileLocations", "StackFrames"}
_CALLED_ATTRS = ("calls", "to_apply", "body", "condition", "branch_computations",
                 "true_computation", "false_computation", "select", "scatter")


class HloParseError(InputError):
    """Malformed HLO text; the message starts with ``FILE:LINE:``."""


def _element_bits(dtype: str) -> int:
    if dtype in _ELEMENT_BITS:
        return _ELEMENT_BITS[dtype]
    if dtype.startswith("f8"):
        return 8
    raise ValueError(f"unknown element type {dtype!r}")


@dataclass(frozen=True)
class Shape:
    """An HLO shape: an array (dtype, dims, optional layout) or a tuple of shapes."""

    dtype: str
    dims: tuple[int, ...] = ()
    layout: tuple[int, ...] | None = None  # minor_to_major
    tiles: tuple[tuple[int, ...], ...] = ()  # outer tile first; -1 stands for '*'
    memory_space: int = 0
    is_tuple: bool = False
    elements: tuple["Shape", ...] = ()
    element_size_bits: int = 0  # layout E(n); 0 = the dtype's natural size
    dynamic_dims: tuple[bool, ...] = ()

    @property
    def minor_to_major(self) -> tuple[int, ...] | None:
        return self.layout

    @property
    def num_elements(self) -> int:
        """Element count; tuples sum their elements; an unbounded ``?`` dim counts as 1."""
        if self.is_tuple:
            return sum(e.num_elements for e in self.elements)
        return math.prod(max(d, 1) if d < 0 else d for d in self.dims)

    @property
    def element_bytes(self) -> float:
        return (self.element_size_bits or _element_bits(self.dtype)) / 8

    @property
    def logical_bytes(self) -> int:
        if self.is_tuple:
            return sum(e.logical_bytes for e in self.elements)
        return math.ceil(self.num_elements * self.element_bytes)

    @property
    def padded_bytes(self) -> int:
        """Bytes on the padded tile grid (rule in the module docstring)."""
        if self.is_tuple:
            return sum(e.padded_bytes for e in self.elements)
        if not self.tiles:
            return self.logical_bytes
        dims = [max(d, 1) for d in self.dims]
        shape = [dims[i] for i in reversed(self.layout)] if self.layout else dims
        for tile in self.tiles:
            rank = len(tile)
            if len(shape) < rank:
                shape = [1] * (rank - len(shape)) + shape
            head, tail = shape[: len(shape) - rank], shape[len(shape) - rank:]
            outer = [1 if t <= 0 else -(-d // t) for d, t in zip(tail, tile)]
            inner = [d if t <= 0 else t for d, t in zip(tail, tile)]
            shape = head + outer + inner
        return math.ceil(math.prod(shape) * self.element_bytes)

    @property
    def layout_str(self) -> str:
        """Canonical layout text, e.g. ``{1,0:T(8,128)(2,1)S(1)}``; '' without a layout."""
        if self.is_tuple or self.layout is None:
            return ""
        extra = ""
        if self.tiles:
            extra += "T" + "".join("(" + ",".join("*" if t < 0 else str(t) for t in tile) + ")"
                                   for tile in self.tiles)
        if self.element_size_bits:
            extra += f"E({self.element_size_bits})"
        if self.memory_space:
            extra += f"S({self.memory_space})"
        return "{" + ",".join(map(str, self.layout)) + (":" + extra if extra else "") + "}"

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(e) for e in self.elements) + ")"
        dims = ",".join(("<=" if dyn else "") + str(d)
                        for d, dyn in zip(self.dims, self.dynamic_dims or (False,) * len(self.dims)))
        return f"{self.dtype}[{dims}]{self.layout_str}"


def _bracket_walk(text: str, start: int = 0):
    """Yield (token match, bracket depth after it) outside quoted strings: one walker for all callers."""
    depth = 0
    for m in _TOKENS.finditer(text, start):
        tok = m.group()
        if tok in _OPEN:
            depth += 1
        elif tok in ")]}":
            depth -= 1
        yield m, depth


def _match_close(text: str, start: int) -> int:
    """Index of the bracket closing ``text[start]``, skipping quoted strings; -1 if unbalanced."""
    for m, depth in _bracket_walk(text, start):
        if depth == 0 and m.group() in ")]}":
            return m.start()
    return -1


def _depth(text: str) -> int:
    """Open minus closed brackets outside quotes."""
    depth = 0
    for _, depth in _bracket_walk(text):
        pass
    return depth


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and quotes."""
    parts, last = [], 0
    for m, depth in _bracket_walk(text):
        if depth == 0 and m.group() == sep:
            parts.append(text[last: m.start()])
            last = m.end()
    parts.append(text[last:])
    return [p.strip() for p in parts if p.strip()]


def _parse_layout(text: str) -> tuple:
    body = text[1:-1]
    mtm_text, _, rest = body.partition(":")
    mtm = tuple(int(x) for x in mtm_text.split(",") if x.strip())
    tiles, space, ebits, key = [], 0, 0, ""
    for m in _LAYOUT_ITEM.finditer(rest):
        key = m.group(1) or key  # bare "(2,1)" continues the previous T(...)
        if key == "T":
            tiles.append(tuple(-1 if t.strip() == "*" else int(t) for t in m.group(2).split(",")
                               if t.strip()))
        elif key == "S":
            space = int(m.group(2))
        elif key == "E":
            ebits = int(m.group(2))
    return mtm, tuple(tiles), space, ebits


@lru_cache(maxsize=8192)
def parse_shape(text: str) -> Shape:
    """Parse ``bf16[8,128]{1,0:T(8,128)(2,1)S(1)}``, ``(f32[8]{0}, s32[])``, ``f32[<=8]`` …"""
    text = _COMMENT.sub("", text).strip()
    if text.startswith("("):
        end = _match_close(text, 0)
        if end != len(text) - 1:
            raise ValueError(f"unbalanced tuple shape {text!r}")
        elems = tuple(parse_shape(p) for p in _split_top(text[1:-1]))
        return Shape(dtype="tuple", is_tuple=True, elements=elems)
    m = _ARRAY_SHAPE.fullmatch(text)
    if not m:
        raise ValueError(f"not a shape: {text!r}")
    dtype, dims_text, layout_text = m.groups()
    _element_bits(dtype)
    dims, dyn = [], []
    for d in dims_text.split(","):
        d = d.strip()
        if not d:
            continue
        dyn.append(d.startswith("<=") or d == "?")
        dims.append(-1 if d == "?" else int(d.lstrip("<=")))
    mtm, tiles, space, ebits = _parse_layout(layout_text) if layout_text else (None, (), 0, 0)
    return Shape(dtype, tuple(dims), mtm, tiles, space, False, (), ebits,
                 tuple(dyn) if any(dyn) else ())


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

    def called_computations(self) -> tuple[str, ...]:
        """Names of computations this instruction calls (fusion body, reducer, loop body …)."""
        out = []
        for key in _CALLED_ATTRS:
            raw = self.attrs.get(key)
            if raw:
                out.extend(n.strip().lstrip("%") for n in raw.strip("{}").split(",") if n.strip())
        return tuple(out)


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

    def async_pairs(self) -> pd.DataFrame:
        """Each ``*-start``/``async-start`` with its ``*-done`` (through ``async-update`` chains)."""
        done_of, update_of = {}, {}
        for comp in self.computations.values():
            for ins in comp.instructions:
                if ins.operand_names and ins.opcode.endswith("-done"):
                    done_of[ins.operand_names[0]] = ins.name
                elif ins.operand_names and ins.opcode.endswith("-update"):
                    update_of[ins.operand_names[0]] = ins.name
        rows = []
        for comp in self.computations.values():
            for ins in comp.instructions:
                if not ins.opcode.endswith("-start"):
                    continue
                cur = ins.name
                while cur in update_of:
                    cur = update_of[cur]
                if ins.opcode == "async-start":
                    wrapped = _main_opcode(self.fusion_body(ins))
                else:
                    wrapped = ins.opcode[: -len("-start")]
                rows.append((ins.name, done_of.get(cur), ins.opcode, wrapped, comp.name))
        return pd.DataFrame(rows, columns=["start", "done", "opcode", "wrapped_opcode",
                                           "computation"])


def _main_opcode(comp: Computation | None) -> str:
    """The wrapped op of an async computation: its root, looking past plumbing ops."""
    if comp is None:
        return ""
    plumbing = {"parameter", "tuple", "get-tuple-element", "bitcast", "constant"}
    root = comp.root
    if root is not None and root.opcode not in plumbing:
        return root.opcode
    for ins in comp.instructions:
        if ins.opcode not in plumbing:
            return ins.opcode
    return root.opcode if root is not None else ""


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text


class _Parser:
    def __init__(self, text: str, source: str, strict: bool):
        self.lines = text.splitlines()
        self.ends_cleanly = text.endswith("\n")
        self.source = source
        self.strict = strict
        self.tables: dict[str, dict[int, str]] = {k: {} for k in _SECTION_HEADERS}

    def error(self, lineno: int, what: str) -> HloParseError:
        return HloParseError(f"{self.source}:{lineno}: {what}")

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
                    depth = _depth(line)
                    while depth > 0 and i < len(lines):
                        depth += _depth(lines[i])
                        line += "\n" + lines[i]
                        i += 1
                    if depth > 0:
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
            elif stripped in _SECTION_HEADERS:
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

    def instruction(self, line: str, lineno: int, comp: str) -> Instruction:
        s = line.strip()
        is_root = s.startswith("ROOT ")
        if is_root:
            s = s[5:].lstrip()
        eq = s.find(" = ")
        if eq <= 0:
            raise self.error(lineno, f"not an instruction: {s[:60]!r}")
        name, rest = s[:eq].lstrip("%"), s[eq + 3:]
        if rest.startswith("("):
            end = _match_close(rest, 0)
            if end < 0:
                raise self.error(lineno, f"unbalanced tuple shape in %{name} (truncated line?)")
            shape_text, rest = rest[: end + 1], rest[end + 1:].lstrip()
        else:
            m = _ARRAY_SHAPE.match(rest)
            if not m:
                raise self.error(lineno, f"%{name}: cannot read the result shape")
            shape_text, rest = m.group(), rest[m.end():].lstrip()
        m = _OPCODE.match(rest)
        if not m:
            raise self.error(lineno, f"%{name}: no opcode(operands) after the shape")
        opcode = m.group(1)
        close = _match_close(rest, m.end() - 1)
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
            if tail.endswith(",") or _match_close("(" + tail + ")", 0) != len(tail) + 1:
                raise self.error(lineno, f"%{name}: unbalanced attributes (truncated line?)")
            for part in _split_top(tail[1:]):
                key, _, value = part.partition("=")
                attrs[key.strip()] = value.strip()
        names, shapes = [], []
        if opcode in ("constant", "parameter", "iota"):
            if operands_text.strip():
                attrs["literal" if opcode != "parameter" else "parameter_number"] = operands_text.strip()
        else:
            for op in _split_top(_COMMENT.sub("", operands_text)):
                shape_part, _, op_name = op.rpartition(" ")
                names.append(op_name.lstrip("%"))
                if shape_part.strip():
                    try:
                        shapes.append(parse_shape(shape_part))
                    except ValueError as exc:
                        raise self.error(lineno, f"%{name}: operand {op!r}: {exc}") from None
        op_name, source_file, source_line = self.metadata(attrs.get("metadata", ""))
        return Instruction(name, opcode, shape, tuple(names),
                           tuple(shapes) if len(shapes) == len(names) else (), attrs, op_name,
                           source_file, source_line, comp, is_root, line)

    def metadata(self, raw: str) -> tuple[str, str, int | None]:
        if not raw:
            return "", "", None
        fields = {k: _unquote(v) for k, v in _METADATA_FIELD.findall(raw)}
        source_file, line = fields.get("source_file", ""), fields.get("source_line")
        frame = fields.get("stack_frame_id")
        if not source_file and frame and frame.isdigit() and int(frame) > 0:
            source_file, line = self.frame_location(int(frame))
        return fields.get("op_name", ""), source_file, int(line) if line else None

    def frame_location(self, frame_id: int) -> tuple[str, str | None]:
        """Innermost frame of a stack_frame_id, through the StackFrames/FileLocations tables."""
        frame = self.tables["StackFrames"].get(frame_id, "")
        loc_id = re.search(r"file_location_id=(\d+)", frame)
        loc = self.tables["FileLocations"].get(int(loc_id.group(1)), "") if loc_id else ""
        file_id, line = re.search(r"file_name_id=(\d+)", loc), re.search(r"\bline=(\d+)", loc)
        file_name = self.tables["FileNames"].get(int(file_id.group(1)), "") if file_id else ""
        return _unquote(file_name), line.group(1) if line else None


def parse_hlo_module(text: str, source: str = "<string>", strict: bool = False) -> HloModule:
    """Parse one module's HLO text.

    A text that stops at a line boundary inside a computation (the shared v6e sample is cut that
    way and has no ENTRY) is kept with ``truncated=True`` and a warning, or raises with
    ``strict=True``. A damaged line (unbalanced brackets, no opcode) always raises.
    """
    return _Parser(text, source, strict).run()


def parse_instruction(text: str, source: str = "<instruction>") -> Instruction:
    """One instruction line on its own (a TPU trace stores each op's full HLO text)."""
    return _Parser("", source, False).instruction(text, 1, "")


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


# --- replica groups ---------------------------------------------------------------------------

_IOTA = re.compile(r"\[([\d,\s]+)\]<=\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?")
_MESH = re.compile(r"mesh\[(?P<axes>[^\]]*)\](?:\s*,\s*device_ids=\((?P<ids>[^)]*)\))?"
                   r"\s*(?:\{(?P<groups>[^}]*)\})?")


def _ints(text: str) -> list[int]:
    """Every integer in an attribute's text (dims lists, windows); shared with hlo_costs."""
    return [int(x) for x in re.findall(r"-?\d+", text or "")]


def _iota_array(text: str) -> np.ndarray:
    """``[4,2]<=[2,4]T(1,0)``: iota over the reshape dims, transposed, reshaped to the dims."""
    m = _IOTA.search(text)
    if not m:
        raise ValueError(f"not an iota list: {text!r}")
    dims, reshape = _ints(m.group(1)), _ints(m.group(2))
    arr = np.arange(math.prod(reshape)).reshape(reshape)
    if m.group(3):
        arr = arr.transpose(_ints(m.group(3)))
    return arr.reshape(dims)


def parse_mesh_axes(text: str) -> dict[str, int]:
    """Axis sizes of a ``mesh['axis_0'=4,'axis_1'=2] {...}`` replica-group attribute."""
    m = _MESH.search(text)
    if not m:
        return {}
    out = {}
    for part in m.group("axes").split(","):
        axis, _, size = part.rpartition("=")
        out[axis.strip().strip("'\"")] = int(size)
    return out


def _mesh_groups(text: str) -> list[list[int]]:
    # Devices laid out over the mesh axes; each named axis (or sub-axis 'a':(pre)size) is moved
    # last and the flattened array is cut into groups, as XLA's MeshAxesReplicaGroupList does.
    m = _MESH.search(text)
    axes = parse_mesh_axes(text)
    names, sizes = list(axes), list(axes.values())
    ids = m.group("ids")
    if ids and "<=" in ids:
        devices = _iota_array(ids).reshape(-1)
    elif ids:
        devices = np.array(_ints(ids))
    else:
        devices = np.arange(math.prod(sizes))
    refs: dict[int, list[tuple[int, int]]] = {}
    for ref in _split_top(m.group("groups") or ""):
        sub = re.fullmatch(r"['\"]?([^'\":]+)['\"]?(?::\((\d+)\)(\d+))?", ref.strip())
        if not sub or sub.group(1) not in axes:
            raise ValueError(f"unknown mesh axis {ref!r} in {text!r}")
        idx = names.index(sub.group(1))
        pre, size = (int(sub.group(2)), int(sub.group(3))) if sub.group(2) else (1, sizes[idx])
        refs.setdefault(idx, []).append((pre, size))
    reshape, grouped = [], []
    for idx, full in enumerate(sizes):
        parts = sorted(refs.get(idx, []))
        if not parts:
            reshape.append(full)
            continue
        done = 1
        for pre, size in parts:
            if pre != done:
                reshape.append(pre // done)
                done = pre
            grouped.append(len(reshape))
            reshape.append(size)
            done *= size
        if done != full:
            reshape.append(full // done)
    group_size = math.prod(reshape[g] for g in grouped)
    perm = [i for i in range(len(reshape)) if i not in grouped] + grouped
    return devices.reshape(reshape).transpose(perm).reshape(-1, group_size).tolist()


def parse_replica_groups(attr_text: str, num_devices: int | None = None) -> list[list[int]]:
    """Device groups of a ``replica_groups=`` value, in any of XLA's three printed forms.

    ``{{0,1},{2,3}}`` explicit; ``[4,2]<=[2,4]T(1,0)`` iota (groups are the rows of iota over
    [2,4] transposed by (1,0) and reshaped to [4,2]); ``mesh['a'=4,'b'=2] {'b'}`` named mesh.
    ``{}`` means one group of every device: it returns [] unless ``num_devices`` is given,
    then [[0 … num_devices-1]].
    """
    text = attr_text.strip()
    if "mesh[" in text:
        return _mesh_groups(text)
    if "<=" in text:
        return _iota_array(text).reshape(_ints(_IOTA.search(text).group(1))[0], -1).tolist()
    groups = [_ints(g) for g in re.findall(r"\{([^{}]*)\}", text[1:-1] if text.startswith("{{")
                                                  else text)]
    groups = [g for g in groups if g]
    if not groups:
        return [list(range(num_devices))] if num_devices else []
    return groups


def parse_source_target_pairs(attr_text: str) -> list[tuple[int, int]]:
    """``{{0,1},{1,2}}`` of a collective-permute as (source, target) pairs."""
    return [tuple(_ints(p)) for p in re.findall(r"\{(-?\d+\s*,\s*-?\d+)\}", attr_text)]
