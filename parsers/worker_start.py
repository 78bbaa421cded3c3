"""How local worker processes start: ``fork`` where it is safe, a clean ``forkserver`` (else ``spawn``) where not.

Fork copies this process as it is, modules already imported, so workers start in milliseconds. It is unsafe
once the process runs other threads (JAX's runtime, a Dask client, a training loop calling
``xladiag.profile``): a child can inherit a lock held by a thread that does not exist in it, and wait forever.
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
from multiprocessing.context import BaseContext


def fork_is_safe() -> bool:
    """True in a single-threaded process without JAX loaded, on a platform that can fork."""
    return ("fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
            and "jax" not in sys.modules)


def worker_context() -> BaseContext:
    """The start method for a pool of workers: fork when :func:`fork_is_safe`, else a fresh process."""
    if fork_is_safe():
        return multiprocessing.get_context("fork")
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
