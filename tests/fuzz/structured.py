"""Structure-aware mutations of a built capture: damage a byte fuzzer reaches only by luck, aimed at the fields
the analysis reads (durations, ids, stat types, stat metadata, repeated lines, the clock, the device stats).

Each mutator takes (space, rng), changes the ``XSpace`` in place and returns a short label; the same seed gives
the same mutant. :func:`mutants` turns them into the fuzzer's ``Mutant`` records, run like any other
(``in_process.run_mutant``: no crash, no traceback, and on exit 0 a plausible report valid against the schema).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

import fuzz_inputs

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:  # the builders, when the fuzzer runs as a script
    sys.path.insert(0, _TESTS)

_INT64_MAX, _UINT64_MAX = 2**63 - 1, 2**64 - 1
_EXECUTION_LINES = (b"XLA Modules", b"Steps")
# The one-off program beside the train step (a real capture has several: the fallbacks need another program).
_OTHER_PROGRAM, _OTHER_PROGRAM_ID = "jit_init", 4242


def base_capture(steps: int = 2) -> bytes:
    """A clean TPU capture (tests/builders scenarios.clean_profile) plus one run of another program before it."""
    from builders import scenarios
    from builders.xspace_encoder import FIRST_STEP_START_PS

    builder, _ = scenarios.clean_profile(steps=steps)
    op = scenarios.loop_fusion("init_fusion", [256, 512])
    start = FIRST_STEP_START_PS - 10 * op.duration_ps
    for device in range(builder.num_devices):
        builder.add_module_run(device, _OTHER_PROGRAM, _OTHER_PROGRAM_ID, start, 2 * op.duration_ps, run_id=1)
        builder.add_op(device, op.name, op.text, op.category, start + 1000, op.duration_ps,
                       program_id=_OTHER_PROGRAM_ID, flops=op.flops, bytes_accessed=op.bytes_accessed)
    return builder.serialize()


def _pick(rng, items):
    return items[int(rng.integers(len(items)))]


def _lines(space, names=None):
    return [(p, line) for p in space.planes for line in p.lines
            if len(line.events) and (names is None or line.name in names)]


def _stat_id(plane, name: bytes) -> int | None:
    return next((k for k, v in plane.stat_metadata.items() if v.name == name), None)


def zero_durations(space, rng) -> str:
    """Program executions and steps of no length: all of them, or every other one."""
    every = int(_pick(rng, [1, 2]))
    for _, line in _lines(space, _EXECUTION_LINES):
        for i, event in enumerate(line.events):
            if i % every == 0:
                event.duration_ps = 0
    return f"zero durations on every {every} execution(s)"


def negative_durations(space, rng) -> str:
    plane, line = _pick(rng, _lines(space))
    values = [-1, -10**12, -_INT64_MAX, 0]
    for i in rng.choice(len(line.events), min(8, len(line.events)), replace=False):
        line.events[int(i)].duration_ps = int(_pick(rng, values))
    return f"negative durations on {line.name.decode()!r} of {plane.name.decode()!r}"


def huge_ids(space, rng) -> str:
    """A device index, an event's metadata id or a stat's metadata id past every integer type."""
    kind = _pick(rng, ["device_index", "metadata_id", "run_id"])
    devices = [p for p in space.planes if p.name.startswith(b"/device:")]
    if kind == "device_index":
        _pick(rng, devices).name = b"/device:TPU:" + _pick(rng, [b"99999999999999999999", b"2147483648"])
    elif kind == "metadata_id":
        _, line = _pick(rng, _lines(space))
        line.events[0].metadata_id = int(_pick(rng, [_INT64_MAX, 2**40]))
    else:
        for plane, line in _lines(space, [b"XLA Modules"]):
            run_id = _stat_id(plane, b"run_id")
            for stat in line.events[0].stats:
                if stat.metadata_id == run_id:
                    stat.uint64_value = _UINT64_MAX
    return f"huge {kind}"


def renamed_device_plane(space, rng) -> str:
    devices = [p for p in space.planes if p.name.startswith(b"/device:TPU:")]
    plane = _pick(rng, devices)
    index = plane.name.rsplit(b":", 1)[1]
    plane.name = _pick(rng, [b"/host:TPU" + index, b"/device:TPU:0", b"/device:GPU:" + index])
    return f"device plane renamed {plane.name.decode()!r}"


def _set_value(stat, value) -> None:
    if isinstance(value, bytes):
        stat.bytes_value = value
    elif isinstance(value, str):
        stat.str_value = value.encode()
    elif isinstance(value, float):
        stat.double_value = value
    elif value > _INT64_MAX:
        stat.uint64_value = value
    else:
        stat.int64_value = value


_ODD_VALUES = (_INT64_MAX, _UINT64_MAX, -1, 0, math.nan, math.inf, 5e-324, -1.0, 1e300, "", "abc", b"\xff\x01")
_MIXED_STATS = (b"run_id", b"program_id", b"memory_access_breakdown", b"flops", b"bytes_accessed", b"hlo_category",
                b"device_type_string", b"peak_teraflops_per_second", b"peak_hbm_bw_gigabytes_per_second",
                b"hlo_op", b"device_duration_ps", b"step_num", b"profile_start_time")


def _stats_named(space, name: bytes):
    """Every XStat of that name: plane stats, event metadata stats and event stats."""
    for plane in space.planes:
        sid = _stat_id(plane, name)
        if sid is None:
            continue
        groups = [plane.stats, *(md.stats for md in plane.event_metadata.values()),
                  *(e.stats for line in plane.lines for e in line.events)]
        yield from (s for group in groups for s in group if s.metadata_id == sid)


def mixed_type_stats(space, rng) -> str:
    """One stat given values of two kinds (an integer beside a string, bytes as a number...)."""
    name = _pick(rng, _MIXED_STATS)
    a, b = (_ODD_VALUES[int(i)] for i in rng.choice(len(_ODD_VALUES), 2, replace=False))
    for i, stat in enumerate(_stats_named(space, name)):
        _set_value(stat, a if i % 2 else b)
    return f"{name.decode()} = {a!r} / {b!r}"


def missing_stat_metadata(space, rng) -> str:
    """A plane's stat names lost (every stat then nameless), with or without empty program ids elsewhere."""
    if rng.random() < 0.5:
        for stat in _stats_named(space, b"program_id"):
            stat.str_value = b""
    plane = _pick(rng, [p for p in space.planes if len(p.stat_metadata)])
    plane.ClearField("stat_metadata")
    return f"no stat metadata on {plane.name.decode()!r}"


