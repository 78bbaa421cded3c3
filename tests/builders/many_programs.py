"""An MI300X-like shape on a TPU-shaped capture: 8 device planes, one of which runs 11 small programs.

Program ``p`` (``jit_small_p``, id ``100 + p``) runs ``runs[p]`` times, each execution one loop fusion of
``op_ps``: the one with the most device time holds only ``max(runs) / sum(runs)`` of it. Only device 0 has events.
"""

from __future__ import annotations

from .scenarios import loop_fusion
from .xspace_encoder import FIRST_STEP_START_PS, TpuCaptureBuilder

RUNS = (15, 11, 10, 9, 9, 8, 8, 8, 8, 7, 7)  # 100 executions: the biggest program holds 15 %
OP_PS = 10**9  # 1 ms per execution
GAP_PS = 10**8


def small_programs(runs=RUNS, *, planes: int = 8, duplicate_name: bool = False):
    """(builder, {(name, id): executions}); ``duplicate_name``: the first two programs share one name."""
    b = TpuCaptureBuilder(num_devices=planes)
    t = FIRST_STEP_START_PS
    programs = {}
    for p, count in enumerate(runs):
        name = "jit_small_0" if duplicate_name and p == 1 else f"jit_small_{p}"
        pid = 100 + p
        programs[(name, str(pid))] = count
        op = loop_fusion(f"fusion.{p}", [512, 512], duration_ps=OP_PS)
        for run in range(count):
            b.add_op(0, op.name, op.text, op.category, t, OP_PS, program_id=pid, flops=op.flops,
                     bytes_accessed=op.bytes_accessed)
            b.add_module_run(0, name, pid, t, OP_PS, run + 1)
            t += OP_PS + GAP_PS
    return b, programs
