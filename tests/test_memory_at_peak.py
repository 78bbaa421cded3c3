"""The buffers at a program's memory peak (analyzer/hlo/memory_at_peak.py), on our recorded dumps and on a
program compiled here with JAX (whose dump keeps XLA's own live-range report to check the peak against)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import CPU_SAMPLE, SAMPLES, diagnosed, report_data
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.hlo.memory_at_peak import KINDS, memory_at_peak
from xladiag.parsers.hlo_text import parse_hlo_file
from xladiag.parsers.xla_memory_reports import (
    parse_buffer_assignment,
    read_buffer_assignment,
    read_live_ranges,
    read_memory_usage_report,
)
from xladiag.report.json_schema import load_schema
from xladiag.report.memory_json import MAX_BUFFERS
from xladiag.report.memory_json import memory_at_peak as memory_at_peak_json
from xladiag.report.schema_check import check
from xladiag.report.svg_memory import html_view

REMAT = SAMPLES / "hlo_rules_hbm_remat" / "hlo" / "module_0000.jit_train_step.cpu_after_optimizations"
_BA = "-buffer-assignment.txt"


def _peak_of(base: Path):
    return memory_at_peak(parse_hlo_file(f"{base}.txt"), read_buffer_assignment(f"{base}{_BA}"),
                          read_memory_usage_report(f"{base}-memory-usage-report.txt"))


def _recorded() -> list[Path]:
    found = sorted(SAMPLES.glob(f"**/*{_BA}"))
    assert len(found) >= 20  # the recordings keep the buffer assignment of every module
    return [Path(str(f)[: -len(_BA)]) for f in found]


@pytest.mark.parametrize("base", _recorded(), ids=lambda b: f"{b.parts[-3]}/{b.name.split('.')[1]}/{b.name[:11]}")
def test_peak_buffers_add_up_to_the_memory_usage_report(base):
    peak = _peak_of(base)
    assert int(peak.table["size_bytes"].sum()) == peak.peak_bytes  # the report prints the exact total in bytes
    assert set(peak.table["kind"]) <= set(KINDS)
    assert peak.table["size_bytes"].is_monotonic_decreasing and (peak.table["size_bytes"] > 0).all()
    # Values sharing an allocation at the peak never overlap: each byte is counted once.
    held = peak.table[peak.table["allocation"] >= 0]
    for _, group in held.groupby("allocation"):
        spans = sorted(zip(group["offset_bytes"], group["offset_bytes"] + group["size_bytes"]))
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_kinds_of_the_remat_mlp_train_step():
    """make_hlo_rule_fixtures._remat_mlp: 4 residual GELU layers under jax.checkpoint, SGD on 8 weights and
    one batch x. XLA:CPU merges the recomputation with the forward pass, so the forward values it reads
    in the backward pass are kept: activations; the residual stream (the layer inputs) among them."""
    peak = _peak_of(REMAT)
    t = peak.table
    params = t[t["kind"] == "parameter"]
    weights = [f"params[{i}]['{w}']" for i in range(4) for w in ("w_in", "w_out")]
    assert sorted(params["op_name"].str.replace("\\", "")) == sorted([*weights, "x"])
    assert (params["opcode"] == "parameter").all()
    assert params["size_bytes"].sum() == 8 * 4096 * 1024 * 4 + 2048 * 1024 * 4  # 8 f32 weights and x
    acts = t[t["kind"] == "activation"]
    assert len(acts) and acts["op_name"].str.contains(r"/jvp\(\)/").all()  # defined by the forward pass
    assert not acts["op_name"].str.contains("transpose(", regex=False).any()
    assert {"wrapped_add", "wrapped_add.1", "wrapped_add.2"} <= set(acts["instruction"])  # layer inputs, f32[2048,1024]
    assert set(acts.loc[acts["instruction"].str.startswith("wrapped_add"), "shape"]) == {"f32[2048,1024]"}
    assert (t.loc[t["kind"] == "constant", "opcode"] == "constant").all()
    assert t["source_line"].max() > 0 and (t.loc[t["kind"] == "activation", "source_file"] != "").all()
    assert "dot_general.29 (f32[2048,4096], 33.6 MB, activation)" in peak.sentence()


def test_values_and_colors_are_parsed():
    text = textwrap.dedent("""\
        allocation 0: size 64, color 5, maybe-live-out:
         value: <7 fusion.3{1} @0> (size=64,offset=0): bf16[4,8]{1,0:T(8,128)(2,1)S(5)}
        allocation 1: size 96, preallocated-temp:
         value: <8 dot.1 @0> (size=32,offset=64): f32[8]{0}
         value: <9 add @0> (size=64,offset=0): f32[16]{0}
        """)
    ba = parse_buffer_assignment(text, "m.txt")
    assert ba.allocations["color"].tolist() == [5, 0]
    v = ba.values
    assert v[["allocation", "instruction", "shape_index", "size_bytes", "offset_bytes"]].values.tolist() == [
        [0, "fusion.3", "{1}", 64, 0], [1, "dot.1", "", 32, 64], [1, "add", "", 64, 0]]
    assert v["shape"].iloc[0] == "bf16[4,8]{1,0:T(8,128)(2,1)S(5)}"


def test_hlo_only_gives_the_same_table_as_the_capture():
    with_trace = analyze(CPU_SAMPLE).dump.memory_at_peak
    hlo_only = analyze(CPU_SAMPLE / "hlo").dump.memory_at_peak
    assert with_trace is not None and hlo_only is not None
    assert with_trace.table.equals(hlo_only.table)
    assert (with_trace.peak_bytes, with_trace.peak_instruction) == (hlo_only.peak_bytes, hlo_only.peak_instruction)
    assert with_trace.peak_bytes == read_memory_usage_report(
        next((CPU_SAMPLE / "hlo").glob("*memory-usage-report.txt"))).peak_bytes


_PROGRAM = """
import jax, jax.numpy as jnp
def loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) @ w.T)
def two_results(w, x):
    y = x @ w
    return y, jnp.sum(jnp.tanh(y @ w.T) @ w)
