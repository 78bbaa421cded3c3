"""The history JSON (``diagnose history --format json``) as a JSON Schema: built here, shipped as
``history.schema.json`` beside the report's and the comparison's (``json_schema.SCHEMA_FILES``).

Strict on the stable records (runs, change points, their tests, top rows); the top level stays open so that a
new section is an addition, as the compatibility policy in CHANGELOG.md says.
"""

from __future__ import annotations

from .compare_schema import _noise_test
from .history_json import HISTORY_SCHEMA_VERSION
from .json_schema import BOOL, INT, NON_NEG, NUMBER, PLATFORMS, SEVERITIES, STRING, _list, _null, _obj, document

COUNT = {**INT, "minimum": 0}


def _run() -> dict:
    return _obj({
        "index": COUNT, "label": STRING, "input_kind": {"enum": ["capture", "json report"]}, "run": _null(STRING),
        "run_time": _null(STRING), "recorded_at": _null(STRING), "tool_version": _null(STRING),
        "platform": {"enum": [*PLATFORMS, None]}, "chip": _null(STRING), "step_s": _null(NON_NEG),
        "mfu": _null(NON_NEG), "steps": COUNT, "per_step_s": _list(NON_NEG), "headline": STRING,
    })


def _run_test() -> dict:
    return _obj({
        "runs_before": COUNT, "runs_after": COUNT, "alpha": NUMBER, "t": _null(NUMBER), "df": _null(NUMBER),
        "p_value": _null(NUMBER), "spread_s": _null(NON_NEG), "beyond_noise": _null(BOOL),
    })


def _change_point() -> dict:
    return _obj({
        "index": COUNT, "label": STRING, "runs_before": COUNT, "runs_after": COUNT, "mean_before_s": NON_NEG,
        "mean_after_s": NON_NEG, "change": _null(NUMBER), "run_test": _run_test(),
        "direction": {"enum": ["slower", "faster"]}, "noise_test": _noise_test(),
    })


def history_schema() -> dict:
    """The schema of ``diagnose history --format json`` at ``history_schema_version``."""
    top = _obj({
        "history_schema_version": {"const": HISTORY_SCHEMA_VERSION},
        "tool": _obj({"name": {"const": "xladiag"}, "version": STRING}),
        "headline": STRING,
        "inputs": _list(STRING),
        "runs": {**_list(_run()), "minItems": 1},
        "change_points": _list(_change_point()),
        "test": _obj({"name": STRING, "alpha": NUMBER, "rule": STRING, "run_rule": STRING, "method": STRING}),
        "top_ops": _list(_obj({"key": STRING, "s_per_step": _list(_null(NON_NEG))})),
        "top_findings": _list(_obj({"key": STRING, "title": STRING, "severity": {"enum": SEVERITIES},
                                    "s_per_step": _list(_null(NON_NEG))})),
        "regression": _obj({"threshold": _null(NON_NEG), "regressed": BOOL, "reason": STRING}),
        "warnings": _list(STRING),
    }, closed=False)
    return document("history", HISTORY_SCHEMA_VERSION,
                    f"xladiag history, history_schema_version {HISTORY_SCHEMA_VERSION}",
                    "diagnose history --format json; fields in README (History across runs), policy in CHANGELOG.md",
                    top)
