"""The JSON report's contract as a JSON Schema (draft 2020-12), built here and shipped as a file.

``report/report.schema.json`` (package data, :func:`load_schema`) and ``docs/report.schema.json`` are this
module's output (and ``compare.schema.json``, from :mod:`.compare_schema`):
``python -m xladiag.report.json_schema`` rewrites both, and a test fails when either drifts. The ops
fields come from ``analyzer/tables.py`` (the same declaration the JSON writer reads), so a new public column
reaches the schema without an edit here.

Strict where the shape is stable (``additionalProperties: false`` on findings, their ops, chip, run,
recoverable, op records): a key renamed or misspelt by a renderer fails validation. The top level and
``steps`` stay open while features that add sections are in flight; the CHANGELOG says what may change.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path

from ..analyzer.analysis import BREAKDOWN_CATEGORIES
from ..analyzer.hlo.framework import FRAMEWORKS, LIBRARIES
from ..analyzer.hlo.memory_at_peak import KINDS as PEAK_KINDS
from ..analyzer.models.collectives import BANDWIDTH_BOUNDS, KINDS, TRANSFER_KINDS
from ..analyzer.scopes import SCOPES
from ..analyzer.tables import OPS
from ..rules.base import BENEFITS
from ..rules.hbm_headroom import KINDS as HBM_KINDS
from ..rules.sharding_intensity import AXIS_KIND_PATTERN
from .json_out import SCHEMA_VERSION

DRAFT = "https://json-schema.org/draft/2020-12/schema"
# name -> file beside this module and in docs/; the compare and history JSON builders: report/compare_schema.py,
# report/history_schema.py.
SCHEMA_FILES = {"report": "report.schema.json", "compare": "compare.schema.json", "history": "history.schema.json"}

LEVELS = ["high", "medium", "low"]
SEVERITIES = [*LEVELS, "info"]  # info: a note, nothing to save on this capture (rules/base.py)
PLATFORMS = ["tpu", "gpu", "cpu", "hlo"]
# A finding's kind: '' for a rule with one finding, else the transfer kind it is about (exposed-collective), or
# hbm-headroom's verdict class.
FINDING_KINDS = ["", *TRANSFER_KINDS, *HBM_KINDS]
# A collective's bound is its link (models/collectives.BANDWIDTH_BOUNDS: ici, nvlink, xgmi, pcie, network).
BOUND_BY = ["compute", "hbm", "host", "ici", "latency", "unknown", *[b for b in BANDWIDTH_BOUNDS if b != "ici"]]
# Closed vocabularies of op fields (analyzer/models/roofline.py, analysis._time_class, hlo_facts); null = unknown.
OP_ENUMS = {
    "bound_by": BOUND_BY,
    "time_class": [c for c in BREAKDOWN_CATEGORIES if c != "idle"],
    "flops_source": ["trace", "hlo"],
    "bytes_source": ["trace", "hlo"],
    "collective_kind": list(KINDS),
}

STRING = {"type": "string"}
NUMBER = {"type": "number"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
NON_NEG = {"type": "number", "minimum": 0}
FRACTION = {"type": "number", "minimum": 0, "maximum": 1}


def _null(schema: dict) -> dict:
    """``schema`` or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(properties: dict, *, required: list[str] | None = None, closed: bool = True, doc: str = "") -> dict:
    out = {"type": "object"}
    if doc:
        out["description"] = doc
    out["required"] = list(properties) if required is None else required
    out["properties"] = properties
    if closed:
        out["additionalProperties"] = False
    return out


def _list(items: dict) -> dict:
    return {"type": "array", "items": items}


def _op_field(column) -> dict:
    if column.json_type == "string" or column.json == "hlo_text":
        return STRING
    if column.dtype == "bool":
        return BOOL
    if column.dtype == "int64":
        return INT
    if column.dtype == "float64":
        return _null(NUMBER)
    if column.json in OP_ENUMS:
        return {"enum": [*OP_ENUMS[column.json], None]}
    return _null(STRING)


