"""Record an input-bound training loop: each annotated step waits 60 ms for its data, then ~20 ms of compute.

One CPU device, no dump flags besides the HLO text dump, nothing else compiled in the loop: the cleanest
case of the `input-bound` diagnosis. Each step is ``StepTraceAnnotation("train", step_num=i)`` around
the loader (``time.sleep(0.06)`` + ``device_put``), the jitted step (a chain of matmuls) and
``float(loss)``. The script times the loader itself, so the answer does not come from the capture alone.

Writes OUT (default sample_profiles/jax_input_bound, cleared first):
  plugins/profile/2000_01_01_00_00_00/cpu-host.xplane.pb   the capture
  hlo/                                                   the dump (the step and its helpers)
  known_answers.json                                     per step: annotated, device busy, idle, loader

Usage: python sample_profiles/make_jax_input_bound.py [OUT]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

try:  # imported as xladiag.sample_profiles.<script> (tests, import walks) or run as a script
    from . import _recording as rec
except ImportError:
    import _recording as rec

WIDTH, DEPTH, BATCH = 512, 3, 256
WARMUP, STEPS, LOADER_WAIT_S = 2, 5, 0.060
STEP_NAME = "train"


def main(argv: list[str]) -> int:
    out = rec.fresh_out(Path(argv[0]) if argv else Path(__file__).resolve().parent / "jax_input_bound")
    rec.set_xla_flags(1, out / "hlo")
    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpy as np

    @jax.jit
    def train_step(ws, x):
        def loss_fn(ws):
            h = x
            for w in ws:
                h = jnp.tanh(h @ w)
            return jnp.mean(h * h)

        loss, grads = jax.value_and_grad(loss_fn)(ws)
        return [w - 0.01 * g for w, g in zip(ws, grads)], loss

    rng = np.random.default_rng(0)
    ws = [jax.device_put((rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32))
          for _ in range(DEPTH)]
    loader_ms = []

    def load_batch():
        t = time.perf_counter()
        time.sleep(LOADER_WAIT_S)  # the data loader the device waits for
        batch = jax.device_put(rng.standard_normal((BATCH, WIDTH)).astype(np.float32))
        loader_ms.append(round((time.perf_counter() - t) * 1e3, 3))
        return batch

    for _ in range(WARMUP):
        ws, loss = train_step(ws, load_batch())
    jax.block_until_ready(ws)
    loader_ms.clear()

    with jax.profiler.trace(str(out)):
        for i in range(STEPS):
            with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                ws, loss = train_step(ws, load_batch())
                loss = float(loss)
    print(f"loss {loss:.5f}")

    xplane = rec.fix_run_names(out)
    modules = rec.keep_text_dump(out / "hlo")
    answers = rec.trace_answers(xplane, STEP_NAME)
    for step, loader in zip(answers["steps"], loader_ms):
        step["device_idle_ms"] = round(step["annotated_ms"] - step["device_busy_ms_any_device"], 3)
        step["loader_ms_perf_counter"] = loader
    rec.write_answers(out, {
        "command": "python sample_profiles/make_jax_input_bound.py",
        "n_devices": 1, "shapes": {"width": WIDTH, "depth": DEPTH, "batch": BATCH},
        "step_annotation": STEP_NAME, "profiled_steps": STEPS, "loader_wait_ms": LOADER_WAIT_S * 1e3,
        "dump_modules": modules,
        **answers,
    }, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
