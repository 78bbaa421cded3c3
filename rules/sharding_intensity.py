"""Collectives no schedule can hide: the compute they overlap with is too small for the bytes they move.

What it finds:
    Mesh axes (the devices of a collective's replica groups) whose bandwidth-bound collectives move more
    bytes than the matmuls they feed or follow can hide: per axis, the FLOPs of those matmuls (each
    counted once) per byte over the axis, below the chip's critical intensity C / W for that axis. The
    MaxText arithmetic: FSDP needs tokens per device (divided by MoE sparsity) above C / W (TPU v6e about
    5,100 over one axis's two links, 2,500 over two axes), TP needs MLP width / TP above it, EP 4 x MLP width /
    EP. One finding per axis, every collective listed with its own intensity and threshold.
Why it costs time:
    A transfer hides only behind compute that does not need its result, and the compute that uses the
    moved data is what a schedule overlaps it with (the next layer's weights gather during this layer's
    matmuls). When the transfer takes longer than that compute at peak, the difference waits, whatever the
    scheduler or the overlap flags do.
How the cost is estimated:
    Intensity = matmul FLOPs per step / bytes per step over the axis (V of each collective, times its
    occurrences). Threshold = C / W: C the chip's bf16 peak, W the bytes per second the ring model gives
    the axis (bytes / the collectives' bandwidth time: two links of one direction each on a wraparound
    axis, fewer without one, more over several torus axes). Cost = savings = the axes' exposed
    collective time (measured; predicted without a trace) capped at what no schedule hides: link time
    minus the matmuls' time (measured, never below their time at peak). Latency-bound collectives are
    latency-bound-collective's; collectives that reach no matmul are left out (listed in the details).
    Each collective op is counted here before exposed-collective counts it. An axis of FSDP gathers and
    reduce-scatters only is priced as a throughput lever (`benefit`): more tokens per step, not a shorter
    step; an axis with all-reduces or all-to-alls as a step-time one (fewer tensor- or expert-parallel ways).
Fix:
    By what the axis carries. All-gathers / reduce-scatters (FSDP weights and their gradients): raise the
    tokens per device (MaxText `per_device_batch_size`) by the shortfall factor, a throughput lever (a
    longer step doing more tokens), or shard weights over fewer devices (`ici_fsdp_parallelism` down,
    `ici_data_parallelism` up, where HBM holds the larger shards). All-reduces after matmuls (tensor
    parallelism): fewer `ici_tensor_parallelism` ways (intensity grows as MLP width / TP). All-to-alls
    (expert parallelism): fewer `ici_expert_parallelism` ways.
Details:
    axis (text): the devices of the axis' replica groups (the finding's `kind` is it as a slug)
    group_size (count): devices per replica group along the axis
    kinds (list): the collective kinds on the axis
    intensity_flops_per_byte (flops): matmul FLOPs per byte moved over the axis, per step
    threshold_flops_per_byte (flops): C / W for the axis
    shortfall (count or null): threshold / intensity: how many times more compute per byte the axis needs
    peak_flops_per_s (flops): C, the chip's bf16 peak
    peak_source (text): where C comes from
    axis_bytes_per_s (bytes): W, the axis' bandwidth in the ring model (bytes / link time)
    link_source (text): where the link bandwidth comes from, and the topology the ring model used
    bytes_per_step (bytes): bytes moved over the axis per step
    matmul_flops_per_step (flops): FLOPs per step of the matmuls the collectives feed or follow
    link_s_per_step (s): the collectives' bandwidth time per step on the axis
    matmul_s_per_step (s): the matmuls' time per step (measured, never below peak; predicted without a trace)
    exposed_s_per_step (s): the collectives' exposed time per step
    unhideable_s_per_step (s): link time minus matmul time, never below zero
    collectives_without_matmul (count): collectives on the axis that reach no matmul (not counted)
    ops (list): per collective: `op`, `kind`, `bytes`, `matmul_flops`, `intensity_flops_per_byte`,
        `threshold_flops_per_byte`, `matmuls`
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..analyzer.models.collective_pricing import network_assumption
from ..analyzer.models.collectives import latency_threshold_bytes
from ..units import format_si
from . import framework_levers as fwl
from .base import (
    OpEvidence,
    Priced,
    Target,
    compose,
    float_or_none,
    format_bytes,
    format_percent,
    format_seconds,
    op_claims,
    times_are,
)
from .levers import target

RULE_ID = "sharding-intensity"
PRECEDENCE = 4  # more bytes than the matmuls it feeds can hide; its fix lets any schedule hide it
# The finding's kind: its axis label as a slug ('8 devices (0-7)' -> '8-devices-0-7'); the JSON Schema
# admits kinds of this form beside the transfer kinds.
AXIS_KIND_PATTERN = r"^[0-9]+-(devices|groups-of-[0-9]+)(-[0-9]+)*$"
MIN_FRACTION = 0.005  # measured: under half a percent of the step is noise
_FSDP_KINDS = ("all-gather", "reduce-scatter")


def axis_kind(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(label).lower()).strip("-")


@dataclass(frozen=True)
class Numbers:
    axis: str
    group_size: int  # count
    kinds: list
    intensity_flops_per_byte: float  # flops
    threshold_flops_per_byte: float  # flops
    shortfall: float | None  # count; None when the axis' matmuls have no FLOPs
    peak_flops_per_s: float  # flops
    peak_source: str
    axis_bytes_per_s: float  # bytes
    link_source: str
    bytes_per_step: float  # bytes
    matmul_flops_per_step: float  # flops
    link_s_per_step: float  # s
    matmul_s_per_step: float  # s
    exposed_s_per_step: float  # s
    unhideable_s_per_step: float  # s
    collectives_without_matmul: int  # count
    ops: list  # per collective
    priced: Priced
    collectives: int = field(metadata={"detail": False})  # collectives on the axis that reach a matmul
    chip_name: str = field(metadata={"detail": False})
    times_are: str = field(metadata={"detail": False})  # 'measured' or 'predicted'
    # where the network across GPU nodes prices the axis: the assumed per-GPU figure, said in the evidence
    network_assumption: str = field(default="", metadata={"detail": False})


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def axis_collectives(analysis) -> pd.DataFrame:
    """The step's bandwidth-bound collectives (done or synchronous ops) with their axis and linked matmuls."""
    ops = analysis.ops
    keep = (ops["in_step"] & ops["collective_kind"].notna() & ~ops["is_async_start"]
            & (ops["collective_bytes"] > 0) & (ops["collective_bandwidth_s"] > 0))
    part = ops[keep].copy()
    try:
        per_hop_limit = latency_threshold_bytes(analysis.chip)
    except ValueError:
        return part.iloc[0:0]
    latency = (part["collective_bound_by"] == "latency") | (part["collective_per_hop_bytes"] < per_hop_limit)
    return part[~latency]


