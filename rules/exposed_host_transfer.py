"""Host-offload copies the step waits for instead of hiding them behind compute.

What it finds:
    Time per step in which a device waits for host-offload copies: `copy-start`/`copy-done` pairs that move
    arrays between device memory and pinned host memory (`S(5)`) over PCIe, the part of their time no
    other work hides. One finding, each copy listed with the fraction of its time in flight that was hidden.
    Measured exactly as `exposed-collective` measures collectives (its `measure_kinds`, host-offload kind).
Why it costs time:
    While a `copy-done` waits, the core issues no work: the rest of the copy adds straight to the step.
    Offloaded activations are written out in the forward pass and read back in the backward pass; a copy
    issued late, or read back right before its use, leaves that wait exposed.
How the cost is estimated:
    Cost = exposed seconds per step, as for `exposed-collective`. The fix leads with offloading less, which
    removes the transfer, so savings = cost times the share of the offloaded arrays (half the bytes moved:
    each goes out and comes back) that the HBM headroom holds (all of it when no memory report tells the
    headroom); confidence medium. What overlap alone could recover is in the details. Without a trace the
    schedule's predicted waits stand in for the exposed time (confidence low).
Fix:
    Offload fewer or smaller tensors, or issue the offload earlier and the reload later so the copies run
    under compute: MaxText `remat_policy` offload choices, `jax.checkpoint` offload policies, the
    `pinned_host` memory kind; on TPU, MaxText's host-offload flags let more transfers overlap.
Details:
    kind (text): `host-offload` (also the finding's `kind`)
    platform (text): `tpu`, `gpu`, `cpu` or `hlo`
    exposed_s_per_step (s): seconds per step the device waits for the copies (the finding's cost)
    in_flight_s_per_step (s or null): start-to-done seconds per step of the copies; null when none recorded
    hidden_fraction (fraction or null): 1 - exposed / in flight, over the device-steps that recorded spans
    predicted_transfer_s_per_step (s): roofline time per step of the copies over PCIe
    measured_transfer_s_per_step (s or null): measured transfer time per step, where the capture shows it
    needed_transfer_s_per_step (s): the least transfer time per step: min of predicted and measured
    compute_s_per_step (s): non-transfer work per step (union of the other ops) that copies can hide behind
    overlap_recoverable_s_per_step (s): what a better schedule can hide: exposed minus (needed - compute), at most
        the schedule windows' independent work
    schedule_window_s_per_step (s or null): sum over the ops of min(exposed, independent work in its schedule
        window); null without a dump
    restructure_s_per_step (s): what only a program change could hide beyond that (an upper bound, not counted)
    bytes_per_step (bytes): bytes per step the copies move (each offloaded array twice: out and back)
    ops (list): per op: `op`, `exposed_s_per_step`, `exposed_where_in_flight_measured_s_per_step`,
        `in_flight_s_per_step`, `hidden_fraction`, `synchronous`, `independent_work_s_per_step` (the
        independent work in its schedule window; null without a dump)
"""

from __future__ import annotations

from . import exposed_collective as ec
from . import framework_levers as fwl
from .base import Target, compose, format_bytes, format_seconds
from .levers import flag, name
from .levers import target as advice_for

RULE_ID = "exposed-host-transfer"
PRECEDENCE = ec.PRECEDENCE  # any transfer not hidden: counts only what no more specific rule explains
Numbers = ec.Numbers
title = ec.title


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def measure(analysis) -> list[Numbers] | None:
    return ec.measure_kinds(analysis, host_offload=True)


def _fit_text(n: Numbers) -> str:
    need = format_bytes(n.bytes_per_step / 2)  # the bytes the offloaded arrays hold: each goes out and back
    if not n.memory_report:
        return f"if the {need} they hold fit in HBM (no memory-usage report: headroom unknown)"
    return f"the share of the {need} they hold that fits in HBM ({n.offload_fit:.0%})"


def evidence(n: Numbers) -> str:
    text = (f"{ec._head(n)}; the transfers need at least {format_seconds(n.needed_transfer_s_per_step)} against "
            f"{format_seconds(n.compute_s_per_step)} of non-transfer work per step{ec._window_text(n)}, so a better "
            f"schedule can recover about {format_seconds(n.overlap_recoverable_s_per_step)}. Keeping the arrays in "
            f"HBM removes the transfers instead: the saving counted, "
            f"{format_seconds(n.priced.est_savings_s_per_step)}, {_fit_text(n)}.")
    return f"{text} Their cross-node time {n.network_assumption}." if n.network_assumption else text


def fix(n: Numbers, target: Target) -> str:
    fw = fwl.other(target)
    if fw:
        return (f"Host offload is exposed: {format_bytes(n.bytes_per_step)} per step cross PCIe to or from host "
                f"memory (S(5)) and need about {format_seconds(n.needed_transfer_s_per_step)}, against "
                f"{format_seconds(n.compute_s_per_step)} of non-transfer work to hide them behind. Offload fewer or "
                f"smaller tensors in the {fwl.label(fw)} program (keep the largest in device memory where HBM "
                f"allows, or {fwl.recompute_more(fw)} instead), or move them out earlier and back later so the "
                "copies run under compute.")
    return (f"Host offload is exposed: {format_bytes(n.bytes_per_step)} per step cross PCIe to or "
            f"from host memory (S(5)) and need about {format_seconds(n.needed_transfer_s_per_step)}, against "
            f"{format_seconds(n.compute_s_per_step)} of non-transfer work to hide them behind. Offload fewer or "
            "smaller tensors, or issue the offload earlier and the reload later so the copies run under compute: in "
            f"MaxText, with {name('remat_policy')}='{name('custom')}', set the largest 'offload' entries (e.g. "
            f"{name('decoder_layer_input')}, {name('mlpwi')}, {name('query_proj')}) to 'device' where HBM allows, "
            f"or 'remat'; with {name('jax.checkpoint')}, "
            f"{name('jax.checkpoint_policies.save_and_offload_only_these_names')}"
            f"({name('names_which_can_be_saved')}=[...], {name('names_which_can_be_offloaded')}=[the few "
            f"largest], {name('offload_src')}='device', {name('offload_dst')}='{name('pinned_host')}'); keep "
            f"arrays placed with {name('memory_kind')}='pinned_host' in device memory when they fit."
            + (f" On TPU, MaxText's {name('HOST_OFFLOAD_FLAGS')} in {name('LIBTPU_INIT_ARGS')} (e.g. "
               f"{flag('xla_tpu_host_transfer_overlap_limit', 24)}) let more transfers overlap."
               if advice_for(target.platform, target.chip) == "tpu" else ""))
