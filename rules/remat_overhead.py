"""Recomputation in the backward pass, and whether a lighter remat policy fits in memory.

What it finds:
    Ops the backward pass recomputes: XLA's rematerialization clones (`.remat`, `.remat2` in the op name)
    and `jax.checkpoint` recomputation (`rematted_computation` in the op's JAX name path, the trace's
    `tf_op` or the dump's `op_name`): their time per step, share of the step and share of the FLOPs.
Why it costs time:
    Recomputed ops redo forward work to save HBM. A full policy costs about 25-30 % extra FLOPs per
    transformer block; when the step is compute-bound that is 25-30 % more step time, and if HBM has room
    to keep the activations the recomputation buys nothing.
How the cost is estimated:
    Cost = measured seconds per step of the recomputed ops (predicted without a trace, confidence low).
    Recomputation is checked against the forward pass: a `jax.checkpoint` op counts only while the step
    holds as many forward ops of its kind (opcode, result bytes, FLOPs for a matmul) as recomputed ones;
    beyond that XLA's CSE merged the recomputation back into the forward pass and only the name is left.
    The saving is what the named policy keeps: the recomputed matmuls when they are most of the time (a
    dots-saving policy still recomputes the elementwise ops), else every recomputed op, never a
    collective (re-gathering FSDP weights is the point of FSDP), minus the cost of keeping those outputs:
    one write at HBM bandwidth (the backward reads them either way; the forward's copy may have been fused
    away). Headroom = chip HBM capacity minus the peak of the
    analysed module's HLO memory-usage report when the dump has one; when the kept outputs do not fit,
    only those that fit count, most seconds per byte first. Confidence is low when the step is not
    compute-bound.
Fix:
    A lighter policy: MaxText `remat_policy` full -> save_qkv_proj -> save_dot_except_mlp ->
    save_dot_with_context_except_mlp -> minimal (each keeps more activations than the one before), or
    `custom` with per-tensor 'device' / 'offload'; with `jax.checkpoint`, a policy such as
    `jax.checkpoint_policies.dots_with_no_batch_dims_saveable`. When HBM is short, offload the largest
    saved activations to host memory instead of recomputing them.
Details:
    remat_s_per_step (s): seconds per step of the recomputed ops (the finding's cost)
    remat_ops (count): recomputed scheduled ops
    remat_instructions_in_dump (count): instructions under recomputation in the HLO dump, fused ones included
    remat_flops_per_step (flops): FLOPs per step of the recomputed ops
    extra_flops_fraction (fraction or null): those FLOPs over the rest of the step's
    extra_hbm_bytes (bytes): HBM per device needed to keep their outputs instead
    hbm_capacity_bytes (bytes or null): the chip's HBM capacity
    peak_memory_bytes (bytes or null): peak of the module's memory-usage report, when the dump has one
    hbm_headroom_bytes (bytes or null): capacity minus peak; null when unknown
    step_bound_by (text): what bounds the step: `compute`, `memory`, `collective`, `host_transfer`, `unknown`
    matmul_share_of_remat (fraction): share of the recomputed time outside collectives in convolutions and matmuls
    ops_that_fit (list): names of the recomputed ops whose outputs fit in the headroom
    times_are (text): `measured` or `predicted`
    unverified_ops (count): ops named as recomputation with no forward op of their kind left (merged by CSE)
    keep_cost_s_per_step (s): HBM time per step to write the outputs the policy keeps
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

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
    seconds_per_step,
    times_are,
)
from .levers import name

RULE_ID = "remat-overhead"
PRECEDENCE = 3  # the op is forward work done again; its fix (keep the result) removes it
FULL_POLICY_EXTRA_FLOPS = (0.25, 0.30)
# MaxText remat presets from least kept to most: each saves the names of the one before plus more
# (decoders.py: qkv projections; + out_proj; + attention context; minimal = every dot without batch dims).
REMAT_LADDER = ("full", "save_qkv_proj", "save_dot_except_mlp", "save_dot_with_context_except_mlp", "minimal")


@dataclass(frozen=True)
class Numbers:
    remat_s_per_step: float  # s
    remat_ops: int  # count
    remat_instructions_in_dump: int  # count
    remat_flops_per_step: float  # flops
    extra_flops_fraction: float | None  # fraction
    extra_hbm_bytes: float  # bytes
    hbm_capacity_bytes: float | None  # bytes
    peak_memory_bytes: float | None  # bytes
    hbm_headroom_bytes: float | None  # bytes
    step_bound_by: str
    matmul_share_of_remat: float  # fraction
    ops_that_fit: list
    times_are: str
    unverified_ops: int  # count
    keep_cost_s_per_step: float  # s
    priced: Priced
    kept_bytes: float = field(metadata={"detail": False})  # output bytes of the ops that fit
    recomputed_collectives: int = field(metadata={"detail": False})  # e.g. FSDP all-gathers done again
    # One sentence naming the largest buffers at the memory peak (memory_at_peak); '' without a buffer assignment.
    largest_buffers: str = field(default="", metadata={"detail": False})


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def largest_buffers(analysis) -> str:
    """The sentence naming the largest buffers at the analysed program's memory peak ('' without one)."""
    peak = analysis.dump.memory_at_peak
    return peak.sentence() if peak is not None else ""


