"""Text-level helpers of the HLO parser: the parse error, limits, quoted strings, brackets, integers.

Every other ``hlo_*`` module builds on these; they know nothing of shapes or instructions. The
bracket scanner is linear in its input: it jumps from one special character to the next with a
compiled search and over quoted strings with ``str.find``, so a 10 MB string costs one pass and
no per-character state (a regex alternation such as ``"(?:[^"\\]|\\.)*"`` keeps backtracking state
for every character: about 180 bytes per byte of input).
"""

from __future__ import annotations

import re

from ..errors import InputError

__all__ = ["HloParseError", "QUOTED", "strip_comments", "Brackets", "match_close", "depth", "split_top",
           "unquote", "parse_ints", "parse_int", "MAX_INT_DIGITS", "closing_attrs"]

# XLA prints int64 values: 19 digits at most. Longer digit runs are damage, and refusing them
# also keeps int() away from Python's 4300-digit conversion limit.
MAX_INT_DIGITS = 19

_SPECIAL = re.compile(r"[\"'()\[\]{},]")
_QUOTE = re.compile(r"[\"']")
_INT = re.compile(r"-?[0-9]+")
# Possessive repeats (``*+``) keep no backtracking state, so memory stays flat on long strings.
_CLOSING = {q: re.compile(rf"(?<!\\)(?:\\\\)*+{q}") for q in "\"'"}
QUOTED = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'


# A double- or single-quoted string, backslash escapes skipped (as ``_string_end`` reads them).
_STRINGS = r'"[^"\\]*+(?:\\[\s\S][^"\\]*+)*+"|\'[^\'\\]*+(?:\\[\s\S][^\'\\]*+)*+\''


def _balanced(levels: int) -> str:
    """Regex of text whose brackets (any opener with any closer, as ``Brackets`` counts them) nest at most
    ``levels`` deep, quoted strings skipped whole; possessive, so it never backtracks."""
    inner = rf"""(?:[^()\[\]{{}}"']++|{_STRINGS})*+"""
    for _ in range(levels):
        inner = rf"""(?:[^()\[\]{{}}"']++|{_STRINGS}|[(\[{{]{inner}[)\]}}])*+"""
    return inner


# Fast paths of match_close and split_top: one C-level regex match per bracket or item for the usual
# shallow, short text; anything else (deeper nesting, a stray closer, an open string, megabytes of
# text) falls back to the walk, which gives the same answer wherever the fast path gives one.
_FAST_LEVELS, _FAST_TEXT = 8, 1 << 16
_BALANCED = re.compile(_balanced(_FAST_LEVELS))
_TOP_ITEM = re.compile(rf"""(?:[^,()\[\]{{}}"']++|{_STRINGS}|[(\[{{]{_balanced(_FAST_LEVELS - 1)}[)\]}}])*+""")


class HloParseError(InputError):
    """Malformed HLO text; the message starts with ``FILE:LINE:`` when it comes from a file."""


def _string_end(text: str, pos: int, quote: str) -> int:
    """Index just past the quote that closes a string whose body starts at ``pos``; -1 if none."""
    k = text.find(quote, pos)
    if k < 0 or k == pos or text[k - 1] != "\\":
        return k + 1 if k >= 0 else -1
    m = _CLOSING[quote].search(text, pos)  # escapes present: a quote after an even backslash run
    return m.end() if m else -1


class Brackets:
    """Bracket depth of text read in pieces; an open string carries over to the next piece
    (attribute strings may hold newlines, so an instruction can span lines)."""

    def __init__(self) -> None:
        self.level = 0
        self.quote = ""

    def _leave_string(self, text: str, pos: int) -> int:
        """Index past the closing quote of the open string, which is then closed; -1 if the
        string runs past the text."""
        end = _string_end(text, pos, self.quote)
        if end >= 0:
            self.quote = ""
        return end

    def walk(self, text: str, pos: int = 0):
        """Yield (index, char, depth after it) for each bracket and comma outside quotes."""
        search, n = _SPECIAL.search, len(text)
        while 0 <= pos < n:
            if self.quote:
                pos = self._leave_string(text, pos)
                continue
            m = search(text, pos)
            if m is None:
                return
            ch, i = m.group(), m.start()
            pos = i + 1
            if ch == '"' or ch == "'":
                self.quote = ch
                continue
            if ch in "([{":
                self.level += 1
            elif ch != ",":
                self.level -= 1
            yield i, ch, self.level

    def feed(self, text: str) -> int:
        """Depth after ``text``; counts brackets between strings with str.count (C speed)."""
        pos, n = 0, len(text)
        while 0 <= pos < n:
            if self.quote:
                pos = self._leave_string(text, pos)
                continue
            m = _QUOTE.search(text, pos)
            seg = text[pos: m.start() if m else n]
            self.level += (seg.count("(") + seg.count("[") + seg.count("{")
                           - seg.count(")") - seg.count("]") - seg.count("}"))
            if m is None:
                break
            self.quote, pos = m.group(), m.end()
        return self.level

    @property
    def balanced(self) -> bool:
        return self.level == 0 and not self.quote