# Fields added within a schema version: optional, so the reports written before them still validate (compare
# and baselines read earlier reports of the same version).
ADDED_OP_FIELDS = ("kernels",)
ADDED_TOP_FIELDS = ("framework", "scopes", "unpriced_share", "mfu_at_least", "memory_at_peak")


def _op_record() -> dict:
    props = {}
    for c in OPS.public():
        props[c.json] = {**_op_field(c), "description": c.meaning}
    record = _obj(props, doc="One HLO op (docs/json_schema.md#ops)")
    record["required"] = [k for k in record["required"] if k not in ADDED_OP_FIELDS]
    return record


def _scope_record() -> dict:
    """One scope of the ops' name paths (analyzer/scopes.py declares the fields)."""
    kinds = {"text": _null(STRING), "int64": {**INT, "minimum": 0}, "float64": _null(NUMBER)}
    given = {"string": STRING, "array of string": _list(STRING)}
    props = {c.json: {**given.get(c.json_type, kinds[c.dtype]), "description": c.meaning} for c in SCOPES.public()}
    return _obj(props, doc="One scope of the framework name paths (docs/json_schema.md#scopes)")


def _occurrence() -> dict:
    return _obj({
        "host": STRING,
        "device": {**INT, "minimum": 0, "description": "global device index (device_list)"},
        "plane": {**STRING, "description": "the xplane the event is on, e.g. /device:TPU:0"},
        "line": {**STRING, "description": "the trace line, e.g. XLA Ops, Stream #12(...), a CPU thread"},
        "line_label": {**STRING, "description": "the line as the reports name it, where its name is a CPU "
                                                "thread id: 'CPU thread N (pool name)'"},
        "step": {**INT, "description": "step number on its device (the device's median-duration step)"},
        "start_ps": {**INT, "description": "event start, picoseconds on the capture's clock"},
        "end_ps": {**INT, "description": "event end (start + its extent on the timeline), picoseconds"},
    }, required=["host", "device", "plane", "line", "step", "start_ps", "end_ps"],
        doc="One representative occurrence of the op in the trace (docs/json_schema.md#occurrence)")


def _finding() -> dict:
    evidence_op = _obj({
        "name": STRING,
        "measured_s_per_step": _null(NUMBER),
        "predicted_s_per_step": _null(NUMBER),
        "detail": STRING,
        "occurrence": _null(_occurrence()),
    })
    return _obj({
        "rule": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$"},
        # sharding-intensity: one finding per mesh axis, its kind the axis' devices as a slug.
        "kind": {"anyOf": [{"enum": FINDING_KINDS}, {"type": "string", "pattern": AXIS_KIND_PATTERN}]},
        "key": {"type": "string", "pattern": "^[a-z0-9-]+:[a-z0-9-]*:"},
        "severity": {"enum": SEVERITIES},
        "title": {**STRING, "minLength": 1},
        "time_s_per_step": NON_NEG,
        "est_savings_s_per_step": NON_NEG,
        "counted_s_per_step": NON_NEG,
        "fraction_of_step": NON_NEG,
        "confidence": {"enum": LEVELS},
        "lever": STRING,
        "benefit": {"enum": list(BENEFITS)},
        "related_ops": _list(_obj({"op": STRING, "counted_by": STRING})),
        "ops": _list(evidence_op),
        "evidence": STRING,
        "fix": STRING,
        "details": {"type": "object", "description": "rule-specific numbers: docs/rules.md#finding-details"},
    }, doc="One diagnosis by one rule (docs/json_schema.md#findings)")


def _gate() -> dict:
    threshold = {"anyOf": [FRACTION, {"enum": LEVELS}]}
    return _obj({
        "name": {"enum": ["fail-on", "max-exposed-collective", "max-exposed-host-transfer", "min-mfu"]},
        "option": {"type": "string", "pattern": "^--[a-z-]+$"},
        "measures": STRING,
        "threshold": threshold,
        "value": _null({**NUMBER, "minimum": 0}),
        "unit": {"enum": ["fraction", "count"]},
        "tripped": BOOL,
        "message": {**STRING, "minLength": 1},
    }, doc="One CI gate evaluated on the report (docs/json_schema.md#gates)")


