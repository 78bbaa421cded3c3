"""Ring model of collectives against the worked answers of roofline.md (each to 2 %) and a real v6e capture."""

from __future__ import annotations

import dataclasses
import math

import pytest

from xladiag.analyzer.chips.catalog import load_catalog
from xladiag.analyzer.models.collectives import (
    KINDS,
    TRANSFER_KINDS,
    kind_of,
    latency_threshold_bytes,
    link_bandwidth,
    normalize_kind,
    predict_collective,
    wraparound_for,
)

REL = 0.02


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def tpu_v2(catalog):
    # Not in the catalog: the book's TPU v2 slice, 1.2e11 B/s bidirectional per link = 6e10 one way.
    return dataclasses.replace(catalog["v3"], key="v2", name="TPU v2", peak_bf16_flops_per_s=4.6e13,
                               ici_link_bytes_per_s_oneway=6e10)


def test_worked_2_reduce_scatter_one_hop(tpu_v2):
    # 134 MB reduce-scatter over one hop (axis of 2) at 1.2e11 B/s: 1.1 ms predicted, 1.13 ms measured
    for wraparound in (True, False):  # a ring of two is one link either way
        p = predict_collective("reduce-scatter", 134e6, 2, tpu_v2, wraparound=wraparound)
        assert p.predicted_s == pytest.approx(1.1e-3, rel=REL)
        assert p.bound_by == "ici" and p.hops == 1


def test_worked_3_v5e_all_gather_no_wraparound(catalog):
    # mesh {X: 8, Y: 4} on v5e; AllGather over Y of bf16[2048, 8192] (34 MB, 8.4 MB per shard)
    v5e = catalog["v5e"]
    v = 2048 * 8192 * 2
    assert not wraparound_for(v5e, 4)
    real = predict_collective("all-gather", v, 4, v5e)
    assert real.predicted_s == pytest.approx(560e-6, rel=REL)  # 3 * 8.4e6 / 4.5e10; measured 680 us
    assert (real.hops, real.bidirectional, real.link_bytes_per_s_used) == (3, False, 4.5e10)
    assert real.per_hop_bytes == v / 4
    ring = predict_collective("all-gather", v, 4, v5e, wraparound=True)
    assert ring.predicted_s == pytest.approx(377e-6, rel=REL)  # 34e6 / 9e10
    assert (ring.hops, ring.bidirectional, ring.link_bytes_per_s_used) == (2, True, 9e10)


def test_worked_4_small_all_gather_is_latency_bound(catalog):
    # bf16[256, 256] on the same axis: 32 kB per shard, 0.7 us per hop, 3 hops * 1 us = 3 us (measured ~8 us)
    v5e = catalog["v5e"]
    p = predict_collective("all-gather-start", 256 * 256 * 2, 4, v5e)
    assert p.per_hop_bytes == 32768
    assert p.per_hop_bytes / v5e.ici_link_bytes_per_s_oneway == pytest.approx(0.73e-6, rel=REL)
    assert p.predicted_s == pytest.approx(3e-6, rel=REL)
    assert p.bound_by == "latency" and p.latency_s > p.bandwidth_s
    assert latency_threshold_bytes(v5e) == pytest.approx(45e3)  # 4.5e10 * 1 us
    assert p.per_hop_bytes < latency_threshold_bytes(v5e) < 8.4e6


def test_ring_time_independent_of_group_size_with_wraparound(catalog):
    # T ~ V / W on a full ring, whatever N: v5e axis of 16 has a wraparound
    v5e = catalog["v5e"]
    assert wraparound_for(v5e, 16) and not wraparound_for(v5e, 8)
    assert wraparound_for(catalog["v5p"], 8) and not wraparound_for(catalog["v5p"], 6)
    times = [predict_collective("all-gather", 1e9, n, v5e, wraparound=True).predicted_s for n in (4, 8, 16)]
    assert times == pytest.approx([1e9 / 9e10] * 3)
    # over two axes at once the bandwidth term halves: V / (W * k)
    two_axes = predict_collective("all-gather", 1e9, 256, v5e, axis_sizes=[16, 16])
    assert two_axes.num_axes == 2 and two_axes.bidirectional
    assert two_axes.bandwidth_s == pytest.approx(1e9 / (9e10 * 2))
    assert two_axes.hops == 16  # 8 + 8 latency hops


def test_all_reduce_all_to_all_permute_ratios(catalog):
    v5p = catalog["v5p"]  # axis of 4 has a wraparound on v5p
    gather = predict_collective("all-gather", 4e8, 4, v5p)
    assert gather.bidirectional and gather.predicted_s == pytest.approx(4e8 / 1.8e11)
    assert predict_collective("all-reduce fusion", 4e8, 4, v5p).predicted_s == pytest.approx(2 * gather.predicted_s)
    assert predict_collective("all-to-all", 4e8, 4, v5p).predicted_s == pytest.approx(gather.predicted_s / 4)
    permute = predict_collective("collective-permute-done", 4e8, 4, v5p)
    assert permute.predicted_s == pytest.approx(4e8 / 9e10) and permute.hops == 1
    assert predict_collective("all-reduce-scatter fusion", 4e8, 4, v5p).kind == "reduce-scatter"


