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


def _alone(files: list[Path], work: Path) -> list[str]:
    """The command that diagnoses the largest host file alone (a log dir with only it, linked)."""
    largest = max(files, key=lambda f: f.stat().st_size)
    run = work / "alone" / "plugins" / "profile" / largest.parent.name
    run.mkdir(parents=True, exist_ok=True)
    link = run / largest.name
    if not link.exists():
        link.symlink_to(largest.resolve())
    return [sys.executable, "-m", "xladiag.cli", str(work / "alone"), "--quiet", "--workers", "1",
            "--format", "json", "-o", str(work / "alone.json")]


def run_dask_row(logdir: Path, files: list[Path], repeat: int) -> dict:
    """Medians over ``repeat`` runs: the Dask run (main process, its relay, each worker) and the largest host alone."""
    import psutil
    from distributed import Client, LocalCluster

    runs, alone, idle = [], [], []
    with tempfile.TemporaryDirectory(prefix="xladiag_dask_") as tmp:
        work = Path(tmp)
        for _ in range(repeat):
            with LocalCluster(n_workers=_WORKERS, threads_per_worker=1, processes=True, memory_limit=0,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                pids = client.run(lambda: __import__("os").getpid())
                workers = [psutil.Process(pid) for pid in pids.values()]
                idle.append([_rss(w) for w in workers])
                cmd = [sys.executable, "-m", "xladiag.cli", str(logdir), "--quiet", "--scheduler",
                       cluster.scheduler_address, "--format", "json", "-o", str(work / "dask.json")]
                runs.append(_sample_run(cmd, workers))
            alone.append(_sample_run(_alone(files, work), []))
            print(f"  dask: {runs[-1]['wall_s']:.2f} s, main {runs[-1]['main_rss_bytes'] / 2**20:.0f} MB, relay "
                  f"{runs[-1]['child_rss_bytes'] / 2**20:.0f} MB, workers "
                  + ", ".join(f"{b / 2**20:.0f} MB" for b in runs[-1]["worker_rss_bytes"]), file=sys.stderr)
    failed = [r for r in runs + alone if r["rc"] != 0]
    if failed:
        return {"error": failed[-1]["last_stderr"] or f"exit {failed[-1]['rc']}", "runs": runs, "alone": alone}
    return {"wall_s": statistics.median(r["wall_s"] for r in runs),
            "main_rss_bytes": statistics.median(r["main_rss_bytes"] for r in runs),
            "child_rss_bytes": statistics.median(r["child_rss_bytes"] for r in runs),
            "tree_rss_bytes": statistics.median(r["tree_rss_bytes"] for r in runs),
            "worker_rss_bytes": [statistics.median(r["worker_rss_bytes"][i] for r in runs) for i in range(_WORKERS)],
            "worker_idle_rss_bytes": [statistics.median(i[w] for i in idle) for w in range(_WORKERS)],
            "alone_rss_bytes": statistics.median(r["main_rss_bytes"] for r in alone),
            "alone_wall_s": statistics.median(r["wall_s"] for r in alone), "runs": runs, "alone": alone}


def dask_table(label: str, row: dict) -> list[str]:
    """Markdown lines: each process's peak RSS and its ratio to the largest host diagnosed alone."""
    if "error" in row:
        return [f"Dask run of {label} failed: {row['error'][:120]}"]
    base = row["alone_rss_bytes"]
    lines = [f"| {label} on a LocalCluster of {_WORKERS} workers (`--scheduler`), {row['wall_s']:.2f} s | peak RSS "
             "| ÷ largest host alone |", "|---|---|---|",
             f"| `diagnose` process | {row['main_rss_bytes'] / 2**20:.0f} MB | {row['main_rss_bytes'] / base:.2f} |",
             f"| its Dask client relay (child process) | {row['child_rss_bytes'] / 2**20:.0f} MB "
             f"| {row['child_rss_bytes'] / base:.2f} |"]
    for i, (peak, idle) in enumerate(zip(row["worker_rss_bytes"], row["worker_idle_rss_bytes"]), 1):
        lines.append(f"| Dask worker {i} (idle before: {idle / 2**20:.0f} MB) | {peak / 2**20:.0f} MB "
                     f"| {peak / base:.2f} |")
    lines.append(f"| largest host file alone (`--workers 1`, {row['alone_wall_s']:.2f} s) | {base / 2**20:.0f} MB "
                 "| 1.00 |")
    lines.append(f"| (`diagnose` and its relay summed: {row['tree_rss_bytes'] / 2**20:.0f} MB) | | |")
    return lines