def scan_loss(ws, x):
    h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)
    return jnp.sum(h)
w, x = jnp.ones((256, 256)), jnp.ones((128, 256))
jax.block_until_ready(jax.jit(jax.grad(loss))(w, x))
jax.block_until_ready(jax.jit(two_results)(w, x))
jax.block_until_ready(jax.jit(jax.grad(scan_loss))(jnp.ones((6, 256, 256)), x))
"""


@pytest.fixture(scope="module")
def fresh_dump(tmp_path_factory) -> Path:
    """A grad step, a two-result program and the grad of a 6-layer scan compiled by JAX on CPU, dumped with
    XLA's live-range report."""
    pytest.importorskip("jax")
    out = tmp_path_factory.mktemp("dump")
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={out}", "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", _PROGRAM], env=env, check=True, timeout=300, capture_output=True)
    return out


def _fresh(dump: Path, name: str) -> Path:
    found = sorted(dump.glob(f"module_*.{name}.*after_optimizations{_BA}"))
    assert found, f"no buffer assignment for {name} in {dump}"
    return Path(str(found[-1])[: -len(_BA)])


@pytest.mark.parametrize("name", ["jit_loss", "jit_two_results"])
def test_the_peak_is_the_one_xla_reports(fresh_dump, name):
    """XLA's ``*-live-range.txt`` lists the values live at its peak: the same as those rebuilt from the
    schedule (the recordings drop that file). Thread-local scalars (XLA:CPU reducers) are not in it."""
    base = _fresh(fresh_dump, name)
    report = Path(f"{base}-live-range.txt").read_text()
    at = re.search(r"Live ranges at (\d+) \(peak\):\n((?:    .*\n)+)", report)
    xla_live = {line.split("{")[0].strip() for line in at.group(2).splitlines()}
    peak = _peak_of(base)
    allocations = read_buffer_assignment(f"{base}{_BA}").allocations
    thread_local = allocations.loc[allocations["kind"] == "thread-local", "index"]
    held = peak.table[peak.table["kind"].isin(["parameter", "output", "activation", "temporary"])
                      & ~peak.table["allocation"].isin(thread_local)]
    assert set(held["instruction"]) == xla_live
    assert int(peak.table["size_bytes"].sum()) == peak.peak_bytes
    assert set(peak.table.loc[peak.table["kind"] == "parameter", "instruction"]) == {"w.1", "x.1"}
    if name == "jit_loss":  # the forward values XLA keeps to the peak are read by the backward pass: activations
        forward = peak.table[~peak.table["op_name"].str.contains("transpose(", regex=False)
                             & peak.table["kind"].isin(["activation", "temporary"])
                             & ~peak.table["allocation"].isin(thread_local)]
        assert (forward["kind"] == "activation").all()


