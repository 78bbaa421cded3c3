"""Record a bf16 transformer train step on one NVIDIA GPU twice, before and after one fix, and time both.

A 2-layer pre-norm transformer LM (embedding, causal multi-head attention, an FNet-style FFT mixing branch,
GELU MLP, logits, cross-entropy, SGD) whose ops are not all plain XLA fusions: cuBLAS GEMM custom calls,
cuFFT, and with cuDNN attention the fused attention custom call. The pairs (``--pair``):

- ``attention``: the closed loop of `materialized-attention` on GPU. "before" computes attention with
  ``jax.nn.dot_product_attention(..., implementation="xla")`` (the score matrix goes to HBM); "after" changes
  only that argument to ``"cudnn"``. Each block is rematerialized (``jax.checkpoint``) in both.
- ``remat``: the closed loop of `remat-overhead`. Both use cuDNN attention; "before" wraps each block in
  ``jax.checkpoint``, "after" does not.

``--no-command-buffers`` adds ``--xla_gpu_enable_command_buffer=`` to XLA_FLAGS: XLA then launches each
fusion on its own instead of replaying CUDA graphs, so the trace times every HLO op (with command buffers
one ``command_buffer_N`` event stands for many ops).

Writes OUT (default sample_profiles/gpu_h100_<pair>_pair[_nocb], cleared first):
  before/plugins/profile/2000_01_01_00_00_00/gpu-host.xplane.pb   the capture (5 annotated steps)
  before/hlo/                                                   the train step's dump only
  before/known_answers.json                                     config, versions, device, host step times
  after/...                                                     the same, cuDNN attention
  timing.json        both variants timed without the profiler, interleaved ABAB, per-round medians

Each recording runs in its own process (the dump flag must be set before jax is imported); the timing
runs in a third one, with no dump and no profiler.
Usage: python sample_profiles/make_gpu_pair.py [OUT] [--pair attention|remat] [--no-command-buffers]
       [--small]   (--small: a CPU dry run)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

try:  # imported as xladiag.sample_profiles.<script> (tests, import walks) or run as a script
    from . import _recording as rec
except ImportError:
    import _recording as rec

FULL = {"batch": 8, "seq": 1024, "d_model": 1024, "heads": 16, "d_ff": 4096, "layers": 2, "vocab": 8192}
SMALL = {"batch": 2, "seq": 64, "d_model": 64, "heads": 4, "d_ff": 128, "layers": 2, "vocab": 256}
WARMUP, STEPS, ROUNDS, CALLS_PER_ROUND = 3, 5, 15, 10
STEP_NAME = "train"
PAIRS = {"attention": {"before": {"attention": "xla", "remat": True}, "after": {"attention": "cudnn", "remat": True}},
         "remat": {"before": {"attention": "cudnn", "remat": True}, "after": {"attention": "cudnn", "remat": False}}}
VARIANTS = ("before", "after")
NO_COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer="
HOST_FILE = "gpu-host.xplane.pb"


def build(jax, jnp, cfg: dict, attention: str, remat: bool):
    """(train_step, params, batch) of the model with attention ``implementation=attention``, each block in
    ``jax.checkpoint`` when ``remat``."""
    d, h, t = cfg["d_model"], cfg["heads"], cfg["seq"]
    key = jax.random.PRNGKey(0)

    def dense(k, n_in, n_out):
        return (jax.random.normal(k, (n_in, n_out), jnp.float32) / n_in ** 0.5).astype(jnp.bfloat16)

    keys = iter(jax.random.split(key, 8 * cfg["layers"] + 4))
    params = {"embed": dense(next(keys), cfg["vocab"], d), "out": dense(next(keys), d, cfg["vocab"]),
              "layers": [{"qkv": dense(next(keys), d, 3 * d), "proj": dense(next(keys), d, d),
                          "up": dense(next(keys), d, cfg["d_ff"]), "down": dense(next(keys), cfg["d_ff"], d),
                          "fft_gate": jnp.ones((t // 2 + 1, 1), jnp.float32)} for _ in range(cfg["layers"])]}

    def norm(x):
        x32 = x.astype(jnp.float32)
        return ((x32 - x32.mean(-1, keepdims=True)) * jax.lax.rsqrt(x32.var(-1, keepdims=True) + 1e-6)).astype(x.dtype)

    def block(x, p):
        b = x.shape[0]
        q, k, v = jnp.split(norm(x) @ p["qkv"], 3, axis=-1)
        q, k, v = (a.reshape(b, t, h, d // h) for a in (q, k, v))
        att = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=attention)
        x = x + att.reshape(b, t, d) @ p["proj"]
        # FNet-style token mixing: a real FFT along the sequence, gated per frequency (cuFFT on GPU).
        spec = jnp.fft.rfft(norm(x).astype(jnp.float32), axis=1) * p["fft_gate"]
        x = x + jnp.fft.irfft(spec, n=t, axis=1).astype(x.dtype)
        return x + jax.nn.gelu(norm(x) @ p["up"]) @ p["down"]

    def loss_fn(params, tokens):
        x = params["embed"][tokens[:, :-1]]
        x = jnp.pad(x, ((0, 0), (0, 1), (0, 0)))  # keep the sequence length at `seq`
        for p in params["layers"]:
            x = (jax.checkpoint(block) if remat else block)(x, p)
        logits = (norm(x) @ params["out"]).astype(jnp.float32)[:, :-1]
        labels = jax.nn.one_hot(tokens[:, 1:], cfg["vocab"])
        return -(jax.nn.log_softmax(logits) * labels).sum(-1).mean()

    @jax.jit
    def train_step(params, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        return jax.tree_util.tree_map(lambda w, g: (w - 1e-3 * g).astype(w.dtype), params, grads), loss

    tokens = jax.random.randint(next(keys), (cfg["batch"], t), 0, cfg["vocab"])
    return train_step, params, tokens


def _settings(pair: str, variant: str, cfg: dict) -> dict:
    """The variant's build settings; the CPU dry run (--small) has no cuDNN, so it uses XLA attention."""
    settings = dict(PAIRS[pair][variant])
    if cfg is SMALL:
        settings["attention"] = "xla"
    return settings


