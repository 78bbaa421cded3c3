"""Collectives priced on the real mesh: the worked answers of issue 10, each against hand arithmetic here.

Numbers: TPU v6e / v5p ICI 9e10 B/s one way per link (W = 1.8e11 both ways on a full ring), H100 NVLink
4.5e11 B/s per GPU per direction, one 400 Gb/s (5e10 B/s) NIC per H100, 8 GPUs per node (hardware.md and
the chip catalog). A group's axes come from the topology (slice name, --topology, or the device count).
"""

from __future__ import annotations

import pytest

from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.chips.catalog import load_catalog
from xladiag.analyzer.chips.names import find_chip
from xladiag.analyzer.models.collectives import predict_collective
from xladiag.analyzer.models.topology import (
    collective_placement,
    default_slice_shape,
    parse_topology,
    resolve_topology,
)
from xladiag.errors import UsageError

REL = 0.02  # the tolerance for the worked answers
GB = 1e9
W1_TPU = 9e10  # v6e / v5p ICI, one way, one link
W_RING = 2 * W1_TPU  # a full ring: both directions
NVLINK_H100 = 18 * 2.5e10  # 4.5e11 per GPU per direction
NIC_H100 = 400e9 / 8  # 400 Gb/s per GPU


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _price(kind, v, chip, num_devices, groups=None, topology=None):
    place, model = collective_placement(groups, chip, num_devices, topology)
    return predict_collective(kind, v, place.group_size, chip, placement=place), model


def test_v6e_256_all_reduce_runs_on_both_axes_of_the_16x16_torus(catalog):
    chip = find_chip("v6e-256", catalog)
    pred, model = _price("all-reduce", GB, chip, 256)
    # The book: all-reduce = 2 x all-gather; over k = 2 full rings T = 2 V / (W k) = 2e9 / 3.6e11 = 5.56 ms.
    assert pred.predicted_s == pytest.approx(2 * GB / (W_RING * 2), rel=REL)
    assert pred.predicted_s == pytest.approx(5.6e-3, rel=REL)
    assert "16x16 (slice name)" in model and "2 axes 16 (wraparound) x 16 (wraparound)" in pred.note
    # One ring of 256 (the old model) would be twice as long: 11.1 ms.
    one_ring = predict_collective("all-reduce", GB, 256, chip, axis_sizes=[256], wraparound=True)
    assert one_ring.predicted_s == pytest.approx(2 * GB / W_RING, rel=REL)


def test_v5p_128_is_64_chips_4x4x4_and_gathers_over_three_axes(catalog):
    chip = find_chip("v5p-128", catalog)  # v5p names count TensorCores: 128 cores = 64 chips
    topo = resolve_topology(chip)
    assert topo.shape == (4, 4, 4) and topo.source == "slice name"
    pred, _ = _price("all-gather", GB, chip, 64)
    assert pred.predicted_s == pytest.approx(GB / (W_RING * 3), rel=REL)  # 1e9 / 5.4e11 = 1.85 ms
    assert pred.predicted_s == pytest.approx(1.85e-3, rel=REL)
    assert pred.bidirectional and pred.num_axes == 3


def test_v5p_2x2x4_has_no_wraparound(catalog):
    chip = find_chip("v5p", catalog)
    pred, _ = _price("all-gather", GB, chip, 16, topology="2x2x4")
    assert not pred.bidirectional and "wraparound" not in pred.note.replace("no wraparound", "")


