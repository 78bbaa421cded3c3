"""Read back a JSON report that ``diagnose --format json`` wrote (one side of ``diagnose compare``).

The schema version is checked, not guessed: a version this xladiag does not know is refused with one
line (the numbers may mean something else), never half-read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import InputError
from ..text_safety import check_nesting, clean_text
from .input_files import read_input_text

# A "\\ud800"-style escape: the only way a lone surrogate (unwritable in any report) gets into decoded JSON.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def load_json(text: str, where: str):
    """``json.loads`` of a file we read back: deep nesting refused first (``where`` names the file), every string
    made writable (:func:`clean_text`). Numbers are left to the schema check (report/schema_check.py)."""
    check_nesting(text, where)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise InputError(f"{where}: not a JSON report ({exc})") from None
    return _cleaned(data) if _SURROGATE_ESCAPE.search(text) else data


def _cleaned(value):
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): _cleaned(v) for k, v in value.items()}
    return value


def looks_like_json(path: Path) -> bool:
    """A file that is a JSON report rather than a capture: by suffix, else by its first byte."""
    if not path.is_file():
        return False
    if path.name.lower().endswith(".json"):
        return True
    if path.name.endswith(".xplane.pb"):
        return False
    if hasattr(path, "head"):  # a RemotePath: its first bytes only
        return path.head(64).lstrip()[:1] == b"{"
    with open(path, "rb") as fh:
        return fh.read(64).lstrip()[:1] == b"{"


def read_report_json(path: Path, schema_version: int) -> dict:
    """The report dict; ``InputError`` (one line) for anything but a report of ``schema_version``."""
    try:
        data = load_json(read_input_text(path), str(path))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a JSON report ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not an xladiag JSON report (a JSON {type(data).__name__}, not an object)")
    if "compare_schema_version" in data:
        raise InputError(f"{path}: a compare report, not a diagnose report: compare the captures or their "
                         "`diagnose --format json` reports")
    version = data.get("schema_version")
    if version is None or "ops" not in data:
        raise InputError(f"{path}: not an xladiag JSON report (no schema_version/ops): write one with "
                         "`diagnose PATH --format json -o FILE`")
    if version != schema_version:
        newer = isinstance(version, int) and version > schema_version
        hint = "upgrade xladiag" if newer else "diagnose the capture again with this xladiag"
        raise InputError(f"{path}: JSON report schema_version {version!r}, this xladiag reads {schema_version}: {hint}")
    return data
