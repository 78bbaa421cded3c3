"""The rounds of a column-wise protobuf walk: every message of a set advanced one field at a time with numpy.

``xevent_columns`` (events and their stats) and ``xmetadata_columns`` (op metadata) walk millions of small
messages this way: one numpy "round" decodes the next field of every message that still has bytes left, so the
number of rounds is the number of fields per message, not the number of messages.

Wire format (protobuf): a field is a varint tag ``number << 3 | wire_type`` followed by a varint
(type 0), 8 bytes (1), a varint length and that many bytes (2), or 4 bytes (5). Fields may come in
any order and repeat (the last one wins for a scalar); unknown fields are skipped by wire type.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_ALL = slice(None)  # "every row": saves a scatter while no message has ended yet
_BAD = 1 << 50  # a cursor step that lands past any end, so one bounds check also catches bad input
# Bytes a cursor skips after the tag's varint, by wire type; groups (3, 4) and 6, 7 are rejected.
_FIXED_SKIP = np.array([0, 8, 0, _BAD, _BAD, 4, _BAD, _BAD], np.int64)
_HAS_VARINT = np.array([1, 0, 1, 0, 0, 0, 0, 0], np.int64)  # wire types whose payload starts with a varint
_HIGH_BITS = np.uint64(0x8080808080808080)  # the continuation bit of each of 8 bytes
# Multiplying the 8 high bits by this moves the high bit of byte i to bit 56 + i (no carries).
_GATHER_HIGH_BITS = np.uint64(0x0002040810204081)
# Indexed by that 8-bit "byte ends the varint" mask: the varint's length (0: longer than 8 bytes),
# and a mask of its bytes' 7 payload bits.
_LENGTH = np.array([((m & -m).bit_length() if m else 0) for m in range(256)], np.int64)
_PAYLOAD = np.array([(1 << 8 * int(k)) - 1 & 0x7F7F7F7F7F7F7F7F if k else 0x7F7F7F7F7F7F7F7F for k in _LENGTH],
                    np.uint64)
_U = np.uint64
# (keep, move down) masks of the three squeeze steps in _decode.
_SQUEEZE = [(_U(0x007F007F007F007F), _U(0x3F803F803F803F80)), (_U(0x00003FFF00003FFF), _U(0x0FFFC0000FFFC000)),
            (_U(0x000000000FFFFFFF), _U(0x00FFFFFFF0000000))]


def _decode(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Varints at the start of little-endian 8-byte words (``w`` is clobbered).

    Returns (value, length; 0 where longer than 8 bytes, the longest length; 8 if any is longer).
    """
    ends = np.invert(w)  # then in place: one temporary, not four
    ends &= _HIGH_BITS
    ends *= _GATHER_HIGH_BITS
    ends >>= _U(56)
    length = _LENGTH[ends.view(np.int64)]  # 8 bits: a table index
    ends = _PAYLOAD[ends.view(np.int64)]
    value = w
    value &= ends
    # Squeeze out each byte's continuation bit in log steps (8x7 -> 4x14 -> 2x28 -> 1x56 bits),
    # only as many steps as the longest varint here needs (ids and lengths: 1 or 2 bytes).
    longest = 8 if length.min() == 0 else int(length.max())
    for step, (low, high) in enumerate(_SQUEEZE):
        if longest <= 1 << step:
            break
        t = value >> _U(1 << step)
        t &= high
        value &= low
        value |= t
    return value, length, longest