def warmed_up(step, params, tokens):
    """``run(i)``: one train step that waits for the device, after WARMUP steps (compiled, caches warm)."""
    for _ in range(WARMUP):
        params, loss = step(params, tokens)
    loss.block_until_ready()
    state = {"params": params}

    def run(_):
        state["params"], loss = step(state["params"], tokens)
        loss.block_until_ready()

    return run


def record(out: Path, pair: str, variant: str, cfg: dict) -> None:
    """One variant in this process: warm up, profile STEPS annotated steps, keep the train step's dump."""
    t0 = time.perf_counter()
    rec.set_xla_flags(1, out / "hlo")
    import jax
    import jax.numpy as jnp

    settings = _settings(pair, variant, cfg)
    run = warmed_up(*build(jax, jnp, cfg, **settings))
    host_ms = rec.profiled_steps(jax, out, STEPS, STEP_NAME, run)
    pbs = sorted((out / "plugins" / "profile").glob("*/*.xplane.pb"))
    run_dir = out / "plugins" / "profile" / rec.RUN_DIR_NAME
    pbs[0].parent.rename(run_dir)
    for f in run_dir.iterdir():
        f.rename(run_dir / HOST_FILE) if f.name.endswith(".xplane.pb") else f.unlink()
    rec.keep_text_dump(out / "hlo")
    rec.keep_module_only(out / "hlo", "jit_train_step")
    for f in (out / "hlo").iterdir():  # the scheduled module and its memory report; not the GPU thunk files
        if "after_optimizations" not in f.name:
            f.unlink()
    device = jax.devices()[0]
    flags = os.environ.get("XLA_FLAGS", "")
    command = f"python sample_profiles/make_gpu_pair.py --pair {pair}" + \
        (" --no-command-buffers" if NO_COMMAND_BUFFERS in flags else "")
    rec.write_answers(out, {"command": command, "pair": pair, "variant": variant, **settings,
                            "xla_flags": flags.replace(str(out), "OUT"), "config": cfg,
                            "device_kind": device.device_kind, "platform": device.platform,
                            "warmup_steps": WARMUP, "profiled_steps": STEPS, "step_name": STEP_NAME,
                            "host_step_ms": host_ms}, t0)


