"""Per-op and per-step rooflines (shared reference ``roofline.md``; "How to Scale Your Model" ch. 1).

Single op: T_compute = FLOPs / C (C = the peak of the op's dtype), T_memory = HBM bytes / B_hbm,
T_host = host (PCIe) bytes / B_pcie; predicted = max of them — perfect overlap, so a lower bound on time (the
sum would be the pessimistic bound). Arithmetic intensity = FLOPs / HBM bytes; ridge point = C / B_hbm.
Collectives take their time from the ICI model (:mod:`.collectives`) when a prediction is supplied.

Everything here is vectorized: functions accept numpy arrays, pandas Series or scalars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..chips.catalog import Chip
from .collectives import BANDWIDTH_BOUNDS


def _ratio(numerator, denominator):
    """numerator / denominator as float arrays; NaN where the denominator is not > 0."""
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return out if out.ndim else float(out)


def op_roofline(flops, bytes_hbm, peak_flops_per_s, hbm_bytes_per_s):
    """(t_compute_s, t_memory_s, predicted_s) with numpy broadcasting; scalars in → floats out.

    predicted_s = max(t_compute_s, t_memory_s), ignoring a NaN term (an op with unknown FLOPs is still
    bounded by its bytes); NaN only when both are unknown.
    """
    t_compute_s = _ratio(flops, peak_flops_per_s)
    t_memory_s = _ratio(bytes_hbm, hbm_bytes_per_s)
    predicted_s = np.fmax(t_compute_s, t_memory_s)
    if np.ndim(predicted_s) == 0:
        predicted_s = float(predicted_s)
    return t_compute_s, t_memory_s, predicted_s


def arithmetic_intensity(flops, bytes_hbm):
    """FLOPs per HBM byte; NaN where bytes are zero or unknown."""
    return _ratio(flops, bytes_hbm)


def _column(ops: pd.DataFrame, name: str, default: float = np.nan) -> np.ndarray:
    if name not in ops.columns:
        return np.full(len(ops), default, dtype=float)
    return pd.to_numeric(ops[name], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _peaks_by_dtype(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    if "dtype" not in ops.columns:
        return np.full(len(ops), chip.peak_bf16_flops_per_s, dtype=float)
    dtypes = ops["dtype"].astype("object").where(ops["dtype"].notna(), None)
    peak_of = {d: chip.peak_flops_per_s(d) for d in pd.unique(dtypes)}
    return dtypes.map(peak_of).to_numpy(dtype=float)


def predict_ops(ops: pd.DataFrame, chip: Chip) -> pd.DataFrame:
    """A copy of ``ops`` with roofline columns added.

    Input columns: ``flops``, ``bytes_accessed``; optional ``hbm_bytes`` (preferred over bytes_accessed for
    memory time where known), ``host_bytes`` (PCIe), ``dtype`` (HLO element type: fp8 ops are measured
    against the fp8 peak, s8/u8 against int8), ``measured_s`` (mean per occurrence),
    ``collective_predicted_s`` (+ optional ``collective_bound_by``) from :func:`.collectives.predict_collectives`.

    Added: ``peak_flops_per_s``, ``t_compute_s``, ``t_memory_s``, ``t_host_s``, ``predicted_s``,
    ``arithmetic_intensity``, ``bound_by`` and ``efficiency`` = predicted_s / measured_s (1.0 = at the
    roofline; NaN when either is unknown). bound_by is the largest term: 'compute', 'hbm' or 'host'; a row with
    a collective prediction takes that time and its 'ici'/'latency'; 'latency' also marks ops with no modelled
    work (0 FLOPs and 0 bytes: only fixed overhead) and, on a chip with a ``kernel_launch_floor_s`` (GPUs), ops
    whose roofline is below that floor (their time is the floor); 'unknown' when nothing is known or the FLOPs
    are unknown (then predicted_s and efficiency are NaN: a bytes-only bound would call a compute kernel slow,
    and price it as an HBM copy).
    """
    out = ops.copy()
    flops = _column(out, "flops")
    hbm_bytes = _column(out, "hbm_bytes")
    bytes_accessed = _column(out, "bytes_accessed")
    memory_bytes = np.where(np.isnan(hbm_bytes), bytes_accessed, hbm_bytes)
    peaks = _peaks_by_dtype(out, chip)

    t_compute_s, t_memory_s, _ = op_roofline(flops, memory_bytes, peaks, chip.hbm_bytes_per_s)
    t_compute_s, t_memory_s = np.atleast_1d(t_compute_s), np.atleast_1d(t_memory_s)
    host_bytes, t_host_s = _host_time(out, chip)
    predicted_s, bound_by = _largest_term(t_compute_s, t_memory_s, t_host_s, host_bytes)
    # A kernel whose FLOPs nobody knows (a Pallas call without a cost estimate) is not memory-bound just
    # because its bytes are the only term: its bound and time are unknown (t_memory_s keeps the bytes' time
    # as a lower bound), not an HBM copy's.
    flops_unknown = np.isnan(flops) & np.isin(bound_by, ["hbm", "latency"])
    bound_by = np.where(flops_unknown, "unknown", bound_by)
    predicted_s = np.where(flops_unknown, np.nan, predicted_s)
    predicted_s, bound_by = _launch_floor(predicted_s, bound_by, chip.kernel_launch_floor_s)
    predicted_s, bound_by, is_collective = _with_collective_times(out, predicted_s, bound_by)

    measured_s = _column(out, "measured_s")
    out["peak_flops_per_s"] = peaks
    out["t_compute_s"] = t_compute_s
    out["t_memory_s"] = t_memory_s
    out["t_host_s"] = t_host_s
    out["predicted_s"] = predicted_s
    out["arithmetic_intensity"] = np.atleast_1d(arithmetic_intensity(flops, memory_bytes))
    out["bound_by"] = pd.Series(bound_by, index=out.index, dtype=object)
    out["efficiency"] = np.where(flops_unknown & ~is_collective, np.nan,
                                 np.atleast_1d(_ratio(predicted_s, measured_s)))
    return out


def _host_time(ops: pd.DataFrame, chip: Chip) -> tuple[np.ndarray, np.ndarray]:
    """(host bytes, their time over PCIe): 0 s where an op moves nothing to or from the host."""
    host_bytes = np.nan_to_num(_column(ops, "host_bytes", 0.0), nan=0.0)
    t_host_s = _ratio(host_bytes, np.full(len(ops), chip.pcie_bytes_per_s or np.nan))
    return host_bytes, np.where(host_bytes > 0, t_host_s, 0.0)


def _largest_term(t_compute_s, t_memory_s, t_host_s, host_bytes) -> tuple[np.ndarray, np.ndarray]:
    """(predicted_s, bound_by): the largest known of the three times and which it is; 'latency' where all
    known ones are 0, 'unknown' (NaN time) where none is known."""
    n = len(t_host_s)
    terms = np.vstack([t_compute_s, t_memory_s, t_host_s]) if n else np.zeros((3, 0))
    known = ~np.isnan(terms)
    any_known = known[:2].any(axis=0) | (host_bytes > 0)
    filled = np.where(known, terms, -np.inf)
    predicted_s = np.where(any_known, filled.max(axis=0), np.nan)
    bound_by = np.array(["compute", "hbm", "host"], dtype=object)[filled.argmax(axis=0)] if n else \
        np.array([], dtype=object)
    return predicted_s, np.where(any_known & (predicted_s > 0), bound_by, np.where(any_known, "latency", "unknown"))


def _launch_floor(predicted_s, bound_by, floor_s: float | None) -> tuple[np.ndarray, np.ndarray]:
    """No op that does work runs faster than one kernel launch (GPU chips' ``kernel_launch_floor_s``): its
    time is at least the floor, and 'latency'-bound where the floor is above its roofline."""
    if not floor_s:
        return predicted_s, bound_by
    below = np.nan_to_num(predicted_s, nan=np.inf) < floor_s
    below &= np.nan_to_num(predicted_s, nan=0.0) > 0
    return np.where(below, floor_s, predicted_s), np.where(below, "latency", bound_by)


def _with_collective_times(ops: pd.DataFrame, predicted_s, bound_by) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Collectives take the collective model's time and bound (the link: 'ici', 'nvlink', 'xgmi', 'pcie',
    'network'; or 'latency'); also which rows are collectives."""
    collective_s = _column(ops, "collective_predicted_s")
    is_collective = ~np.isnan(collective_s)
    if is_collective.any():
        predicted_s = np.where(is_collective, collective_s, predicted_s)
        if "collective_bound_by" in ops.columns:
            col_bound = ops["collective_bound_by"].astype("object").to_numpy()
            col_bound = np.where(np.isin(col_bound, [*BANDWIDTH_BOUNDS, "latency"]), col_bound, "ici")
        else:
            col_bound = np.full(len(ops), "ici", dtype=object)
        bound_by = np.where(is_collective, col_bound, bound_by)
    return predicted_s, bound_by, is_collective


@dataclass(frozen=True)
class StepRoofline:
    """Whole-step figures: MFU and the ideal step time implied by the per-op rooflines."""

    step_time_s: float
    model_flops: float  # per step, summed over chips; NaN when unknown
    num_chips: int
    peak_flops_per_s: float  # per chip
    mfu: float  # model_flops / (step_time_s · peak · num_chips)
    ideal_step_s: float  # Σ predicted_s × occurrences / steps; NaN when no per-op table
    roofline_fraction: float  # ideal_step_s / step_time_s: 1.0 = every op at its roofline, no gaps


def step_roofline(
    step_time_s: float,
    peak_flops_per_s: float,
    *,
    model_flops: float | None = None,
    num_chips: int = 1,
    ops: pd.DataFrame | None = None,
    steps: int = 1,
    count_column: str = "occurrences",
) -> StepRoofline:
    """MFU and ideal step time for one step.

    ``model_flops`` are the model's useful FLOPs per step across ``num_chips`` chips (no remat, no padding),
    so MFU = model_flops / (step_time_s × peak × num_chips). ``ops`` is a :func:`predict_ops` table for one
    device over ``steps`` steps: ideal step time = Σ predicted_s × ``count_column`` / steps (count 1 per row
    when the column is absent). NaN predictions count as zero there.
    """
    mfu = math.nan
    if model_flops is not None and step_time_s > 0 and peak_flops_per_s > 0 and num_chips > 0:
        mfu = float(model_flops) / (step_time_s * peak_flops_per_s * num_chips)
    ideal_step_s = math.nan
    if ops is not None:
        predicted = pd.to_numeric(ops["predicted_s"], errors="coerce").fillna(0.0)
        counts = (pd.to_numeric(ops[count_column], errors="coerce").fillna(0.0)
                  if count_column in ops.columns else 1.0)
        ideal_step_s = float((predicted * counts).sum()) / max(int(steps), 1)
    return StepRoofline(
        step_time_s=float(step_time_s),
        model_flops=math.nan if model_flops is None else float(model_flops),
        num_chips=int(num_chips),
        peak_flops_per_s=float(peak_flops_per_s),
        mfu=mfu,
        ideal_step_s=ideal_step_s,
        roofline_fraction=ideal_step_s / step_time_s if step_time_s > 0 else math.nan,
    )
