"""A forked worker's decoded plane handed to the parent through a file in shared memory, not the result pipe.

Through the pipe, a plane's arrays (tens of MB) are pickled, written, read back by the parent's result thread
and copied again, while the parent decodes a plane of its own: that thread waits for the GIL, the pipe fills,
and the worker stalls before it can take the next plane. Here the arrays leave the worker as pickle protocol 5
out-of-band buffers written to one file under ``/dev/shm``; only the small pickle goes through the pipe. The
parent maps the file copy-on-write (the arrays stay writable and private), unlinks it at once, and the arrays
are views of the map (no copy): the memory goes when the last of them does.

Without ``/dev/shm``, or when the file cannot be written (a small tmpfs, as Docker's 64 MB default), the
result goes through the pipe as before.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import uuid
from dataclasses import dataclass

_SHM = "/dev/shm"
_MIN_BYTES = 1 << 20  # below this the pipe is as quick
_ALIGN = 64  # each buffer starts on a 64-byte boundary: numpy's aligned paths, whatever the dtype


@dataclass(frozen=True)
class Shipped:
    """What the pipe carries instead of the object: the file, the in-band pickle, each buffer's (offset, size)."""

    path: str
    payload: bytes
    places: tuple[tuple[int, int], ...]


def ship(obj, owner: int):
    """``obj``, or a :class:`Shipped` whose arrays wait in a shared-memory file (for :func:`unship`) named after
    ``owner``, the process that will take it (:func:`discard_all` finds what a run it abandoned left)."""
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    if sum(v.nbytes for v in views) < _MIN_BYTES or not os.path.isdir(_SHM):
        return obj
    path = os.path.join(_SHM, f"xladiag-{owner}-{uuid.uuid4().hex}")
    places, end = [], 0
    for view in views:  # each buffer at the next 64-byte boundary (the gaps are holes, never written)
        at = end + -end % _ALIGN
        places.append((at, view.nbytes))
        end = at + view.nbytes
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            os.ftruncate(fd, end)
            for view, (at, _) in zip(views, places):
                while view.nbytes:  # a write may be short
                    done = os.pwrite(fd, view, at)
                    view, at = view[done:], at + done
        finally:
            os.close(fd)
    except OSError:  # no room in the tmpfs: the pipe
        discard(path)
        return obj
    return Shipped(path, payload, tuple(places))


def unship(obj):
    """The object :func:`ship` was given (its file unlinked; its arrays views of a private map of it)."""
    if not isinstance(obj, Shipped):
        return obj
    try:
        with open(obj.path, "rb") as f:
            size = max((at + n for at, n in obj.places), default=0)
            whole = memoryview(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)) if size else memoryview(b"")
    finally:
        discard(obj.path)
    return pickle.loads(obj.payload, buffers=[whole[at:at + n] for at, n in obj.places])


def discard(path: str) -> None:
    """Remove a shipped file nobody will unship (the run failed or was abandoned); gone already is fine."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def discard_all(owner: int) -> None:
    """Remove every file shipped to ``owner``: after its workers were killed, one may have died mid-write, its
    file named nowhere else."""
    with contextlib.suppress(OSError):
        for name in os.listdir(_SHM):
            if name.startswith(f"xladiag-{owner}-"):
                discard(os.path.join(_SHM, name))
