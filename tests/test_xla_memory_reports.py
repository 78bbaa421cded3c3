"""XLA's memory-usage reports and buffer assignments: found beside their HLO file, read, and exposed on
the analysis for the analysed module only."""

from __future__ import annotations

import re

import pytest

from conftest import CPU_SAMPLE, SAMPLES
from xladiag.analyzer.analysis import analyze
from xladiag.parsers.discovery import discover, dump_module_id
from xladiag.parsers.xla_memory_reports import (
    MemoryReportError,
    parse_buffer_assignment,
    parse_memory_usage_report,
    read_buffer_assignment,
    read_memory_usage_report,
)


def test_discovery_pairs_each_report_with_its_hlo_file():
    files = discover(SAMPLES / "jax_fsdp_tp_train")
    assert len(files.hlo_files) == 27 == len(files.memory_reports) == len(files.buffer_assignments)
    for hlo in files.hlo_files:
        stem = hlo.name.removesuffix(".txt")
        assert files.memory_report_of(hlo).name == stem + "-memory-usage-report.txt"
        assert files.buffer_assignment_of(hlo).name == stem + "-buffer-assignment.txt"
    assert sorted(dump_module_id(p) for p in files.hlo_files)[-1] == 103
    assert dump_module_id("1700000000.module_0042.jit_f.sm_9.0_gpu_after_optimizations.txt") == 42  # timestamped
    assert dump_module_id("maxtext_llama3_8b_v6e4.after_optimizations.txt") is None


def test_memory_usage_report_totals_per_memory_space():
    path = next((CPU_SAMPLE / "hlo").glob("*memory-usage-report.txt"))
    report = read_memory_usage_report(path)
    first_total = int(re.search(r"^Total bytes: (\d+)", path.read_text(), re.M).group(1))
    assert report.peak_bytes == first_total == 8475728 and list(report.bytes_by_space) == ["default"]
    two = parse_memory_usage_report("Memory Space: default (color=0)\nTotal bytes: 100 (100B)\n\n"
                                    "Memory Space: alt (color=1)\nTotal bytes: 7 (7B)\n")
    assert two.bytes_by_space == {"default": 100, "alt": 7} and two.peak_bytes == 100
    old = parse_memory_usage_report("Total bytes used: 4096 (4.0KiB)\n\nAllocations sorted by size:\n")
    assert old.peak_bytes == 4096
    with pytest.raises(MemoryReportError, match="x.txt: no 'Total bytes'"):
        parse_memory_usage_report("nothing here", "x.txt")


def test_buffer_assignment_allocations_by_kind():
    path = next((CPU_SAMPLE / "hlo").glob("*buffer-assignment.txt"))
    text = path.read_text()
    buffers = read_buffer_assignment(path)
    sizes = [int(s) for s in re.findall(r"^allocation \d+: size (\d+)", text, re.M)]
    assert buffers.allocations["size_bytes"].tolist() == sizes
    params = buffers.allocations[buffers.allocations["kind"] == "parameter"]
    assert sorted(params["parameter_number"]) == list(range(len(params))) and len(params) > 0
    small = parse_buffer_assignment("BufferAssignment:\nallocation 0: size 24, output shape is |(f32[2])|, "
                                    "maybe-live-out:\nallocation 1: size 8, parameter 0, shape |f32[2]| at "
                                    "ShapeIndex {}:\nallocation 2: size 4, thread-local:\nallocation 3: size 64:\n")
    assert small.allocations["kind"].tolist() == ["output", "parameter", "thread-local", "temp"]
    assert small.bytes_of("temp") == 64 and small.allocations["maybe_live_out"].tolist() == [True, False, False, False]


def test_analysis_exposes_the_analysed_modules_reports():
    analysis = analyze(CPU_SAMPLE)
    buffers = read_buffer_assignment(next((CPU_SAMPLE / "hlo").glob("*buffer-assignment.txt")))
    assert analysis.dump.peak_memory_bytes == 8475728
    assert analysis.dump.allocated_bytes == {k: int(v) for k, v in
                                             buffers.allocations.groupby("kind")["size_bytes"].sum().items()}


def test_unreadable_report_is_a_note_not_an_error(tmp_path):
    import shutil
    sample = tmp_path / "run"
    shutil.copytree(CPU_SAMPLE, sample)
    next((sample / "hlo").glob("*memory-usage-report.txt")).write_text("garbage\n")
    analysis = analyze(sample)
    assert analysis.dump.peak_memory_bytes is None
    assert any("no 'Total bytes' line" in w and "headroom unknown" in w for w in analysis.warnings)
