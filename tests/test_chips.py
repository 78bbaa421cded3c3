"""Chip catalog and device detection: every number sourced, real device strings, slice names, the 1.5x rule."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from xladiag.analyzer.chips.catalog import (
    FACT_FIELDS,
    FLOAT_FIELDS,
    INT_FIELDS,
    Chip,
    ChipCatalogError,
    builtin_sources,
    load_catalog,
)
from xladiag.analyzer.chips.detection import TRACE_TABLE_LIMIT, chip_for_device, choose_chip
from xladiag.analyzer.chips.names import find_chip

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOML = Path(__file__).resolve().parents[1] / "analyzer" / "chips" / "chips.toml"
GiB = 2**30

# Device-plane stats exactly as the real captures in sample_profiles/ record them.
V6E_PLANE_STATS = {
    "device_type_string": "TPU v6 Lite",
    "peak_teraflops_per_second": 918.0,
    "peak_hbm_bw_gigabytes_per_second": 1637.993152512,
    "has_megacore": 0,
}
MI300_PLANE_STATS = {
    "device_vendor": "AMD",
    "clock_rate": 2100000,
    "core_count": 304,
    "memory_bandwidth": 2662400000000,
    "memory_size": 206141652992,
    "compute_cap_major": 9,
    "compute_cap_minor": 4,
}


@pytest.fixture(scope="module")
def catalog() -> dict[str, Chip]:
    return load_catalog()


def gpu_stats(vendor: str, major: int, minor: int, cores: int, memory_bytes: float, **extra) -> tuple[str, dict]:
    """A GPU device plane as capture.py describes it: the device string it builds and the plane's stats."""
    stats = {"device_vendor": vendor, "compute_cap_major": major, "compute_cap_minor": minor,
             "core_count": cores, "memory_size": memory_bytes, **extra}
    return f"{vendor} (compute capability {major}.{minor}), {cores} cores", stats


# ---------------------------------------------------------------- sources


def test_every_number_of_every_chip_cites_one_public_source_or_a_stated_assumption():
    doc = tomllib.loads(TOML.read_text(encoding="utf-8"))
    sources = doc["source"]
    for sid, src in sources.items():
        assert src.get("title"), sid
        assert src.get("url", "").startswith("https://") or (src.get("kind") == "assumption"), sid
    cited_fields = set(FLOAT_FIELDS) | set(INT_FIELDS) | set(FACT_FIELDS)
    used = set()
    for key, entry in doc["chip"].items():
        cite = entry.get("cite", {})
        listed = [f for fields in cite.values() for f in fields]
        assert len(listed) == len(set(listed)), (key, "a field cited twice")
        set_fields = {f for f in entry if f in cited_fields}
        assert set_fields == set(listed), (key, set_fields ^ set(listed))
        assert set(cite) <= set(sources), key
        used |= set(cite)
    assert used == set(sources), set(sources) - used  # no source listed but never cited
    for key, chip in load_catalog().items():
        for f, text in chip.number_sources.items():
            assert text.startswith("chip table (") and "https://" not in text, (key, f, text)


def test_catalog_has_the_chips_users_run(catalog):
    wanted = ("v2 v3 v4 v4lite v5e v5p v6e tpu7x v100 a10g l4 l40s a100-40 a100 h100 h100-pcie h200 gh200 b200 "
              "gb200 mi250x mi300x mi325x mi355x cpu").split()
    assert set(wanted) <= set(catalog)
    for key in wanted:
        chip = catalog[key]
        assert chip.peak_bf16_flops_per_s > 0 and chip.hbm_bytes_per_s > 0 and chip.hbm_capacity_bytes > 0, key
    for key in wanted[:-1]:
        if catalog[key].vendor in ("nvidia", "amd"):
            assert catalog[key].dcn_bytes_per_s and catalog[key].devices_per_node, key  # NIC per GPU, GPUs per node


