"""A worker's decoded plane handed over through a shared-memory file (parsers/shipping.py): the same tables, arrays
aligned and writable, no file left behind, and the pipe when shared memory cannot take it."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import TPU_SAMPLE, only_xplane
from xladiag.parsers import shipping

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this machine")


def _tables() -> dict:
    rng = np.random.default_rng(3)
    return {"start_ps": [rng.integers(0, 2**40, 300_001), rng.integers(0, 9, 7)],
            "line": np.arange(200_003, dtype=np.int32), "flags": np.ones(5, bool), "names": ["a", "b"],
            "strided": np.arange(400_000, dtype=np.int64)[::2]}


def _ours() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("xladiag-")}


def test_a_round_trip_gives_equal_aligned_writable_arrays_and_leaves_no_file():
    before = _ours()
    original = _tables()
    shipped = shipping.ship(original, os.getpid())
    assert isinstance(shipped, shipping.Shipped)
    try:  # the contiguous arrays left the pickle; a strided one stays in it (numpy pickles it in-band)
        assert len(shipped.payload) < original["strided"].nbytes + 100_000 and Path(shipped.path).exists()
    finally:
        back = shipping.unship(shipped)
    assert not Path(shipped.path).exists() and _ours() == before
    for got, want in [(back["start_ps"][0], original["start_ps"][0]), (back["start_ps"][1], original["start_ps"][1]),
                      (back["line"], original["line"]), (back["flags"], original["flags"]),
                      (back["strided"], original["strided"])]:
        assert got.dtype == want.dtype and np.array_equal(got, want)
        assert got.flags.aligned and got.flags.writeable
    back["line"][0] = 7  # a private copy-on-write map: the change stays in this array
    assert back["line"][0] == 7 and back["names"] == ["a", "b"]


def test_small_results_and_no_room_go_through_the_pipe(monkeypatch):
    small = {"x": np.arange(10)}
    assert shipping.ship(small, os.getpid()) is small
    monkeypatch.setattr(shipping, "_SHM", "/nonexistent-shm-dir")
    big = _tables()
    assert shipping.ship(big, os.getpid()) is big


def test_a_failed_write_leaves_no_file(monkeypatch):
    before = _ours()

    def full(fd, data, at):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shipping.os, "pwrite", full)
    big = _tables()
    assert shipping.ship(big, os.getpid()) is big
    assert _ours() == before


def _ship_in_child(queue):
    queue.put(shipping.ship(_tables(), os.getppid()))


def test_another_process_ships_and_this_one_unships():
    context = multiprocessing.get_context("spawn")  # not fork: an earlier test of this process may have loaded JAX
    queue = context.Queue()
    child = context.Process(target=_ship_in_child, args=(queue,))
    child.start()
    shipped = queue.get(timeout=120)
    child.join(60)
    back = shipping.unship(shipped)
    assert np.array_equal(back["start_ps"][0], _tables()["start_ps"][0])
    assert not Path(shipped.path).exists()


# In a fresh interpreter: the plane workers fork, and this process may have loaded JAX (fork_is_safe).
_WORKERS_SCRIPT = """
import os, sys
from xladiag.parsers import plane_queue, shipping, xplane
shipping._MIN_BYTES = 0  # every plane of this small capture through shared memory
xplane._PARALLEL_BYTES = 0  # and decoded by workers, small as it is
shipped, real_unship = [], plane_queue.unship
plane_queue.unship = lambda obj: (shipped.append(obj), real_unship(obj))[1]
here, there = xplane.read_xspace(sys.argv[1], workers=1), xplane.read_xspace(sys.argv[1], workers=2)
assert any(isinstance(s, shipping.Shipped) for s in shipped), shipped
assert here.events.equals(there.events) and here.event_metadata.equals(there.event_metadata)
assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"xladiag-{os.getpid()}-")]
print("ok")
"""


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="the plane workers fork")
def test_planes_decoded_by_workers_equal_those_decoded_here():
    run = subprocess.run([sys.executable, "-c", _WORKERS_SCRIPT, str(only_xplane(TPU_SAMPLE))],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_an_abandoned_run_leaves_no_file_of_its_own_and_keeps_others():
    mine = shipping.ship(_tables(), os.getpid())
    other = shipping.ship(_tables(), os.getpid() + 1_000_000)  # no such process: another run's
    try:
        shipping.discard_all(os.getpid())
        assert not Path(mine.path).exists() and Path(other.path).exists()
    finally:
        shipping.discard(other.path)
