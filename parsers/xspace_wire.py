"""Split a serialized XSpace into its planes without reading the whole file into memory.

The file is mapped (mmap), not read: we walk the XSpace's own fields and each plane's top-level
fields in place, check every length against the bytes that remain before anything is allocated, and
hand the parser one plane at a time. Memory then follows the largest plane, not the file, and a
damaged length or a garbage field never becomes an allocation:

- a length past the end of its message, or a varint over 10 bytes: ``WireError`` (one line);
- a plane name or hostname over ``MAX_NAME_BYTES`` (real ones are a few dozen bytes): the field is
  left out, never touched, and counted;
- a plane whose bytes repeat an earlier plane's (a file concatenated with itself), or whose name is
  already taken: left out and counted, so its devices are not counted twice;
- an op's name or display name (``XEventMetadata``) over ``MAX_TEXT_BYTES``: cut there, with a marker, before
  the plane is parsed (a 100 MB name took 1.2 GB), and counted;
- a plane over protobuf's 2 GiB message limit, or one whose parse would need more memory than there is
  (``XLADIAG_MEMORY_BUDGET`` bytes, else what the system has available): ``PlaneTooLarge`` (one line), before
  its bytes are copied.

Planes are copied out of the map one at a time, when decoded (:class:`PlaneBytes`), not all up front.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from dataclasses import dataclass, field

from ..errors import InputError, UsageError

MAX_NAME_BYTES = 1 << 16
MAX_TEXT_BYTES = 1 << 20  # as xplane_planes._text: the longest real names are HLO texts of a few KB
MAX_MESSAGE_BYTES = 2**31 - 1  # upb (and xprof's C++ protobuf) refuse a message past this
BUDGET_ENV = "XLADIAG_MEMORY_BUDGET"
# A plane's parse holds its bytes, upb's copy of them and the decoded columns: at least twice the plane.
_PEAK_PER_PLANE_BYTE = 2

# Field numbers (xplane.proto).
_SPACE_PLANES, _SPACE_HOSTNAMES = 1, 4
_PLANE_NAME, _PLANE_EVENT_METADATA = 2, 4
INDEXED_FIELDS = (3, 4)  # XPlane.lines, XPlane.event_metadata
_PLANE_MESSAGES = (3, 4, 5, 6)  # lines, event and stat metadata entries, stats
_ENTRY_VALUE = 2
_METADATA_NAMES = (2, 4)  # XEventMetadata name, display_name
_LEN = 2
_CHECKED_MESSAGE_BYTES = 1 << 16  # messages past this have their first field checked before the copy


class WireError(InputError):
    """The bytes are not a well-formed protobuf message; the text says where (the caller adds the file)."""


class PlaneTooLarge(InputError):
    """A plane past protobuf's limit or the memory budget; the text says which (the caller adds the file)."""


class PlaneBytes:
    """A plane's bytes, still in the file's map (or buffer): copied out by ``bytes()`` when it is decoded."""

    def __init__(self, buf, start: int, end: int, index: dict | None = None):
        self.buf, self.start, self.end = buf, start, end
        # {field number: [(start, end) of each payload, from the plane's start]} of its lines and op metadata
        # entries (INDEXED_FIELDS): they are decoded in place (xevent_runs)
        self.index = index

    def __len__(self) -> int:
        return self.end - self.start

    def __bytes__(self) -> bytes:
        return bytes(self.buf[self.start:self.end])


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= end:
            raise WireError(f"truncated varint at byte {pos}")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise WireError(f"varint longer than 10 bytes at byte {pos - 10}")


