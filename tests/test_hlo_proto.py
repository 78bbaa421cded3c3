"""HLO carried by the capture itself (/host:metadata `Hlo Proto`): decoded with our own schema,
printed as HLO text and read by the one text parser."""

from __future__ import annotations

import pytest

from conftest import CPU_SAMPLE, GPU_SAMPLE, SAMPLES, TPU_SAMPLE, only_xplane
from xladiag.analyzer.hlo.costs import instruction_costs
from xladiag.parsers.hlo_proto import hlo_proto_to_text, parse_hlo_proto
from xladiag.parsers.hlo_text import HloParseError, parse_hlo_file
from xladiag.parsers.xplane import read_xspace


def _protos(sample) -> dict[str, tuple[str, bytes]]:
    return {pid: (name, data) for pid, name, data in read_xspace(only_xplane(sample)).hlo_protos}


def test_every_sample_carries_its_programs():
    assert {name for name, _ in _protos(CPU_SAMPLE).values()} == {"jit_train_step"}
    gpu = _protos(GPU_SAMPLE)
    assert gpu["15"][0] == "jit_forward_3d_conv" and len(gpu) == 8
    tpu = _protos(TPU_SAMPLE)  # TPU program ids are uint64 fingerprints, kept exactly as text
    assert tpu["12190760917235803885"][0] == "jit_f"
    for sample in (CPU_SAMPLE, GPU_SAMPLE, TPU_SAMPLE):
        for pid, (name, data) in _protos(sample).items():
            module = parse_hlo_proto(data, f"{name}({pid})")
            assert module.entry in module.computations


def test_embedded_module_costs_equal_the_dump_of_the_same_program():
    # The CPU sample was recorded with a dump: the capture's own HLO must give the same cost per op.
    _, data = _protos(CPU_SAMPLE)["0"]
    from_proto = instruction_costs(parse_hlo_proto(data)).set_index("name")
    dump = next((CPU_SAMPLE / "hlo").glob("*jit_train_step*after_optimizations.txt"))
    from_dump = instruction_costs(parse_hlo_file(dump)).set_index("name")
    assert sorted(from_proto.index) == sorted(from_dump.index) and len(from_proto) > 100
    joined = from_proto.merge(from_dump, left_index=True, right_index=True, suffixes=("", "_dump"))
    for column in ("opcode", "flops", "bytes_accessed", "hbm_bytes", "is_matmul", "dtype"):
        assert (joined[column].astype(str) == joined[f"{column}_dump"].astype(str)).all(), column
    assert joined["flops"].sum() > 2e8


def test_cudnn_convolution_gets_flops_from_the_captured_hlo():
    # MI300 sample, no dump: cudnn-conv.1 convolves x[1,32,60,104,16] with a [1,2,2] window, stride
    # 1x2x2, padding 1 on each side, 16 -> 5120 features. Taps that land on real input (not padding):
    # 32 of 34 along depth, 60 along height (each row once), 104 along width; 2 FLOPs per MAC.
    _, data = _protos(GPU_SAMPLE)["15"]
    costs = instruction_costs(parse_hlo_proto(data)).set_index("name")
    expected = 2 * (32 * 60 * 104) * 16 * 5120
    assert costs.loc["cudnn-conv.1", "flops"] == pytest.approx(expected, rel=1e-9)


def test_text_form_is_xla_like():
    _, data = _protos(GPU_SAMPLE)["15"]
    text = hlo_proto_to_text(data)
    assert "ENTRY %main.0_spmd {" in text
    assert 'custom_call_target="__cudnn$convForward"' in text
    assert "dim_labels=" in text and "window={size=1x2x2 stride=1x2x2 pad=1_1x1_1x1_1}" in text


@pytest.mark.parametrize("data", [b"\xff\xff\xff", b"\x0a\x05\x0a\x03abc", b""])
def test_unreadable_or_empty_proto_is_one_line_error(data):
    with pytest.raises(HloParseError) as info:
        parse_hlo_proto(data, "broken(1)")
    assert "broken(1)" in str(info.value) and "\n" not in str(info.value)


# --- the analysis uses the capture's own HLO -------------------------------------------------------

def _ops_by_name(analysis):
    ops = analysis.ops
    return ops[ops["in_step"]].set_index("op_name")


def test_gpu_capture_without_a_dump_gets_flops_bytes_and_a_roofline():
    from xladiag.analyzer.analysis import analyze

    a = analyze(GPU_SAMPLE)
    assert not list(GPU_SAMPLE.rglob("*after_optimizations*.txt"))  # really no dump
    conv = _ops_by_name(a).loc["cudnn-conv.1"]
    assert conv["flops"] == pytest.approx(2 * (32 * 60 * 104) * 16 * 5120) and conv["flops_source"] == "hlo"
    assert conv["bound_by"] in ("compute", "hbm") and conv["predicted_s"] > 0
    assert a.mfu is not None and 0 < a.mfu < 1
    # Every HLO op of the step is priced (bytes from the module), not just the convolution.
    hlo_ops = a.ops[a.ops["in_step"] & (a.ops["program_id"] == "15")]
    assert len(hlo_ops) >= 3 and hlo_ops["predicted_s"].notna().all()
    assert "capture HLO" in set(a.dump.modules["matched_by"])


def test_another_programs_dump_is_not_used_the_captures_own_hlo_is(tmp_path):
    from xladiag.analyzer.analysis import analyze

    own = _ops_by_name(analyze(CPU_SAMPLE))
    # A dump of a different job whose train step has the same name: never pasted onto these ops.
    other = analyze(only_xplane(CPU_SAMPLE), hlo_dir=SAMPLES / "jax_fsdp_tp_train")
    theirs = _ops_by_name(other)
    assert (theirs["flops"].fillna(-1) == own.loc[theirs.index, "flops"].fillna(-1)).all()
    assert theirs["flops"].sum() > 2e8
    assert any("does not match" in w or "not among the traced" in w for w in other.warnings)


def test_hlo_proto_files_in_the_run_folder_are_read_when_the_planes_lack_the_module(tmp_path):
    """xprof/TensorBoard tooling leaves `<module>(<id>).hlo_proto.pb` beside the xplanes: a capture whose
    metadata plane was stripped still gets its HLO from that file."""
    from xladiag.analyzer.analysis import analyze
    from xladiag.parsers import xspace_schema

    space = xspace_schema.XSpace()
    space.ParseFromString(only_xplane(GPU_SAMPLE).read_bytes())
    metadata = next(p for p in space.planes if p.name == b"/host:metadata")
    _, data = _protos(GPU_SAMPLE)["15"]
    metadata.event_metadata.clear()
    run = tmp_path / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    (run / "host.xplane.pb").write_bytes(space.SerializeToString())
    stripped = _ops_by_name(analyze(tmp_path))
    assert stripped.loc["cudnn-conv.1", "flops_source"] != "hlo"  # no HLO anywhere yet
    (run / "jit_forward_3d_conv(15).hlo_proto.pb").write_bytes(data)
    (run / "unrelated(99).hlo_proto.pb").write_bytes(b"\xff\xff")  # not traced: never read
    conv = _ops_by_name(analyze(tmp_path)).loc["cudnn-conv.1"]
    assert conv["flops"] == pytest.approx(2 * (32 * 60 * 104) * 16 * 5120) and conv["flops_source"] == "hlo"
