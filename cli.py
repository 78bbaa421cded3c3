"""The ``diagnose`` command: arguments in, one report out. No analysis lives here."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

import click

from . import __version__
from .errors import InputError, UsageError, XladiagError
from .report.compare_model import COMPARE_FORMATS
from .report.gates import MEASURES, parse_share
from .report.render import FORMATS
from .text_safety import terminal_line, visible_controls

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_GATE = 0, 1, 2, 3

_EPILOG = """\b
Examples:
  diagnose ./logdir                       HTML report at ./logdir/xladiag_report.html
  diagnose ./logdir --format markdown -o - >> "$GITHUB_STEP_SUMMARY"
  diagnose ./logdir --format json -o report.json --fail-on high
  diagnose --hlo-dir ./xla_dump --chip v6e   static diagnosis of an HLO dump, no trace
  diagnose compare BASE NEW --fail-on-regression 5%
                                          before/after of two captures or JSON reports
                                          (see diagnose compare --help)
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


class _OneLineErrors(click.Command):
    """Every error as one ``diagnose: error:`` line: click's usage errors (exit 2), xladiag's own
    (``XladiagError.exit_code``) and anything unexpected (exit 1, traceback only with --debug)."""

    def main(self, args=None, **kwargs):
        args = sys.argv[1:] if args is None else list(args)
        if args[:1] == ["compare"] and self is main:  # `diagnose compare BASE NEW`; a folder named compare: ./compare
            return compare_main.main(args[1:], prog_name="diagnose compare", **kwargs)
        debug = "--debug" in args
        kwargs["standalone_mode"] = False
        try:
            code = super().main(args, **kwargs)
        except click.ClickException as exc:
            hint = " (see diagnose --help)" if isinstance(exc, click.UsageError) else ""
            _fail(exc.format_message() + hint, EXIT_USAGE)
        except click.Abort:
            _say("diagnose: aborted")
            sys.exit(EXIT_INPUT)
        except XladiagError as exc:
            if debug:
                traceback.print_exc()
            _fail(str(exc), exc.exit_code)
        except Exception as exc:  # a bug: still one line, the traceback on demand
            if debug:
                traceback.print_exc()
            detail = str(exc) if len(str(exc)) <= 300 else str(exc)[:299] + "…"
            _fail(f"internal error: {type(exc).__name__}: {detail} (rerun with --debug; please report)", EXIT_INPUT)
        sys.exit(code or EXIT_OK)


