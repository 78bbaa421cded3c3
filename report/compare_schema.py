"""The compare JSON (``diagnose compare --format json``, docs/compare.md) as a JSON Schema: built here,
shipped as ``compare.schema.json`` beside the report's (``json_schema.SCHEMA_FILES``).

Strict on the stable records (sides, noise test, breakdown rows, op and finding changes); the top level
stays open so that a new section is an addition, as the compatibility policy in CHANGELOG.md says.
"""

from __future__ import annotations

from ..analyzer.analysis import BREAKDOWN_CATEGORIES
from .compare_json import COMPARE_SCHEMA_VERSION
from .json_schema import (
    BOOL,
    INT,
    NON_NEG,
    NUMBER,
    PLATFORMS,
    SEVERITIES,
    STRING,
    _gate,
    _list,
    _null,
    _obj,
    document,
)

STEP_VERDICTS = ["slower", "faster", "within noise", "unchanged", "untested", "unknown"]
OP_STATUS = ["slower", "faster", "unchanged", "new", "removed"]
FINDING_STATUS = ["appeared", "disappeared", "grew", "shrank", "unchanged"]


def _side() -> dict:
    return _obj({
        "label": STRING, "input_kind": {"enum": ["capture", "json report"]}, "tool_version": _null(STRING),
        "platform": {"enum": PLATFORMS}, "chip": _null(STRING), "chip_key": _null(STRING),
        "devices": {**INT, "minimum": 0}, "run": _null(STRING), "step_program": _null(STRING),
        "steps": {**INT, "minimum": 0}, "step_source": _null(STRING), "step_s": _null(NON_NEG),
        "mfu": _null(NON_NEG), "per_step_s": _list(NON_NEG), "headline": STRING,
    }, closed=False)


def _noise_test() -> dict:
    return _obj({
        "name": STRING, "alpha": NUMBER, "rule": STRING, "base_steps": {**INT, "minimum": 0},
        "new_steps": {**INT, "minimum": 0}, "t": _null(NUMBER), "df": _null(NUMBER), "p_value": _null(NUMBER),
        "ci_low_s": _null(NUMBER), "ci_high_s": _null(NUMBER), "spread_s": _null(NON_NEG),
        "beyond_noise": _null(BOOL), "reason": STRING,
    })


def _op_change() -> dict:
    return _obj({
        "status": {"enum": OP_STATUS}, "matched_by": {"enum": ["name", "framework op", None]},
        "module": _null(STRING), "name": STRING, "base_name": _null(STRING), "tf_op": _null(STRING),
        "source": _null(STRING), "time_class": _null(STRING), "base_s_per_step": _null(NUMBER),
        "new_s_per_step": _null(NUMBER), "delta_s_per_step": _null(NUMBER), "ratio": _null(NUMBER),
        "delta_share_of_step": _null(NUMBER),
    }, required=["status", "name", "base_s_per_step", "new_s_per_step", "delta_s_per_step"], closed=False)


def _finding_change() -> dict:
    return _obj({
        "status": {"enum": FINDING_STATUS}, "key": STRING, "rule": STRING, "kind": STRING, "main_op": STRING,
        "title": STRING, "base_severity": {"enum": [*SEVERITIES, None]}, "new_severity": {"enum": [*SEVERITIES, None]},
        "base_s_per_step": NUMBER, "new_s_per_step": NUMBER, "delta_s_per_step": NUMBER,
        "base_savings_s_per_step": _null(NUMBER), "new_savings_s_per_step": _null(NUMBER),
        "base_counted_s_per_step": _null(NUMBER),
        # A base finding that disappeared or shrank: its claimed saving, what the step and its own cost really
        # fell by, and (disappeared) the share of the claim the step realized.
        "claimed_s_per_step": _null(NUMBER), "claimed_counted_s_per_step": _null(NUMBER),
        "realized_step_s_per_step": _null(NUMBER),
        "realized_own_s_per_step": _null(NUMBER), "realized_share": _null(NUMBER),
    }, closed=False)


def _compare_gate() -> dict:
    """The report's gate record, for the one gate a comparison has."""
    gate = _gate()
    gate["properties"]["name"] = {"const": "fail-on-regression"}
    gate["properties"]["value"] = _null(NUMBER)  # the step's change as a share: negative when faster
    return gate


def compare_schema() -> dict:
    """The schema of ``diagnose compare --format json`` at ``compare_schema_version``."""
    top = _obj({
        "compare_schema_version": {"const": COMPARE_SCHEMA_VERSION},
        "tool": _obj({"name": {"const": "xladiag"}, "version": STRING}),
        "headline": STRING,
        "measured": BOOL,
        "base": _side(),
        "new": _side(),
        "step": _obj({"base_s": _null(NON_NEG), "new_s": _null(NON_NEG), "delta_s": _null(NUMBER),
                      "ratio": _null(NON_NEG), "verdict": {"enum": STEP_VERDICTS}, "noise_test": _noise_test()},
                     closed=False),
        "mfu": _obj({"base": _null(NON_NEG), "new": _null(NON_NEG), "ratio": _null(NON_NEG)}),
        "regression": _obj({"threshold": _null(NON_NEG), "value": _null(NUMBER), "tripped": BOOL,
                            "reason": STRING}),
        "gates": _list(_compare_gate()),
        "breakdown": _list(_obj({"class": {"enum": list(BREAKDOWN_CATEGORIES)}, "base_s": _null(NUMBER),
                                 "new_s": _null(NUMBER), "delta_s": _null(NUMBER), "ratio": _null(NUMBER)})),
        "ops_summary": {"type": "object", "required": ["counts"],
                        "properties": {"counts": {"type": "object", "additionalProperties": {**INT, "minimum": 0}}}},
        "ops": _list(_op_change()),
        "findings_summary": {"type": "object", "additionalProperties": {**INT, "minimum": 0}},
        "findings": _list(_finding_change()),
        "warnings": _list(STRING),
    }, closed=False)
    return document("compare", COMPARE_SCHEMA_VERSION,
                    f"xladiag comparison, compare_schema_version {COMPARE_SCHEMA_VERSION}",
                    "diagnose compare --format json; fields in docs/compare.md, policy in CHANGELOG.md", top)
