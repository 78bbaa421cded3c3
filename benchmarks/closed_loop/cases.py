"""The closed-loop cases: real JAX programs of ours, each as `before` and with exactly the fix a finding names.

A case is a rule whose fix it applies (or, for a false-positive case, the rule that must not claim: nothing
is wrong there and the tool must claim under 1 % of the step), the fix in words, the lever the finding's fix
text must name, and a `build(jax, fixed)` that returns a `step(i)` running one step and waiting for the
device. The two variants of a case compute the same thing; only what the fix changes differs. Programs are
small (a CPU step of a few to a few tens of ms) so the whole suite records and times in minutes.

run.py imports this module after setting XLA_FLAGS (device count, dump), so jax is imported lazily here.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str
    rule: str  # the rule whose fix `after` applies (false positive: the rule that must not claim)
    fix: str  # what `after` changes, in words
    lever: str  # a phrase the finding's fix text must contain: the fix applied is the one it names
    build: Callable  # (jax, fixed: bool) -> step(i)
    devices: int = 1
    stateful: bool = False  # steps share state (a prefetch queue): time in blocks, drop each block's first
    false_positive: bool = False  # nothing to fix here: the rule must claim under 1 % of the step


def _named(fn, name: str):
    """jit names the module after the function: distinct names keep before/after apart in the dump."""
    fn.__name__ = fn.__qualname__ = name
    return fn


def _shard_map(jax):
    try:
        from jax import shard_map

        return shard_map, "check_vma"
    except ImportError:  # older jax
        from jax.experimental.shard_map import shard_map

        return shard_map, "check_rep"


def _mesh(jax, np, n):
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices()[:n]), ("d",))


def _wait(out):
    import jax

    jax.block_until_ready(out)


def _fsdp_train(jax, loss_fn, name: str, ws, rng, batch: int):
    """An SGD step of ``loss_fn(w_shards, x)`` under shard_map over 8 devices: weights sharded on dim 1 (FSDP),
    the batch on dim 0, the loss averaged over devices; returns ``step(i)``."""
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    shard_map, kw = _shard_map(jax)
    mesh = _mesh(jax, np, 8)

    def local(w_shards, x):
        loss, g = jax.value_and_grad(loss_fn)(w_shards, x)
        return w_shards - 0.01 * g, jax.lax.pmean(loss, "d")

    spec = P(None, "d")
    fn = jax.jit(shard_map(_named(local, name), mesh=mesh, in_specs=(spec, P("d")), out_specs=(spec, P()),
                           **{kw: False}))
    state = {"w": jax.device_put(ws, NamedSharding(mesh, spec))}
    x = jax.device_put(rng.standard_normal((batch, ws.shape[-1])).astype(np.float32), NamedSharding(mesh, P("d")))

    def run(i):
        state["w"], loss = fn(state["w"], x)
        _wait(loss)

    return run


# --- latency-bound-collective -------------------------------------------------------------------

def many_small_arrays(jax, fixed: bool):
    """64 small sharded arrays gathered one by one (CPU XLA combines all-reduces, not all-gathers); the fix
    stacks them into one array: one all-gather."""
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    shard_map, kw = _shard_map(jax)
    mesh = _mesh(jax, np, 8)
    n_arrays, size = 64, 1024
    rng = np.random.default_rng(0)
    arrays = rng.standard_normal((n_arrays, size)).astype(np.float32)
    x = jax.device_put(rng.standard_normal((64, size)).astype(np.float32), NamedSharding(mesh, P("d")))

    def local(shards, x):  # shards: (64, size/8) per device; every array is needed whole
        if fixed:
            full = jax.lax.all_gather(shards, "d", axis=1, tiled=True)
        else:
            full = jnp.stack([jax.lax.all_gather(shards[i], "d", tiled=True) for i in range(n_arrays)])
        return jnp.tanh(x @ full.T)

    fn = jax.jit(shard_map(_named(local, f"many_small_{'after' if fixed else 'before'}"), mesh=mesh,
                           in_specs=(P(None, "d"), P("d")), out_specs=P("d"), **{kw: False}))
    shards = jax.device_put(arrays, NamedSharding(mesh, P(None, "d")))
    return lambda i: _wait(fn(shards, x))


def fsdp_per_parameter(jax, fixed: bool):
    """make_jax_fsdp_buckets.py's program: 24 parameters gathered and reduce-scattered one by one vs one flat bucket."""
    import jax.numpy as jnp
    import numpy as np

    from xladiag.sample_profiles import make_jax_fsdp_buckets as fsdp

    step, params, x = fsdp.build(jax, jnp, np, bucketed=fixed)
    state = {"p": params}

    def run(i):
        state["p"], loss = step(state["p"], x)
        _wait(loss)

    return run


