"""What the user configured: ``[tool.xladiag]`` in the project's pyproject.toml and baseline files.

Keys of ``[tool.xladiag]`` (the command-line options of the same name win over them):

    [tool.xladiag]
    select = ["exposed-collective", "remat-overhead"]   # report only these rules
    ignore = ["mxu-padding"]                            # leave these out
    baseline = "xladiag-baseline.txt"                   # accepted findings (relative to this pyproject.toml)
    fail_on = "high"                                    # gates, as --fail-on, --max-exposed-collective,
    max_exposed_collective = "10%"                      # --max-exposed-host-transfer and --min-mfu
    max_exposed_host_transfer = "10%"
    min_mfu = "30%"

A baseline file is either a JSON report (its findings' ``key`` are taken, each at its size band), a JSON list
of entries, or text with one entry per line (``#`` starts a comment line): a key (``rule:kind:main_op``),
best followed by its size band (``rule:kind:main_op band=-5``, :mod:`.rules.selection`). ``write_baseline``
writes the text form, which reviews well in a diff.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError, UsageError
from .options import RuleChoice
from .parsers.input_files import read_input_text
from .rules.registry import RULE_IDS
from .rules.selection import BAND, Selection, band_of, baseline_entry, parse_entry, parse_rule_list
from .text_safety import check_nesting

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the tomli backport, a dependency below 3.11
    import tomli as tomllib

TABLE = "[tool.xladiag]"
GATE_KEYS = ("fail_on", "max_exposed_collective", "max_exposed_host_transfer", "min_mfu")
KEYS = ("select", "ignore", "baseline", *GATE_KEYS)


@dataclass(frozen=True)
class ProjectConfig:
    """``[tool.xladiag]`` as found: ``path`` None when no pyproject.toml above has the table."""

    path: Path | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    baseline: Path | None = None
    gates: tuple[tuple[str, object], ...] = ()  # (GATE_KEYS name, threshold): what the command line leaves unset


def _gates(table: dict, where: str) -> tuple[tuple[str, object], ...]:
    """The gate keys of the table, checked as the options of the same name are."""
    from .report.gates import parse_share

    out = []
    for key in GATE_KEYS:
        if key not in table:
            continue
        value = table[key]
        if key == "fail_on":
            if value not in ("high", "medium", "low"):
                raise UsageError(f"{where} fail_on: {value!r} is not one of high, medium, low")
        elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise UsageError(f"{where} {key}: expected a share such as \"10%\" or 0.10, got {value!r}")
        else:
            value = parse_share(str(value), f"{where} {key}")
        out.append((key, value))
    return tuple(out)


def project_gates(given: dict, project: ProjectConfig | None) -> dict:
    """The gates of ``Report.with_gates``: each given one, else the project's (``[tool.xladiag]``)."""
    fallback = dict(project.gates) if project is not None else {}
    return {k: v if v is not None else fallback.get(k) for k, v in given.items()}


