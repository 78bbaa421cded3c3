"""Which of a chip's peak FLOP/s columns an HLO element type runs at (bf16, f16, f32, fp8 or int8)."""

from __future__ import annotations

# HLO element types → the peak column that applies. Anything else (pred, s32, f64…) uses bf16 with a note.
_DTYPE_PEAK = {
    "bf16": "bf16", "f16": "f16", "f32": "f32", "tf32": "f32", "fp8": "fp8",
    "s8": "int8", "u8": "int8", "int8": "int8", "s4": "int8", "u4": "int8",
}


def is_bf16_like(dtype: str | None) -> bool:
    """Whether the bf16 peak is the type's own (not a fallback that deserves a note)."""
    return dtype is None or str(dtype).strip().lower() in ("bf16", "bfloat16", "")


def peak_kind(dtype: str | None) -> str:
    """'bf16', 'f16', 'f32', 'fp8' or 'int8': the peak column for ``dtype`` (bf16 for anything else)."""
    d = "" if dtype is None else str(dtype).strip().lower()
    if d.startswith("f8") or d.startswith("float8"):
        return "fp8"  # f8e4m3fn, f8e5m2, f8e4m3fnuz, …
    if d == "float16":
        return "f16"
    return _DTYPE_PEAK.get(d, "bf16")
