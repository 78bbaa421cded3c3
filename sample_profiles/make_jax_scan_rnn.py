"""Record a program nothing in xladiag was tuned on: a GRU over time with ``lax.scan``, GSPMD-sharded.

A one-layer GRU language model (embedding, GRU cell under ``jax.lax.scan`` over SEQ time steps,
unembedding, cross-entropy, SGD) on 8 host devices as a ('data', 4) x ('model', 2) mesh with plain
``jit`` + NamedSharding: batch over `data`, the hidden dimension of the recurrent weights over `model`,
so XLA inserts the collectives inside the scan's while loop (one set per time step). Not shard_map,
no remat, a while loop in the step: unlike the other recorded samples.

Writes OUT (default sample_profiles/jax_scan_rnn, cleared first):
  plugins/profile/2000_01_01_00_00_00/cpu-host.xplane.pb   the capture
  hlo/                                                   the train step's dump only
  known_answers.json                                     while loops and collectives in the HLO, steps read back

Usage: python sample_profiles/make_jax_scan_rnn.py [OUT]
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

try:  # imported as xladiag.sample_profiles.<script> (tests, import walks) or run as a script
    from . import _recording as rec
except ImportError:
    import _recording as rec

N_DEVICES, MESH = 8, {"data": 4, "model": 2}
BATCH, SEQ, VOCAB, EMBED, HIDDEN = 32, 4, 256, 64, 128
WARMUP, STEPS = 2, 4
STEP_NAME = "train"


def build(jax, jnp, np):
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:N_DEVICES]).reshape(MESH["data"], MESH["model"]), tuple(MESH))
    rng = np.random.default_rng(0)

    def normal(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    params = {"embed": normal(VOCAB, EMBED), "wx": normal(EMBED, 3 * HIDDEN), "wh": normal(HIDDEN, 3 * HIDDEN),
              "b": np.zeros(3 * HIDDEN, np.float32), "unembed": normal(HIDDEN, VOCAB)}
    specs = {"embed": P(), "wx": P(None, "model"), "wh": P(None, "model"), "b": P("model"),
             "unembed": P("model", None)}

    def loss_fn(p, tokens):
        xs = jnp.take(p["embed"], tokens[:, :-1], axis=0).swapaxes(0, 1)  # [time, batch, embed]
        gx = xs @ p["wx"] + p["b"]  # input projections of every time step at once

        def cell(h, g):
            r, z, n = jnp.split(g, 3, axis=-1)
            hr, hz, hn = jnp.split(h @ p["wh"], 3, axis=-1)
            r, z = jax.nn.sigmoid(r + hr), jax.nn.sigmoid(z + hz)
            h = (1 - z) * jnp.tanh(n + r * hn) + z * h
            return jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P("data", None))), h

        h0 = jnp.zeros((tokens.shape[0], HIDDEN), jnp.float32)
        _, hs = jax.lax.scan(cell, h0, gx)
        logits = hs.swapaxes(0, 1) @ p["unembed"]
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))

    def train_step(p, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(p, tokens)
        return jax.tree_util.tree_map(lambda w, g: w - 0.1 * g, p, grads), loss

    shardings = {k: NamedSharding(mesh, s) for k, s in specs.items()}
    step = jax.jit(train_step, out_shardings=(shardings, NamedSharding(mesh, P())), donate_argnums=(0,))
    params = jax.device_put(params, shardings)
    tokens = jax.device_put(rng.integers(0, VOCAB, (BATCH, SEQ + 1), dtype=np.int32),
                            NamedSharding(mesh, P("data", None)))
    return step, params, tokens


def main(argv: list[str]) -> int:
    out = rec.fresh_out(Path(argv[0]) if argv else Path(__file__).resolve().parent / "jax_scan_rnn")
    dump = out / "hlo"
    rec.set_xla_flags(N_DEVICES, dump)
    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpy as np

    step, params, tokens = build(jax, jnp, np)
    for _ in range(WARMUP):
        params, loss = step(params, tokens)
    jax.block_until_ready((params, loss))
    state = {"params": params}

    def run_step(_):
        state["params"], loss = step(state["params"], tokens)
        state["loss"] = float(loss)

    host_ms = rec.profiled_steps(jax, out, STEPS, STEP_NAME, run_step)
    loss = state["loss"]
    print(f"loss {loss:.4f}")

    xplane = rec.fix_run_names(out)
    rec.keep_module_only(dump, "jit_train_step")
    modules = rec.keep_text_dump(dump)
    if [m["module_name"] for m in modules] != ["jit_train_step"]:
        raise SystemExit(f"expected one jit_train_step module, dump has {modules}")
    hlo = (dump / modules[0]["file"]).read_text()
    counts = {k: len(re.findall(rf"^\s*(?:ROOT )?%\S+ = .*? {k}\(", hlo, re.M))
              for k in ("while", "all-gather", "reduce-scatter", "all-reduce")}
    if counts["while"] < 2:
        raise SystemExit(f"expected the forward and backward scans as while loops, found {counts}")
    rec.write_answers(out, {
        "command": "python sample_profiles/make_jax_scan_rnn.py", "n_devices": N_DEVICES, "mesh": MESH,
        "shapes": {"batch": BATCH, "seq": SEQ, "vocab": VOCAB, "embed": EMBED, "hidden": HIDDEN},
        "ops_in_hlo": counts, "step_annotation": STEP_NAME, "profiled_steps": STEPS,
        "host_step_ms_perf_counter": host_ms, "dump_modules": modules,
        **rec.trace_answers(xplane, STEP_NAME),
    }, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
