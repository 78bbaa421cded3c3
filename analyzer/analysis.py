"""The analysis stage end to end: files -> capture -> steps -> per-op table with rooflines.

``analyze`` is the one entry the CLI, the Python API and the rules build on. Its result,
:class:`Analysis`, carries the per-op table every rule and renderer reads: one row per HLO
op with measured times (from the trace), FLOPs and bytes (trace first, HLO dump second),
and the roofline prediction (chip table or trace peaks), each with its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import UsageError
from ..options import Options
from ..parsers.discovery import CaptureFiles, discover, only_host
from ..parsers.hlo_text import HloModule
from ..parsers.worker_start import release_freed_memory
from ..units import format_number
from .chips import catalog as chip_catalog
from .chips.detection import choose_chip
from .chips.dump_platform import dump_platform
from .chips.mixed_hosts import mixed_hosts_warning
from .hlo.control_flow import keep_costliest_branches
from .hlo.dump import HloDumpError, read_dump
from .hlo.dump_facts import DumpFacts, dump_facts
from .hlo.facts import attach_hlo_facts
from .hlo.framework import detect_framework
from .inputs import AnalysisError, Progress, Read, read_dump_only, read_trace
from .models.collective_pricing import price_collectives
from .models.impossible_counts import drop_impossible_counts
from .models.roofline import predict_ops, step_roofline
from .models.topology import check_topology
from .scopes import scopes_of
from .steps.choice import choices, program_share_note, step_choice
from .steps.command_buffers import command_buffer_note
from .steps.occurrences import with_occurrences
from .steps.schedule import attach_schedule
from .steps.stability import unstable_note
from .steps.transfers import Transfers, attach_transfers
from .steps.windows import Steps
from .tables import OPS

# Above this share of the step in unpriced ops, MFU reads "at least" and a predicted comparison is not meaningful.
UNPRICED_LIMIT = 0.05
BREAKDOWN_CATEGORIES = ("compute", "memory", "collective", "host_transfer", "other", "idle")
CONTAINER_OPCODES = ("while", "conditional")  # ops whose measured event spans other ops' events
# Columns the stages before the ops table compute on the way (op_stats, hlo_facts, roofline): not in it.
_WORKING_COLUMNS = ("runs", "branches", "runs_note", "total_s", "measured_s", "fusion_kind", "peak_flops_per_s",
                    "t_compute_s", "t_memory_s", "t_host_s", "collective_payload", "replica_groups",
                    "source_target_pairs", "static_exposed_s_per_step")


@dataclass(frozen=True)
class Analysis:
    files: CaptureFiles
    platform: str  # 'tpu' | 'gpu' | 'cpu' | 'hlo' (HLO dump only: nothing measured)
    hosts: tuple[str, ...]
    devices: pd.DataFrame
    chip: chip_catalog.Chip
    chip_note: str
    steps: Steps | None
    step_ops: pd.DataFrame  # op events inside measured steps: tables.STEP_EVENTS
    device_steps: pd.DataFrame  # one row per measured (device, step): tables.DEVICE_STEPS
    ops: pd.DataFrame  # one row per HLO op, measured + HLO facts + roofline: tables.OPS
    async_spans: pd.DataFrame
    transfers: Transfers  # step-level transfer numbers and spans; per-op ones are ops columns (transfers.py)
    hlo_modules: tuple[HloModule, ...]
    breakdown: dict[str, float]  # seconds per step by BREAKDOWN_CATEGORIES
    model_flops_per_step: float | None
    mfu: float | None
    ideal_step_s: float | None  # sum of per-op predictions per step
    warnings: tuple[str, ...] = field(default_factory=tuple)
    dump: DumpFacts = field(default_factory=DumpFacts)  # the analysed program's dump modules, memory, layouts
    # Share of the step (measured, else the ideal step) spent in ops whose FLOPs are unknown: MFU leaves them out.
    unknown_flops_share: float | None = None
    # Share of the step's op time in ops with no predicted time (no cost model): MFU is a lower bound above
    # UNPRICED_LIMIT, and a predicted comparison is not meaningful.
    unpriced_share: float | None = None
    unstable_steps: bool = False  # the measured steps spread too much for seconds to repeat (steps/stability.py)
    # program / steps / hosts: {"value", "source": "given" | "inferred"} (step_choice.choices)
    choices: dict = field(default_factory=dict)
    # {"name": jax | pytorch_xla | tensorflow | unknown, "libraries": [...], "evidence"} (hlo/framework.py)
    framework: dict = field(default_factory=lambda: {"name": "unknown", "libraries": [], "evidence": ""})

    @property
    def mfu_is_lower_bound(self) -> bool:
        """True while more than UNPRICED_LIMIT of a measured step is in unpriced ops (their FLOPs are not
        counted). A predicted step leaves their time out instead, so there MFU is no lower bound."""
        return self.measured and self.unpriced_share is not None and self.unpriced_share > UNPRICED_LIMIT

    @property
    def measured(self) -> bool:
        return self.platform != "hlo"

    def __repr__(self) -> str:  # the tables and HLO modules behind it print as hundreds of kB otherwise
        steps = f"{self.steps.count} steps" if self.steps is not None else "predicted"
        mfu = f", MFU {self.mfu:.3g}" if self.mfu is not None else ""
        return (f"<Analysis {self.platform} {self.chip.name}: {self.num_devices} devices, {steps}, step "
                f"{self.step_s:.6g} s{mfu}, {len(self.ops)} ops, {len(self.hlo_modules)} HLO modules>")

    @property
    def step_s(self) -> float:
        if self.steps is None:
            return self.ideal_step_s or float("nan")
        return self.steps.mean_s

    @property
    def num_devices(self) -> int:
        return int(len(self.devices))

    @cached_property
    def scopes(self) -> pd.DataFrame:
        """Time, FLOPs and bytes per framework scope (JAX name path) of the step's ops: analyzer/scopes.py."""
        return scopes_of(self)


