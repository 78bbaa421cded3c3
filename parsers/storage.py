"""Log dirs in cloud storage: ``gs://``, ``s3://``, ``memory://``... any fsspec URL, read like local folders.

:func:`as_path` turns what the user gave into a ``pathlib.Path`` (local: the fast path, xplanes mapped
with mmap) or a :class:`RemotePath`, which has the few ``Path`` methods discovery and the readers use
(``/``, ``name``, ``parent``, ``exists``/``is_file``/``is_dir``, ``iterdir``, ``glob``, ``rglob``,
``with_name``, ``read_bytes``/``read_text``), so one discovery serves both. Remote files are read whole
(``cat_file``), only those discovery picks (lazily); a multi-host capture's hosts are read in parallel by
the per-host workers (analyzer/hosts/map.py, which pass the URL), a dump's files in one batch
(:func:`prefetched`). fsspec and its protocol packages are optional: a missing one is a one-line
:class:`UsageError` naming the extra to install.
"""

from __future__ import annotations

import fnmatch
import posixpath
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError, UsageError

# Protocol -> the xladiag extra that installs its fsspec implementation.
EXTRAS = {"gs": "gcs", "gcs": "gcs", "s3": "s3", "s3a": "s3"}


class StorageError(InputError):
    """A remote listing or read that failed for another reason than a missing file (access, network)."""


def is_remote(path) -> bool:
    """A URL with a protocol other than ``file://`` (a :class:`RemotePath`, or text like ``gs://b/x``)."""
    if isinstance(path, RemotePath):
        return True
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def as_path(path):
    """``path`` as a ``Path`` (local; ``file://`` stripped) or a :class:`RemotePath` (any other URL)."""
    if isinstance(path, (Path, RemotePath)):
        return path
    if is_remote(path):
        return RemotePath.from_url(path)
    text = str(path)
    return Path(text[len("file://"):] if text.startswith("file://") else text)


def _filesystem(url: str):
    protocol = url.split("://", 1)[0]
    extra = EXTRAS.get(protocol, "remote")
    try:
        import fsspec
    except ImportError:
        raise UsageError(f"{url}: reading {protocol}:// needs fsspec: pip install 'xladiag[{extra}]'") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as exc:  # fsspec knows the protocol but its package (gcsfs, s3fs...) is not installed
        raise UsageError(f"{url}: reading {protocol}:// needs a package that is not installed "
                         f"({exc}): pip install 'xladiag[{extra}]'") from None
    except ValueError as exc:  # "Protocol not known"
        raise UsageError(f"{url}: {exc} (an fsspec protocol such as gs://, s3://, az://, hf://, memory://)") from None
    except Exception as exc:  # noqa: BLE001 - a constructor's own: refused connection, missing arguments, no file
        raise StorageError(f"{url}: cannot open: {type(exc).__name__}: {exc}") from None


