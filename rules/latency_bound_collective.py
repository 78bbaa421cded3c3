"""Collectives so small that hop latency, not bandwidth, sets their time.

What it finds:
    Collectives (all-gathers listed first) whose per-hop payload is below the latency threshold W1 x T_min
    of the interconnect (TPU v5e: 45 kB, v6e: 90 kB), so each costs about hops x T_min whatever its size:
    their count per step, their total time, and the time the same bytes would take as one collective per
    kind and replica group. Without a trace the payloads are classified from the HLO alone.
Why it costs time:
    A ring collective over N devices takes N-1 (or N/2) hops; below the threshold each hop costs its
    latency, so sixteen 128 kB gathers cost sixteen times what one 2 MB gather costs.
How the cost is estimated:
    Cost = measured seconds per step of the latency-bound collectives (done and synchronous ops plus the
    start ops that carry time on GPU; predicted time without a trace, confidence low). Savings = cost minus
    the predicted time of one combined collective per (kind, replica group) carrying their summed bytes
    on the same mesh axes (the members' own collective model), never below zero, and never more than the
    (k - 1) fixed costs combining folds away (the members' modelled latency): waiting for slower peers stays.
    Only collectives of one computation run as often per step merge (one per loop iteration inside a scan:
    iterations cannot merge; different loop bodies or branches neither); a lone one saves nothing (its own
    time stays); with nothing to merge, no finding. On a CPU host (threads sharing cores) the placeholder
    chip's latency says nothing and wait cannot be told from fixed cost: the first bound only, confidence low.
Fix:
    Combine them: raise XLA's combiner thresholds (GPU `--xla_gpu_all_gather_combine_threshold_bytes`,
    `--xla_gpu_reduce_scatter_combine_threshold_bytes`, `--xla_gpu_all_reduce_combine_threshold_bytes`);
    bucket small parameters into one array per layer; or replicate arrays too small to be worth sharding.
Details:
    latency_threshold_bytes (bytes): per-hop payload below which a hop costs its latency (W1 x T_min)
    latency_bound_count_per_step (count): latency-bound collectives per step
    latency_bound_s_per_step (s): their seconds per step (the finding's cost)
    combined_predicted_s_per_step (s): seconds per step with the groups combined: predicted for what merges
        (one collective per kind, group and loop iteration), a lone collective's own time
    classified (object): `latency` and `bandwidth`: how many modelled collectives fall on each side
    groups (list): per (kind, replica group): `kind`, `replica_group_size`, `count_per_step`,
        `time_s_per_step`, `bytes_per_step`, `combined_predicted_s`, `combined_bound_by`
    times_are (text): `measured` or `predicted`
    ops (list): per latency-bound op: `op`, `kind`, `bytes`, `per_hop_bytes`, `s_per_step`
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pandas as pd

from ..analyzer.models.collective_pricing import network_assumption
from ..analyzer.models.collectives import KINDS, latency_threshold_bytes, link_label, predict_collective
from ..units import format_number
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
    is_nan,
    op_claims,
    times_are,
)
from .collective_levers import GPU_COMBINE_FLAG, gpu_combine
from .levers import name
from .levers import target as advice_for

RULE_ID = "latency-bound-collective"
PRECEDENCE = 2  # the op is too small for its link; its fix (combine) changes the op
MIN_FRACTION = 0.005


@dataclass(frozen=True)
class Numbers:
    latency_threshold_bytes: float  # bytes
    latency_bound_count_per_step: float  # count
    latency_bound_s_per_step: float  # s
    combined_predicted_s_per_step: float  # s
    classified: dict
    groups: list  # per (kind, replica group), all-gathers first, then most time first
    times_are: str
    ops: list
    priced: Priced
    chip: str = field(metadata={"detail": False})  # the chip's name
    combine_bytes: dict = field(metadata={"detail": False})  # per kind with a GPU combiner flag: largest group
    replicate_below_bytes: int = field(metadata={"detail": False})  # arrays smaller gain nothing from sharding
    cpu: bool = field(metadata={"detail": False})  # priced on a CPU host (threads sharing its cores)
    # where the network across GPU nodes prices the combined collectives: the assumed per-GPU figure
    network_assumption: str = field(default="", metadata={"detail": False})


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def classify_collectives(analysis) -> pd.DataFrame:
    """Every modelled collective of the step (done or synchronous op) with its per-hop payload and class."""
    ops = analysis.ops
    keep = ops["in_step"] & ops["collective_kind"].notna() \
        & ~ops["is_async_start"] & (ops["collective_bytes"].astype(float) > 0)
    out = ops.loc[keep, ["module", "program_id", "op_name", "collective_kind", "replica_group_size",
                         "collective_bytes", "collective_per_hop_bytes", "collective_bound_by", "collective_model",
                         "collective_predicted_s", "collective_bandwidth_s", "collective_latency_s",
                         "occurrences_per_step", "measured_s_per_step", "predicted_s_per_step", "start_op_id",
                         "tf_op", "hlo_computation"]].copy()
    threshold = latency_threshold_bytes(analysis.chip)
    per_hop = out["collective_per_hop_bytes"].astype(float)
    out["latency_bound"] = (per_hop < threshold) | (out["collective_bound_by"] == "latency")
    if analysis.measured:
        # An async collective's time is its done wait plus its start (GPU: the start kernel moves the data).
        start_s = ops.loc[ops["op_id"] >= 0].set_index("op_id")["measured_s_per_step"]
        extra = start_s.reindex(out["start_op_id"].to_numpy()).to_numpy(dtype=float)
        out["start_s"] = np.nan_to_num(extra)
        out["time_s"] = out["measured_s_per_step"].fillna(0.0) + out["start_s"]
    else:
        out["start_s"] = 0.0
        out["time_s"] = out["predicted_s_per_step"].fillna(0.0)
    return out


def _claims(analysis, bound: pd.DataFrame):
    """The done (or synchronous) ops with their own time, and the start ops that carry time."""
    starts = bound[bound["start_op_id"].fillna(-1).astype(int) >= 0]
    by_id = analysis.ops.loc[analysis.ops["op_id"] >= 0].drop_duplicates("op_id").set_index("op_id")
    start_ops = by_id.reindex(starts["start_op_id"].astype(int))
    return (op_claims(bound, bound["time_s"] - bound["start_s"])
            + op_claims(start_ops, starts["start_s"]))


def _combined(group: pd.DataFrame, kind: str, chip):
    """One collective carrying the group's summed bytes, on the same mesh as its members (their own model:
    the bandwidth time grows with the bytes, the hops stay); the ring model when the columns are missing."""
    size = int(group["replica_group_size"].iloc[0])
    occurrences = group["occurrences_per_step"].fillna(1.0)
    total = float((group["collective_bytes"].astype(float) * occurrences).sum())
    bandwidth_s = float((group["collective_bandwidth_s"].astype(float) * occurrences).sum())
    latency_s = float(group["collective_latency_s"].astype(float).max())
    if np.isfinite(bandwidth_s) and np.isfinite(latency_s):
        links = [b for b in group["collective_bound_by"].dropna() if b != "latency"]
        # latency-bound members say no link: theirs is the network when they cross GPU nodes
        across = group["collective_model"].astype(str).str.contains("across nodes")
        link = links[0] if links else ("network" if across.any() else link_label(chip))
        bound = link if bandwidth_s >= latency_s else "latency"
        return SimpleNamespace(predicted_s=max(bandwidth_s, latency_s), bound_by=bound), total, size
    try:
        return predict_collective(kind, total, size, chip), total, size
    except ValueError:
        return None, total, size


def _kept_s(part: pd.DataFrame, kind: str, chip, cpu: bool) -> tuple[float, float, bool]:
    """Seconds per step left once the group is combined (predicted), what combining saves, and whether anything
    merges. Collectives of one
    computation run as often per step (the step's own, or one loop body's) merge into one per run; runs of a
    loop body are iterations that cannot merge with each other, collectives of different computations (loop
    bodies, branches) neither, and a lone collective has nothing to merge with. Combining removes the fixed cost
    of each collective it folds away (launch, synchronisation, hops x latency: the members' modelled latency),
    not the time spent waiting for slower peers: the saving is at most (k - 1) x that cost. On a CPU host the
    chip's latency is a placeholder: the measured time less the combined one is kept there (see the evidence)."""
    kept, saved, merges = 0.0, 0.0, False
    runs = part["occurrences_per_step"].fillna(1.0).round().clip(lower=1.0)
    where = part["hlo_computation"].astype(object).where(part["hlo_computation"].notna(), "")
    for (n, _), same in part.groupby([runs, where]):
        time_s = float(same["time_s"].sum())
        if len(same) < 2:
            kept += time_s
            continue
        pred, _, _ = _combined(same.assign(occurrences_per_step=1.0), kind, chip)
        left = n * pred.predicted_s if pred is not None else 0.0
        fixed = same["collective_latency_s"].astype(float).fillna(0.0)
        folded_s = n * float(fixed.sum() - fixed.max())  # (k - 1) fixed costs per run
        kept += left
        saved += max(0.0, time_s - left if cpu else min(time_s - left, folded_s))
        merges = True
    return kept, saved, merges


def _groups(bound: pd.DataFrame, chip, cpu: bool) -> tuple[list, float, float, bool]:
    """Per (kind, replica group), all-gathers first: its numbers; the seconds per step left once each is
    combined; what combining saves; and whether anything merges at all."""
    groups, combined_s, saved_s, mergeable = [], 0.0, 0.0, False
    rank = {k: i for i, k in enumerate(KINDS)}
    by_group = dict(list(bound.groupby(["collective_kind", "replica_group_size"])))
    for kind, size in sorted(by_group, key=lambda k: (rank.get(k[0], 9), -by_group[k]["time_s"].sum())):
        part = by_group[(kind, size)]
        pred, total, n = _combined(part, kind, chip)
        one_s, saved, can_merge = _kept_s(part, kind, chip, cpu)
        mergeable |= can_merge
        saved_s += saved
        combined_s += 0.0 if is_nan(one_s) else one_s
        groups.append({"kind": kind, "replica_group_size": n,
                       "count_per_step": float(part["occurrences_per_step"].sum()),
                       "time_s_per_step": float(part["time_s"].sum()), "bytes_per_step": total,
                       "combined_predicted_s": float_or_none(one_s),
                       "combined_bound_by": pred.bound_by if pred is not None else None})
    return groups, combined_s, saved_s, mergeable


def _combine_bytes(groups: list) -> dict:
    """One GPU combiner flag per kind: a threshold as large as the largest group of that kind lets every group
    combine."""
    largest: dict[str, int] = {}
    for g in groups:
        if g["kind"] in GPU_COMBINE_FLAG:
            largest[g["kind"]] = max(largest.get(g["kind"], 0), int(g["bytes_per_step"]))
    return largest


def measure(analysis) -> Numbers | None:
    if analysis.ops.empty:
        return None
    chip = analysis.chip
    try:
        threshold = latency_threshold_bytes(chip)
    except ValueError:  # an unknown accelerator: no link bandwidth to tell latency-bound hops by
        return None
    table = classify_collectives(analysis)
    bound = table[table["latency_bound"]]
    if bound.empty:
        return None
    step_s = analysis.step_s
    time_s = float(bound["time_s"].sum())
    if analysis.measured and not (step_s > 0 and time_s / step_s >= MIN_FRACTION):
        return None
    cpu = advice_for(analysis.platform, chip) == "cpu"
    groups, combined_s, saved_s, mergeable = _groups(bound, chip, cpu)
    if not mergeable:
        return None
    top = bound.sort_values("time_s", ascending=False).head(10)
    priced = Priced(
        time_s_per_step=time_s, est_savings_s_per_step=saved_s, step_s=step_s,
        # A CPU host cannot tell a collective's waiting (peers' skew) from its fixed cost: low confidence.
        confidence="low" if not analysis.measured or cpu else "high",
        ops=tuple(OpEvidence(str(r.op_name), float(r.time_s), float_or_none(r.predicted_s_per_step),
                             f"{r.collective_kind} of {int(r.collective_bytes):,} B over {int(r.replica_group_size)}, "
                             f"{int(r.collective_per_hop_bytes):,} B per hop") for r in top.itertuples()),
        lever="combining them into one collective per kind and replica group", claims=_claims(analysis, bound))
    return Numbers(
        latency_threshold_bytes=threshold, latency_bound_count_per_step=float(bound["occurrences_per_step"].sum()),
        latency_bound_s_per_step=time_s, combined_predicted_s_per_step=combined_s,
        classified={"latency": int(len(bound)), "bandwidth": int(len(table) - len(bound))},
        groups=groups, times_are=times_are(analysis),
        ops=[{"op": str(r.op_name), "kind": r.collective_kind, "bytes": float(r.collective_bytes),
              "per_hop_bytes": float(r.collective_per_hop_bytes), "s_per_step": float(r.time_s)}
             for r in bound.itertuples()],
        priced=priced, chip=chip.name, combine_bytes=_combine_bytes(groups), cpu=cpu,
        replicate_below_bytes=int(threshold * max(g["replica_group_size"] for g in groups)),
        network_assumption=network_assumption(chip, pd.DataFrame(
            {"collective_bound_by": [g.get("combined_bound_by") for g in groups]})))


def title(n: Numbers) -> str:
    return (f"{n.latency_bound_count_per_step:.0f} latency-bound collectives: "
            f"{format_seconds(n.latency_bound_s_per_step)} per step")


def evidence(n: Numbers) -> str:
    time_s, step_s, first = n.latency_bound_s_per_step, n.priced.step_s, n.groups[0]
    measured = "" if n.times_are == "measured" else " (no trace: times are predicted, not measured)"
    return (f"{format_number(n.latency_bound_count_per_step)} collectives per step (mean over devices) move under "
            f"{format_bytes(n.latency_threshold_bytes)} per hop (the {n.chip} "
            f"latency threshold) and take {format_seconds(time_s)} per step{measured} "
            f"({format_percent(time_s / step_s if step_s > 0 else np.nan)} of the {format_seconds(step_s)} "
            f"step); the largest group, {format_number(first['count_per_step'])} {first['kind']}s over "
            f"{first['replica_group_size']} devices carrying {format_bytes(first['bytes_per_step'])}, would take "
            f"{format_seconds(first['combined_predicted_s'])} combined. Of "
            f"{n.classified['latency'] + n.classified['bandwidth']} modelled "
            f"collectives, {n.classified['latency']} are latency-bound."
            + (f" Combined, they cross nodes: the saving {n.network_assumption}." if n.network_assumption else "")
            + (" On a CPU host the collectives are thread rendezvous on shared cores: their time mixes fixed cost "
               "with waiting for the slowest thread, which the host cannot tell apart, and combining removes only "
               "the fixed cost: the saving is an upper bound (confidence low)." if n.cpu else ""))


def _combine(n: Numbers, target: Target) -> str:
    """How to make XLA (or the model) combine them, on the chip the fix runs on."""
    sizes = ", ".join(f"{g['kind']} over {g['replica_group_size']}: {int(g['bytes_per_step']):,} B" for g in n.groups)
    where = advice_for(target.platform, target.chip)
    if where == "gpu":
        vendor = "AMD (ROCm) and NVIDIA GPUs alike" if target.chip.vendor == "amd" else "NVIDIA GPUs"
        return (f"Raise XLA's combiner thresholds so these merge (on {vendor}): "
                f"{name('XLA_FLAGS')}='{gpu_combine(n.combine_bytes)}'. Also ")
    if where == "tpu":
        return (f"Let XLA combine them (combined sizes per group: {sizes}); on TPU the combiner thresholds are "
                f"libtpu flags ({name('LIBTPU_INIT_ARGS')}) that the open XLA sources do not document, so also "
                "combine in the model: ")
    return f"Combine them in the model (combined sizes per group: {sizes}): "


def fix(n: Numbers, target: Target) -> str:
    fw = fwl.other(target)
    text = (_combine(n, target) + "gather or reduce the small parameters of a layer as one bucket (e.g. stack norm "
            "scales and biases into one array before sharding, or use one flattened gradient bucket), and inside a "
            + ("layer loop compiled as one loop body" if fw
               else f"scanned layer stack (MaxText {name('scan_layers')}=true)")
            + " collectives of different layers merge only by hoisting them out of the loop (gathering every layer "
              "at once holds all their weights: the memory FSDP exists to save).")
    if target.platform == "cpu":  # the threshold is the placeholder host's: no size advice for the accelerator
        return text + (" On this host each collective is a thread rendezvous, so fewer of them is what saves time "
                       "here; which array sizes are latency-bound on the accelerator depends on its links, which a "
                       "CPU capture cannot show.")
    how = (fwl.replicate(fw) if fw else
           f"{name('PartitionSpec')}() / a MaxText {name('logical_axis_rules')} entry mapping their axes to no "
           "mesh axis")
    return text + (f" Arrays under about {n.replicate_below_bytes:,} bytes gain nothing from sharding over these "
                   f"groups: replicate them ({how}).")
