"""GitHub Actions output: workflow-command annotations and the step summary.

Workflow commands are lines ``::error title=T::message`` that the runner reads from a step's output. The
escapes are those of GitHub's own toolkit (``@actions/core`` ``escapeData``/``escapeProperty``): in the
message ``%``, CR and LF become ``%25``, ``%0D``, ``%0A`` (an unescaped newline would end the command and
let the rest of the text be read as a new one); a property value also escapes ``:`` and ``,``. Profile text
is first made one visible line (:func:`xladiag.text_safety.terminal_line`). Small functions, so that
compare's verdicts are annotated the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ..errors import UsageError
from ..text_safety import terminal_line

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def on_github_actions(environ: Mapping[str, str] | None = None) -> bool:
    """True inside a GitHub Actions job (the runner sets ``GITHUB_ACTIONS=true``)."""
    return (os.environ if environ is None else environ).get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message: str, title: str | None = None) -> str:
    """One workflow-command line: ``level`` is ``error``, ``warning`` or ``notice``."""
    if level not in ("error", "warning", "notice"):
        raise ValueError(f"annotation level {level!r}")
    props = f" title={escape_property(terminal_line(title))}" if title else ""
    return f"::{level}{props}::{escape_data(terminal_line(message))}"


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def report_annotations(gates: Iterable, findings: Iterable) -> list[str]:
    """``::error::`` per tripped gate, ``::warning::`` per high-severity finding (these gate nothing alone)."""
    from ..units import format_seconds

    lines = [annotation("error", g.message, f"xladiag gate {g.option}") for g in gates if g.tripped]
    lines += [annotation("warning", f"{f.title} (saves ~{format_seconds(f.est_savings_s_per_step)} per step). "
                                    f"Fix: {_clip(f.fix, 300)}", f"xladiag {f.rule}")
              for f in findings if f.severity == "high"]
    return lines


def require_step_summary(environ: Mapping[str, str] | None = None) -> str:
    """The step-summary file path, or a one-line :class:`UsageError` when the variable is unset."""
    path = (os.environ if environ is None else environ).get(SUMMARY_ENV)
    if not path:
        raise UsageError(f"--step-summary: ${SUMMARY_ENV} is not set (GitHub Actions sets it inside a job step)")
    return path


def append_step_summary(markdown: str, environ: Mapping[str, str] | None = None) -> str:
    """Append ``markdown`` to ``$GITHUB_STEP_SUMMARY`` (shown on the run's page); returns the path."""
    path = require_step_summary(environ)
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown if markdown.endswith("\n") else markdown + "\n")
    except OSError as exc:
        raise UsageError(f"--step-summary: cannot append to {terminal_line(path)}: {exc.strerror or exc}") from None
    return path
