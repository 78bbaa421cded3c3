"""Read a capture's hosts on every core, or on a Dask cluster: the per-host map, then the merge.

One host file: read here, all events kept (the single-capture path). Several: each host is decoded and
reduced where it is read (``host_reduce``) and the reductions merged (``host_merge``), so memory is
bounded by the largest host, not the sum. On GPU and CPU hosts which ops are transfers (what the unions of
the transfer numbers take: communication kernels against compute kernels, the non-transfer ops) comes from
the HLO each host file carries (``transfer_totals``). Hosts of several platforms, or a host that cannot be
reduced alone (a program without its HLO in the file, no op event), send the capture the all-events way:
every host decoded in parallel, its events all kept.

Where the map runs: ``workers`` local processes (default: the cores this process may use), in this
process with one, or the Dask cluster at ``scheduler`` (``dask.distributed``; the workers read the host
files by their path, so they must see the same files).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor, Future, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import replace

import pandas as pd

from ...errors import InputError, UsageError
from ...parsers.discovery import CaptureFiles
from ...parsers.worker_start import capped_workers, fork_is_safe, usable_cores, worker_pool
from ...parsers.xplane import read_xspace
from ..capture.build import build_capture
from ..steps.choice import StepChoice, choose_steps
from ..steps.op_stats import measure
from .compact import KeyBook, compact
from .dask_relay import NEEDS_DASK, RelayExecutor, run_unsampled
from .merge import Measured, SpansNotSummable, devices_that_ran, merge_hosts
from .reduce import HostHlo, HostPart, reduce_host
from .transfer_totals import forget_programs

Progress = Callable[[str], None]


def default_workers() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    return usable_cores()


class _InProcess(Executor):
    """One worker: each host in turn, here (no process to start, one host's events in memory at a time)."""

    def submit(self, fn, /, *args, **kwargs):
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller through the future, as a pool does
            future.set_exception(exc)
        return future


class _Unsampled(Executor):
    """The Dask client's executor, each task's work on a thread the worker's profiler does not sample."""

    def __init__(self, executor: Executor):
        self._executor = executor

    def submit(self, fn, /, *args):
        return self._executor.submit(run_unsampled, fn, *args)


@contextmanager
def _in_process_dask(scheduler: str):
    """A Dask client here: for an in-process cluster (``inproc://``), reachable from no other process, or where
    no relay process can start (an embedded interpreter without ``sys.executable``)."""
    try:
        from distributed import Client
    except ImportError:
        raise UsageError(NEEDS_DASK) from None
    try:
        client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"--scheduler {scheduler}: cannot reach the Dask scheduler: {exc}") from None
    try:
        yield _Unsampled(client.get_executor())
    finally:
        client.close()


@contextmanager
def _executor(workers: int, scheduler: str | None, memory_urls: bool = False):
    if scheduler and (scheduler.startswith("inproc://") or not sys.executable):
        with _in_process_dask(scheduler) as executor:
            yield executor
    elif scheduler:  # the Dask client in a relay process: no dask.distributed here (dask_relay)
        if importlib.util.find_spec("distributed") is None:
            raise UsageError(NEEDS_DASK)
        executor = RelayExecutor(scheduler)
        try:
            yield executor
        finally:
            executor.shutdown()
    elif workers <= 1 or (memory_urls and not fork_is_safe()):
        # memory:// lives in this process: only a forked child sees it.
        yield _InProcess()
    else:
        # Forked workers start with xladiag imported; where fork is unsafe (threads, JAX) they start clean.
        # They die with this process (worker_start).
        with worker_pool(workers) as pool:
            yield pool


class _Programs:
    """What every host repeats of the programs it ran, kept once as the hosts arrive (in any order):

    - each program's HLO bytes, given back to the first host in file order that carries them (what
      ``embedded_hlo`` takes);
    - op metadata rows: a host's row is dropped when a host before it in file order, already arrived, has one
      for the op (the merge keeps the first host's row per op, so a dropped row is never the one kept);
    - op keys and trace lines, numbered once (``compact.KeyBook``): a host's tables keep the numbers."""

    def __init__(self):
        self.book = KeyBook()
        self.data: dict[tuple[str, bytes], bytes] = {}
        self.first: dict[tuple[str, bytes], int] = {}
        self.op_first: dict[tuple[str, str], int] = {}

    def _thin_metadata(self, index: int, meta: pd.DataFrame | None) -> pd.DataFrame | None:
        if meta is None:
            return meta
        keys = [(p, n) for p, n in zip(meta["program_id"], meta["op_name"]) if isinstance(p, str)]  # per op
        drop = {k for k in keys if self.op_first.get(k, index) < index}
        for k in keys:
            self.op_first[k] = min(self.op_first.get(k, index), index)
        if not drop:
            return meta
        return meta[[(p, n) not in drop for p, n in zip(meta["program_id"], meta["op_name"])]]

    def take(self, index: int, part: HostPart) -> HostPart:
        if part.hlo is None:
            return part
        part = compact(part, self.book)
        part = replace(part, op_metadata=self._thin_metadata(index, part.op_metadata))
        refs = []
        for program_id, name, data in part.hlo.hlo_protos:
            key = (program_id, hashlib.sha1(data).digest())
            self.data.setdefault(key, data)
            self.first[key] = min(self.first.get(key, index), index)
            refs.append((program_id, name, key))
        return replace(part, hlo=HostHlo(part.hlo.path, tuple(refs)))

    def give_back(self, index: int, part: HostPart) -> HostPart:
        protos = tuple((pid, name, self.data[key]) for pid, name, key in part.hlo.hlo_protos
                       if self.first[key] == index)
        return replace(part, hlo=HostHlo(part.hlo.path, protos))


