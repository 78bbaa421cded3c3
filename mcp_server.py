"""``diagnose mcp``: the diagnoses served to an agent over stdio with the Model Context Protocol.

Tools (answers are compact JSON text, cut from the JSON report by mcp_views.py): ``diagnose`` (a capture or
HLO dump -> headline, verdict numbers, findings, top ops, and a report id); ``finding``, ``ops``, ``op``, ``scopes``
and ``section`` (any field of the JSON report, paged) of a report by id, or of a path diagnosed with default
options; ``compare`` (two captures or JSON reports); ``explain_rule``. The reports are held by mcp_cache.py.

The MCP SDK (``pip install 'xladiag[mcp]'``) is imported only when the server starts.
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
import traceback

import click

from . import mcp_views as views
from .cli_common import CONTEXT, OneLineErrors
from .errors import UsageError, XladiagError
from .mcp_cache import Diagnoses


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
        except Exception as exc:  # a bug: one line the agent can report, the traceback in the server's log
            traceback.print_exc(file=sys.stderr)
            detail = " ".join(str(exc).split())
            detail = detail if len(detail) <= 300 else detail[:299] + "…"
            raise ToolError(f"internal error: {type(exc).__name__}: {detail}") from exc
    return run


def register_tools(tool, cache: Diagnoses) -> None:
    """Every tool, each through the decorator ``tool``."""
    _report_tools(tool, cache)
    _other_tools(tool, cache)


def _report_tools(tool, cache: Diagnoses) -> None:
    """diagnose, and the tools that read one report."""
    @tool
    def diagnose(path: str | None = None, chip: str | None = None, hlo_dir: str | None = None,
                 program: str | None = None, steps: str | None = None, select: str | list[str] | None = None,
                 ignore: str | list[str] | None = None, refresh: bool = False) -> str:
        """Diagnose a profile: path is a jax.profiler.trace log dir, a run folder or one .xplane.pb (or give
        only hlo_dir, an XLA dump, for a static diagnosis). chip overrides detection (v6e, h100, cpu, v5p-128);
        program the step program (or the dump module); steps 'A:B' the step numbers measured; select/ignore
        rule ids (a list, or one comma-separated string). Returns the report id, headline, verdict numbers
        (step_s, mfu, breakdown, recoverable), findings (key, saving per step), the top 10 ops. Cached until
        the files change; refresh=true diagnoses again."""
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
            rule: str | None = None, program: str | None = None, sort: str | None = None, limit: int = 20,
            offset: int = 0) -> str:
        """A page of the op table (one row per HLO op). Filters: category (e.g. 'loop fusion', 'all-gather'),
        bound_by ('compute', 'hbm', 'ici', 'latency'...), rule (the ops that rule's findings count), program
        (module or program id). sort: a column (measured_s_per_step, predicted_s_per_step, efficiency,
        share_of_step, ...), biggest first; '+column' smallest first; default the time that ranks the ops.
        limit (at most 100) rows from offset; next_offset pages on. No match lists the values there are."""
        entry = cache.find(report)
        filters = {"category": category, "bound_by": bound_by, "rule": rule, "program": program}
        return _json(views.ops_page(entry.id, entry.data, filters, entry.claimed, sort, limit, offset))

    @tool
    def op(name: str, report: str | None = None, program: str | None = None) -> str:
        """One op by name: its HLO text, category, occurrences per step, measured and predicted time,
        roofline numbers (flops, bytes, intensity, bound_by, efficiency), source line and framework op, and
        the findings that count it. program (module or program id) picks one when programs share the name."""
        entry = cache.find(report)
        return _json(views.op(entry.id, entry.data, name, program, entry.findings_of))


def _other_tools(tool, cache: Diagnoses) -> None:
    """compare (two reports) and explain_rule (no report)."""
    @tool
    def compare(base: str, new: str, chip: str | None = None, program: str | None = None, steps: str | None = None,
                select: str | list[str] | None = None, ignore: str | list[str] | None = None) -> str:
        """Before/after: base and new are each a capture (log dir, run folder, .xplane.pb), a JSON report
        from diagnose --format json, or a report id from diagnose (its capture, with the options given here).
        Returns the headline, the step change with its noise test verdict, MFU, the biggest op changes and the
        findings that appeared, disappeared, grew or shrank."""
        data = cache.compare(base, new, chip=chip, program=program, steps=steps, select=select, ignore=ignore)
        return _json(views.comparison(data))

    @tool
    def scopes(report: str | None = None, under: str | None = None, depth: int | None = None,
               sort: str | None = None, limit: int = 20, offset: int = 0) -> str:
        """Where in the model the step's time goes: the ops added up by framework name path (JAX name stack,
        Flax modules; transformation wrappers stripped), one row per scope with its own (self_*) and its
        subtree's (total_*) time, FLOPs and bytes per step and the keys of findings on its ops. under: a scope
        path to look inside (default: the whole step); depth: levels below it (1: its children). Depth first,
        children heaviest first, unless sort names a column (total_measured_s_per_step, ...; '+col' ascending).
        limit (at most 100) rows from offset; next_offset pages on."""
        entry = cache.find(report)
        return _json(views.scopes_page(entry.id, entry.data, under, depth, sort, limit, offset))

    @tool
    def section(field: str, report: str | None = None, offset: int = 0, limit: int = 20) -> str:
        """One field of the JSON report as written (docs/json_schema.md: steps, host_steps, chip, run, devices,
        selection, choices, gates, warnings, ...): a list a page at a time (limit at most 100 from offset;
        next_offset pages on), an object whole but for lists longer than a page (paged alike, said in 'paged').
        An unknown field is refused with the fields there are."""
        entry = cache.find(report)
        return _json(views.section(entry.id, entry.data, field, offset, limit))

    @tool
    def explain_rule(rule: str | None = None) -> str:
        """What a rule finds, why it costs time, how its cost is estimated, its fix and the keys of its
        findings' details. Without rule: every rule id with its one-line summary."""
        from .rules.catalog import rule_catalog

        return _json(views.rule_text(rule, rule_catalog()))

    # A new part of the JSON report (memory at the peak) is served by `section` as it lands; a tool that
    # filters or pages it its own way goes here (as `scopes` does), a function of `cache.find(report)` (an
    # Entry: the Report and its JSON dict) shaped in mcp_views.py. A run's history (diagnose history) would be
    # one taking the history's files, as `compare` takes two reports.


@click.command(cls=OneLineErrors, context_settings=CONTEXT)
@click.option("--debug", is_flag=True, help="Show the traceback behind an error at start-up.")
def mcp_main(debug: bool):
    """Serve xladiag to an AI agent: an MCP server on stdin/stdout (register it with your MCP client as
    the command `diagnose mcp`; see README "Agents (MCP)"). Tools: diagnose, finding, ops, op, scopes,
    section, compare, explain_rule. Needs the MCP SDK: pip install 'xladiag[mcp]'.
    """
    from .config import load_project_config

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UsageError("diagnose mcp needs the MCP SDK: pip install 'xladiag[mcp]'") from None
    build_server(Diagnoses(load_project_config())).run()
