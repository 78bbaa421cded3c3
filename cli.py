"""The ``diagnose`` command: arguments in, one report out. No analysis lives here."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from . import __version__
from .cli_common import (
    CHIP_OPTION,
    CONTEXT,
    HOST_OPTION,
    PROGRAM_OPTION,
    STEPS_OPTION,
    OneLineErrors,
    Progress,
    conclude,
    deliver,
    location,
    path_given,
    quiet_debug_options,
    say,
    select_options,
    share,
)
from .cli_output import checked_output, default_output, format_of
from .errors import InputError, UsageError
from .report.gates import MEASURES
from .report.render import FORMATS, render_pieces

if TYPE_CHECKING:
    from .options import Options

__all__ = ["main", "compare_main", "history_main", "mcp_main"]  # noqa: F822 (module __getattr__)

# The subcommands load on first use (``diagnose --help`` and a plain diagnosis never import them).
_SUBCOMMANDS = {"compare_main": "cli_compare", "history_main": "cli_history", "mcp_main": "mcp_server"}


def __getattr__(name):
    if name in _SUBCOMMANDS:
        from importlib import import_module

        return getattr(import_module(f"{__package__}.{_SUBCOMMANDS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_EPILOG = """\b
Examples:
  diagnose ./logdir                       HTML report at ./logdir/xladiag_report.html
  diagnose ./logdir --format markdown -o - >> "$GITHUB_STEP_SUMMARY"
  diagnose ./logdir --format json -o report.json --fail-on high
  diagnose --hlo-dir ./xla_dump --chip v6e   static diagnosis of an HLO dump, no trace
  diagnose compare BASE NEW --fail-on-regression 5%
                                          before/after of two captures or JSON reports
                                          (see diagnose compare --help)
  diagnose ./logdir --record runs.db      also append this run to the run store runs.db
  diagnose history runs.db --fail-on-regression 5%
                                          step time, MFU, top ops and findings across runs, with
                                          change points (see diagnose history --help)
  diagnose mcp                            serve these diagnoses to an AI agent over stdio (MCP;
                                          pip install 'xladiag[mcp]', see diagnose mcp --help)
\b
Formats:
""" + "\n".join(f"  {name:<10} {f.description}" for name, f in FORMATS.items()) + """
\b
Exit codes: 0 ok, 1 bad input, 2 usage (arguments, unwritable output, full disk),
3 a --fail-on/--max-*/--min-* gate tripped. Errors are one line; --debug adds the traceback.
\b
Gates: shares are written 10% or 0.10 (a bare 1 is refused: 1% or 100%?). Every gate given is
listed in the JSON ("gates") and the Markdown, tripped or not; a tripped one is also a
"diagnose: gate:" line on stderr. With GITHUB_ACTIONS=true each tripped gate is an ::error:: line and
each high finding a ::warning:: line (on stdout; on stderr when the report goes to stdout).
"""




class _Diagnose(OneLineErrors):
    """``diagnose compare BASE NEW`` is the compare command, ``diagnose history RUN...`` the history command,
    ``diagnose mcp`` the MCP server (a folder of one of those names: ./compare)."""

    def main(self, args=None, **kwargs):
        args = sys.argv[1:] if args is None else list(args)
        if args[:1] == ["compare"]:
            from .cli_compare import compare_main

            return compare_main.main(args[1:], **{**kwargs, "prog_name": "diagnose compare"})
        if args[:1] == ["history"]:
            from .cli_history import history_main

            return history_main.main(args[1:], **{**kwargs, "prog_name": "diagnose history"})
        if args[:1] == ["mcp"]:
            from .mcp_server import mcp_main

            return mcp_main.main(args[1:], prog_name="diagnose mcp", **kwargs)
        return super().main(args, **kwargs)

    def format_usage(self, ctx, formatter) -> None:
        super().format_usage(ctx, formatter)  # the second form, as git's usage lists its commands
        formatter.write(f"   or: {ctx.command_path} compare [OPTIONS] BASE NEW   (before/after; compare --help)\n")


# Storage packages log their retries with tracebacks; the one error line says what failed (--debug shows them).
_STORAGE_LOGGERS = ("fsspec", "gcsfs", "s3fs", "adlfs", "aiobotocore", "botocore")


def _colour_wanted() -> bool:
    """ANSI colour only for a person at a terminal: stdout a TTY, NO_COLOR unset or empty (no-color.org),
    TERM not dumb."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _topology(value: str | None) -> str | None:
    if value is None:
        return None
    from .analyzer.models.topology import parse_topology
    try:
        parse_topology(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"--topology {value!r}: ")) from None
    return value


