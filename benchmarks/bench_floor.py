"""The parse floor of ``bench_diagnose.py``: upb parsing the same host files, nothing else.

The floor command reads each host file and hands it to upb's ``ParseFromString`` with our XSpace schema
(``parsers/xspace_schema.py``), in a fresh interpreter like the other columns (start-up included), over as
many processes as ``diagnose`` uses: one file in one process, N files over min(N, cores) forked workers.
No decoder can beat this by much: every byte has to be read and every event walked once.
"""

from __future__ import annotations

import sys
from pathlib import Path

FLOOR = r"""
import os, sys
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from xladiag.parsers.xspace_schema import XSpace

def parse(path):
    with open(path, "rb") as f:
        data = f.read()
    space = XSpace()
    space.ParseFromString(data)
    return len(space.planes)

files = sys.argv[1:]
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
workers = max(1, min(len(files), cores))
if workers == 1:
    planes = [parse(f) for f in files]
else:
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        planes = list(pool.map(parse, files))
assert all(planes), "a host file has no plane"
"""


def floor_command(files: list[Path]) -> list[str]:
    """The command that parses ``files`` as the floor (``python -c``, the ``xladiag`` importable here)."""
    return [sys.executable, "-c", FLOOR, *map(str, files)]


def count_events(files: list[Path]) -> int:
    """Events in every line of every plane of ``files`` (per-line counts: no per-event Python)."""
    from xladiag.parsers.xspace_schema import XSpace

    total = 0
    for path in files:
        space = XSpace()
        space.ParseFromString(Path(path).read_bytes())
        total += sum(len(line.events) for plane in space.planes for line in plane.lines)
    return total


def _per(r: dict, floor: dict, key: str) -> str:
    return "-" if "error" in r or "error" in floor or not floor[key] else f"{r[key] / floor[key]:.2f}"


def _rate(r: dict, events: int) -> str:
    if "error" in r or not r["cpu_s"]:
        return "-"
    rate = events / r["cpu_s"]
    return f"{rate / 1e6:.2f} M" if rate >= 1e6 else f"{rate / 1e3:.0f} k"


def floor_table(results: list[dict]) -> list[str]:
    """The second table: each capture's parse floor, ``diagnose``'s time over it and its events per second
    per core (events / CPU seconds, interpreter start included)."""
    lines = ["| capture | events | parse floor wall / RSS (CPU s) | JSON ÷ floor wall, CPU | HTML ÷ floor wall, CPU "
             "| events/s per core JSON, HTML |", "|---|---|---|---|---|---|"]
    for row in results:
        f, j, h = row["floor"], row["json"], row["html"]
        cell = (f"failed: {f['error'][:60]}" if "error" in f
                else f"{f['wall_s']:.2f} s / {f['peak_rss_bytes'] / 2**20:.0f} MB ({f['cpu_s']:.2f})")
        lines.append(f"| {row['label']} | {row['events']:,} | {cell} | {_per(j, f, 'wall_s')}, {_per(j, f, 'cpu_s')} "
                     f"| {_per(h, f, 'wall_s')}, {_per(h, f, 'cpu_s')} | {_rate(j, row['events'])}, "
                     f"{_rate(h, row['events'])} |")
    return lines
