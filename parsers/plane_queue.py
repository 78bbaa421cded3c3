"""The planes of one large host file decoded by this process and forked workers together, each process taking
the largest plane no process has taken yet (one shared counter) when it is free, so no process idles while
another still has planes to decode, whatever their sizes and however late this process joins in. None is
assigned ahead: a plane's cost is not its size (a GPU stream's events hold ten stats, a host thread's none).

The workers can start before this process is ready (``start``): the command starts them as soon as it knows
the file, then imports the analysis while they decode, and ``finish`` (called by the parse) joins in with the
planes left and gathers what the workers decoded. Forked workers inherit the planes' bytes and the counter
(``_RUNNING``): nothing is pickled on the way in.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from dataclasses import dataclass, field

from .shipping import Shipped, discard, discard_all, ship, unship
from .worker_start import keep_freed_memory, kill_workers, release_freed_memory, worker_pool
from .xplane_planes import PlaneTables, decode_plane


@dataclass
class PlaneQueue:
    """Planes being decoded: ``order`` largest first; ``taken`` (shared) counts the planes handed out."""

    planes: list  # (name, bytes) per plane, in file order
    tpu_capture: bool
    order: list[int]
    taken: object  # multiprocessing.Value, shared with the forked workers
    owner: int = 0  # the process that takes the workers' planes in (shipping: their files are named after it)
    futures: list = field(default_factory=list)
    pool: object = None
    pools: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


# The queue the forked workers decode from (inherited at fork, never pickled).
_RUNNING: PlaneQueue | None = None


def _next_plane(queue: PlaneQueue) -> int | None:
    with queue.taken.get_lock():
        k = queue.taken.value
        if k >= len(queue.order):
            return None
        queue.taken.value = k + 1
    return queue.order[k]


def _drain(queue: PlaneQueue) -> list[tuple[int, PlaneTables]]:
    """Decode planes until none is left to take: (plane index, its tables) of those this process took."""
    out = []
    while (i := _next_plane(queue)) is not None:
        name, data = queue.planes[i]
        out.append((i, decode_plane(i, name, data, queue.tpu_capture)))
    return out


def _next_inherited() -> tuple[int, PlaneTables] | None:
    """One plane, the next no process has taken (None: all are): a task per plane, so each plane's tables
    leave the worker as soon as they are made, not all of them at its end."""
    keep_freed_memory()  # a forked worker: its memory goes back when it ends
    i = _next_plane(_RUNNING)
    if i is None:
        return None
    name, data = _RUNNING.planes[i]
    shipped = ship(decode_plane(i, name, data, _RUNNING.tpu_capture), _RUNNING.owner)  # arrays: shared memory
    if _RUNNING.taken.value >= len(_RUNNING.order):  # no plane left: the heap kept for reuse goes back now,
        release_freed_memory()  # not when the pool ends (the caller holds every plane's tables by then)
    return i, shipped


def start(planes: list, tpu_capture: bool, workers: int) -> PlaneQueue:
    """Fork ``workers`` processes (they die with this one) that start decoding ``planes`` at once; this one
    joins them in ``finish``."""
    global _RUNNING
    context = multiprocessing.get_context("fork")
    order = sorted(range(len(planes)), key=lambda i: -len(planes[i][1]))
    queue = PlaneQueue(planes, tpu_capture, order, context.Value("q", 0), os.getpid())
    _RUNNING = queue
    try:
        queue.pool = queue.pools.enter_context(worker_pool(workers, context))
        queue.futures = [queue.pool.submit(_next_inherited) for _ in planes]
    except BaseException:
        close(queue, abandon=True)
        raise
    return queue


def finish(queue: PlaneQueue) -> list[PlaneTables]:
    """Every plane decoded, in file order: this process decodes what is left, then takes the workers' planes.
    A worker's error (a corrupt plane) is raised here, as this process's own would be."""
    try:
        results = dict(_drain(queue))
        for future in queue.futures:
            done = future.result()
            if done is not None:
                results[done[0]] = unship(done[1])
    finally:
        close(queue)
    return [results[i] for i in range(len(queue.planes))]


def close(queue: PlaneQueue, abandon: bool = False) -> None:
    """End the workers once their planes are in; ``abandon``: kill them mid-plane (the run failed before the
    parse took the queue: nobody waits for their planes). Idempotent."""
    global _RUNNING
    if abandon and queue.pool is not None:
        kill_workers(queue.pool)
    queue.pools.close()
    if abandon:  # a worker killed while it wrote a plane's file
        discard_all(queue.owner)
    for future in queue.futures:  # planes shipped but never taken in (a failed or abandoned run): their files
        if future.done() and not future.cancelled() and future.exception() is None:
            done = future.result()
            if done is not None and isinstance(done[1], Shipped):
                discard(done[1].path)
    if _RUNNING is queue:
        _RUNNING = None