def test_numbers_fixed_by_the_numbers_issue(catalog):
    assert catalog["v6e"].pcie_bytes_per_s == 3.2e10  # the book; the v6e sample's host copies ran at ~29 GB/s
    assert catalog["v5e"].dcn_bytes_per_s == pytest.approx(3.1e9, rel=0.02)  # 2 x 100 Gb/s per 8-chip host
    assert catalog["mi300x"].hbm_bytes_per_s == 5.3e12
    # capacities the sources give in GiB
    assert catalog["v6e"].hbm_capacity_bytes == 32 * GiB
    assert catalog["tpu7x"].hbm_capacity_bytes == 192 * GiB
    assert catalog["v5p"].hbm_capacity_bytes == 95 * GiB
    assert catalog["v4"].hbm_capacity_bytes == 32 * GiB
    # NVLink per direction: H100 4.5e11 = 18 links x 2.5e10, B200 9.0e11
    for key, per_direction in (("a100", 3.0e11), ("h100", 4.5e11), ("b200", 9.0e11), ("v100", 1.5e11)):
        chip = catalog[key]
        assert chip.ici_link_bytes_per_s_oneway * chip.ici_links == pytest.approx(per_direction)


def test_wraparound_on_full_cubes_and_full_axes_only(catalog):
    v5p, v4, v6e = catalog["v5p"], catalog["v4"], catalog["v6e"]
    assert not v5p.has_wraparound(4, (2, 2, 4))  # a 2x2x4 has no wraparound
    assert v5p.has_wraparound(4, (4, 4, 4)) and v4.has_wraparound(8, (4, 4, 8))
    assert not v4.has_wraparound(2, (2, 4, 4))
    assert v6e.has_wraparound(16) and not v6e.has_wraparound(8) and not v6e.has_wraparound(4)
    assert catalog["h100"].has_wraparound(8)  # a switch is as good as a ring
    # the slice named by the user carries its shape
    assert not find_chip("v5p-2x2x4", catalog).has_wraparound(4)
    assert find_chip("v5p-4x4x4", catalog).has_wraparound(4)


def test_dtype_aware_peaks(catalog):
    h100 = catalog["h100"]
    assert h100.peak_flops_per_s("f8e4m3fn") == h100.peak_flops_per_s("s8") == 1.979e15
    assert h100.peak_flops_per_s("f32") == 4.95e14 and h100.peak_flops_per_s("f16") == 9.89e14
    v100 = catalog["v100"]  # tensor cores for f16 only: bf16 runs on the CUDA cores
    assert v100.peak_flops_per_s("f16") == 1.25e14 and v100.peak_flops_per_s("bf16") == 1.57e13
    peak, note = catalog["a100"].peak_for_dtype("f8e4m3fn")
    assert peak == 3.12e14 and "fp8" in note
    assert catalog["v6e"].peak_for_dtype("bf16") == (9.18e14, "")


# ---------------------------------------------------------------- names and slices


@pytest.mark.parametrize(
    "text, key",
    [
        ("v6e", "v6e"), ("TPU v6e", "v6e"), ("tpu_v6e", "v6e"), ("TPU v6 Lite", "v6e"), ("TPU v5 lite", "v5e"),
        ("TPU v5", "v5p"), ("TPU v4", "v4"), ("TPU v4 lite", "v4lite"), ("TPU v3", "v3"), ("TPU v2", "v2"),
        ("TPU7x", "tpu7x"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"), ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA GB200", "gb200"),
        ("NVIDIA B200", "b200"), ("NVIDIA A100-SXM4-40GB", "a100-40"), ("NVIDIA A100-SXM4-80GB", "a100"),
        ("Tesla V100-SXM2-32GB", "v100"), ("NVIDIA A10G", "a10g"), ("NVIDIA L4", "l4"), ("NVIDIA L40S", "l40s"),
        ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI325X", "mi325x"), ("AMD Instinct MI355X", "mi355x"),
        ("AMD Instinct MI250X", "mi250x"), ("cpu", "cpu"),
    ],
)
def test_find_chip(catalog, text, key):
    chip = find_chip(text, catalog)
    assert chip is not None and chip.key == key


