"""The command keeps the memory it frees for reuse (cli_common.reuse_freed_memory): a big temporary freed and
made again comes from the heap already faulted in, not from fresh zeroed pages."""

from __future__ import annotations

import subprocess
import sys

import pytest

_FAULTS = r"""
import resource, sys
import numpy as np
if sys.argv[1] == "tuned":
    from xladiag.cli_common import reuse_freed_memory
    reuse_freed_memory()
np.ones(8 << 20)  # 64 MiB made and freed once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    np.ones(8 << 20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_big_block_is_reused_without_fresh_pages():
    faults = {how: int(subprocess.run([sys.executable, "-c", _FAULTS, how], capture_output=True, text=True,
                                      check=True).stdout) for how in ("default", "tuned")}
    # 5 x 64 MiB: thousands of faults (16k small pages each, or 32 huge ones) when each block is a fresh map.
    assert faults["default"] >= 5 * 32
    assert faults["tuned"] < 16