def duplicated_lines(space, rng) -> str:
    plane, line = _pick(rng, _lines(space))
    copies = int(rng.integers(1, 8))
    for k in range(copies):
        copy = plane.lines.add()
        copy.CopyFrom(line)
        copy.id = line.id + 1000 + k
    return f"{line.name.decode()!r} of {plane.name.decode()!r} repeated {copies} more time(s)"


def scaled_clock(space, rng) -> str:
    """Every time since the capture's first event, and every duration, times 10**k: a step of hours or days."""
    k = int(rng.integers(3, 10))
    lines = [line for _, line in _lines(space)]
    first = min(line.timestamp_ns * 1000 + e.offset_ps for line in lines for e in line.events)
    for line in lines:
        base = line.timestamp_ns * 1000
        for e in line.events:
            e.offset_ps = min(first + (base + e.offset_ps - first) * 10**k, _INT64_MAX) - base
            e.duration_ps = min(e.duration_ps * 10**k, _INT64_MAX)
    return f"clock scaled 1e{k}"


def absurd_device_stats(space, rng) -> str:
    """The device planes' capacity, bandwidth and peak stats set to tiny, huge or impossible numbers."""
    value = float(_pick(rng, [5e-324, 1e300, -1.0, math.nan, math.inf, 1e-3]))
    for plane in space.planes:
        if not plane.name.startswith(b"/device:"):
            continue
        sid = max(plane.stat_metadata, default=0) + 1
        plane.stat_metadata[sid].id, plane.stat_metadata[sid].name = sid, b"memory_size"
        plane.stats.add(metadata_id=sid, double_value=value)
        for name in (b"peak_teraflops_per_second", b"peak_hbm_bw_gigabytes_per_second"):
            for stat in plane.stats:
                if stat.metadata_id == _stat_id(plane, name):
                    stat.double_value = value
    return f"device stats = {value!r}"


MUTATORS = (zero_durations, negative_durations, huge_ids, renamed_device_plane, mixed_type_stats,
            missing_stat_metadata, duplicated_lines, scaled_clock, absurd_device_stats)
_SEED = fuzz_inputs.Seed("xplane", fuzz_inputs.SAMPLES / "built" / "clean.xplane.pb")


def mutants(count: int, seed: int, per_mutant: int = 1, base: bytes | None = None) -> list[fuzz_inputs.Mutant]:
    """``count`` mutants of the built capture, each from its own (seed, index) stream, each damaged by
    ``per_mutant`` mutators taken in turn (so that a few mutants cover them all)."""
    from xladiag.parsers.xspace_schema import XSpace

    base = base if base is not None else base_capture()
    out = []
    for index in range(count):
        rng = np.random.default_rng([seed, index])
        space = XSpace.FromString(base)
        labels = []
        for k in range(per_mutant):
            mutate = MUTATORS[(index * per_mutant + k) % len(MUTATORS)]
            labels.append(f"{mutate.__name__}: {mutate(space, rng)}")
        files = {f"{fuzz_inputs._RUN}/host.xplane.pb": space.SerializeToString()}
        out.append(fuzz_inputs.Mutant(index, _SEED, "; ".join(labels), files, ["."]))
    return out
