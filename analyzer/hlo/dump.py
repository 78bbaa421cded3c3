"""An XLA dump as the analysis sees it: each module with its file, module id and memory reports.

A whole-script dump holds many modules, several with the same name (``jit__normal`` x4 for random
init, ``jit_train_step`` x2 after a recompile): a module is identified by its id (the ``module_NNNN``
of its file name, which the trace calls ``program_id``), never by its name alone. Which module
belongs to which traced program is decided in ``dump_matching``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from ...errors import InputError
from ...parsers.discovery import CaptureFiles, dump_module_id
from ...parsers.hlo_text import HloModule, HloParseError, parse_hlo_file
from ...parsers.storage import prefetched
from ...parsers.xla_memory_reports import (
    LIVE_RANGE_SUFFIX,
    BufferAssignment,
    LiveRanges,
    MemoryReportError,
    MemoryUsageReport,
    read_buffer_assignment,
    read_live_ranges,
    read_memory_usage_report,
)
from .control_flow import loop_warnings
from .costs import instruction_costs

# Top-level instructions that never run as an op of their own (no event in any trace).
_NOT_RUN = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
                      "add-dependency", "opt-barrier", "optimization-barrier", "domain"})


class HloDumpError(InputError):
    """An HLO file that cannot be used; the message is one line naming the file."""


@dataclass(frozen=True)
class DumpModule:
    module: HloModule
    path: Path | None = None
    module_id: int | None = None  # from the file name; equals the trace's program_id in the same process
    memory: MemoryUsageReport | None = None
    buffers: BufferAssignment | None = None
    origin: str = "dump"  # "dump": a --xla_dump_to file; "capture": the HLO the xplane capture carries
    live_ranges: LiveRanges | None = None  # XLA's *-live-range.txt beside the HLO file, when the dump kept it

    @property
    def name(self) -> str:
        return self.module.name

    @property
    def label(self) -> str:
        """``jit_train_step (module_0022)``: how the report names one dump module."""
        if self.origin != "dump":
            return f"{self.name} (HLO from the {self.origin})"
        return self.name + (f" (module_{self.module_id:04d})" if self.module_id is not None else "")

    @property
    def has_program(self) -> bool:
        """False for a text cut before its ENTRY computation: no program to run or match."""
        return bool(self.module.entry)

    @cached_property
    def costs(self) -> pd.DataFrame:
        """``hlo_costs.instruction_costs`` of the top-level instructions (computed once)."""
        return instruction_costs(self.module)

    @cached_property
    def op_names(self) -> frozenset:
        """Top-level instructions that run as ops: what a trace of this program shows."""
        c = self.costs
        return frozenset(c.loc[~c["opcode"].isin(_NOT_RUN), "name"])

    @cached_property
    def instruction_names(self) -> frozenset:
        """Every top-level instruction name, those that never run included."""
        return frozenset(self.costs["name"])

    @cached_property
    def total_flops(self) -> float:
        return float(self.costs["flops"].fillna(0.0).sum())


def read_dump(files: CaptureFiles, progress: Callable[[str], None] | None, notes: list[str]) -> tuple[DumpModule, ...]:
    """Parse every HLO file of the capture and the memory reports XLA wrote beside it.

    A damaged HLO text is an input error; a report that cannot be read is a note (the module stays).
    """
    with prefetched(files.hlo_files + files.memory_reports + files.buffer_assignments):  # remote dumps: one batch
        return _read_modules(files, progress, notes)


def unoptimized_note(module: HloModule, path: Path) -> str | None:
    """A warning for a module XLA has not optimized (a before-optimizations dump): unscheduled and unfused, so
    its ops are not the ones that run and every price describes a program no device executes."""
    if module.is_scheduled or not module.computations:
        return None
    if any(i.opcode == "fusion" for c in module.computations.values() for i in c.instructions):
        return None
    name = Path(path).name
    after = name.replace("before_optimizations", "after_optimizations")
    where = (f"use {after} beside it" if after != name and (Path(path).parent / after).is_file()
             else "use the module's *after_optimizations* file of the same dump")
    return (f"{name}: an unoptimized HLO module (no is_scheduled=true in its HloModule header, no fusions: a "
            f"before-optimizations dump); the numbers describe ops XLA has not yet fused or scheduled, not the "
            f"program that runs: {where}")


def _read_modules(files: CaptureFiles, progress, notes: list[str]) -> tuple[DumpModule, ...]:
    out = []
    for path in files.hlo_files:
        if progress:
            progress(f"parsing HLO {path.name}")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                module = parse_hlo_file(path)
            notes.extend(str(w.message) for w in caught)
        except HloParseError as exc:
            raise HloDumpError(str(exc)) from None
        except UnicodeDecodeError:
            raise HloDumpError(f"{path}: not a text file (expected HLO text)") from None
        except OSError as exc:
            raise HloDumpError(f"{path}: cannot read: {exc.strerror or exc}") from None
        notes.extend(f"{path}: {problem}" for problem in loop_warnings(module))
        notes.extend(n for n in [unoptimized_note(module, path)] if n)
        memory = _report(files.memory_report_of(path), read_memory_usage_report, notes)
        buffers = _report(files.buffer_assignment_of(path), read_buffer_assignment, notes)
        out.append(DumpModule(module, path, dump_module_id(path), memory, buffers,
                              live_ranges=_live_ranges(path, notes) if buffers is not None else None))
    return tuple(out)


def _live_ranges(hlo_file: Path, notes: list[str]) -> LiveRanges | None:
    """XLA's live ranges of the module, read only when the file is there (recordings drop it)."""
    path = hlo_file.with_name(hlo_file.name.removesuffix(".txt") + LIVE_RANGE_SUFFIX)
    try:
        return read_live_ranges(path) if path.is_file() else None
    except (MemoryReportError, OSError) as exc:
        notes.append(f"{exc}; the memory peak's buffers come from the HLO schedule instead")
        return None


def _report(path: Path | None, read, notes: list[str]):
    if path is None:
        return None
    try:
        return read(path)
    except MemoryReportError as exc:
        notes.append(f"{exc}; memory headroom unknown for this module")
        return None
