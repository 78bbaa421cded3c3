"""Freed memory handed back to the system, where many small tables were freed before large ones are made
(the one glibc ``malloc_trim`` of worker_start)."""

from __future__ import annotations

from ...parsers.worker_start import _malloc_trim  # noqa: F401 (its cached handle: tests clear it)
from ...parsers.worker_start import release_freed_memory as release_freed  # noqa: F401
