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


def program_share_text(steps: dict) -> str:
    """', 15% of the programs' device time' when the steps are one program's executions among others; ''."""
    share = steps.get("program_share")
    if share is None or share >= 1.0 or not steps.get("program"):
        return ""
    return f", {share:.0%} of the programs' device time"
