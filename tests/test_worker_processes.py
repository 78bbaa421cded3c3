"""Worker processes (parsers/worker_start.py): never more than the cores and the work, and never outliving
their parent, whether it ends by SIGTERM, SIGINT or SIGKILL; a signal the caller ignores stays ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import xladiag.parsers.worker_start as worker_start
from builders.large_capture import multi_host_capture
from xladiag.analyzer.analysis import analyze
from xladiag.parsers.xplane import read_xspace

FORK_OK = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")

# A parent that starts a pool of 2 workers busy for a minute, prints their pids, and waits on them.
_PARENT = """
import multiprocessing, signal, sys, time
from xladiag.parsers.worker_start import worker_pool
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with worker_pool(2, multiprocessing.get_context("fork")) as pool:
    futures = [pool.submit(time.sleep, 60) for _ in range(2)]
    while len(pool._processes) < 2:
        time.sleep(0.01)
    print(" ".join(map(str, pool._processes)), flush=True)
    futures[0].result()
"""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _started(mode: str = "plain"):
    proc = subprocess.Popen([sys.executable, "-c", _PARENT, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2, proc.stderr.read() if proc.poll() is not None else pids
    return proc, pids


def _cleanup(proc, pids):
    for pid in [proc.pid, *pids]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(10)


needs_linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


@needs_linux
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_workers_end_with_their_parent(signum):
    """The parent dies of the signal (exit 128+signum: -signum here) and takes its workers along."""
    proc, pids = _started()
    try:
        os.kill(proc.pid, signum)
        assert proc.wait(10) == -signum
        assert _wait_gone(pids) == []
    finally:
        _cleanup(proc, pids)


@needs_linux
def test_an_ignored_sigterm_stays_ignored():
    """nohup / a CI runner: SIGTERM ignored at start is not turned into a death by our handler."""
    proc, pids = _started("ignore")
    try:
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None and all(_alive(p) for p in pids)
    finally:
        _cleanup(proc, pids)
    assert _wait_gone(pids) == []


def test_workers_capped_by_cores_and_work():
    cores = worker_start.usable_cores()
    assert worker_start.capped_workers(99_999, 3) == min(3, cores)
    assert worker_start.capped_workers(99_999, 1) == 1
    assert worker_start.capped_workers(None, 10_000) == cores
    assert worker_start.capped_workers(2, 0) == 1


class _CountingPool:
    """Records the pool sizes asked for; the real pool runs."""

    def __init__(self):
        self.sizes: list[int] = []
        self.real = worker_start.ProcessPoolExecutor

    def __call__(self, max_workers, **kw):
        self.sizes.append(max_workers)
        return self.real(max_workers=max_workers, **kw)


@FORK_OK
def test_workers_99999_start_no_pool_for_one_small_file(tpu_xplane, monkeypatch):
    pools = _CountingPool()
    monkeypatch.setattr(worker_start, "ProcessPoolExecutor", pools)
    assert len(read_xspace(tpu_xplane, workers=99_999).events) > 0
    assert pools.sizes == []


@FORK_OK
def test_workers_99999_start_one_per_host_at_most(tmp_path, monkeypatch):
    multi_host_capture(tmp_path, hosts=2, events_per_host=2_000, ops_per_step=50)
    pools = _CountingPool()
    monkeypatch.setattr(worker_start, "ProcessPoolExecutor", pools)
    assert len(analyze(tmp_path, workers=99_999).hosts) == 2
    assert pools.sizes and max(pools.sizes) <= min(2, worker_start.usable_cores())


def test_cli_interrupted_exits_130(cpu_xplane):
    """Ctrl-C (KeyboardInterrupt once the workers are killed) ends the command with 128 + SIGINT, as a shell
    reports a process the signal ended, not click's generic 1."""
    code = ("import sys, xladiag.api as api\n"
            "def interrupted(**kw): raise KeyboardInterrupt\n"
            "api.diagnose = interrupted\n"
            "from xladiag.cli import main\n"
            f"sys.argv = ['diagnose', {str(cpu_xplane)!r}, '--format', 'json']\n"
            "main()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "diagnose: aborted"


_REUSE = r"""
import resource, sys
import numpy as np
from xladiag.parsers.worker_start import keep_freed_memory
if sys.argv[1] == "keep":
    keep_freed_memory()
for size in (1 << 26, 1 << 22):  # a plane's copy (past glibc's 32 MiB mmap cap), an event column
    np.ones(size, np.uint8)  # made and freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    np.ones(size, np.uint8)  # the same size again
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_plane_worker_reuses_freed_memory_without_page_faults():
    """keep_freed_memory (called in each plane worker): a big array made again after one was freed takes the
    freed pages, where by default it is mapped fresh and the kernel zeroes it page by page."""
    faults = {how: [int(n) for n in subprocess.run([sys.executable, "-c", _REUSE, how], capture_output=True,
                                                   text=True, check=True).stdout.split()]
              for how in ("keep", "default")}
    # Mapped fresh by default: 16k small pages per 64 MiB, or a few dozen huge ones where the kernel has them
    # (transparent huge pages), so the default is only said to fault more than the kept heap, which barely does.
    assert all(d > k for d, k in zip(faults["default"], faults["keep"])), faults
    assert all(n < 50 for n in faults["keep"]), faults