_URL = re.compile(r"[\w.-]+\.(?:com|io|org|dev)(?:/[\w./#-]*)?")


def _source(analysis, field: str) -> str:
    """The public page a chip number comes from (its URL), with any per-device division; else the raw text."""
    text = str(analysis.chip.number_sources.get(field, "chip table"))
    urls = _URL.findall(text)
    if not urls:
        return text
    per_device = re.search(r"÷ \d+ devices per chip", text)
    return urls[-1] + (f" {per_device.group(0)}" if per_device else "")


def _axis(analysis, part: pd.DataFrame) -> dict | None:
    """The axis' numbers, or None when its matmuls can hide it (or none are linked)."""
    ops, chip = analysis.ops, analysis.chip
    linked = part[part["collective_matmuls"].notna()]
    if linked.empty:
        return None
    occ = linked["occurrences_per_step"].fillna(1.0)
    bytes_ = float((linked["collective_bytes"] * occ).sum())
    link_s = float((linked["collective_bandwidth_s"] * occ).sum())
    # Each matmul once per axis, run as often per step as the ops table says.
    names = {(m, p, d) for m, p, dots in zip(linked["module"], linked["program_id"], linked["collective_matmuls"])
             for d in str(dots).split(",")}
    table = ops.set_index(["module", "program_id", "op_name"])
    mm = table.reindex(sorted(names))
    mm_occ = mm["occurrences_per_step"].fillna(0.0)
    flops = float((mm["flops"].fillna(0.0) * mm_occ).sum())
    peak = chip.peak_bf16_flops_per_s
    at_peak_s = flops / peak
    measured_s = float(mm["measured_s_per_step"].fillna(0.0).sum()) if analysis.measured else 0.0
    matmul_s = max(at_peak_s, measured_s)
    intensity, threshold = flops / bytes_, peak * link_s / bytes_
    if intensity >= threshold:
        return None
    exposed = float(linked["exposed_s_per_step"].fillna(0.0).sum())
    unhideable = max(0.0, link_s - matmul_s)
    per_op = [{"op": str(r.op_name), "kind": str(r.collective_kind), "bytes": float(r.collective_bytes),
               "matmul_flops": float(r.collective_matmul_flops),
               "intensity_flops_per_byte": float(r.collective_matmul_flops / r.collective_bytes),
               "threshold_flops_per_byte": float(peak * r.collective_bandwidth_s / r.collective_bytes),
               "matmuls": str(r.collective_matmuls)} for r in linked.itertuples()]
    return {"intensity": intensity, "threshold": threshold, "bytes": bytes_, "link_s": link_s, "flops": flops,
            "matmul_s": matmul_s, "exposed": exposed, "unhideable": unhideable, "ops": per_op,
            "unlinked": int(len(part) - len(linked)), "w": bytes_ / link_s, "linked": linked}