def find_pyproject(start: Path | str | None = None) -> Path | None:
    """The nearest pyproject.toml from ``start`` (default: the current directory) upward."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_project_config(start: Path | str | None = None) -> ProjectConfig:
    """``[tool.xladiag]`` of the nearest pyproject.toml (an empty config when there is none, or no table)."""
    path = find_pyproject(start)
    if path is None:
        return ProjectConfig()
    try:
        text = read_input_text(path)
        check_nesting(text, f"{path} {TABLE}", "toml")  # tomllib recurses per level
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: cannot read {TABLE}: {exc}") from None
    table = data.get("tool", {}).get("xladiag")
    if table is None:
        return ProjectConfig()
    if not isinstance(table, dict):
        raise InputError(f"{path}: {TABLE} must be a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise UsageError(f"{path}: unknown key {', '.join(unknown)} in {TABLE}; valid keys: {', '.join(KEYS)}")
    where = f"{path} {TABLE}"
    select = parse_rule_list(table["select"], f"{where} select", RULE_IDS) if "select" in table else None
    if select == ():  # reports nothing, so every gate passes: never what a CI config means
        raise UsageError(f"{where} select: selects no rule; list rule ids, or leave the key out to report every rule")
    ignore = parse_rule_list(table["ignore"], f"{where} ignore", RULE_IDS) if "ignore" in table else None
    baseline = table.get("baseline")
    if baseline is not None and not isinstance(baseline, str):
        raise UsageError(f"{where} baseline: expected a file name, got {baseline!r}")
    return ProjectConfig(path=path, select=select, ignore=ignore,
                         baseline=(path.parent / baseline) if baseline else None, gates=_gates(table, where))


def read_baseline(path: Path | str) -> frozenset[str]:
    """The finding keys a baseline file accepts (see the module docstring for the formats)."""
    path = Path(path)
    try:
        text = read_input_text(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such baseline file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the baseline: {exc}") from None
    if text.lstrip().startswith(("{", "[")):
        return _json_baseline(text, path)
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def _json_baseline(text: str, path: Path) -> frozenset[str]:
    """A JSON baseline's keys: a diagnose report's (of any schema version: only findings[].key is read, checked
    against the report schema's) or a list of keys. Else one line naming the file and the bad field's JSON path."""
    from .parsers.report_json import load_json
    from .report.json_schema import load_schema
    from .report.schema_check import violation

    try:
        data = load_json(text, str(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: baseline is not valid JSON: {exc}") from None
    if isinstance(data, dict):
        key = load_schema("report")["properties"]["findings"]["items"]["properties"]["key"]
        finding = {"type": "object", "required": ["key"], "properties": {"key": key}}
        schema = {"type": "object", "required": ["schema_version", "findings"],
                  "properties": {"findings": {"type": "array", "items": finding}}}
    else:
        schema = {"type": "array", "items": {"type": "string"}}
    bad = violation(data, schema)
    if bad:
        raise InputError(f"{path}: a JSON baseline is a diagnose report (--format json) or a list of keys: {bad[0]}: "
                         f"{bad[1]}")
    if not isinstance(data, dict):
        return frozenset(data)
    # A report's findings accepted at the size they had: its key and size band.
    return frozenset(f"{f['key']}{BAND}{band_of(*(f.get(k) or 0.0 for k in _SIZE))}" for f in data["findings"])


_SIZE = ("est_savings_s_per_step", "time_s_per_step", "fraction_of_step")  # a JSON finding's band (band_of)


def baseline_text(keys) -> str:
    """The text form of a baseline: a comment, then one key per line, sorted."""
    header = ("# xladiag baseline: accepted findings, one key (rule:kind:main_op) per line, with its size band:\n"
              "# band=N accepts the finding while its saving is under 2**(N+1) of the step; grown past it, it is\n"
              "# new again. diagnose --baseline FILE leaves these out of the report and its gates.\n")
    return header + "".join(f"{k}\n" for k in sorted(set(keys)))


def baseline_keys(report) -> list[str]:
    """The keys a new baseline of this report accepts: its findings and those its baseline already accepted
    (not those of rules left out, which another selection would report)."""
    return ([baseline_entry(f) for f in report.findings]
            + [baseline_entry(d.finding) for d in report.dropped if d.by == "baseline"])


def selection(*, select=None, ignore=None, baseline=None, project: ProjectConfig | None = None) -> Selection:
    """The :class:`Selection` for these options (each a comma list, a list of ids, or None), falling back
    on ``project`` (``[tool.xladiag]``) key by key. ``baseline``: a file, or an iterable of keys."""
    project = project or ProjectConfig()
    where = f"{project.path} {TABLE}" if project.path else TABLE
    sel, sel_from = (parse_rule_list(select, "--select", RULE_IDS), "--select") if select is not None else (
        project.select, f"{where} select")
    if sel == ():  # the command refuses an empty --select itself (cli_common.select_options); this is the API's
        raise UsageError(f"select={select!r} selects no rule; give rule ids, or leave select out to report every rule")
    ign, ign_from = (parse_rule_list(ignore, "--ignore", RULE_IDS), "--ignore") if ignore is not None else (
        project.ignore or (), f"{where} ignore")
    if baseline is None:
        baseline = project.baseline
    keys, shown, notes = frozenset(), None, ()
    if isinstance(baseline, (str, Path)):
        keys, shown = read_baseline(baseline), str(baseline)
        unbanded = sum(parse_entry(k)[1] is None for k in keys)
        if unbanded:
            notes = (f"baseline {shown}: {unbanded} of its {len(keys)} entries have no size band, so they accept "
                     "their finding however much it grows; re-write it with --write-baseline",)
    elif baseline is not None:
        keys = frozenset(baseline)
    return Selection(select=sel, ignore=ign, baseline=keys, baseline_file=shown,
                     select_from=sel_from, ignore_from=ign_from, notes=notes)


def chosen_rules(rules: RuleChoice) -> Selection:
    """The :class:`Selection` of an :class:`~xladiag.options.Options`' rule options: a ready one as it is."""
    if isinstance(rules.select, Selection):
        return rules.select
    return selection(select=rules.select, ignore=rules.ignore, baseline=rules.baseline, project=rules.config)
