"""Collective (ICI / NVLink / DCN) time model: the ring arithmetic of "How to Scale Your Model" (ch. 3).

Notation (shared reference ``roofline.md``): V = bytes of the whole array (all-gather: the gathered output;
reduce-scatter: the array before scattering; all-reduce: the reduced array; all-to-all: the global array;
collective-permute: the buffer each device sends), N = devices in one replica group, W1 = one-way bandwidth of
one link, W = 2·W1 (bidirectional), T_min = per-hop latency (≈ 1 µs on TPU).

TPU torus, one mesh axis:
  * with a wraparound (a full ring, both directions): ceil(N/2) hops of V/N each way ⇒ bandwidth time
    ceil(N/2)·(V/N)/W1 = V/W for even N — independent of N;
  * without one (e.g. TPU v5e/v6e axes shorter than 16): one way, N−1 hops of V/N ⇒ (N−1)·(V/N)/W1;
  * over k mesh axes at once the bandwidth time is divided by k;
  * latency time = hops × T_min; predicted = max(bandwidth, latency) (each hop costs max(T_min, payload/W1)).
  * all-reduce = reduce-scatter + all-gather (2×); all-to-all ≈ ¼ of an all-gather of the same array (book's
    bidirectional-ring figure; we apply the same ¼ on a line); collective-permute and send-recv = one hop of V.

GPU (NVLink switch, MI300X Infinity Fabric full mesh): every pair is one hop at the GPU's per-direction
bandwidth W = W1·links, so there is no wraparound question. We use the ring-algorithm costs NCCL/RCCL run:
all-gather / reduce-scatter (N−1)/N·V/W over N−1 steps, all-reduce 2(N−1)/N·V/W over 2(N−1) steps, all-to-all
(N−1)/N²·V/W (each GPU sends its V/N except its own share) in one step, permute V/W in one step. The same
switch model serves DCN (``spans_dcn``: per-chip DCN bandwidth) and CPU devices (shared-memory copies at
memory bandwidth).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .chip_catalog import Chip

# The vocabulary. KINDS are the collectives the ring model prices; TRANSFER_KINDS add the other transfers a
# step can wait on. Send/recv is its own kind, "send-recv": XLA has distinct send/recv/send-done/recv-done
# opcodes (channel point-to-point, often host transfers or pipelined permutes), not the collective-permute
# opcode; the model prices it like a permute (one hop of V). "host-offload" is a copy-start/copy-done to or
# from host memory (S(5)): PCIe, not the interconnect.
KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
TRANSFER_KINDS = KINDS + ("send-recv", "host-offload")
_ALIASES = {  # opcode bases and spelled names (lower case, '-' for '_') -> kind
    **{k: k for k in KINDS},
    "allgather": "all-gather",
    "reducescatter": "reduce-scatter",
    "all-reduce-scatter": "reduce-scatter",  # TPU 'all-reduce-scatter fusion' is a reduce-scatter
    "allreduce": "all-reduce",
    "alltoall": "all-to-all",
    "ragged-all-to-all": "all-to-all",
    "collective-broadcast": "collective-permute",
    "send": "send-recv",
    "recv": "send-recv",
    "send-recv": "send-recv",
}
# Op names as JAX/XLA/NCCL print them (captures without a dump, custom kernels), searched anywhere in the name.
_NAME_PATTERNS = [
    (re.compile(r"all[-_]?gather", re.I), "all-gather"),
    (re.compile(r"reduce[-_]?scatter", re.I), "reduce-scatter"),
    (re.compile(r"all[-_]?reduce|psum|nccl.*allreduce|rccl.*allreduce", re.I), "all-reduce"),
    (re.compile(r"all[-_]?to[-_]?all", re.I), "all-to-all"),
    (re.compile(r"collective[-_]?permute|ppermute", re.I), "collective-permute"),
]
_DEFAULT_HOP_LATENCY_S = 1e-6


def _base(text: str, suffixes: str = "start|done|update") -> str:
    """'all-gather-start.3' / 'all-reduce fusion' / 'AllGather' -> 'all-gather' / 'all-reduce' / 'allgather'."""
    k = str(text).strip().lower().replace("_", "-")
    k = re.sub(r"\.\d+$", "", k)
    k = re.sub(r"[\s-]*fusion$", "", k)
    return re.sub(rf"-({suffixes})$", "", k)


def kind_of(opcode: str | None = None, *, wrapped: str | None = None, category: str | None = None,
            name: str | None = None, to_host: bool = False) -> str | None:
    """The transfer an op performs, one of :data:`TRANSFER_KINDS`, or None.

    Evidence in order of trust: a host transfer (``to_host``: a copy touching host memory), the HLO
    ``opcode`` (``*-start``/``*-done`` stripped; an ``async-start``/``async-done`` wrapper by its
    ``wrapped`` op), the TPU trace ``category`` of collective fusions ('all-reduce fusion'), and only without
    an opcode the op ``name`` (GPU kernels, captures without HLO).
    """
    if to_host:
        return "host-offload"
    if opcode:
        base = _base(opcode, "start|done")  # an async-update is plumbing of its chain, not a transfer
        if base == "async" and wrapped:
            base = _base(wrapped)
        if base in _ALIASES:
            return _ALIASES[base]
    if category and str(category).lower().endswith("fusion"):
        kind = _ALIASES.get(_base(category))
        if kind in KINDS:
            return kind
    if name and not opcode:  # a known opcode that is no transfer is not one because of its name
        for pattern, kind in _NAME_PATTERNS:
            if pattern.search(str(name)):
                return kind
    return None


def normalize_kind(kind: str) -> str:
    """A kind the ring model prices ('all-gather-start', 'AllGather', 'send' ...) -> KINDS or 'send-recv'."""
    k = _ALIASES.get(_base(kind))
    if k is None:
        raise ValueError(f"not a collective kind: {kind!r} (expected one of {', '.join(KINDS)}, send-recv)")
    return k


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
    bound_by: str  # 'ici' | 'latency'
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


def _zero(kind: str, bytes_total: float, group_size: int, num_axes: int, note: str) -> CollectivePrediction:
    return CollectivePrediction(kind, group_size, bytes_total, 0.0, 0, 0.0, 0.0, 0.0, 0.0, "latency", False,
                                num_axes, 0.0, "none", note)


def predict_collective(
    kind: str,
    bytes_total: float,
    group_size: int,
    chip: Chip,
    *,
    num_axes: int = 1,
    axis_sizes: Sequence[int] | None = None,
    wraparound: bool | None = None,
    spans_dcn: bool = False,
) -> CollectivePrediction:
    """Lower-bound time of one collective over a replica group of ``group_size`` devices.

    ``axis_sizes`` (the mesh axes the group spans, product = group size) sets ``num_axes`` and the hop
    count; without it the group is taken as ``num_axes`` equal axes. ``wraparound`` overrides the chip's
    rule (:func:`wraparound_for`) for torus chips. Raises ValueError for an unknown kind or bad sizes.
    """
    kind = normalize_kind(kind)
    shape = "collective-permute" if kind == "send-recv" else kind  # point-to-point: one hop of V, as a permute
    v = float(bytes_total)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"bytes_total must be a finite number >= 0, got {bytes_total!r}")
    n = int(group_size)
    if axis_sizes is not None:
        axes = [int(a) for a in axis_sizes if int(a) > 1] or [1]
        if int(np.prod(axes)) != n:
            raise ValueError(f"axis_sizes {list(axis_sizes)} do not multiply to group_size {n}")
        num_axes = len(axes)
    else:
        num_axes = max(int(num_axes), 1)
        axes = [n] if num_axes == 1 else [max(round(n ** (1.0 / num_axes)), 2)] * num_axes
    if n <= 1 or v == 0:
        return _zero(kind, v, max(n, 1), num_axes, "group of one device or empty array: no communication")

    network, w1 = link_bandwidth(chip, spans_dcn=spans_dcn)
    hop_latency_s = chip.per_hop_latency_s or _DEFAULT_HOP_LATENCY_S
    notes = []
    if chip.per_hop_latency_s is None:
        notes.append(f"per-hop latency unknown: assumed {_DEFAULT_HOP_LATENCY_S:g} s")

    if network == "ici":
        bidirectional = wraparound if wraparound is not None else all(wraparound_for(chip, a) for a in axes)
        if shape == "collective-permute":
            hops, per_hop, bw_used = 1, v, w1
            bandwidth_s = v / w1
        else:
            gather_hops = sum(math.ceil(a / 2) if bidirectional else a - 1 for a in axes)
            per_hop = v / n
            shard_hops = math.ceil(n / 2) if bidirectional else n - 1  # shards each device must pass on
            bw_used = 2 * w1 if bidirectional else w1
            gather_s = shard_hops * per_hop / w1 / num_axes
            factor = {"all-gather": 1.0, "reduce-scatter": 1.0, "all-reduce": 2.0, "all-to-all": 0.25}[shape]
            bandwidth_s = factor * gather_s
            hops = 2 * gather_hops if shape == "all-reduce" else gather_hops
            if shape == "all-to-all":
                notes.append("all-to-all taken as 1/4 of an all-gather of the same array")
        if not bidirectional and shape != "collective-permute" and n > 2:  # a ring of 2 is one link anyway
            notes.append("no wraparound on this axis: one-way ring")
    else:
        bidirectional = True
        bw_used = w1
        frac = (n - 1) / n
        if shape in ("all-gather", "reduce-scatter"):
            hops, per_hop, bandwidth_s = n - 1, v / n, frac * v / w1
        elif shape == "all-reduce":
            hops, per_hop, bandwidth_s = 2 * (n - 1), v / n, 2 * frac * v / w1
        elif shape == "all-to-all":
            hops, per_hop, bandwidth_s = 1, v / (n * n), frac * v / n / w1
        else:
            hops, per_hop, bandwidth_s = 1, v, v / w1
        notes.append({"nvlink": "switch (ring algorithm)", "dcn": "over DCN (per-chip bandwidth)",
                      "memory": "CPU devices: shared-memory copies at memory bandwidth"}[network])

    sent = {"all-gather": (n - 1) / n * v, "reduce-scatter": (n - 1) / n * v,
            "all-reduce": 2 * (n - 1) / n * v, "all-to-all": (n - 1) / n * v / n,
            "collective-permute": v}[shape]
    latency_s = hops * hop_latency_s
    predicted_s = max(bandwidth_s, latency_s)
    return CollectivePrediction(
        kind=kind,
        group_size=n,
        bytes_total=v,
        bytes_per_device_sent=sent,
        hops=hops,
        per_hop_bytes=per_hop,
        bandwidth_s=bandwidth_s,
        latency_s=latency_s,
        predicted_s=predicted_s,
        bound_by="ici" if bandwidth_s >= latency_s else "latency",
        bidirectional=bidirectional,
        num_axes=num_axes,
        link_bytes_per_s_used=bw_used,
        network=network,
        note="; ".join(notes),
    )
