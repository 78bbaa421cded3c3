"""From a finding's op to the trace: its representative occurrence (``analyzer/steps/occurrences.py``), as the
JSON object, the Markdown/HTML/text label and the lookup from a finding's op names to ops-table rows.

A finding names its ops by op name; the op is the ops-table row the finding claims under that name (module
and program known), else the step's op of that name with the most time (names repeat only across programs).
"""

from __future__ import annotations

import pandas as pd

from ..units import format_seconds

_NONE = -1


def occurrence_index(analysis) -> tuple[dict, dict]:
    """({(module, program_id, op_name): occurrence}, {op_name: occurrence}) over the step's ops that have one."""
    ops = analysis.ops
    if ops is None or ops.empty:
        return {}, {}
    has = ops[ops["in_step"] & (ops["occurrence_device"] > _NONE)]
    has = has.sort_values("measured_s_per_step", ascending=False, kind="stable")
    devices = analysis.devices.set_index("device") if len(analysis.devices) else pd.DataFrame()
    host = devices["host"].to_dict() if "host" in devices else {}
    plane = devices["plane_name"].to_dict() if "plane_name" in devices else {}
    by_key, by_name = {}, {}
    for module, pid, name, dev, step, start, end, line in zip(
            has["module"], has["program_id"], has["op_name"], has["occurrence_device"], has["occurrence_step"],
            has["occurrence_start_ps"], has["occurrence_end_ps"], has["occurrence_line"]):
        occ = {"host": str(host.get(int(dev), "")), "device": int(dev), "plane": str(plane.get(int(dev), "")),
               "line": "" if line is None or line != line else str(line), "step": int(step),
               "start_ps": int(start), "end_ps": int(end)}
        by_key[(str(module), str(pid), str(name))] = occ
        by_name.setdefault(str(name), occ)  # the op of that name with the most time per step
    return by_key, by_name


def finding_occurrences(finding, index: tuple[dict, dict]) -> list[dict | None]:
    """The occurrence of each of ``finding.ops`` (None where the op has none: no trace, not in the step)."""
    by_key, by_name = index
    claimed = {c.op_name: c.op for c in getattr(finding, "claims", ())}
    out = []
    for op in finding.ops:
        key = claimed.get(op.name)
        out.append(by_key.get(key) if key in by_key else by_name.get(op.name))
    return out


def capture_ms(ps: int) -> str:
    """Picoseconds on the capture's clock as milliseconds to the nanosecond, exactly: 21068920252250 ->
    '21,068.920252 ms' (integer arithmetic: clocks since the epoch exceed a double's 53 bits in ps)."""
    ms, rest = divmod(int(ps), 10**9)
    return f"{ms:,}.{rest // 1000:06d} ms"


def occurrence_label(occ: dict | None) -> str:
    """'host h0 · /device:TPU:0 · XLA Ops · step 3 · 21,068.920252 ms (+194 ms)'; '' without one."""
    if not occ:
        return ""
    where = " · ".join(p for p in (f"host {occ['host']}" if occ["host"] else "", occ["plane"], occ["line"]) if p)
    length = format_seconds((occ["end_ps"] - occ["start_ps"]) / 1e12)
    return f"{where} · step {occ['step']} · {capture_ms(occ['start_ps'])} (+{length})"
