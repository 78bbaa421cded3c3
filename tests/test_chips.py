"""Chip catalog: loading, provenance, name matching on real trace strings, user files, dtype-aware peaks."""

from __future__ import annotations

import math

import pytest

from xladiag.analyzer.chip_catalog import Chip, ChipCatalogError, find_chip, load_catalog
from xladiag.analyzer.device_detection import chip_for_device

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


def test_catalog_has_every_listed_chip_with_sources(catalog):
    for key in ("v4", "v5e", "v5p", "v6e", "tpu7x", "a100", "h100", "h200", "b200", "mi300x", "cpu"):
        chip = catalog[key]
        assert chip.sources, key
        assert chip.peak_bf16_flops_per_s > 0 and chip.hbm_bytes_per_s > 0
        # every numeric field that is set says where it came from
        for name in ("peak_bf16_flops_per_s", "hbm_bytes_per_s", "per_hop_latency_s", "pcie_bytes_per_s"):
            assert getattr(chip, name) is not None, (key, name)
            assert chip.number_sources[name].startswith("chip table ("), (key, name)
    assert "placeholder" in catalog["cpu"].name.lower()


def test_table_numbers_match_hardware_reference(catalog):
    # hardware.md: v5e 1.97e14 / 8.1e11 / 4.5e10 x 4 links; v6e 9.18e14 / 1.638e12 / 9e10; MXU 128 vs 256
    assert catalog["v5e"].peak_bf16_flops_per_s == 1.97e14
    assert catalog["v5e"].ici_link_bytes_per_s_oneway == 4.5e10 and catalog["v5e"].ici_links == 4
    assert catalog["v6e"].hbm_bytes_per_s == 1.638e12 and catalog["v6e"].mxu_dim == 256
    assert catalog["v5p"].mxu_dim == 128 and catalog["v5p"].wraparound_axis_multiple == 4
    assert catalog["v5e"].wraparound_axis_multiple == 16
    # NVLink per direction: H100 4.5e11 = 18 links x 2.5e10, B200 9.0e11
    for key, per_direction in (("a100", 3.0e11), ("h100", 4.5e11), ("b200", 9.0e11)):
        chip = catalog[key]
        assert chip.ici_link_bytes_per_s_oneway * chip.ici_links == pytest.approx(per_direction)
    # the v5p HBM disagreement is recorded beside the number
    assert "2.46e12" in catalog["v5p"].number_sources["hbm_bytes_per_s"]


def test_ridge_point_v6e(catalog):
    # 9.18e14 / 1.638e12 = 560 FLOPs per byte
    assert catalog["v6e"].ridge_point() == pytest.approx(560.4, rel=1e-3)


def test_dtype_aware_peaks(catalog):
    h100 = catalog["h100"]
    assert h100.peak_flops_per_s("f8e4m3fn") == 1.979e15
    assert h100.peak_flops_per_s("f8e5m2") == 1.979e15
    assert h100.peak_flops_per_s("s8") == 1.979e15
    assert h100.peak_flops_per_s() == 9.89e14
    assert h100.peak_flops_per_s("f32") == 4.95e14
    assert catalog["v5e"].peak_flops_per_s("u8") == 3.94e14
    assert catalog["tpu7x"].peak_flops_per_s("f8e4m3fn") == 4.614e15
    # no fp8 peak on A100 / f32 on TPU: bf16 peak with a note
    peak, note = catalog["a100"].peak_for_dtype("f8e4m3fn")
    assert peak == 3.12e14 and "fp8" in note
    peak, note = catalog["v6e"].peak_for_dtype("f32")
    assert peak == 9.18e14 and "bf16" in note
    assert catalog["v6e"].peak_for_dtype("bf16") == (9.18e14, "")


