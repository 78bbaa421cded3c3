"""Text from a profile (op names, source paths, module names) made harmless where people read it.

A capture can carry any bytes in its strings. Shown raw, an ANSI escape recolours or rewrites a
terminal, U+202E reverses what follows, a NUL truncates a log line; in a PR comment a bare URL
becomes a link, ``@name`` notifies someone and ``#123`` cross-references an issue. Every renderer
and the CLI route profile text through these two functions; the HTML report additionally escapes
markup (autoescaping), and JSON keeps the data as it was (only raw control characters are escaped).

Also here, for input of unknown origin: :func:`clean_text` (names of unknown encoding made writable),
:func:`ci_inert` (no line a CI runner reads as a workflow command) and :func:`check_nesting` (nesting
refused before a recursive parser meets it).
"""

from __future__ import annotations

import re

from .errors import InputError

ZERO_WIDTH_SPACE = "\u200b"

# C0 and C1 controls, DEL, bidi embeddings/overrides/isolates/marks, line and paragraph separators.
_CONTROLS = ((0x00, 0x1F), (0x7F, 0x9F), (0x61C, 0x61C), (0x200E, 0x200F), (0x2028, 0x202E), (0x2066, 0x2069))
_CONTROL_RE = {}

# What GitHub turns into a link, a mention or a cross-reference: scheme://, www., @name, #123.
_SCHEME = r"(?<=[a-z0-9+.-]:)(?=//)"
_OTHERS = r"(?<=\bwww)(?=\.)|(?<=@)(?=\w)|(?<=#)(?=\d)"
_LINKS = {True: re.compile(f"(?i){_SCHEME}|{_OTHERS}"), False: re.compile(f"(?i){_OTHERS}")}


def visible_controls(text: str, keep: str = "") -> str:
    """Write every control or bidi character (except those in ``keep``) as a visible ``\\uXXXX``.

    The notation is also a JSON string escape, so JSON text passed through here decodes to the same data.
    """
    pattern = _CONTROL_RE.get(keep)
    if pattern is None:
        # One character class without the kept ones (a lookahead before the class costs 4x on a 3 MB report).
        chars = [chr(c) for first, last in _CONTROLS for c in range(first, last + 1) if chr(c) not in keep]
        pattern = _CONTROL_RE[keep] = re.compile(f"[{''.join(re.escape(c) for c in chars)}]")
    return pattern.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def break_links(text: str, joiner: str = ZERO_WIDTH_SPACE, break_urls: bool = True) -> str:
    """Insert ``joiner`` (invisible) so no URL, ``@mention`` or ``#123`` reference is recognised
    (``break_urls=False``: ``scheme://`` left whole)."""
    return _LINKS[break_urls].sub(joiner, text)


def terminal_line(text, break_urls: bool = True) -> str:
    """One line for stderr (warnings, headline, errors, gates): no controls, links or mentions.

    ``break_urls=False`` (error lines): ``scheme://`` stays whole, so the ``gs://`` / ``s3://`` path an error names
    can be copied back into a command (an invisible U+200B in it names another object). In a terminal a URL
    is only text: with every control spelled out, no escape can hide a link target behind other text.
    Mentions and ``#123`` stay broken for logs pasted into a PR comment."""
    flat = re.sub(r"\s*[\r\n]+\s*", " ", clean_text(str(text)))
    return ci_inert(break_links(visible_controls(flat), break_urls=break_urls))


_SURROGATES = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD: an undecodable byte of a file name (Python's
    surrogateescape) or a ``"\\ud800"`` escape in JSON could not be encoded into any report or onto stderr."""
    return _SURROGATES.sub("\ufffd", text)


# Workflow commands a CI runner (GitHub Actions) parses from any output line: "::cmd::" at the start of a line
# (after blanks), "##[cmd]" anywhere in it.
_CI_COMMAND = re.compile(r"^([ \t]*):(?=:)", re.MULTILINE)


def ci_inert(text: str, joiner: str = ZERO_WIDTH_SPACE) -> str:
    """``text`` with ``joiner`` inside every ``##[`` and every line-leading ``::``, so no line of it is a workflow
    command (our own annotations, report/github.py, are printed apart from any text passed through here).
    ``joiner`` is the format's invisible (or, in JSON, the escaped same) character: in JSON ``\\u0023`` is ``#``."""
    # Two passes (a '##[' and a '::' never overlap): a plain replace, and the regex only where '::' occurs.
    text = text.replace("##[", f"#{joiner}#[")
    return _CI_COMMAND.sub(lambda m: f"{m.group(1)}:{joiner}", text) if "::" in text else text


MAX_NESTING = 100  # far above any file of ours (a report nests ~6 deep), far below a recursive parser's limit
# Strings and comments (whose brackets are text), else one bracket. An unterminated string runs to the end, so
# each character is scanned once.
_TOKENS = {
    "json": re.compile(r'"(?:[^"\\]|\\[\s\S]?)*(?:"|\Z)|[\[\]{}]'),
    "toml": re.compile(r'"""[\s\S]*?(?:"""|\Z)|\'\'\'[\s\S]*?(?:\'\'\'|\Z)|"(?:[^"\\\n]|\\[^\n]?)*"?'
                       r"|'[^'\n]*'?|#[^\n]*|[\[\]{}]"),
}


def check_nesting(text: str, where: str, kind: str = "json", limit: int = MAX_NESTING, error=InputError) -> None:
    """``error`` (an ``InputError``) naming ``where`` when arrays/tables/objects in ``text`` (``kind`` json or
    toml) nest deeper than ``limit``: Python's JSON and TOML parsers recurse per level (RecursionError)."""
    if text.count("[") + text.count("{") <= limit:
        return
    depth = 0
    for match in _TOKENS[kind].finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                raise error(f"{where}: nested deeper than {limit} levels (arrays, tables or objects); "
                                 "refused before parsing")
        elif token in ("]", "}"):
            depth -= 1