def _chip() -> dict:
    return _obj({
        "name": STRING,
        "key": _null(STRING),
        "vendor": _null(STRING),
        "peak_flops_per_s": _null(NON_NEG),
        "hbm_bytes_per_s": _null(NON_NEG),
        "ridge_flops_per_byte": _null(NON_NEG),
        "detected_as": _null(STRING),
        "source": {"type": "object", "required": ["peak_flops_per_s", "hbm_bytes_per_s"],
                   "additionalProperties": STRING},
        "other_numbers": {"type": "object", "additionalProperties": _null(NUMBER)},
    })


def _steps() -> dict:
    program = _obj({"name": STRING, "program_id": _null(STRING), "share": FRACTION})
    props = {
        "count": {**INT, "minimum": 0},
        "mean_s": _null(NON_NEG),
        "min_s": _null(NON_NEG),
        "max_s": _null(NON_NEG),
        "source": STRING,
        "program": _null(STRING),
        "warmup_excluded": BOOL,
        "busy_s": _null(NON_NEG),
        "idle_s": _null(NON_NEG),
        "per_step_s": _list(NON_NEG),  # the measured steps' times, in order (compare's noise test reads them)
        # Steps that are a program's executions: its share of the programs' device time; the other programs
        # (most first) when that share is under half.
        "program_share": _null(FRACTION),
        "other_programs": _list(program),
    }
    optional = ("per_step_s", "program_share", "other_programs")
    return _obj(props, required=[k for k in props if k not in optional], closed=False)


def _host_steps() -> dict:
    """Step time per host and the slowest host's lag (null without measured steps)."""
    row = _obj({"host": STRING, "devices": {**INT, "minimum": 0}, "device_steps": {**INT, "minimum": 0},
                "step_s": NON_NEG, "busy_s": _null(NON_NEG), "idle_s": _null(NON_NEG), "lag_s": NUMBER})
    return _null(_obj({"hosts": _list(row), "median_step_s": NON_NEG, "slowest_host": _null(STRING),
                       "lag_s": _null(NON_NEG), "lag_fraction": _null(NON_NEG)}))


def _selection() -> dict:
    left = _obj({"rule": STRING, "why": STRING})
    ignored = _obj({"key": STRING, "rule": STRING, "severity": {"enum": SEVERITIES}, "title": STRING, "why": STRING})
    return _obj({"select": _null(_list(STRING)), "ignore": _list(STRING), "baseline": _null(STRING),
                 "baseline_keys": {**INT, "minimum": 0}, "rules_left_out": _list(left),
                 "ignored_findings": _list(ignored)})


def _choices() -> dict:
    def item(value: dict) -> dict:
        return _obj({"value": value, "source": {"enum": ["given", "inferred"]}})
    return _obj({"program": item(_null(STRING)), "steps": item(_null(STRING)), "hosts": item(_list(STRING))},
                required=["program"])


def _memory_at_peak() -> dict:
    """The buffers in device memory at the analysed program's peak (analyzer/hlo/memory_at_peak.py); null
    without a buffer assignment in the dump."""
    buffer = _obj({"buffer": STRING, "kind": {"enum": list(PEAK_KINDS)}, "size_bytes": {**INT, "minimum": 0},
                   "shape": STRING, "dtype": STRING, "instruction": STRING, "opcode": STRING, "op_name": STRING,
                   "source_file": STRING, "source_line": _null(INT), "allocation": _null({**INT, "minimum": 0}),
                   "offset_bytes": {**INT, "minimum": 0}})
    count = {**INT, "minimum": 0}
    return _null(_obj({"module": STRING, "peak_bytes": count, "peak_source": STRING, "buffer_assignment": STRING,
                       "peak_instruction": _null(STRING), "bytes_by_kind": _obj({k: count for k in PEAK_KINDS}),
                       "buffers": _list(buffer), "buffers_left_out": count, "bytes_left_out": count}))