@click.command(cls=_Diagnose, epilog=_EPILOG, context_settings=CONTEXT)
@click.argument("path", required=False, callback=location)
@click.option("--run", "run", metavar="NAME", help="Which run folder under plugins/profile/ (default: the newest).")
@click.option("--hlo-dir", metavar="DIR", callback=location,
              help="XLA dump (--xla_dump_to) with *after_optimizations*.txt; default: found inside PATH.")
@PROGRAM_OPTION
@STEPS_OPTION
@HOST_OPTION
@CHIP_OPTION
@click.option("--chip-file", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="TOML file that adds or overrides chips (same keys as the built-in catalog).")
@click.option("--topology", metavar="AxBxC", callback=lambda ctx, param, value: _topology(value),
              help="TPU slice shape in chips (e.g. 16x16, 4x4x4) for pricing collectives per torus axis; "
                   "default: the slice name given to --chip, else assumed from the device count.")
@click.option("--format", "format", type=click.Choice(list(FORMATS)), default=None,
              help="Report format (see Formats below). Default: the -o file's extension (.json, .md, .txt, .html, "
                   ".csv), else html; a --format the extension contradicts is refused.")
@click.option("-o", "--output", metavar="PATH", callback=path_given,
              help="Where to write the report; '-' for stdout. Default: <log dir>/xladiag_report.<ext>, never "
                   "inside TensorBoard's plugins/profile/<run>; the current directory when that is remote or not "
                   "writable (a line says so); text: stdout.")
@click.option("--fail-on", type=click.Choice(["high", "medium", "low"]),
              help="Exit 3 when any finding has at least this severity (high: its fix saves >= 10% of the step, "
                   "medium: >= 3%; a note that saves nothing never counts).")
@click.option("--max-exposed-collective", metavar="SHARE", callback=share,
              help=f"Exit 3 when {MEASURES['max-exposed-collective']} is above SHARE (10% or 0.10).")
@click.option("--max-exposed-host-transfer", metavar="SHARE", callback=share,
              help=f"Exit 3 when {MEASURES['max-exposed-host-transfer']} is above SHARE (10% or 0.10).")
@click.option("--min-mfu", metavar="SHARE", callback=share,
              help="Exit 3 when MFU (model FLOPs per step / (step time x chip peak FLOP/s)) is below SHARE "
                   "(35% or 0.35), or unknown.")
@click.option("--step-summary", is_flag=True,
              help="Also append the Markdown report to $GITHUB_STEP_SUMMARY (GitHub Actions); an error when unset.")
@select_options
@click.option("--write-baseline", metavar="FILE", callback=path_given,
              help="Also write this run's finding keys as a baseline file.")
@click.option("--record", metavar="DB", callback=path_given,
              help="Also append this run to the run store DB (SQLite; created if absent) for `diagnose history`.")
@click.option("--trace-out", metavar="FILE", callback=path_given,
              help="Also write the representative step of every device as a Chrome Trace Event JSON file (open it "
                   "in ui.perfetto.dev or chrome://tracing): ops with their roofline numbers, each finding's ops "
                   "tagged with its key and saving, async start -> done arrows, idle gaps.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Processes decoding the host files of a multi-host capture (default: the cores available).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Decode the host files on this Dask cluster instead (e.g. tcp://10.0.0.2:8786; the workers "
                   "must see the same files; pip install 'xladiag[dask]').")
@quiet_debug_options
@click.version_option(__version__, prog_name="xladiag")
def main(**given):
    """Diagnose an XLA profile: what is slow, why, how far each op is from its roofline, and what to change.

    PATH is a jax.profiler.trace log dir (plugins/profile/<run>/<host>.xplane.pb), one run folder, or
    one .xplane.pb file. An XLA HLO dump found inside it (or given with --hlo-dir) adds FLOPs, bytes and
    layouts; --hlo-dir alone gives a static diagnosis with predicted times.
    """
    from .parsers.early_read import reading_early

    # One large host file starts decoding now on the other cores, while the analysis below is imported.
    with reading_early(None if given["scheduler"] else given["path"], given["workers"]):
        _main(given)


