"""The ``diagnose history RUN...`` command: a series of runs in (JSON reports, captures, run stores), step time,
MFU, top ops and findings across them out, with the change points beyond noise."""

from __future__ import annotations

import sys
from pathlib import Path

import click

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
    path_given,
    quiet_debug_options,
    say,
    share,
)
from .errors import InputError
from .options import Options
from .report.history_model import HISTORY_FORMATS

_HISTORY_EPILOG = """\b
Examples:
  diagnose ./logdir --record runs.db                 append this run to the store runs.db
  diagnose history runs.db                           HTML at ./xladiag_history.html
  diagnose history r1.json r2.json r3.json --given-order --format markdown -o -
  diagnose history runs.db --format json -o history.json --fail-on-regression 5%
\b
Order: by run time (a run folder's name, e.g. 2024_05_01_12_30_00; else the time it was recorded), runs of
one time in the order given; --given-order keeps the order given. --chip/--program/--steps/--host apply to
each RUN that is a capture.
Change points: binary segmentation over the runs. A split is a change point when the per-step times before
and after differ beyond noise by compare's test (Welch's t-test, p < 0.05, and a change larger than the
step-to-step spread) and, with the runs as units, beyond the run-to-run spread (Student's t on the run
means, p < 0.05 shared among the splits tried).
\b
Exit codes: 0 ok, 1 bad input, 2 usage, 3 --fail-on-regression tripped (the last change point is slower
by more than the share given).
"""


@click.command(cls=OneLineErrors, epilog=_HISTORY_EPILOG, context_settings=CONTEXT)
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--given-order", is_flag=True, help="Keep the order given instead of ordering by run time.")
@click.option("--format", "format", type=click.Choice(list(HISTORY_FORMATS)), default="html", show_default=True,
              help="Report format.")
@click.option("-o", "--output", metavar="PATH", callback=path_given,
              help="Where to write; '-' for stdout. Default: ./xladiag_history.<ext>.")
@click.option("--fail-on-regression", metavar="SHARE", callback=share,
              help="Exit 3 when the last change point is a slowdown by more than this (5% or 0.05).")
@CHIP_OPTION
@PROGRAM_OPTION
@STEPS_OPTION
@HOST_OPTION
@quiet_debug_options
def history_main(runs, given_order, fail_on_regression, **given):
    """Step time, MFU, top ops and findings across a series of runs, with change points beyond noise.
    Each RUN is a JSON report written by `diagnose --format json`, a capture (log dir, run folder,
    .xplane.pb), or a run store written by `diagnose --record DB` (all its runs).
    """
    from .api import history
    from .writer import check_output_path

    options = Options.of(**given)
    output = options.output
    for path in runs:
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
    default = f"xladiag_history.{HISTORY_FORMATS[output.format].extension}"
    out = None if output.output == "-" else output.output or default
    if out is not None:
        check_output_path(out, list(runs))
    progress = Progress(enabled=not output.quiet and sys.stderr.isatty())
    try:
        result = history(runs, given_order=given_order, fail_on_regression=fail_on_regression, progress=progress,
                         options=options)
        text = result.render(output.format)
    finally:
        progress.done()
    deliver(text, out)
    if not output.quiet:
        for warning in result.data["warnings"]:
            say(f"diagnose history: warning: {warning}")
        say(result.headline)
    regressed = [f"diagnose history: gate: regression: {result.data['regression']['reason']}"] \
        if result.regressed else []
    conclude(out, regressed, lambda: (), None)
