"""Shared plumbing of the make_*.py recording scripts: flags, output folders, dumps, known answers.

Deliberately independent of xladiag: the known answers these scripts write are what xladiag is tested
against, so the capture is decoded here with the protobuf runtime and a schema built from the wire
field numbers (the shared reference xplane.md, section 'Wire schema'), not with xladiag's parser.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
_IMPORTED_ROOT = Path(__file__).absolute().parent.parent  # the same folder as imported (a symlink's own path)
RUN_DIR_NAME = "2000_01_01_00_00_00"  # fixed so tests need no glob
HOST_FILE_NAME = "cpu-host.xplane.pb"
ANSWERS = "known_answers.json"


# --- before jax is imported ---------------------------------------------------------------------

def set_xla_flags(n_devices: int, dump_dir: Path | None, extra: str = "") -> None:
    """Host device count and dump flags; both must be in XLA_FLAGS before jax is imported."""
    wanted = f"--xla_force_host_platform_device_count={n_devices} {extra}".strip()
    if dump_dir is not None:
        wanted += f" --xla_dump_to={dump_dir} --xla_dump_hlo_as_text"
    prior = os.environ.get("XLA_FLAGS", "").strip()
    os.environ["XLA_FLAGS"] = f"{prior} {wanted}".strip()


def fresh_out(out: Path) -> Path:
    """Create ``out``, clearing it only when it is empty or a previous output of these scripts."""
    out = out.resolve()
    if out.exists():
        if any(out.iterdir()) and not (out / ANSWERS).exists():
            raise SystemExit(f"{out} is not empty and has no {ANSWERS}: not clearing it")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return out


# --- after the run ------------------------------------------------------------------------------

def fix_run_names(out: Path) -> Path:
    """Rename the run folder and host file to fixed names; drop the rest (the xplane is the source)."""
    pbs = sorted((out / "plugins" / "profile").glob("*/*.xplane.pb"))
    if len(pbs) != 1:
        raise SystemExit(f"expected one xplane.pb, found {pbs}")
    run_dir = out / "plugins" / "profile" / RUN_DIR_NAME
    if pbs[0].parent != run_dir:
        pbs[0].parent.rename(run_dir)
    for f in run_dir.iterdir():
        if f.name.endswith(".xplane.pb"):
            f.rename(run_dir / HOST_FILE_NAME)
        else:
            f.unlink()
    return run_dir / HOST_FILE_NAME


DROPPED_REPORTS = ("-buffer-assignment-values.txt", "-live-range.txt")
_DUMP_MODULE = re.compile(r"^module_(\d+)\.(.+?)\.[^.]*after_optimizations\.txt$")


def keep_text_dump(dump: Path) -> list[dict]:
    """Keep every module of the dump (HLO before/after optimizations, buffer assignment, memory-usage
    report), drop LLVM IR, object code, binary protos and the two largest per-buffer reports.

    Source paths are made repository-relative so a re-recording elsewhere diffs cleanly.
    Returns one row per scheduled module: file, dump module id, module name.
    """
    for f in sorted(dump.iterdir()):
        if f.is_dir():
            shutil.rmtree(f)
        elif f.suffix != ".txt" or f.name.endswith(DROPPED_REPORTS):
            f.unlink()  # *.ll, *.o, *.pb: not HLO text; the two reports: large and read by no one
        else:
            text = f.read_text()
            rel = text.replace(str(REPO_ROOT) + "/", "").replace(str(_IMPORTED_ROOT) + "/", "")
            if rel != text:
                f.write_text(rel)
    rows = []
    for f in sorted(dump.glob("*after_optimizations.txt")):
        m = _DUMP_MODULE.match(f.name)
        if m:
            rows.append({"file": f.name, "module_id": int(m.group(1)), "module_name": m.group(2),
                         "memory_usage_total_bytes": memory_report_total(f)})
    return rows


def keep_module_only(dump: Path, module: str) -> None:
    """Drop every dump file but ``module``'s scheduled HLO and memory-usage report (a few MB less)."""
    for f in dump.iterdir():
        if f.is_file() and (module not in f.name or "before_optimizations" in f.name
                            or f.name.endswith("-buffer-assignment.txt")):
            f.unlink()


def profiled_steps(jax, out: Path, steps: int, step_name: str, run_step) -> list[float]:
    """Profile ``steps`` calls of ``run_step(i)`` (which must wait for the device before it returns), each
    inside a StepTraceAnnotation; the host milliseconds of each step."""
    host_ms = []
    with jax.profiler.trace(str(out)):
        for i in range(steps):
            t = time.perf_counter()
            with jax.profiler.StepTraceAnnotation(step_name, step_num=i):
                run_step(i)
            host_ms.append(round((time.perf_counter() - t) * 1e3, 3))
    return host_ms


