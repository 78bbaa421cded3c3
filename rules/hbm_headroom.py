"""How full HBM is at the program's peak, and what the free part could buy: lighter remat or a bigger batch.

What it finds:
    The analysed program's peak device memory, from the HLO dump's memory-usage report (XLA's packed total
    of the default memory space) or, without one, the sum of its buffer-assignment allocations, against
    the chip's HBM capacity per device (chip table, or the trace). One finding: `near-full` when the peak
    is at least 90 % of the capacity (or above it: `over-capacity`), `headroom` when at least 25 % is free.
    Silent on CPU (host memory is not HBM) and without a memory report.
Why it costs time:
    Free HBM is time left on the table when the step recomputes activations (remat) that would fit, or runs a
    batch smaller than the memory allows (fixed per-step costs such as weight all-gathers and the optimizer
    update are spread over fewer samples). A nearly full HBM is the opposite warning: the next larger batch
    or lighter remat policy will not fit, whatever other findings suggest.
How the cost is estimated:
    Headroom = capacity - peak. With recomputed ops in the step (the remat-overhead columns): cost = their
    time per step, savings = what remat-overhead's named policy saves with the outputs that fit in the
    headroom (most seconds per byte first, minus one write of each), counted once with remat-overhead (the
    same ops; remat-overhead keeps them when both fire).
    Without recomputation the lever is a bigger batch: a throughput lever, not priced (0 s; the profile
    cannot tell which time scales with the batch), with the batch growth the headroom allows when
    activations (the buffer assignment's temp allocations that are not live out) scale with it:
    1 + headroom / temp bytes.
    Near-full and over-capacity findings cost and save nothing: they are warnings.
Fix:
    Headroom with remat: a lighter MaxText `remat_policy` (full -> save_qkv_proj -> save_dot_except_mlp ->
    save_dot_with_context_except_mlp -> minimal), or a `jax.checkpoint` policy that saves more; then a
    larger `per_device_batch_size` with what is left. Headroom without remat: raise `per_device_batch_size`
    (keep it a multiple of the MXU rows' needs) and measure throughput. Near-full: do not raise the batch or
    lighten remat; to make room shard more (`ici_fsdp_parallelism`), recompute more
    (`remat_policy`='full') or offload (`minimal_offloaded`).
Details:
    verdict (text): `headroom`, `near-full` or `over-capacity`
    peak_memory_bytes (bytes): the program's peak device memory per device
    peak_source (text): where the peak comes from: `memory-usage report <file>` or `buffer assignment <file>`
    hbm_capacity_bytes (bytes): HBM per device
    capacity_source (text): where the capacity comes from (chip table and its source, the trace, a user file)
    used_fraction (fraction): peak over capacity, at most 1 (`over-capacity` says when the peak exceeds it)
    headroom_bytes (bytes): capacity minus peak, 0 when over capacity
    remat_s_per_step (s): seconds per step of the recomputed ops (0 without remat)
    remat_extra_hbm_bytes (bytes): HBM their outputs need to be kept instead
    remat_s_freed_per_step (s): what the named remat policy saves with the outputs that fit in the headroom
    temp_bytes (bytes or null): the buffer assignment's temp allocations that are not live out (activations and
        scratch); null without a buffer assignment
    batch_growth_limit (count or null): 1 + headroom / temp bytes: how many times the batch could grow if the temp
        bytes scale with it; null without a buffer assignment
    times_are (text): `measured` or `predicted`
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import framework_levers as fwl
from .base import (
    OpEvidence,
    Priced,
    Target,
    compose,
    format_bytes,
    format_percent,
    format_seconds,
    op_claims,
    times_are,
)
from .levers import name
from .remat_overhead import REMAT_LADDER, largest_buffers, policy_saving, recomputed_ops

RULE_ID = "hbm-headroom"
PRECEDENCE = 5  # the same recomputed ops as remat-overhead, which keeps them when both fire
NEAR_FULL = 0.90  # at or above: no room for a bigger batch or a lighter remat policy
LARGE_HEADROOM = 0.25  # at least this share of HBM free: worth spending
KINDS = ("near-full", "headroom")  # the finding's kind (over-capacity is a near-full one)


@dataclass(frozen=True)
class Numbers:
    verdict: str
    peak_memory_bytes: float  # bytes
    peak_source: str
    hbm_capacity_bytes: float  # bytes
    capacity_source: str
    used_fraction: float  # fraction, at most 1
    headroom_bytes: float  # bytes
    remat_s_per_step: float  # s
    remat_extra_hbm_bytes: float  # bytes
    remat_s_freed_per_step: float  # s
    temp_bytes: float | None  # bytes
    batch_growth_limit: float | None  # count
    times_are: str
    priced: Priced
    chip: str = field(metadata={"detail": False})  # the chip's name
    remat_ops: int = field(metadata={"detail": False})  # recomputed ops in the step
    ops_that_fit: int = field(metadata={"detail": False})  # those whose outputs fit in the headroom
    # One sentence naming the largest buffers at the memory peak (memory_at_peak); '' without a buffer assignment.
    largest_buffers: str = field(default="", metadata={"detail": False})


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def _peak(dump) -> tuple[float | None, str]:
    """Peak bytes and where they come from: the memory-usage report, else the buffer assignment's allocations."""
    if dump.peak_memory_bytes is not None:
        return float(dump.peak_memory_bytes), f"memory-usage report {dump.peak_memory_file}".strip()
    if dump.allocated_bytes:
        return float(sum(dump.allocated_bytes.values())), f"buffer assignment {dump.buffer_assignment_file}".strip()
    return None, ""


