"""What fills device memory at a program's peak: one row per buffer, largest first.

XLA reserves every allocation of its buffer assignment for the whole program (the memory-usage report's
``Total bytes`` of the default memory space is their sum: what HBM must hold). Inside an allocation values
take turns: the temp allocation is a heap where a buffer's bytes are reused once it is dead. The peak moment
is the schedule position where the most bytes are live: XLA's own live-range report when the dump kept it,
else rebuilt from the scheduled HLO (buffer_liveness.py); each allocation's bytes are then
the values live there, largest first, and what no live value covers ("unused": reserved, free at that moment,
what XLA's packing could not reuse). The rows therefore add up to the report's total.

Kinds: ``parameter`` (entry parameter allocations: weights, optimizer state, the batch), ``constant``,
``output`` (a result of the program), ``activation`` (computed by the forward pass and read by the backward
pass, so kept until then), ``temporary`` (everything else: scratch, backward-pass values, per-thread
scalars), ``unused``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...parsers.hlo_text import HloModule
from ...parsers.xla_memory_reports import BufferAssignment, LiveRanges, MemoryUsageReport
from ...units import format_bytes
from ..tables import Table, _col
from .buffer_liveness import BACKWARD_MARK, live_ranges, peak_position, schedule_of

KINDS = ("parameter", "output", "activation", "temporary", "constant", "unused")
_ALWAYS_LIVE = {"parameter": "parameter", "constant": "constant", "thread-local": "temporary"}
_DTYPE = re.compile(r"^([a-z][a-z0-9]*)\[")
_LAYOUT = re.compile(r"\{[^{}]*\}")
UNUSED_BUFFER = "(reserved, free at the peak moment)"

PEAK_BUFFERS = Table("peak buffers", "one buffer in device memory at the program's peak", (
    _col("buffer", "text", "", "the value: its defining instruction, with the tuple index of an element"),
    _col("kind", "text", "", "parameter, output, activation, temporary, constant or unused"),
    _col("size_bytes", "int64", "bytes", "bytes it holds in the allocation"),
    _col("shape", "text", "", "its shape without layout, e.g. f32[2048,1024]; '' for unused"),
    _col("dtype", "text", "", "its element type ('tuple' for a tuple's index table)"),
    _col("instruction", "text", "", "the HLO instruction that defines it"),
    _col("opcode", "text", "", "that instruction's opcode ('' when not in the module)"),
    _col("op_name", "text", "", "its op_name metadata: the scope in the model's code"),
    _col("source_file", "text", "", "its source file ('' when unknown)"),
    _col("source_line", "int64", "", "its source line (0 when unknown)"),
    _col("allocation", "int64", "", "the buffer-assignment allocation (-1 for unused)"),
    _col("offset_bytes", "int64", "bytes", "its offset inside the allocation"),
))


@dataclass(frozen=True)
class MemoryAtPeak:
    module: str  # the dump module's label
    peak_bytes: int  # what the rows add up to: the memory-usage report's total, else the allocations' sum
    peak_source: str  # "memory-usage report FILE" or "buffer assignment FILE"
    buffer_assignment_file: str
    peak_instruction: str  # the entry instruction at the peak moment ('' for an empty schedule)
    table: pd.DataFrame  # PEAK_BUFFERS, largest first

    @property
    def bytes_by_kind(self) -> dict:
        sums = self.table.groupby("kind")["size_bytes"].sum()
        return {k: int(sums.get(k, 0)) for k in KINDS}

    def largest(self, n: int = 3) -> pd.DataFrame:
        t = self.table
        return t[t["kind"] != "unused"].head(n)

    def sentence(self, n: int = 3) -> str:
        """One sentence naming the largest buffers, for a finding's evidence."""
        parts = [f"{r.buffer} ({r.shape}, {format_bytes(r.size_bytes)}, {r.kind})"
                 for r in self.largest(n).itertuples()]
        if not parts:
            return ""
        return (f"The largest buffers at the peak (at {self.peak_instruction or 'the program end'}) are "
                + ", ".join(parts) + " (memory_at_peak).")