def match_close(text: str, start: int) -> int:
    """Index of the bracket closing ``text[start]``, skipping quoted strings; -1 if unbalanced."""
    if len(text) <= _FAST_TEXT and text[start: start + 1] in ("(", "[", "{"):
        end = _BALANCED.match(text, start + 1).end()
        if end < len(text) and text[end] in ")]}":
            return end
    for i, ch, level in Brackets().walk(text, start):
        if level == 0 and ch != ",":
            return i
    return -1


def depth(text: str) -> int:
    """Open minus closed brackets outside quotes."""
    return Brackets().feed(text)


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` (a comma or a bracket) outside brackets and quotes."""
    if sep == "," and len(text) <= _FAST_TEXT:
        fast = _split_commas(text)
        if fast is not None:
            return fast
    parts, last = [], 0
    for i, ch, level in Brackets().walk(text):
        if level == 0 and ch == sep:
            parts.append(text[last:i])
            last = i + 1
    parts.append(text[last:])
    return [p.strip() for p in parts if p.strip()]


def _split_commas(text: str) -> list[str] | None:
    """split_top on commas by whole items; None where an item ends on anything but a comma or the end."""
    parts, pos, n, match = [], 0, len(text), _TOP_ITEM.match
    while True:
        end = match(text, pos).end()
        part = text[pos:end].strip()
        if part:
            parts.append(part)
        if end == n:
            return parts
        if text[end] != ",":
            return None
        pos = end + 1


def closing_attrs(stripped: str) -> str | None:
    """The attributes after a computation's closing brace ('' for none), None if the line is no
    closing brace: ``}``, ``}, execution_thread="sparsecore"``, ``} // fused_computation.3``."""
    if not stripped.startswith("}"):
        return None
    rest = stripped[1:]
    comment = rest.rfind("//")
    if comment >= 0 and '"' not in rest[comment:]:
        rest = rest[:comment]
    rest = rest.strip()
    if not rest:
        return ""
    brackets = Brackets()
    brackets.feed(rest)
    if not rest.startswith(",") or not brackets.balanced:
        return None
    parts = split_top(rest[1:])
    return rest[1:] if parts and all("=" in p for p in parts) else None


def strip_comments(text: str) -> str:
    """Drop ``/*index=5*/``-style comments (shapes and operand lists hold no strings)."""
    if "/*" not in text:
        return text
    out, pos = [], 0
    while True:
        start = text.find("/*", pos)
        end = text.find("*/", start + 2) if start >= 0 else -1
        if end < 0:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:start])
        pos = end + 2


def unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text


def parse_int(text: str, what: str = "integer") -> int:
    """One decimal integer of at most :data:`MAX_INT_DIGITS` digits (HloParseError otherwise)."""
    t = text.strip()
    digits = t[1:] if t[:1] == "-" else t
    if not digits.isdigit() or not digits.isascii():
        raise HloParseError(f"{what} is not an integer: {t[:40]!r}")
    if len(digits) > MAX_INT_DIGITS:
        raise HloParseError(f"{what} has {len(digits)} digits (int64 has 19): {t[:40]!r}…")
    value = int(t)
    if not -(2**63) <= value < 2**63:
        raise HloParseError(f"{what} {t} does not fit int64")
    return value


def parse_ints(text: str) -> list[int]:
    """Every integer in an attribute's text (dims lists, windows, replica groups)."""
    return [parse_int(x) for x in _INT.findall(text or "")]