def test_h100_64_gpus_in_8_nodes_all_reduce_is_set_by_the_network(catalog):
    chip = catalog["h100"]
    pred, _ = _price("all-reduce", GB, chip, 64)
    # Ring all-reduce 2 (N-1)/N V; its node-boundary edges cross NICs, 8 GPUs of the group per node spread
    # NCCL's channels over their 8 NICs: min(NVLink 4.5e11, 8 x 5e10 = 4e11) per GPU -> 4.92 ms.
    w = min(NVLINK_H100, 8 * NIC_H100)
    assert pred.predicted_s == pytest.approx(2 * 63 / 64 * GB / w, rel=REL)
    assert pred.network == "nic" and "8 nodes x 8 GPUs" in pred.note
    # A group with one GPU per node (data parallel across nodes) has one NIC each: 2 (7/8) V / 5e10 = 35 ms,
    # ~ the 39 ms, which takes the whole 64-GPU ring through one NIC per node.
    one_per_node = "{" + ",".join(str(8 * i) for i in range(8)) + "}"
    pred8, _ = _price("all-reduce", GB, chip, 64, "{" + one_per_node + "}")
    assert pred8.predicted_s == pytest.approx(2 * 7 / 8 * GB / NIC_H100, rel=REL)
    # Within one node: NVLink, as before (2 (7/8) V / 4.5e11 = 3.9 ms).
    node, _ = _price("all-reduce", GB, chip, 8)
    assert node.network == "nvlink" and node.predicted_s == pytest.approx(2 * 7 / 8 * GB / NVLINK_H100, rel=REL)


def test_groups_of_16_on_a_v6e_4x4_are_not_a_wraparound_ring(catalog):
    chip = catalog["v6e"]
    for topology, groups in (("4x4", None), (None, "[1,16]<=[16]")):  # --topology, or assumed from 16 chips
        pred, model = _price("all-gather", GB, chip, 16, groups, topology)
        assert "4x4" in model and not pred.bidirectional
        assert "(wraparound)" not in pred.note
        # Two lines of 4: a chip at a corner takes the 15/16 V it lacks over one inbound link per axis.
        assert pred.predicted_s == pytest.approx(15 / 16 * GB / (2 * W1_TPU), rel=REL)
    # A full 16-chip axis of a 16x16 slice is a ring: V / W.
    row, _ = _price("all-gather", GB, find_chip("v6e-256", catalog), 256, "[16,16]<=[256]")
    assert row.bidirectional and row.predicted_s == pytest.approx(GB / W_RING, rel=REL)


def test_groups_across_slices_use_dcn(catalog):
    chip = catalog["v6e"]
    # 512 devices on 16x16 slices: groups {i, i+256} join the two slices over DCN (1.25e10 B/s per chip).
    pred, model = _price("all-reduce", GB, chip, 512, "[256,2]<=[2,256]T(1,0)", "16x16")
    assert pred.network == "dcn" and "DCN across 2 slices" in pred.note and "16x16 (--topology)" in model
    # A ring of 2 slices, one chip of the group in each: 2 x (2-1)/2 x V / 1.25e10 = 80 ms.
    assert pred.predicted_s == pytest.approx(2 * (1 / 2) * GB / 1.25e10, rel=REL)


def _hlo_analysis(tmp_path, body: str, chip: str, topology: str | None = None):
    text = ("HloModule jit_collective, entry_computation_layout={()->()}\n\n"
            "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
            "  ROOT %s = f32[] add(f32[] %a, f32[] %b)\n}\n\n" + body)
    (tmp_path / "module_0001.jit_collective.sm_9.0_gpu_after_optimizations.txt").write_text(text)
    return analyze(hlo_dir=tmp_path, chip=chip, topology=topology)


def test_all_to_all_is_priced_on_the_global_array(tmp_path):
    # 8 A100s in one node, each holding f32[8,1048576] (32 MiB): the global array is 8x that; each GPU sends
    # 7/8 of its own buffer over NVLink (12 x 2.5e10 = 3e11 B/s): 7/8 x 32 MiB / 3e11 = 98 us.
    body = ("ENTRY %main (p: f32[8,1048576]) -> f32[8,1048576] {\n  %p = f32[8,1048576] parameter(0)\n"
            "  ROOT %a2a = f32[8,1048576] all-to-all(f32[8,1048576] %p), replica_groups={{0,1,2,3,4,5,6,7}}, "
            "dimensions={0}\n}\n")
    ops = _hlo_analysis(tmp_path, body, "a100").ops.set_index("op_name")
    buffer = 8 * 1048576 * 4
    assert ops.loc["a2a", "collective_bytes"] == 8 * buffer
    assert ops.loc["a2a", "predicted_s"] == pytest.approx(7 / 8 * buffer / 3e11, rel=REL)


