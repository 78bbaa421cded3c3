"""GPU planes without a vendor stat, chips sold in variants, and the platform an HLO-only dump was compiled for."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.chips.catalog import load_catalog
from xladiag.analyzer.chips.detection import chip_for_device, choose_chip
from xladiag.analyzer.chips.dump_platform import default_chip, dump_platform

SAMPLES = Path(__file__).resolve().parents[1] / "sample_profiles"
# A V100-SXM2-16GB plane as a capture without a device_vendor stat records it.
V100_16_STATS = {"compute_cap_major": 7, "compute_cap_minor": 0, "core_count": 80, "memory_size": 16.9e9,
                 "memory_bandwidth": 898e9}
V100_16_TYPE = "GPU (compute capability 7.0), 80 cores"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_a_gpu_plane_without_vendor_is_told_by_its_counts_and_words(catalog):
    found = chip_for_device(V100_16_TYPE, None, V100_16_STATS, catalog)
    assert found.chip.key == "v100" and found.chip.vendor == "nvidia", found.note
    assert "no device_vendor stat" in found.note
    for text, stats, key in [("GPU sm_80", {"memory_size": 80e9}, "a100"),
                             ("GPU sm_80", {"memory_size": 40e9}, "a100-40"),
                             ("gfx942", {"memory_size": 192e9}, "mi300x"),
                             ("GPU, 304 CUs", {"compute_cap_major": 9, "compute_cap_minor": 4}, "mi300x"),
                             ("GPU, 132 SMs", {"compute_cap_major": 9, "compute_cap_minor": 0,
                                               "memory_size": 80e9}, "h100")]:
        assert chip_for_device(text, None, stats, catalog).chip.key == key, text
    # nothing that tells a vendor: still an unknown GPU, never the CPU
    assert chip_for_device("GPU", None, {"core_count": 7}, catalog).chip.name == "unknown GPU"


def test_a_chip_sold_in_variants_keeps_the_trace_memory(catalog):
    found = chip_for_device(V100_16_TYPE, None, V100_16_STATS, catalog)
    chip = found.chip
    assert chip.hbm_capacity_bytes == 16.9e9 and chip.hbm_bytes_per_s == 898e9 and not found.warnings
    assert "SXM2 16 GB" in chip.number_sources["hbm_capacity_bytes"]
    assert "the trace's own size" in found.note
    devices = pd.DataFrame({"device_type": [V100_16_TYPE], "vendor": [None], "plane_stats": [V100_16_STATS]})
    named = choose_chip(devices, "gpu", "v100", catalog)
    assert named.chip.hbm_capacity_bytes == 16.9e9
    # another variant named (A100 40 GB on an 80 GB trace): the trace's size, the named entry's compute
    a100 = {"device_vendor": "NVIDIA", "compute_cap_major": 8, "compute_cap_minor": 0, "core_count": 108,
            "memory_size": 85e9, "memory_bandwidth": 2.0e12}
    devices = pd.DataFrame({"device_type": ["NVIDIA"], "vendor": ["NVIDIA"], "plane_stats": [a100]})
    named = choose_chip(devices, "gpu", "a100-40", catalog)
    assert named.chip.key == "a100-40" and named.chip.hbm_capacity_bytes == 85e9
    assert "memory_size" in named.chip.number_sources["hbm_capacity_bytes"]
    # a chip without variants keeps the 1.5x rule: the MI300 trace's half bandwidth still loses
    mi300 = {"device_vendor": "AMD", "compute_cap_major": 9, "compute_cap_minor": 4, "core_count": 304,
             "memory_size": 206141652992, "memory_bandwidth": 2662400000000}
    assert chip_for_device("AMD", "AMD", mi300, catalog).chip.hbm_bytes_per_s == 5.3e12


@pytest.mark.parametrize("hints,platform,key", [
    (["module_0001.jit_f.sm_8.0_gpu_after_optimizations.txt"], "gpu", "a100"),
    (["module_0001.jit_f.sm_9.0_gpu_after_optimizations.txt"], "gpu", "h100"),
    (["module_16600.jit_train_step.sm_9.0a_gpu_after_optimizations.txt"], "gpu", "h100"),  # the H100 samples
    (["module_0001.jit_f.sm_7.0_gpu_after_optimizations.txt"], "gpu", "v100"),
    (["module_0001.jit_f.gfx942_gpu_after_optimizations.txt"], "gpu", "mi300x"),
    (["module_0001.jit_f.after_optimizations.txt", "__cublas$gemm"], "gpu", "h100"),
    (["module_0001.jit_f.after_optimizations.txt", "tpu_custom_call"], "tpu", "v6e"),
    (["module_0000.jit_f.cpu_after_optimizations.txt"], "cpu", None),
])
def test_dump_platform_and_its_default_chip(catalog, hints, platform, key):
    dump = dump_platform(hints)
    assert dump.platform == platform
    chip = default_chip(dump, catalog)
    assert (chip.key if chip else None) == key
    assert dump_platform(["module_0001.jit_f.after_optimizations.txt"]) is None


def _gpu_dump(tmp_path: Path, target: str) -> Path:
    src = SAMPLES / "hlo_rules_matmul_compute_bound" / "hlo" / "module_0000.jit_projection.cpu_after_optimizations.txt"
    folder = tmp_path / target
    folder.mkdir()
    shutil.copy(src, folder / f"module_0001.jit_projection.{target}_gpu_after_optimizations.txt")
    return folder


def test_hlo_only_gpu_dump_is_priced_on_its_gpu_and_warns_on_another_platform(tmp_path):
    folder = _gpu_dump(tmp_path, "sm_8.0")
    analysis = analyze(None, hlo_dir=str(folder))
    assert analysis.chip.key == "a100"
    assert any("compiled for a GPU of compute capability 8.0" in w for w in analysis.warnings)
    assert not any("generic CPU" in w for w in analysis.warnings)
    analysis = analyze(None, hlo_dir=str(folder), chip="v6e-8")
    assert analysis.chip.key == "v6e"
    assert any("compiled for an NVIDIA GPU" in w and "TPU v6e" in w for w in analysis.warnings)
    analysis = analyze(None, hlo_dir=str(folder), chip="a100")
    assert not any("compiled for" in w for w in analysis.warnings)
    analysis = analyze(None, hlo_dir=str(_gpu_dump(tmp_path, "gfx942")), chip="h100")
    assert any("compiled for an AMD GPU" in w for w in analysis.warnings)


def test_real_tpu_dump_without_chip_is_priced_as_a_tpu():
    analysis = analyze(None, hlo_dir=str(SAMPLES / "hlo_maxtext_llama3_8b_v6e4"), program="jit_train_step")
    assert analysis.chip.vendor == "google"
    assert any("compiled for a TPU" in w for w in analysis.warnings)


def test_hosts_with_different_chips_are_named_not_merged_silently(tmp_path):
    from builders.scenarios import HostsCapture, build_train_steps, loop_fusion, matmul_fusion
    from builders.xspace_encoder import TpuCaptureBuilder

    template = [matmul_fusion("fusion.1", 1024, 4096, 4096), loop_fusion("add_fusion", [1024, 4096])]
    builders = []
    for i, (device_type, tflops, gbps) in enumerate((("TPU v6 lite", 918.0, 1638.0), ("TPU v5 lite", 197.0, 819.0))):
        b = TpuCaptureBuilder(device_type=device_type, peak_tflops=tflops, peak_hbm_gbps=gbps, host=f"t1v-n-{i}")
        build_train_steps(template, builder=b, device_stagger_ps=250_000 + 1_000 * i)
        builders.append(b)
    HostsCapture(builders).write(tmp_path)
    analysis = analyze(tmp_path, workers=1)
    mixed = [w for w in analysis.warnings if "different chips" in w]
    assert len(mixed) == 1 and "TPU v6e" in mixed[0] and "TPU v5e" in mixed[0] and "--host" in mixed[0]
    assert "0.21x" in mixed[0]  # the v5e's 197 TF/s against the v6e's 918 that priced the merged ops
    one = analyze(tmp_path, workers=1, host="t1v-n-1")
    assert one.chip.key == "v5e" and not any("different chips" in w for w in one.warnings)


def test_real_h100_dump_alone_is_priced_on_an_h100():
    analysis = analyze(None, hlo_dir=str(SAMPLES / "gpu_h100_remat_pair" / "after" / "hlo"), program="jit_train_step")
    assert analysis.chip.key == "h100"
    assert any("compute capability 9.0" in w and "sm_9.0a_gpu" in w for w in analysis.warnings)
