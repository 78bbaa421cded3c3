"""Collective (ICI / NVLink / DCN) time model: the ring arithmetic of "How to Scale Your Model" (ch. 3).

Notation (shared reference ``roofline.md``): V = bytes of the whole array (all-gather: the gathered output;
reduce-scatter: the array before scattering; all-reduce: the reduced array; all-to-all: the global array;
collective-permute: the buffer each device sends), N = devices in one replica group, W1 = one-way bandwidth of
one link, W = 2·W1 (bidirectional), T_min = per-hop latency (≈ 1 µs on TPU).

TPU torus (the axes a group spans come from ``collective_topology``):
  * one axis of a chips with a wraparound (a full ring, both directions): ceil(a/2) hops of V/a each way ⇒
    ceil(a/2)·(V/a)/W1 = V/W for even a — independent of a;
  * without one (TPU v5e/v6e axes shorter than 16, v4/v5p slices that are not whole 4×4×4 cubes): one way,
    a−1 hops of V/a ⇒ (a−1)·(V/a)/W1;
  * over k axes at once the axes share the array (V / (W·k) on k full rings; the harmonic sum of the
    axes' own times in general), but never faster than a chip takes in the (n−1)/n·V it lacks over its
    inbound links; latency = the axes' hops added × T_min; predicted = max(bandwidth, latency);
  * groups spanning several slices add a DCN ring over the slices on each chip's share (per-chip DCN);
  * all-reduce = reduce-scatter + all-gather (2×); all-to-all ≈ ¼ of an all-gather of the global array
    (the book's bidirectional-ring figure; a line's bisection gives the same ¼ of its one-way gather);
    collective-permute and send-recv = one hop of V.

GPU (NVLink switch, MI300X Infinity Fabric full mesh) within a node: every pair is one hop at the GPU's
per-direction bandwidth W = W1·links. We use the ring-algorithm costs NCCL/RCCL run: all-gather /
reduce-scatter (N−1)/N·V/W over N−1 steps, all-reduce 2(N−1)/N·V/W over 2(N−1) steps, all-to-all
(N−1)/N²·V/W (each GPU sends its V/N except its own share) in one step, permute V/W in one step. Across
nodes the ring's node-boundary edges run over NICs (one per GPU, ``dcn_bytes_per_s``): with g group members
per node, W = min(NVLink, g × NIC). CPU devices: shared-memory copies at memory bandwidth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...units import format_si
from ..chips.catalog import Chip

# The vocabulary of transfers is an HLO fact (hlo/collective_kinds.py); re-exported for the models' readers.
from ..hlo.collective_kinds import KINDS, TRANSFER_KINDS, kind_of, normalize_kind  # noqa: F401
from .topology import Placement

_DEFAULT_HOP_LATENCY_S = 1e-6


@dataclass(frozen=True)
class CollectivePrediction:
    """Predicted time of one collective on one replica group, with the terms that produced it."""

    kind: str
    group_size: int
    bytes_total: float  # V
    bytes_per_device_sent: float
    hops: int
    per_hop_bytes: float
    bandwidth_s: float
    latency_s: float
    predicted_s: float  # max(bandwidth_s, latency_s)
    bound_by: str  # the link that bounds the bandwidth term (BANDWIDTH_BOUNDS) | 'latency'
    bidirectional: bool
    num_axes: int
    link_bytes_per_s_used: float  # the W in V/W: 2·W1 on a wraparound ring, W1 without, W1·links on a switch
    network: str  # 'ici' | 'nvlink' | 'dcn' | 'memory'
    note: str = ""


def wraparound_for(chip: Chip, axis_size: int) -> bool:
    """Whether a mesh axis of ``axis_size`` chips is a full (bidirectional) ring on ``chip``: the chip's
    rule (:meth:`Chip.has_wraparound`: axes of 16 on v5e/v6e, whole 4×4×4 cubes on v4/v5p/7x, using the
    slice shape the user named), and a switch connects every pair, as good as a ring."""
    return chip.has_wraparound(axis_size)


def latency_threshold_bytes(chip: Chip, *, spans_dcn: bool = False) -> float:
    """Per-hop payload below which a hop costs its latency, not its bytes: W1 × T_min (v5e: 45 kB)."""
    _, w1 = link_bandwidth(chip, spans_dcn=spans_dcn)
    return w1 * (chip.per_hop_latency_s or _DEFAULT_HOP_LATENCY_S)


def link_bandwidth(chip: Chip, *, spans_dcn: bool = False, both_directions: bool = False) -> tuple[str, float]:
    """(network, bytes/s) of the link a collective's hops cross.

    Torus ('ici'): W1, one direction of one link; ``both_directions`` gives W = 2·W1, a full ring's two
    directions (the W of C/W). Switch ('nvlink'): a GPU's whole per-direction bandwidth W1·links, already
    every pair's one hop. DCN: the per-chip DCN bandwidth. No interconnect ('memory', CPU devices): memory
    bandwidth. Raises ValueError when the catalog lacks the number.
    """
    if spans_dcn:
        bw = chip.dcn_bytes_per_s
        if not bw:
            raise ValueError(f"{chip.name} has no DCN bandwidth in the catalog")
        return "dcn", bw
    if chip.interconnect == "none":
        return "memory", chip.hbm_bytes_per_s
    w1 = chip.ici_link_bytes_per_s_oneway
    if not w1:
        raise ValueError(f"{chip.name} has no interconnect bandwidth in the catalog")
    if chip.interconnect == "switch":
        return "nvlink", w1 * (chip.ici_links or 1)
    return "ici", 2 * w1 if both_directions else w1


_FACTOR = {"all-gather": 1.0, "reduce-scatter": 1.0, "all-reduce": 2.0, "all-to-all": 0.25}
# What a collective's bandwidth term is bound by: TPU ICI (DCN across slices included), NVIDIA NVLink, AMD
# Infinity Fabric (xGMI), PCIe between GPUs without NVLink, the network (NICs) across GPU nodes.
BANDWIDTH_BOUNDS = ("ici", "nvlink", "xgmi", "pcie", "network")


def link_label(chip: Chip, links: int | None = None) -> str:
    """The bound_by word of a link within a node: 'ici' on a torus (and CPU devices), NVLink / xGMI on
    NVIDIA / AMD GPUs, 'pcie' on GPUs joined by PCIe only (one 'link' in the catalog: A10G, L4, H100 PCIe)
    or a group with no NVLink between its members (``links`` 0)."""
    if chip.interconnect != "switch":
        return "ici"
    if links == 0 or (chip.vendor == "nvidia" and (chip.ici_links or 0) <= 1):
        return "pcie"
    return {"nvidia": "nvlink", "amd": "xgmi"}.get(chip.vendor, "ici")


def _group_link(chip: Chip, place: Placement, notes: list[str]) -> float:
    """A GPU's per-direction bandwidth within a node for this group: the whole GPU on a switch; on a DGX-1
    hybrid cube-mesh the NVLinks its members have to each other (PCIe where they have none)."""
    _, w = link_bandwidth(chip)
    if place.links is None:
        return w
    if place.links == 0:
        if not chip.pcie_bytes_per_s:
            raise ValueError(f"{chip.name} has no PCIe bandwidth in the catalog")
        notes.append(f"hybrid cube-mesh: no NVLink between the group's GPUs, over PCIe at "
                     f"{_fmt_rate(chip.pcie_bytes_per_s)}")
        return chip.pcie_bytes_per_s
    w1 = chip.ici_link_bytes_per_s_oneway or 0.0
    notes.append(f"hybrid cube-mesh: the group's ring gets {place.links} of {chip.ici_links} NVLinks per GPU "
                 f"({_fmt_rate(place.links * w1)} per direction)")
    return place.links * w1


def _fmt_rate(bytes_per_s: float) -> str:
    return format_si(bytes_per_s, "B/s")


def _legacy_placement(n: int, chip: Chip, axis_sizes, wraparound, spans_dcn) -> Placement:
    """A Placement from the older keyword form (axis sizes, a wraparound override, spans_dcn)."""
    if spans_dcn:
        return Placement(n, (), slices=n, nodes=n, per_node=1)
    if chip.interconnect == "switch":
        return Placement(n, nodes=1, per_node=n)
    if axis_sizes is not None:
        axes = [int(a) for a in axis_sizes if int(a) > 1] or [1]
        if int(np.prod(axes)) != n:
            raise ValueError(f"axis_sizes {list(axis_sizes)} do not multiply to group_size {n}")
    else:
        axes = [n]
    wraps = [wraparound if wraparound is not None else wraparound_for(chip, a) for a in axes]
    return Placement(n, tuple((a, a, bool(w)) for a, w in zip(axes, wraps) if a > 1))


def _zero(kind: str, bytes_total: float, group_size: int, note: str) -> CollectivePrediction:
    return CollectivePrediction(kind, group_size, bytes_total, 0.0, 0, 0.0, 0.0, 0.0, 0.0, "latency", False,
                                0, 0.0, "none", note)


def predict_collective(
    kind: str,
    bytes_total: float,
    group_size: int,
    chip: Chip,
    *,
    placement: Placement | None = None,
    axis_sizes: Sequence[int] | None = None,
    wraparound: bool | None = None,
    spans_dcn: bool = False,
) -> CollectivePrediction:
    """Lower-bound time of one collective over a replica group of ``group_size`` devices.

    ``placement`` (``collective_topology.group_placement``) says which torus axes, TPU slices or GPU nodes
    the group spans. Without it the older keywords describe the group: ``axis_sizes`` (product = group
    size; default one axis of the whole group), ``wraparound`` overriding the chip's rule, ``spans_dcn``: every
    member in another slice. Raises ValueError for an unknown kind, bad sizes or a missing bandwidth.
    """
    kind = normalize_kind(kind)
    shape = "collective-permute" if kind == "send-recv" else kind  # point-to-point: one hop of V, as a permute
    v = float(bytes_total)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"bytes_total must be a finite number >= 0, got {bytes_total!r}")
    n = int(group_size)
    place = placement or _legacy_placement(n, chip, axis_sizes, wraparound, spans_dcn)
    if n <= 1 or v == 0:
        return _zero(kind, v, max(n, 1), "group of one device or empty array: no communication")
    hop_latency_s = chip.per_hop_latency_s or _DEFAULT_HOP_LATENCY_S
    notes = [] if chip.per_hop_latency_s else [f"per-hop latency unknown: assumed {_DEFAULT_HOP_LATENCY_S:g} s"]
    if chip.interconnect == "torus":
        priced, bound = _torus(shape, v, n, chip, place, notes), "ici"
    elif chip.interconnect == "switch" and place.nodes > 1:
        priced = _across_nodes(shape, v, n, chip, place, notes)
        bound = "network" if priced[4] == "nic" else link_label(chip, place.links)
        priced = (*priced[:4], "nic", *priced[5:])
    else:
        priced, bound = _switch(shape, v, n, chip, place, notes), link_label(chip, place.links)
    hops, per_hop, bandwidth_s, bw_used, network, bidirectional, k = priced
    if place.note:
        notes.append(place.note)
    sent = {"all-gather": (n - 1) / n * v, "reduce-scatter": (n - 1) / n * v,
            "all-reduce": 2 * (n - 1) / n * v, "all-to-all": (n - 1) / n * v / n,
            "collective-permute": v}[shape]
    latency_s = hops * hop_latency_s
    return CollectivePrediction(
        kind=kind, group_size=n, bytes_total=v, bytes_per_device_sent=sent, hops=hops, per_hop_bytes=per_hop,
        bandwidth_s=bandwidth_s, latency_s=latency_s, predicted_s=max(bandwidth_s, latency_s),
        bound_by=bound if bandwidth_s >= latency_s else "latency", bidirectional=bidirectional, num_axes=k,
        link_bytes_per_s_used=bw_used, network=network, note="; ".join(notes))


def _torus(shape: str, v: float, n: int, chip: Chip, place: Placement, notes: list[str]):
    """TPU: each spanned axis a ring of its own (the book: ceil(a/2)·(V/a)/W1 with wraparound, (a−1)·(V/a)/W1
    one way without), the axes carrying the array at once (V / (W·k) over k full rings), never faster than
    a chip can take in the (n−1)/n·V it lacks over its inbound links (2·W1 per ring axis, W1 at the end of
    a line); slices beyond one are joined over DCN, a ring of the slices on each chip's share."""
    _, w1 = link_bandwidth(chip)
    axes, d = place.axes, max(place.slices, 1)
    if not axes and d == 1:  # devices sharing one chip (TPU7x TensorCores): no die-to-die rate in the catalog
        axes = ((n, n, False),)
        notes.append("devices share a chip: priced as one ICI line (die-to-die bandwidth not in the catalog)")
    alone = [(math.ceil(a / 2) if wrap else a - 1) / a / w1 for a, _, wrap in axes]  # s per byte of V
    inbound = sum(2 * w1 if wrap else w1 for _, _, wrap in axes)
    per_slice = n / d
    gather_s_per_byte = max(1 / sum(1 / t for t in alone), (per_slice - 1) / per_slice / inbound) if axes else 0.0
    hops = sum(math.ceil(a / 2) if wrap else a - 1 for a, _, wrap in axes)
    bidirectional = bool(axes) and all(wrap for _, _, wrap in axes)
    desc = " x ".join(f"{a}{'' if a == full else f' of {full}'}{' (wraparound)' if wrap else ''}"
                      for a, full, wrap in axes)
    if axes:
        notes.append(f"ICI over {len(axes)} ax{'es' if len(axes) > 1 else 'is'} {desc}, "
                     f"{_fmt_rate(w1)} per link one way")
        if any(not wrap and a > 2 for a, _, wrap in axes):
            notes.append("no wraparound on an axis shorter than a full ring: one way")
    w_dcn = chip.dcn_bytes_per_s if d > 1 else None
    if d > 1:
        if not w_dcn:
            raise ValueError(f"{chip.name} has no DCN bandwidth in the catalog")
        notes.append(f"DCN across {d} slices at {_fmt_rate(w_dcn)} per chip")
    if shape == "collective-permute":
        bw = w_dcn if d > 1 else w1
        return 1, v, v / bw, bw, "dcn" if d > 1 else "ici", False, len(axes)
    ici_s = _FACTOR[shape] * v * gather_s_per_byte
    if shape == "all-to-all":
        notes.append("all-to-all: 1/4 of an all-gather of the global array")
        dcn_s = (d - 1) / d * v / n / w_dcn if d > 1 else 0.0
    else:
        dcn_s = (2.0 if shape == "all-reduce" else 1.0) * (d - 1) / d * v / per_slice / w_dcn if d > 1 else 0.0
    hops += d - 1
    hops = 2 * hops if shape == "all-reduce" else hops
    network = "ici+dcn" if axes and d > 1 else ("dcn" if d > 1 else "ici")
    return hops, v / n, ici_s + dcn_s, inbound or w_dcn, network, bidirectional, len(axes) + (d > 1)