def _detect_chip(read: Read, chip_name: str | None, chip_file) -> tuple[chip_catalog.Chip, str, list[str]]:
    try:
        catalog = chip_catalog.load_catalog(chip_file)
        found = choose_chip(read.devices, read.platform, chip_name, catalog,
                            dump=dump_platform(read.dump_hints) if read.dump_hints else None)
    except chip_catalog.ChipCatalogError as exc:
        raise AnalysisError(str(exc)) from None
    mixed = mixed_hosts_warning(read.devices, catalog, found.chip) if len(read.hosts) > 1 and \
        read.platform in ("tpu", "gpu") else None
    return found.chip, found.note, list(found.warnings) + ([mixed] if mixed else [])


def _breakdown(ops: pd.DataFrame, device_steps: pd.DataFrame, step_s: float) -> dict[str, float]:
    """Measured step time split by what each op is bound by; idle is the gap between ops."""
    out = {c: 0.0 for c in BREAKDOWN_CATEGORIES}
    if ops.empty or not math.isfinite(step_s):
        return out
    in_step = ops[ops["in_step"]]
    busy = float(device_steps["busy_s"].mean()) if len(device_steps) else float(in_step["measured_s_per_step"].sum())
    # A while / conditional event holds its body's op events (XLA:CPU thunks): counted too, it would take
    # their time into "other" and scale every real class down. Dropped only when the sums show the nesting.
    container = in_step["opcode"].isin(CONTAINER_OPCODES) if "opcode" in in_step else None
    if container is not None and container.any() and float(in_step["measured_s_per_step"].sum()) > busy:
        in_step = in_step[~container]
    per_class = in_step.groupby(in_step["time_class"], observed=True)["measured_s_per_step"].sum()
    busy = busy if len(device_steps) else float(per_class.sum())
    total = float(per_class.sum())
    # Concurrent streams (GPU) or async overlap can make the op sum exceed the busy union: scale to it.
    scale = busy / total if total > busy > 0 else 1.0
    for name, value in per_class.items():
        out[str(name)] = float(value) * scale
    out["idle"] = float(device_steps["idle_s"].mean()) if len(device_steps) else 0.0
    return out


