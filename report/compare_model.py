"""The result of ``diagnose compare`` / ``xladiag.compare``: the comparison data, its headline and renderers.

A plain container over the dict ``compare.reports.compare_reports`` builds; ``render``/``to_<fmt>`` give the
same text as the command. ``ops`` and ``findings`` are DataFrames (biggest change first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..text_safety import terminal_line
from ..units import format_number, format_percent, format_seconds
from .render import Format, Renderable, lazy

if TYPE_CHECKING:  # annotations only: pandas loads on first use
    import pandas as pd

VERDICT_WORDS = {"slower": "slower beyond noise", "faster": "faster beyond noise", "within noise": "within noise",
                 "unchanged": "unchanged", "untested": "noise not testable", "unknown": "step time unknown"}


# The choices of `diagnose compare --format`.
COMPARE_FORMATS: dict[str, Format] = {
    "html": Format(lazy("compare_html", "render_compare_html"), "html", "one self-contained page with charts"),
    "markdown": Format(lazy("compare_markdown", "render_compare_markdown"), "md", "for a PR comment"),
    "json": Format(lazy("compare_json", "render_compare_json"), "json", "the contract in docs/compare.md"),
    "text": Format(lazy("compare_text", "render_compare_text"), "txt",
                   "plain text for a terminal or a log (stdout by default)", terminal=True),
}


def step_sentence(data: dict) -> str:
    """'step 10.2 ms -> 12.1 ms (1.19x, slower beyond noise)'."""
    step = data["step"]
    ratio = f"{ratio_text(step['ratio'])}, " if step["ratio"] is not None else ""
    what = "step" if data["measured"] else "predicted step"
    return (f"{what} {format_seconds(step['base_s'])} → {format_seconds(step['new_s'])} "
            f"({ratio}{VERDICT_WORDS[step['verdict']]})")


def headline(data: dict) -> str:
    parts = [step_sentence(data)]
    mfu = data["mfu"]
    if mfu["base"] is not None or mfu["new"] is not None:
        parts.append(f"MFU {format_percent(mfu['base'])} → {format_percent(mfu['new'])}")
    counts = data["ops_summary"]["counts"]
    moved = ", ".join(f"{counts[s]} {s}" for s in ("slower", "faster", "new", "removed") if counts[s])
    parts.append(f"ops: {moved or 'no change beyond tolerance'}")
    changed = [o for o in data["ops"] if o["status"] != "unchanged"]
    if changed:
        top = changed[0]
        parts.append(f"biggest op change {top['name']} "
                     f"{signed_seconds(top['delta_s_per_step'])}/step ({top['status']})")
    fs = data["findings_summary"]
    moved_f = ", ".join(f"{fs[s]} {s}" for s in ("appeared", "disappeared", "grew", "shrank") if fs[s])
    parts.append(f"findings: {moved_f or 'no change'}")
    if data["regression"]["tripped"]:
        parts.append(f"REGRESSION (threshold {format_percent(data['regression']['threshold'])})")
    return "; ".join(parts) + "."


def signed_seconds(seconds) -> str:
    """'+1.2 ms', '-3 µs', '±0 s'; 'n/a' for None (the compare renderers' deltas)."""
    if seconds is None:
        return "n/a"
    return ("+" if seconds > 0 else "-" if seconds < 0 else "±") + format_seconds(abs(seconds))


def ratio_text(value) -> str:
    """'1.19×'; 'n/a' for None."""
    return f"{format_number(value)}×" if value is not None else "n/a"


def mfu_ratio_text(mfu: dict) -> str:
    """The MFU ratio, only where both MFUs read as numbers: '<0.1% → <0.1%, 1.87×' states a change the reader
    cannot see (and tiny MFUs are mostly unpriced work), so it is 'n/a' there."""
    shown = [format_percent(mfu.get(side)) for side in ("base", "new")]
    if any(s in ("n/a", "<0.1%", "0%") for s in shown):
        return "n/a"
    return ratio_text(mfu.get("ratio"))


def share_text(delta, step) -> str:
    """A delta as a signed share of the step: '+4.2%'; 'n/a' without either."""
    if delta is None or not step:
        return "n/a"
    return ("+" if delta > 0 else "") + format_percent(delta / step)



@dataclass(frozen=True, repr=False)
class Comparison(Renderable):
    """``data``: the comparison (docs/compare.md); ``regressed``: the ``fail_on_regression`` gate tripped."""

    data: dict
    formats = COMPARE_FORMATS

    @property
    def headline(self) -> str:
        return headline(self.data)

    def input_files(self) -> tuple:
        """BASE and NEW as given: ``render(fmt, path)`` never writes over either."""
        return tuple(self.data[side]["label"] for side in ("base", "new"))

    @property
    def verdict(self) -> str:
        """'slower' | 'faster' | 'within noise' | 'unchanged' | 'untested' | 'unknown'."""
        return self.data["step"]["verdict"]

    @property
    def regressed(self) -> bool:
        return bool(self.data["regression"]["tripped"])

    @property
    def gates(self) -> list:
        """The ``--fail-on-regression`` gate as a :class:`.gates.Gate` (none when no threshold was given)."""
        from .gates import Gate

        reg = self.data["regression"]
        if reg["threshold"] is None:
            return []
        return [Gate("fail-on-regression", reg["threshold"], reg["value"], bool(reg["tripped"]), reg["reason"])]

    @property
    def ops(self) -> pd.DataFrame:
        import pandas as pd

        from ..compare.ops import OP_COLUMNS

        return pd.DataFrame(self.data["ops"], columns=list(OP_COLUMNS))

    @property
    def findings(self) -> pd.DataFrame:
        import pandas as pd

        from ..compare.ops import FINDING_COLUMNS

        return pd.DataFrame(self.data["findings"], columns=list(FINDING_COLUMNS))

    def to_dict(self) -> dict:
        from .compare_json import compare_to_dict

        return compare_to_dict(self)

    def __repr__(self) -> str:
        return f"<xladiag Comparison: {terminal_line(self.headline)}>"

    def _repr_html_(self) -> str:
        from html import escape

        return f"<b>xladiag compare</b>: {escape(self.headline)} (<code>.to_html(path)</code> for the report)"
