"""The parsed module of an HloProto built from the pieces its printer used, without reading the text back.

:mod:`.hlo_proto` prints every instruction line from known pieces (name, shape text, opcode, operands, the
``key=value`` attributes). Where each piece is plain (names of word characters, JSON backend configs, no
line breaks) the text parser would only recover those same pieces, so the instructions are built from them
directly, with the parser's own shape, metadata and module-assembly code: the result equals
``parse_hlo_module(text)``. A piece that is not plain (a damaged or hostile proto) returns None and the caller
reads the text, which gives that text's exact result, errors and warnings included.
"""

from __future__ import annotations

import functools
import json
import re
from typing import NamedTuple

from ..errors import XladiagError
from .hlo_instruction import SECTION_HEADERS, Instruction, config_too_deep
from .hlo_shapes import parse_shape
from .hlo_text import MAIN_THREAD, Computation, HloModule, HloParseError, _ModuleParser

__all__ = ["PrintedInstruction", "PrintedModule", "build_module"]

_NAME = re.compile(r"[\w.\-]+")
_OPCODE = re.compile(r"[a-z][a-z0-9\-_]*")
# Every character str.splitlines breaks on, but "\n" (counted separately).
_LINE_BREAK = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# Attributes printed from integers, fixed words, names already checked or json-quoted strings: the text
# parser reads back exactly what was printed.
_PLAIN = frozenset((
    "index", "dimensions", "iota_dimension", "window", "dim_labels", "feature_group_count", "batch_group_count",
    "lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims", "channel_id",
    "replica_groups", "use_global_device_ids", "source_target_pairs", "is_host_transfer", "custom_call_target",
    "async_execution_thread", "metadata", "condition", "body", "branch_computations", "select", "scatter",
    "calls", "called_computations", "to_apply"))
_MAX_PARAMETER_DIGITS = 9


class PrintedInstruction(NamedTuple):
    line: str  # the text line, indent included
    is_root: bool
    name: str
    shape: str
    opcode: str
    operand_text: str  # between the parentheses
    operands: list  # (shape text, name) per operand
    attrs: list  # "key=value" texts


class PrintedModule(NamedTuple):
    name: str
    scheduled: bool
    lines: list  # the whole text, line by line
    tables: list  # the stack-frame table lines (headers, rows, blanks)
    comp_names: tuple
    comps: list  # (name, is entry, [PrintedInstruction])


class _NotPlain(XladiagError):
    """A piece only the text parser may read (its reading of it may differ from the piece)."""


def build_module(printed: PrintedModule, source: str) -> HloModule | None:
    """``parse_hlo_module`` of the printed text, from its pieces; None where a piece is not plain."""
    if not _plain_text(printed):
        return None
    reader = _ModuleParser("", source, False)
    # Thousands of instructions share a few hundred stack frames: each frame resolved once.
    reader.frame_location = functools.lru_cache(maxsize=None)(reader.frame_location)
    reader.module_name, reader.scheduled = printed.name, printed.scheduled
    _read_tables(reader, printed.tables)
    try:
        for cname, is_entry, pieces in printed.comps:
            body = tuple(_instruction(reader, p, cname) for p in pieces)
            reader.comps[cname] = Computation(cname, is_entry, body, MAIN_THREAD)
            if is_entry:
                reader.entry = cname
    except (_NotPlain, HloParseError):
        return None
    return reader.module() if reader.entry else None


def _plain_text(printed: PrintedModule) -> bool:
    """One line per printed line, and names the parser reads whole."""
    text = "\n".join(printed.lines)
    if text.count("\n") != len(printed.lines) - 1 or _LINE_BREAK.search(text):
        return False
    return bool(_NAME.fullmatch(printed.name)) and all(_NAME.fullmatch(n) for n in printed.comp_names)


def _read_tables(reader: _ModuleParser, lines: list) -> None:
    """The FileNames/... sections, as the text parser's top-level reader stores them."""
    section = None
    for line in lines:
        if not line:
            section = None
        elif line in SECTION_HEADERS:
            section = line
        else:
            key, _, value = line.partition(" ")
            reader.tables[section][int(key)] = value.strip()


def _plain_config(value: str) -> bool:
    """A backend config printed raw: plain if it is one JSON object with no space around it."""
    if value.startswith('"'):
        return True  # json-quoted by the printer
    if value != value.strip():
        return False
    try:
        return isinstance(json.loads(value), dict)
    except (ValueError, RecursionError):
        return False


def _attributes(p: PrintedInstruction) -> dict:
    attrs: dict[str, str] = {}
    for attr in p.attrs:
        key, _, value = attr.partition("=")
        if not (key in _PLAIN or (key == "kind" and _NAME.fullmatch(value))
                or (key == "backend_config" and _plain_config(value))):
            raise _NotPlain(key)
        attrs[key] = value
    if "backend_config" in attrs and config_too_deep(attrs["backend_config"]):
        raise _NotPlain("backend_config")  # the parser drops it with a note naming the line
    return attrs


def _instruction(reader: _ModuleParser, p: PrintedInstruction, comp: str) -> Instruction:
    if not (_NAME.fullmatch(p.name) and _OPCODE.fullmatch(p.opcode)):
        raise _NotPlain(p.name)
    shape = parse_shape(p.shape)
    attrs = _attributes(p)
    names, shapes = (), ()
    if p.opcode == "parameter":
        number = p.operand_text
        if not number.isdigit() or len(number) > _MAX_PARAMETER_DIGITS:
            raise _NotPlain(number)
        attrs["parameter_number"] = number
    elif p.opcode in ("constant", "iota"):
        if p.operand_text.strip():
            attrs["literal"] = p.operand_text.strip()
    else:
        names = tuple(name for _, name in p.operands)
        shapes = tuple(parse_shape(text) for text, _ in p.operands)
    op_name, source_file, source_line = reader.metadata(attrs.get("metadata", ""))
    return Instruction(p.name, p.opcode, shape, names, shapes, attrs, op_name, source_file, source_line, comp,
                       p.is_root, p.line, ())