def _verdict(used: float) -> tuple[str, str]:
    """The verdict and the finding's kind (over-capacity is a near-full one)."""
    if used > 1:
        return "over-capacity", "near-full"
    return ("near-full", "near-full") if used >= NEAR_FULL else ("headroom", "headroom")


def _priced(analysis, verdict: str, kind: str, remat, fit, saving_s: float) -> Priced:
    """Warnings cost nothing; headroom buys back the recomputation that fits, or (nothing recomputed) a bigger
    batch, a throughput lever that is not priced."""
    confidence = "high" if verdict != "headroom" else ("medium" if analysis.measured else "low")
    if verdict != "headroom":
        return Priced(0.0, 0.0, analysis.step_s, confidence, (), kind=kind)
    if not len(remat):
        return Priced(0.0, 0.0, analysis.step_s, confidence, (), kind=kind, benefit="throughput",
                      lever="a bigger per_device_batch_size (more samples per step; not priced)")
    return Priced(
        float(remat["time_s"].sum()), saving_s, analysis.step_s, confidence,
        ops=tuple(OpEvidence(str(r.op_name), float(r.time_s), None) for r in
                  remat.sort_values("time_s", ascending=False).head(10).itertuples()),
        claims=op_claims(remat, remat["time_s"]), kind=kind,
        lever=("a lighter remat policy that keeps the recomputed outputs in the free HBM" if len(fit) == len(remat)
               else f"keeping the outputs of the {len(fit)} recomputed ops that fit in the free HBM"))


def measure(analysis) -> Numbers | None:
    chip = analysis.chip
    capacity = chip.hbm_capacity_bytes
    peak, peak_source = _peak(analysis.dump)
    if chip.vendor == "cpu" or not capacity or peak is None or analysis.ops.empty:
        return None
    used = peak / capacity
    headroom = max(capacity - peak, 0.0)
    if NEAR_FULL > used > 1 - LARGE_HEADROOM:
        return None
    remat = recomputed_ops(analysis)
    fit, _, _, saving_s, _, _ = policy_saving(analysis, remat, headroom)
    temp = analysis.dump.scratch_bytes
    verdict, kind = _verdict(used)
    return Numbers(
        verdict=verdict, peak_memory_bytes=peak, peak_source=peak_source, hbm_capacity_bytes=float(capacity),
        capacity_source=chip.number_sources.get("hbm_capacity_bytes", "chip table"),
        used_fraction=float(min(used, 1.0)), headroom_bytes=headroom, remat_s_per_step=float(remat["time_s"].sum()),
        remat_extra_hbm_bytes=float(np.nansum(remat["bytes"])), remat_s_freed_per_step=saving_s,
        temp_bytes=None if temp is None else float(temp),
        batch_growth_limit=1.0 + headroom / temp if temp else None,  # no scratch: the batch does not fill HBM
        times_are=times_are(analysis), priced=_priced(analysis, verdict, kind, remat, fit, saving_s), chip=chip.name,
        remat_ops=len(remat), ops_that_fit=len(fit), largest_buffers=largest_buffers(analysis))


def _used(n: Numbers) -> float:
    """Peak over capacity, above 1 when over capacity (``used_fraction`` stops at 1)."""
    return n.peak_memory_bytes / n.hbm_capacity_bytes


def title(n: Numbers) -> str:
    peak, capacity, headroom = n.peak_memory_bytes, n.hbm_capacity_bytes, n.headroom_bytes
    if n.verdict == "over-capacity":
        return (f"The program needs {format_bytes(peak)} per device, more than {n.chip}'s {format_bytes(capacity)} "
                "of HBM")
    if n.verdict == "near-full":
        return (f"HBM is {format_percent(_used(n))} full at the program's peak: no room for a bigger batch or "
                "lighter remat")
    if n.remat_ops:
        return (f"{format_bytes(headroom)} of HBM free ({format_percent(1 - _used(n))}) while the step recomputes "
                f"{format_seconds(n.remat_s_per_step)} of activations")
    return (f"{format_bytes(headroom)} of HBM free ({format_percent(1 - _used(n))}): room for a bigger batch "
            "(throughput lever)")


