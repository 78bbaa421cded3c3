"""The compare JSON: a versioned contract of its own (``compare_schema_version``, docs/compare.md)."""

from __future__ import annotations

import json

from .json_out import clean

COMPARE_SCHEMA_VERSION = 1


def compare_to_dict(comparison) -> dict:
    from .. import __version__

    return clean({"compare_schema_version": COMPARE_SCHEMA_VERSION, "tool": {"name": "xladiag", "version": __version__},
                  "headline": comparison.headline, **comparison.data,
                  "gates": [g.to_dict() for g in comparison.gates]})


def render_compare_json(comparison) -> str:
    return json.dumps(compare_to_dict(comparison), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
