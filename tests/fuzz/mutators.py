"""Seeded mutations of bundled captures (protobuf) and HLO dumps (text), for the fuzz suite.

Every mutator takes (data, rng, others) and returns the mutant bytes and a short label; the same seed
gives the same mutant. Protobuf mutators that change a nested field re-encode the lengths of every
enclosing message, so that the damage reaches the depth it was aimed at instead of being caught by the
outermost length check.
"""

from __future__ import annotations

import numpy as np

_INT64_MAX = 2**63 - 1
# Values a damaged varint field (durations, offsets, timestamps, flops) may hold.
_EXTREMES = (_INT64_MAX, 2**64 - 1, 2**63, 2**62, 2**56 + 3, 2**50, 2**40, 10**15, 10**18)


def varint(n: int) -> bytes:
    n &= 2**64 - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(data: bytes, pos: int, end: int) -> tuple[int, int] | None:
    value, shift = 0, 0
    while pos < end and shift < 70:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    return None


def fields(data: bytes, start: int, end: int) -> list[tuple] | None:
    """Top-level fields of the message ``data[start:end]``: (number, wire, tag_at, value_at, value_end).

    For wire type 2 ``value_at`` is where its length varint starts. None when the span is not a message.
    """
    out, pos = [], start
    while pos < end:
        tag = _read_varint(data, pos, end)
        if tag is None or tag[0] >> 3 == 0:
            return None
        (key, at), wire = tag, tag[0] & 7
        if wire == 0:
            v = _read_varint(data, at, end)
            if v is None:
                return None
            nxt = v[1]
        elif wire == 1:
            nxt = at + 8
        elif wire == 5:
            nxt = at + 4
        elif wire == 2:
            v = _read_varint(data, at, end)
            if v is None:
                return None
            nxt = v[1] + v[0]
        else:
            return None
        if nxt > end:
            return None
        out.append((key >> 3, wire, pos, at, nxt))
        pos = nxt
    return out


def _descend(data: bytes, rng: np.random.Generator, want_wire: int):
    """A random field of wire type ``want_wire`` at a random depth, and its enclosing LEN fields."""
    chain: list[tuple[int, int, int]] = []  # (length varint start, its end, payload length)
    start, end, found = 0, len(data), None
    for _ in range(6):
        fs = fields(data, start, end)
        if not fs:
            break
        # The deepest level reached with a field of the wanted type is a candidate for the leaf.
        candidates = [f for f in fs if f[1] == want_wire]
        if candidates:
            found = (candidates[int(rng.integers(len(candidates)))], list(chain))
        sizes = np.array([f[4] - f[2] for f in fs], float)
        pick = fs[int(rng.choice(len(fs), p=sizes / sizes.sum()))]  # by size: most bytes are events
        if pick[1] != 2:
            break
        length, body = _read_varint(data, pick[3], end)
        if fields(data, body, body + length) is None or rng.random() < 0.1:
            break
        chain.append((pick[3], body, length))
        start, end = body, body + length
    return found


def _rewrite(data: bytes, chain, leaf_start: int, leaf_end: int, leaf: bytes) -> bytes:
    """Replace ``data[leaf_start:leaf_end]`` and re-encode the lengths of the enclosing messages."""
    out = data[:leaf_start] + leaf + data[leaf_end:]
    delta = len(leaf) - (leaf_end - leaf_start)
    for at, body, length in reversed(chain):  # innermost first: outer length varints come earlier
        new = varint(length + delta)
        out = out[:at] + new + out[body:]
        delta += len(new) - (body - at)
    return out


def bit_flips(data, rng, others):
    buf = bytearray(data)
    k = int(rng.integers(1, 9))
    for pos in rng.integers(0, len(buf), k):
        buf[pos] ^= 1 << int(rng.integers(8))
    return bytes(buf), f"flip {k} bits"


def byte_run(data, rng, others):
    buf = bytearray(data)
    n = int(min(len(buf), rng.choice([4, 16, 64, 512, 4096])))
    pos = int(rng.integers(0, len(buf) - n + 1))
    fill = rng.choice(["zero", "ff", "random"])
    run = {"zero": bytes(n), "ff": b"\xff" * n}.get(fill) or rng.integers(0, 256, n, np.uint8).tobytes()
    buf[pos:pos + n] = run
    return bytes(buf), f"{fill} run of {n} at {pos}"


def truncate(data, rng, others):
    cut = int(rng.integers(0, len(data)))
    if rng.random() < 0.5 and b"\n" in data[:cut]:
        cut = data.rindex(b"\n", 0, cut) + 1  # at a line boundary (a dump cut before its ENTRY)
    return data[:cut], f"cut at {cut}"


def splice(data, rng, others):
    other = others[int(rng.integers(len(others)))]
    a, b = int(rng.integers(0, len(data))), int(rng.integers(0, len(other)))
    return data[:a] + other[b:], f"splice {a}+{b}"


def concat_self(data, rng, others):
    return data + data, "file concatenated with itself"


def huge_length(data, rng, others):
    """A length-delimited field at some depth claims far more bytes than remain (or a bogus field)."""
    huge = int(rng.choice([2**31, 2**32 + 7, 2**40, 2**62, 2**63 - 1, 2**64 - 1]))
    hit = _descend(data, rng, 2)
    if hit is None or rng.random() < 0.3:
        fs = fields(data, 0, len(data)) or [(0, 0, 0, 0, 0)]
        at = fs[int(rng.integers(len(fs)))][2]
        bogus = varint(int(rng.integers(1, 16)) << 3 | 2) + (b"\xff" * 11 if rng.random() < 0.3 else varint(huge))
        return data[:at] + bogus + data[at:], f"bogus field at {at}"
    (number, _, _, at, _), chain = hit
    _, body = _read_varint(data, at, len(data))
    return _rewrite(data, chain, at, body, varint(huge)), f"field {number} at depth {len(chain)} claims {huge}"


def extreme_value(data, rng, others):
    """A varint field (duration, offset, timestamp, stat value) at some depth set to an extreme value."""
    hit = _descend(data, rng, 0)
    if hit is None:
        return bit_flips(data, rng, others)
    (number, _, _, at, _), chain = hit
    _, end = _read_varint(data, at, len(data))
    value = int(rng.choice(_EXTREMES))
    if rng.random() < 0.4:
        value = -value  # as int64 two's complement: a negative duration or offset
    return _rewrite(data, chain, at, end, varint(value)), f"field {number} at depth {len(chain)} = {value}"


def hlo_numbers(data, rng, others):
    """A number in the HLO text (a dimension, an index, a line number) made huge or odd."""
    import re

    spans = [m.span() for m in re.finditer(rb"\d+", data)]
    if not spans:
        return truncate(data, rng, others)
    a, b = spans[int(rng.integers(len(spans)))]
    new = rng.choice([b"99999999999", b"9223372036854775808", b"0", b"-1", b"18446744073709551616999"])
    return data[:a] + bytes(new) + data[b:], f"number at {a} -> {new.decode()}"


def hlo_lines(data, rng, others):
    """Lines deleted, duplicated or swapped (a dump edited or cut mid-computation)."""
    lines = data.split(b"\n")
    i, j = (int(x) for x in rng.integers(0, len(lines), 2))
    op = rng.choice(["delete", "duplicate", "swap"])
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[j])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines), f"{op} line {i}/{j}"


PROTO_MUTATORS = (bit_flips, byte_run, truncate, splice, concat_self, huge_length, extreme_value, extreme_value)
TEXT_MUTATORS = (bit_flips, byte_run, truncate, splice, concat_self, hlo_numbers, hlo_lines)
