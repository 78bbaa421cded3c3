"""Start decoding a large single-host capture before the analysis is imported.

The command spends most of a second importing pandas and the analysis before it reads anything. When the
path names one large local host file, ``reading_early`` maps it and starts the plane workers
(:mod:`.plane_queue`) on it at once; ``read_xspace`` later takes them over (``claim``) if it reads the same
file, and this process joins in with the planes left. Nothing here imports pandas.

Only the case with no doubt about which file will be read is started early: one ``*.xplane.pb`` under the
path at all (the file itself, a run folder, or a log dir with one run of one host). Anything else, and any
error, is left to the normal parse, which reports it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import XladiagError
from .input_files import open_input
from .worker_start import capped_workers, fork_is_safe

# Below this a file decodes in well under a second: no worker is worth its start (xplane._PARALLEL_BYTES).
_EARLY_BYTES = 32 << 20


@dataclass
class _Started:
    key: tuple  # the file's (device, inode, size, mtime): claimed only by a read of the very same file
    buf: mmap.mmap
    layout: object  # xspace_wire.SpaceLayout
    queue: object  # plane_queue.PlaneQueue
    pid: int  # the process that started them: a forked child inherits this record, not the workers


_STARTED: _Started | None = None


def _identity(path: Path) -> tuple:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _only_host_file(path: str) -> Path | None:
    """The one host file ``path`` can name, or None where there is no single such file."""
    p = Path(path)
    if p.is_file():
        return p if p.name.endswith(".xplane.pb") else None
    found = [*p.glob("*.xplane.pb"), *p.glob("plugins/profile/*/*.xplane.pb"), *p.glob("profile/*/*.xplane.pb")]
    return found[0] if len(found) == 1 and found[0].is_file() else None


def _start(file: Path, workers: int | None) -> _Started | None:
    from .plane_queue import start
    from .xplane_planes import _TPU_DEVICE_PLANE
    from .xspace_wire import split_space

    if file.stat().st_size < _EARLY_BYTES:
        return None
    workers = capped_workers(workers, 1 << 30)
    if workers <= 1:
        return None
    try:
        with open_input(file) as f:  # the checks the parse makes: a regular file within the read limit
            key = _identity(file)
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, XladiagError):  # the parse says what is wrong
        return None
    try:
        layout = split_space(buf)
        if capped_workers(workers, len(layout.planes)) <= 1:
            buf.close()
            return None
        tpu = any(_TPU_DEVICE_PLANE.match(name) for name, _ in layout.planes)
        # As many workers as cores: this process imports the analysis meanwhile, and joins in when done.
        queue = start(layout.planes, tpu, capped_workers(workers, len(layout.planes)))
    except Exception:  # a damaged file: the normal parse reads it again and says what is wrong
        buf.close()
        return None
    return _Started(key, buf, layout, queue, os.getpid())


@contextlib.contextmanager
def reading_early(path, workers: int | None):
    """While the block runs, the planes of the one large host file under ``path`` (if any) are being decoded;
    whatever the parse did not claim is stopped at the end."""
    global _STARTED
    if isinstance(path, Path) and fork_is_safe():  # a local path (a URL is a str or storage.RemotePath)
        with contextlib.suppress(OSError):
            file = _only_host_file(path)
            _STARTED = _start(file, workers) if file is not None else None
    try:
        yield
    finally:
        started, _STARTED = _STARTED, None
        if started is not None:
            from .plane_queue import close

            close(started.queue, abandon=True)
            with contextlib.suppress(BufferError):
                started.buf.close()


def claim(path: Path) -> tuple | None:
    """(map, layout, queue) started early on the file at ``path``, once; None if none was, or another file."""
    global _STARTED
    started = _STARTED
    if started is None or started.pid != os.getpid():
        return None
    with contextlib.suppress(OSError):
        if _identity(path) == started.key:
            _STARTED = None
            return started.buf, started.layout, started.queue
    return None
