"""``diagnose mcp``: the diagnoses served to an agent over stdio with the Model Context Protocol.

Tools (answers are compact JSON text, cut from the JSON report by mcp_views.py): ``diagnose`` (a capture or
HLO dump -> headline, verdict numbers, findings, top ops, and a report id); ``finding``, ``ops``, ``op`` and
``section`` (any field of the JSON report, paged) of a report by id, or of a path diagnosed with default
options; ``compare`` (two captures or JSON reports); ``explain_rule``. Analyses are cached in the server
process per (path, capture options) while the files are unchanged, so asking again with another rule
selection, or comparing what was diagnosed, costs no new analysis.

The MCP SDK (``pip install 'xladiag[mcp]'``) is imported only when the server starts.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import json
import os
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, fields
from pathlib import Path

import click

from . import mcp_views as views
from .cli_common import CONTEXT, OneLineErrors, location
from .errors import InputError, UsageError, XladiagError
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

    def compare(self, base: str, new: str, **given) -> dict:
        """The comparison JSON of two captures or JSON reports; a capture side from the cache."""
        from .compare.sides import compare_sides
        from .config import chosen_rules
        from .parsers.report_json import read_report_json
        from .report.compare_model import Comparison
        from .report.json_out import SCHEMA_VERSION

        paths = {"base": Path(base), "new": Path(new)}
        for path in paths.values():
            if not path.exists():
                raise InputError(f"{path}: no such file or directory")
        options = Options.of(config=self.config, **{k: v for k, v in given.items() if v is not None})
        data = compare_sides(paths, options, chosen_rules(options.rules),
                             diagnose=lambda side: copy.deepcopy(self.entry(side).data),
                             read_json=lambda path: read_report_json(path, SCHEMA_VERSION))
        return Comparison(data).to_dict()


def _json(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


INSTRUCTIONS = """xladiag diagnoses XLA profiles (jax.profiler.trace log dirs, .xplane.pb files) and HLO dumps:
what is slow, why, how far each op is from its roofline, and what to change. Start with diagnose(path=...);
it returns a report id for finding/ops/op/section (which default to the last diagnose call's report). Paths
are read where the server runs (relative ones from its working directory). Times are seconds per step, shares
fractions (0.1 = 10%). Answers are compact JSON; long lists are capped and say how to page."""


def build_server(diagnoses: Diagnoses | None = None):
    """The MCP server with every tool registered (FastMCP in mcp 1.x, its successor MCPServer in 2.x)."""
    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:
        from mcp.server.fastmcp import FastMCP as Server
    accepts = inspect.signature(Server).parameters
    server = Server("xladiag", **({"instructions": INSTRUCTIONS} if "instructions" in accepts else {}))
    takes, extra = inspect.signature(server.tool).parameters, {}
    if "structured_output" in takes:  # our own compact JSON text, not the SDK's copy of it as structured content
        extra["structured_output"] = False
    if "annotations" in takes:  # every tool only reads: a client may run them without asking
        from mcp.types import ToolAnnotations

        extra["annotations"] = ToolAnnotations(readOnlyHint=True)
    register_tools(lambda fn: server.tool(description=inspect.cleandoc(fn.__doc__), **extra)(_refusals(fn)),
                   diagnoses or Diagnoses())
    return server


def _refusals(tool):
    """The tool with its refusals as the SDK's ToolError, whose text reaches the agent (other exceptions
    reach it as 'Error executing tool' alone): one line, as the command prints them."""
    try:
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        from mcp.server.fastmcp.exceptions import ToolError

    @functools.wraps(tool)
    def run(*args, **kwargs):
        try:
            return tool(*args, **kwargs)
        except XladiagError as exc:
            raise ToolError(str(exc)) from exc
        except Exception as exc:  # a bug: still one line the agent can report
            detail = " ".join(str(exc).split())
            detail = detail if len(detail) <= 300 else detail[:299] + "…"
            raise ToolError(f"internal error: {type(exc).__name__}: {detail}") from exc
    return run


def register_tools(tool, cache: Diagnoses) -> None:
    """Every tool, each through the decorator ``tool``."""
    @tool
    def diagnose(path: str | None = None, chip: str | None = None, hlo_dir: str | None = None,
                 program: str | None = None, steps: str | None = None, select: str | None = None,
                 ignore: str | None = None, refresh: bool = False) -> str:
        """Diagnose a profile: path is a jax.profiler.trace log dir, a run folder or one .xplane.pb (or give
        only hlo_dir, an XLA dump, for a static diagnosis). chip overrides detection (v6e, h100, cpu, v5p-128);
        program the step program (or the dump module); steps 'A:B' the step numbers measured; select/ignore
        comma lists of rule ids. Returns the report id, headline, verdict numbers (step_s, mfu, breakdown,
        recoverable), findings (key, saving per step), the top 10 ops. Cached until the files change;
        refresh=true diagnoses again."""
        options = cache.options(path, chip=chip, hlo_dir=hlo_dir, program=program, steps=steps, select=select,
                                ignore=ignore)
        entry = cache.entry(options, refresh=refresh)
        cache.last = entry.id
        return _json(views.summary(entry.id, entry.data))

    @tool
    def finding(key: str, report: str | None = None) -> str:
        """One finding whole (title, evidence, fix, ops, details) by its key rule:kind:main_op (a rule id
        names it when the rule found one). report: an id from diagnose (default: the last) or a profile path."""
        entry = cache.find(report)
        return _json(views.finding(entry.id, entry.data, key))

    @tool
    def ops(report: str | None = None, category: str | None = None, bound_by: str | None = None,
            rule: str | None = None, sort: str | None = None, limit: int = 20, offset: int = 0) -> str:
        """A page of the op table (one row per HLO op). Filters: category (e.g. 'loop fusion', 'all-gather'),
        bound_by ('compute', 'hbm', 'ici', 'latency'...), rule (the ops that rule's findings count). sort: a
        column (measured_s_per_step, predicted_s_per_step, efficiency, share_of_step, ...), biggest first;
        '+column' smallest first. limit (at most 100) rows from offset; next_offset pages on."""
        entry = cache.find(report)
        filters = {"category": category, "bound_by": bound_by, "rule": rule}
        return _json(views.ops_page(entry.id, entry.data, filters, entry.claimed, sort, limit, offset))

    @tool
    def op(name: str, report: str | None = None, program: str | None = None) -> str:
        """One op by name: its HLO text, category, occurrences per step, measured and predicted time,
        roofline numbers (flops, bytes, intensity, bound_by, efficiency), source line and framework op, and
        the findings that count it. program (module or program id) picks one when programs share the name."""
        entry = cache.find(report)
        return _json(views.op(entry.id, entry.data, name, program, entry.findings_of))

    @tool
    def compare(base: str, new: str, chip: str | None = None, program: str | None = None, steps: str | None = None,
                select: str | None = None, ignore: str | None = None) -> str:
        """Before/after: base and new are each a capture (log dir, run folder, .xplane.pb) or a JSON report
        from diagnose --format json. Returns the headline, the step change with its noise test verdict, MFU,
        the biggest op changes and the findings that appeared, disappeared, grew or shrank."""
        data = cache.compare(base, new, chip=chip, program=program, steps=steps, select=select, ignore=ignore)
        return _json(views.comparison(data))

    @tool
    def section(field: str, report: str | None = None, offset: int = 0, limit: int = 20) -> str:
        """One field of the JSON report as written (docs/json_schema.md: steps, host_steps, chip, run, devices,
        selection, choices, gates, warnings, ...): a list a page at a time (limit at most 100 from offset;
        next_offset pages on), anything else whole. An unknown field is refused with the fields there are."""
        entry = cache.find(report)
        return _json(views.section(entry.id, entry.data, field, offset, limit))

    @tool
    def explain_rule(rule: str | None = None) -> str:
        """What a rule finds, why it costs time, how its cost is estimated, its fix and the keys of its
        findings' details. Without rule: every rule id with its one-line summary."""
        from .rules.catalog import rule_catalog

        return _json(views.rule_text(rule, rule_catalog()))

    # A new part of the JSON report (time by framework scope, memory at the peak) is served by `section` as it
    # lands; a tool that filters or pages it its own way goes here, a function of `cache.find(report)` (an
    # Entry: the Report and its JSON dict) shaped in mcp_views.py. A run's history (diagnose history) would be
    # one taking the history's files, as `compare` takes two reports.


@click.command(cls=OneLineErrors, context_settings=CONTEXT)
@click.option("--debug", is_flag=True, help="Show the traceback behind an error at start-up.")
def mcp_main(debug: bool):
    """Serve xladiag to an AI agent: an MCP server on stdin/stdout (register it with your MCP client as
    the command `diagnose mcp`; see README "Agents (MCP)"). Tools: diagnose, finding, ops, op, section,
    compare, explain_rule. Needs the MCP SDK: pip install 'xladiag[mcp]'.
    """
    from .config import load_project_config

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UsageError("diagnose mcp needs the MCP SDK: pip install 'xladiag[mcp]'") from None
    build_server(Diagnoses(load_project_config())).run()