def _main(given: dict) -> None:
    # Imported here so that `--help` stays instant.
    from .api import diagnose
    from .config import baseline_keys, baseline_text, load_project_config, project_gates
    from .options import Options
    from .report.github import report_annotations
    from .writer import check_output_path, write_report

    options = Options.of(**{**given, "format": format_of(given["format"], given["output"], FORMATS)})
    output = options.output
    out, note = _output_file(options)
    record = output.record
    if record is not None:  # refused before minutes of work: the store must not be an input or the report
        from .history.store import check_store

        check_output_path(record, [p for p in (options.capture.path, options.capture.hlo_dir, out) if p is not None])
        check_store(Path(record))
    progress = Progress(enabled=not output.quiet)
    try:
        project = load_project_config()
        report = diagnose(options=options.replace(config=project), progress=progress)
        report = report.with_gates(**project_gates(options.gates.of_report(), project))  # options win
        if out is not None and FORMATS[output.format].pieces is not None:  # written as it is made (render_pieces)
            text = render_pieces(report, output.format)
        else:
            text = report.render(output.format, color=out is None and _colour_wanted())
    finally:
        progress.done()

    if out is not None:  # the files discovery found (a dump's, a run's) are known only now
        check_output_path(out, report.input_files())
    if output.write_baseline is not None:  # it may rewrite the --baseline it read, never the capture
        check_output_path(output.write_baseline, report.input_files(baseline=False))
    deliver(text, out)
    if note is not None and not output.quiet:  # said once the report is there, not before an error
        say(f"diagnose: {note}")
    if output.write_baseline is not None:
        write_report(output.write_baseline, baseline_text(baseline_keys(report)))
    if output.trace_out is not None:
        report.to_trace(output.trace_out)
    if record is not None:
        from .history.series import point_of
        from .history.store import record as record_run

        record_run(Path(record), point_of(report.to_dict(), str(options.capture.path or options.capture.hlo_dir),
                                          "capture"))
    if not output.quiet and report.analysis.files.runs_note:
        say(f"diagnose: {report.analysis.files.runs_note}")
    if not output.quiet and not (FORMATS[output.format].terminal and out is None):  # the terminal report holds them
        for warning in report.analysis.warnings:
            say(f"diagnose: warning: {warning}")
        say(report.headline)
    step_summary = (lambda: text if output.format == "markdown" else report.render("markdown")) \
        if output.step_summary else None
    conclude(out, [f"diagnose: gate: {gate.message}" for gate in report.tripped_gates],
             lambda: report_annotations(report.gates, report.findings), step_summary, quiet=output.quiet)


def _output_file(options: Options) -> tuple[str | None, str | None]:
    """Where the report goes (None: stdout) and a line when that is not beside the capture, after every refusal
    that can come before minutes of work."""
    from .report.github import require_step_summary
    from .writer import check_output_path, same_file

    capture, output = options.capture, options.output
    if capture.path is None and capture.hlo_dir is None:
        raise click.UsageError("give a profile directory or .xplane.pb file (or --hlo-dir DIR)")
    if output.step_summary:
        require_step_summary()
    if not output.debug and any(isinstance(where, str) for where in (capture.path, capture.hlo_dir)):
        for name in _STORAGE_LOGGERS:  # remote: see _STORAGE_LOGGERS
            logging.getLogger(name).setLevel(logging.CRITICAL)
    terminal = FORMATS[output.format].terminal  # a terminal format goes to stdout unless -o names a file
    to_stdout = output.output == "-" or (output.output is None and terminal)
    # Before the default output: it lives there.
    if isinstance(capture.path, Path) and not capture.path.exists():
        raise InputError(f"{capture.path}: no such file or directory")
    out, note = None, None
    if not to_stdout:
        where = capture.path if capture.path is not None else capture.hlo_dir
        name = f"xladiag_report.{FORMATS[output.format].extension}"
        out, note = (output.output, None) if output.output else default_output(where, name)
    # Refused before minutes of work, not after: an unwritable target, or one this run reads.
    given = [p for p in (capture.path, capture.hlo_dir) if isinstance(p, Path)]
    baseline = options.rules.baseline
    if out is not None:
        checked_output(out, given + ([baseline] if isinstance(baseline, (str, Path)) else []), check_output_path)
    if output.write_baseline is not None:
        if out is not None and same_file(out, output.write_baseline):
            raise UsageError(f"-o and --write-baseline both name {out}: give each its own file")
        check_output_path(output.write_baseline, given)  # it may rewrite the --baseline it read
    if output.trace_out is not None:
        if any(t is not None and same_file(output.trace_out, t) for t in (out, output.write_baseline)):
            raise UsageError(f"--trace-out names {output.trace_out}, which another output of this run names too")
        check_output_path(output.trace_out, given + ([baseline] if isinstance(baseline, (str, Path)) else []))
    return out, note


if __name__ == "__main__":  # pragma: no cover
    main()
