"""Communication the step waits for instead of hiding it behind compute.

What it finds:
    Time per step in which a device waits for a transfer: on TPU the `*-done` ops of collectives and
    send/recv, plus synchronous collectives on the op line; on GPU the part of communication kernels that no
    compute kernel on another stream overlaps; on CPU the synchronous collective ops. One finding per kind
    (all-gather, reduce-scatter, all-reduce, all-to-all, collective-permute, send/recv), each op listed
    with the fraction of its time in flight that was hidden. Host-offload copies are `exposed-host-transfer`.
Why it costs time:
    While a done op waits, the core issues no work: the rest of the transfer adds straight to the step.
    A transfer started early enough, behind compute that does not need its result, costs nothing.
How the cost is estimated:
    Cost = exposed seconds per step. Hidden fraction of an async op = 1 - exposed / (start-to-done span),
    both over the device-steps that recorded the spans (a TPU capture may record them on one device only).
    Collectives: savings = what a scheduler flag can hide: at most the cost minus what no schedule hides (the
    kind's transfers need min(predicted, measured) s on their link; what exceeds the step's non-transfer work
    stays exposed) and, with a dump, per op min(exposed, the independent work in its schedule window: ops
    between its producer and first consumer, outside its start..done; analyzer/hlo/schedule.py). A transfer
    consumed at once has none: only a program change hides it (`restructure_s_per_step`, an upper bound, not
    counted). GPU collectives XLA made synchronous (`is_sync`) count as synchronous. Kinds are estimated
    independently. Where the fix is for a CPU (capture or chip), collectives are synchronous rendezvous:
    savings 0, a note. Without a trace the schedule's
    predicted waits stand in for the exposed time (confidence low): what of each transfer the work between its
    start and done does not hide, all of a synchronous one.
Fix:
    By cause. All-gathers of FSDP weights hide once the per-device batch exceeds C/W tokens: raise the
    batch or use fewer FSDP shards. By chip: continuation fusion (async collective fusion) on TPU v4 / v5e /
    v5p / v6e, SparseCore collective offload on TPU7x (its default; the two exclude each other), XLA's
    latency-hiding scheduler and pipelined collectives on NVIDIA and AMD GPUs. Lower the tensor-parallel
    degree when the MLP dimension is below Y*C/W.
Details:
    kind (text): the transfer kind: a collective kind or `send-recv` (also the finding's `kind`)
    platform (text): `tpu`, `gpu`, `cpu` or `hlo`
    exposed_s_per_step (s): seconds per step the device waits for these transfers (the finding's cost)
    in_flight_s_per_step (s or null): start-to-done seconds per step of the async ops; null when none recorded
    hidden_fraction (fraction or null): 1 - exposed / in flight, over the device-steps that recorded spans
    predicted_transfer_s_per_step (s): roofline time per step of the transfers on their link
    measured_transfer_s_per_step (s or null): measured transfer time per step, where the capture shows it
    needed_transfer_s_per_step (s): the least transfer time per step: min of predicted and measured
    compute_s_per_step (s): non-transfer work per step (union of the other ops) that transfers can hide behind
    overlap_recoverable_s_per_step (s): what a better schedule can hide: exposed minus (needed - compute), at most
        the schedule windows' independent work
    schedule_window_s_per_step (s or null): sum over the ops of min(exposed, independent work in its schedule
        window); null without a dump
    restructure_s_per_step (s): what only a program change could hide beyond that (an upper bound, not counted)
    bytes_per_step (bytes): bytes per step the transfers move
    ops (list): per op: `op`, `exposed_s_per_step`, `exposed_where_in_flight_measured_s_per_step`,
        `in_flight_s_per_step`, `hidden_fraction`, `synchronous` (also when XLA made it so: is_sync),
        `independent_work_s_per_step` (the independent work in its schedule window; null without a dump)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..analyzer.models.collective_pricing import network_assumption
from ..analyzer.models.collectives import TRANSFER_KINDS, link_bandwidth
from . import framework_levers as fwl
from .base import (
    OpEvidence,
    Priced,
    Target,
    compose,
    float_or_none,
    format_percent,
    format_seconds,
    is_nan,
    op_claims,
)
from .collective_levers import gpu_overlap, program_change, tpu_overlap
from .levers import name
from .levers import target as advice_for

RULE_ID = "exposed-collective"
PRECEDENCE = 6  # any transfer not hidden: the most generic, it counts only what no other explains
MIN_FRACTION = 0.005  # measured exposure under half a percent of the step is noise, not a finding


@dataclass(frozen=True)
class Numbers:
    kind: str
    platform: str
    exposed_s_per_step: float  # s
    in_flight_s_per_step: float | None  # s
    hidden_fraction: float | None  # fraction
    predicted_transfer_s_per_step: float  # s
    measured_transfer_s_per_step: float | None  # s
    needed_transfer_s_per_step: float  # s
    compute_s_per_step: float  # s
    overlap_recoverable_s_per_step: float  # s
    schedule_window_s_per_step: float | None  # s
    restructure_s_per_step: float  # s
    bytes_per_step: float  # bytes
    ops: list  # per op, most exposed first
    priced: Priced
    measured: bool = field(metadata={"detail": False})  # a trace timed the step
    any_async: bool = field(metadata={"detail": False})  # some op has a start-to-done span
    recording_devices: int = field(metadata={"detail": False})  # devices that recorded async spans
    num_devices: int = field(metadata={"detail": False})
    advice: str = field(metadata={"detail": False})  # `tpu`, `gpu` or `cpu`: what the fix is for
    made_sync: int = field(metadata={"detail": False})  # ops XLA made synchronous (backend_config is_sync)
    no_window: int = field(metadata={"detail": False})  # ops with no independent work in their schedule window
    memory_report: bool = field(metadata={"detail": False})  # the dump tells the peak memory (the headroom)
    offload_fit: float = field(metadata={"detail": False})  # share of the offloaded bytes HBM can hold
    network: str = field(metadata={"detail": False})  # `ici`, `nvlink` or another link (no C/W)
    c_over_w: float | None = field(metadata={"detail": False})  # tokens per device that hide an FSDP gather
    group_size: int = field(metadata={"detail": False})  # Y: the usual replica group of the kind
    # where the network across GPU nodes prices an op: the assumed per-GPU figure, said in the evidence
    network_assumption: str = field(default="", metadata={"detail": False})


def exposure_by_op(ops: pd.DataFrame) -> pd.DataFrame:
    """The step's transfer waits (ops with ``exposed_s_per_step``, analyzer.steps.transfers), most exposed first,
    with short names for the columns this rule reads."""
    part = ops[ops["exposed_s_per_step"].notna()].rename(columns={
        "transfer_kind": "kind", "transfer_is_async": "is_async", "transfer_bytes_per_step": "bytes_per_step",
        "in_flight_s_per_step": "span_s_per_step",
        "exposed_where_in_flight_measured_s_per_step": "exposed_span_devices_s_per_step"})
    return part.sort_values("exposed_s_per_step", ascending=False, kind="stable").reset_index(drop=True)


def _resident_bytes(part: pd.DataFrame) -> float:
    """Bytes the offloaded arrays would hold in HBM: half the bytes moved (each goes out and comes back)."""
    return float(part["bytes_per_step"].fillna(0.0).sum()) / 2


def _offload_fit(analysis, part: pd.DataFrame) -> float:
    """Share of the offloaded bytes HBM can hold (1 when the headroom is unknown: the text says so)."""
    capacity, peak = analysis.chip.hbm_capacity_bytes, analysis.dump.peak_memory_bytes
    need = _resident_bytes(part)
    if not capacity or peak is None or need <= 0:
        return 1.0
    return float(min(1.0, max(capacity - peak, 0.0) / need))


def _c_over_w(chip) -> tuple[str, float | None]:
    """The link and C/W (peak FLOP/s over W: both directions of one torus axis, or a switch port's whole
    bandwidth); None for other links."""
    try:
        network, w = link_bandwidth(chip, both_directions=True)
    except ValueError:
        network, w = "", None
    w = w if network in ("ici", "nvlink") else None
    return network, chip.peak_bf16_flops_per_s / w if w else None


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def measure(analysis) -> list[Numbers] | None:
    return measure_kinds(analysis, host_offload=False)


def measure_kinds(analysis, host_offload: bool) -> list[Numbers] | None:
    """One Numbers per exposed transfer kind: the host-offload kind alone, or every other kind
    (``exposed_host_transfer`` reports the first)."""
    if not len(analysis.ops):
        return None
    exposure = exposure_by_op(analysis.ops)
    if exposure.empty:
        return None
    step_s = analysis.step_s
    out = []
    for kind in sorted(exposure["kind"].unique(), key=lambda k: TRANSFER_KINDS.index(k) if k in TRANSFER_KINDS else 99):
        if (kind == "host-offload") != host_offload:
            continue
        part = exposure[exposure["kind"] == kind]
        exposed_s = float(part["exposed_s_per_step"].sum())
        if analysis.measured and not (step_s > 0 and exposed_s / step_s >= MIN_FRACTION):
            continue
        out.append(_measure_kind(analysis, kind, part, exposed_s))
    return out


def _window_s(part: pd.DataFrame) -> float | None:
    """What a better schedule can hide of the kind by the dump's schedule windows: per op, the smaller of its
    exposed time and the independent work in its window (ops whose window the dump does not tell: all their
    exposed time); None when no op's window is known."""
    exposed, work = part["exposed_s_per_step"].to_numpy(float), part["schedule_independent_s_per_step"].to_numpy(float)
    known = ~np.isnan(work)
    if not known.any():
        return None
    return float(np.where(known, np.minimum(exposed, np.where(known, work, 0.0)), exposed).sum())