def fields(buf, start: int, end: int):
    """Yield (field number, wire type, tag start, value start, value end) of the message ``buf[start:end]``.

    For wire type 2 the value is the payload (after its length); lengths are checked against what
    remains before the caller can slice anything.
    """
    pos = start
    while pos < end:
        at = pos
        key = buf[pos]
        # The usual field: a one-byte key, then a one-byte length or value (a plane can have a million
        # such stats, walked here one by one); anything longer goes through _varint.
        if key < 0x80 and pos + 1 < end and buf[pos + 1] < 0x80:
            pos += 1
            wire = key & 7
            if wire == _LEN:
                length, pos = buf[pos], pos + 1
                nxt = pos + length
            elif wire == 0:
                nxt = pos + 1
            else:
                nxt = -1
        else:
            nxt = -1
        if nxt < 0:
            pos = at
            nxt, pos, key = _slow_field(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {at}")
        if nxt > end:
            if wire == _LEN:
                raise WireError(f"field {number} at byte {at} claims {nxt - pos:,} bytes where {end - pos:,} remain")
            raise WireError(f"field {number} at byte {at} runs past the end of its message")
        yield number, wire, at, pos, nxt
        pos = nxt


def _slow_field(buf, pos: int, end: int) -> tuple[int, int, int]:
    """(end of the field, start of its value, its key) of the field at ``pos``, keys and lengths of any size."""
    at = pos
    key, pos = _varint(buf, pos, end)
    number, wire = key >> 3, key & 7
    if number == 0:
        raise WireError(f"field number 0 at byte {at}")
    if wire == 0:
        _, nxt = _varint(buf, pos, end)
    elif wire == 1:
        nxt = pos + 8
    elif wire == 5:
        nxt = pos + 4
    elif wire == _LEN:
        length, pos = _varint(buf, pos, end)
        nxt = pos + length
    else:
        raise WireError(f"unsupported wire type {wire} at byte {at}")
    return nxt, pos, key


@dataclass
class SpaceLayout:
    """Where the planes are, and what was left out."""

    planes: list[tuple[str, bytes | PlaneBytes]] = field(default_factory=list)  # (name, plane bytes to parse)
    hostnames: list[bytes] = field(default_factory=list)
    oversize_names: int = 0
    cut_names: int = 0
    duplicate_planes: int = 0


def split_space(buf) -> SpaceLayout:
    """Walk an XSpace (bytes or mmap); raise :class:`WireError` on malformed structure.

    The planes are hashed when they are decoded (in parallel), for the fingerprint (:func:`fingerprint`); here
    only those whose size and name repeat an earlier plane's, the only ones whose bytes can repeat it."""
    layout = SpaceLayout()
    same_shape: dict[tuple, list] = {}  # (size, name) -> [plane bytes, its digest or None] of the planes kept
    seen_names: set[str] = set()
    for number, wire, _, start, end in fields(buf, 0, len(buf)):
        if wire != _LEN:
            continue
        if number == _SPACE_HOSTNAMES:
            if end - start > MAX_NAME_BYTES:
                layout.oversize_names += 1
            else:
                layout.hostnames.append(bytes(buf[start:end]))
        elif number == _SPACE_PLANES:
            name, data, dropped, cut = _plane_bytes(buf, start, end)
            _check_size(name, len(data))
            layout.oversize_names += dropped
            layout.cut_names += cut
            earlier = same_shape.setdefault((len(data), name), [])
            if (name and name in seen_names) or _repeats(data, earlier):
                layout.duplicate_planes += 1
                continue
            earlier.append([data, None])
            seen_names.add(name)
            layout.planes.append((name, data))
    return layout


def _repeats(data, earlier: list) -> bool:
    """Whether the plane's bytes are those of one of the ``earlier`` ones (of its size and name)."""
    if not earlier:
        return False
    digest = _digest(data)
    for entry in earlier:
        if entry[1] is None:
            entry[1] = _digest(entry[0])
    return any(entry[1] == digest for entry in earlier)


def plane_digest(data) -> bytes:
    """What :func:`fingerprint` takes of one plane's bytes (a ``hashlib.sha256`` updated with them, or the bytes)."""
    return (data if hasattr(data, "digest") else hashlib.sha256(data)).digest()[:16]


def fingerprint(digests: list[bytes]) -> str:
    """A host file's fingerprint: of its planes kept (:func:`plane_digest` of each, in order)."""
    host = hashlib.blake2b(digest_size=16)
    for digest in digests:
        host.update(digest)
    return host.hexdigest()


def _digest(data) -> bytes:
    if isinstance(data, PlaneBytes):  # hashed in place, in slices: nothing the size of the plane is copied
        sha = hashlib.sha256()
        with memoryview(data.buf) as view:  # released at once: a map with an exported view cannot be closed
            for at in range(data.start, data.end, 1 << 24):
                sha.update(view[at:min(at + (1 << 24), data.end)])
                release_pages(data.buf, at, min(at + (1 << 24), data.end))
        return plane_digest(sha)
    return plane_digest(data)  # SHA-256 has CPU instructions: twice blake2b's speed


def release_pages(buf, start: int, end: int) -> None:
    """Drop the file's pages ``[start, end)`` (whole pages only) from this process's memory once read: the page
    cache keeps them, and a later read maps them again. Without this a big file, read whole once to hash it,
    stays resident in the process until its map is closed."""
    if not isinstance(buf, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):  # not on every platform
        return
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = end // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        buf.madvise(mmap.MADV_DONTNEED, first, last - first)


def memory_budget() -> int | None:
    """Bytes a parse may use: ``$XLADIAG_MEMORY_BUDGET``, else the system's available memory (None: unknown)."""
    text = os.environ.get(BUDGET_ENV, "").strip()
    if text:
        try:
            return int(text.replace("_", ""))
        except ValueError:
            raise UsageError(f"{BUDGET_ENV}={text!r}: expected a number of bytes") from None
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _check_size(name: str, size: int) -> None:
    """Refuse, before a byte of it is copied, a plane that cannot be parsed or would not fit in memory."""
    if size > MAX_MESSAGE_BYTES:
        raise PlaneTooLarge(f"plane {name!r} is {size:,} bytes, past the 2 GiB protobuf's parsers (upb, xprof) "
                            "take in one message; it cannot be read")
    budget = memory_budget()
    if budget is not None and size * _PEAK_PER_PLANE_BYTE > budget:
        raise PlaneTooLarge(f"plane {name!r} is {size:,} bytes; reading it needs at least "
                            f"{size * _PEAK_PER_PLANE_BYTE:,} bytes of memory, over the {budget:,} available "
                            f"(set {BUDGET_ENV} to change the budget)")


def _plane_bytes(buf, start: int, end: int) -> tuple[str, bytes | PlaneBytes, int, int]:
    """(name, bytes to parse, oversize names left out, op names cut) of the plane ``buf[start:end]``."""
    name, edits, cut, index = "", [], 0, {number: [] for number in INDEXED_FIELDS}
    for number, wire, tag_at, value_start, value_end in fields(buf, start, end):
        if wire != _LEN:
            continue
        if number in index:
            index[number].append((value_start - start, value_end - start))
        if number in _PLANE_MESSAGES and value_end - value_start > _CHECKED_MESSAGE_BYTES:
            # Its first field only: zeros (a sparse file's hole) fail here, not after the plane is copied and
            # handed to upb. A small message costs little to copy; a plane can hold a million of them.
            next(fields(buf, value_start, value_end), None)
        if number == _PLANE_NAME:
            if value_end - value_start > MAX_NAME_BYTES:
                edits.append((tag_at, value_end, b""))  # the name's bytes are never read
            else:
                name = buf[value_start:value_end].decode("utf-8", errors="replace")
        elif number == _PLANE_EVENT_METADATA and value_end - value_start > MAX_TEXT_BYTES:
            # A map entry that big may hold an over-long name (or, legitimately, a program's HloProto).
            entry = _rewritten(buf, value_start, value_end, _ENTRY_VALUE,
                               lambda s, e: _rewritten(buf, s, e, _METADATA_NAMES,
                                                               lambda a, b: _cut_text(buf, a, b)))
            if entry is not None:
                edits.append((tag_at, value_end, _tagged(number, entry[0])))
                cut += entry[1]
    if not edits:
        return name, PlaneBytes(buf, start, end, index), 0, 0
    parts, pos = [], start
    for tag_at, value_end, replacement in edits:
        parts += [buf[pos:tag_at], replacement]
        pos = value_end
    parts.append(buf[pos:end])
    return name, b"".join(parts), sum(1 for *_, r in edits if not r), cut


def _rewritten(buf, start: int, end: int, numbers, edit) -> tuple[bytes, int] | None:
    """The message ``buf[start:end]`` with each length-delimited field of ``numbers`` replaced by
    ``edit(value start, value end)`` where that is not None: (bytes, edits made), or None if none was."""
    parts, pos, made = [], start, 0
    for number, wire, tag_at, value_start, value_end in fields(buf, start, end):
        if wire == _LEN and number in ((numbers,) if isinstance(numbers, int) else numbers):
            new = edit(value_start, value_end)
            if new is not None:
                parts += [buf[pos:tag_at], _tagged(number, new[0])]
                pos, made = value_end, made + new[1]
    if not made:
        return None
    parts.append(buf[pos:end])
    return b"".join(parts), made


def _cut_text(buf, start: int, end: int) -> tuple[bytes, int] | None:
    if end - start <= MAX_TEXT_BYTES:
        return None
    marker = f"... [{end - start:,} bytes, cut]".encode()
    return bytes(buf[start:start + MAX_TEXT_BYTES - len(marker)]) + marker, 1


def _tagged(number: int, payload: bytes) -> bytes:
    """A length-delimited field: its key, its length, its payload."""
    return _encode_varint(number << 3 | _LEN) + _encode_varint(len(payload)) + payload


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
