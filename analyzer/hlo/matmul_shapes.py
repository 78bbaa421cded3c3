"""The sizes of a ``dot``, checked against each other before any FLOP is counted from them.

A dot's dimension numbers must index real dims of its operands (a negative index would silently pick the last
dim), contract sizes that agree on both sides, and produce the result it declares: batch dims, then the lhs's
free dims, then the rhs's (XLA's DotGeneral shape rule). A damaged dump breaks that: a scalar operand under
a 1024x72 result read as N = 1 and priced a 1 x 200 dot as 99.7 % padding, 15x the step. Any such
inconsistency, or a dim whose size is unknown (``f32[?]``), makes the sizes unknown (ValueError), never a
guess; the caller reads the FLOPs as unknown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...parsers.hlo_text import Shape

__all__ = ["DotDims", "dot_dims", "has_unknown_dim"]


def has_unknown_dim(shape: Shape) -> bool:
    """Whether any array in ``shape`` has a dim of unknown size (``?``, read as -1)."""
    if shape.is_tuple:
        return any(has_unknown_dim(e) for e in shape.elements)  # tuples nest 64 deep at most (hlo_shapes)
    return any(d < 0 for d in shape.dims)


@dataclass(frozen=True)
class DotDims:
    """Logical sizes of a dot: rows (lhs free), columns (rhs free), contracted, batch; each a product."""

    m: int
    n: int
    k: int
    batch: int


def _checked(dims: list[int], shape: Shape, what: str) -> list[int]:
    rank = len(shape.dims)
    if any(not 0 <= d < rank for d in dims) or len(set(dims)) != len(dims):
        raise ValueError(f"{what} {dims} are not distinct dims of a rank-{rank} operand")
    return dims


def dot_dims(lhs: Shape, rhs: Shape, out: Shape, numbers: dict[str, list[int]]) -> DotDims:
    """(M, N, K, batch) of a dot whose ``numbers`` are lhs/rhs_contracting_dims and lhs/rhs_batch_dims;
    ValueError when the shapes and numbers do not describe one dot (rules in the module doc)."""
    if lhs.is_tuple or rhs.is_tuple or out.is_tuple:
        raise ValueError("a dot operand or result is a tuple")
    if has_unknown_dim(lhs) or has_unknown_dim(rhs) or has_unknown_dim(out):
        raise ValueError("a dot dimension of unknown size (?)")
    lc = _checked(numbers.get("lhs_contracting_dims", []), lhs, "lhs_contracting_dims")
    rc = _checked(numbers.get("rhs_contracting_dims", []), rhs, "rhs_contracting_dims")
    lb = _checked(numbers.get("lhs_batch_dims", []), lhs, "lhs_batch_dims")
    rb = _checked(numbers.get("rhs_batch_dims", []), rhs, "rhs_batch_dims")
    if set(lc) & set(lb) or set(rc) & set(rb):
        raise ValueError("a dot dim is both contracted and batch")
    if [lhs.dims[i] for i in lc] != [rhs.dims[i] for i in rc] or [lhs.dims[i] for i in lb] != [rhs.dims[i] for i in rb]:
        raise ValueError(f"dot operands {lhs} and {rhs} disagree on the contracted or batch sizes")
    free_l = [d for i, d in enumerate(lhs.dims) if i not in lc and i not in lb]
    free_r = [d for i, d in enumerate(rhs.dims) if i not in rc and i not in rb]
    if len(out.dims) != len(lb) + len(free_l) + len(free_r) or \
            out.num_elements != math.prod(lhs.dims[i] for i in lb) * math.prod(free_l) * math.prod(free_r):
        raise ValueError(f"dot result {out} is not batch x lhs free x rhs free of {lhs} and {rhs}")
    return DotDims(m=math.prod(free_l), n=math.prod(free_r), k=math.prod(lhs.dims[i] for i in lc),
                   batch=math.prod(lhs.dims[i] for i in lb))