class EventBuffer:
    """Event payloads (joined, or a plane's own bytes) followed by 16 zero bytes: as bytes, and as 8-byte
    little-endian words starting at every byte offset."""

    def __init__(self, data: bytes):
        self.u8 = np.frombuffer(data, np.uint8)
        # A uint64 view with a 1-byte stride (overlapping, unaligned): word[p] is bytes p..p+7, so one
        # gather loads a whole varint of up to 8 bytes per cursor (no [n, 10] byte window).
        self.word = np.ndarray((len(data) - 7,), "<u8", data, 0, (1,))

    def varints(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The varint at each position: (value as uint64, length; _BAD if over 10 bytes)."""
        value, length, _ = _decode(self.word[pos])
        long = np.flatnonzero(length == 0)
        if long.size:  # 9 or 10 bytes (negative int64, uint64 >= 2**56): rare, done byte by byte
            b8 = self.u8[pos[long] + 8].astype(np.uint64)
            b9 = self.u8[pos[long] + 9].astype(np.uint64)
            # Bits past 64 of a 10th byte fall off the uint64 shift, as protobuf drops them.
            value[long] |= ((b8 & _U(0x7F)) << _U(56)) | np.where(b8 < 0x80, _U(0), b9 << _U(63))
            length[long] = np.where(b8 < 0x80, 9, np.where(b9 < 0x80, 10, _BAD))
        return value, length


def _fields(buf: EventBuffer, start: np.ndarray, end: np.ndarray) -> Iterator[tuple]:
    """Walk the messages ``[start, end)`` of ``buf`` together, one round per field position.

    Yields (rows, tags, values, after) for the messages with bytes left: rows index them (``_ALL``
    while none has ended), tags is an int when every cursor sits on the same tag (the usual case,
    handled without masks) else an array, values the varint (value, or length for wire type 2) after
    each tag (None in a round of fixed-size fields), ``after`` the position past it.
    Raises ValueError on malformed input.
    """
    if np.all(start < end):
        rows, pos = _ALL, start
    else:
        rows = np.flatnonzero(start < end)
        pos, end = start[rows], end[rows]
    while pos.size:
        w = buf.word[pos]
        tag = buf.u8[pos]  # the tag's first byte: a byte per cursor to scan, not a word
        low, high = int(tag.min()), int(tag.max())
        if low < 8:  # a one-byte tag of field number 0 (longer ones are checked below)
            raise ValueError("malformed protobuf: field number 0")
        if low == high and high < 0x80 and (high & 7) in (_FIXED64, _FIXED32):
            tags, value, after = high, None, pos + 1
            nxt = after + int(_FIXED_SKIP[high & 7])
        elif low == high and high < 0x80 and (high & 7) in (_VARINT, _LEN):
            # One tag byte everywhere: the varint after it is already in the same word.
            tags = high
            w >>= _U(8)
            value, length, longest = _decode(w)
            if longest >= 8:  # maybe the zero byte shifted in, or a long varint: reload those
                redo = np.flatnonzero(length >= 8)
                value[redo], length[redo] = buf.varints(pos[redo] + 1)
            after = pos + 1
            after += length
            nxt = after
            if high & 7 == _LEN:
                if longest >= 7 and value.max() >= _BAD:  # keep the int64 sum below from wrapping
                    raise ValueError("malformed protobuf: length-delimited field past the end of its message")
                nxt = after + value.view(np.int64)
        elif high < 0x80:  # mixed one-byte tags (stats' value kinds, events without stats): one load, as above
            tags, (nxt, value, after) = tag, _mixed_round(buf, pos, tag, w)
        else:  # tags of 2+ bytes (field numbers >= 16): general arrays
            tags, value, after, nxt = _general_round(buf, pos)
        left = end - nxt
        fewest = left.min()
        if fewest < 0:
            raise ValueError("malformed protobuf: truncated field, over-long varint or unsupported wire type")
        yield rows, tags, value, after
        if fewest == 0:  # some messages are done: drop their cursors
            keep = left > 0
            rows = np.flatnonzero(keep) if rows is _ALL else rows[keep]
            pos, end = nxt[keep], end[keep]
        else:
            pos = nxt


def _general_round(buf: EventBuffer, pos: np.ndarray) -> tuple:
    """(tags, varint after each tag, position past it, next position) of fields whose tags may take 2+ bytes."""
    tag, tag_length = buf.varints(pos)
    after_tag = pos + tag_length
    value, length = buf.varints(np.minimum(after_tag, buf.u8.size - 10))  # clamped: caught by the caller
    wire = (tag & _U(7)).view(np.int64)
    if tag.min() < 8:
        raise ValueError("malformed protobuf: field number 0")
    size = np.where(wire == _LEN, value, _U(0))
    if size.max() >= _BAD:
        raise ValueError("malformed protobuf: length-delimited field past the end of its message")
    after = after_tag + length * _HAS_VARINT[wire]
    return tag, value, after, after + size.view(np.int64) + _FIXED_SKIP[wire]


def _mixed_round(buf: EventBuffer, pos: np.ndarray, tag: np.ndarray, w: np.ndarray) -> tuple:
    """(next position, varint after the tag, position past it) of fields with one-byte tags of mixed wire
    types: the varint after each tag is in the word already loaded (``w``, clobbered), as in :func:`_fields`."""
    wire = (tag & 7).astype(np.int64)
    w >>= _U(8)
    value, length, longest = _decode(w)
    if longest >= 8:  # a zero byte shifted in, a long varint, or a fixed field's bytes: reload those
        redo = np.flatnonzero(length >= 8)
        value[redo], length[redo] = buf.varints(pos[redo] + 1)
    is_len = wire == _LEN
    if is_len.any() and value[is_len].max() >= _BAD:  # keep the int64 sum below from wrapping
        raise ValueError("malformed protobuf: length-delimited field past the end of its message")
    after = pos + 1
    after += length * _HAS_VARINT[wire]
    nxt = after + _FIXED_SKIP[wire]
    nxt += np.where(is_len, value.view(np.int64), 0)
    return nxt, value, after


def _pick(rows, tags, tag: int):
    """(column index, selector into this round's arrays) of the cursors on ``tag``; None if none."""
    if isinstance(tags, int):
        return (rows, _ALL) if tags == tag else None
    sel = tags == tag
    return ((sel if rows is _ALL else rows[sel]), sel) if sel.any() else None