def evidence(n: Numbers) -> str:
    """The evidence, then what fills HBM at the peak (the JSON's memory_at_peak) when the dump says it."""
    return _evidence(n) + (f" {n.largest_buffers}" if n.largest_buffers else "")


def _evidence(n: Numbers) -> str:
    peak, capacity, headroom = n.peak_memory_bytes, n.hbm_capacity_bytes, n.headroom_bytes
    if n.verdict == "over-capacity":
        return (f"The program's peak is {format_bytes(peak)} per device ({n.peak_source}), {_used(n):.0%} of "
                f"{n.chip}'s {format_bytes(capacity)} ({n.capacity_source}): {format_bytes(peak - capacity)} over.")
    memory_text = (f"The program's peak is {format_bytes(peak)} per device ({n.peak_source}) of {n.chip}'s "
                   f"{format_bytes(capacity)} ({n.capacity_source}): {format_percent(min(_used(n), 1.0))} used")
    if n.verdict == "near-full":
        return memory_text + f", {format_bytes(headroom)} free."
    if n.remat_ops:
        measured = "measured" if n.times_are == "measured" else "predicted: no trace"
        return (memory_text + f", {format_bytes(headroom)} free. {n.remat_ops} recomputed ops take "
                f"{format_seconds(n.remat_s_per_step)} per step ({measured}); keeping their outputs needs "
                f"{format_bytes(n.remat_extra_hbm_bytes)}, and those of {n.ops_that_fit} of them "
                f"({format_seconds(n.remat_s_freed_per_step)} per step) fit in the headroom.")
    growth = n.batch_growth_limit
    growth_text = (f"; the activations and scratch (buffer assignment temp: {format_bytes(n.temp_bytes)}) could grow "
                   f"{growth:.1f}x if they scale with the batch" if growth else "")
    return (memory_text + f", {format_bytes(headroom)} free, and nothing is recomputed{growth_text}. A bigger "
            "batch buys throughput, not a shorter step: its gain depends on the per-step time that does not "
            "scale with the batch, which one profile cannot separate, so it is not priced.")


def _other_fix(n: Numbers, fw: str) -> str:
    """The same advice for a PyTorch/XLA or TensorFlow program, in its words."""
    room = (f"shard the weights and optimizer state over more devices "
            f"({fwl.shard_over(fw, 'their largest dimension')}), {fwl.recompute_more(fw)}, or lower {fwl.batch(fw)}")
    if n.verdict == "over-capacity":
        return f"It does not fit on {n.chip} as compiled: {room}."
    if n.verdict == "near-full":
        return (f"Do not raise {fwl.batch(fw)} or recompute less as things are: the step would run out of HBM. "
                f"First {room}.")
    if n.remat_ops:
        return (f"Spend the headroom on recomputation first: {fwl.recompute(fw)}, stopping at the first that fits; "
                f"then raise {fwl.batch(fw)} with what is left and measure the throughput.")
    growth = n.batch_growth_limit
    return (f"Raise {fwl.batch(fw)}" + (f" up to ~{growth:.1f}x" if growth else "")
            + ", keeping the rows a multiple of 128 (else 8), and compare tokens per second per device.")


def fix(n: Numbers, target: Target) -> str:
    if fwl.other(target):
        return _other_fix(n, fwl.other(target))
    if n.verdict == "over-capacity":
        return (f"It does not fit on {n.chip} as compiled: shard it over more devices (MaxText "
                f"{name('ici_fsdp_parallelism')}), recompute more ({name('remat_policy')}='{name('full')}') or "
                f"offload activations ({name('remat_policy')}='{name('minimal_offloaded')}'), or lower "
                f"{name('per_device_batch_size')}.")
    if n.verdict == "near-full":
        return (f"Do not raise {name('per_device_batch_size')} or lighten {name('remat_policy')} as they are: the "
                f"step would run out of HBM. To make room first: shard more (MaxText {name('ici_fsdp_parallelism')}), "
                f"recompute more ({name('remat_policy')}='{name('full')}') or offload activations to host memory "
                f"('{name('minimal_offloaded')}').")
    if n.remat_ops:
        ladder = " -> ".join(name(p) for p in REMAT_LADDER)
        return (f"Spend the headroom on recomputation first: MaxText {name('remat_policy')} {ladder}, stopping at "
                f"the first that fits (with {name('jax.checkpoint')}, a policy that saves more); then raise "
                f"{name('per_device_batch_size')} with what is left and measure the throughput.")
    growth = n.batch_growth_limit
    return (f"Raise MaxText {name('per_device_batch_size')} (in other code, the per-device batch)"
            + (f" up to ~{growth:.1f}x" if growth else "") + ", keeping the rows a multiple of 128 (else 8), and "
            "compare tokens per second per device before and after.")
