"""Record a whole small JAX training job on 8 host devices: FSDP x TP, remat, a recompile, a full dump.

What a user's script looks like, end to end, with the XLA dump flags over all of it:
  * random init with jax.random (one ``jit__normal`` module per distinct parameter shape, plus the
    key helpers jax compiles), parameters placed FSDP-only as a first-draft init would;
  * a pre-norm transformer (attention + GELU MLP, 2 layers) under ``jax.checkpoint`` with the
    ``dots_with_no_batch_dims_saveable`` policy, Adam, sharded FSDP x TP over a ('fsdp', 4) x ('tp', 2)
    mesh with GSPMD (``jit`` + NamedSharding + ``with_sharding_constraint``);
  * the train step's out_shardings are FSDP x TP, so the second call sees other input shardings
    than the first and jit compiles ``jit_train_step`` again: two modules of that name in the dump;
  * a few small jits (a global-norm metric run every step, an eval loss run once);
  * ``jax.profiler.trace`` over STEPS steps, each inside ``StepTraceAnnotation("train", step_num=i)``,
    with a 60 ms host data-loader wait (time.sleep) inside the annotation.

Writes OUT (default sample_profiles/jax_fsdp_tp_train, cleared first):
  plugins/profile/2000_01_01_00_00_00/cpu-host.xplane.pb   the capture
  hlo/                                                   the whole --xla_dump_to dump, as text (every module)
  known_answers.json                                     what a correct diagnosis must find

Usage: python sample_profiles/make_jax_fsdp_tp_train.py [OUT]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

try:  # imported as xladiag.sample_profiles.<script> (tests, import walks) or run as a script
    from . import _recording as rec
except ImportError:
    import _recording as rec

N_DEVICES, MESH = 8, {"fsdp": 4, "tp": 2}
BATCH, SEQ, D_MODEL, N_HEADS, HEAD_DIM, D_FF, VOCAB, N_LAYERS = 16, 64, 128, 4, 32, 512, 512, 2
WARMUP, STEPS, LOADER_WAIT_S = 2, 3, 0.060
STEP_NAME = "train"


def build(jax, jnp, np):
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:N_DEVICES]).reshape(MESH["fsdp"], MESH["tp"]), tuple(MESH))

    def named(spec):
        return NamedSharding(mesh, spec)

    # MaxText-style logical layout: embed dim over fsdp, heads / mlp / vocab over tp.
    layer_specs = {
        "ln1": P(None), "wq": P("fsdp", "tp", None), "wk": P("fsdp", "tp", None), "wv": P("fsdp", "tp", None),
        "wo": P("tp", None, "fsdp"), "ln2": P(None), "w_in": P("fsdp", "tp"), "w_out": P("tp", "fsdp"),
    }
    param_specs = {"embed": P("tp", "fsdp"), "layers": [dict(layer_specs) for _ in range(N_LAYERS)],
                   "ln_f": P(None), "unembed": P("fsdp", "tp")}
    is_spec = lambda x: isinstance(x, P)  # noqa: E731
    fsdp_tp = jax.tree_util.tree_map(named, param_specs, is_leaf=is_spec)

    def first_dim_fsdp(spec):  # what the init places: FSDP only, no TP yet
        return named(P(*(("fsdp",) + (None,) * (len(spec) - 1)))) if len(spec) > 1 else named(P(None))

    fsdp_only = jax.tree_util.tree_map(first_dim_fsdp, param_specs, is_leaf=is_spec)

    def init_params(key):
        shapes = {"ln1": (D_MODEL,), "wq": (D_MODEL, N_HEADS, HEAD_DIM), "wk": (D_MODEL, N_HEADS, HEAD_DIM),
                  "wv": (D_MODEL, N_HEADS, HEAD_DIM), "wo": (N_HEADS, HEAD_DIM, D_MODEL), "ln2": (D_MODEL,),
                  "w_in": (D_MODEL, D_FF), "w_out": (D_FF, D_MODEL)}
        keys = iter(jax.random.split(key, 3 + N_LAYERS * len(shapes)))

        def normal(shape, fan_in):
            return jax.random.normal(next(keys), shape, jnp.float32) / np.sqrt(fan_in)

        layers = [{k: (jnp.ones(s, jnp.float32) if k.startswith("ln")
                       else normal(s, s[0] if k != "wo" else s[0] * s[1]))
                   for k, s in shapes.items()} for _ in range(N_LAYERS)]
        return {"embed": normal((VOCAB, D_MODEL), 1), "layers": layers, "ln_f": jnp.ones((D_MODEL,), jnp.float32),
                "unembed": normal((D_MODEL, VOCAB), D_MODEL)}

    def rms_norm(x, scale):
        return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + 1e-6) * scale

    act = named(P("fsdp", None, None))
    heads = named(P("fsdp", None, "tp", None))

    def layer(x, p):
        h = rms_norm(x, p["ln1"])
        q = jax.lax.with_sharding_constraint(jnp.einsum("bsd,dhk->bshk", h, p["wq"]), heads)
        k = jax.lax.with_sharding_constraint(jnp.einsum("bsd,dhk->bshk", h, p["wk"]), heads)
        v = jax.lax.with_sharding_constraint(jnp.einsum("bsd,dhk->bshk", h, p["wv"]), heads)
        scores = jnp.einsum("bqhk,bthk->bhqt", q, k) / np.sqrt(HEAD_DIM)
        causal = jnp.tril(jnp.ones((SEQ, SEQ), bool))
        probs = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        o = jnp.einsum("bhqt,bthk->bqhk", probs, v)
        x = x + jax.lax.with_sharding_constraint(jnp.einsum("bshk,hkd->bsd", o, p["wo"]), act)
        h = rms_norm(x, p["ln2"])
        h = jax.nn.gelu(jnp.einsum("bsd,df->bsf", h, p["w_in"]))
        return x + jax.lax.with_sharding_constraint(jnp.einsum("bsf,fd->bsd", h, p["w_out"]), act)

    remat_layer = jax.checkpoint(layer, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)

    def loss_fn(params, tokens):
        x = jax.lax.with_sharding_constraint(jnp.take(params["embed"], tokens, axis=0), act)
        for p in params["layers"]:
            x = remat_layer(x, p)
        logits = jnp.einsum("bsd,dv->bsv", rms_norm(x[:, :-1], params["ln_f"]), params["unembed"])
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))

    def train_step(state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], tokens)
        t = state["t"] + 1
        b1, b2, lr = 0.9, 0.99, 1e-3
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
        scale = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        params = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + 1e-8), state["params"], m, v)
        return {"params": params, "m": m, "v": v, "t": t}, loss

    state_fsdp_tp = {"params": fsdp_tp, "m": fsdp_tp, "v": fsdp_tp, "t": named(P())}
    step = jax.jit(train_step, out_shardings=(state_fsdp_tp, named(P())), donate_argnums=(0,))
    @jax.jit
    def global_norm(tree):
        return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree)))

    eval_loss = jax.jit(loss_fn)

    params = init_params(jax.random.key(0))  # jit__normal & co., eagerly, one module per shape
    params = jax.device_put(params, fsdp_only)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = {"params": params, "m": zeros, "v": jax.tree_util.tree_map(jnp.zeros_like, params),
             "t": jnp.zeros((), jnp.int32)}
    batch_sharding = named(P("fsdp", None))
    return step, global_norm, eval_loss, state, batch_sharding


def main(argv: list[str]) -> int:
    out = rec.fresh_out(Path(argv[0]) if argv else Path(__file__).resolve().parent / "jax_fsdp_tp_train")
    dump = out / "hlo"
    rec.set_xla_flags(N_DEVICES, dump)
    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpy as np

    step, global_norm, eval_loss, state, batch_sharding = build(jax, jnp, np)
    rng = np.random.default_rng(0)

    def load_batch():
        time.sleep(LOADER_WAIT_S)  # the data loader the device waits for
        return jax.device_put(rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int32), batch_sharding)

    tokens = load_batch()
    print(f"eval loss before training {float(eval_loss(state['params'], tokens)):.4f}")
    for _ in range(WARMUP):  # compiles jit_train_step twice (FSDP-only inputs, then FSDP x TP)
        state, loss = step(state, load_batch())
        norm = global_norm(state["params"])
    jax.block_until_ready((state, norm))

    host_ms = []
    with jax.profiler.trace(str(out)):
        for i in range(STEPS):
            t = time.perf_counter()
            with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                state, loss = step(state, load_batch())
                norm = global_norm(state["params"])
                loss, norm = float(loss), float(norm)  # the host waits for the device inside the step
            host_ms.append(round((time.perf_counter() - t) * 1e3, 3))
    print(f"loss {loss:.4f} param norm {norm:.3f}")

    xplane = rec.fix_run_names(out)
    modules = rec.keep_text_dump(dump)
    names = [m["module_name"] for m in modules]
    if names.count("jit_train_step") != 2:
        raise SystemExit(f"expected jit_train_step compiled twice, dump has {names}")
    answers = rec.trace_answers(xplane, STEP_NAME)
    traced_ids = {p["program_id"] for p in answers["programs_executed"]}
    rec.write_answers(out, {
        "command": "python sample_profiles/make_jax_fsdp_tp_train.py",
        "n_devices": N_DEVICES, "mesh": MESH,
        "shapes": {"batch": BATCH, "seq": SEQ, "d_model": D_MODEL, "n_heads": N_HEADS, "head_dim": HEAD_DIM,
                   "d_ff": D_FF, "vocab": VOCAB, "n_layers": N_LAYERS},
        "tokens_per_device": BATCH * SEQ // MESH["fsdp"],
        "remat_policy": "dots_with_no_batch_dims_saveable",
        "step_annotation": STEP_NAME, "profiled_steps": STEPS, "loader_wait_ms": LOADER_WAIT_S * 1e3,
        "host_step_ms_perf_counter": host_ms,
        "dump_modules": [{**m, "executed_in_trace": m["module_id"] in traced_ids} for m in modules],
        **answers,
    }, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