def _switch(shape: str, v: float, n: int, chip: Chip, place: Placement, notes: list[str]):
    """One switch (NVLink / Infinity Fabric within a node; CPU memory): NCCL's ring costs at the device's
    whole per-direction bandwidth (on a DGX-1 cube-mesh, the links the group's members share)."""
    network, w = link_bandwidth(chip)
    if network == "nvlink":
        w = _group_link(chip, place, notes)
    frac = (n - 1) / n
    if shape in ("all-gather", "reduce-scatter"):
        hops, per_hop, bandwidth_s = n - 1, v / n, frac * v / w
    elif shape == "all-reduce":
        hops, per_hop, bandwidth_s = 2 * (n - 1), v / n, 2 * frac * v / w
    elif shape == "all-to-all":
        hops, per_hop, bandwidth_s = 1, v / (n * n), frac * v / n / w
    else:
        hops, per_hop, bandwidth_s = 1, v, v / w
    notes.append({"nvlink": f"one node: switch ring at {_fmt_rate(w)} per GPU",
                  "memory": "CPU devices: shared-memory copies at memory bandwidth"}[network])
    return hops, per_hop, bandwidth_s, w, network, True, 1


def _across_nodes(shape: str, v: float, n: int, chip: Chip, place: Placement, notes: list[str]):
    """GPUs in several nodes: the ring's (or tree's) node-boundary edges run over NICs. With g group
    members per node and one NIC per GPU, NCCL spreads its channels over the g NICs, so a GPU's ring
    traffic moves at min(NVLink, g × NIC) (the book's node egress bandwidth: 8 × 400 Gb/s on H100)."""
    w_nv = _group_link(chip, place, notes)
    w_nic = chip.dcn_bytes_per_s
    if not w_nic:
        raise ValueError(f"{chip.name} has no per-GPU network bandwidth in the catalog")
    g, m = max(place.per_node, 1), place.nodes
    w = min(w_nv, g * w_nic) if g > 1 else w_nic
    nic_bound = g == 1 or g * w_nic < w_nv
    frac = (n - 1) / n
    if shape in ("all-gather", "reduce-scatter", "all-reduce"):
        f = 2.0 if shape == "all-reduce" else 1.0
        hops, per_hop, bandwidth_s = int(f) * (n - 1), v / n, f * frac * v / w
    elif shape == "all-to-all":  # each GPU's buffer V/N: the share for other nodes leaves over its own NIC
        hops, per_hop = 1, v / (n * n)
        across, within = (n - g) / n * v / n / w_nic, (g - 1) / n * v / n / w_nv
        bandwidth_s, nic_bound = max(across, within), across >= within
    else:
        hops, per_hop, bandwidth_s, w, nic_bound = 1, v, v / w_nic, w_nic, True
    within = {"nvlink": "NVLink", "xgmi": "Infinity Fabric", "pcie": "PCIe"}.get(link_label(chip, place.links), "links")
    notes.append(f"{m} nodes x {g} GPUs: {within} {_fmt_rate(w_nv)} within a node, "
                 f"NIC {_fmt_rate(w_nic)} per GPU across nodes; ring at {_fmt_rate(w)} per GPU")
    # 'nic' where the network bounds the bandwidth term, else the node's links (the caller says which)
    return hops, per_hop, bandwidth_s, w, "nic" if nic_bound else "node", True, 2