@pytest.mark.parametrize(
    "name, key, chips, shape",
    [
        ("v6e-8", "v6e", 8, None),            # v6e counts chips
        ("v5litepod-16", "v5e", 16, None),    # so does v5e
        ("v5p-128", "v5p", 64, None),         # v5p counts TensorCores: 2 per chip
        ("tpu7x-128", "tpu7x", 64, None),     # so does TPU7x (4x4x4)
        ("v4-8", "v4", 4, None),
        ("v3-8", "v3", 4, None),
        ("v5p-4x4x4", "v5p", 64, (4, 4, 4)),
        ("v6e-16x16", "v6e", 256, (16, 16)),
    ],
)
def test_slice_names(catalog, name, key, chips, shape):
    chip = find_chip(name, catalog)
    assert chip.key == key and chip.slice_chips == chips and chip.slice_shape == shape


def test_bad_slice_names_and_unknown_names(catalog):
    for name in ("v5p-127", "v6e-4x4x4", "v5p-0", "TPU v9 turbo", "", "NVIDIA GH100"):
        assert find_chip(name, catalog) is None, name


# ---------------------------------------------------------------- detection


@pytest.mark.parametrize(
    "vendor, cc, cores, memory, key",
    [
        ("AMD", (9, 5), 256, 288 * GiB, "mi355x"),       # the MI355X capture: 'AMD (compute capability 9.5), 256 cores'
        ("AMD", (9, 4), 304, 192 * GiB, "mi300x"),
        ("AMD", (9, 4), 304, 256 * GiB, "mi325x"),       # same CUs as MI300X: told apart by memory
        ("AMD", (9, 0), 110, 64 * GiB, "mi250x"),        # one GCD = one device
        ("NVIDIA", (7, 0), 80, 32 * GiB, "v100"),        # the V100 capture
        ("NVIDIA", (8, 0), 108, 40 * GiB, "a100-40"),
        ("NVIDIA", (8, 0), 108, 80 * GiB, "a100"),
        ("NVIDIA", (8, 6), 80, 24 * GiB, "a10g"),
        ("NVIDIA", (8, 9), 58, 24 * GiB, "l4"),
        ("NVIDIA", (8, 9), 142, 48 * GiB, "l40s"),
        ("NVIDIA", (9, 0), 132, 80 * GiB, "h100"),
        ("NVIDIA", (9, 0), 114, 80 * GiB, "h100-pcie"),   # PCIe by SM count
        ("NVIDIA", (9, 0), 132, 141e9, "h200"),
        ("NVIDIA", (9, 0), 132, 96 * GiB, "gh200"),
        ("NVIDIA", (10, 0), 148, 180e9, "b200"),
    ],
)
def test_gpu_device_strings(catalog, vendor, cc, cores, memory, key):
    device_type, stats = gpu_stats(vendor, *cc, cores, memory)
    found = chip_for_device(device_type, vendor, stats, catalog)
    assert found.chip.key == key, found.note
    assert found.chip.vendor == vendor.lower() and "placeholder" not in found.note


def test_per_device_numbers_for_chips_seen_as_several_devices(catalog):
    # roofline.md worked answer 1: a TPU v2 core (one device) runs at 2.3e13 FLOP/s, half the chip
    assert catalog["v2"].per_device().peak_bf16_flops_per_s == pytest.approx(2.3e13)
    assert catalog["v5p"].per_device() is catalog["v5p"]  # megacore: one device per chip
    device_type, stats = gpu_stats("AMD", 9, 0, 110, 64 * GiB)
    gcd = chip_for_device(device_type, "AMD", stats, catalog).chip
    assert gcd.peak_bf16_flops_per_s == pytest.approx(3.83e14 / 2)  # one GCD is half an MI250X
    assert gcd.hbm_bytes_per_s == pytest.approx(3.2e12 / 2)
    # A real TPU7x plane reports per-TensorCore peaks (1028.75 TF/s, 3686 GB/s): half the chip's 2307 / 7380,
    # within the 1.5x limit of the per-device table, so the trace wins.
    stats = {"device_type_string": "TPU7x", "peak_teraflops_per_second": 1028.75,
             "peak_hbm_bw_gigabytes_per_second": 3686.1556817920005}
    found = chip_for_device("TPU7x", "Google", stats, catalog)
    assert found.chip.key == "tpu7x" and not found.warnings
    assert found.chip.peak_bf16_flops_per_s == 1028.75e12
    assert found.chip.number_sources["peak_bf16_flops_per_s"] == "trace"
    assert found.chip.hbm_capacity_bytes == 96 * GiB  # half of 192 GiB
    assert "÷ 2" in found.chip.number_sources["hbm_capacity_bytes"]