@pytest.mark.parametrize(
    "text, key",
    [
        ("v6e", "v6e"),
        ("TPU v6e", "v6e"),
        ("tpu_v6e", "v6e"),
        ("TPU v6 Lite", "v6e"),  # what the real capture says
        ("TPU v6 lite", "v6e"),  # what the docs say
        ("TPU v5 lite", "v5e"),
        ("TPU v5", "v5p"),  # must not be taken for "TPU v5 lite"
        ("TPU v4", "v4"),
        ("TPU7x", "tpu7x"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("AMD Instinct MI300X", "mi300x"),
        ("MI300", "mi300x"),
        ("cpu", "cpu"),
    ],
)
def test_find_chip(catalog, text, key):
    chip = find_chip(text, catalog)
    assert chip is not None and chip.key == key


def test_find_chip_rejects_unknown_and_glued_tokens(catalog):
    assert find_chip("TPU v9 turbo", catalog) is None
    assert find_chip("NVIDIA GH200", catalog) is None  # 'GH200' is not an 'H200'
    assert find_chip("", catalog) is None


def test_chip_for_device_v6e_trace_peaks_win(catalog):
    chip, note = chip_for_device(V6E_PLANE_STATS["device_type_string"], None, V6E_PLANE_STATS, catalog)
    assert chip.key == "v6e"
    assert chip.peak_bf16_flops_per_s == 918e12
    assert chip.hbm_bytes_per_s == pytest.approx(1637.993152512e9)
    assert chip.number_sources["hbm_bytes_per_s"] == "trace"
    assert chip.number_sources["ici_link_bytes_per_s_oneway"].startswith("chip table")
    assert "TPU v6 Lite" in note and "trace" in note


def test_chip_for_device_mi300_by_vendor_and_core_count(catalog):
    chip, note = chip_for_device(None, "AMD", MI300_PLANE_STATS, catalog)
    assert chip.key == "mi300x"
    # hardware.md: the trace's memory_bandwidth (2.66e12) replaces the datasheet's 5.3e12
    assert chip.hbm_bytes_per_s == 2.6624e12
    assert chip.number_sources["hbm_bytes_per_s"] == "trace"
    assert chip.peak_bf16_flops_per_s == 1.307e15
    assert "304" in note


def test_chip_for_device_gpu_disambiguation_and_unknowns(catalog):
    chip, _ = chip_for_device(None, "NVIDIA", {"core_count": 132, "memory_size": 150e9}, catalog)
    assert chip.key == "h200"
    chip, note = chip_for_device(None, "NVIDIA", {"core_count": 132}, catalog)
    assert chip.key == "h100" and "H200" in note
    chip, note = chip_for_device(None, "AMD", {"core_count": 228}, catalog)  # MI300A: not in the table
    assert chip is None and "228" in note
    chip, note = chip_for_device("TPU v9 turbo", None, {}, catalog)
    assert chip is None and "TPU v9 turbo" in note
    chip, note = chip_for_device(None, None, {}, catalog)
    assert chip.key == "cpu" and "placeholder" in note


def test_with_trace_peaks_keeps_unset_numbers(catalog):
    v5e = catalog["v5e"]
    assert v5e.with_trace_peaks() is v5e
    updated = v5e.with_trace_peaks(peak_flops_per_s=2e14, hbm_bytes_per_s=math.nan)
    assert updated.peak_bf16_flops_per_s == 2e14 and updated.hbm_bytes_per_s == 8.1e11
    assert updated.number_sources["peak_bf16_flops_per_s"] == "trace"
    assert v5e.number_sources["peak_bf16_flops_per_s"].startswith("chip table")  # original untouched


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
    assert lab is not None and lab.ridge_point() == pytest.approx(100.0)


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
    ],
)
def test_bad_user_file_one_line_error(tmp_path, content, fragment):
    bad = tmp_path / "bad.toml"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(ChipCatalogError) as info:
        load_catalog(bad)
    message = str(info.value)
    assert fragment in message and str(bad) in message and "\n" not in message
    assert isinstance(info.value, ValueError)


def test_missing_user_file(tmp_path):
    with pytest.raises(ChipCatalogError, match="cannot read"):
        load_catalog(tmp_path / "nope.toml")