def _map(executor: Executor, calls: dict[int, tuple], progress: Progress | None, what: str, where: str,
         programs: _Programs | None = None) -> dict:
    """``reduce_host(*args)`` of every call, by key, progress as each host finishes."""
    futures = {executor.submit(reduce_host, *args): key for key, args in calls.items()}
    out = {}
    try:
        for done, future in enumerate(as_completed(futures), 1):
            key = futures.pop(future)  # the future goes with its result: only what `take` keeps stays held
            out[key] = programs.take(key, future.result()) if programs else future.result()
            del future
            if progress:
                progress(f"{what} {done}/{len(calls)} hosts ({where})")
    except BrokenProcessPool:
        raise InputError("a worker process died while reading the host files (out of memory?): "
                         "rerun with --workers 1") from None
    return out


def _why_in_full(parts: list[HostPart]) -> str:
    lacking = [p.hostname or p.path for p in parts if p.space is not None]
    if lacking:
        return (f"{', '.join(lacking[:3])}{' ...' if len(lacking) > 3 else ''} cannot be reduced alone (a program "
                "without its HLO in the host file, or no op event)")
    return "hosts of several platforms (" + ", ".join(sorted({p.platform for p in parts})) + ")"


def _single(spaces, progress: Progress | None, choice: StepChoice | None = None) -> Measured:
    """All events of the hosts in one capture: the single-capture path."""
    capture = build_capture(spaces)
    # From here on only the programs' HLO is read from the spaces (embedded_hlo): their event tables, a copy
    # of the capture's, go before the step events are made (the peak of a single big host).
    spaces = [replace(s, events=s.events.iloc[:0], event_stats=s.event_stats.iloc[:0]) for s in spaces]
    if progress:
        progress(f"measuring {len(capture.events):,} op events on {len(capture.devices)} devices")
    steps = choose_steps(capture, choice)
    step_ops, op_table, steps = measure(capture, steps)  # steps now carry their busy times
    devices, warnings = _devices_with_events(capture)
    return Measured(platform=capture.platform, hosts=capture.hosts, devices=devices,
                    warnings=warnings, op_metadata=capture.op_metadata, async_spans=capture.async_spans,
                    steps=steps, step_ops=step_ops, op_table=op_table, hlo_sources=tuple(spaces))


def _devices_with_events(capture) -> tuple[pd.DataFrame, tuple[str, ...]]:
    devices, note = devices_that_ran(capture.devices, capture.events["device"])
    return devices, (*capture.warnings, *([note] if note else []))


def measure_capture(files: CaptureFiles, progress: Progress | None = None, *, workers: int | None = None,
                    scheduler: str | None = None, choice: StepChoice | None = None) -> Measured:
    """The measured tables of the capture's host files (see the module doc for where they are read);
    ``choice``: the program or steps the user gave (step_choice)."""
    paths = [str(p) for p in files.xplane_files]
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}: give at least 1")
    if len(paths) == 1:
        if progress:
            progress(f"reading {files.xplane_files[0].name} (1/1 hosts)")
        return _single([read_xspace(paths[0], workers=workers)], progress, choice)  # its planes on `workers` cores
    n = capped_workers(workers, len(paths))  # never more processes than cores or host files
    where = f"Dask at {scheduler}" if scheduler else f"{n} worker{'s' if n != 1 else ''}"
    with _executor(n, scheduler, any(p.startswith("memory://") for p in paths)) as executor:
        programs = _Programs()
        parts = _map(executor, {i: (p, None, False, choice) for i, p in enumerate(paths)}, progress, "read", where,
                     programs)
        parts = [parts[i] for i in range(len(paths))]
        forget_programs()  # hosts reduced in this process (one worker) leave their parsed HLO here
        why = None
        if all(p.space is None for p in parts) and len({p.platform for p in parts}) == 1:
            parts = [programs.give_back(i, p) for i, p in enumerate(parts)]
            try:  # the merge empties `parts` as it frees each host's tables
                return merge_hosts(parts, lambda calls: _map(executor, calls, progress, "reduced again with the "
                                                             "run's steps:", where), choice, programs.book)
            except SpansNotSummable:
                why = "a host's async spans wait for an op only other hosts ran in their steps"
                parts = [HostPart(path, "", "", Counter(), "") for path in paths]  # every host read in full
        # Hosts of several platforms, or one that cannot be reduced: every host's events (see the module doc).
        if progress:
            progress(f"the hosts are read in full: {why or _why_in_full(parts)}")
        raw = {i: (p.path, None, True) for i, p in enumerate(parts) if p.space is None}
        again = _map(executor, raw, progress, "read again in full", where) if raw else {}
    spaces = [again[i].space if i in again else p.space for i, p in enumerate(parts)]
    return _single(spaces, progress, choice)