def test_trace_peaks_win_within_the_limit(catalog):
    found = chip_for_device("TPU v6 Lite", "Google", V6E_PLANE_STATS, catalog)
    chip = found.chip
    assert chip.key == "v6e" and not found.warnings
    assert chip.peak_bf16_flops_per_s == 918e12
    assert chip.hbm_bytes_per_s == pytest.approx(1637.993152512e9)
    assert chip.number_sources["hbm_bytes_per_s"] == "trace"
    assert chip.number_sources["ici_link_bytes_per_s_oneway"].startswith("chip table (")


def test_table_wins_beyond_the_limit_and_warns(catalog):
    found = chip_for_device("AMD (compute capability 9.4), 304 cores", "AMD", MI300_PLANE_STATS, catalog)
    chip = found.chip
    assert chip.key == "mi300x"
    # the trace's memory_bandwidth (2.66e12) is 2.0x below the datasheet: more than 1.5x, the table wins
    assert 5.3e12 / 2.6624e12 > TRACE_TABLE_LIMIT
    assert chip.hbm_bytes_per_s == 5.3e12
    assert "2.0x" in chip.number_sources["hbm_bytes_per_s"]
    assert len(found.warnings) == 1 and "memory_bandwidth" in found.warnings[0]
    # memory_size (192 GiB) is within 1.5x of the datasheet's 192 GB: the trace wins
    assert chip.hbm_capacity_bytes == 206141652992 and chip.number_sources["hbm_capacity_bytes"] == "trace"
    # the other direction: a trace peak 2x above the table loses too
    found = chip_for_device("TPU v6 Lite", "Google", {**V6E_PLANE_STATS, "peak_teraflops_per_second": 1836.0},
                            catalog)
    assert found.chip.peak_bf16_flops_per_s == 9.18e14 and found.warnings


def test_unknown_accelerators_keep_the_trace_numbers_and_say_what_is_missing(catalog):
    device_type, stats = gpu_stats("AMD", 9, 5, 228, 128 * GiB, memory_bandwidth=4e12)
    found = chip_for_device(device_type, "AMD", stats, catalog)
    chip = found.chip
    assert chip.name == "unknown AMD GPU" and chip.vendor == "amd"
    assert chip.hbm_bytes_per_s == 4e12 and chip.number_sources["hbm_bytes_per_s"] == "trace"
    assert math.isnan(chip.peak_bf16_flops_per_s)
    assert "missing: peak FLOP/s" in found.note and found.warnings
    device_type, stats = gpu_stats("NVIDIA", 12, 0, 170, 32 * GiB)
    assert chip_for_device(device_type, "NVIDIA", stats, catalog).chip.name == "unknown NVIDIA GPU"
    # an unknown TPU keeps its trace peaks even far from any table
    found = chip_for_device("TPU v9 turbo", "Google", {"peak_teraflops_per_second": 5000.0,
                                                       "peak_hbm_bw_gigabytes_per_second": 9000.0}, catalog)
    assert found.chip.name == "unknown TPU" and found.chip.peak_bf16_flops_per_s == 5e15
    assert "missing: interconnect bandwidth" in found.note
    assert chip_for_device(None, None, {}, catalog).chip.key == "cpu"