def analyze(source: Options | Path | str | None = None, *, progress: Progress | None = None, **options) -> Analysis:
    """The analysis of what ``source`` names: an :class:`~xladiag.options.Options` (what the API passes), or
    a capture path with the options as keywords by their names (``chip=``, ``hlo_dir=``, ``steps=``...).

    ``program``: without a trace, the dump module to analyse (name, ``name(id)`` or ``module_NNNN``);
    default: the one with the most FLOPs. With a trace, the program whose executions are the steps;
    ``steps`` ('A:B'): the step numbers measured; ``host``: the one host read (analyzer/steps/choice.py).
    ``workers``: processes reading the host files (default: the cores this process may use); ``scheduler``:
    a Dask scheduler address to read them on instead (analyzer/hosts/map.py).
    ``topology``: a TPU slice shape 'AxBxC' for the collective model (UsageError if malformed)."""
    given = source.replace(**options) if isinstance(source, Options) else Options.of(path=source, **options)
    capture, hardware = given.capture, given.hardware
    if hardware.topology is not None:
        check_topology(hardware.topology, hardware.chip, hardware.chip_file)  # before minutes of reading
    files = only_host(discover(capture.path, run=capture.run, hlo_dir=capture.hlo_dir), capture.host)
    if not files.xplane_files and (capture.steps is not None or capture.host is not None):
        raise UsageError("--steps and --host choose what a trace measures: give a profile directory")
    choice = step_choice(capture.program if files.xplane_files else None, capture.steps)
    notes: list[str] = []
    try:
        dump = read_dump(files, progress, notes)
    except HloDumpError as exc:
        raise AnalysisError(str(exc)) from None
    read = read_trace(files, dump, capture, choice, progress) if files.xplane_files else \
        read_dump_only(dump, capture.program)
    notes.extend(read.notes)
    the_chip, chip_note, chip_warnings = _detect_chip(read, hardware.chip, hardware.chip_file)
    notes.extend(chip_warnings)
    if the_chip is None:
        raise AnalysisError("no chip to predict with: pass --chip NAME")
    ops, transfers = _priced_ops(read, the_chip, hardware.topology, notes)
    _command_buffer_warning(ops, read, notes)
    _step_time_note(read.steps, notes)
    unstable = unstable_note(read.device_steps) if read.steps is not None else None
    notes.extend([unstable] if unstable else [])
    share_note = program_share_note(read.steps)
    notes.extend([share_note] if share_note else [])
    steps, match = read.steps, read.match
    release_freed_memory()  # the working tables of reading and pricing are gone: their heap pages back to the system
    return Analysis(
        files=files, platform=read.platform, hosts=read.hosts, devices=read.devices, chip=the_chip,
        chip_note=chip_note, steps=steps, step_ops=read.step_ops, device_steps=read.device_steps, ops=ops,
        async_spans=read.async_spans, transfers=transfers, hlo_modules=tuple(dm.module for dm in dump),
        unstable_steps=unstable is not None, framework=detect_framework(ops, read.platform != "hlo"),
        **_per_step(ops, read, the_chip, notes), warnings=tuple(notes), dump=dump_facts(match, ops),
        choices=choices(program_given=capture.program is not None, range_text=capture.steps, host=capture.host,
                        steps=steps, hosts=files.hosts,
                        hlo_program=None if steps is not None else ", ".join(name for name, _ in match.by_program)),
    )


def _priced_ops(read: Read, chip: chip_catalog.Chip, topology: str | None, notes: list[str]):
    """(ops table, transfers): what was read with its HLO facts, roofline predictions and time classes."""
    if read.match is not None:
        notes.extend(read.match.notes)
    op_table = with_occurrences(read.op_table, read.step_ops, read.steps)  # where to look in the trace, per op
    ops = attach_hlo_facts(op_table, read.op_metadata, read.match.by_program if read.match else {})
    ops = predict_ops(price_collectives(ops, chip, max(len(read.devices), 1), topology), chip)
    if read.platform != "hlo":
        ops = drop_impossible_counts(ops, chip, notes)
    ops["predicted_s_per_step"] = ops["predicted_s"] * ops["occurrences_per_step"]
    if read.platform == "hlo":
        notes_of_runs = ops["runs_note"].fillna("").astype(str)
        ops["cost_note"] = [("; ".join(n for n in (a, b) if n)) for a, b in zip(notes_of_runs, ops["cost_note"])]
        ops, branch_notes = keep_costliest_branches(ops)
        notes.extend(branch_notes)
    # A *-done op measures only the wait for its transfer, not the transfer: no roofline efficiency.
    ops.loc[ops["is_async_done"], "efficiency"] = np.nan
    ops["time_class"] = _time_class(ops)
    ops = attach_schedule(ops, read.match.by_program if read.match is not None else {}, read.platform != "hlo")
    ops, transfers = attach_transfers(ops, read.step_ops, read.steps, read.async_spans, read.platform, read.totals)
    return OPS.coerce(ops.drop(columns=list(_WORKING_COLUMNS), errors="ignore")), transfers


def _per_step(ops: pd.DataFrame, read: Read, chip: chip_catalog.Chip, notes: list[str]) -> dict:
    """The step's totals (Analysis fields): model FLOPs, the ideal step, MFU, the unknown-FLOPs share, breakdown."""
    steps = read.steps
    in_step = ops[ops["in_step"]]
    # Model FLOPs per device and step: XLA's model_flops where the trace has them, else all FLOPs.
    model_flops = in_step["model_flops"].where(in_step["model_flops"] > 0, in_step["flops"])
    known_flops = model_flops.notna().any()
    model_flops_per_step = float(np.nansum(model_flops * in_step["occurrences_per_step"])) if known_flops else None
    # The ideal step runs every blocking op at its roofline; async transfers (the *-done ops) are
    # taken as hidden behind it, as a well-scheduled program would have them.
    blocking = in_step[~in_step["is_async_done"]]
    has_prediction = blocking["predicted_s"].notna().any()
    ideal = (step_roofline(1.0, 1.0, ops=blocking, count_column="occurrences_per_step").ideal_step_s
             if has_prediction else None)
    if steps is None and has_prediction:  # no trace: the schedule's timeline, waits for transfers included
        ideal = float(_static_time(in_step).sum())
    step_s = steps.mean_s if steps is not None else (ideal or float("nan"))
    op_time = _op_time(blocking, steps is not None, chip)
    return {"model_flops_per_step": model_flops_per_step, "ideal_step_s": ideal,
            "mfu": _mfu(model_flops_per_step, step_s, chip, notes),
            # Of the step's op time: in ops whose FLOPs are unknown, and in ops with no predicted time.
            "unknown_flops_share": _share_of_time(op_time, blocking["flops"].isna()),
            "unpriced_share": _share_of_time(op_time, blocking["predicted_s"].isna()),
            "breakdown": _breakdown(ops, read.device_steps, step_s) if steps is not None else _predicted_breakdown(ops)}


