"""What bounds a collective on each platform (ICI, NVLink, Infinity Fabric, PCIe, the network), DGX-1 V100
groups priced by the NVLinks they share, and findings that say when an assumed network figure priced them."""

from __future__ import annotations

import pytest

from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.chips.catalog import load_catalog
from xladiag.analyzer.models.collectives import predict_collective
from xladiag.analyzer.models.topology import collective_placement
from xladiag.rules.registry import run_rules

GB = 1e9
LINK_V100 = 2.5e10  # one NVLink 2, one direction


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _price(kind, v, chip, num_devices, groups=None):
    place, _ = collective_placement(groups, chip, num_devices)
    return predict_collective(kind, v, place.group_size, chip, placement=place), place


@pytest.mark.parametrize("key,devices,groups,bound", [
    ("v6e", 8, None, "ici"),
    ("h100", 8, None, "nvlink"),
    ("mi300x", 8, None, "xgmi"),
    ("a10g", 8, None, "pcie"),          # no NVLink: PCIe between the GPUs
    ("h100", 16, "{{0,8}}", "network"),  # one GPU per node: the NIC
    ("h100", 64, None, "network"),       # 8 per node x 8 nodes: 8 NICs (4e11) below NVLink (4.5e11)
])
def test_bandwidth_bound_collectives_name_their_link(catalog, key, devices, groups, bound):
    pred, _ = _price("all-gather", GB, catalog[key], devices, groups)
    assert pred.bound_by == bound, pred.note
    tiny, _ = _price("all-gather", 64.0, catalog[key], devices, groups)
    assert tiny.bound_by == "latency"


@pytest.mark.parametrize("groups,links", [
    ("{{0,1}}", 1), ("{{0,4}}", 2), ("{{0,1,2,3}}", 4), ("{{0,1,2,3,4,5,6,7}}", 6), ("{{4,5,6,7}}", 4),
])
def test_v100_groups_get_the_nvlinks_their_members_share(catalog, groups, links):
    pred, place = _price("all-gather", GB, catalog["v100"], 8, groups)
    n = place.group_size
    assert place.links == links
    assert pred.predicted_s == pytest.approx((n - 1) / n * GB / (links * LINK_V100))
    assert f"{links} of 6 NVLinks" in pred.note and pred.bound_by == "nvlink"


def test_v100_pair_without_nvlink_goes_over_pcie(catalog):
    chip = catalog["v100"]
    pred, place = _price("all-gather", GB, chip, 8, "{{0,5}}")
    assert place.links == 0 and pred.bound_by == "pcie"
    assert pred.predicted_s == pytest.approx(0.5 * GB / chip.pcie_bytes_per_s)
    # H100 (NVSwitch): every pair at the whole GPU's bandwidth, whatever the pair
    h100 = [_price("all-gather", GB, catalog["h100"], 8, g)[0].predicted_s for g in ("{{0,1}}", "{{0,5}}")]
    assert h100[0] == h100[1]


def _v100_dump(tmp_path, groups: str):
    text = ("HloModule jit_collective, entry_computation_layout={()->()}\n\n"
            "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
            "  ROOT %s = f32[] add(f32[] %a, f32[] %b)\n}\n\n"
            "ENTRY %main (p: f32[8,1048576]) -> f32[8,1048576] {\n  %p = f32[8,1048576] parameter(0)\n"
            f"  ROOT %ar = f32[8,1048576] all-reduce(f32[8,1048576] %p), replica_groups={groups}, to_apply=%add\n}}\n")
    (tmp_path / "module_0001.jit_collective.sm_7.0_gpu_after_optimizations.txt").write_text(text)
    return analyze(hlo_dir=tmp_path)


def test_a_finding_priced_by_the_network_says_which_figure_it_assumed(tmp_path):
    # 16 V100s, the all-reduce pairs GPU i of node 0 with GPU i of node 1: each ring edge crosses the network
    pairs = "{" + ",".join(f"{{{i},{i + 8}}}" for i in range(8)) + "}"
    analysis = _v100_dump(tmp_path, pairs)
    assert analysis.chip.key == "v100"  # the dump's sm_7.0, no --chip
    ar = analysis.ops.set_index("op_name").loc["ar"]
    assert ar["bound_by"] == "network" and ar["collective_bound_by"] == "network"
    buffer = 8 * 1048576 * 4
    assert ar["predicted_s"] == pytest.approx(2 * 0.5 * buffer / 6.25e9)  # DGX-1: 4 x 100 Gb/s for 8 GPUs
    exposed = [f for f in run_rules(analysis) if f.rule == "exposed-collective"]
    assert exposed and "assumes 6.25 GB/s per GPU across nodes" in exposed[0].evidence
    assert "--chip-file" in exposed[0].evidence


def test_a_finding_within_one_node_says_no_network_figure(tmp_path):
    analysis = _v100_dump(tmp_path, "{{0,1,2,3,4,5,6,7}}")
    assert analysis.ops.set_index("op_name").loc["ar", "bound_by"] == "nvlink"
    assert not any("across nodes" in f.evidence for f in run_rules(analysis))


def test_the_cube_mesh_table_is_the_whitepapers_shape():
    # DGX-1 V100: a cube's 12 edges plus two faces' diagonals (16 GPU pairs), 6 NVLinks on every GPU
    from xladiag.analyzer.models.topology import _CUBE_MESH_LINKS

    assert len(_CUBE_MESH_LINKS) == 16 and sum(_CUBE_MESH_LINKS.values()) == 24
    for gpu in range(8):
        assert sum(n for pair, n in _CUBE_MESH_LINKS.items() if gpu in pair) == 6