def _measure_kind(analysis, kind: str, part: pd.DataFrame, exposed_s: float) -> Numbers:
    transfers = analysis.transfers
    compute_s = transfers.non_transfer_s_per_step
    predicted_s = float(part["predicted_s_per_step"].fillna(0.0).sum())
    measured_s = transfers.busy_s_per_step.get(kind, np.nan)
    needed_s = min([t for t in (predicted_s, measured_s) if not is_nan(t) and t > 0] or [exposed_s])
    any_schedule_s = max(0.0, exposed_s - max(0.0, needed_s - compute_s))  # what any program could hide
    window_s = _window_s(part)
    # A scheduler flag hides no more than the work beside each transfer in its schedule window.
    overlap_s = any_schedule_s if window_s is None else min(any_schedule_s, window_s)
    if advice_for(analysis.platform, analysis.chip) == "cpu":  # synchronous rendezvous: no schedule hides them
        overlap_s = any_schedule_s = 0.0
    fit = _offload_fit(analysis, part) if kind == "host-offload" else 1.0
    # The saving prices the lever the fix leads with: offload less (removes the transfer) or overlap.
    savings_s, lever = ((exposed_s * fit, "keeping the offloaded arrays in HBM")
                        if kind == "host-offload" else (overlap_s, "overlapping them with compute"))
    known = part["span_s_per_step"].notna()
    span_s = float(part.loc[known, "span_s_per_step"].sum()) if known.any() else np.nan
    hidden = 1.0 - float(part.loc[known, "exposed_span_devices_s_per_step"].sum()) / span_s \
        if span_s > 0 else np.nan
    confidence = ("low" if not analysis.measured
                  else "medium" if kind == "host-offload" or analysis.platform == "cpu" else "high")
    priced = Priced(
        time_s_per_step=exposed_s, est_savings_s_per_step=savings_s, step_s=analysis.step_s, confidence=confidence,
        ops=tuple(OpEvidence(str(r.op_name), float(r.exposed_s_per_step), float_or_none(r.predicted_s_per_step),
                             "synchronous" if not r.is_async else
                             "made synchronous (is_sync)" if r.transfer_is_sync else
                             f"{r.hidden_fraction:.0%} of {format_seconds(r.span_s_per_step)} in flight hidden"
                             if not is_nan(r.hidden_fraction) else "async")
                  for r in part.head(10).itertuples()),
        claims=op_claims(part, part["exposed_s_per_step"]), kind=kind, lever=lever)
    group = part["replica_group_size"].dropna()
    network, c_over_w = _c_over_w(analysis.chip)
    return Numbers(
        kind=kind, platform=analysis.platform, exposed_s_per_step=exposed_s, in_flight_s_per_step=float_or_none(span_s),
        hidden_fraction=float_or_none(hidden), predicted_transfer_s_per_step=predicted_s,
        measured_transfer_s_per_step=float_or_none(measured_s), needed_transfer_s_per_step=needed_s,
        compute_s_per_step=compute_s, overlap_recoverable_s_per_step=overlap_s,
        schedule_window_s_per_step=window_s, restructure_s_per_step=max(0.0, any_schedule_s - overlap_s),
        bytes_per_step=float(part["bytes_per_step"].fillna(0.0).sum()),
        ops=[{"op": str(r.op_name), "exposed_s_per_step": float(r.exposed_s_per_step),
              "exposed_where_in_flight_measured_s_per_step": float(r.exposed_span_devices_s_per_step),
              "in_flight_s_per_step": float_or_none(r.span_s_per_step),
              "hidden_fraction": float_or_none(r.hidden_fraction),
              "synchronous": not bool(r.is_async) or bool(r.transfer_is_sync),
              "independent_work_s_per_step": float_or_none(r.schedule_independent_s_per_step)}
             for r in part.itertuples()],
        priced=priced, measured=analysis.measured, any_async=bool(part["is_async"].any()),
        recording_devices=transfers.recording_devices, num_devices=analysis.num_devices,
        advice=advice_for(analysis.platform, analysis.chip), made_sync=int(part["transfer_is_sync"].sum()),
        no_window=int((part["schedule_independent_s_per_step"] <= 0.0).sum()),
        memory_report=analysis.dump.peak_memory_bytes is not None, offload_fit=fit, network=network,
        c_over_w=c_over_w, group_size=int(group.mode().iloc[0]) if len(group) else analysis.num_devices,
        network_assumption=network_assumption(analysis.chip, part))


