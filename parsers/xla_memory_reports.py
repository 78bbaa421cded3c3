"""XLA's per-module memory reports from an HLO dump: ``*-memory-usage-report.txt`` and
``*-buffer-assignment.txt`` (written beside ``*after_optimizations.txt`` when a buffer assignment exists).

Memory-usage report, two printed forms:
- current XLA, one section per memory space::

      Memory Space: default (color=0)
      Total bytes: 8475728 (8.08MiB)
        cumulative_size;       size;       offset; used_by_n_values; shapes_list
           1008.0KiB( 11%);  1008.0KiB;      1032192;                2; 2×f32[8,63,512]

- older XLA: ``Total bytes used: N (…)`` then ``cumulative_size; total_size - cumulative_size; allocation``.
The total of memory space ``default`` (color 0, device HBM) is what a module needs at its peak: XLA
packs every allocation of the module into it.

Buffer assignment: ``allocation 7: size 24, output shape is |…|, maybe-live-out:`` headers (``, color N``
when not in the default memory space), then the values assigned to it, one a line::

     value: <403 dot_general.44 @0> (size=8388608,offset=0): f32[2048,1024]{1,0}

(value id, defining instruction, ``{i}`` tuple index, position; bytes and offset inside the allocation; shape),
and in some versions ``Total bytes used: N``.

Live-range report (``*-live-range.txt``, dropped by our recordings): ``InstructionSequence:`` (``9:dot``),
``BufferLiveRange:`` (``dot{}:9-10``) and ``Live ranges at 9 (peak):``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import InputError
from .input_files import read_input_text
from .storage import as_path

__all__ = ["VALUE_COLUMNS", "LIVE_RANGE_SUFFIX", "MemoryUsageReport", "BufferAssignment", "LiveRanges",
           "parse_memory_usage_report", "parse_buffer_assignment", "parse_live_ranges", "read_live_ranges",
           "read_memory_usage_report", "read_buffer_assignment", "MemoryReportError"]

_SPACE = re.compile(r"^Memory Space:\s*(\S+)\s*\(color=(\d+)\)", re.M)
_TOTAL = re.compile(r"^Total bytes(?: used)?:\s*(\d+)", re.M)
_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*?):?\s*$", re.M)
_PARAMETER = re.compile(r"parameter (\d+)")
_COLOR = re.compile(r"\bcolor (\d{1,9})\b")
_VALUE = re.compile(r"^\s*value: <\d+ ([^\s{>]+)(\{[\d,]*\})?[^>]*> \(size=(\d+),offset=(\d+)\): (.*?)\s*$", re.M)
VALUE_COLUMNS = ["allocation", "instruction", "shape_index", "size_bytes", "offset_bytes", "shape"]
# No accelerator holds 2^50 bytes (1 PiB) in one module; a larger size is damage, and its report is unknown.
MAX_PLAUSIBLE_BYTES = 2**50


class MemoryReportError(InputError):
    """A memory report that holds no total; the message names the file."""


@dataclass(frozen=True)
class MemoryUsageReport:
    """Bytes per memory space as XLA packed them (``default`` = device HBM)."""

    source: str
    bytes_by_space: dict  # memory space name -> total bytes

    @property
    def peak_bytes(self) -> int:
        """Total of the default memory space (HBM): the module's footprint at its peak."""
        return int(self.bytes_by_space.get("default", next(iter(self.bytes_by_space.values()))))


@dataclass(frozen=True)
class BufferAssignment:
    """One row per allocation: index, size_bytes, kind (parameter / constant / output / thread-local /
    temp), parameter_number (-1 when not a parameter), maybe_live_out, color (memory space, 0 = device HBM).
    ``values``: one row per value assigned to an allocation (VALUE_COLUMNS: the allocation's index, the
    defining instruction, its tuple index text such as ``{1}`` or '', bytes, offset in the allocation, shape
    text as printed)."""

    source: str
    allocations: pd.DataFrame
    values: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=VALUE_COLUMNS))

    def bytes_of(self, kind: str) -> int:
        a = self.allocations
        return int(a.loc[a["kind"] == kind, "size_bytes"].sum())


def parse_memory_usage_report(text: str, source: str = "<string>") -> MemoryUsageReport:
    totals = list(_TOTAL.finditer(text))
    if not totals:
        raise MemoryReportError(f"{source}: no 'Total bytes' line (not an XLA memory-usage report?)")
    spaces = list(_SPACE.finditer(text))
    by_space: dict[str, int] = {}
    for i, total in enumerate(totals):
        # Each total belongs to the last 'Memory Space' header before it; the old form has none (default).
        owner = [s for s in spaces if s.start() < total.start()]
        name = owner[-1].group(1) if owner else ("default" if i == 0 else f"space_{i}")
        by_space.setdefault(name, _size(total.group(1), source, f"'Total bytes' of memory space {name}"))
    return MemoryUsageReport(source, by_space)