def fsdp_scanned_layers(jax, fixed: bool):
    """FSDP weights of a scanned stack, gathered one layer per iteration: within the loop body there is one
    gather per layer, nothing to combine, so the tool claims nothing. `after` hoists the gathers out of the
    loop (the whole stack gathered before the scan): a change the tool does not name, because it holds every
    layer's gathered weights at once, the memory FSDP exists to save. On this CPU it made the step faster
    (13.8 % when recorded: fewer rendezvous); on an accelerator it may not fit. The case checks the claim
    stays under 1 % (no 'combine them' for collectives of different iterations)."""
    import jax.numpy as jnp
    import numpy as np

    layers, width, batch = 8, 128, 256
    rng = np.random.default_rng(0)
    ws = (rng.standard_normal((layers, width, width)) / np.sqrt(width)).astype(np.float32)

    def loss_fn(w_shards, x):
        if fixed:
            full = jax.lax.all_gather(w_shards, "d", axis=1, tiled=True)

            def body(h, w):
                return jnp.tanh(h @ w), None
            h, _ = jax.lax.scan(body, x, full)
        else:
            def body(h, w_shard):
                return jnp.tanh(h @ jax.lax.all_gather(w_shard, "d", axis=0, tiled=True)), None
            h, _ = jax.lax.scan(body, x, w_shards)
        return jnp.mean(h * h)

    return _fsdp_train(jax, loss_fn, f"fsdp_scan_{'after' if fixed else 'before'}", ws, rng, batch)


# --- remat-overhead -----------------------------------------------------------------------------

def _mlp_stack(jax, fixed: bool, name: str, *, scan: bool, fixed_policy=None, prevent_cse=True):
    import jax.numpy as jnp
    import numpy as np

    layers, width, batch = 4, 256, 256
    rng = np.random.default_rng(0)
    w1 = jnp.asarray(rng.standard_normal((layers, width, width)) / np.sqrt(width), jnp.float32)
    w2 = jnp.asarray(rng.standard_normal((layers, width, width)) / np.sqrt(width), jnp.float32)
    x = jnp.asarray(rng.standard_normal((batch, width)), jnp.float32)

    def layer(h, w):
        return h + jnp.tanh(jnp.tanh(h @ w[0]) @ w[1])

    if not fixed:  # recompute everything (jax.checkpoint's default)
        layer = jax.checkpoint(layer, prevent_cse=prevent_cse)
    elif fixed_policy is not None:  # the lighter policy the finding names
        layer = jax.checkpoint(layer, policy=fixed_policy(jax), prevent_cse=prevent_cse)

    def loss_fn(ws, x):
        if scan:
            h, _ = jax.lax.scan(lambda h, w: (layer(h, w), None), x, ws)
        else:
            h = x
            for i in range(layers):
                h = layer(h, (ws[0][i], ws[1][i]))
        return jnp.mean(h * h)

    def step(ws, x):
        loss, g = jax.value_and_grad(loss_fn)(ws, x)
        return jax.tree_util.tree_map(lambda w, d: w - 0.01 * d, ws, g), loss

    fn = jax.jit(_named(step, f"{name}_{'after' if fixed else 'before'}"), donate_argnums=(0,))
    # scanned: one (layers, 2, width, width) operand, layer i gets (2, width, width)
    state = {"w": jnp.stack([w1, w2], axis=1) if scan else (w1, w2)}

    def run(i):
        state["w"], loss = fn(state["w"], x)
        _wait(loss)

    return run


def remat_scanned_stack(jax, fixed: bool):
    """A compute-bound scanned MLP stack under jax.checkpoint (recompute everything); the fix is the policy the
    finding names for matmul-heavy recomputation: keep the dots' outputs."""
    return _mlp_stack(jax, fixed, "remat_scan", scan=True,
                      fixed_policy=lambda jax: jax.checkpoint_policies.dots_with_no_batch_dims_saveable)


def remat_merged_by_cse(jax, fixed: bool):
    """Unrolled layers under jax.checkpoint(prevent_cse=False): XLA's CSE merges the recomputation back into
    the forward pass, so removing the checkpoint changes nothing: the tool must not claim it."""
    return _mlp_stack(jax, fixed, "remat_cse", scan=False, prevent_cse=False)


def remat_fsdp(jax, fixed: bool):
    """FSDP over 8 devices with each layer under jax.checkpoint: the backward pass re-gathers the weights and
    recomputes the matmuls. The fix is the dots-saving policy the finding names; the re-gathers stay (holding
    gathered weights is what FSDP gives up), so only the matmuls' recomputation goes."""
    import jax.numpy as jnp
    import numpy as np

    layers, width, batch = 4, 256, 512
    rng = np.random.default_rng(0)
    ws = (rng.standard_normal((layers, width, width)) / np.sqrt(width)).astype(np.float32)

    def layer(h, w_shard):
        return h + jnp.tanh(h @ jax.lax.all_gather(w_shard, "d", tiled=True))

    policy = jax.checkpoint_policies.dots_with_no_batch_dims_saveable if fixed else None
    layer = jax.checkpoint(layer, policy=policy)

    def loss_fn(w_shards, x):
        h = x
        for i in range(layers):
            h = layer(h, w_shards[i])
        return jnp.mean(h * h)

    return _fsdp_train(jax, loss_fn, f"remat_fsdp_{'after' if fixed else 'before'}", ws, rng, batch)