def title(n: Numbers) -> str:
    label = {"host-offload": "host-offload transfers", "send-recv": "send/recv"}.get(n.kind, n.kind + "s")
    return f"Exposed {label}: {format_seconds(n.exposed_s_per_step)} per step not hidden behind compute"


def _head(n: Numbers) -> str:
    count, noun = len(n.ops), {"host-offload": "host-offload copy", "send-recv": "send/recv"}.get(n.kind, n.kind)
    exposed_s, step_s = n.exposed_s_per_step, n.priced.step_s
    if not n.measured:
        return (f"{count} {noun} ops are predicted (no trace: times are predicted, not measured) to keep the core "
                f"waiting {format_seconds(exposed_s)} per step ({format_percent(exposed_s / step_s)} of the "
                f"{format_seconds(step_s)} predicted step) of the {format_seconds(n.predicted_transfer_s_per_step)} "
                "their transfers take, what the work scheduled while they are in flight does not hide")
    where = (f" on the {n.recording_devices} of {n.num_devices} devices that recorded async spans"
             if n.platform == "tpu" and 0 < n.recording_devices < n.num_devices else "")
    hidden_text = (f", {n.hidden_fraction:.0%} of their {format_seconds(n.in_flight_s_per_step)} in flight "
                   f"hidden{where}" if n.hidden_fraction is not None and n.any_async else "")
    return (f"{count} {noun} op{'s leave' if count != 1 else ' leaves'} {format_seconds(exposed_s)} per step "
            f"exposed ({format_percent(exposed_s / step_s)} of the {format_seconds(step_s)} step){hidden_text}")