def _size(digits: str, source: str, field: str) -> int:
    """A byte count of at most MAX_PLAUSIBLE_BYTES (MemoryReportError naming the file and field otherwise);
    the length is checked before int() reads the digits."""
    if len(digits) > 16 or int(digits) > MAX_PLAUSIBLE_BYTES:
        shown = digits if len(digits) <= 24 else f"a {len(digits)}-digit number of"
        raise MemoryReportError(f"{source}: {field} is {shown} bytes, over 2^50 (not a plausible size)")
    return int(digits)


def _allocation_kind(flags: str) -> str:
    if "parameter" in flags:
        return "parameter"
    if "constant" in flags:
        return "constant"
    if "output shape" in flags:
        return "output"
    if "thread-local" in flags:
        return "thread-local"
    return "temp"


def parse_buffer_assignment(text: str, source: str = "<string>") -> BufferAssignment:
    rows, headers = [], list(_ALLOCATION.finditer(text))
    for m in headers:
        flags = m.group(3)
        param = _PARAMETER.search(flags)
        color = _COLOR.search(flags)
        if len(m.group(1)) > 19 or param and len(param.group(1)) > 19:  # past int64; int() refuses 4300 digits
            raise MemoryReportError(f"{source}: an allocation number past 64 bits (a damaged buffer assignment?)")
        rows.append((int(m.group(1)), _size(m.group(2), source, f"the size of allocation {m.group(1)}"),
                     _allocation_kind(flags), int(param.group(1)) if param else -1, "maybe-live-out" in flags,
                     int(color.group(1)) if color else 0))
    if not rows:
        raise MemoryReportError(f"{source}: no 'allocation N: size S' line (not an XLA buffer assignment?)")
    if any(max(r[0], r[1], r[3]) > 2**63 - 1 for r in rows):  # would overflow the int64 columns below
        raise MemoryReportError(f"{source}: an allocation number past 64 bits (a damaged buffer assignment?)")
    frame = pd.DataFrame(rows, columns=["index", "size_bytes", "kind", "parameter_number", "maybe_live_out", "color"])
    return BufferAssignment(source, frame.astype({"index": "int64", "size_bytes": "int64", "color": "int64",
                                                  "parameter_number": "int64", "maybe_live_out": bool}),
                            _values(text, headers, [r[0] for r in rows], source))


def _values(text: str, headers: list, indices: list[int], source: str) -> pd.DataFrame:
    """The ``value:`` lines under each allocation header (those before the first header belong to none)."""
    rows = []
    for i, (header, index) in enumerate(zip(headers, indices)):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        for v in _VALUE.finditer(text, header.end(), end):
            what = f"the size of value {v.group(1)[:60]} in allocation {index}"
            rows.append((index, v.group(1), v.group(2) or "", _size(v.group(3), source, what),
                         _size(v.group(4), source, what.replace("size", "offset")), v.group(5)))
    return pd.DataFrame(rows, columns=VALUE_COLUMNS).astype(
        {"allocation": "int64", "size_bytes": "int64", "offset_bytes": "int64"})


LIVE_RANGE_SUFFIX = "-live-range.txt"
_SEQUENCE = re.compile(r"^\s+(\d{1,9}):(\S+)\s*$", re.M)
_RANGE = re.compile(r"^\s+(\S+?\{[\d,]*\}):(\d{1,9})-(\d{1,9})\s*$", re.M)
_PEAK_AT = re.compile(r"^\s*Live ranges at (\d{1,9}) \(peak\)", re.M)


@dataclass(frozen=True)
class LiveRanges:
    """XLA's ``*-live-range.txt`` (HloLiveRange): the flattened schedule (loop bodies inlined), each value's
    inclusive live range in it, keyed ``instruction{tuple index}`` as printed, and the position of the peak."""

    source: str
    sequence: tuple  # instruction names by schedule position
    ranges: dict  # "dot.3{}" -> (start, end)
    peak_position: int | None


def parse_live_ranges(text: str, source: str = "<string>") -> LiveRanges:
    head, _, rest = text.partition("BufferLiveRange:")
    if not rest:
        raise MemoryReportError(f"{source}: no 'BufferLiveRange:' section (not an XLA live-range report?)")
    body = rest.split("Live ranges at", 1)[0]
    peak = _PEAK_AT.search(rest)
    return LiveRanges(source, tuple(m.group(2) for m in _SEQUENCE.finditer(head)),
                      {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _RANGE.finditer(body)},
                      int(peak.group(1)) if peak else None)


def read_live_ranges(path: Path | str) -> LiveRanges:
    return parse_live_ranges(_read(path), str(path))


def _read(path: Path | str) -> str:
    path = as_path(path)
    try:
        return read_input_text(path, errors="replace")
    except OSError as exc:
        raise MemoryReportError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_memory_usage_report(path: Path | str) -> MemoryUsageReport:
    return parse_memory_usage_report(_read(path), str(path))


def read_buffer_assignment(path: Path | str) -> BufferAssignment:
    return parse_buffer_assignment(_read(path), str(path))