def test_variadic_all_reduce_moves_the_sum_of_its_members(tmp_path):
    # Four f32[1048576] (4 MiB each) reduced in one combined all-reduce over 4 v6e chips (a 2x2 slice,
    # lines of 2 without wraparound): 16 MiB in total, 2 x max(V / (4 W1), (3/4) V / (2 W1)) = 0.75 V / W1.
    shapes = ", ".join(["f32[1048576]"] * 4)
    params = "\n".join(f"  %p{i} = f32[1048576] parameter({i})" for i in range(4))
    args = ", ".join(f"f32[1048576] %p{i}" for i in range(4))
    body = (f"ENTRY %main ({', '.join(f'p{i}: f32[1048576]' for i in range(4))}) -> ({shapes}) {{\n{params}\n"
            f"  ROOT %ar = ({shapes}) all-reduce({args}), replica_groups={{{{0,1,2,3}}}}, to_apply=%add\n}}\n")
    analysis = _hlo_analysis(tmp_path, body, "v6e", topology="2x2")
    ops = analysis.ops.set_index("op_name")
    v = 4 * 1048576 * 4
    assert ops.loc["ar", "collective_bytes"] == v
    assert ops.loc["ar", "predicted_s"] == pytest.approx(0.75 * v / W1_TPU, rel=REL)
    assert "topology 2x2 (--topology)" in ops.loc["ar", "collective_model"]


def test_topology_option_is_checked(tmp_path):
    assert parse_topology("16x16") == (16, 16) and parse_topology("4x4x4") == (4, 4, 4)
    for bad in ("16by16", "0x4", "4x4x4x4", ""):
        with pytest.raises(ValueError, match="--topology"):
            parse_topology(bad)
    with pytest.raises(UsageError):
        analyze(hlo_dir=tmp_path, chip="v6e", topology="sixteen")


def test_default_slice_shapes():
    assert [default_slice_shape(c, 2) for c in (4, 8, 16, 32, 256)] == [(2, 2), (2, 4), (4, 4), (4, 8), (16, 16)]
    assert [default_slice_shape(c, 3) for c in (8, 16, 32, 64)] == [(2, 2, 2), (2, 2, 4), (2, 4, 4), (4, 4, 4)]


def test_mesh_form_groups_name_their_axes_and_tensorcores_of_one_chip_still_cost_time(catalog):
    chip = find_chip("v6e-8", catalog)  # 2x4
    # mesh['x'=2,'y'=4] {'y'}: groups of 4 along y, row-major on the 2x4 slice: one line of 4, no wraparound.
    pred, model = _price("all-gather", GB, chip, 8, "mesh['x'=2,'y'=4] {'y'}")
    assert "group spans mesh axes y=4" in model and "2x4 (slice name)" in model
    assert pred.predicted_s == pytest.approx(3 / 4 * GB / W1_TPU, rel=REL)
    # TPU7x: one device per TensorCore, two per chip: a group of the two cores of chip 0 is not free.
    tpu7x = catalog["tpu7x"]
    both, _ = _price("all-reduce", GB, tpu7x, 8, "{{0,1},{2,3},{4,5},{6,7}}")
    assert both.predicted_s > 0 and "share a chip" in both.note


def test_real_v6e_all_reduce_says_how_it_was_priced():
    """The v6e capture's all-reduce of f32[5,1024,1024,256] (5.37 GB), groups [4,2]<=[2,4]T(1,0) over 8 chips:
    a v6e-8 is 2x4, a group {i, i+4} is a line of 2 along the first axis (no wraparound): 2 x V/2 / W1."""
    from conftest import TPU_SAMPLE, diagnosed

    report = diagnosed(TPU_SAMPLE)
    op = next(o for o in report.to_dict()["ops"] if o["collective_kind"] == "all-reduce")
    v = 5 * 1024 * 1024 * 256 * 4
    assert op["collective_bytes"] == v and op["replica_group_size"] == 2
    assert op["predicted_s"] == pytest.approx(2 * (v / 2) / W1_TPU, rel=REL)
    assert op["collective_model"].startswith("topology 2x4 (assumed from 8 chips); group spans mesh axes iota_0=2")
    assert f'title="{op["collective_model"]}"' in report.render("html")
