"""The reports a ``diagnose mcp`` server holds: analyses cached per (path, capture options) while the files are
unchanged, reports per (analysis, rule selection), each with an id ('r1', 'r2', ...) the tools name it by.
Asking again with another rule selection, or comparing what was diagnosed, costs no new analysis.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, fields
from pathlib import Path

from .cli_common import location
from .errors import InputError, UsageError
from .options import Options

KEEP_ANALYSES = 8  # analyses held at once (each holds its op and event tables); the oldest used goes first
KEEP_REPORTS = 32
STAMP_FILES = 20_000  # files looked at to tell that a capture changed on disk


@dataclass(frozen=True)
class Entry:
    """One diagnosed report: its id, the Report, its JSON dict, and the op keys each rule's findings count."""

    id: str
    report: object  # report.model.Report
    data: dict
    claimed: dict  # rule id -> {(module, program_id, op name)}
    findings_of: dict  # (module, program_id, op name) -> [finding keys]


def _stamp(where) -> tuple | None:
    """What changes when the files under ``where`` do (count, newest mtime, total size); None for a URL."""
    if where is None or isinstance(where, str) or not Path(where).exists():
        return None
    seen, newest, size = 0, Path(where).stat().st_mtime_ns, 0
    for root, dirs, files in os.walk(where):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(root, name))
                seen, newest, size = seen + 1, max(newest, st.st_mtime_ns), size + st.st_size
        if seen > STAMP_FILES:
            break
    return seen, newest, size


def _key(options: Options) -> tuple:
    """The capture and hardware options, paths as resolved text: what one analysis depends on."""
    def text(value):
        return str(Path(value).resolve()) if isinstance(value, Path) else value
    groups = (options.capture, options.hardware)
    return tuple((f.name, text(getattr(g, f.name))) for g in groups for f in fields(g))


def _ops_of(report) -> tuple[dict, dict]:
    claimed, findings_of = {}, {}
    for f in report.findings:
        for claim in f.claims:
            claimed.setdefault(f.rule, set()).add(claim.op)
            findings_of.setdefault(claim.op, [])
            if f.key not in findings_of[claim.op]:
                findings_of[claim.op].append(f.key)
    return claimed, findings_of


class Diagnoses:
    """The reports of this server process: analyses by capture options (refreshed when the files change),
    reports by (analysis, rule selection), ids ('r1', 'r2', ...) by both."""

    def __init__(self, config=None):
        self.config = config  # [tool.xladiag] of the directory the server started in
        self._lock = threading.RLock()
        self._analyses: OrderedDict = OrderedDict()  # key -> (stamp, Analysis)
        self._reports: OrderedDict = OrderedDict()  # (key, Selection) -> Entry
        self._ids: dict[tuple, str] = {}
        self._options: dict[str, Options] = {}  # id -> the options that make it again
        self.last: str | None = None  # the report of the last diagnose call: what the other tools default to

    def options(self, path=None, **given) -> Options:
        """The Options of a tool's arguments: paths as the command reads them, [tool.xladiag] under them."""
        hlo_dir = given.pop("hlo_dir", None)
        if path is None and hlo_dir is None:
            raise UsageError("give a profile directory or .xplane.pb file as path (or hlo_dir)")
        options = Options.of(path=location(None, None, path), hlo_dir=location(None, None, hlo_dir),
                             config=self.config, **{k: v for k, v in given.items() if v is not None})
        for where in (options.capture.path, options.capture.hlo_dir):
            if isinstance(where, Path) and not where.exists():
                raise InputError(f"{where}: no such file or directory")
        return options

    def entry(self, options: Options, refresh: bool = False) -> Entry:
        """The report of these options: from the cache while its files are unchanged, else diagnosed now."""
        from .analyzer.analysis import analyze
        from .config import chosen_rules

        selection = chosen_rules(options.rules)  # a bad rule id fails before the work
        capture = options.replace(select=None, ignore=None, baseline=None, config=None)
        key = _key(capture)
        stamp = (_stamp(capture.capture.path), _stamp(capture.capture.hlo_dir))
        with self._lock:
            held = self._analyses.get(key)
            if refresh or held is None or held[0] != stamp:
                with contextlib.redirect_stdout(sys.stderr):  # stdout is the protocol's
                    held = (stamp, analyze(capture))
                self._analyses[key] = held
                for old in [k for k in self._reports if k[0] == key]:
                    del self._reports[old]
            self._analyses.move_to_end(key)
            while len(self._analyses) > KEEP_ANALYSES:
                self._analyses.popitem(last=False)
            return self._report(key, selection, held[1], capture)

    def _report(self, key: tuple, selection, analysis, capture: Options) -> Entry:
        from .api import build_report

        entry = self._reports.get((key, selection))
        if entry is None:
            report = build_report(analysis, selection)
            report_id = self._ids.setdefault((key, selection), f"r{len(self._ids) + 1}")
            self._options[report_id] = capture.replace(select=selection)
            entry = Entry(report_id, report, report.to_dict(), *_ops_of(report))
            self._reports[(key, selection)] = entry
        self._reports.move_to_end((key, selection))
        while len(self._reports) > KEEP_REPORTS:
            self._reports.popitem(last=False)
        return entry

    def find(self, report: str | None) -> Entry:
        """A report by id ('r1'), or a path diagnosed with default options; None: the last diagnose call's."""
        report = report or self.last
        if report is None:
            raise UsageError("no report yet: call diagnose(path=...) first, or give report= a profile path")
        if report in self._options:
            return self.entry(self._options[report])
        return self.entry(self.options(report))

    def _path_of(self, side: str) -> str:
        """A report id's capture path (compare reads paths; the capture's analysis is in the cache), else ``side``."""
        if side not in self._options:
            return side
        path = self._options[side].capture.path
        if path is None or isinstance(path, str):
            raise UsageError(f"report {side} is of {'an HLO dump' if path is None else 'a URL'}: compare takes "
                             "captures on this machine or JSON reports")
        return str(path)

    def compare(self, base: str, new: str, **given) -> dict:
        """The comparison JSON of two captures or JSON reports; a capture side from the cache."""
        from .compare.sides import compare_sides
        from .config import chosen_rules
        from .parsers.report_json import read_report_json
        from .report.compare_model import Comparison
        from .report.json_out import SCHEMA_VERSION

        paths = {"base": Path(self._path_of(base)), "new": Path(self._path_of(new))}
        for path in paths.values():
            if not path.exists():
                raise InputError(f"{path}: no such file or directory")
        options = Options.of(config=self.config, **{k: v for k, v in given.items() if v is not None})
        data = compare_sides(paths, options, chosen_rules(options.rules),
                             diagnose=lambda side: copy.deepcopy(self.entry(side).data),
                             read_json=lambda path: read_report_json(path, SCHEMA_VERSION))
        return Comparison(data).to_dict()
