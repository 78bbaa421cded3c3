"""Write a report without harming anything that was at the target path.

- A regular file (or a new one) is replaced atomically: the text goes to a hidden temporary file in the
  same folder, which is renamed over the target. The result keeps the old file's mode; a new file gets
  the mode the umask gives (``mkstemp`` would make every report 0600).
- A symlink is written through: its target is what gets replaced, the link stays.
- Anything else (``/dev/null``, a FIFO, a terminal) is opened and written in place: renaming over a
  device node would replace the device with a regular file.
- The temporary file is removed on every exit, SIGINT and SIGTERM included.
- A missing folder, a trailing ``/``, a folder as target, no permission, a full disk, an empty path, or one
  of the run's own input files (``inputs``: the capture, the dump, a baseline): ``UsageError`` (exit 2), one
  line, before anything is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import threading
from collections.abc import Iterable
from pathlib import Path

from .errors import UsageError

_PENDING: set[str] = set()  # temp files to remove if a signal ends the process mid-write


def check_output_path(path: str | os.PathLike, inputs=()) -> Path:
    """Refuse a target we could not write, or one of ``inputs`` (files this run reads), before any work is done.
    Returns the path to write."""
    text = os.fspath(path)
    if not text:
        raise UsageError("empty output path: give a file path, or '-' for stdout")
    for source in inputs:
        if same_file(text, source):
            raise UsageError(f"{text}: is an input of this run ({os.fspath(source)}): writing would destroy it; "
                             "give another output path")
    if text.endswith(("/", os.sep)):
        raise UsageError(f"{text}: is a directory path (trailing '/'); give a file path with -o")
    target = _resolved(Path(text))
    if target.is_dir():
        raise UsageError(f"{text}: is a directory; give a file path with -o")
    parent = target.parent
    if not parent.is_dir():
        raise UsageError(f"{text}: cannot write: directory {parent} does not exist")
    if target.exists() and not _is_regular(target):
        if not os.access(target, os.W_OK):
            raise UsageError(f"{text}: cannot write: permission denied")
        return Path(text)
    if not os.access(parent, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UsageError(f"{text}: cannot write: permission denied")
    return Path(text)


def write_report(path: str | os.PathLike, text: str | Iterable[str], inputs=()) -> None:
    """Write ``text`` (UTF-8) to ``path`` as described in the module docstring (never over one of ``inputs``).
    ``text`` may come in pieces, each written as it comes (a page of many MB never whole in memory); what
    fails while they come leaves the target as it was."""
    shown = os.fspath(path)
    check_output_path(shown, inputs)
    target = _resolved(Path(shown))
    try:
        if target.exists() and not _is_regular(target):
            data = (text if isinstance(text, str) else "".join(text)).encode("utf-8")  # made whole before a byte
            with open(target, "wb") as fh:  # device, FIFO, terminal: never rename over it
                fh.write(data)
            return
        _replace_regular(target, [text] if isinstance(text, str) else text)
    except OSError as exc:
        reason = "no space left on device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise UsageError(f"{shown}: cannot write: {reason}") from exc


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """``a`` and ``b`` are one file: the same inode when both exist (hard links, symlinks, ``./x`` vs ``x``),
    else the same resolved path (a name about to be created)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError, TypeError):
        try:
            return os.path.realpath(a) == os.path.realpath(b)
        except (OSError, ValueError, TypeError):
            return False


def _resolved(path: Path) -> Path:
    # Follow symlinks (also chains and relative ones) so the link itself survives; a dangling link
    # resolves to the file it names, which is then created.
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _is_regular(path: Path) -> bool:
    return stat.S_ISREG(path.stat().st_mode)


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _replace_regular(target: Path, pieces: Iterable[str]) -> None:
    mode = _mode_for(target)
    folder = target.parent if str(target.parent) else Path(".")
    with _signals_cleanup():
        fd, tmp = _mkstemp(folder, target.name)
        try:
            with os.fdopen(fd, "wb") as fh:
                for piece in pieces:
                    fh.write(piece.encode("utf-8"))
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        finally:
            _PENDING.discard(tmp)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _mkstemp(folder: Path, name: str) -> tuple[int, str]:
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    _PENDING.add(tmp)
    return fd, tmp


def _remove_pending() -> None:
    for tmp in list(_PENDING):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    _PENDING.clear()


def _signals_cleanup():
    """On SIGINT/SIGTERM during the write: remove the temp file, then die of the same signal."""
    return cleanup_on_signals(_remove_pending)


@contextlib.contextmanager
def cleanup_on_signals(cleanup):
    """While inside: SIGINT/SIGTERM run ``cleanup``, then end the process the way the signal would have (the
    handler that was there before gets it again). Main thread only; an ignored signal (nohup, a CI runner)
    stays ignored: a handler would turn it into a failure. parsers/worker_start.py uses it for worker pools."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def handler(signum, frame):
        cleanup()
        old = previous.pop(signum, signal.SIG_DFL)
        signal.signal(signum, old)
        if signum == signal.SIGINT and old is signal.default_int_handler:
            raise KeyboardInterrupt
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        old = signal.getsignal(sig)
        if old is not signal.SIG_IGN and old is not None:  # None: set outside Python; left alone
            previous[sig] = old
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