def time_both(out: Path, pair: str, cfg: dict) -> None:
    """Both variants in one process without the profiler, interleaved ABAB: per round the mean of
    CALLS_PER_ROUND steps; medians and the spread of the rounds."""
    import jax
    import jax.numpy as jnp

    runs = {}
    for variant in VARIANTS:
        step, params, tokens = build(jax, jnp, cfg, **_settings(pair, variant, cfg))
        for _ in range(WARMUP):
            params, loss = step(params, tokens)
        loss.block_until_ready()
        runs[variant] = (step, params, tokens)
    rounds = {v: [] for v in VARIANTS}
    for _ in range(ROUNDS):
        for variant, (step, params, tokens) in runs.items():
            t = time.perf_counter()
            for _ in range(CALLS_PER_ROUND):
                params, loss = step(params, tokens)
            loss.block_until_ready()
            rounds[variant].append((time.perf_counter() - t) / CALLS_PER_ROUND * 1e3)
    summary = {v: {"median_ms": statistics.median(r), "min_ms": min(r), "max_ms": max(r),
                   "quartiles_ms": statistics.quantiles(r, n=4), "rounds_ms": [round(x, 4) for x in r]}
               for v, r in rounds.items()}
    before, after = summary["before"]["median_ms"], summary["after"]["median_ms"]
    summary["saving_ms"] = before - after
    summary["saving_fraction"] = (before - after) / before
    summary["method"] = (f"{ROUNDS} rounds, ABAB; each round {CALLS_PER_ROUND} steps of each variant, "
                         "mean per step; no profiler, no dump; one process")
    summary["device_kind"] = jax.devices()[0].device_kind
    summary["pair"], summary["variants"] = pair, {v: _settings(pair, v, cfg) for v in VARIANTS}
    summary["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    (out / "timing.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: summary[k] for k in ("saving_ms", "saving_fraction")}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--pair", choices=sorted(PAIRS), default="attention")
    parser.add_argument("--no-command-buffers", action="store_true")
    parser.add_argument("--small", action="store_true", help="a CPU dry run with tiny shapes")
    parser.add_argument("--stage", nargs=2, metavar=("WHAT", "VARIANT"), help=argparse.SUPPRESS)  # a subprocess
    args = parser.parse_args()
    cfg = SMALL if args.small else FULL
    if args.no_command_buffers:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {NO_COMMAND_BUFFERS}".strip()
    if args.stage:
        what, variant = args.stage
        (record(args.out, args.pair, variant, cfg) if what == "record" else time_both(args.out, args.pair, cfg))
        return
    default = f"gpu_h100_{args.pair}_pair" + ("_nocb" if args.no_command_buffers else "")
    out = rec.fresh_out(args.out or rec.REPO_ROOT / "sample_profiles" / default)
    (out / rec.ANSWERS).write_text("{}\n")  # marks the folder as ours while the variants record
    passed = ["--pair", args.pair] + ["--small"] * args.small  # the flag itself travels in XLA_FLAGS
    for variant in VARIANTS:
        (out / variant).mkdir()
        (out / variant / rec.ANSWERS).write_text("{}\n")
        subprocess.run([sys.executable, __file__, str(out / variant), "--stage", "record", variant, *passed],
                       check=True)
    subprocess.run([sys.executable, __file__, str(out), "--stage", "time", "-", *passed], check=True)
    (out / rec.ANSWERS).unlink()


if __name__ == "__main__":
    main()
