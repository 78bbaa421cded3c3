"""Record one FSDP train step twice: a collective per parameter, then the fix: one flat bucket.

The closed loop of the `latency-bound-collective` finding ("combine them into one collective per kind
and replica group ... one flattened bucket"). A 6-layer residual MLP (w, b, scale, shift per layer) is
trained with FSDP over 8 host devices inside ``shard_map``: every device holds 1/8 of each parameter.
"before" all-gathers each of the 24 parameters on its own, so autodiff reduce-scatters each gradient on
its own too (24 + 24 small collectives per step; XLA on CPU combines neither kind by itself). "after"
keeps the same values in one flat array sharded as a whole: one all-gather, one reduce-scatter. Same
model, same data, same maths; only the collectives change. Both also all-reduce the loss (pmean).

Writes OUT (default sample_profiles/jax_fsdp_buckets, cleared first), one recording per variant:
  before/plugins/profile/2000_01_01_00_00_00/cpu-host.xplane.pb   the capture
  before/hlo/                                                   the train step's dump only
  before/known_answers.json                                     collectives in the HLO, steps read back
  after/...                                                     the same, bucketed

Each variant runs in its own process (the dump flag must be set before jax is imported).
Usage: python sample_profiles/make_jax_fsdp_buckets.py [OUT]
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

try:  # imported as xladiag.sample_profiles.<script> (tests, import walks) or run as a script
    from . import _recording as rec
except ImportError:
    import _recording as rec

N_DEVICES, N_LAYERS, WIDTH, BATCH = 8, 6, 64, 256
WARMUP, STEPS = 3, 6
STEP_NAME = "train"
VARIANTS = ("before", "after")


def build(jax, jnp, np, bucketed: bool):
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    try:
        from jax import shard_map

        check_kw = "check_vma"
    except ImportError:  # older jax
        from jax.experimental.shard_map import shard_map

        check_kw = "check_rep"
    mesh = Mesh(np.array(jax.devices()[:N_DEVICES]), ("data",))
    rng = np.random.default_rng(0)
    params = [{"w": (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
               "b": np.zeros(WIDTH, np.float32), "scale": np.ones(WIDTH, np.float32),
               "shift": np.zeros(WIDTH, np.float32)} for _ in range(N_LAYERS)]

    leaves, tree = jax.tree_util.tree_flatten(params)
    splits = np.cumsum([g.size for g in leaves])[:-1]

    def gather(shards):
        """Each device holds 1/8 of every parameter (FSDP); the layers need them whole."""
        if not bucketed:  # one all-gather per parameter: what a first draft does
            return jax.tree_util.tree_map(lambda s: jax.lax.all_gather(s, "data", tiled=True), shards)
        flat = jax.lax.all_gather(shards, "data", tiled=True)  # the fix: one flat bucket, one all-gather
        return tree.unflatten([f.reshape(g.shape) for f, g in zip(jnp.split(flat, splits), leaves)])

    def loss_fn(shards, x):
        for p in gather(shards):
            h = x @ p["w"] + p["b"]
            h = (h - h.mean(-1, keepdims=True)) * jax.lax.rsqrt(h.var(-1, keepdims=True) + 1e-5)
            x = x + jnp.tanh(h * p["scale"] + p["shift"])
        return jnp.mean(x * x)

    def local_step(shards, x):  # the gradients' reduce-scatters are the all-gathers' transposes
        loss, grads = jax.value_and_grad(loss_fn)(shards, x)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, shards, grads), jax.lax.pmean(loss, "data")

    if bucketed:  # the flat bucket is sharded as a whole: device d holds elements [d*n/8, (d+1)*n/8)
        params = np.concatenate([g.ravel() for g in leaves])
    spec = jax.tree_util.tree_map(lambda _: P("data"), params)
    step = jax.jit(shard_map(local_step, mesh=mesh, in_specs=(spec, P("data")), out_specs=(spec, P()),
                             **{check_kw: False}), donate_argnums=(0,))
    params = jax.device_put(params, NamedSharding(mesh, P("data")))
    x = jax.device_put(rng.standard_normal((BATCH, WIDTH)).astype(np.float32), NamedSharding(mesh, P("data")))
    return step, params, x


def record(variant: str, out: Path) -> int:
    out = rec.fresh_out(out)
    dump = out / "hlo"
    rec.set_xla_flags(N_DEVICES, dump)
    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpy as np

    step, params, x = build(jax, jnp, np, bucketed=variant == "after")
    for _ in range(WARMUP):
        params, loss = step(params, x)
    jax.block_until_ready((params, loss))
    state = {"params": params}

    def run_step(_):
        state["params"], loss = step(state["params"], x)
        float(loss)  # the host waits for the device inside the step

    host_ms = rec.profiled_steps(jax, out, STEPS, STEP_NAME, run_step)

    xplane = rec.fix_run_names(out)
    rec.keep_module_only(dump, "jit_local_step")
    modules = rec.keep_text_dump(dump)
    if [m["module_name"] for m in modules] != ["jit_local_step"]:
        raise SystemExit(f"expected one jit_local_step module, dump has {modules}")
    hlo = (dump / modules[0]["file"]).read_text()
    collectives = {k: len(re.findall(rf"= \S+ {k}\(", hlo)) for k in ("all-gather", "reduce-scatter", "all-reduce")}
    per_kind = 1 if variant == "after" else 4 * N_LAYERS  # CPU XLA combines neither kind by itself
    want = {"all-gather": per_kind, "reduce-scatter": per_kind, "all-reduce": 1}  # + the loss pmean
    if collectives != want:
        raise SystemExit(f"{variant}: expected collectives {want} in the HLO, found {collectives}")
    rec.write_answers(out, {
        "command": "python sample_profiles/make_jax_fsdp_buckets.py",
        "variant": variant, "n_devices": N_DEVICES, "n_layers": N_LAYERS, "width": WIDTH, "batch": BATCH,
        "collectives_in_hlo": collectives, "step_annotation": STEP_NAME, "profiled_steps": STEPS,
        "host_step_ms_perf_counter": host_ms, "dump_modules": modules,
        **rec.trace_answers(xplane, STEP_NAME),
    }, t0)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--variant"]:
        return record(argv[1], Path(argv[2]))
    out = Path(argv[0]) if argv else Path(__file__).resolve().parent / "jax_fsdp_buckets"
    out.mkdir(parents=True, exist_ok=True)
    for variant in VARIANTS:  # one process each: XLA_FLAGS are read once, when jax is imported
        subprocess.run([sys.executable, __file__, "--variant", variant, str(out / variant)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
