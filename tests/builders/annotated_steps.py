"""A TPU-shaped capture whose steps the user annotated, with a host wait in each (the input-bound shape).

Each step is a ``StepTraceAnnotation("train", step_num=i)`` on the host's main thread: the loader waits
``loader_ps``, then the host enqueues the train step on every TensorCore (``DoEnqueueProgram`` with the
execution's ``run_id`` and ``device_ordinal``, as the real v6e capture has them) and the device runs it.
With ``host_blocks=False`` the host does not wait for the device: the span ends right after the enqueue,
and the device runs the step after it (asynchronous dispatch), inside the next span's loader wait.
"""

from __future__ import annotations

from .scenarios import loop_fusion, matmul_fusion
from .xspace_encoder import FIRST_STEP_START_PS, PS_PER_US, TRAIN_STEP_PROGRAM, TRAIN_STEP_PROGRAM_ID, TpuCaptureBuilder

ENQUEUE_PS = 20 * PS_PER_US  # host time from the loader's end to the enqueue
STAGGER_PS = 250_000  # device d starts d * 250 ns after device 0


def annotated_tpu_steps(*, loader_ps: int, device_ps: int = 20 * 10**9, steps: int = 5, host_blocks: bool = True,
                        annotate: bool = True, num_devices: int = 4, host: str = "t1v-n-test"):
    """(builder, expected): each step's device work lasts ``device_ps`` per core (two matmuls and an add
    fusion, 2:1:2); ``expected`` holds the step's device busy time (any device), the annotated span per step,
    and the idle time inside it (span minus busy)."""
    b = TpuCaptureBuilder(num_devices=num_devices, host=host)
    fifth = device_ps // 5
    template = [matmul_fusion("fusion.1", 8192, 8192, 8192, duration_ps=2 * fifth),
                loop_fusion("add_fusion", [8192, 8192], duration_ps=device_ps - 4 * fifth),
                matmul_fusion("fusion.2", 8192, 8192, 8192, duration_ps=2 * fifth)]
    device_ps = sum(op.duration_ps for op in template)
    busy_any_ps = device_ps + (num_devices - 1) * STAGGER_PS
    # Blocking: the span holds loader + enqueue + the device's work; else it ends at the enqueue.
    span_ps = loader_ps + ENQUEUE_PS + (busy_any_ps if host_blocks else 0)
    period_ps = span_ps  # the next step starts when the host is done with this one
    assert host_blocks or busy_any_ps < loader_ps, "the device must finish a step during the next loader wait"
    for step in range(steps):
        t0 = FIRST_STEP_START_PS + step * period_ps
        if annotate:
            b.add_host_event("train", t0, span_ps, step_num=step)
        launch = t0 + loader_ps + ENQUEUE_PS
        for dev in range(num_devices):
            b.add_host_event("DoEnqueueProgram", launch - 5 * PS_PER_US + dev * 1000, 2 * PS_PER_US,
                             run_id=step + 1, device_ordinal=dev)
            t = launch + dev * STAGGER_PS
            for op in template:
                b.add_op(dev, op.name, op.text, op.category, t, op.duration_ps, program_id=TRAIN_STEP_PROGRAM_ID,
                         flops=op.flops, bytes_accessed=op.bytes_accessed, tf_op=op.tf_op, source=op.source)
                t += op.duration_ps
            b.add_module_run(dev, TRAIN_STEP_PROGRAM, TRAIN_STEP_PROGRAM_ID, launch + dev * STAGGER_PS, device_ps,
                             step + 1)
    return b, {"span_ps": span_ps, "device_ps": device_ps, "busy_any_ps": busy_any_ps,
               "idle_ps": span_ps - busy_any_ps}