def peak_memory_bytes(analysis) -> float | None:
    """Peak (default memory space) of the analysed program's HLO memory-usage report, as the analysis read it."""
    return analysis.dump.peak_memory_bytes


def recomputed_ops(analysis):
    """The step's recomputed ops with ``time_s`` (measured, else predicted, per step) and ``bytes`` (their outputs
    per step: what keeping them instead of recomputing needs in HBM)."""
    ops = analysis.ops
    remat = ops[ops["in_step"] & ops["is_recomputed"]].copy()
    remat["time_s"] = seconds_per_step(remat, analysis)
    remat["bytes"] = remat["result_bytes"] * remat["occurrences_per_step"].fillna(1.0)
    return remat


def outputs_that_fit(remat, headroom: float | None):
    """The rows of ``remat`` whose outputs HBM can keep: all of them (``remat`` itself) when they fit or the
    headroom is unknown, else a greedy pick, most recomputation seconds per byte first."""
    if headroom is None or float(np.nansum(remat["bytes"])) <= headroom:
        return remat
    by_value = remat.assign(rate=remat["time_s"] / remat["bytes"]).sort_values("rate", ascending=False)
    room, keep = max(headroom, 0.0), []
    for index, nbytes in by_value["bytes"].items():  # a few hundred ops at most
        if not is_nan(nbytes) and nbytes <= room:
            keep.append(index)
            room -= nbytes
    return by_value.loc[keep]


def _bound(analysis) -> str:
    b = analysis.breakdown or {}
    kinds = ("compute", "memory", "collective", "host_transfer")
    if analysis.platform == "cpu":  # a CPU collective's time is threads waiting for each other, not transfer
        kinds = ("compute", "memory", "host_transfer")
    buckets = {k: b.get(k, 0.0) for k in kinds}
    return max(buckets, key=buckets.get) if any(buckets.values()) else "unknown"


def verified(analysis, remat) -> pd.Series:
    """Which recomputed ops repeat forward work that still exists. Per kind (opcode, result bytes, and FLOPs
    for a matmul), as many recomputed ops as the step has forward ops of that kind; XLA's own clones
    (`.remat`) are real by construction."""
    ops = analysis.ops[analysis.ops["in_step"]]

    def kind(df):
        flops = df["flops"].where(df["is_matmul"].astype(bool), -1.0).fillna(-1.0).round()
        return df["opcode"].astype(str) + "|" + df["result_bytes"].fillna(-1).astype(str) + "|" + flops.astype(str)

    forward = kind(ops[~ops["is_recomputed"]]).value_counts()
    mine = kind(remat)
    rank = mine.groupby(mine).cumcount()  # the n-th recomputed op of a kind needs n+1 forward ones
    clone = remat["op_name"].astype(str).str.contains(r"\.remat\d*$")
    return clone | (rank < mine.map(forward).fillna(0))


def policy_saving(analysis, remat, headroom: float | None):
    """What the named policy saves: (kept ops, its candidates, keep cost s, saving s, matmul share, unverified
    count). hbm-headroom prices the same lever with it."""
    computed = remat[remat["collective_kind"].isna()]  # what a policy can keep: collectives are re-done anyway
    matmul_share = _matmul_share(computed, float(computed["time_s"].sum()))
    candidates, unverified = _policy_keeps(analysis, remat, matmul_share)
    kept = outputs_that_fit(candidates, headroom)
    hbm = analysis.chip.hbm_bytes_per_s
    keep_cost = float(np.nansum(kept["bytes"])) / hbm if hbm else 0.0
    savings_s = max(float(kept["time_s"].sum()) - keep_cost, 0.0)
    return kept, candidates, keep_cost, savings_s, matmul_share, unverified


def _policy_keeps(analysis, remat, matmul_share: float):
    """The recomputed ops the named policy stops recomputing: verified, no collectives, only matmuls when
    the fix names a dots-saving policy."""
    real = verified(analysis, remat)  # (once: it ranks every recomputed op)
    keep = real & remat["collective_kind"].isna()
    if matmul_share >= 0.5:
        keep &= remat["category"].astype(str).str.contains("convolution|dot") | remat["is_matmul"].astype(bool)
    return remat[keep], int((~real).sum())