def memory_report_total(module_file: Path) -> int | None:
    """'Total bytes' of the module's memory-usage report: XLA's peak per device, what HBM must hold."""
    report = module_file.with_name(module_file.name[: -len(".txt")] + "-memory-usage-report.txt")
    m = re.search(r"^Total bytes: (\d+)", report.read_text(), re.M) if report.exists() else None
    return int(m.group(1)) if m else None


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def write_answers(out: Path, answers: dict, t0: float) -> None:
    import jax
    import jaxlib

    answers = {
        "jax_version": jax.__version__,
        "jaxlib_version": getattr(jaxlib, "__version__", None),
        "backend": jax.default_backend(),
        "recording_wall_s": round(time.perf_counter() - t0, 1),
        **answers,
    }
    (out / ANSWERS).write_text(json.dumps(answers, indent=2) + "\n")
    print(f"wrote {out} ({folder_bytes(out) / 1e6:.2f} MB) in {answers['recording_wall_s']} s")


# --- reading the capture back (independently of xladiag) ----------------------------------------

def _xspace_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="xplane_recording.proto", package="rec", syntax="proto2")
    # proto2 + bytes for strings: real captures hold strings that are not valid UTF-8.
    schema = {
        "XStat": [("metadata_id", 1, "int64"), ("double_value", 2, "double"), ("uint64_value", 3, "uint64"),
                  ("int64_value", 4, "int64"), ("str_value", 5, "bytes"), ("bytes_value", 6, "bytes"),
                  ("ref_value", 7, "uint64")],
        "XEvent": [("metadata_id", 1, "int64"), ("offset_ps", 2, "int64"), ("duration_ps", 3, "int64"),
                   ("stats", 4, "*XStat"), ("num_occurrences", 5, "int64")],
        "XLine": [("id", 1, "int64"), ("name", 2, "bytes"), ("timestamp_ns", 3, "int64"), ("events", 4, "*XEvent"),
                  ("duration_ps", 9, "int64"), ("display_id", 10, "int64"), ("display_name", 11, "bytes")],
        "XEventMetadata": [("id", 1, "int64"), ("name", 2, "bytes"), ("metadata", 3, "bytes"),
                           ("display_name", 4, "bytes"), ("stats", 5, "*XStat")],
        "XStatMetadata": [("id", 1, "int64"), ("name", 2, "bytes"), ("description", 3, "bytes")],
        "XPlane": [("id", 1, "int64"), ("name", 2, "bytes"), ("lines", 3, "*XLine"),
                   ("event_metadata", 4, "*XPlane.EmEntry"), ("stat_metadata", 5, "*XPlane.SmEntry"),
                   ("stats", 6, "*XStat")],
        "XSpace": [("planes", 1, "*XPlane"), ("hostnames", 4, "+bytes")],
    }
    types = {"int64": F.TYPE_INT64, "uint64": F.TYPE_UINT64, "double": F.TYPE_DOUBLE, "bytes": F.TYPE_BYTES}
    for name, fields in schema.items():
        msg = fd.message_type.add(name=name)
        if name == "XPlane":
            for entry, value in (("EmEntry", "XEventMetadata"), ("SmEntry", "XStatMetadata")):
                e = msg.nested_type.add(name=entry)
                e.options.map_entry = True
                e.field.add(name="key", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
                e.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                            type_name=f".rec.{value}")
        for fname, number, kind in fields:
            if kind.startswith("*"):
                msg.field.add(name=fname, number=number, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                              type_name=f".rec.{kind[1:]}")
            elif kind.startswith("+"):
                msg.field.add(name=fname, number=number, type=types[kind[1:]], label=F.LABEL_REPEATED)
            else:
                msg.field.add(name=fname, number=number, type=types[kind], label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("rec.XSpace"))


def _stat_value(stat, names: dict):
    # proto2 without the oneof: the value is whichever field the writer set.
    for field in ("int64_value", "uint64_value", "double_value"):
        if stat.HasField(field):
            return getattr(stat, field)
    if stat.HasField("str_value"):
        return stat.str_value.decode("utf-8", "replace")
    if stat.HasField("ref_value"):
        return names.get(stat.ref_value)
    return None


