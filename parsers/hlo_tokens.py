"""Text-level helpers of the HLO parser: the parse error, quoted strings, brackets, integer lists.

Every other ``hlo_*`` module builds on these; they know nothing of shapes or instructions.
"""

from __future__ import annotations

import re

from ..errors import InputError

__all__ = ["HloParseError", "COMMENT", "bracket_walk", "match_close", "depth", "split_top",
           "unquote", "parse_ints"]

COMMENT = re.compile(r"/\*.*?\*/")
# Strings first so that brackets and commas inside quotes are skipped.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[()\[\]{},]')
_OPEN = {"(": ")", "[": "]", "{": "}"}
_INT = re.compile(r"-?\d+")


class HloParseError(InputError):
    """Malformed HLO text; the message starts with ``FILE:LINE:``."""


def bracket_walk(text: str, start: int = 0):
    """Yield (token match, bracket depth after it) outside quoted strings: one walker for all callers."""
    level = 0
    for m in _TOKENS.finditer(text, start):
        tok = m.group()
        if tok in _OPEN:
            level += 1
        elif tok in ")]}":
            level -= 1
        yield m, level


def match_close(text: str, start: int) -> int:
    """Index of the bracket closing ``text[start]``, skipping quoted strings; -1 if unbalanced."""
    for m, level in bracket_walk(text, start):
        if level == 0 and m.group() in ")]}":
            return m.start()
    return -1


def depth(text: str) -> int:
    """Open minus closed brackets outside quotes."""
    level = 0
    for _, level in bracket_walk(text):
        pass
    return level


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and quotes."""
    parts, last = [], 0
    for m, level in bracket_walk(text):
        if level == 0 and m.group() == sep:
            parts.append(text[last: m.start()])
            last = m.end()
    parts.append(text[last:])
    return [p.strip() for p in parts if p.strip()]


def unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text


def parse_ints(text: str) -> list[int]:
    """Every integer in an attribute's text (dims lists, windows, replica groups)."""
    return [int(x) for x in _INT.findall(text or "")]
