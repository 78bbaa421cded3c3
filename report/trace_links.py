"""From a finding's op to the trace: its representative occurrence (``analyzer/steps/occurrences.py``), as the
JSON object, the Markdown/HTML/text label and the lookup from a finding's op names to ops-table rows.

A finding names its ops by op name; the op is the ops-table row the finding claims under that name (module
and program known), else the step's op of that name with the most time (names repeat only across programs).
"""

from __future__ import annotations

import re

import numpy as np
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
    threads = analysis_thread_labels(analysis)
    for module, pid, name, dev, step, start, end, line in zip(
            has["module"], has["program_id"], has["op_name"], has["occurrence_device"], has["occurrence_step"],
            has["occurrence_start_ps"], has["occurrence_end_ps"], has["occurrence_line"]):
        occ = {"host": str(host.get(int(dev), "")), "device": int(dev), "plane": str(plane.get(int(dev), "")),
               "line": "" if line is None or line != line else str(line), "step": int(step),
               "start_ps": int(start), "end_ps": int(end)}
        if occ["line"] in threads:
            occ["line_label"] = threads[occ["line"]]
        by_key[(str(module), str(pid), str(name))] = occ
        by_name.setdefault(str(name), occ)  # the op of that name with the most time per step
    return by_key, by_name


# A CPU thread's trace line: the thread (pool) name, '/', then a long numeric thread id.
_THREAD_LINE = re.compile(r"^(?P<name>[^/]*)/(?P<id>-?\d{6,})$")


def thread_labels(lines) -> dict[str, str]:
    """{trace line: 'CPU thread N (name)'} for the lines named by a thread id ('tf_XLAEigen/-3233121778...'):
    N numbers the distinct threads 1, 2, ... in a fixed order, the name kept where the capture gives one."""
    found = sorted({str(x) for x in lines if isinstance(x, str) and _THREAD_LINE.match(x)},
                   key=lambda s: (_THREAD_LINE.match(s)["name"], int(_THREAD_LINE.match(s)["id"])))
    out = {}
    for n, line in enumerate(found, 1):
        name = _THREAD_LINE.match(line)["name"].strip()
        out[line] = f"CPU thread {n}" + (f" ({name})" if name else "")
    return out


def analysis_thread_labels(analysis) -> dict[str, str]:
    """:func:`thread_labels` over every trace line of the measured steps: one numbering for the whole report
    (the op locations and the timeline's lanes agree)."""
    so = getattr(analysis, "step_ops", None)
    if so is None or so.empty or "line" not in so:
        return {}
    line = so["line"]
    if isinstance(line.dtype, pd.CategoricalDtype):  # the names in use, without a pass over every event's text
        codes = line.cat.codes.to_numpy()
        known = codes if not len(codes) or codes.min() >= 0 else codes[codes >= 0]  # no copy when none is missing
        used = np.bincount(known, minlength=len(line.cat.categories)) > 0
        return thread_labels(line.cat.categories[used])
    return thread_labels(pd.unique(line.astype(object)))


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
    line = occ.get("line_label") or occ["line"]
    where = " · ".join(p for p in (f"host {occ['host']}" if occ["host"] else "", occ["plane"], line) if p)
    length = format_seconds((occ["end_ps"] - occ["start_ps"]) / 1e12)
    return f"{where} · step {occ['step']} · {capture_ms(occ['start_ps'])} (+{length})"