def measure(analysis) -> list[Numbers] | None:
    if analysis.ops.empty or not analysis.chip.peak_bf16_flops_per_s:
        return None
    table = axis_collectives(analysis)
    if table.empty:
        return None
    axes = (_measure_axis(analysis, axis, part) for axis, part in table.groupby("collective_axis", sort=True))
    return [n for n in axes if n is not None]


def _priced(analysis, num: dict, cost: float, fsdp_only: bool, kind: str) -> Priced:
    peak = analysis.chip.peak_bf16_flops_per_s
    linked = num["linked"].sort_values("collective_bytes", ascending=False)
    exposed = linked["exposed_s_per_step"].fillna(0.0)
    share = cost / num["exposed"] if num["exposed"] > 0 else 0.0
    ops = tuple(OpEvidence(str(r.op_name), float(e),
                           float_or_none(r.predicted_s_per_step),
                           f"{r.collective_kind} of {format_bytes(r.collective_bytes)}: "
                           f"{r.collective_matmul_flops / r.collective_bytes:,.0f} FLOPs/B vs "
                           f"{peak * r.collective_bandwidth_s / r.collective_bytes:,.0f}")
                for r, e in zip(linked.head(10).itertuples(), exposed.head(10)))
    return Priced(
        time_s_per_step=cost, est_savings_s_per_step=cost, step_s=analysis.step_s,
        confidence="low" if not analysis.measured or analysis.platform == "cpu" else "medium",
        ops=ops, claims=op_claims(linked, exposed * share), kind=kind,
        lever=("more tokens per device (a bigger per-device batch)" if fsdp_only else
               "more compute per byte over the axis (fewer tensor- or expert-parallel ways, more tokens)"),
        benefit="throughput" if fsdp_only else "step_time")


def _measure_axis(analysis, axis, part: pd.DataFrame) -> Numbers | None:
    num = _axis(analysis, part)
    if num is None:
        return None
    step_s, chip = analysis.step_s, analysis.chip
    cost = min(num["exposed"], num["unhideable"])
    if analysis.measured and not (step_s > 0 and cost / step_s >= MIN_FRACTION):
        return None
    kinds = sorted(set(part["collective_kind"].astype(str)))
    # FSDP gathers and reductions hide only behind more tokens per device: a throughput lever.
    fsdp_only = set(kinds) <= set(_FSDP_KINDS)
    y = int(part["replica_group_size"].dropna().mode().iloc[0]) if part["replica_group_size"].notna().any() \
        else analysis.num_devices
    shortfall = num["threshold"] / num["intensity"] if num["intensity"] > 0 else float("inf")
    model = str(part["collective_model"].dropna().iloc[0]) if part["collective_model"].notna().any() else ""
    link_source = f"{_source(analysis, 'ici_link_bytes_per_s_oneway')}; {model.split('; ')[0]}".strip("; ")
    return Numbers(
        axis=str(axis), group_size=y, kinds=kinds,
        intensity_flops_per_byte=num["intensity"], threshold_flops_per_byte=num["threshold"],
        shortfall=shortfall if math.isfinite(shortfall) else None,
        peak_flops_per_s=float(chip.peak_bf16_flops_per_s), peak_source=_source(analysis, "peak_bf16_flops_per_s"),
        axis_bytes_per_s=num["w"], link_source=link_source, bytes_per_step=num["bytes"],
        matmul_flops_per_step=num["flops"], link_s_per_step=num["link_s"],
        matmul_s_per_step=num["matmul_s"], exposed_s_per_step=num["exposed"],
        unhideable_s_per_step=num["unhideable"], collectives_without_matmul=num["unlinked"],
        ops=num["ops"], priced=_priced(analysis, num, cost, fsdp_only, axis_kind(axis)),
        collectives=len(num["linked"]), chip_name=chip.name, times_are=times_are(analysis),
        network_assumption=network_assumption(chip, part))