def memory_at_peak(module: HloModule, buffers: BufferAssignment, memory: MemoryUsageReport | None = None,
                   label: str = "", xla_live: LiveRanges | None = None) -> MemoryAtPeak:
    """The buffers in the default memory space (HBM) at ``module``'s peak, from its buffer assignment; the
    live ranges and peak moment are XLA's own (``xla_live``) when the dump kept them, else rebuilt."""
    allocs = buffers.allocations[buffers.allocations["color"] == 0]
    values = buffers.values[buffers.values["allocation"].isin(allocs["index"])].reset_index(drop=True)
    schedule = schedule_of(module)
    start, end, length, sequence = *live_ranges(values, schedule), schedule.length, None
    if xla_live is not None and xla_live.sequence:
        start, end, length, sequence = *_xla_ranges(values, xla_live, start, end), len(xla_live.sequence), \
            xla_live.sequence
    alloc_kind = values["allocation"].map(dict(zip(allocs["index"], allocs["kind"])))
    always = alloc_kind.isin(list(_ALWAYS_LIVE)).to_numpy()
    start, end = np.where(always, 0, start), np.where(always, length, end)
    t = peak_position(start, end, values["size_bytes"].to_numpy(np.float64), length)
    if sequence is not None and xla_live.peak_position is not None and xla_live.peak_position < length:
        t = xla_live.peak_position
    live = values[(start <= t) & (t <= end)].assign(_start=start[(start <= t) & (t <= end)])
    rows = [_row(v, _kind(v, alloc_kind[i], module, schedule), module) for i, v in _occupants(live).iterrows()]
    total = int(allocs["size_bytes"].sum())
    unused = total - sum(r["size_bytes"] for r in rows)
    if unused > 0:
        rows.append(dict(buffer=UNUSED_BUFFER, kind="unused", size_bytes=unused, shape="", dtype="",
                         instruction="", opcode="", op_name="", source_file="", source_line=0, allocation=-1,
                         offset_bytes=0))
    table = pd.DataFrame(rows, columns=PEAK_BUFFERS.names) if rows else PEAK_BUFFERS.empty()
    table = PEAK_BUFFERS.coerce(table.sort_values(["size_bytes", "buffer"], ascending=[False, True],
                                                  kind="stable").reset_index(drop=True))
    entry = module.computations.get(module.entry)
    order = sequence if sequence is not None else [i.name for i in entry.instructions] if entry is not None else []
    at = order[t] if t < len(order) else ""
    source = (f"memory-usage report {Path(memory.source).name}" if memory is not None
              else f"buffer assignment {Path(buffers.source).name}")
    peak = memory.peak_bytes if memory is not None else total
    return MemoryAtPeak(label or module.name, int(peak), source, Path(buffers.source).name, at, table)


def _xla_ranges(values: pd.DataFrame, xla_live: LiveRanges, start, end) -> tuple[np.ndarray, np.ndarray]:
    """Each value's range from XLA's report (``name{index}``); a value it does not list is live only at its
    instruction's position in XLA's flattened schedule (0 when not there)."""
    where = {name: k for k, name in enumerate(xla_live.sequence)}
    keys = values["instruction"] + values["shape_index"].replace("", "{}")
    s, e = start.copy(), end.copy()
    for j, key in enumerate(keys):
        if key in xla_live.ranges:
            s[j], e[j] = xla_live.ranges[key]
        else:
            s[j] = e[j] = where.get(values["instruction"].iat[j], 0)
    return s, e


def _occupants(live: pd.DataFrame) -> pd.DataFrame:
    """The live values that hold their bytes at the peak: where two overlap in one allocation (one
    overwrites the other in place at this very position), the later one."""
    keep = []
    for _, group in live.sort_values("_start", ascending=False, kind="stable").groupby("allocation", sort=True):
        taken: list[tuple[int, int]] = []
        for i, lo, size in zip(group.index, group["offset_bytes"], group["size_bytes"]):
            hi = lo + size
            if all(hi <= a or b <= lo for a, b in taken):
                taken.append((lo, hi))
                keep.append(i)
    return live.loc[sorted(keep)]


def _kind(value, allocation_kind: str, module: HloModule, schedule) -> str:
    if allocation_kind in _ALWAYS_LIVE:
        return _ALWAYS_LIVE[allocation_kind]
    name = value["instruction"]
    if name in schedule.live_out:
        return "output"
    name = schedule.carried_by.get(name, name)  # a loop's stacked result is kept if the loop's result is
    ins = _instruction(module, name)
    if name in schedule.backward_use and BACKWARD_MARK not in (ins.op_name if ins is not None else ""):
        return "activation"
    return "temporary"


def _instruction(module: HloModule, name: str):
    try:
        return module.instruction(name)
    except KeyError:
        return None


def _row(value, kind: str, module: HloModule) -> dict:
    ins = _instruction(module, value["instruction"])
    shape = _LAYOUT.sub("", value["shape"]).strip()
    dtype = _DTYPE.match(shape)
    return dict(buffer=value["instruction"] + value["shape_index"].replace("{}", ""), kind=kind,
                size_bytes=int(value["size_bytes"]), shape=shape,
                dtype=dtype.group(1) if dtype else ("tuple" if shape.startswith("(") else ""),
                instruction=value["instruction"], opcode=ins.opcode if ins else "",
                op_name=ins.op_name if ins else "", source_file=ins.source_file if ins else "",
                source_line=int(ins.source_line or 0) if ins else 0, allocation=int(value["allocation"]),
                offset_bytes=int(value["offset_bytes"]))
