"""GPU steps whose ops run inside CUDA graphs: the trace times the graph, not the HLO ops in it.

XLA:GPU records runs of fusions and library calls into command buffers (CUDA graphs) and replays them; the
profile then shows one ``command_buffer_N`` event per replay, whose FLOPs, bytes and ops the dump does not
tie to it. Every per-op number inside is missing: no roofline, no finding, so a saving that counts ops
counts only the ops outside the graphs (recorded here: a remat saving read 0.25 ms where removing remat
saved 1.08 ms; with command buffers off, 1.37 ms against 1.11). XLA's flag ``--xla_gpu_enable_command_buffer``
(an empty list turns them off, openxla/xla ``debug_options_flags.cc``) makes every op its own kernel in the
trace, at a small cost in launch time.
"""

from __future__ import annotations

import pandas as pd

from ..hlo.op_categories import COMMAND_BUFFER_NAME

NOTE_SHARE = 0.05  # of the step: below it the hidden ops change no ranking worth a warning


def command_buffer_share(ops: pd.DataFrame, step_s: float) -> float:
    """The share of the measured step spent in command-buffer events (0 when none or no step)."""
    if ops.empty or not step_s or step_s != step_s or step_s <= 0:
        return 0.0
    hidden = ops["in_step"] & ops["op_name"].astype(str).str.match(COMMAND_BUFFER_NAME)
    return float(ops.loc[hidden, "measured_s_per_step"].fillna(0.0).sum()) / step_s


def command_buffer_note(ops: pd.DataFrame, step_s: float) -> str | None:
    """A warning when command buffers hide a visible share of the step's ops, else None."""
    share = command_buffer_share(ops, step_s)
    if share < NOTE_SHARE:
        return None
    return (f"{share:.0%} of the step runs inside CUDA-graph command buffers (command_buffer_N events): the "
            "trace does not time the HLO ops in them, so their rooflines and findings are missing and every "
            "saving counts only the ops outside them (a lower bound). Record again with "
            "XLA_FLAGS=--xla_gpu_enable_command_buffer= (an empty list: every op its own kernel) to price them")
