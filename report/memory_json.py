"""The JSON ``memory_at_peak`` section: the buffers in device memory at the analysed program's peak.

``memory_at_peak_dict`` is what ``report_to_dict`` writes; ``memory_at_peak`` is the same dict from a path,
for callers that want the table alone (an MCP tool, a notebook) without a report around it.
"""

from __future__ import annotations

from ..analyzer.hlo.memory_at_peak import MemoryAtPeak

MAX_BUFFERS = 100  # the rest is summed in buffers_left_out / bytes_left_out: the rows still add up to the peak
_TEXT = ("buffer", "kind", "shape", "dtype", "instruction", "opcode", "op_name", "source_file")
_INTS = ("size_bytes", "allocation", "offset_bytes")


def buffer_records(peak: MemoryAtPeak, limit: int | None = MAX_BUFFERS) -> list[dict]:
    """The table's rows, largest first, as plain dicts (``source_line`` null when unknown, ``allocation`` null
    for the unused bytes)."""
    rows = peak.table if limit is None else peak.table.head(limit)
    out = []
    for r in rows.itertuples(index=False):
        rec = {k: str(getattr(r, k)) for k in _TEXT}
        rec.update({k: int(getattr(r, k)) for k in _INTS})
        rec["allocation"] = rec["allocation"] if rec["allocation"] >= 0 else None  # unused bytes: no one allocation
        rec["source_line"] = int(r.source_line) or None
        out.append(rec)
    return out


def memory_at_peak_dict(peak: MemoryAtPeak | None, limit: int | None = MAX_BUFFERS) -> dict | None:
    """The JSON object of ``peak`` (null without a buffer assignment)."""
    if peak is None:
        return None
    shown = buffer_records(peak, limit)
    left = peak.table.iloc[len(shown):]
    return {
        "module": peak.module,
        "peak_bytes": int(peak.peak_bytes),
        "peak_source": peak.peak_source,
        "buffer_assignment": peak.buffer_assignment_file,
        "peak_instruction": peak.peak_instruction or None,
        "bytes_by_kind": {k: int(v) for k, v in peak.bytes_by_kind.items()},
        "buffers": shown,
        "buffers_left_out": int(len(left)),
        "bytes_left_out": int(left["size_bytes"].sum()),
    }


def memory_at_peak(source, **options) -> dict | None:
    """``memory_at_peak_dict`` with every buffer listed (no ``limit``), None when the dump has no buffer
    assignment. ``source``: a Report or an Analysis already built (no options then), or what
    :func:`xladiag.analyzer.analysis.analyze` takes (a capture, or an HLO dump folder alone) with its options."""
    analysis = getattr(source, "analysis", source)  # a Report carries its Analysis
    if not hasattr(analysis, "dump"):
        from ..analyzer.analysis import analyze

        analysis = analyze(source, **options)
    return memory_at_peak_dict(analysis.dump.memory_at_peak, limit=None)