def test_a_result_computed_early_is_an_output_at_the_peak(fresh_dump):
    peak = _peak_of(_fresh(fresh_dump, "jit_two_results"))
    outputs = peak.table[peak.table["kind"] == "output"]
    assert "f32[128,256]" in outputs["shape"].tolist()  # y = x @ w, live to the end while the rest runs
    assert "tuple" in outputs["dtype"].tolist()  # the result tuple's table of pointers
    assert (peak.table["kind"] != "activation").all()  # no backward pass: nothing kept for one
    assert int(peak.table["size_bytes"].sum()) == peak.peak_bytes


def test_json_section_adds_up_and_matches_the_schema():
    from conftest import report_data

    data = report_data(CPU_SAMPLE)
    check(data, load_schema("report"), "cpu sample", "report")
    section = data["memory_at_peak"]
    assert section["module"] == "jit_train_step (module_0000)" and len(section["buffers"]) <= MAX_BUFFERS
    listed = sum(b["size_bytes"] for b in section["buffers"])
    assert listed + section["bytes_left_out"] == section["peak_bytes"] == sum(section["bytes_by_kind"].values())
    everything = memory_at_peak_json(CPU_SAMPLE / "hlo")  # the plain function: HLO only, every buffer listed
    assert everything["buffers_left_out"] == 0 and everything["buffers"][:5] == section["buffers"][:5]
    assert memory_at_peak_json(diagnosed(CPU_SAMPLE)) == everything  # from a Report already built: the same
    without = {k: v for k, v in data.items() if k != "memory_at_peak"}  # a report written before the field
    check(without, load_schema("report"), "older report", "report")


def test_memory_findings_name_the_largest_buffers():
    """hbm-headroom and remat-overhead point at memory_at_peak: one sentence naming its largest buffers."""
    data = report_data(SAMPLES / "hlo_rules_hbm_remat", chip="v6e")
    largest = [b for b in data["memory_at_peak"]["buffers"] if b["kind"] != "unused"][:3]
    by_rule = {f["rule"]: f["evidence"] for f in data["findings"]}
    for rule in ("hbm-headroom", "remat-overhead"):
        sentence = by_rule[rule].split("The largest buffers at the peak")[1]
        assert all(f"{b['buffer']} ({b['shape']}," in sentence for b in largest), rule
        assert "(memory_at_peak)." in sentence
    cpu = report_data(SAMPLES / "jax_scan_rnn")  # its dump kept no buffer assignment: no sentence, no section
    assert cpu["memory_at_peak"] is None
    assert not any("largest buffers" in f["evidence"] for f in cpu["findings"])


