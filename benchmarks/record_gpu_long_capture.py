"""Record a long real NVIDIA capture for the speed benchmark: many steps of a deep, small transformer.

The speed goals (issue 24) are measured on captures built by code; this one is a real GPU trace of the
size and shape a user brings (per-kernel events on ``Stream #N`` lines, their CUDA launches on the host
threads, correlation ids, memcpys), so the parser is also timed on a shape nobody wrote by hand.

The model is sample_profiles/make_gpu_pair.py's transformer (cuBLAS GEMMs, cuFFT, cuDNN attention,
remat) with more, smaller layers, and XLA's command buffers off so every kernel is its own event.

    python benchmarks/record_gpu_long_capture.py OUT [--steps 300] [--layers 12]   # on a GPU machine
    python benchmarks/record_gpu_long_capture.py OUT --small                        # a CPU dry run

Writes OUT/plugins/profile/2000_01_01_00_00_00/gpu-host.xplane.pb and OUT/known_answers.json (config,
versions, event count, file size). Too large for the repository: it is kept out of it and rebuilt here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_profiles"))
import _recording as rec  # noqa: E402  (the recording scripts' shared plumbing)
import make_gpu_pair as pair  # noqa: E402

LONG = {"batch": 4, "seq": 256, "d_model": 256, "heads": 4, "d_ff": 1024, "layers": 12, "vocab": 2048}


def record(out: Path, steps: int, cfg: dict, attention: str) -> None:
    t0 = time.perf_counter()
    rec.set_xla_flags(1, None, "" if cfg is pair.SMALL else pair.NO_COMMAND_BUFFERS)
    import jax
    import jax.numpy as jnp

    run = pair.warmed_up(*pair.build(jax, jnp, cfg, attention=attention, remat=True))
    host_ms = rec.profiled_steps(jax, out, steps, "train", run)
    path = rec.fix_run_names(out)
    target = path.with_name(pair.HOST_FILE)
    path.rename(target)
    device = jax.devices()[0]
    rec.write_answers(out, {"command": f"python benchmarks/record_gpu_long_capture.py --steps {steps}",
                            "config": cfg, "attention": attention, "device_kind": device.device_kind,
                            "platform": device.platform, "profiled_steps": steps,
                            "file_bytes": target.stat().st_size,
                            "host_step_ms_median": sorted(host_ms)[len(host_ms) // 2]}, t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--layers", type=int, default=LONG["layers"])
    ap.add_argument("--small", action="store_true", help="a CPU dry run with tiny shapes")
    args = ap.parse_args()
    cfg = pair.SMALL if args.small else {**LONG, "layers": args.layers}
    out = rec.fresh_out(args.out)
    (out / rec.ANSWERS).write_text("{}\n")
    record(out, args.steps, cfg, "xla" if args.small else "cudnn")


if __name__ == "__main__":
    main()
