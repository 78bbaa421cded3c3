"""Split a serialized XSpace into its planes without reading the whole file into memory.

The file is mapped (mmap), not read: we walk the XSpace's own fields and each plane's top-level
fields in place, check every length against the bytes that remain before anything is allocated, and
hand the parser one plane at a time. Memory then follows the largest plane, not the file, and a
damaged length or a garbage field never becomes an allocation:

- a length past the end of its message, or a varint over 10 bytes: ``WireError`` (one line);
- a plane name or hostname over ``MAX_NAME_BYTES`` (real ones are a few dozen bytes): the field is
  left out, never touched, and counted;
- a plane whose bytes repeat an earlier plane's (a file concatenated with itself), or whose name is
  already taken: left out and counted, so its devices are not counted twice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ..errors import InputError

MAX_NAME_BYTES = 1 << 16

# Field numbers (xplane.proto).
_SPACE_PLANES, _SPACE_HOSTNAMES = 1, 4
_PLANE_NAME = 2
_LEN = 2


class WireError(InputError):
    """The bytes are not a well-formed protobuf message; the text says where (the caller adds the file)."""


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
            if length > end - pos:
                raise WireError(f"field {number} at byte {at} claims {length:,} bytes where {end - pos:,} remain")
            nxt = pos + length
        else:
            raise WireError(f"unsupported wire type {wire} at byte {at}")
        if nxt > end:
            raise WireError(f"field {number} at byte {at} runs past the end of its message")
        yield number, wire, at, pos, nxt
        pos = nxt


@dataclass
class SpaceLayout:
    """Where the planes are, what was left out, and a fingerprint of the content kept."""

    planes: list[tuple[str, bytes]] = field(default_factory=list)  # (name, plane bytes to parse)
    hostnames: list[bytes] = field(default_factory=list)
    oversize_names: int = 0
    duplicate_planes: int = 0
    fingerprint: str = ""


def split_space(buf) -> SpaceLayout:
    """Walk an XSpace (bytes or mmap); raise :class:`WireError` on malformed structure."""
    layout = SpaceLayout()
    seen_digests: set[bytes] = set()
    seen_names: set[str] = set()
    host = hashlib.blake2b(digest_size=16)
    for number, wire, _, start, end in fields(buf, 0, len(buf)):
        if wire != _LEN:
            continue
        if number == _SPACE_HOSTNAMES:
            if end - start > MAX_NAME_BYTES:
                layout.oversize_names += 1
            else:
                layout.hostnames.append(bytes(buf[start:end]))
        elif number == _SPACE_PLANES:
            name, data, dropped = _plane_bytes(buf, start, end)
            layout.oversize_names += dropped
            digest = hashlib.sha256(data).digest()[:16]  # SHA-256 has CPU instructions: twice blake2b's speed
            if digest in seen_digests or (name and name in seen_names):
                layout.duplicate_planes += 1
                continue
            seen_digests.add(digest)
            seen_names.add(name)
            host.update(digest)
            layout.planes.append((name, data))
    layout.fingerprint = host.hexdigest()
    return layout


def _plane_bytes(buf, start: int, end: int) -> tuple[str, bytes, int]:
    """(name, bytes to parse, oversize names left out) of the plane ``buf[start:end]``."""
    name, cuts = "", []
    for number, wire, tag_at, value_start, value_end in fields(buf, start, end):
        if number == _PLANE_NAME and wire == _LEN:
            if value_end - value_start > MAX_NAME_BYTES:
                cuts.append((tag_at, value_end))  # the name's bytes are never read
            else:
                name = buf[value_start:value_end].decode("utf-8", errors="replace")
    if not cuts:
        return name, buf[start:end], 0
    parts, pos = [], start
    for tag_at, value_end in cuts:
        parts.append(buf[pos:tag_at])
        pos = value_end
    parts.append(buf[pos:end])
    return name, b"".join(parts), len(cuts)
