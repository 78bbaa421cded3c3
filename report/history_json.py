"""The history JSON: a versioned contract of its own (``history_schema_version``, history.schema.json)."""

from __future__ import annotations

import json

from .json_out import clean

HISTORY_SCHEMA_VERSION = 1


def history_to_dict(history) -> dict:
    from .. import __version__

    return clean({"history_schema_version": HISTORY_SCHEMA_VERSION, "tool": {"name": "xladiag", "version": __version__},
                  **history.data})


def render_history_json(history) -> str:
    return json.dumps(history_to_dict(history), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
