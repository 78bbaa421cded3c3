"""HLO shapes: element types, dims, layouts with tiles and memory spaces, padded sizes.

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

import math
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache

from .hlo_tokens import Brackets, HloParseError, match_close, parse_int, split_top, strip_comments

__all__ = ["Shape", "parse_shape", "element_bits", "shape_end"]

# Bits per element; sub-byte types are packed (s4 = half a byte).
_ELEMENT_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f4e2m1fn": 4, "f6e2m3fn": 6, "f6e3m2fn": 6, "f8e8m0fnu": 8,
    "token": 0, "opaque": 0, "tuple": 0,
}
_LAYOUT_ITEM = re.compile(r"([A-Z#*]*)\(([^()]*)\)")
_ARRAY_HEAD = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
MAX_INT64 = 2**63 - 1
MAX_ELEMENT_BITS = 1024  # E(n) element sizes; the widest XLA type (c128) has 128 bits
# Real tuples nest two or three levels (async start ops: ((operands), result, context)); deeper
# nesting is damage, and the limit keeps the recursive shape reader far from Python's stack limit.
MAX_TUPLE_DEPTH = 64
_CACHED_TEXT = 1024


def element_bits(dtype: str) -> int:
    if dtype in _ELEMENT_BITS:
        return _ELEMENT_BITS[dtype]
    if dtype.startswith("f8"):
        return 8
    raise HloParseError(f"unknown element type {dtype[:40]!r}")


@dataclass(frozen=True)
class Shape:
    """An HLO shape: an array (dtype, dims, optional layout) or a tuple of shapes."""

    dtype: str
    dims: tuple[int, ...] = ()
    layout: tuple[int, ...] | None = None  # minor_to_major
    tiles: tuple[tuple[int, ...], ...] = ()  # outer tile first; -1 stands for '*'
    memory_space: int = 0
    is_tuple: bool = False
    elements: tuple[Shape, ...] = ()
    element_size_bits: int = 0  # layout E(n); 0 = the dtype's natural size
    dynamic_dims: tuple[bool, ...] = ()
    # Sizes and layout text are cached on the (immutable) shape: parse_shape hands the same Shape to every
    # instruction printing that text, and each op's facts read them several times.

    def element(self, index: int) -> Shape:
        """The tuple element an operand reads (``%x#1``), or the whole shape (-1, or no such element)."""
        return self.elements[index] if self.is_tuple and 0 <= index < len(self.elements) else self

    @property
    def minor_to_major(self) -> tuple[int, ...] | None:
        return self.layout

    @cached_property
    def num_elements(self) -> int:
        """Element count; tuples sum their elements; an unbounded ``?`` dim counts as 1."""
        if self.is_tuple:
            return sum(e.num_elements for e in self.elements)
        return math.prod(max(d, 1) if d < 0 else d for d in self.dims)

    @property
    def element_bytes(self) -> float:
        return (self.element_size_bits or element_bits(self.dtype)) / 8

    @cached_property
    def logical_bytes(self) -> int:
        if self.is_tuple:
            return sum(e.logical_bytes for e in self.elements)
        return math.ceil(self.num_elements * self.element_bytes)

    @cached_property
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

    @cached_property
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


def _parse_layout(text: str, rank: int) -> tuple:
    """``{2,1,0:T(8,128)(2,1)E(4)S(1)}`` → (minor_to_major, tiles, memory space, element bits)."""
    body = text[1:-1]
    mtm_text, _, rest = body.partition(":")
    mtm = tuple(parse_int(x, "layout dimension") for x in mtm_text.split(",") if x.strip())
    if sorted(mtm) != list(range(rank)):
        raise HloParseError(f"layout {{{mtm_text}}} does not order the {rank} dims of the shape")
    physical = rest.find("P(")  # P(<physical shape>) nests its own T(...): not this layout's
    if physical >= 0:
        close = match_close(rest, physical + 1)
        rest = rest[:physical] + (rest[close + 1:] if close > 0 else "")
    tiles, space, ebits, key = [], 0, 0, ""
    for m in _LAYOUT_ITEM.finditer(rest):
        key = m.group(1) or key  # bare "(2,1)" continues the previous T(...)
        if key == "T":
            tile = tuple(-1 if t.strip() == "*" else parse_int(t, "tile size")
                         for t in m.group(2).split(",") if t.strip())
            if any(t == 0 or t < -1 for t in tile):
                raise HloParseError(f"tile {m.group()} has a size below 1")
            tiles.append(tile)
        elif key == "S":
            space = parse_int(m.group(2), "memory space")
        elif key == "E":
            ebits = parse_int(m.group(2), "element size")
            if not 0 <= ebits <= MAX_ELEMENT_BITS:
                raise HloParseError(f"element size E({ebits}) is not a size in bits")
    return mtm, tuple(tiles), space, ebits


def _dim(text: str) -> tuple[int, bool]:
    """``8`` → (8, static); ``<=8`` → (8, dynamic); ``?`` → (-1, dynamic)."""
    if text == "?":
        return -1, True
    bounded = text.startswith("<=")
    size = parse_int(text[2:] if bounded else text, "dimension")
    if size < 0:
        raise HloParseError(f"negative dimension {text!r}")
    return size, bounded


def _check_size(shape: Shape, text: str) -> Shape:
    # XLA counts elements and bytes in int64; beyond that the text is damage, not a program.
    if shape.num_elements > MAX_INT64 or shape.padded_bytes > MAX_INT64:
        raise HloParseError(f"shape {text[:60]!r} holds more than 2^63 elements or bytes")
    return shape


def _array_end(text: str, start: int = 0) -> int:
    """End of the array shape at ``text[start:]`` (``dtype[dims]`` and an optional ``{layout}``
    whose P(...) may nest braces); -1 if there is none."""
    m = _ARRAY_HEAD.match(text, start)
    if not m:
        return -1
    if m.end() < len(text) and text[m.end()] == "{":
        close = match_close(text, m.end())
        return close + 1 if close > 0 else -1
    return m.end()


def shape_end(text: str) -> int:
    """Length of the shape that starts ``text`` (tuple or array); -1 if it does not start with one."""
    if text.startswith("("):
        close = match_close(text, 0)
        return close + 1 if close > 0 else -1
    return _array_end(text)


def _parse_shape(text: str) -> Shape:
    text = strip_comments(text).strip()
    if text.startswith("("):
        if match_close(text, 0) != len(text) - 1:
            raise HloParseError(f"unbalanced tuple shape {text[:60]!r}")
        elems = tuple(_parse_shape(p) for p in split_top(text[1:-1]))
        return Shape(dtype="tuple", is_tuple=True, elements=elems)
    m = _ARRAY_HEAD.match(text)
    if not m or _array_end(text) != len(text):
        raise HloParseError(f"not a shape: {text[:60]!r}")
    dtype, dims_text = m.groups()
    element_bits(dtype)
    parsed = [_dim(d.strip()) for d in dims_text.split(",") if d.strip()]
    dims, dyn = tuple(d for d, _ in parsed), tuple(b for _, b in parsed)
    layout_text = text[m.end():]
    mtm, tiles, space, ebits = _parse_layout(layout_text, len(dims)) if layout_text else (None, (), 0, 0)
    return _check_size(Shape(dtype, tuple(dims), mtm, tiles, space, False, (), ebits,
                             tuple(dyn) if any(dyn) else ()), text)


def parse_shape(text: str) -> Shape:
    """Parse ``bf16[8,128]{1,0:T(8,128)(2,1)S(1)}``, ``(f32[8]{0}, s32[])``, ``f32[<=8]`` …

    Raises HloParseError (a ValueError) on anything else, before allocating for it."""
    # Shapes repeat across a module, so they are cached; long texts (big tuples) are not, so
    # the cache cannot hold on to megabytes of text.
    return _parse_cached(text) if len(text) <= _CACHED_TEXT else _parse_checked(text)


@lru_cache(maxsize=8192)
def _parse_cached(text: str) -> Shape:
    return _parse_checked(text)


def _parse_checked(text: str) -> Shape:
    if text.lstrip().startswith("("):
        brackets, deepest = Brackets(), 0
        for _, _, level in brackets.walk(text):
            deepest = max(deepest, level)
        if deepest > MAX_TUPLE_DEPTH:
            raise HloParseError(f"tuple shape nested {deepest} deep (limit {MAX_TUPLE_DEPTH})")
    return _parse_shape(text)