def _window_text(n: Numbers) -> str:
    """What the schedule windows hold, when the dump tells them."""
    if n.schedule_window_s_per_step is None:
        return ""
    sync = (f"; {n.made_sync} {'was' if n.made_sync == 1 else 'were'} made synchronous by XLA (backend_config "
            "is_sync: nothing was scheduled beside them)" if n.made_sync else "")
    at_once = (f"; {n.no_window} of the {len(n.ops)} ops {'is' if n.no_window == 1 else 'are'} consumed at once "
               "(no independent work in the window)" if n.no_window else "")
    return (f". In the schedule, {format_seconds(n.schedule_window_s_per_step)} of what is exposed has independent "
            "work beside it (ops between each transfer's producer and its first consumer that neither feed nor "
            f"use it, outside its start..done){at_once}{sync}")


def evidence(n: Numbers) -> str:
    text = _evidence(n)
    return f"{text} Their cross-node time {n.network_assumption}." if n.network_assumption else text


def _evidence(n: Numbers) -> str:
    head, compute_s = _head(n), n.compute_s_per_step
    if n.advice == "cpu":
        return (f"{head}. CPU collectives are synchronous rendezvous: no schedule hides them on this "
                "host, so nothing is counted as recoverable here; how much the accelerator's schedule "
                "would hide, a CPU capture cannot tell.")
    text = (f"{head}; the transfers need at least {format_seconds(n.needed_transfer_s_per_step)} against "
            f"{format_seconds(compute_s)} of non-transfer work per step{_window_text(n)}, so a better schedule can "
            f"recover about {format_seconds(n.overlap_recoverable_s_per_step)}")
    if n.restructure_s_per_step > 0:
        text += (f"; up to {format_seconds(n.restructure_s_per_step)} more only by changing the program (the "
                 "step's other compute, an upper bound)")
    return text + " (the saving counted)."


