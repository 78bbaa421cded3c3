"""The report every renderer reads: the analysis, its ranked findings and the headline.

A plain container: the API builds it (``xladiag.api.build_report``: rules, ranking, headline); the
renderers in this package only read it. ``render``/``to_<fmt>`` are conveniences over the format table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..text_safety import terminal_line
from ..units import count, format_percent
from .render import Renderable

if TYPE_CHECKING:  # annotations only: importing the analyzer here would load pandas for `--help`
    import pandas as pd

    from ..analyzer.analysis import Analysis
    from ..rules.base import Finding
    from ..rules.selection import Dropped, Selection
    from .gates import Gate


def overlap_counted(finding: dict) -> float | None:
    """A finding's (JSON dict) share of the recoverable total when it differs from its saving alone (it names
    ops a more specific finding counts), else None: what every renderer adds after "saves ~X"."""
    alone, counted = finding["est_savings_s_per_step"] or 0.0, finding.get("counted_s_per_step")
    return counted if counted is not None and alone > 0 and abs(counted - alone) > 1e-3 * alone else None


def on_cpu(data: dict) -> bool:
    """The report is of a CPU: a CPU capture, or a dump priced on a CPU chip."""
    return data.get("platform") == "cpu" or str((data.get("chip") or {}).get("vendor", "")).lower() == "cpu"


def memory_name(data: dict) -> str:
    """What the device's memory is called in prose: 'HBM' on an accelerator, 'memory' on a CPU."""
    return "memory" if on_cpu(data) else "HBM"


def category_name(category, cpu: bool) -> str:
    """An op category as the reports show it: a CPU has no convolution units, its dot fusions are matmuls."""
    text = "" if category is None else str(category)
    return "matmul fusion" if cpu and text == "convolution fusion" else text


def mfu_value(data: dict) -> str:
    """The report's (JSON dict) MFU as every renderer writes it: 'n/a', '36.3%', or 'at least 2.2%' while more
    of the step than the limit is in unpriced ops (their FLOPs are not counted)."""
    return "n/a" if data["mfu"] is None else mfu_words(data["mfu"], bool(data["mfu_at_least"]))


def mfu_words(mfu: float, at_least: bool) -> str:
    """'36.3%', or 'at least 0.036%' (two digits where the plain form would read '<0.1%')."""
    if not at_least:
        return format_percent(mfu)
    return f"at least {format_percent(mfu) if mfu >= 0.001 else f'{mfu * 100:.2g}%'}"


def unpriced_line(data: dict) -> str | None:
    """'12.0% of the step is in ops with no cost model (...)' when any of it is, else None."""
    share = data["unpriced_share"]
    if not share:
        return None
    where = "op time" if data["measured"] else "predicted time (their bytes' time standing in: at least this)"
    return (f"{format_percent(share)} of the step's {where} is in ops with no cost model (bound unknown): "
            "the ideal step leaves them out" + ("; MFU is a lower bound" if data["mfu_at_least"] else ""))


# findings_frame() columns and dtypes.
_FINDING_COLUMNS = {"rank": "int64", "key": "object", "rule": "object", "kind": "object", "main_op": "object",
                    "severity": "object", "title": "object", "time_s_per_step": "float64",
                    "est_savings_s_per_step": "float64", "fraction_of_step": "float64", "confidence": "object",
                    "lever": "object", "n_ops": "int64", "evidence": "object", "fix": "object"}


# Report.ops: what a reader of one op asks first (name, where, how long, how far from its roofline, why).
OPS_COLUMNS = ("op_name", "module", "category", "time_class", "occurrences_per_step", "measured_s_per_step",
               "share_of_step", "predicted_s_per_step", "efficiency", "bound_by", "flops", "bytes_accessed",
               "source")


