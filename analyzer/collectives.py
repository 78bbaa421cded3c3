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
    bidirectional-ring figure; we apply the same ¼ on a line); collective-permute = one hop of V.

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
import pandas as pd

from .chip_catalog import Chip

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
_KIND_ALIASES = {
    "allgather": "all-gather",
    "reducescatter": "reduce-scatter",
    "all-reduce-scatter": "reduce-scatter",  # TPU 'all-reduce-scatter fusion' is a reduce-scatter
    "allreduce": "all-reduce",
    "alltoall": "all-to-all",
    "ragged-all-to-all": "all-to-all",
    "send": "collective-permute",
    "recv": "collective-permute",
}
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
    bound_by: str  # 'ici' | 'latency'
    bidirectional: bool
    num_axes: int
    link_bytes_per_s_used: float  # the W in V/W: 2·W1 on a wraparound ring, W1 without, W1·links on a switch
    network: str  # 'ici' | 'nvlink' | 'dcn' | 'memory'
    note: str = ""


def normalize_kind(kind: str) -> str:
    """'all-gather-start', 'all-reduce fusion', 'reduce-scatter.3', 'AllGather' → one of :data:`KINDS`."""
    k = str(kind).strip().lower().replace("_", "-")
    k = re.sub(r"\.\d+$", "", k)
    k = re.sub(r"[\s-]*fusion$", "", k)
    k = re.sub(r"-(start|done|update)$", "", k)
    k = _KIND_ALIASES.get(k, k)
    if k not in KINDS:
        raise ValueError(f"not a collective kind: {kind!r} (expected one of {', '.join(KINDS)})")
    return k


def wraparound_for(chip: Chip, axis_size: int) -> bool:
    """Whether a mesh axis of ``axis_size`` chips is a full (bidirectional) ring on ``chip``.

    TPU tori have wraparound links only on axes that are multiples of ``wraparound_axis_multiple`` (16 on
    v5e/v6e, 4 on v4/v5p); a switch connects every pair, which is as good as a bidirectional ring.
    """
    if chip.interconnect != "torus":
        return True
    multiple = chip.wraparound_axis_multiple or 0
    return multiple > 0 and axis_size >= multiple and axis_size % multiple == 0


def latency_threshold_bytes(chip: Chip, *, spans_dcn: bool = False) -> float:
    """Per-hop payload below which a hop costs its latency, not its bytes: W1 × T_min (v5e: 45 kB)."""
    _, w1 = _links(chip, spans_dcn)
    return w1 * (chip.per_hop_latency_s or _DEFAULT_HOP_LATENCY_S)


def is_latency_bound(per_hop_bytes: float, chip: Chip, *, spans_dcn: bool = False) -> bool:
    """True when each hop's payload is below :func:`latency_threshold_bytes`."""
    return per_hop_bytes < latency_threshold_bytes(chip, spans_dcn=spans_dcn)


def _links(chip: Chip, spans_dcn: bool) -> tuple[str, float]:
    """(network, W1): one-way bandwidth of one torus link, or a switch port's whole per-direction bandwidth."""
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
    return "ici", w1


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

    network, w1 = _links(chip, spans_dcn)
    hop_latency_s = chip.per_hop_latency_s or _DEFAULT_HOP_LATENCY_S
    notes = []
    if chip.per_hop_latency_s is None:
        notes.append(f"per-hop latency unknown: assumed {_DEFAULT_HOP_LATENCY_S:g} s")

    if network == "ici":
        bidirectional = wraparound if wraparound is not None else all(wraparound_for(chip, a) for a in axes)
        if kind == "collective-permute":
            hops, per_hop, bw_used = 1, v, w1
            bandwidth_s = v / w1
        else:
            gather_hops = sum(math.ceil(a / 2) if bidirectional else a - 1 for a in axes)
            per_hop = v / n
            shard_hops = math.ceil(n / 2) if bidirectional else n - 1  # shards each device must pass on
            bw_used = 2 * w1 if bidirectional else w1
            gather_s = shard_hops * per_hop / w1 / num_axes
            factor = {"all-gather": 1.0, "reduce-scatter": 1.0, "all-reduce": 2.0, "all-to-all": 0.25}[kind]
            bandwidth_s = factor * gather_s
            hops = 2 * gather_hops if kind == "all-reduce" else gather_hops
            if kind == "all-to-all":
                notes.append("all-to-all taken as 1/4 of an all-gather of the same array")
        if not bidirectional and kind != "collective-permute" and n > 2:  # a ring of 2 is one link anyway
            notes.append("no wraparound on this axis: one-way ring")
    else:
        bidirectional = True
        bw_used = w1
        frac = (n - 1) / n
        if kind in ("all-gather", "reduce-scatter"):
            hops, per_hop, bandwidth_s = n - 1, v / n, frac * v / w1
        elif kind == "all-reduce":
            hops, per_hop, bandwidth_s = 2 * (n - 1), v / n, 2 * frac * v / w1
        elif kind == "all-to-all":
            hops, per_hop, bandwidth_s = 1, v / (n * n), frac * v / n / w1
        else:
            hops, per_hop, bandwidth_s = 1, v, v / w1
        notes.append({"nvlink": "switch (ring algorithm)", "dcn": "over DCN (per-chip bandwidth)",
                      "memory": "CPU devices: shared-memory copies at memory bandwidth"}[network])

    sent = {"all-gather": (n - 1) / n * v, "reduce-scatter": (n - 1) / n * v,
            "all-reduce": 2 * (n - 1) / n * v, "all-to-all": (n - 1) / n * v / n,
            "collective-permute": v}[kind]
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


def predict_collectives(
    kinds: Sequence[str] | pd.Series,
    bytes_total: Sequence[float] | pd.Series,
    group_sizes: Sequence[int] | pd.Series,
    chip: Chip,
    *,
    spans_dcn: Sequence[bool] | pd.Series | None = None,
) -> pd.DataFrame:
    """Columns ``collective_predicted_s``, ``collective_bound_by``, ``collective_note`` for many rows.

    Feeds :func:`xladiag.analyzer.roofline.predict_ops`. Rows that cannot be modelled (unknown kind or size)
    get NaN and a note instead of an error. Collectives are few per program, so a plain loop is fine here.
    """
    index = kinds.index if isinstance(kinds, pd.Series) else None
    dcn = [False] * len(kinds) if spans_dcn is None else list(spans_dcn)
    predicted, bound, notes = [], [], []
    for kind, v, n, over_dcn in zip(list(kinds), list(bytes_total), list(group_sizes), dcn):
        try:
            if n is None or (isinstance(n, float) and not math.isfinite(n)):
                raise ValueError("replica group size unknown")
            p = predict_collective(kind, v, int(n), chip, spans_dcn=bool(over_dcn))
            predicted.append(p.predicted_s)
            bound.append(p.bound_by)
            notes.append(p.note)
        except (TypeError, ValueError) as exc:
            predicted.append(math.nan)
            bound.append("unknown")
            notes.append(str(exc))
    return pd.DataFrame(
        {"collective_predicted_s": predicted, "collective_bound_by": bound, "collective_note": notes},
        index=index,
    )
