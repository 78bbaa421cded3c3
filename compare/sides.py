"""The two sides of ``diagnose compare`` made comparable: a JSON report is read as written, a capture is
diagnosed here (by the ``diagnose`` the caller hands in: the pipeline sits above this package), both with one
rule selection (selection.py), then compared (reports.py) into the comparison's data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from ..errors import UsageError
from ..options import Options
from ..parsers.report_json import looks_like_json
from ..rules.selection import Selection
from ..text_safety import clean_text
from . import selection as aligned
from .reports import Side, compare_reports

# What a capture side is diagnosed with and a JSON side, read as written, cannot be: said in a warning.
OVERRIDES = ("chip", "program", "steps", "host")


def check_threshold(fail_on_regression: float | None) -> None:
    if fail_on_regression is not None and not (math.isfinite(fail_on_regression) and fail_on_regression >= 0):
        raise UsageError(f"fail_on_regression {fail_on_regression!r} is not a share like 0.05")


def compare_sides(paths: dict[str, Path], options: Options, chosen: Selection, *,
                  diagnose: Callable[[Options], dict], read_json: Callable[[Path], dict],
                  progress: Callable[[str], None] | None = None) -> dict:
    """The comparison data of ``paths`` ({"base": ..., "new": ...}): ``chosen`` is the comparison's rule
    selection; ``diagnose`` turns the options of one capture side into its JSON report dict; ``read_json``
    reads a JSON report."""
    reports = {which: read_json(p) for which, p in paths.items() if looks_like_json(p)}
    own = {which: aligned.recorded(r) for which, r in reports.items()}
    for_captures = aligned.for_captures(chosen, list(own.values()))
    given = [f"--{name}" for name in OVERRIDES if options.get(name) is not None]
    notes = [f"{which} ({clean_text(str(paths[which]))}) is a JSON report, read as written: {', '.join(given)} "
             "not applied to it" for which in reports if given]
    for which, path in paths.items():
        if which not in reports:
            if progress:
                progress(f"diagnosing {which}: {path}")
            reports[which] = diagnose(_capture_side(options, path, for_captures))
            own[which] = aligned.given(chosen)
    base_report, new_report, record, differ = aligned.align(reports["base"], reports["new"], (own["base"], own["new"]),
                                                            chosen)
    kind = {which: "json report" if looks_like_json(p) else "capture" for which, p in paths.items()}
    label = {which: clean_text(str(p)) for which, p in paths.items()}  # a path of unknown encoding, shown
    data = compare_reports(Side(base_report, label["base"], kind["base"]),
                           Side(new_report, label["new"], kind["new"]), threshold=options.gates.fail_on_regression)
    for which in paths:  # a capture's own left-out findings count too
        if kind[which] == "capture":
            record["findings_left_out"][which] += len(reports[which]["selection"]["ignored_findings"])
    data["selection"] = record
    data["warnings"] += differ + notes
    return data


def _capture_side(options: Options, path: Path, selection: Selection) -> Options:
    """What one capture side is diagnosed with: the comparison's chip, program, steps and host (and chip file),
    its ready selection, and nothing of the comparison's own output or gates."""
    return Options().replace(path=path, chip_file=options.hardware.chip_file, select=selection,
                             **{name: options.get(name) for name in OVERRIDES})