class _Progress:
    """One self-overwriting status line on stderr, only when a person is watching."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._width = 0

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        text = f"xladiag: {terminal_line(message)}"  # file names come from the capture folder
        sys.stderr.write("\r" + text.ljust(self._width))
        sys.stderr.flush()
        self._width = len(text)

    def done(self) -> None:
        if self.enabled and self._width:
            sys.stderr.write("\r" + " " * self._width + "\r")
            sys.stderr.flush()


def _say(line: str, break_urls: bool = True) -> None:
    """One line on stderr; profile text in it (op names, paths) cannot drive the terminal or a PR comment."""
    click.echo(terminal_line(line, break_urls=break_urls), err=True)


def _fail(message: str, code: int) -> None:
    _say(f"diagnose: error: {message}", break_urls=False)  # the gs://... the user gave, whole to copy back
    sys.exit(code)


def _write_stdout(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # the reader left (`| head`): click exits 1 without a message
    except OSError as exc:  # e.g. `-o - > /dev/full`: the same exit 2 as a full disk with -o FILE
        raise UsageError(f"-: cannot write to stdout: {exc.strerror or exc}") from None


# Storage packages log their retries with tracebacks; the one error line says what failed (--debug shows them).
_STORAGE_LOGGERS = ("fsspec", "gcsfs", "s3fs", "adlfs", "aiobotocore", "botocore")


def _location(value: str | None):
    """A local path as a Path; a URL (gs://, s3://, memory://...) kept as text for fsspec."""
    from .parsers.storage import is_remote

    if value is None:
        return None
    return value if is_remote(value) else Path(value.removeprefix("file://"))


def _colour_wanted() -> bool:
    """ANSI colour only for a person at a terminal: stdout a TTY, NO_COLOR unset or empty (no-color.org), TERM not dumb."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _default_output(path, hlo_dir, fmt: str) -> Path:
    ext = FORMATS[fmt].extension
    base = path if path is not None else hlo_dir
    if isinstance(base, str):  # remote: the report is written here, not into the bucket
        return Path(f"xladiag_report.{ext}")
    base = base.parent if base.is_file() else base
    return base / f"xladiag_report.{ext}"


def _share(ctx, param, value: str | None) -> float | None:
    """``10%`` or ``0.10``; a bare ``1`` (or any bare number >= 1) is refused: 1 % or 100 %?"""
    return None if value is None else parse_share(value, f"--{param.name.replace('_', '-')}")


def _topology(value: str | None) -> str | None:
    if value is None:
        return None
    from .analyzer.models.topology import parse_topology
    try:
        parse_topology(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"--topology {value!r}: ")) from None
    return value


# Options `diagnose` and `diagnose compare` share (compare applies them to both sides), defined once.
_PROGRAM_OPTION = click.option(
    "--program", metavar="NAME",
    help="The program whose executions are the steps (jit_train_step, jit_train_step(103)); with "
         "--hlo-dir alone, the dump module to analyse (module_0042). Default: inferred.")
_STEPS_OPTION = click.option(
    "--steps", "step_range", metavar="A:B",
    help="Measure only the steps numbered A to B-1 (A:, :B, or one step A); default: all but the first.")
_HOST_OPTION = click.option("--host", metavar="NAME", help="Read only this host's capture (default: every host).")
_CHIP_OPTION = click.option(
    "--chip", metavar="NAME",
    help="Override chip detection, e.g. v6e, v5p, h100, mi300x, cpu, or a TPU slice name (v6e-8, v5p-128).")


def _SELECT_OPTIONS(f):
    """--select, --ignore, --baseline."""
    for option in reversed((
        click.option("--select", metavar="RULE,...", help="Report only these rules (ids as in docs/rules.md); "
                     "default: [tool.xladiag] select in pyproject.toml, else every rule."),
        click.option("--ignore", metavar="RULE,...", help="Leave these rules out (default: [tool.xladiag] ignore)."),
        click.option("--baseline", metavar="FILE", help="Accepted findings (a JSON report, or one key "
                     "rule:kind:main_op per line) left out of the report and its gates; default: [tool.xladiag] baseline."),
    )):
        f = option(f)
    return f


@click.command(cls=_OneLineErrors, epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("path", required=False, callback=lambda ctx, param, value: _location(value))
@click.option("--run", "run", metavar="NAME", help="Which run folder under plugins/profile/ (default: the newest).")
@click.option("--hlo-dir", metavar="DIR", callback=lambda ctx, param, value: _location(value),
              help="XLA dump (--xla_dump_to) with *after_optimizations*.txt; default: found inside PATH.")
@_PROGRAM_OPTION
@_STEPS_OPTION
@_HOST_OPTION
@_CHIP_OPTION
@click.option("--chip-file", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="TOML file that adds or overrides chips (same keys as the built-in catalog).")
@click.option("--topology", metavar="AxBxC", callback=lambda ctx, param, value: _topology(value),
              help="TPU slice shape in chips (e.g. 16x16, 4x4x4) for pricing collectives per torus axis; "
                   "default: the slice name given to --chip, else assumed from the device count.")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="html", show_default=True,
              help="Report format (see Formats below).")
@click.option("-o", "--output", metavar="PATH",
              help="Where to write the report; '-' for stdout. Default: <profile dir>/xladiag_report.<ext> "
                   "(text: stdout).")
@click.option("--fail-on", type=click.Choice(["high", "medium", "low"]),
              help="Exit 3 when any finding has at least this severity (high: costs >= 10% of the step, medium: >= 3%).")
@click.option("--max-exposed-collective", metavar="SHARE", callback=_share,
              help=f"Exit 3 when {MEASURES['max-exposed-collective']} is above SHARE (10% or 0.10).")
@click.option("--max-exposed-host-transfer", metavar="SHARE", callback=_share,
              help=f"Exit 3 when {MEASURES['max-exposed-host-transfer']} is above SHARE (10% or 0.10).")
@click.option("--min-mfu", metavar="SHARE", callback=_share,
              help="Exit 3 when MFU (model FLOPs per step / (step time x chip peak FLOP/s)) is below SHARE "
                   "(35% or 0.35), or unknown.")
@click.option("--step-summary", is_flag=True,
              help="Also append the Markdown report to $GITHUB_STEP_SUMMARY (GitHub Actions); an error when unset.")
@_SELECT_OPTIONS
@click.option("--write-baseline", metavar="FILE", help="Also write this run's finding keys as a baseline file.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Processes decoding the host files of a multi-host capture (default: the cores available).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Decode the host files on this Dask cluster instead (e.g. tcp://10.0.0.2:8786; the workers "
                   "must see the same files; pip install 'xladiag[dask]').")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no summary on stderr.")
@click.option("--debug", is_flag=True, help="Show the traceback behind an error.")
@click.version_option(__version__, prog_name="xladiag")
def main(path, run, hlo_dir, program, step_range, host, chip, chip_file, topology, fmt, output, fail_on, max_exposed_collective,
         max_exposed_host_transfer, min_mfu, step_summary, select, ignore, baseline, write_baseline, workers, scheduler,
         quiet, debug):
    """Diagnose an XLA profile: what is slow, why, how far each op is from its roofline, and what to change.

    PATH is a jax.profiler.trace log dir (plugins/profile/<run>/<host>.xplane.pb), one run folder, or
    one .xplane.pb file. An XLA HLO dump found inside it (or given with --hlo-dir) adds FLOPs, bytes and
    layouts; --hlo-dir alone gives a static diagnosis with predicted times.
    """
    # Imported here so that `--help` stays instant.
    from .api import diagnose
    from .config import baseline_keys, baseline_text, load_project_config
    from .report.github import append_step_summary, on_github_actions, report_annotations, require_step_summary
    from .writer import check_output_path, write_report

    if path is None and hlo_dir is None:
        raise click.UsageError("give a profile directory or .xplane.pb file (or --hlo-dir DIR)")
    if step_summary:
        require_step_summary()  # before minutes of work
    if not debug and any(isinstance(where, str) for where in (path, hlo_dir)):  # remote: see _STORAGE_LOGGERS
        for name in _STORAGE_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
    terminal = FORMATS[fmt].terminal  # a terminal format goes to stdout unless -o names a file
    to_stdout = output == "-" or (output is None and terminal)
    out = None if to_stdout else output if output else str(_default_output(path, hlo_dir, fmt))
    if isinstance(path, Path) and not path.exists():  # before the output check: the default output lives there
        raise InputError(f"{path}: no such file or directory")
    for target in (out, write_baseline):
        if target is not None:
            check_output_path(target)  # refuse before minutes of work, not after

    progress = _Progress(enabled=not quiet and sys.stderr.isatty())
    try:
        report = diagnose(path, run=run, hlo_dir=hlo_dir, chip=chip, chip_file=chip_file, topology=topology,
                          progress=progress, program=program, select=select, ignore=ignore, baseline=baseline,
                          config=load_project_config(), steps=step_range, host=host, workers=workers, scheduler=scheduler)
        report = report.with_gates(fail_on=fail_on, max_exposed_collective=max_exposed_collective,
                                   max_exposed_host_transfer=max_exposed_host_transfer, min_mfu=min_mfu)
        text = report.render(fmt, color=to_stdout and _colour_wanted())
    finally:
        progress.done()

    if to_stdout:
        _write_stdout(text)
    else:
        write_report(out, text)
    if write_baseline is not None:
        write_report(write_baseline, baseline_text(baseline_keys(report)))

    if not quiet and not (terminal and to_stdout):  # the terminal report already holds them
        for warning in report.analysis.warnings:
            _say(f"diagnose: warning: {warning}")
        _say(report.headline)
    if out is not None:
        click.echo(f"report: {visible_controls(out)}")

    tripped = report.tripped_gates
    for gate in tripped:
        _say(f"diagnose: gate: {gate.message}")
    if on_github_actions():  # workflow commands: never mixed into a report written to stdout
        for line in report_annotations(report.gates, report.findings):
            click.echo(line, err=to_stdout)
    if step_summary:
        append_step_summary(text if fmt == "markdown" else report.render("markdown"))
    sys.exit(EXIT_GATE if tripped else EXIT_OK)


# ------------------------------------------------------------------ diagnose compare BASE NEW

_COMPARE_EPILOG = """\b
Examples:
  diagnose compare base.json ./logdir                    HTML at ./logdir/xladiag_compare.html
  diagnose compare base_logdir new_logdir --format markdown -o - >> "$GITHUB_STEP_SUMMARY"
  diagnose compare base.json new.json --format json -o compare.json --fail-on-regression 5%
\b
Verdict: Welch's t-test (two-sided, p < 0.05) on the per-step times of both sides, and a change
larger than the step-to-step spread (the larger standard deviation): else "within noise".
Ops are matched by program and op name, then by framework op and source line; findings by
rule:kind:main_op. Per-op and per-finding changes are reported, never gated.
Rule selection (--select/--ignore/--baseline, [tool.xladiag]) applies to both sides; what a JSON
report's own selection left out is left out of the other side too. --chip/--program/--steps/--host
apply to each side that is a capture.
\b
Exit codes: 0 ok, 1 bad input, 2 usage, 3 --fail-on-regression tripped.
"""


@click.command(cls=_OneLineErrors, epilog=_COMPARE_EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(list(COMPARE_FORMATS)), default="html", show_default=True,
              help="Report format.")
@click.option("-o", "--output", metavar="PATH",
              help="Where to write; '-' for stdout. Default: xladiag_compare.<ext> beside NEW.")
@click.option("--fail-on-regression", metavar="SHARE", callback=_share,
              help="Exit 3 when the mean step is slower beyond noise and by more than this (5% or 0.05).")
@click.option("--step-summary", is_flag=True,
              help="Also append the Markdown comparison to $GITHUB_STEP_SUMMARY (GitHub Actions); an error when unset.")
@_SELECT_OPTIONS
@_CHIP_OPTION
@_PROGRAM_OPTION
@_STEPS_OPTION
@_HOST_OPTION
@click.option("-q", "--quiet", is_flag=True, help="No progress and no summary on stderr.")
@click.option("--debug", is_flag=True, help="Show the traceback behind an error.")
def compare_main(base, new, fmt, output, fail_on_regression, step_summary, select, ignore, baseline, chip, program,
                 step_range, host, quiet, debug):
    """Compare two captures: BASE (before) and NEW (after) are each a log dir, run folder, .xplane.pb, or a
    JSON report written by `diagnose --format json`. Step time and MFU with a noise-aware verdict,
    breakdown, per-op and per-finding deltas.
    """
    from .api import compare
    from .config import load_project_config
    from .report.github import append_step_summary, on_github_actions, report_annotations, require_step_summary
    from .writer import check_output_path, write_report

    if step_summary:
        require_step_summary()  # before minutes of work

    for path in (base, new):
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
    to_stdout = output == "-"
    out = None if to_stdout else output or str((new.parent if new.is_file() else new)
                                                / f"xladiag_compare.{COMPARE_FORMATS[fmt].extension}")
    if out is not None:
        check_output_path(out)
    progress = _Progress(enabled=not quiet and sys.stderr.isatty())
    try:
        comparison = compare(base, new, fail_on_regression=fail_on_regression, chip=chip, progress=progress,
                             select=select, ignore=ignore, baseline=baseline, config=load_project_config(),
                             program=program, steps=step_range, host=host)
        text = comparison.render(fmt)
    finally:
        progress.done()
    _write_stdout(text) if to_stdout else write_report(out, text)
    if not quiet:
        for warning in comparison.data["warnings"]:
            _say(f"diagnose compare: warning: {warning}")
        _say(comparison.headline)
    if out is not None:
        click.echo(f"report: {visible_controls(out)}")
    if comparison.regressed:
        _say(f"diagnose compare: gate: regression: {comparison.data['regression']['reason']}")
    if on_github_actions():  # the tripped gate as an ::error:: line, never inside a report on stdout
        for line in report_annotations(comparison.gates, ()):
            click.echo(line, err=to_stdout)
    if step_summary:
        append_step_summary(text if fmt == "markdown" else comparison.render("markdown"))
    sys.exit(EXIT_GATE if comparison.regressed else EXIT_OK)


if __name__ == "__main__":  # pragma: no cover
    main()
