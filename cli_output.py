"""Where ``diagnose`` and ``diagnose compare`` write: the format an ``-o`` name asks for, and the default place
(beside the capture when that folder is writable, never inside TensorBoard's run folder; else here, with a
line saying so). No analysis here."""

from __future__ import annotations

import os
from pathlib import Path

import click

from .errors import UsageError
from .report.render import format_for


def format_of(given: str | None, output: str | None, known) -> str:
    """``--format`` if given, else the one -o's extension names, else html. Both given and naming different
    formats (``--format markdown -o r.json``): a usage error, not Markdown in a file CI's jq then reads."""
    suffix = Path(output).suffix.lower() if output and output != "-" else ""
    implied = format_for(output, known) if suffix else None
    if given is not None and implied is not None and implied != given:
        raise click.UsageError(f"--format {given} and -o {output} (a .{suffix[1:]} file holds {implied}) disagree: "
                               f"drop --format, or name the file .{_extension(given, known)}")
    return given or implied or "html"


def _extension(fmt: str, known) -> str:
    return known[fmt].extension


def run_folder_parent(folder: Path) -> Path:
    """The log dir of ``<logdir>/plugins/profile/<run>`` (TensorBoard lists every folder there as a run, so a
    report written into one would be listed as a broken run); any other folder as it is."""
    if folder.parent.name == "profile" and folder.parent.parent.name == "plugins":
        return folder.parent.parent.parent
    return folder


def default_output(where, name: str) -> tuple[str, str | None]:
    """(the path to write ``name`` to, a stderr line when it is not beside the capture ``where``)."""
    if isinstance(where, str):  # remote: never into the bucket
        return name, f"the capture is remote: the report is written here, ./{name} (-o to choose)"
    folder = run_folder_parent(where.parent if where.is_file() else where)
    if _writable(folder):
        return str(folder / name), None
    return name, f"{folder} is not writable: the report is written here, ./{name} (-o to choose)"


def checked_output(out: str, inputs, check) -> None:
    """``check(out, inputs)`` (writer.check_output_path), its "cannot write" refusal pointing at -o."""
    try:
        check(out, inputs)
    except UsageError as exc:
        if "cannot write" in str(exc) and "with -o" not in str(exc):
            raise UsageError(f"{exc}; give another path with -o") from None
        raise


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)
