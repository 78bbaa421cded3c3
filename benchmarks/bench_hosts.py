"""Many hosts, bounded memory: every process's peak RSS on a 64-host capture against the largest host's own run.

    python benchmarks/bench_hosts.py                                # 64 hosts x 100k events, built in a temp dir
    python benchmarks/bench_hosts.py --captures /tmp/h64 --hosts 64 --events 100000 --workers 2

Three runs of ``diagnose`` (each a fresh ``python -m xladiag.cli`` process, JSON to a file):

1. the largest host file alone (the single-capture path): the reference peak;
2. the whole capture on the local pool (``--workers N``): the main process and each worker;
3. the whole capture with ``--scheduler`` on a Dask ``LocalCluster(n_workers=N, processes=True,
   threads_per_worker=1)`` this script starts: the main process and each Dask worker process.

A sampler thread reads the RSS of every process involved (psutil, every 20 ms): the command's process tree
and, for the cluster, the cluster's own processes (started before the command, so their idle RSS counts
too). Each process's peak is printed against the reference; the goal is every one under 1.5x. The two
whole-capture reports must be the same bytes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

_REPO = Path(__file__).resolve().parents[1]
GOAL = 1.5


class _Peaks:
    """Peak RSS per process (pid -> (name, bytes)) of a process tree and any extra processes, sampled."""

    def __init__(self, root: int, extra: list[psutil.Process] = ()):
        self.root, self.extra, self.peaks, self._stop = root, list(extra), {}, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _procs(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root)
            return [root, *root.children(recursive=True), *self.extra]
        except psutil.Error:
            return list(self.extra)

    def _run(self) -> None:
        while not self._stop.is_set():
            extra = {p.pid for p in self.extra}
            for p in self._procs():
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                label = "main" if p.pid == self.root else "Dask process" if p.pid in extra else "pool worker"
                self.peaks[p.pid] = (label, max(rss, self.peaks.get(p.pid, ("", 0))[1]))
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _diagnose(args: list[str], out: Path, extra: list[psutil.Process] = ()) -> tuple[dict, float]:
    """Run diagnose with ``args``; (pid -> (label, peak bytes), wall seconds)."""
    cmd = [sys.executable, "-m", "xladiag.cli", *args, "--quiet", "--format", "json", "-o", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with _Peaks(proc.pid, extra) as peaks:
        _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {err.strip()[-500:]}")
    return peaks.peaks, time.perf_counter() - t0


def _build(root: Path, hosts: int, events: int) -> Path:
    sys.path.insert(0, str(_REPO / "tests"))
    from builders.large_capture import multi_host_capture

    existing = sorted(root.glob("plugins/profile/*/*.xplane.pb"))
    if len(existing) == hosts:
        return existing[0].parent
    print(f"building {hosts} hosts x {events:,} events in {root} ...", flush=True)
    return multi_host_capture(root, hosts=hosts, events_per_host=events)[0].parent


def _table(title: str, peaks: dict, reference: int, wall: float) -> bool:
    print(f"\n{title} ({wall:.1f} s wall)")
    ok = True
    for pid, (label, peak) in sorted(peaks.items(), key=lambda kv: -kv[1][1]):
        ratio = peak / reference
        ok &= ratio < GOAL
        print(f"  {label:<42} pid {pid:>7}  {peak / 2**20:8.1f} MB  {ratio:5.2f}x")
    return ok


def _cluster_run(run: Path, workers: int, out: Path) -> tuple[dict, float]:
    from distributed import LocalCluster

    with LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None) as cluster:
        me = psutil.Process()
        mine = [p for p in me.children(recursive=True)]  # the nannies and their worker processes
        return _diagnose([str(run), "--scheduler", cluster.scheduler_address], out, mine)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", type=Path, help="where to build the capture (reused when there)")
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--events", type=int, default=100_000, help="op events per host")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        run = _build(args.captures or Path(tmp) / "capture", args.hosts, args.events)
        largest = max(run.glob("*.xplane.pb"), key=lambda p: p.stat().st_size)
        single, wall = _diagnose([str(largest)], Path(tmp) / "one.json")
        reference = max(peak for _, peak in single.values())
        print(f"largest host {largest.name}: {reference / 2**20:.1f} MB peak alone ({wall:.1f} s wall); "
              f"goal: every process under {GOAL}x")
        pool, wall_pool = _diagnose([str(run), "--workers", str(args.workers)], Path(tmp) / "pool.json")
        ok = _table(f"local pool, {args.workers} workers, {args.hosts} hosts", pool, reference, wall_pool)
        dask, wall_dask = _cluster_run(run, args.workers, Path(tmp) / "dask.json")
        ok &= _table(f"Dask LocalCluster, {args.workers} worker processes", dask, reference, wall_dask)
        same = (Path(tmp) / "pool.json").read_bytes() == (Path(tmp) / "dask.json").read_bytes()
        print(f"\nreports: {'the same' if same else 'DIFFERENT'}; every process under {GOAL}x: {ok}")
        return 0 if same and ok else 1


if __name__ == "__main__":
    sys.exit(main())
