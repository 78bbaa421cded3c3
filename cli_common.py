"""What ``diagnose`` and ``diagnose compare`` share: one-line errors, the progress line, the options both
declare (compare applies them to both sides), and the steps after the report is written. No analysis here.
"""

from __future__ import annotations

import signal
import sys
import time
import traceback
from pathlib import Path

import click

from .errors import UsageError, XladiagError
from .text_safety import clean_text, terminal_line, visible_controls

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_GATE = 0, 1, 2, 3
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class OneLineErrors(click.Command):
    """Every error as one ``diagnose: error:`` line: click's usage errors (exit 2), xladiag's own
    (``XladiagError.exit_code``) and anything unexpected (exit 1, traceback only with --debug)."""

    def main(self, args=None, **kwargs):
        args = sys.argv[1:] if args is None else list(args)
        debug = "--debug" in args
        kwargs["standalone_mode"] = False
        try:
            code = super().main(args, **kwargs)
        except click.ClickException as exc:
            hint = " (see diagnose --help)" if isinstance(exc, click.UsageError) else ""
            fail(exc.format_message() + hint, EXIT_USAGE)
        except click.Abort as exc:
            say("diagnose: aborted")
            if isinstance(exc.__context__, KeyboardInterrupt):  # SIGINT: 128 + 2, as a shell reports it
                sys.exit(128 + signal.SIGINT)
            sys.exit(EXIT_INPUT)
        except XladiagError as exc:
            if debug:
                traceback.print_exc()
            fail(str(exc), exc.exit_code)
        except Exception as exc:  # a bug: still one line, the traceback on demand
            if debug:
                traceback.print_exc()
            detail = str(exc) if len(str(exc)) <= 300 else str(exc)[:299] + "…"
            fail(f"internal error: {type(exc).__name__}: {detail} (rerun with --debug; please report)", EXIT_INPUT)
        sys.exit(code or EXIT_OK)


class Progress:
    """Progress on stderr. A person at a terminal (stderr a TTY): one self-overwriting status line. A log (CI, a
    file): a plain line at most every ``INTERVAL_S`` seconds, with the time so far, and none in a run shorter than
    that (a log is not a transcript of every event)."""

    INTERVAL_S = 10.0

    def __init__(self, enabled: bool, tty: bool | None = None, clock=time.monotonic):
        self.enabled = enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._clock = clock
        self._start = clock()
        self._next = self._start + self.INTERVAL_S
        self._width = 0

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        text = f"xladiag: {terminal_line(message)}"  # file names come from the capture folder
        if not self.tty:
            now = self._clock()
            if now >= self._next:
                click.echo(f"xladiag: [{now - self._start:.0f} s] {terminal_line(message)}", err=True)
                self._next = now + self.INTERVAL_S
            return
        sys.stderr.write("\r" + text.ljust(self._width))
        sys.stderr.flush()
        self._width = len(text)

    def done(self) -> None:
        if self.enabled and self.tty and self._width:
            sys.stderr.write("\r" + " " * self._width + "\r")
            sys.stderr.flush()


def say(line: str, break_urls: bool = True) -> None:
    """One line on stderr; profile text in it (op names, paths) cannot drive the terminal or a PR comment."""
    click.echo(terminal_line(line, break_urls=break_urls), err=True)


def fail(message: str, code: int) -> None:
    say(f"diagnose: error: {message}", break_urls=False)  # the gs://... the user gave, whole to copy back
    sys.exit(code)


def deliver(text, out: str | None) -> None:
    """The report (a string, or pieces of one: render.render_pieces) into the file ``out``, or on stdout when
    None."""
    from .writer import write_report

    if out is not None:
        write_report(out, text)
        return
    text = text if isinstance(text, str) else "".join(text)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # the reader left (`| head`): click exits 1 without a message
    except OSError as exc:  # e.g. `-o - > /dev/full`: the same exit 2 as a full disk with -o FILE
        raise UsageError(f"-: cannot write to stdout: {exc.strerror or exc}") from None


