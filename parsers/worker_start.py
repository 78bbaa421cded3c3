"""How local worker processes start, how many, and how they end.

Start: ``fork`` where it is safe, a clean ``forkserver`` (else ``spawn``) where not. Fork copies this process
as it is, modules already imported, so workers start in milliseconds. It is unsafe once the process runs other
threads (JAX's runtime, a Dask client, a training loop calling ``xladiag.profile``): a child can inherit a lock
held by a thread that does not exist in it, and wait forever.

How many: never more than the cores this process may use, nor than the pieces of work (host files, planes).

End: workers die with their parent. A SIGTERM or SIGINT of the parent kills them before the parent dies of
that signal (exit 128+signum; a SIGINT the caller left to Python is a KeyboardInterrupt); a parent killed
outright (SIGKILL) takes them along through ``PR_SET_PDEATHSIG`` on Linux, a watchdog thread elsewhere.
Without that a worker, blocked on the pool's queue, would live forever holding the caller's stdout (a CI step
that never ends). A signal the caller ignores (SIG_IGN: nohup, some CI runners) stays ignored.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext

from ..writer import cleanup_on_signals

_PR_SET_PDEATHSIG = 1


def fork_is_safe() -> bool:
    """True in a single-threaded process without JAX loaded, on a platform that can fork."""
    return ("fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
            and "jax" not in sys.modules)


def worker_context() -> BaseContext:
    """The start method for a pool of workers: fork when :func:`fork_is_safe`, else a fresh process."""
    if fork_is_safe():
        return multiprocessing.get_context("fork")
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


def capped_workers(requested: int | None, work: int) -> int:
    """Processes worth running for ``work`` independent pieces: what was asked (default: every core), never
    more than the cores nor the pieces, at least 1 (``--workers 99999`` must not fork 99999 processes)."""
    return max(1, min(requested or usable_cores(), usable_cores(), work))


def _die_with_parent(parent_pid: int) -> None:
    """Worker initializer: end when the parent ends, whatever ends it; leave SIGTERM/SIGINT to the parent."""
    # Read first: a parent killed while this ran would otherwise leave the watchdog watching init.
    ppid = os.getppid()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker inherits the parent's Python handlers
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent ends us
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0 and not _alive(parent_pid):
                os._exit(1)  # it died before the prctl
    # Also where the prctl is set: a reparented worker (its parent gone by a path the prctl missed) ends too.
    threading.Thread(target=_watch_parent, args=(ppid,), daemon=True).start()


# glibc's mallopt parameters. By default a block past the mmap threshold (128 KiB, rising to 32 MiB as blocks are
# freed) is mapped on its own and unmapped when freed, and the heap's free top past the trim threshold goes back
# to the system: a decoder's big arrays (a plane's copy, event columns, their temporaries) are then fresh pages,
# zeroed by the kernel page by page, for each plane again.
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_KEEP_FREED_BYTES = 1 << 30


def keep_freed_memory() -> None:
    """In a worker process that decodes one big array after another: freed memory stays in the heap, reused
    without page faults (a tenth of a plane's decode was the kernel zeroing fresh pages). Linux (glibc) only;
    never in a caller's process, whose memory would then stay at its peak (the command's own, reading 5M
    events: 100 MB more at its peak for no time measurably saved)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_MAX, 0)  # every block from the heap: a plane's copy (> 32 MiB) reused too
        libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_FREED_BYTES)


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # glibc
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``): a worker that kept freed memory
    for reuse (keep_freed_memory) and has no more work, or a process whose many small freed tables would leave
    holes the next large arrays do not reuse. Elsewhere: nothing."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _alive(pid: int) -> bool:
    """Running: a parent killed before our prctl may stay a zombie (its own parent has not reaped it yet),
    which signal 0 still reaches, so on Linux the process state decides."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    return True


def _watch_parent(ppid: int) -> None:
    import time

    while os.getppid() == ppid:
        time.sleep(0.5)
    os._exit(1)


def kill_workers(pool: ProcessPoolExecutor) -> None:
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.kill()


def _end_workers_on_signal(pool: ProcessPoolExecutor):
    """While the pool runs: SIGTERM/SIGINT kill its workers, then end this process the way the signal would
    have (writer.cleanup_on_signals: main thread only, never over SIG_IGN)."""
    return cleanup_on_signals(lambda: kill_workers(pool))


@contextlib.contextmanager
def worker_pool(workers: int, context: BaseContext | None = None):
    """A ``ProcessPoolExecutor`` of ``workers`` processes that die with this one (see the module doc)."""
    context = context or worker_context()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_die_with_parent,
                               initargs=(os.getpid(),))
    with _end_workers_on_signal(pool):
        try:
            yield pool
        except BaseException as exc:
            if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: no wait for running work
                kill_workers(pool)
                pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
