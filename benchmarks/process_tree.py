"""Wall, CPU and memory of a command that starts worker processes (``diagnose RUN --workers N``).

``getrusage(RUSAGE_CHILDREN)`` gives the peak RSS of the largest single descendant, not what a multi-process
run holds at once. Here the process tree is sampled (psutil): memory is the peak over time of the summed RSS
of the command and all its descendants (and, with ``pss=True``, of their PSS, which counts pages a forked
worker shares with its parent once). CPU is every descendant's user + system time (``RUSAGE_CHILDREN`` of
this process, so run one measurement per process).

    python benchmarks/process_tree.py diagnose RUN --workers 2 --format json -o r.json -q
    python benchmarks/process_tree.py --pss diagnose RUN --workers 2 --format json -o r.json -q
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time


def measure_tree(cmd: list[str], *, interval_s: float = 0.02, pss: bool = False) -> dict:
    """Run ``cmd``; its wall seconds, CPU seconds (all descendants), CPU/wall, peak summed RSS (and PSS) in
    bytes of its process tree, exit code and last stderr line."""
    import psutil  # the test extra has it; only the benchmark needs it

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root = psutil.Process(proc.pid)
    peak_rss = peak_pss = 0
    while proc.poll() is None:
        rss = pss_sum = 0
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                info = p.memory_full_info() if pss else p.memory_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue  # it ended between the listing and the read
            rss += info.rss
            pss_sum += getattr(info, "pss", 0)
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss_sum)
        time.sleep(interval_s)
    stderr = proc.communicate()[1].decode(errors="replace")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return {"rc": proc.returncode, "wall_s": wall, "cpu_s": cpu, "cpu_per_wall": cpu / wall if wall else 0.0,
            "peak_tree_rss_bytes": peak_rss, "peak_tree_pss_bytes": peak_pss if pss else None,
            "last_stderr": lines[-1] if lines else ""}


if __name__ == "__main__":
    args = sys.argv[1:]
    with_pss = bool(args) and args[0] == "--pss"
    print(json.dumps(measure_tree(args[1:] if with_pss else args, pss=with_pss)))