def read_host_events(xplane: Path):
    """Host-plane events as columns, plus the programs listed on /host:metadata.

    Returns (events, programs): events is a dict of numpy columns (line, name, start_ps, dur_ps,
    hlo_module, program_id, run_id, device_ordinal, step_num); programs maps program_id -> name.
    """
    space = _xspace_class()()
    space.ParseFromString(xplane.read_bytes())
    rows, programs = [], {}
    for plane in space.planes:
        names = {k: v.name.decode() for k, v in plane.stat_metadata.items()}
        if plane.name == b"/host:metadata":
            for md in plane.event_metadata.values():
                stats = {names.get(s.metadata_id): _stat_value(s, names) for s in md.stats}
                if "program_id" in stats:
                    programs[int(stats["program_id"])] = md.name.decode()
        if plane.name != b"/host:CPU":
            continue
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            for ev in line.events:
                stats = {names.get(s.metadata_id): _stat_value(s, names) for s in ev.stats}
                rows.append((
                    line.name.decode(), plane.event_metadata[ev.metadata_id].name.decode("utf-8", "replace"),
                    base + ev.offset_ps, ev.duration_ps, stats.get("hlo_module"),
                    stats.get("program_id", -1), stats.get("run_id", -1), stats.get("device_ordinal", -1),
                    stats.get("step_num", -1),
                ))
    cols = list(zip(*rows)) if rows else [()] * 9
    events = {
        "line": np.array(cols[0], dtype=object), "name": np.array(cols[1], dtype=object),
        "start_ps": np.array(cols[2], dtype=np.int64), "dur_ps": np.array(cols[3], dtype=np.int64),
        "hlo_module": np.array(cols[4], dtype=object), "program_id": np.array(cols[5], dtype=np.int64),
        "run_id": np.array(cols[6], dtype=np.int64), "device_ordinal": np.array(cols[7], dtype=np.int64),
        "step_num": np.array(cols[8], dtype=np.int64),
    }
    return events, programs


def _union_ps(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of [start, end) intervals."""
    if start.size == 0:
        return 0
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    gaps = np.maximum(s[1:] - e[:-1], 0)
    return int(e[-1] - s[0] - gaps.sum())


def trace_answers(xplane: Path, step_name: str | None = None) -> dict:
    """Programs, executions and (when annotated) steps, as read straight from the capture.

    An op event is one with an ``hlo_module`` stat (CPU thunks); one execution of a program is one
    (program_id, run_id) over every device; device busy time is the union of op intervals.
    """
    ev, programs = read_host_events(xplane)
    is_op = np.array([m is not None for m in ev["hlo_module"]], dtype=bool)
    op = {k: v[is_op] for k, v in ev.items()}
    op_end = op["start_ps"] + op["dur_ps"]

    executed = []
    for pid in np.unique(op["program_id"]):
        sel = op["program_id"] == pid
        runs = np.unique(op["run_id"][sel])
        spans = []
        for run in runs:
            r = sel & (op["run_id"] == run)
            spans.append(int(op_end[r].max() - op["start_ps"][r].min()))
        executed.append({
            "program_id": int(pid),
            "name": str(op["hlo_module"][sel][0]),
            "executions": int(runs.size),
            "devices": int(np.unique(op["device_ordinal"][sel]).size),
            "op_events": int(sel.sum()),
            "distinct_ops": int(np.unique(op["name"][sel]).size),
            **({"op_names": sorted(np.unique(op["name"][sel]).tolist())}
               if np.unique(op["name"][sel]).size <= 8 else {}),
            "execution_span_ms": {"mean": round(float(np.mean(spans)) / 1e9, 3),
                                  "min": round(min(spans) / 1e9, 3), "max": round(max(spans) / 1e9, 3)},
        })
    answers = {
        "programs_in_capture_metadata": [{"program_id": k, "name": v} for k, v in sorted(programs.items())],
        "programs_executed": executed,
    }
    if step_name is None:
        return answers

    # An execution belongs to the step whose span holds its first op: JAX dispatches asynchronously,
    # so an execution's last ops may end after the host span that launched it.
    _, run_key = np.unique(np.stack([op["program_id"], op["run_id"]], axis=1), axis=0, return_inverse=True)
    run_key = run_key.ravel()
    runs = np.arange(run_key.max() + 1 if run_key.size else 0)
    first_start = np.full(runs.size, np.iinfo(np.int64).max)
    np.minimum.at(first_start, run_key, op["start_ps"])
    is_step = (ev["name"] == step_name) & (ev["step_num"] >= 0)
    steps = []
    for s, d, n in zip(ev["start_ps"][is_step], ev["dur_ps"][is_step], ev["step_num"][is_step]):
        launched = runs[(first_start >= s) & (first_start < s + d)]
        mine = np.isin(run_key, launched)
        devices = np.unique(op["device_ordinal"][mine])
        per_device = [_union_ps(op["start_ps"][mine & (op["device_ordinal"] == dev)],
                                op_end[mine & (op["device_ordinal"] == dev)]) for dev in devices]
        steps.append({
            "step_num": int(n),
            "annotated_ms": round(d / 1e9, 3),
            "device_busy_ms_any_device": round(_union_ps(op["start_ps"][mine], op_end[mine]) / 1e9, 3),
            "device_busy_ms_per_device_max": round(max(per_device, default=0) / 1e9, 3),
            "device_busy_ms_per_device_mean": round(float(np.mean(per_device)) / 1e9 if per_device else 0.0, 3),
            "programs_executed": sorted(int(p) for p in np.unique(op["program_id"][mine])),
            "executions": int(launched.size),
            "device_ms_after_span_end": round(max(0, int(op_end[mine].max(initial=s + d)) - (s + d)) / 1e9, 3),
        })
    answers["steps"] = sorted(steps, key=lambda r: r["step_num"])
    return answers