def test_group_of_one_and_dcn(catalog):
    v6e = catalog["v6e"]
    solo = predict_collective("all-reduce", 1e9, 1, v6e)
    assert solo.predicted_s == 0.0 and solo.hops == 0
    # across hosts at 100 Gb/s = 1.25e10 B/s per chip: (N-1)/N * V / W = 0.5 * 1e9 / 1.25e10 = 40 ms
    dcn = predict_collective("all-gather", 1e9, 2, v6e, spans_dcn=True)
    assert dcn.network == "dcn" and dcn.predicted_s == pytest.approx(0.04)


def test_nvlink_switch_ring_algorithm(catalog):
    # 8 x H100, all-reduce of 1 GB: 2 * 7/8 * 1e9 / 4.5e11 = 3.89 ms (NCCL ring bus bandwidth model)
    p = predict_collective("all-reduce", 1e9, 8, catalog["h100"])
    assert p.network == "nvlink" and p.bidirectional
    assert p.predicted_s == pytest.approx(2 * 7 / 8 * 1e9 / 4.5e11)
    assert p.hops == 14
    # MI300X full mesh: 7 peer links of 6.4e10 => all-gather of 1 GB over 8 GPUs: 7/8 * 1e9 / 4.48e11
    q = predict_collective("all-gather", 1e9, 8, catalog["mi300x"])
    assert q.predicted_s == pytest.approx(7 / 8 * 1e9 / 4.48e11)


def test_real_v6e_all_reduce(catalog):
    # tpu_v6e_host_offload: all-reduce of f32[5,1024,1024,256] (5.37 GB), replica_groups=[4,2]<=[2,4]T(1,0)
    # = 4 groups of 2. Measured 121.7 ms per run. Model: 2 * (V/2) / 9e10 = 59.65 ms (a ring of two: one link).
    v = 5 * 1024 * 1024 * 256 * 4
    p = predict_collective("all-reduce-start", v, 2, catalog["v6e"])
    assert math.isfinite(p.predicted_s)
    assert p.predicted_s == pytest.approx(2 * (v / 2) / 9e10)
    assert p.bound_by == "ici"
    assert 0.4 < p.predicted_s / 121.7e-3 < 0.6  # the measured run is ~2x the lower bound


def test_normalize_kind_and_errors(catalog):
    assert normalize_kind("all-gather-start.3") == "all-gather"
    assert normalize_kind("AllReduce") == "all-reduce"
    assert normalize_kind("ragged-all-to-all") == "all-to-all"
    with pytest.raises(ValueError, match="not a collective"):
        normalize_kind("megacore fusion")
    with pytest.raises(ValueError, match="axis_sizes"):
        predict_collective("all-gather", 1e6, 8, catalog["v5e"], axis_sizes=[4, 4])
    with pytest.raises(ValueError, match="bytes_total"):
        predict_collective("all-gather", float("nan"), 8, catalog["v5e"])


def test_kind_of_one_vocabulary():
    # Opcodes, with async suffixes; an async wrapper by the op it wraps.
    assert kind_of("all-gather-start") == "all-gather"
    assert kind_of("reduce-scatter") == "reduce-scatter"
    assert kind_of("ragged-all-to-all") == "all-to-all"
    assert kind_of("collective-broadcast") == "collective-permute"
    assert kind_of("async-done", wrapped="all-reduce") == "all-reduce"
    assert kind_of("async-start", wrapped="slice") is None
    assert kind_of("async-update", wrapped="all-reduce") is None  # plumbing of the chain, not the transfer
    # send/recv are XLA's own opcodes: their own kind, not a collective-permute.
    assert {kind_of(op) for op in ("send", "recv", "send-done", "recv-done")} == {"send-recv"}
    # A copy touching host memory is host offload whatever else it says.
    assert kind_of("copy-done", to_host=True) == "host-offload"
    assert kind_of("copy-done") is None
    # TPU trace categories of collective fusions; names only as the last resort.
    assert kind_of("fusion", category="all-reduce-scatter fusion") == "reduce-scatter"
    assert kind_of("fusion", category="loop fusion", name="all-gather.3") is None
    assert kind_of(category="all-gather fusion") == "all-gather"
    assert kind_of(name="ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "all-reduce"
    assert kind_of(name="jit_step/psum") == "all-reduce"
    assert kind_of(name="fusion.12") is None
    assert set(KINDS) < set(TRANSFER_KINDS) and len(set(TRANSFER_KINDS)) == 7


def test_send_recv_is_priced_as_one_hop(catalog):
    v6e = catalog["v6e"]
    assert normalize_kind("send-done.2") == "send-recv"
    send = predict_collective("send", 8e6, 2, v6e)
    permute = predict_collective("collective-permute", 8e6, 2, v6e)
    assert send.kind == "send-recv" and send.predicted_s == permute.predicted_s == pytest.approx(8e6 / 9e10)
    with pytest.raises(ValueError, match="not a collective"):
        normalize_kind("host-offload")


def test_link_bandwidth_per_network(catalog):
    # v6e: 9e10 B/s one way per ICI link; a full ring uses both directions.
    assert link_bandwidth(catalog["v6e"]) == ("ici", 9e10)
    assert link_bandwidth(catalog["v6e"], both_directions=True) == ("ici", 1.8e11)
    # H100: 18 NVLink links of 25 GB/s per direction, one switch hop; both directions do not add up per hop.
    assert link_bandwidth(catalog["h100"], both_directions=True) == ("nvlink", pytest.approx(4.5e11))
    assert link_bandwidth(catalog["v6e"], spans_dcn=True) == ("dcn", catalog["v6e"].dcn_bytes_per_s)
    assert link_bandwidth(catalog["cpu"])[0] == "memory"