def report_schema() -> dict:
    """The schema of ``diagnose --format json`` (``report_to_dict``) at :data:`SCHEMA_VERSION`."""
    top = _obj({
        "schema_version": {"const": SCHEMA_VERSION},
        "tool": _obj({"name": {"const": "xladiag"}, "version": STRING}),
        "headline": STRING,
        "platform": {"enum": PLATFORMS},
        "measured": BOOL,
        "time_source": STRING,
        "chip": _chip(),
        "devices": {**INT, "minimum": 0},
        "device_list": _list(_obj({"device": INT, "host": STRING, "device_type": STRING, "vendor": STRING},
                                  required=["device"])),
        "hosts": _list(STRING),
        "run": _obj({"name": _null(STRING), "dir": _null(STRING), "other_runs": _list(STRING),
                     "note": _null(STRING), "xplane_files": _list(STRING), "hlo_files": _list(STRING)},
                    required=["name", "dir", "other_runs", "xplane_files", "hlo_files"]),  # note: added later
        "steps": _steps(),
        "host_steps": _host_steps(),
        "step_s": _null(NON_NEG),
        "breakdown": _obj({c: NON_NEG for c in BREAKDOWN_CATEGORIES}),
        "mfu": _null(FRACTION),
        "unknown_flops_share": _null(FRACTION),
        "unpriced_share": _null(FRACTION),  # of the step's op time, in ops with no cost model
        "mfu_at_least": BOOL,  # MFU is a lower bound: more than 5% of the step is unpriced
        "model_flops_per_step": _null(NON_NEG),
        "ideal_step_s": _null(NON_NEG),
        "recoverable": _obj({"s_per_step": NON_NEG, "fraction_of_step": _null(FRACTION),
                             "findings": {**INT, "minimum": 0}, "capped_at_step": BOOL}),
        "capture_scope": _null(STRING),
        "gates": _list(_gate()),
        "findings": _list(_finding()),
        "selection": _selection(),
        "choices": _choices(),
        # Who built the program (analyzer/hlo/framework.py): the fixes name that framework's levers.
        "framework": _obj({"name": {"enum": list(FRAMEWORKS)}, "libraries": _list({"enum": list(LIBRARIES)}),
                           "evidence": STRING}),
        "ops": _list(_op_record()),
        "scopes": _list(_scope_record()),
        "memory_at_peak": _memory_at_peak(),
        "warnings": _list(STRING),
    }, closed=False)
    top["required"] = [k for k in top["required"] if k not in ADDED_TOP_FIELDS]
    return document("report", SCHEMA_VERSION, f"xladiag report, schema_version {SCHEMA_VERSION}",
                    "diagnose --format json; fields and units in docs/json_schema.md, "
                    "compatibility policy in CHANGELOG.md", top)


def document(name: str, version: int, title: str, description: str, top: dict) -> dict:
    """A schema file: draft, versioned id, title and description around the top-level object ``top``."""
    return {"$schema": DRAFT, "$id": f"https://github.com/xladiag/xladiag/schemas/{name}-v{version}.json",
            "title": title, "description": description, **top}


def _compare_schema() -> dict:
    from .compare_schema import compare_schema  # it builds on this module's pieces

    return compare_schema()


def _history_schema() -> dict:
    from .history_schema import history_schema  # it builds on this module's pieces

    return history_schema()


BUILDERS = {"report": report_schema, "compare": _compare_schema, "history": _history_schema}


def schema_text(name: str = "report") -> str:
    """The schema file's text as this module builds it (what the shipped files must equal)."""
    return json.dumps(BUILDERS[name](), indent=2, ensure_ascii=False) + "\n"


@cache
def load_schema(name: str = "report") -> dict:
    """The shipped schema (package data), e.g. to validate a report: ``jsonschema.validate(data, load_schema())``."""
    text = resources.files(__package__).joinpath(SCHEMA_FILES[name]).read_text(encoding="utf-8")
    return json.loads(text)


def write_schema_files(repo_root: Path) -> list[Path]:
    """Rewrite the shipped and the docs copy of every schema; returns the paths written."""
    written = []
    for name, file_name in SCHEMA_FILES.items():
        for folder in (Path(__file__).resolve().parent, repo_root / "docs"):
            path = folder / file_name
            path.write_text(schema_text(name), encoding="utf-8")
            written.append(path)
    return written


if __name__ == "__main__":
    for p in write_schema_files(Path(__file__).resolve().parents[1]):
        print(p)
