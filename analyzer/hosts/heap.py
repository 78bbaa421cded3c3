"""Freed memory handed back to the system, where many small tables were freed before large ones are made."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # glibc
    except (OSError, AttributeError):
        return None


def release_freed() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``): many hosts' small tables, freed,
    leave holes the next large arrays do not reuse, so the process would keep their size. Elsewhere: nothing."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
