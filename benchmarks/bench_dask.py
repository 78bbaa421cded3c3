"""The ``--dask`` row of ``bench_diagnose.py``: a many-host capture through ``diagnose --scheduler`` on a
Dask ``LocalCluster`` of two worker processes, with the peak RSS of every process.

A fresh cluster starts for each run, before the command (its start-up is not timed), so the runs are
independent: a worker that served earlier runs still holds what Dask keeps of them (its statistical profile,
``distributed.worker.profile``: 14 MB more per run here before the hosts were reduced off the sampled thread,
``analyzer/hosts/dask_relay.py``). While ``diagnose`` runs, every 20 ms the RSS of its own process, of its child
(the relay that holds the Dask client) and of each Dask worker process is read (psutil); a worker's peak is over the
run, so it includes what the worker held idle (reported too). The yardstick is the largest host file alone:
``diagnose`` on a log dir holding only that file (a symlink), in one process, its peak RSS.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_WORKERS = 2


def _rss(proc) -> int:
    import psutil

    try:
        return proc.memory_info().rss
    except psutil.Error:
        return 0


def _sample_run(cmd: list[str], workers: list) -> dict:
    """Run ``cmd``: wall seconds, exit code, the peak RSS of its own process, of its largest child (the Dask client
    relay of ``--scheduler``), of its whole tree summed, and of each process in ``workers``."""
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root = psutil.Process(proc.pid)
    main = tree = 0
    children: dict[int, int] = {}
    peaks = [_rss(w) for w in workers]
    while proc.poll() is None:
        try:
            kids = root.children(recursive=True)
        except psutil.Error:
            kids = []
        own, theirs = _rss(root), {k.pid: _rss(k) for k in kids}
        main, tree = max(main, own), max(tree, own + sum(theirs.values()))
        children = {pid: max(children.get(pid, 0), rss) for pid, rss in {**children, **theirs}.items()}
        peaks = [max(p, _rss(w)) for p, w in zip(peaks, workers)]
        time.sleep(0.02)
    err = proc.stderr.read().decode(errors="replace").strip().splitlines()
    proc.wait()
    return {"rc": proc.returncode, "wall_s": time.perf_counter() - t0, "main_rss_bytes": main,
            "child_rss_bytes": max(children.values(), default=0), "tree_rss_bytes": tree,
            "worker_rss_bytes": peaks, "last_stderr": err[-1] if err else ""}


def _alone(files: list[Path], work: Path, fmt: str) -> list[str]:
    """The command that diagnoses the largest host file alone (a log dir with only it, linked)."""
    largest = max(files, key=lambda f: f.stat().st_size)
    run = work / "alone" / "plugins" / "profile" / largest.parent.name
    run.mkdir(parents=True, exist_ok=True)
    link = run / largest.name
    if not link.exists():
        link.symlink_to(largest.resolve())
    return [sys.executable, "-m", "xladiag.cli", str(work / "alone"), "--quiet", "--workers", "1",
            "--format", fmt, "-o", str(work / f"alone.{fmt}")]


def _medians(runs: list[dict], alone: list[dict], idle: list[list[int]]) -> dict:
    return {"wall_s": statistics.median(r["wall_s"] for r in runs),
            "main_rss_bytes": statistics.median(r["main_rss_bytes"] for r in runs),
            "child_rss_bytes": statistics.median(r["child_rss_bytes"] for r in runs),
            "tree_rss_bytes": statistics.median(r["tree_rss_bytes"] for r in runs),
            "worker_rss_bytes": [statistics.median(r["worker_rss_bytes"][i] for r in runs) for i in range(_WORKERS)],
            "worker_idle_rss_bytes": [statistics.median(i[w] for i in idle) for w in range(_WORKERS)],
            "alone_rss_bytes": statistics.median(r["main_rss_bytes"] for r in alone),
            "alone_wall_s": statistics.median(r["wall_s"] for r in alone), "runs": runs, "alone": alone}


def run_dask_row(logdir: Path, files: list[Path], repeat: int, formats: tuple[str, ...] = ("json", "html")) -> dict:
    """Medians over ``repeat`` runs of each report format (JSON; HTML, what ``diagnose`` writes by default): the
    Dask run (main process, its relay, each worker) and the largest host alone, written in the same format.
    The first format's numbers at the top level, every format's under ``formats``."""
    import psutil
    from distributed import Client, LocalCluster

    runs = {f: [] for f in formats}
    alone = {f: [] for f in formats}
    idle = {f: [] for f in formats}
    with tempfile.TemporaryDirectory(prefix="xladiag_dask_") as tmp:
        work = Path(tmp)
        for _ in range(repeat):
            for fmt in formats:
                with LocalCluster(n_workers=_WORKERS, threads_per_worker=1, processes=True, memory_limit=0,
                                  dashboard_address=None) as cluster, Client(cluster) as client:
                    pids = client.run(lambda: __import__("os").getpid())
                    workers = [psutil.Process(pid) for pid in pids.values()]
                    idle[fmt].append([_rss(w) for w in workers])
                    cmd = [sys.executable, "-m", "xladiag.cli", str(logdir), "--quiet", "--scheduler",
                           cluster.scheduler_address, "--format", fmt, "-o", str(work / f"dask.{fmt}")]
                    runs[fmt].append(_sample_run(cmd, workers))
                alone[fmt].append(_sample_run(_alone(files, work, fmt), []))
                last = runs[fmt][-1]
                print(f"  dask {fmt}: {last['wall_s']:.2f} s, main {last['main_rss_bytes'] / 2**20:.0f} MB, relay "
                      f"{last['child_rss_bytes'] / 2**20:.0f} MB, workers "
                      + ", ".join(f"{b / 2**20:.0f} MB" for b in last["worker_rss_bytes"])
                      + f"; alone {alone[fmt][-1]['main_rss_bytes'] / 2**20:.0f} MB", file=sys.stderr)
    failed = [r for f in formats for r in runs[f] + alone[f] if r["rc"] != 0]
    if failed:
        return {"error": failed[-1]["last_stderr"] or f"exit {failed[-1]['rc']}", "runs": runs, "alone": alone}
    each = {f: _medians(runs[f], alone[f], idle[f]) for f in formats}
    return {**each[formats[0]], "formats": each}


def dask_table(label: str, row: dict) -> list[str]:
    """Markdown lines: each process's peak RSS and its ratio to the largest host diagnosed alone, per format."""
    if "error" in row:
        return [f"Dask run of {label} failed: {row['error'][:120]}"]
    each = row.get("formats") or {"json": row}
    names = {"json": "JSON", "html": "HTML (the default)"}
    head = " | ".join(f"{names.get(f, f)}: peak RSS (÷ largest host alone)" for f in each)
    walls = ", ".join(f"{names.get(f, f).split()[0]} {r['wall_s']:.2f} s" for f, r in each.items())
    lines = [f"| {label} on a LocalCluster of {_WORKERS} workers (`--scheduler`; {walls}) | {head} |",
             "|---|" + "---|" * len(each)]

    def cells(value) -> str:
        return " | ".join(f"{value(r) / 2**20:.0f} MB ({value(r) / r['alone_rss_bytes']:.2f})" for r in each.values())

    lines.append(f"| `diagnose` process | {cells(lambda r: r['main_rss_bytes'])} |")
    lines.append(f"| its Dask client relay (child process) | {cells(lambda r: r['child_rss_bytes'])} |")
    for i in range(_WORKERS):
        idle = max(r["worker_idle_rss_bytes"][i] for r in each.values())
        lines.append(f"| Dask worker {i + 1} (idle before: {idle / 2**20:.0f} MB) "
                     f"| {cells(lambda r, i=i: r['worker_rss_bytes'][i])} |")
    lines.append(f"| largest host file alone (`--workers 1`) | {cells(lambda r: r['alone_rss_bytes'])} |")
    lines.append(f"| (`diagnose` and its relay summed) | {cells(lambda r: r['tree_rss_bytes'])} |")
    return lines
