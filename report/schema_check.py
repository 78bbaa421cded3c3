"""A JSON document we read back (a report compared, a baseline) checked against our own schema before use.

The schemas (json_schema.py, compare_schema.py) use a small part of JSON Schema: type, properties, required,
additionalProperties, items, anyOf, const, enum, minimum, maximum, minLength, pattern. This checks exactly
that part (no dependency at run time; tests/test_schema_check.py holds it to ``jsonschema``'s verdicts) and
adds one rule of ours: every number is finite (``1e400`` parses as inf, ``10**400`` overflows a float).
The first violation is one line naming the file and the JSON path of the bad field.
"""

from __future__ import annotations

import math
import re

from ..errors import InputError

_ABSENT = object()
_TYPES = {"string": str, "object": dict, "array": list, "boolean": bool, "null": type(None)}


def _json_type(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", dict: "object", list: "array", type(None): "null"}.get(type(value), type(value).__name__)


def _is(value, kind: str) -> bool:
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return kind == "number" or isinstance(value, int) or float(value).is_integer()
    return isinstance(value, _TYPES[kind])


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past a float's range
        return False


def _same(a, b) -> bool:  # JSON equality: true is not 1
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def _scalar_problem(value, schema: dict) -> str | None:
    kinds, const, enum = schema.get("type"), schema.get("const", _ABSENT), schema.get("enum")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if kinds is not None and not any(_is(value, k) for k in kinds):
        return f"expected {' or '.join(kinds)}, got {_json_type(value)}"
    if const is not _ABSENT and not _same(value, const):
        return f"expected {const!r}"
    if enum is not None and not any(_same(value, e) for e in enum):
        return f"{str(value)[:40]!r} is not one of {', '.join(map(repr, enum))}"[:200]
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if low is not None and value < low:
            return f"{value} is below {low}"
        if high is not None and value > high:
            return f"{value} is above {high}"
    if isinstance(value, str):
        shortest, pattern = schema.get("minLength", 0), schema.get("pattern")
        if len(value) < shortest:
            return "is empty" if not value else f"shorter than {shortest} characters"
        if pattern is not None and not re.search(pattern, value):
            return f"{value[:40]!r} does not match {pattern}"
    return None


def violation(value, schema: dict, path: str = "$") -> tuple[str, str] | None:
    """(JSON path, what is wrong) of the first place ``value`` breaks ``schema``; None when it conforms."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not _finite(value):
        return path, "a number out of range (not finite)"
    alternatives, items = schema.get("anyOf"), schema.get("items")
    if alternatives is not None:
        found = [violation(value, s, path) for s in alternatives]
        if all(found):
            return found[0]  # our anyOf lists the real shape first, null after it
    problem = _scalar_problem(value, schema)
    if problem:
        return path, problem
    if isinstance(value, dict):
        return _object_violation(value, schema, path)
    if isinstance(value, list) and items is not None:
        for i, item in enumerate(value):
            found = violation(item, items, f"{path}[{i}]")
            if found:
                return found
    return None


def _object_violation(value: dict, schema: dict, path: str) -> tuple[str, str] | None:
    for key in schema.get("required", ()):
        if key not in value:
            return _child(path, key), "missing"
    properties, others = schema.get("properties", {}), schema.get("additionalProperties", True)
    for key, item in value.items():
        sub = properties.get(key, others)
        if sub is False:
            return _child(path, key), "not a field of this record"
        found = violation(item, sub, _child(path, key)) if isinstance(sub, dict) else None
        if found:
            return found
    return None


def check(data, schema: dict, where: str, what: str) -> None:
    """``InputError`` ``<where>: not a valid <what>: <path>: <problem>`` unless ``data`` conforms."""
    found = violation(data, schema)
    if found:
        raise InputError(f"{where}: not a valid {what}: {found[0]}: {found[1]}")
