"""What the analysis ran on (step program, step numbers, hosts) and whether the user gave it or it was inferred,
as rows for the capture tables of the HTML and Markdown reports (the JSON's ``choices``)."""

from __future__ import annotations

_CHOICES = {"program": ("Step program", "--program"), "steps": ("Step numbers measured", "--steps"),
            "hosts": ("Hosts read", "--host")}


def choice_rows(choices: dict) -> list[tuple[str, str, str]]:
    """(what, value, 'given (--option)' | 'inferred') for the program, steps and hosts the analysis ran on."""
    rows = []
    for key, (label, option) in _CHOICES.items():
        if key in choices:
            value = choices[key]["value"]
            shown = ", ".join(value) if isinstance(value, list) else (value or "—")
            given = choices[key]["source"] == "given"
            rows.append((label, shown, f"given ({option})" if given else f"inferred (override with {option})"))
    return rows