def title(n: Numbers) -> str:
    return (f"{'/'.join(n.kinds)} over {n.group_size} devices: {n.intensity_flops_per_byte:,.0f} FLOPs per byte, "
            f"below the {n.threshold_flops_per_byte:,.0f} that hides them")


def evidence(n: Numbers) -> str:
    step_s = n.priced.step_s
    times = "" if n.times_are == "measured" else " (no trace: times are predicted)"
    shortfall_text = f"{n.shortfall:,.0f}x" if n.shortfall is not None else "infinitely"
    text = (
        f"{n.collectives} {'/'.join(n.kinds)} collectives over {n.axis} (groups of {n.group_size}) move "
        f"{format_bytes(n.bytes_per_step)} per step against {format_si(n.matmul_flops_per_step, 'FLOP')} of the "
        f"matmuls they feed or follow: {n.intensity_flops_per_byte:,.0f} FLOPs per byte, {shortfall_text} below the "
        f"{n.threshold_flops_per_byte:,.0f} (C / W) that hides them on {n.chip_name}, with C = "
        f"{format_si(n.peak_flops_per_s, 'FLOP/s')} ({n.peak_source}) and W = {format_si(n.axis_bytes_per_s, 'B/s')} "
        "over this axis "
        f"(ring model: {n.link_source}). The transfers need {format_seconds(n.link_s_per_step)} per step, the "
        f"matmuls take {format_seconds(n.matmul_s_per_step)}{times}: {format_seconds(n.unhideable_s_per_step)} "
        f"cannot hide; {format_seconds(n.exposed_s_per_step)} is exposed now "
        f"({format_percent(n.exposed_s_per_step / step_s if step_s > 0 else np.nan)} of the "
        f"{format_seconds(step_s)} step).")
    if n.collectives_without_matmul:
        text += f" {n.collectives_without_matmul} more collectives on the axis reach no matmul and are not counted."
    if n.network_assumption:
        text += f" W crosses nodes: it {n.network_assumption}."
    return text


def fix(n: Numbers, t: Target) -> str:
    fw = fwl.other(t)
    kinds, y = n.kinds, n.group_size
    k = math.ceil(n.shortfall if n.shortfall is not None else float("inf"))
    parts = []
    if any(kd in _FSDP_KINDS for kd in kinds):
        parts.append(
            f"If these gather FSDP-sharded weights (and reduce-scatter their gradients), the compute per byte is "
            f"the tokens per device: raise {fwl.key(fw, 'per_device_batch_size')} at least {k}x (a throughput "
            "lever: each "
            f"step does {k}x the tokens and the transfer hides behind them; the step itself gets longer), or "
            f"shard the weights over fewer devices: lower {fwl.key(fw, 'ici_fsdp_parallelism')} and raise "
            f"{fwl.key(fw, 'ici_data_parallelism')} by the same factor where HBM holds the larger shards. For MoE the "
            f"tokens per device count divided by the sparsity ({fwl.key(fw, 'num_experts')} / "
            f"{fwl.key(fw, 'num_experts_per_tok')}).")
    if "all-reduce" in kinds:
        fewer = max(y // k, 1)
        parts.append(
            f"If these all-reduce a tensor-parallel layer's output (group of {y}), the compute per byte is "
            f"MLP width / TP: lower {fwl.key(fw, 'ici_tensor_parallelism')} to at most {fewer} (or widen "
            f"{fwl.key(fw, 'base_mlp_dim')}); if they reduce data-parallel gradients, the per-device batch is the "
            "lever: "
            f"{fwl.key(fw, 'per_device_batch_size')} at least {k}x.")
    if "all-to-all" in kinds:
        parts.append(f"If these all-to-alls dispatch MoE tokens (expert parallelism, compute per byte about "
                     f"4 x MLP width / EP), lower {fwl.key(fw, 'ici_expert_parallelism')} to at most {max(y // k, 1)}.")
    if "collective-permute" in kinds and not parts:
        parts.append(f"Raise the compute per transfer: {fwl.key(fw, 'per_device_batch_size')} at least {k}x.")
    if target(t.platform, t.chip) == "cpu":
        parts.append("On this host C and W are the placeholder chip's; the compute per byte holds on the "
                     "accelerator: analyse the HLO dump with --hlo-dir DIR --chip NAME to judge it against that "
                     "chip's C / W.")
    return " ".join(parts)
