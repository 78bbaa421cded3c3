"""Record one trace that runs six different programs all called ``jit_dot``.

One jitted function, ``dot(a, b) = a @ b``, called on six shape pairs: jit compiles one program per
shape, each with its own program id, all named ``jit_dot``. They run interleaved, a different number of
times each, so "one program" by name would average a 4 us dot with a multi-millisecond one.

Writes OUT (default sample_profiles/jax_many_programs, cleared first):
  plugins/profile/2000_01_01_00_00_00/cpu-host.xplane.pb   the capture (one CPU device)
  hlo/                                                   the whole dump as text (six jit_dot modules)
  known_answers.json                                     per-program shapes, FLOPs, executions, durations

Usage: python sample_profiles/make_jax_many_programs.py [OUT]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

try:  # imported as xladiag.sample_profiles.<script> (tests, import walks) or run as a script
    from . import _recording as rec
except ImportError:
    import _recording as rec

# (M, K, N) and how many times each runs in the trace; the most frequent is not the most expensive.
DOTS = [((8, 8, 8), 6), ((64, 64, 64), 5), ((128, 512, 128), 4), ((256, 256, 256), 3),
        ((512, 512, 512), 2), ((1024, 1024, 512), 1)]


def main(argv: list[str]) -> int:
    out = rec.fresh_out(Path(argv[0]) if argv else Path(__file__).resolve().parent / "jax_many_programs")
    dump = out / "hlo"
    rec.set_xla_flags(1, dump)
    t0 = time.perf_counter()
    import jax
    import numpy as np

    @jax.jit
    def dot(a, b):
        return a @ b

    rng = np.random.default_rng(0)
    operands = [(jax.device_put(rng.standard_normal((m, k), np.float32)),
                 jax.device_put(rng.standard_normal((k, n), np.float32))) for (m, k, n), _ in DOTS]
    for a, b in operands:  # compile and warm each program outside the capture
        dot(a, b).block_until_ready()

    with jax.profiler.trace(str(out)):
        for round_ in range(max(count for _, count in DOTS)):
            for (a, b), (_, count) in zip(operands, DOTS):
                if round_ < count:
                    dot(a, b).block_until_ready()

    xplane = rec.fix_run_names(out)
    modules = rec.keep_text_dump(dump)
    answers = rec.trace_answers(xplane)
    by_id = {p["program_id"]: p for p in answers["programs_executed"]}
    dot_ids = [m["module_id"] for m in modules if m["module_name"] == "jit_dot"]
    if len(dot_ids) != len(DOTS) or set(by_id) != set(dot_ids):
        raise SystemExit(f"expected {len(DOTS)} jit_dot programs, dump {modules}, trace {sorted(by_id)}")
    programs = []
    for module_id, ((m, k, n), count) in zip(sorted(dot_ids), DOTS):  # compiled in DOTS order
        executed = by_id[module_id]
        if executed["executions"] != count:
            raise SystemExit(f"program {module_id} ran {executed['executions']} times, expected {count}")
        programs.append({"program_id": module_id, "name": "jit_dot", "m_k_n": [m, k, n], "dtype": "f32",
                         "flops": 2 * m * k * n,
                         **{k_: v for k_, v in executed.items() if k_ not in ("program_id", "name")}})
    rec.write_answers(out, {
        "command": "python sample_profiles/make_jax_many_programs.py",
        "n_devices": 1,
        "dump_modules": modules,
        "programs_in_capture_metadata": answers["programs_in_capture_metadata"],
        "programs": programs,
        "total_executions": sum(count for _, count in DOTS),
    }, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
