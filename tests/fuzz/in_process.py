"""One mutant diagnosed by the CLI's entry point inside a running process (click's CliRunner): no interpreter
start and no imports per mutant, the same checks as the process runner (``fuzz_inputs.problems_of``).
``worker_runner`` spreads the mutants over a few such processes, each started once.

What a process gave for free is rebuilt here, for the calling thread only (run mutants one at a time):
- the memory figure is this run's growth of the resident set (the peak, reset before each run through
  ``/proc/self/clear_refs``, less the resident set before it), checked against the same cap;
- the address-space cap: the soft limit is lowered to what the process maps now plus the same 8 GiB, and
  restored after, so that a runaway mutant gets a MemoryError (an "internal error") instead of the machine;
- the timeout: SIGALRM raises an exception the CLI's own ``except Exception`` cannot swallow;
- Python warnings: recorded with the interpreter's default filters and reported as the process would print them.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import resource
import signal
import sys
import threading
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from click.testing import CliRunner

import fuzz_inputs
from fuzz_inputs import Mutant, Outcome


class _Timeout(BaseException):
    """Raised by the alarm: not an Exception, so the CLI's catch-all lets it through."""


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset VmHWM (the resident-set peak) to the current resident set; False where Linux does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> int:
    hwm = _status_kb("VmHWM")
    return (hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


@contextlib.contextmanager
def _address_space_cap():
    """At most ``_ADDRESS_SPACE_LIMIT`` more address space than mapped now, for the body only."""
    size_kb = _status_kb("VmSize")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = None if size_kb is None else size_kb * 1024 + fuzz_inputs._ADDRESS_SPACE_LIMIT
    if cap is not None and hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if cap is not None and (soft == resource.RLIM_INFINITY or cap < soft):
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def _cwd(path: Path):
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


@contextlib.contextmanager
def _alarm(seconds: int):
    def ring(signum, frame):
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _default_warning_filters() -> None:
    """The filters of a plain ``python -m`` run, which printed what the process runner saw."""
    warnings.simplefilter("default")
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category)


def run_mutant(mutant: Mutant, workdir: Path) -> Outcome:
    """The mutant diagnosed by ``xladiag.cli.main`` in this process; same checks, same Outcome."""
    from xladiag.cli import main

    assert threading.current_thread() is threading.main_thread(), "signals and rlimits: main thread only"
    case = fuzz_inputs.write_case(mutant, workdir)
    args = [*mutant.args, "--format", "json", "-o", "report.json", "-q"]
    exact = _reset_peak()
    before = (_status_kb("VmRSS") or 0) * 1024 if exact else _peak_bytes()
    with warnings.catch_warnings(record=True) as caught:
        _default_warning_filters()
        try:  # in the case folder, as the process ran: '.' is the mutant, and no pyproject.toml above it
            with _cwd(case), _address_space_cap(), _alarm(fuzz_inputs.TIMEOUT_S):
                result = CliRunner().invoke(main, args, prog_name="diagnose")
        except _Timeout:
            result = None
    rss = max(0, _peak_bytes() - before)
    if result is None:
        code, stderr = -9, ""
    else:
        code, stderr = result.exit_code, result.stderr
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            stderr += "".join(["Traceback (most recent call last):\n", *_traceback_lines(result)])
    stderr += "".join(f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}\n" for w in caught)
    (case / "stderr").write_text(stderr)
    return fuzz_inputs.finish(mutant, case, code, rss, fuzz_inputs.problems_of(code, stderr, rss, case / "report.json"))


def _traceback_lines(result) -> list[str]:
    import traceback

    return traceback.format_exception(*result.exc_info)[1:]


def _start_worker(path: list[str]) -> None:
    sys.path[:0] = [p for p in path if p not in sys.path]


def _in_worker(mutant: Mutant, workdir: Path) -> Outcome:
    import in_process  # by its own name in the worker, whatever the parent called it

    return in_process.run_mutant(mutant, workdir)


@contextlib.contextmanager
def worker_runner(workers: int):
    """A runner for ``fuzz_inputs.run_fuzz(workers=N)`` that sends each mutant to one of ``workers`` processes,
    started once (the imports paid once each, not once per mutant), which run it in-process on their main
    thread. The parent's threads only wait on them."""
    here = str(Path(__file__).resolve().parent)
    context = multiprocessing.get_context("spawn")  # no fork of a test process that may hold threads
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                             initargs=([here, *sys.path],)) as pool:
        yield lambda mutant, workdir: pool.submit(_in_worker, mutant, workdir).result()
