"""One error family for everything xladiag refuses, so callers catch one type.

``InputError`` (exit 1): the profile, dump or chip file cannot be used. ``UsageError`` (exit 2): the
arguments or the output path are wrong. Both carry one line of text; the CLI prints it as
``diagnose: error: <message>`` and ``--debug`` adds the traceback.
"""

from __future__ import annotations


class XladiagError(Exception):
    """Root of every error xladiag raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __str__(self) -> str:  # always one line, whatever text (HLO snippets, paths) went into it
        return " ".join(super().__str__().split())


class InputError(XladiagError, ValueError):
    """A capture, dump or catalog file that cannot be read or makes no sense (exit 1)."""

    exit_code = 1


class UsageError(XladiagError, ValueError):
    """Bad arguments or an output path that cannot be written (exit 2)."""

    exit_code = 2
