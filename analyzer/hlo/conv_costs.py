"""FLOPs of a convolution from its shapes, ``dim_labels`` and ``window`` (the rule is in :mod:`.costs`' doc).

Windows are checked where read: sizes, strides and dilations below 1 (XLA refuses them; a stride of 0 would
divide by zero) and group counts below 1 are errors, and a window too large to count tap by tap is unknown
rather than an allocation of its size. The caller reads any ValueError as FLOPs unknown.
"""

from __future__ import annotations

import re

import numpy as np

from ...parsers.hlo_text import Shape
from ...parsers.hlo_tokens import parse_int

__all__ = ["parse_window", "conv_flops_from"]


def parse_window(text: str, rank: int) -> list[dict]:
    """``{size=3x3 stride=2x2 pad=1_1x0_0 lhs_dilate=1x1 rhs_dilate=1x1}`` per spatial dim."""
    dims = [dict(size=1, stride=1, lo=0, hi=0, lhs_dilate=1, rhs_dilate=1) for _ in range(rank)]
    for key, value in re.findall(r"(\w+)=([^\s}]+)", text or ""):
        for d, part in zip(dims, value.split("x")):
            if key == "pad":
                lo, _, hi = part.partition("_")
                d["lo"], d["hi"] = parse_int(lo, "window pad"), parse_int(hi, "window pad")
            elif key in ("size", "stride", "lhs_dilate", "rhs_dilate"):  # int64 at most (a fuzzer's 23 digits)
                d[key] = parse_int(part, f"window {key}")
                if d[key] < 1:  # XLA's shape inference refuses them; a stride of 0 would divide by 0
                    raise ValueError(f"window {key}={part} is below 1")
    return dims


_MAX_TAPS = 1 << 24


def _valid_taps(in_size: int, out_size: int, kernel: int, w: dict) -> int:
    """(output position, kernel tap) pairs reading a real input element in one spatial dim."""
    if kernel <= 0 or out_size <= 0:
        return 0
    ld = w["lhs_dilate"]
    if kernel > _MAX_TAPS or ld != 1 and kernel * out_size > _MAX_TAPS:  # the arrays below hold that many
        raise ValueError(f"window of {kernel} taps over {out_size} positions: too large to count")
    if ld == 1:  # closed form per tap: the output positions whose input index is in range
        start = np.arange(kernel) * w["rhs_dilate"] - w["lo"]
        o_min = np.maximum(-(start // w["stride"]), 0)  # ceil(-start / stride)
        o_max = np.minimum((in_size - 1 - start) // w["stride"], out_size - 1)
        return int(np.maximum(o_max - o_min + 1, 0).sum())
    k = np.arange(kernel)[:, None]
    o = np.arange(out_size)[None, :]
    pos = o * w["stride"] - w["lo"] + k * w["rhs_dilate"]
    ok = (pos >= 0) & (pos % ld == 0) & (pos // ld < in_size)
    return int(ok.sum())


def conv_flops_from(inp: Shape, kernel: Shape, out: Shape, attrs: dict) -> float:
    labels = attrs.get("dim_labels", "")
    m = re.fullmatch(r"(\w+)_(\w+)->(\w+)", labels)
    if not m:
        raise ValueError(f"cannot read dim_labels {labels!r}")
    in_l, k_l, out_l = m.groups()
    spatial = [c for c in in_l if c not in "bf"]
    windows = parse_window(attrs.get("window", ""), len(spatial))
    taps = 1
    for s, w in zip(spatial, windows):
        taps *= _valid_taps(inp.dims[in_l.index(s)], out.dims[out_l.index(s)],
                            kernel.dims[k_l.index(s)], w)
    fgc = parse_int(attrs.get("feature_group_count") or "1", "feature_group_count")
    bgc = parse_int(attrs.get("batch_group_count") or "1", "batch_group_count")
    if fgc < 1 or bgc < 1:
        raise ValueError(f"group counts {fgc}, {bgc} below 1")
    fma = (inp.dims[in_l.index("f")] // fgc) * out.dims[out_l.index("f")] \
        * (inp.dims[in_l.index("b")] // bgc) * taps
    return 2.0 * fma