def test_reports_show_what_fills_hbm():
    report = diagnosed(SAMPLES / "hlo_rules_hbm_remat", chip="v6e")
    top = [b for b in report.to_dict()["memory_at_peak"]["buffers"] if b["kind"] == "activation"][0]
    markdown = report.to_markdown()
    section = markdown[markdown.index("## Memory at the peak"):]
    assert "713 MB at the peak of jit\\_train\\_step" in section and top["buffer"].replace("_", "\\_") in section
    text = report.to_text()
    assert "Memory at the peak" in text and "activation dot_general.29 f32[2048,4096]" in text
    html = report.to_html()
    chart = html[html.index('<svg id="memory-chart"'):]
    chart = chart[: chart.index("</svg>")]
    assert chart.count('class="mem-activation"') >= 2 and "http" not in chart
    hostile = {"module": "m", "peak_bytes": 10, "peak_source": "s", "buffer_assignment": "b", "peak_instruction": None,
               "bytes_by_kind": {"temporary": 10}, "buffers_left_out": 0, "bytes_left_out": 0,
               "buffers": [{"buffer": "<script>x", "kind": "temporary", "size_bytes": 10, "shape": "f32[]",
                            "dtype": "f32", "instruction": "i", "opcode": "o", "op_name": "</svg>", "source_file": "",
                            "source_line": None, "allocation": 0, "offset_bytes": 0}]}
    svg = html_view(hostile)["svg"]
    assert "<script>" not in svg and "&lt;script&gt;x" in svg and svg.count("</svg>") == 1


def test_a_scans_stacked_residuals_are_activations(fresh_dump):
    """The forward scan (a while loop) stacks what its backward loop reads, one f32[6,128,256] per saved
    residual: defined inside the loop body, they are kept because the loop's result is read by the backward
    pass. The peak moment is the loop itself (its body's schedule is one position here)."""
    peak = _peak_of(_fresh(fresh_dump, "jit_scan_loss"))
    t = peak.table
    assert int(t["size_bytes"].sum()) == peak.peak_bytes
    stacked = t[t["shape"] == "f32[6,128,256]"]
    assert len(stacked) >= 2 and (stacked["kind"] == "activation").all()
    assert (stacked["op_name"].str.contains("/jvp()/", regex=False)).all()  # the forward loop's body made them
    assert set(t.loc[t["kind"] == "parameter", "shape"]) == {"f32[6,256,256]", "f32[128,256]"}


@pytest.mark.parametrize("name", ["jit_loss", "jit_scan_loss"])
def test_xlas_own_live_ranges_when_the_dump_kept_them(fresh_dump, name):
    """A dump that kept ``*-live-range.txt`` (ours drop it): the peak moment and ranges are XLA's, loop bodies
    included; the analysis reads the file by itself."""
    base = _fresh(fresh_dump, name)
    xla = read_live_ranges(f"{base}-live-range.txt")
    peak = memory_at_peak(parse_hlo_file(f"{base}.txt"), read_buffer_assignment(f"{base}{_BA}"),
                          read_memory_usage_report(f"{base}-memory-usage-report.txt"), xla_live=xla)
    listed = Path(f"{base}-live-range.txt").read_text().split("(peak):\n", 1)[1].split("Stack trace", 1)[0]
    xla_live = {line.strip().split(":")[0] for line in listed.splitlines() if line.strip()}
    allocations = read_buffer_assignment(f"{base}{_BA}").allocations
    always = allocations.loc[allocations["kind"].isin(["thread-local", "constant"]), "index"]
    held = peak.table[(peak.table["kind"] != "unused") & ~peak.table["allocation"].isin(always)]
    ours = {b if "{" in b else b + "{}" for b in held["buffer"]}
    assert ours == {v for v in xla_live if not v.startswith("constant")}
    assert peak.peak_instruction == xla.sequence[xla.peak_position]
    assert int(peak.table["size_bytes"].sum()) == peak.peak_bytes
    whole = analyze(base.parent, program=name).dump.memory_at_peak  # read_dump finds the file beside the HLO
    assert whole.peak_instruction == peak.peak_instruction and whole.table.equals(peak.table)