def _command_buffer_warning(ops: pd.DataFrame, read: Read, notes: list[str]) -> None:
    note = command_buffer_note(ops, read.steps.mean_s) if read.platform == "gpu" and read.steps is not None else None
    if note:
        notes.append(note)


def _mfu(model_flops_per_step: float | None, step_s: float, chip: chip_catalog.Chip, notes: list[str]) -> float | None:
    """Model FLOPs per second over the chip's bf16 peak; None when unknown or impossible (> 1, with a note)."""
    if not (model_flops_per_step and math.isfinite(step_s)):
        return None
    mfu = step_roofline(step_s, chip.peak_flops_per_s("bf16"), model_flops=model_flops_per_step).mfu
    mfu = mfu if math.isfinite(mfu) else None
    if mfu is not None and mfu > 1.0:  # more FLOPs per second than the chip can do: the counts are wrong
        notes.append(f"the FLOPs of this step imply {format_number(mfu)}x the {chip.name} peak: MFU is not reported "
                     "(FLOP counts or the chip are wrong; check --chip)")
        return None
    return mfu


def _op_time(blocking: pd.DataFrame, measured: bool, chip: chip_catalog.Chip) -> pd.Series:
    """Each op's time per step: measured, else predicted, an op without a prediction standing in with its HBM
    bytes' time (a lower bound: shares of unpriced time read from it are at least that)."""
    if measured:
        return blocking["measured_s_per_step"].fillna(0.0)
    stand_in = blocking["hbm_bytes"].fillna(blocking["bytes_accessed"]).fillna(0.0) / chip.hbm_bytes_per_s
    predicted = blocking["predicted_s_per_step"]
    return predicted.where(predicted.notna(), stand_in * blocking["occurrences_per_step"]).fillna(0.0)


def _share_of_time(time: pd.Series, where: pd.Series) -> float | None:
    total = float(time.sum())
    return float(time[where].sum()) / total if total > 0 else None


# A step this long is a damaged or rescaled clock, not a training step (the longest real ones take minutes).
ABSURD_STEP_S = 3600.0


def _step_time_note(steps, notes: list[str]) -> None:
    step_s = steps.mean_s if steps is not None else float("nan")
    if math.isfinite(step_s) and step_s > ABSURD_STEP_S:
        notes.append(f"capture: the measured step lasts {step_s:,.0f} s ({format_number(step_s / 86400)} days): "
                     "no training step takes that long; the capture's clock is likely damaged or rescaled, and every "
                     "time in this report is as implausible")


def _time_class(ops: pd.DataFrame) -> pd.Series:
    """Which breakdown bucket an op's time belongs to."""
    cls = pd.Series("other", index=ops.index, dtype="object")
    cls[ops["bound_by"] == "compute"] = "compute"
    cls[ops["bound_by"] == "hbm"] = "memory"
    cls[ops["collective_kind"].notna()] = "collective"
    cls[ops["is_host_transfer"]] = "host_transfer"
    return cls


def _static_time(ops: pd.DataFrame) -> pd.Series:
    """Without a trace, each op's share of the predicted step: a transfer's predicted wait (analyzer/hlo/schedule.py:
    what no work beside it hides), a done op without one nothing, any other op its predicted time."""
    waits = ops["exposed_s_per_step"].notna()
    own = ops["predicted_s_per_step"].where(~ops["is_async_done"], 0.0).fillna(0.0)
    return ops["exposed_s_per_step"].where(waits, own).fillna(0.0)


def _predicted_breakdown(ops: pd.DataFrame) -> dict[str, float]:
    """Without a trace: the ideal step's split (transfers by their predicted waits, as in ``ideal_step_s``)."""
    out = {c: 0.0 for c in BREAKDOWN_CATEGORIES}
    in_step = ops[ops["in_step"]]
    for name, value in _static_time(in_step).groupby(in_step["time_class"], observed=True).sum().items():
        out[str(name)] = float(value)
    return out