# --- input-bound --------------------------------------------------------------------------------

def _train_step(jax, name: str):
    import jax.numpy as jnp

    def step(ws, x):
        def loss_fn(ws):
            h = x
            for w in ws:
                h = jnp.tanh(h @ w)
            return jnp.mean(h * h)
        loss, g = jax.value_and_grad(loss_fn)(ws)
        return [w - 0.01 * d for w, d in zip(ws, g)], loss

    return jax.jit(_named(step, name))


def slow_loader(jax, fixed: bool):
    """Each step waits 30 ms for its batch (a loader sleeping: I/O), then ~10 ms of compute; the fix is a
    prefetch thread with a queue of two batches, so loading overlaps the device's work."""
    import numpy as np

    width, depth, batch, load_s = 384, 3, 256, 0.030
    rng = np.random.default_rng(0)
    ws = [jax.device_put((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
          for _ in range(depth)]
    fn = _train_step(jax, f"loader_{'after' if fixed else 'before'}")
    data = rng.standard_normal((batch, width)).astype(np.float32)

    def load():
        time.sleep(load_s)
        return jax.device_put(data)

    state = {"w": ws}
    if fixed:
        batches: queue.Queue = queue.Queue(maxsize=2)
        threading.Thread(target=lambda: [batches.put(load()) for _ in iter(int, 1)], daemon=True).start()
        next_batch = batches.get
    else:
        next_batch = load

    def run(i):
        state["w"], loss = fn(state["w"], next_batch())
        float(loss)

    return run


def no_input_pipeline(jax, fixed: bool):
    """A step with its data already on the device and nothing else on the host: no input wait to claim."""
    import numpy as np

    width, depth, batch = 384, 3, 256
    rng = np.random.default_rng(0)
    ws = [jax.device_put((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
          for _ in range(depth)]
    x = jax.device_put(rng.standard_normal((batch, width)).astype(np.float32))
    fn = _train_step(jax, f"noinput_{'after' if fixed else 'before'}")
    state = {"w": ws}

    def run(i):
        state["w"], loss = fn(state["w"], x)
        float(loss)

    return run


# --- materialized-attention ---------------------------------------------------------------------

def attention_on_cpu(jax, fixed: bool):
    """Plain softmax(QK^T)V on CPU: no fused attention kernel runs here, so there is nothing to claim."""
    import jax.numpy as jnp
    import numpy as np

    b, h, s, d = 2, 4, 512, 64
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((b, s, h, d)), jnp.float32) for _ in range(3))

    def attend(q, k, v):
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v)

    def loss(q, k, v):
        return jnp.mean(attend(q, k, v) ** 2)

    fn = jax.jit(_named(jax.value_and_grad(loss, argnums=(0, 1, 2)), f"attn_{'after' if fixed else 'before'}"))
    return lambda i: _wait(fn(q, k, v))


CASES = (
    Case("many_small_arrays", "latency-bound-collective", "stack the 64 arrays, one all-gather",
         "one bucket", many_small_arrays, devices=8),
    Case("fsdp_per_parameter", "latency-bound-collective", "one flat FSDP bucket: one all-gather, one "
         "reduce-scatter", "one bucket", fsdp_per_parameter, devices=8),
    Case("fsdp_scanned_layers", "latency-bound-collective", "gather the whole scanned stack before the scan "
         "(one all-gather)",
         "", fsdp_scanned_layers, devices=8, false_positive=True),
    Case("remat_scanned_stack", "remat-overhead",
         "policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable",
         "dots_with_no_batch_dims_saveable",
         remat_scanned_stack),
    Case("remat_fsdp", "remat-overhead", "policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable "
         "(the re-gathers stay)", "dots_with_no_batch_dims_saveable", remat_fsdp, devices=8),
    Case("remat_merged_by_cse", "remat-overhead", "remove jax.checkpoint(prevent_cse=False)", "",
         remat_merged_by_cse, false_positive=True),
    Case("slow_loader", "input-bound", "prefetch thread, queue of 2", "Prefetch", slow_loader, stateful=True),
    Case("no_input_pipeline", "input-bound", "nothing (identical program)", "", no_input_pipeline,
         false_positive=True),
    Case("attention_on_cpu", "materialized-attention", "nothing (no fused kernel on CPU)", "", attention_on_cpu,
         false_positive=True),
)
BY_NAME = {c.name: c for c in CASES}
