"""Text from a profile (op names, source paths, module names) made harmless where people read it.

A capture can carry any bytes in its strings. Shown raw, an ANSI escape recolours or rewrites a
terminal, U+202E reverses what follows, a NUL truncates a log line; in a PR comment a bare URL
becomes a link, ``@name`` notifies someone and ``#123`` cross-references an issue. Every renderer
and the CLI route profile text through these two functions; the HTML report additionally escapes
markup (autoescaping), and JSON keeps the data as it was (only raw control characters are escaped).
"""

from __future__ import annotations

import re

ZERO_WIDTH_SPACE = "\u200b"

# C0 and C1 controls, DEL, bidi embeddings/overrides/isolates/marks, line and paragraph separators.
_CONTROLS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
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
        kept = "".join(re.escape(c) for c in keep)
        pattern = _CONTROL_RE[keep] = re.compile(f"(?![{kept}])[{_CONTROLS}]" if kept else f"[{_CONTROLS}]")
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
    flat = re.sub(r"\s*[\r\n]+\s*", " ", str(text))
    return break_links(visible_controls(flat), break_urls=break_urls)