def _by_cause(n: Numbers, chip, fw: str | None = None) -> str:
    """The advice a cause of the kind implies (FSDP gathers, tensor-parallel reductions), with C/W."""
    if n.kind == "all-gather" and n.c_over_w:
        return (f"If these gather FSDP weights, they hide once the per-device batch exceeds C/W = "
                f"{n.c_over_w:,.0f} tokens on {chip.name} (one mesh axis; over k axes C/(k*W)): raise "
                f"{fwl.batch(fw) if fw else name('per_device_batch_size')}, or shard the weights over fewer "
                "devices (smaller FSDP axis).")
    if n.kind in ("all-reduce", "reduce-scatter") and n.c_over_w:
        link = {"ici": "ICI", "nvlink": {"nvidia": "NVLink", "amd": "Infinity Fabric"}.get(chip.vendor, "GPU-link")
                }.get(n.network, "interconnect")
        return (f"If these are tensor-parallel reductions (group of Y = {n.group_size}), TP is {link}-bound "
                "unless the MLP "
                f"dimension exceeds Y*C/W = {n.group_size * n.c_over_w:,.0f}: lower the TP degree "
                + ("(the tensor-parallel mesh axis)" if fw else f"({name('ici_tensor_parallelism')})")
                + " and prefer FSDP.")
    return ""


def fix(n: Numbers, target: Target) -> str:
    chip = target.chip
    where = advice_for(target.platform, chip)
    if where == "gpu":
        overlap = gpu_overlap(n.kind, chip)
    elif where == "tpu":
        overlap = tpu_overlap(n.kind, chip)
    else:
        overlap = ("Nothing to change on this host: CPU collectives are synchronous rendezvous and overlap "
                   "nothing. Their count and sizes hold on the accelerator, their times do not: capture the "
                   "step there to see what is exposed.")
    change = (program_change(n.kind, n.restructure_s_per_step, n.overlap_recoverable_s_per_step)
              if n.advice != "cpu" and n.restructure_s_per_step > 0 else "")
    return " ".join(p for p in (change, _by_cause(n, chip, fwl.other(target)), overlap) if p)
