"""``json.dumps(data, indent=N, allow_nan=False, ensure_ascii=False)``, byte for byte, for plain report data.

The standard library uses its C encoder only without ``indent``; with it, every value passes through a chain
of Python generators (a 3 MB report: most of the render). Here each value is appended once to a list. Data
that is not plain JSON (a key that is not a string, a type json would convert) goes to ``json.dumps``.
"""

from __future__ import annotations

import functools
import json
import math
from json.encoder import encode_basestring

from ..errors import XladiagError

_SCALAR = {type(None): lambda v: "null", bool: lambda v: "true" if v else "false", int: int.__repr__,
           str: encode_basestring}


class _NotPlain(XladiagError):
    """A value this writer does not encode: json.dumps does the whole document instead."""


def _float(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
    return float.__repr__(value)


_SCALAR[float] = _float


@functools.lru_cache(maxsize=64)
def _flat_encoder(inner: str) -> json.JSONEncoder:
    # Without indent json uses its C encoder; the separator carries the newline and indentation instead.
    return json.JSONEncoder(separators=("," + inner, ": "), ensure_ascii=False, allow_nan=False)


def _flat(value, inner: str, newline: str) -> str:
    """A dict or list of scalars: one C-encoder call, its brackets moved onto their own lines."""
    text = _flat_encoder(inner).encode(value)
    return text[0] + inner + text[1:-1] + newline + text[-1]


def _write(value, out: list, newline: str, step: str) -> None:
    """Append ``value``'s text at the indentation ``newline`` ends with."""
    encode = _SCALAR.get(type(value))
    if encode is not None:
        out.append(encode(value))
        return
    kind = type(value)
    if kind is dict:
        if not value:
            out.append("{}")
            return
        if all(type(v) in _SCALAR for v in value.values()) and all(type(k) is str for k in value):
            out.append(_flat(value, newline + step, newline))
            return
        inner = newline + step
        sep = "{" + inner
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            out.append(sep + encode_basestring(key) + ": ")
            _write(item, out, inner, step)
            sep = "," + inner
        out.append(newline + "}")
    elif kind is list or kind is tuple:
        if not value:
            out.append("[]")
            return
        if all(type(v) in _SCALAR for v in value):
            out.append(_flat(value, newline + step, newline))
            return
        inner = newline + step
        sep = "[" + inner
        for item in value:
            out.append(sep)
            _write(item, out, inner, step)
            sep = "," + inner
        out.append(newline + "]")
    else:
        raise _NotPlain


def dumps(data, indent: int = 2) -> str:
    """The indented JSON text of ``data`` (NaN refused, non-ASCII kept), as json.dumps writes it."""
    out: list[str] = []
    try:
        _write(data, out, "\n", " " * indent)
    except (_NotPlain, RecursionError):
        return json.dumps(data, indent=indent, allow_nan=False, ensure_ascii=False)
    return "".join(out)