def test_choose_chip_with_a_slice_name_keeps_trace_peaks_of_the_same_chip(catalog):
    import pandas as pd

    devices = pd.DataFrame({"device_type": ["TPU v6 Lite"], "vendor": ["Google"], "plane_stats": [V6E_PLANE_STATS]})
    found = choose_chip(devices, "tpu", "v6e-8", catalog)
    assert found.chip.slice_chips == 8 and found.chip.number_sources["hbm_bytes_per_s"] == "trace"
    found = choose_chip(devices.iloc[:0], "hlo", "tpu7x-128", catalog)
    assert found.chip.slice_chips == 64 and found.chip.peak_bf16_flops_per_s == pytest.approx(2.307e15 / 2)
    with pytest.raises(ChipCatalogError, match="unknown chip"):
        choose_chip(devices, "tpu", "tpu v99", catalog)
    with pytest.raises(ChipCatalogError, match="count TensorCores .2 per chip.: 127 is not a whole number"):
        choose_chip(devices, "tpu", "v5p-127", catalog)
    with pytest.raises(ChipCatalogError, match="3-D: give the shape as NxNxN"):
        choose_chip(devices, "tpu", "v5p-4x4", catalog)


def test_real_mi300_capture_uses_the_datasheet_bandwidth_and_warns():
    from xladiag.analyzer.analysis import analyze

    sample = Path(__file__).resolve().parents[1] / "sample_profiles" / "gpu_mi300_jax_conv"
    analysis = analyze(sample)
    assert analysis.chip.key == "mi300x" and analysis.chip.hbm_bytes_per_s == 5.3e12
    assert any("memory_bandwidth" in w for w in analysis.warnings)


# ---------------------------------------------------------------- user files


def test_user_file_overrides_and_adds(tmp_path):
    user = tmp_path / "mychips.toml"
    user.write_text(
        "[chip.v6e]\n"
        "hbm_bytes_per_s = 1.5e12\n"
        "[chip.v6e.field_sources]\n"
        'hbm_bytes_per_s = "measured with a stream benchmark"\n'
        "[chip.mychip]\n"
        'name = "Lab accelerator"\n'
        'aliases = ["lab1"]\n'
        "peak_bf16_flops_per_s = 1e14\n"
        "hbm_bytes_per_s = 1e12\n",
        encoding="utf-8",
    )
    catalog = load_catalog(user)
    v6e = catalog["v6e"]
    assert v6e.hbm_bytes_per_s == 1.5e12
    assert v6e.number_sources["hbm_bytes_per_s"].startswith("user file (")
    assert "stream benchmark" in v6e.number_sources["hbm_bytes_per_s"]
    assert v6e.peak_bf16_flops_per_s == 9.18e14  # untouched fields keep the table
    assert v6e.number_sources["peak_bf16_flops_per_s"].startswith("chip table")
    lab = find_chip("LAB1", catalog)
    assert lab is not None and lab.peak_flops_per_s() / lab.hbm_bytes_per_s == pytest.approx(100.0)


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("[chip.v6e\nhbm = 1", "invalid TOML"),
        ('[chip.v6e]\nhbm_bytes_per_s = "fast"\n', "'hbm_bytes_per_s' must be a finite number > 0"),
        ("[chip.v6e]\nhbm_bytes_per_s = 0.0\n", "'hbm_bytes_per_s' must be a finite number > 0"),
        ("[chip.v6e]\npeak_bf16_flops_per_s = inf\n", "must be a finite number > 0"),
        ("[chip.v6e]\nhbm_bandwidth = 1e12\n", "unknown field 'hbm_bandwidth'"),
        ('[chip.new]\nname = "x"\n', "missing peak_bf16_flops_per_s, hbm_bytes_per_s"),
        ("[chips.v6e]\nhbm_bytes_per_s = 1e12\n", "unexpected top-level key"),
        ('[chip.v6e]\ninterconnect = "mesh"\n', "one of torus, switch, none"),
        ('[chip.v6e]\nwraparound = "sometimes"\n', "one of axis, full_cube, none"),
        ('[chip.v6e.cite]\nnowhere = ["hbm_bytes_per_s"]\n', "unknown source 'nowhere'"),
    ],
)
def test_bad_user_file_one_line_error(tmp_path, content, fragment):
    bad = tmp_path / "bad.toml"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(ChipCatalogError) as info:
        load_catalog(bad)
    message = str(info.value)
    assert fragment in message and str(bad) in message and "\n" not in message


