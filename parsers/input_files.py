"""One read limit for every input file, and only regular files read.

Captures, HLO dumps, memory reports, chip TOML, pyproject configs, baselines, JSON reports.

A host file symlinked to ``/dev/zero`` read until memory ran out, a FIFO blocked forever, ``--chip-file
/dev/zero`` was a MemoryError. So: ``os.stat`` (symlinks followed) before anything is opened, a FIFO never
opened; a device, FIFO, socket or folder refused; a regular file over the limit refused before a byte is read,
and the read itself bounded (a file that grows while read is cut at the limit, not read on).

The refusal is an ``OSError`` (``EINVAL``: not a regular file; ``EFBIG``: over the limit): every reader
already turns an ``OSError`` into its own one-line error naming the file ("<file>: cannot read: <why>").
"""

from __future__ import annotations

import errno
import os
import stat

from ..errors import UsageError

LIMIT_ENV = "XLADIAG_MAX_INPUT_BYTES"
# Far past any real host file (the largest seen are a few GB): what it catches is damage and mistakes.
DEFAULT_LIMIT = 32 << 30
_CHUNK = 1 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def read_limit() -> int:
    """Bytes one input file may have: ``$XLADIAG_MAX_INPUT_BYTES`` or 32 GiB."""
    text = os.environ.get(LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_LIMIT
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"{LIMIT_ENV}={text!r}: expected a positive number of bytes")
    return value


def _refuse_special(mode: int, path) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise OSError(errno.EINVAL, f"{kind}, not a regular file: refused as input", str(path))


def _too_big(size: int | str, limit: int, path) -> OSError:
    return OSError(errno.EFBIG, f"{size} bytes, over the read limit of {limit:,} bytes "
                                f"(set {LIMIT_ENV} to raise it)", str(path))


def checked_size(path) -> int:
    """The size of the regular file at ``path`` (symlinks followed), within the read limit; else ``OSError``."""
    info = os.stat(path)  # never opens: a FIFO's open would block
    _refuse_special(info.st_mode, path)
    limit = read_limit()
    if info.st_size > limit:
        raise _too_big(f"{info.st_size:,}", limit, path)
    return info.st_size


def open_input(path):
    """``open(path, "rb")`` of a checked regular file (checked again once open: it may have been swapped)."""
    checked_size(path)
    fh = open(path, "rb")  # noqa: SIM115 - the caller's with-block closes it
    try:
        _refuse_special(os.fstat(fh.fileno()).st_mode, path)
    except OSError:
        fh.close()
        raise
    return fh


def read_input_bytes(path) -> bytes:
    """All bytes of an input file, local (checked, bounded read) or remote (``RemotePath``; size checked)."""
    from .storage import RemotePath

    if isinstance(path, RemotePath):
        data = path.read_bytes()
        if len(data) > read_limit():
            raise _too_big(f"{len(data):,}", read_limit(), path)
        return data
    limit = read_limit()
    with open_input(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        chunks, total = [fh.read(min(size, limit))], 0
        total = len(chunks[0])
        while more := fh.read(min(_CHUNK, limit + 1 - total)):  # it grew since: read on, to the limit
            chunks.append(more)
            total += len(more)
            if total > limit:
                raise _too_big(f"over {limit:,}", limit, path)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_input_text(path, encoding: str = "utf-8", errors: str = "strict") -> str:
    return read_input_bytes(path).decode(encoding, errors)
