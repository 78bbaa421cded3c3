"""Words a reader recognises: CPU threads by number, a CPU's matmuls and memory by their names, a dump's slice."""

from __future__ import annotations

import re

from conftest import CPU_SAMPLE, HLO_PROGRAM, HLO_SAMPLE, diagnosed
from xladiag.report.trace_links import thread_labels

RAW_THREAD = re.compile(r"\w+/-?\d{6,}")


def test_thread_ids_are_numbered_threads():
    labels = thread_labels(["tf_XLAEigen/-323312177824728074", "XLA Ops", "tf_XLAEigen/-1284978310468195623",
                            "tf_XLAEigen/-323312177824728074", None, "/42424242"])
    assert labels == {"tf_XLAEigen/-1284978310468195623": "CPU thread 2 (tf_XLAEigen)",
                      "tf_XLAEigen/-323312177824728074": "CPU thread 3 (tf_XLAEigen)",
                      "/42424242": "CPU thread 1"}


def test_cpu_reports_name_threads_matmuls_and_memory_as_a_reader_would():
    report = diagnosed(CPU_SAMPLE)
    texts = {fmt: report.render(fmt) for fmt in ("text", "markdown", "html")}
    for fmt, text in texts.items():
        assert not RAW_THREAD.search(text), (fmt, RAW_THREAD.search(text))
        assert "convolution fusion" not in text, fmt
    assert "CPU thread " in texts["markdown"] and "CPU thread " in texts["html"]
    assert "matmul fusion" in texts["html"]  # the ops table's category
    # The JSON keeps the trace's own line name (to find it in the trace viewer) beside the label.
    data = report.to_dict()
    occ = [o["occurrence"] for f in data["findings"] for o in f["ops"] if o.get("occurrence")]
    assert occ and all(RAW_THREAD.fullmatch(o["line"]) and o["line_label"].startswith("CPU thread ") for o in occ)
    words = " ".join(f"{f.title} {f.evidence} {f.fix} {f.lever}" for f in report.findings)
    assert "HBM" not in words and "memory per device" in words  # the remat finding: a CPU's memory
    assert "<td>Memory bandwidth</td>" in texts["html"] and "<td>HBM bandwidth</td>" not in texts["html"]


def test_a_dump_with_a_named_slice_says_the_slice_not_no_devices():
    headline = diagnosed(hlo_dir=HLO_SAMPLE, program=HLO_PROGRAM, chip="v6e-4").headline
    assert headline.startswith("TPU v6e, slice of 4 chips: predicted step"), headline
    assert "no devices" not in diagnosed(hlo_dir=HLO_SAMPLE, program=HLO_PROGRAM).headline