def test_missing_user_file(tmp_path):
    with pytest.raises(ChipCatalogError, match="cannot read"):
        load_catalog(tmp_path / "nope.toml")


def test_sources_table_is_exposed():
    assert builtin_sources()["gcp-v6e"]["url"].startswith("https://cloud.google.com/")


# ---------------------------------------------------------------- end to end on built device planes


def _analyze_planes(tmp_path, device_type: str, peak_tflops: float, peak_hbm_gbps: float):
    from builders import scenarios, xspace_encoder
    from xladiag.analyzer.analysis import analyze

    template = [scenarios.matmul_fusion("fusion.1", 2048, 2048, 2048), scenarios.loop_fusion("fusion.2", [2048, 2048])]
    builder = xspace_encoder.TpuCaptureBuilder(device_type=device_type, peak_tflops=peak_tflops,
                                               peak_hbm_gbps=peak_hbm_gbps)
    builder, _ = scenarios.build_train_steps(template, builder=builder)
    builder.write(tmp_path)
    return analyze(tmp_path)


def test_tpu7x_planes_are_priced_per_tensorcore(tmp_path):
    # the peaks a real TPU7x plane reports: one TensorCore, about half the chip's 2307 TF/s and 7380 GB/s
    analysis = _analyze_planes(tmp_path, "TPU7x", 1028.75, 3686.1556817920005)
    chip = analysis.chip
    assert chip.key == "tpu7x" and chip.peak_bf16_flops_per_s == 1028.75e12
    assert chip.hbm_bytes_per_s == pytest.approx(3686.1556817920005e9)
    assert chip.hbm_capacity_bytes == 96 * GiB and chip.peak_fp8_flops_per_s == pytest.approx(4.614e15 / 2)
    assert not any("1.5x" in w for w in analysis.warnings)


def test_a_trace_peak_far_from_the_table_loses_with_a_warning(tmp_path):
    analysis = _analyze_planes(tmp_path, "TPU v6 Lite", 2 * 918.0, 1637.993152512)
    assert analysis.chip.peak_bf16_flops_per_s == 9.18e14
    assert analysis.chip.hbm_bytes_per_s == pytest.approx(1637.993152512e9)  # within the limit: the trace's
    assert any("peak_teraflops_per_second" in w and "using the table" in w for w in analysis.warnings)


def test_real_gpu_capture_of_an_unknown_amd_chip_is_never_the_cpu(monkeypatch):
    import json

    import xladiag.analyzer.chips.catalog as chip_catalog
    from xladiag import api

    full = chip_catalog.load_catalog

    def without_cdna3(extra_file=None):  # as if the catalog predated the MI300 series
        return {k: c for k, c in full(extra_file).items() if k not in ("mi300x", "mi325x")}

    monkeypatch.setattr(chip_catalog, "load_catalog", without_cdna3)
    report = api.diagnose(Path(__file__).resolve().parents[1] / "sample_profiles" / "gpu_mi300_jax_conv")
    data = json.loads(report.to_json())
    assert data["chip"]["name"] == "unknown AMD GPU" and data["chip"]["vendor"] == "amd"
    assert data["chip"]["hbm_bytes_per_s"] == 2662400000000  # the trace's own number, kept for an unknown chip
    assert "missing: peak FLOP/s" in data["chip"]["detected_as"]
    assert any(w.startswith("unknown chip") for w in data["warnings"])
    assert "placeholder" not in report.to_markdown()