class RemotePath:
    """A file or folder on an fsspec filesystem. ``kind`` ('file'/'directory'), when known from a listing,
    saves a round trip per ``is_file``/``is_dir``. ``chain``: what follows ``::`` in a chained URL
    (``zip://logdir::file:///x.zip``: the archive), kept so that ``str()`` of any path below is a URL that
    opens the same file again (a host worker reopens it from that text)."""

    __slots__ = ("fs", "path", "_kind", "chain")

    def __init__(self, fs, path: str, kind: str | None = None, chain: str = ""):
        # The root is "/" on most filesystems, "" on some (an archive's: zip, tar), where "/x" is no path.
        root = getattr(fs, "root_marker", "/")
        self.fs, self.path, self._kind, self.chain = fs, path.rstrip("/") or root, kind, chain

    @classmethod
    def from_url(cls, url: str) -> RemotePath:
        fs, path = _filesystem(url)
        return cls(fs, path, chain=url.split("::", 1)[1] if "::" in url else "")

    # --- names -------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def stem(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name.lstrip(".") else self.name

    @property
    def parent(self) -> RemotePath:
        return RemotePath(self.fs, posixpath.dirname(self.path), "directory", self.chain)

    def __truediv__(self, part: str) -> RemotePath:
        return RemotePath(self.fs, posixpath.join(self.path, str(part)), chain=self.chain)

    def with_name(self, name: str) -> RemotePath:
        return RemotePath(self.fs, posixpath.join(posixpath.dirname(self.path), name), chain=self.chain)

    def __str__(self) -> str:
        url = self.fs.unstrip_protocol(self.path)
        return f"{url}::{self.chain}" if self.chain else url

    def __repr__(self) -> str:
        return f"RemotePath({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, RemotePath) and (self.fs, self.path) == (other.fs, other.path)

    def __hash__(self) -> int:
        return hash(self.path)

    def __lt__(self, other: RemotePath) -> bool:
        return self.path < other.path

    # --- what is there ------------------------------------------------------------------------------
    def _call(self, method: str, *args, **kwargs):
        """``fs.<method>(*args)``; a missing file stays FileNotFoundError, anything else (credentials, network)
        becomes one StorageError line naming the URL."""
        try:
            return getattr(self.fs, method)(*args, **kwargs)
        except FileNotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001 - each protocol package raises its own kinds
            raise StorageError(f"{self}: cannot read: {type(exc).__name__}: {exc}") from None

    def _type(self) -> str | None:
        if self._kind is None:
            try:
                self._kind = self._call("info", self.path).get("type")
            except FileNotFoundError:
                return None
        return self._kind

    def exists(self) -> bool:
        return self._type() is not None

    def is_file(self) -> bool:
        return self._type() == "file"

    def is_dir(self) -> bool:
        return self._type() == "directory"

    def _listed(self, entries) -> list[RemotePath]:
        items = entries.values() if isinstance(entries, dict) else entries
        return sorted(RemotePath(self.fs, e["name"], e.get("type"), self.chain)
                      for e in items if e["name"].rstrip("/") != self.path)

    def iterdir(self) -> list[RemotePath]:
        return self._listed(self._call("ls", self.path, detail=True))

    def glob(self, pattern: str) -> list[RemotePath]:
        """Direct children matching ``pattern`` (no ``**``)."""
        return [p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern)]

    def rglob(self, pattern: str) -> list[RemotePath]:
        """Files anywhere below whose name matches ``pattern`` (one listing of the tree)."""
        found = self._listed(self._call("find", self.path, detail=True))
        return [p for p in found if fnmatch.fnmatchcase(p.name, pattern)]

    # --- contents -----------------------------------------------------------------------------------
    def read_bytes(self) -> bytes:
        data = _PREFETCHED.pop((id(self.fs), self.path), None)
        return data if data is not None else self._call("cat_file", self.path)

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes (a JSON report or a capture, told apart without reading it all)."""
        return self._call("cat_file", self.path, start=0, end=size)

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)


_PREFETCHED: dict[tuple[int, str], bytes] = {}  # filled inside ``prefetched``, each entry read once


@contextmanager
def prefetched(paths):
    """Inside the block, the remote files among ``paths`` are already read: in one ``cat`` per filesystem,
    which the async protocols (gcsfs, s3fs) run concurrently. Local paths are left alone."""
    groups: dict[int, list[RemotePath]] = {}
    for p in paths:
        if isinstance(p, RemotePath):
            groups.setdefault(id(p.fs), []).append(p)
    keys = []
    for group in groups.values():
        fetched = group[0]._call("cat", [p.path for p in group], on_error="return")
        for path, data in fetched.items():
            if isinstance(data, bytes):  # a failed one is read again, alone, to raise its own error
                keys.append((id(group[0].fs), path))
                _PREFETCHED[keys[-1]] = data
    try:
        yield
    finally:
        for key in keys:
            _PREFETCHED.pop(key, None)
