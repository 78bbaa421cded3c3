"""The ``diagnose compare BASE NEW`` command: two captures or JSON reports in, one comparison out."""

from __future__ import annotations

from pathlib import Path

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
from .cli_output import checked_output, default_output
from .errors import InputError
from .options import Options
from .report.compare_model import COMPARE_FORMATS

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


@click.command(cls=OneLineErrors, epilog=_COMPARE_EPILOG, context_settings=CONTEXT)
@click.argument("base", callback=location)
@click.argument("new", callback=location)
@click.option("--format", "format", type=click.Choice(list(COMPARE_FORMATS)), default="html", show_default=True,
              help="Report format.")
@click.option("-o", "--output", metavar="PATH", callback=path_given,
              help="Where to write; '-' for stdout. Default: xladiag_compare.<ext> beside NEW "
              "(text: stdout).")
@click.option("--fail-on-regression", metavar="SHARE", callback=share,
              help="Exit 3 when the mean step is slower beyond noise and by more than this (5% or 0.05).")
@click.option("--step-summary", is_flag=True,
              help="Also append the Markdown comparison to $GITHUB_STEP_SUMMARY (GitHub Actions); an error when unset.")
@select_options
@CHIP_OPTION
@PROGRAM_OPTION
@STEPS_OPTION
@HOST_OPTION
@quiet_debug_options
@click.version_option(__version__, prog_name="xladiag")
def compare_main(base, new, **given):
    """Compare two captures: BASE (before) and NEW (after) are each a log dir, run folder, .xplane.pb, or a
    JSON report written by `diagnose --format json`, local or a URL (gs://, s3://, ...), in any mix. Step
    time and MFU with a noise-aware verdict, breakdown, per-op and per-finding deltas.
    """
    from .api import compare
    from .config import load_project_config
    from .report.github import report_annotations, require_step_summary
    from .writer import check_output_path

    options = Options.of(**given)
    output = options.output
    if output.step_summary:
        require_step_summary()  # before minutes of work

    for path in (base, new):
        if isinstance(path, Path) and not path.exists():  # a URL is looked at when read
            raise InputError(f"{path}: no such file or directory")
    out, note = (None if output.output == "-" else output.output), None
    if output.output is None and COMPARE_FORMATS[output.format].terminal:
        out = None
    elif output.output is None:
        out, note = default_output(new, f"xladiag_compare.{COMPARE_FORMATS[output.format].extension}")
    if out is not None:  # never over BASE, NEW or the --baseline read
        baseline = options.rules.baseline
        checked_output(out, [base, new] + ([baseline] if isinstance(baseline, (str, Path)) else []), check_output_path)
    progress = Progress(enabled=not output.quiet)
    try:
        comparison = compare(base, new, options=options.replace(config=load_project_config()), progress=progress)
        text = comparison.render(output.format)
    finally:
        progress.done()
    deliver(text, out)
    if note is not None and not output.quiet:
        say(f"diagnose compare: {note}")
    if not output.quiet:
        for warning in comparison.data["warnings"]:
            say(f"diagnose compare: warning: {warning}")
        say(comparison.headline)
    regressed = [f"diagnose compare: gate: regression: {comparison.data['regression']['reason']}"] \
        if comparison.regressed else []
    conclude(out, regressed, lambda: report_annotations(comparison.gates, ()),
             (lambda: text if output.format == "markdown" else comparison.render("markdown"))
             if output.step_summary else None, quiet=output.quiet)
