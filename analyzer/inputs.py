"""What was read, before anything is priced: the trace's measured tables, or without a trace the chosen dump
module as a table of predicted ops. Both modes give one :class:`Read`, so the analysis after it runs once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError
from ..options import Capture
from ..parsers.discovery import CaptureFiles
from .hlo.dump import DumpModule
from .hlo.dump_matching import DumpMatch, ProgramSelectionError, choose_program, match_traced
from .hlo.embedded import with_capture_hlo
from .hosts.map import measure_capture
from .steps.choice import StepChoice
from .steps.windows import Steps
from .tables import DEVICE_STEPS, STEP_EVENTS

Progress = Callable[[str], None]

_NO_DEVICES = ("device", "host", "plane_name", "local_index", "device_type", "vendor")


class AnalysisError(InputError):
    """Input that cannot be analysed; the message is one line naming the file and the problem."""


@dataclass(frozen=True)
class Read:
    """The capture's measured side (or the dump's stand-in for it), with its dump modules matched."""

    platform: str  # 'tpu' | 'gpu' | 'cpu' | 'hlo' (HLO dump only: nothing measured)
    hosts: tuple[str, ...]
    devices: pd.DataFrame
    steps: Steps | None  # None: nothing measured
    op_table: pd.DataFrame  # one row per op: measured (op_stats) or the dump's instructions
    step_ops: pd.DataFrame  # tables.STEP_EVENTS
    device_steps: pd.DataFrame  # tables.DEVICE_STEPS
    op_metadata: pd.DataFrame | None
    async_spans: pd.DataFrame
    totals: object | None  # per-host totals where the hosts were reduced where read (host_map)
    match: DumpMatch | None  # dump modules <-> programs
    notes: tuple[str, ...] = ()
    dump_hints: tuple[str, ...] = ()  # HLO-only: what tells the dump's platform (chips/dump_platform.py)


def read_trace(files: CaptureFiles, dump: tuple[DumpModule, ...], capture: Capture, choice: StepChoice,
               progress: Progress | None = None) -> Read:
    """The measured tables of the capture's host files, matched to the dump and the HLO the capture holds."""
    measured = measure_capture(files, progress, workers=capture.workers, scheduler=capture.scheduler, choice=choice)
    match = with_capture_hlo(match_traced(dump, measured.op_table) if dump else None, measured.op_table,
                             measured.hlo_sources, files.hlo_proto_files)
    return Read(platform=measured.platform, hosts=measured.hosts, devices=measured.devices, steps=measured.steps,
                op_table=measured.op_table, step_ops=STEP_EVENTS.coerce(measured.step_ops),
                device_steps=DEVICE_STEPS.coerce(measured.steps.device_steps()), op_metadata=measured.op_metadata,
                async_spans=measured.async_spans, totals=measured.totals, match=match, notes=tuple(measured.warnings))


def read_dump_only(dump: tuple[DumpModule, ...], program: str | None) -> Read:
    """Without a trace: the chosen dump module (``program``; default the most FLOPs), nothing measured."""
    try:
        match = choose_program(dump, program)
    except ProgramSelectionError as exc:
        raise AnalysisError(str(exc)) from None
    return Read(platform="hlo", hosts=(), devices=pd.DataFrame(columns=list(_NO_DEVICES)), steps=None,
                op_table=_hlo_only_ops(match), step_ops=STEP_EVENTS.empty(), device_steps=DEVICE_STEPS.empty(),
                op_metadata=None, async_spans=pd.DataFrame(), totals=None, match=match,
                notes=("no trace given: times are predicted from the HLO and the chip table, not measured",),
                dump_hints=dump_hints(dump))


def dump_hints(dump: tuple[DumpModule, ...]) -> tuple[str, ...]:
    """The dump's file names, custom-call targets and TPU-only backend-config keys: what says which platform
    the HLO was compiled for."""
    out = {p.name for p in (dm.path for dm in dump) if p is not None}
    for dm in dump:
        for comp in dm.module.computations.values():
            for ins in comp.instructions:
                target = ins.attrs.get("custom_call_target")
                if target:
                    out.add(target.strip('"'))
                if "scoped_memory_configs" in ins.attrs.get("backend_config", ""):
                    out.add("scoped_memory_configs")
    return tuple(sorted(out))


def _hlo_only_ops(match: DumpMatch) -> pd.DataFrame:
    """Without a trace every top-level instruction (ENTRY, loop bodies, branches) of the chosen module is one
    op, run as often per step as its computation runs (loop trip counts multiplied)."""
    frames = [pd.DataFrame({"module": name, "program_id": pid, "op_name": dm.costs["name"], "runs": dm.costs["runs"],
                            "branches": dm.costs["branches"], "runs_note": dm.costs["runs_note"]})
              for (name, pid), dm in match.by_program.items()]
    ops = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["module", "program_id", "op_name", "runs", "branches", "runs_note"])
    for col in ("mean_s", "min_s", "max_s", "measured_s_per_step", "share_of_step"):
        ops[col] = np.nan
    # Loop bodies run their trip count times per step (hlo_control_flow); conditionals are resolved later.
    ops["occurrences_per_step"] = pd.to_numeric(ops["runs"]).astype(float)
    ops["occurrences"] = ops["occurrences_per_step"].round().astype("int64")
    ops["in_step"] = True
    ops["op_id"] = -1  # nothing measured: no events to join
    return ops
