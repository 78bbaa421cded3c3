"""What the analysis keeps from the dump modules of the analysed program, for rules that cannot read
files: the modules and how each matched (or not) a traced program, their memory-usage peak, the
layout-changing copies inside them (fused ones included) and how many instructions are recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .dump_matching import DumpMatch
from .layouts import LAYOUT_CHANGE_COLUMNS, dump_layout_changes, recomputed_instructions
from .memory_at_peak import MemoryAtPeak, memory_at_peak


@dataclass(frozen=True)
class DumpFacts:
    modules: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=["module", "module_id", "file", "program_id", "matched_by", "flops"]))  # one row per dump module
    analysed: tuple[str, ...] = ()  # labels of the dump modules of the analysed (in-step) programs
    peak_memory_bytes: float | None = None  # largest memory-usage report total (HBM) among them; None: no report
    layout_changes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LAYOUT_CHANGE_COLUMNS))
    recomputed_instructions: int = 0
    # Bytes of the analysed module's buffer assignment by allocation kind (parameter, output, temp,
    # constant, thread-local); empty without a buffer-assignment file.
    allocated_bytes: dict = field(default_factory=dict)
    # File names (no folders) of the reports behind ``peak_memory_bytes`` / ``allocated_bytes``: the evidence a
    # memory finding cites; '' without one.
    peak_memory_file: str = ""
    buffer_assignment_file: str = ""
    # Temp allocations that are not live out (a tuple result's elements are maybe-live-out temps): the
    # activations and scratch, what grows with the batch; None without a buffer assignment.
    scratch_bytes: int | None = None
    # The buffers at the peak of the analysed module with the largest footprint that has a buffer assignment
    # (memory_at_peak.py); None without one.
    memory_at_peak: MemoryAtPeak | None = None

    def __repr__(self) -> str:
        return (f"<DumpFacts {len(self.modules)} dump modules, analysed {list(self.analysed)}, "
                f"{self.recomputed_instructions} recomputed instructions>")


def dump_facts(match: DumpMatch | None, ops: pd.DataFrame) -> DumpFacts:
    """Facts of the dump modules matched to the programs of the in-step ops of ``ops``."""
    if match is None:
        return DumpFacts()
    in_step = ops[ops["in_step"]]
    keys = set(zip(in_step["module"].astype(str), in_step["program_id"].fillna("").astype(str)))
    chosen, seen = [], set()
    for key, dm in match.by_program.items():
        if key in keys and id(dm) not in seen:
            seen.add(id(dm))
            chosen.append(dm)
    reports = [dm.memory for dm in chosen if dm.memory is not None]
    peak_report = max(reports, key=lambda r: r.peak_bytes, default=None)
    assignments = [dm.buffers for dm in chosen if dm.buffers is not None]
    allocated: dict[str, int] = {}
    for dm in chosen:
        if dm.buffers is not None:
            for kind, nbytes in dm.buffers.allocations.groupby("kind")["size_bytes"].sum().items():
                allocated[str(kind)] = max(allocated.get(str(kind), 0), int(nbytes))
    scratch = [int(a.loc[(a["kind"] == "temp") & ~a["maybe_live_out"], "size_bytes"].sum())
               for a in (b.allocations for b in assignments)]
    changes = [dump_layout_changes(dm.module) for dm in chosen]
    return DumpFacts(
        modules=match.table,
        analysed=tuple(dm.label for dm in chosen),
        peak_memory_bytes=float(peak_report.peak_bytes) if peak_report is not None else None,
        layout_changes=pd.concat(changes, ignore_index=True) if changes else DumpFacts().layout_changes,
        recomputed_instructions=sum(recomputed_instructions(dm.module) for dm in chosen),
        allocated_bytes=allocated,
        peak_memory_file=Path(peak_report.source).name if peak_report is not None else "",
        buffer_assignment_file=Path(assignments[0].source).name if assignments else "",
        scratch_bytes=max(scratch) if scratch else None,
        memory_at_peak=peak_buffers(chosen),
    )


def peak_buffers(modules) -> MemoryAtPeak | None:
    """memory_at_peak of the module (among ``modules``, DumpModules) that needs the most device memory, among
    those with a buffer assignment."""
    def footprint(dm) -> int:
        return dm.memory.peak_bytes if dm.memory is not None else int(dm.buffers.allocations["size_bytes"].sum())
    with_buffers = [dm for dm in modules if dm.buffers is not None and dm.has_program]
    if not with_buffers:
        return None
    dm = max(with_buffers, key=footprint)
    return memory_at_peak(dm.module, dm.buffers, dm.memory, dm.label, dm.live_ranges)