def _flops(analysis, remat) -> tuple[float, float]:
    """FLOPs per step of the recomputed ops, and their share of the rest of the step's (NaN without the rest)."""
    ops = analysis.ops
    flops = (ops["flops"].fillna(0.0) * ops["occurrences_per_step"].fillna(0.0))[ops["in_step"]]
    remat_flops = float(flops[remat.index].sum())
    extra_flops = remat_flops / (flops.sum() - remat_flops) if flops.sum() > remat_flops else np.nan
    return remat_flops, extra_flops


def _matmul_share(remat, time_s: float) -> float:
    """Share of the recomputed time in convolutions and matmuls."""
    if time_s <= 0:
        return 0.0
    is_matmul = remat["category"].astype(str).str.contains("convolution|dot") | remat["is_matmul"]
    return float(remat.loc[is_matmul, "time_s"].sum()) / time_s


def measure(analysis) -> Numbers | None:
    if analysis.ops.empty:
        return None
    remat = recomputed_ops(analysis)
    dump_count = analysis.dump.recomputed_instructions
    if remat.empty and not (not analysis.measured and dump_count):
        return None
    measured = analysis.measured
    time_s = float(remat["time_s"].sum())
    if measured and time_s <= 0:
        return None
    remat_flops, extra_flops = _flops(analysis, remat)
    capacity = analysis.chip.hbm_capacity_bytes
    peak = peak_memory_bytes(analysis)
    headroom = capacity - peak if capacity and peak is not None else None
    bound = _bound(analysis)
    kept, candidates, keep_cost, savings_s, matmul_share, unverified = policy_saving(analysis, remat, headroom)
    top = remat.sort_values("time_s", ascending=False).head(10)
    priced = Priced(
        time_s_per_step=time_s, est_savings_s_per_step=savings_s, step_s=analysis.step_s,
        confidence="low" if not measured or bound != "compute" else ("medium" if headroom is None else "high"),
        ops=tuple(OpEvidence(str(r.op_name), float(r.time_s), float_or_none(r.predicted_s_per_step),
                             str(r.tf_op or "")) for r in top.itertuples()),
        claims=op_claims(remat, remat["time_s"]),
        lever=("a lighter remat policy that keeps the recomputed outputs in HBM" if kept is candidates
               else f"keeping the outputs of the {len(kept)} recomputed ops that fit in HBM"))
    return Numbers(
        remat_s_per_step=time_s, remat_ops=int(len(remat)), remat_instructions_in_dump=dump_count,
        remat_flops_per_step=remat_flops, extra_flops_fraction=float_or_none(extra_flops),
        extra_hbm_bytes=float(np.nansum(remat["bytes"])), hbm_capacity_bytes=capacity, peak_memory_bytes=peak,
        hbm_headroom_bytes=headroom, step_bound_by=bound, matmul_share_of_remat=matmul_share,
        ops_that_fit=[str(n) for n in kept["op_name"]], times_are=times_are(analysis), unverified_ops=unverified,
        keep_cost_s_per_step=keep_cost, priced=priced,
        kept_bytes=float(np.nansum(kept["bytes"])), recomputed_collectives=int(remat["collective_kind"].notna().sum()),
        largest_buffers=largest_buffers(analysis))


def _share(n: Numbers) -> float:
    step_s = n.priced.step_s
    return n.remat_s_per_step / step_s if step_s and step_s > 0 else np.nan


def title(n: Numbers) -> str:
    if not n.remat_ops:
        return f"{n.remat_instructions_in_dump} recomputed instructions in the dump (no time predicted)"
    share = _share(n)
    return (f"Recomputation (remat) takes {format_seconds(n.remat_s_per_step)} per step"
            + ("" if is_nan(share) else f" ({share:.0%})"))


def evidence(n: Numbers) -> str:
    """The evidence, then what fills HBM at the peak (the JSON's memory_at_peak) when the dump says it."""
    return _evidence(n) + (f" {n.largest_buffers}" if n.largest_buffers else "")