@dataclass(frozen=True, repr=False)
class Report(Renderable):
    """``findings`` are ranked (biggest saving first); ``ops`` is the per-op table (one row per HLO op;
    columns in docs/json_schema.md); ``render(fmt)`` / ``to_html`` / ``to_markdown`` / ``to_json`` give
    the same text as the ``diagnose`` command and write it when given a path."""

    analysis: Analysis
    findings: tuple[Finding, ...]
    headline: str  # the one sentence a lead would want
    # Findings left out by --select/--ignore/--baseline, with why; the selection that left them out.
    dropped: tuple[Dropped, ...] = ()
    selection: Selection | None = None
    gates: tuple[Gate, ...] = ()  # CI thresholds evaluated on it (``with_gates``); in the JSON and Markdown

    def with_gates(self, *, fail_on: str | None = None, max_exposed_collective: float | None = None,
                   max_exposed_host_transfer: float | None = None, min_mfu: float | None = None) -> Report:
        """This report with those gates evaluated (shares as fractions: 0.10 is 10 %); ``tripped_gates``
        lists the ones that fail. The same gates as ``diagnose --fail-on/--max-*/--min-*``."""
        from dataclasses import replace

        from .gates import evaluate_gates

        return replace(self, gates=evaluate_gates(self, fail_on=fail_on, max_exposed_collective=max_exposed_collective,
                                                  max_exposed_host_transfer=max_exposed_host_transfer, min_mfu=min_mfu))

    @property
    def tripped_gates(self) -> tuple[Gate, ...]:
        return tuple(g for g in self.gates if g.tripped)

    @property
    def ops(self) -> pd.DataFrame:
        """The per-op table to read: one row per HLO op, the op name first and the columns most asked for
        (``OPS_COLUMNS``); ``ops_frame(all_columns=True)`` has every column (docs/json_schema.md)."""
        return self.ops_frame()

    def ops_frame(self, all_columns: bool = False) -> pd.DataFrame:
        """The per-op table (a copy), ``op_name`` first: ``OPS_COLUMNS``, or with ``all_columns`` every column
        of the analysis (its working columns too)."""
        ops = self.analysis.ops
        first = list(OPS_COLUMNS)  # declared columns (analyzer/tables.py): every ops table has them
        rest = [c for c in ops.columns if c not in OPS_COLUMNS] if all_columns else []
        return ops[first + rest].copy()

    @property
    def scopes(self) -> pd.DataFrame:
        """Time, FLOPs and bytes per framework scope (the ops' JAX name paths, wrappers stripped), each with the
        keys of the findings naming its ops: analyzer/scopes.py, docs/json_schema.md#scopes."""
        from .scopes_out import scopes_frame

        return scopes_frame(self)

    def to_trace(self, path: str | Path | None = None) -> str:
        """The representative step of every device as Chrome Trace Event JSON (opens in Perfetto and
        chrome://tracing), each finding's ops tagged with its key and saving; also written to ``path``."""
        from .trace_export import render_trace

        text = render_trace(self.analysis, self.findings)
        if path is not None:
            from ..writer import write_report

            write_report(path, text)
        return text

    def findings_frame(self) -> pd.DataFrame:
        """The findings as a table beside the objects: one row per finding in rank order (``rank`` 1 is the
        biggest saving), the JSON's finding fields that are one value each, plus ``n_ops`` (ops named) and
        ``main_op``; ``findings[i]`` is row ``i``. Empty, with the same columns, when no rule fired."""
        import pandas as pd

        rows = [{"rank": i, "key": f.key, "rule": f.rule, "kind": f.kind, "main_op": f.main_op,
                 "severity": f.severity, "title": f.title, "time_s_per_step": f.time_s_per_step,
                 "est_savings_s_per_step": f.est_savings_s_per_step, "fraction_of_step": f.fraction_of_step,
                 "confidence": f.confidence, "lever": f.lever, "n_ops": len(f.ops), "evidence": f.evidence,
                 "fix": f.fix} for i, f in enumerate(self.findings, 1)]
        frame = pd.DataFrame(rows, columns=list(_FINDING_COLUMNS))
        return frame.astype(_FINDING_COLUMNS)

    @property
    def recoverable_s_per_step(self) -> float:
        """Sum of the findings' savings (each op counted by one finding), never above the step."""
        from ..rules.claims import recoverable_s_per_step

        return recoverable_s_per_step(self.findings, self.analysis.step_s)

    @property
    def capture_scope(self) -> str | None:
        """What the capture can and cannot tell (CPU captures), or None."""
        from ..rules.claims import capture_scope

        return capture_scope(self.analysis)

    @property
    def summary(self) -> dict:
        a = self.analysis
        return {
            "platform": a.platform,
            "chip": a.chip.name,
            "devices": a.num_devices,
            "hosts": list(a.hosts),
            "run": a.files.run_name,
            "steps": a.steps.count if a.steps is not None else 0,
            "step_s": a.step_s,
            "mfu": a.mfu,
            "breakdown": dict(a.breakdown),
            "recoverable_s_per_step": self.recoverable_s_per_step,
            "headline": self.headline,
        }

    def to_text(self, path: str | Path | None = None) -> str:
        return self.render("text", path)

    def to_csv(self, path: str | Path | None = None) -> str:
        """The ops table as CSV (one row per op, the JSON ops' columns, the op name first)."""
        return self.render("csv", path)

    def input_files(self, baseline: bool = True) -> tuple:
        """The files this report was read from: the capture's, the dump's and (``baseline``) the baseline file."""
        f = self.analysis.files
        read = (*f.xplane_files, *f.hlo_files, *f.memory_reports, *f.buffer_assignments, *f.hlo_proto_files)
        accepted = self.selection.baseline_file if baseline and self.selection is not None else None
        return read + ((accepted,) if accepted else ())

    def to_dict(self) -> dict:
        """The JSON report as plain Python objects."""
        from .json_out import report_to_dict

        return report_to_dict(self)

    def __repr__(self) -> str:  # the analysis holds every op and event: never print it whole
        gates = f"; {len(self.tripped_gates)} of {count(len(self.gates), 'gate')} tripped" if self.gates else ""
        return f"<xladiag Report: {count(len(self.findings), 'finding')}{gates}; {terminal_line(self.headline)}>"

    def _repr_html_(self) -> str:
        """A notebook shows the whole HTML report, in an iframe: its page's styles and scripts stay inside."""
        from html import escape

        page = self.render("html")
        return (f"<iframe srcdoc=\"{escape(page, quote=True)}\" title=\"xladiag report\" "
                "style=\"width:100%;height:720px;border:1px solid #ddd\" sandbox=\"allow-scripts\"></iframe>")