def conclude(out: str | None, gate_lines: list[str], annotations, summary, quiet: bool = False) -> None:
    """After the report: where it went, the tripped gates (one line each, then exit 3), on GitHub Actions the
    workflow commands ``annotations()`` gives (never mixed into a report on stdout), and ``summary()`` (the
    Markdown) appended to the step summary unless it is None. ``quiet``: no "report: PATH" (-q says nothing
    on success)."""
    from .report.github import append_step_summary, on_github_actions

    if out is not None and not quiet:
        click.echo(f"report: {visible_controls(clean_text(out))}")  # a path of unknown encoding
    for line in gate_lines:
        say(line)
    if on_github_actions():
        for line in annotations():
            click.echo(line, err=out is None)
    if summary is not None:
        append_step_summary(summary())
    sys.exit(EXIT_GATE if gate_lines else EXIT_OK)


def share(ctx, param, value: str | None) -> float | None:
    """``10%`` or ``0.10``; a bare ``1`` (or any bare number >= 1) is refused: 1 % or 100 %?"""
    from .report.gates import parse_share

    return None if value is None else parse_share(value, f"--{param.name.replace('_', '-')}")


def path_given(ctx, param, value: str | None) -> str | None:
    """An output path that is not empty (``-o ""`` would otherwise fall back on the default place)."""
    if value == "":
        raise click.BadParameter("empty path; give a file path" + (", or '-' for stdout" if param.name == "output"
                                                                   else ""))
    return value


def location(ctx, param, value: str | None):
    """A local path as a Path; a URL (gs://, s3://, memory://...) kept as text for fsspec."""
    from .parsers.storage import is_remote

    if value is None:
        return None
    return value if is_remote(value) else Path(value.removeprefix("file://"))


# Options `diagnose` and `diagnose compare` share (compare applies them to both sides), defined once.
PROGRAM_OPTION = click.option(
    "--program", metavar="NAME",
    help="The program whose executions are the steps (jit_train_step, jit_train_step(103)); with "
         "--hlo-dir alone, the dump module to analyse (module_0042). Default: inferred.")
STEPS_OPTION = click.option(
    "--steps", metavar="A:B",
    help="Measure only the steps numbered A to B-1 (A:, :B, or one step A); default: all but the first.")
HOST_OPTION = click.option("--host", metavar="NAME", help="Read only this host's capture (default: every host).")
CHIP_OPTION = click.option(
    "--chip", metavar="NAME",
    help="Override chip detection, e.g. v6e, v5p, h100, mi300x, cpu, or a TPU slice name (v6e-8, v5p-128).")


def _some_rules(ctx, param, value: str | None) -> str | None:
    """An empty --select reports nothing, so every gate passes: a usage error, not a green CI run."""
    if value is not None and not value.replace(",", "").strip():
        raise click.BadParameter("selects no rule; give rule ids, or leave --select out to report every rule")
    return value


def rule_ids(ctx, param, incomplete: str) -> list:
    """Shell completion (click's, ``_DIAGNOSE_COMPLETE``) of --select/--ignore: the rule ids, also after the
    commas of a list already typed (``exposed_collective,re<TAB>``), none twice."""
    from click.shell_completion import CompletionItem

    from .rules.registry import RULE_IDS

    typed, _, last = incomplete.rpartition(",")
    taken = set(typed.split(",")) if typed else set()
    prefix = typed + "," if typed else ""
    return [CompletionItem(prefix + rule) for rule in RULE_IDS if rule.startswith(last) and rule not in taken]


def select_options(f):
    """--select, --ignore, --baseline."""
    for option in reversed((
        click.option("--select", metavar="RULE,...", callback=_some_rules, shell_complete=rule_ids,
                     help="Report only these rules (ids as in docs/rules.md); "
                     "default: [tool.xladiag] select in pyproject.toml, else every rule."),
        click.option("--ignore", metavar="RULE,...", shell_complete=rule_ids,
                     help="Leave these rules out (default: [tool.xladiag] ignore)."),
        click.option("--baseline", metavar="FILE", help="Accepted findings (a JSON report, or one key "
                     "rule:kind:main_op per line) left out of the report and its gates; "
                     "default: [tool.xladiag] baseline."),
    )):
        f = option(f)
    return f


def quiet_debug_options(f):
    """-q/--quiet, --debug."""
    f = click.option("--debug", is_flag=True, help="Show the traceback behind an error.")(f)
    return click.option("-q", "--quiet", is_flag=True, help="No progress and no summary on stderr.")(f)