def _evidence(n: Numbers) -> str:
    time_s, extra, headroom = n.remat_s_per_step, n.extra_flops_fraction, n.hbm_headroom_bytes
    flop_text = (f"; they are {extra:.0%} extra FLOPs on top of the rest of the step (a full policy costs "
                 f"{FULL_POLICY_EXTRA_FLOPS[0]:.0%}-{FULL_POLICY_EXTRA_FLOPS[1]:.0%})" if extra is not None else "")
    mem_text = (f"Keeping their outputs needs about {format_bytes(n.extra_hbm_bytes)} more HBM per device"
                + (f" against {format_bytes(headroom)} free ({format_bytes(n.peak_memory_bytes)} used of "
                   f"{format_bytes(n.hbm_capacity_bytes)} by the memory-usage report)" if headroom is not None
                   else " (HBM headroom unknown: no memory-usage report next to the HLO dump)"))
    kept_text = (f" The named policy stops recomputing {len(n.ops_that_fit)} of them; keeping their outputs costs "
                 f"~{format_seconds(n.keep_cost_s_per_step)} per step of HBM traffic (one more write each), "
                 f"so it saves ~{format_seconds(n.priced.est_savings_s_per_step)}."
                 + (f" {n.unverified_ops} ops named as recomputation repeat no forward op left in the step "
                    "(XLA's CSE merged them back): not counted." if n.unverified_ops else ""))
    if n.times_are == "measured":
        return (f"{n.remat_ops} recomputed ops take {format_seconds(time_s)} per step "
                f"({format_percent(_share(n))} of the {format_seconds(n.priced.step_s)} step){flop_text}. "
                f"The step is {n.step_bound_by}-bound. {mem_text}.{kept_text}")
    if n.remat_ops:
        return (f"The dump holds {n.remat_instructions_in_dump} instructions under recomputation; the "
                f"{n.remat_ops} scheduled ones are predicted (no trace: times are predicted, not measured) to take "
                f"{format_seconds(time_s)} per step{flop_text}. {mem_text}.")
    return (f"The dump holds {n.remat_instructions_in_dump} instructions under recomputation (no trace: times are "
            "predicted, not measured), but none is a scheduled op of its own: they sit inside fusions or in "
            "computations the dump's scheduled ops do not reach (a truncated dump?), so no time is "
            "predicted for them.")


def _lighter_policy(n: Numbers) -> str:
    ladder = " -> ".join(name(p) for p in REMAT_LADDER)
    return (f"Use a lighter remat policy (needs ~{format_bytes(n.extra_hbm_bytes)} more HBM per device): MaxText "
            f"{name('remat_policy')} {ladder} (each keeps more activations than the one before), stopping at "
            f"the first that fits; with {name('jax.checkpoint')}, policy="
            + (f"{name('jax.checkpoint_policies.dots_with_no_batch_dims_saveable')} (matmuls are "
               f"{n.matmul_share_of_remat:.0%} of the recomputed time)." if n.matmul_share_of_remat >= 0.5
               else f"{name('jax.checkpoint_policies.save_only_these_names')}(...) for the recomputed "
               f"activations ({name('checkpoint_name')} them)."))


def _save_and_offload(n: Numbers, pcie: float) -> str:
    extra_bytes = n.extra_hbm_bytes
    rest_bytes = extra_bytes - n.kept_bytes
    return (f"HBM cannot hold all recomputed outputs ({format_bytes(extra_bytes)} needed, "
            f"{format_bytes(max(n.hbm_headroom_bytes, 0))} free): save the {len(n.ops_that_fit)} ops worth most "
            f"seconds per byte (MaxText {name('remat_policy')}='{name('custom')}' with those tensors set to "
            f"'device'), and offload the rest ('offload', or {name('remat_policy')}='{name('minimal_offloaded')}'; "
            f"jax: {name('jax.checkpoint_policies.save_and_offload_only_these_names')}(..., {name('offload_src')}="
            f"'device', {name('offload_dst')}='{name('pinned_host')}'))"
            + (f": the PCIe round trip of the rest takes ~{format_seconds(2 * rest_bytes / pcie)} per step and "
               "must overlap compute." if pcie else "."))


def fix(n: Numbers, target: Target) -> str:
    bound = n.step_bound_by
    text = (f"The step is {bound}-bound, so recomputation is not what limits it; keep the policy unless "
            "profiling after the other fixes shows compute-bound steps. "
            if bound not in ("compute", "unknown") and n.times_are == "measured" else "")
    fsdp = (f" Keep the {n.recomputed_collectives} recomputed collectives out of what the policy saves (leave "
            "all-gathered FSDP weights unnamed): holding gathered weights is what FSDP trades away for memory, and "
            "re-gathering them is cheap beside it." if n.recomputed_collectives else "")
    fw = fwl.other(target)
    if fw:
        return text + (f"Recompute less (needs ~{format_bytes(n.extra_hbm_bytes)} more HBM per device to keep it "
                       f"all): {fwl.recompute(fw)}, starting with the blocks whose recomputation is mostly matmuls, "
                       "and stop where HBM runs out." + fsdp)
    if n.hbm_headroom_bytes is None or n.extra_hbm_bytes <= n.hbm_headroom_bytes:
        return text + _lighter_policy(n) + fsdp
    return text + _save_and_offload(n, target.chip.pcie_bytes_per_s) + fsdp
