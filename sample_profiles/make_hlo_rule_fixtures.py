"""Compile the rule fixtures of issue 12 with JAX on CPU: one real XLA dump per fixture, known answers.

Shape rules (MXU padding, materialized attention, sharding intensity) read the HLO only, so these are
compiled, never run (inputs are ShapeDtypeStructs: no memory for the big ones), and analysed with
``--hlo-dir <fixture>/hlo --chip v6e`` (or tpu7x). Each fixture compiles in its own process so its dump
holds its one program and nothing else.

  hlo_rules_dot_k200_n72/      x f32[1024,200] @ w f32[200,72]: K and N off the MXU grid
  hlo_rules_dot_aligned_1024/  x f32[1024,1024] @ w f32[1024,1024]: the control, nothing padded
  hlo_rules_attention_naive/   softmax(q k^T / sqrt(d)) v over q, k, v f32[4,8,2048,128]: the score matrix
                               f32[4,8,2048,2048] is a dot's output, read by the softmax, read by a dot
  hlo_rules_mlp_same_flops/    gelu(x @ w1) @ w2, x f32[8192,1024], w1 [1024,2048]: the attention's FLOPs
  hlo_rules_fsdp_256_tokens/   FSDP over 8 devices, bf16 2-layer MLP train step, 256 tokens per device
  hlo_rules_fsdp_16k_tokens/   the same with 16,384 tokens per device
  hlo_rules_matmul_compute_bound/  x bf16[8192,8192] @ w bf16[8192,8192]: compute-bound on v6e and TPU7x
                               (low-precision flagged); XLA:CPU upcasts the dot to f32, the answers say so
  hlo_rules_matmul_memory_bound/   x bf16[8192,8192] @ w bf16[8192,256]: HBM-bound (low-precision silent)
  hlo_rules_hbm_near_full/     a*b+c and a-b over f32[40000,40000]: ~32 GB at peak, 93 % of a v6e's 32 GiB
                               (hbm-headroom near-full), 31 % of a TPU7x TensorCore's 96 GiB
  hlo_rules_hbm_remat/         a 4-layer MLP train step under jax.checkpoint (everything recomputed), batch
                               2048 x 1024: a few hundred MB at peak, large headroom on v6e with remat

Usage: python sample_profiles/make_hlo_rule_fixtures.py [OUT_PARENT [FIXTURE ...]]   (default: sample_profiles/, all)
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

try:  # imported as xladiag.sample_profiles.<script> (tests, import walks) or run as a script
    from . import _recording as rec
except ImportError:
    import _recording as rec

FIXTURES = {
    "hlo_rules_dot_k200_n72": {"kind": "dot", "m": 1024, "k": 200, "n": 72},
    "hlo_rules_dot_aligned_1024": {"kind": "dot", "m": 1024, "k": 1024, "n": 1024},
    "hlo_rules_attention_naive": {"kind": "attention", "batch": 4, "heads": 8, "seq": 2048, "head_dim": 128},
    "hlo_rules_mlp_same_flops": {"kind": "mlp", "tokens": 8192, "d_model": 1024, "d_ff": 2048},
    "hlo_rules_fsdp_256_tokens": {"kind": "fsdp", "devices": 8, "tokens_per_device": 256, "seq": 256,
                                  "d_model": 256, "d_ff": 1024, "layers": 2},
    "hlo_rules_fsdp_16k_tokens": {"kind": "fsdp", "devices": 8, "tokens_per_device": 16384, "seq": 256,
                                  "d_model": 256, "d_ff": 1024, "layers": 2},
    "hlo_rules_matmul_compute_bound": {"kind": "dot", "m": 8192, "k": 8192, "n": 8192, "dtype": "bfloat16"},
    "hlo_rules_matmul_memory_bound": {"kind": "dot", "m": 8192, "k": 8192, "n": 256, "dtype": "bfloat16"},
    "hlo_rules_hbm_near_full": {"kind": "elementwise", "shape": [40000, 40000]},
    "hlo_rules_hbm_remat": {"kind": "remat_mlp", "batch": 2048, "d_model": 1024, "d_ff": 4096, "layers": 4},
}
# XLA:CPU's YNNPACK rewriter would swallow dot -> softmax -> dot into one library fusion, which no TPU or
# GPU compiler does; an empty fusion-type list turns it off (xla.proto: xla_cpu_experimental_ynn_fusion_type,
# "fusion types enabled for YNNPACK in the library rewriter pass"), so dots are top-level ops as on TPU.
NO_LIBRARY_FUSION = "--xla_cpu_experimental_ynn_fusion_type="
MXU = {"v5e/v5p/v4": 128, "v6e/tpu7x": 256}
# C / W_ici from the TPU guides (../shared/reference/roofline.md, levers.md): FSDP hides its all-gather
# only when tokens per device exceed it.
FSDP_CRITICAL_TOKENS = {"v5p": 2550, "v6e (2 links)": 5100, "v6e (4 links)": 2500, "tpu7x": 11500}


def padded_fraction(k: int, n: int, tile: int) -> float:
    """Share of the MXU work wasted when K and N are padded up to the tile (M streams through)."""
    return 1 - (k * n) / (math.ceil(k / tile) * tile * math.ceil(n / tile) * tile)


def build(spec: dict):
    """The jitted function and its abstract arguments for one fixture (jax imported by the caller)."""
    import jax
    import jax.numpy as jnp

    f32 = jnp.float32
    if spec["kind"] == "dot":
        def projection(x, w):
            return x @ w
        dtype = jnp.dtype(spec.get("dtype", "float32"))
        return jax.jit(projection), (jax.ShapeDtypeStruct((spec["m"], spec["k"]), dtype),
                                     jax.ShapeDtypeStruct((spec["k"], spec["n"]), dtype))
    if spec["kind"] == "elementwise":
        def update(a, b, c):
            return a * b + c, a - b
        arr = jax.ShapeDtypeStruct(tuple(spec["shape"]), f32)
        return jax.jit(update), (arr, arr, arr)
    if spec["kind"] == "remat_mlp":
        return _remat_mlp(jax, jnp, spec)
    if spec["kind"] == "attention":
        def naive_attention(q, k, v):
            scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(spec["head_dim"])
            return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
        qkv = jax.ShapeDtypeStruct((spec["batch"], spec["heads"], spec["seq"], spec["head_dim"]), f32)
        return jax.jit(naive_attention), (qkv, qkv, qkv)
    if spec["kind"] == "mlp":
        def mlp(x, w1, w2):
            return jax.nn.gelu(x @ w1) @ w2
        t, d, ff = spec["tokens"], spec["d_model"], spec["d_ff"]
        return jax.jit(mlp), (jax.ShapeDtypeStruct((t, d), f32), jax.ShapeDtypeStruct((d, ff), f32),
                              jax.ShapeDtypeStruct((ff, d), f32))
    return _fsdp(jax, jnp, spec)


def _remat_mlp(jax, jnp, spec):
    """SGD step of a residual GELU MLP stack, each layer under jax.checkpoint with no policy: the backward
    pass recomputes every layer's activations (``rematted_computation`` in the HLO op names)."""
    d, ff = spec["d_model"], spec["d_ff"]

    @jax.checkpoint
    def layer(x, p):
        return x + jax.nn.gelu(x @ p["w_in"]) @ p["w_out"]

    def loss_fn(params, x):
        for p in params:
            x = layer(x, p)
        return jnp.mean(jnp.square(x))

    def train_step(params, x):
        loss, grads = jax.value_and_grad(loss_fn)(params, x)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss

    params = [{"w_in": jax.ShapeDtypeStruct((d, ff), jnp.float32), "w_out": jax.ShapeDtypeStruct((ff, d), jnp.float32)}
              for _ in range(spec["layers"])]
    return jax.jit(train_step), (params, jax.ShapeDtypeStruct((spec["batch"], d), jnp.float32))


def _fsdp(jax, jnp, spec):
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[: spec["devices"]]), ("fsdp",))
    d, ff, seq = spec["d_model"], spec["d_ff"], spec["seq"]
    batch = spec["tokens_per_device"] * spec["devices"] // seq
    w_specs = [{"w_in": P("fsdp", None), "w_out": P(None, "fsdp")} for _ in range(spec["layers"])]
    w_shapes = {"w_in": (d, ff), "w_out": (ff, d)}
    sharded = lambda s: NamedSharding(mesh, s)  # noqa: E731
    params = [{k: jax.ShapeDtypeStruct(w_shapes[k], jnp.bfloat16, sharding=sharded(s)) for k, s in layer.items()}
              for layer in w_specs]
    act = jax.ShapeDtypeStruct((batch, seq, d), jnp.bfloat16, sharding=sharded(P("fsdp", None, None)))

    def loss_fn(params, x, y):
        for p in params:
            x = x + jax.nn.gelu(x @ p["w_in"]) @ p["w_out"]
        return jnp.mean(jnp.square((x - y).astype(jnp.float32)))

    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss

    p_shardings = jax.tree_util.tree_map(sharded, w_specs, is_leaf=lambda s: isinstance(s, P))
    step = jax.jit(train_step, out_shardings=(p_shardings, sharded(P())))
    return step, (params, act, act)


_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
_INSTR = re.compile(r"^\s+(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.+?)\s+([a-z][\w\-]*)\((.*)$")
_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1, "f64": 8}
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-gather-start", "all-reduce-start", "all-to-all")


def _arrays(shape_text: str) -> list[tuple[str, list[int]]]:
    return [(dtype, [int(x) for x in dims.split(",") if x]) for dtype, dims in _ARRAY.findall(shape_text)]


def hlo_facts(text: str) -> dict:
    """Dots (shape, contracting size, FLOPs, forward or not), collectives (kind, bytes) and the number of dots
    under jax.checkpoint recomputation of the module."""
    shapes, dots, collectives, rematted = {}, [], [], 0
    for line in text.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        name, shape_text, opcode, rest = m.groups()
        arrays = _arrays(shape_text)
        shapes[name] = arrays
        op_name = re.search(r'op_name="([^"]*)"', rest)
        if opcode == "dot":
            (dtype, dims), = arrays
            lhs = shapes[re.findall(r"%([\w.\-]+)", rest)[0]][0][1]
            contracting_text = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest).group(1)
            contracting = [int(x) for x in contracting_text.split(",") if x]
            k = math.prod(lhs[i] for i in contracting)
            dots.append({"name": name, "dtype": dtype, "result": dims, "contracting": k,
                         "flops": 2 * math.prod(dims) * k,
                         "backward": bool(op_name and "transpose(" in op_name.group(1))})
            rematted += bool(op_name and "rematted_computation" in op_name.group(1))
        elif opcode in COLLECTIVES:
            collectives.append({"name": name, "opcode": opcode,
                                "shape": shape_text.split("{")[0] if len(arrays) == 1 else shape_text,
                                "result_bytes": sum(math.prod(d) * _BYTES.get(t, 4) for t, d in arrays)})
    return {"dots": dots, "collectives": collectives, "rematted_dots": rematted}


def answers_for(name: str, spec: dict, facts: dict) -> dict:
    dot_flops = sum(d["flops"] for d in facts["dots"])
    out = {"dot_flops_per_device_from_hlo": dot_flops, "dots": facts["dots"], "collectives": facts["collectives"]}
    if spec["kind"] == "dot":
        m, k, n = spec["m"], spec["k"], spec["n"]
        out.update({"flops": 2 * m * k * n,
                    "padded_flops_fraction": {chips: round(padded_fraction(k, n, t), 4) for chips, t in MXU.items()},
                    "expect": "mxu-padding flagged" if k % 256 or n % 256 else "mxu-padding not flagged (control)"})
        if "dtype" in spec:
            out.update(_precision_answers(facts, m, k, n))
    elif spec["kind"] in ("elementwise", "remat_mlp"):
        out.update({"expect": "hbm-headroom: see memory_usage_total_bytes against the chip's HBM capacity",
                    "remat_dots": facts["rematted_dots"]})
    elif spec["kind"] == "attention":
        b, h, s, dh = spec["batch"], spec["heads"], spec["seq"], spec["head_dim"]
        out.update({"score_matrix": [b, h, s, s], "score_matrix_bytes_f32": b * h * s * s * 4,
                    "flops": 2 * 2 * b * h * s * s * dh,
                    "expect": "materialized-attention flagged (dot -> softmax -> dot over the score matrix)"})
    elif spec["kind"] == "mlp":
        t, d, ff = spec["tokens"], spec["d_model"], spec["d_ff"]
        out.update({"flops": 2 * 2 * t * d * ff, "largest_intermediate_bytes_f32": t * ff * 4,
                    "expect": "materialized-attention not flagged (same FLOPs, no score matrix)"})
    else:
        tokens = spec["tokens_per_device"]
        gathered = sum(c["result_bytes"] for c in facts["collectives"] if c["opcode"].startswith("all-gather"))
        reduced = sum(c["result_bytes"] for c in facts["collectives"] if c["opcode"].startswith("all-reduce"))
        forward = sum(d["flops"] for d in facts["dots"] if not d["backward"])
        out.update({
            "tokens_per_device": tokens,
            "global_batch": [tokens * spec["devices"] // spec["seq"], spec["seq"]],
            "fsdp_critical_tokens_per_device": FSDP_CRITICAL_TOKENS,
            "all_gather_result_bytes_per_device": gathered,
            "all_reduce_result_bytes_per_device": reduced,
            "forward_dot_flops_per_device": forward,
            # The MaxText arithmetic on this HLO: forward FLOPs per all-gathered byte. The CPU compiler
            # gathers the weights in f32 (4 bytes, not bf16's 2), so this is tokens per device / 2.
            "forward_flops_per_all_gather_byte": round(forward / gathered, 1),
            "expect": ("sharding-intensity flagged on v6e and tpu7x: forward FLOPs per gathered byte "
                       f"{forward / gathered:.0f} is far below C/W" if tokens < 2500 else
                       f"sharding-intensity not flagged on v6e: {forward / gathered:.0f} FLOPs per gathered byte "
                       "> 5100; "
                       "on tpu7x (11.5k) the f32 gathers of this CPU-compiled HLO make it flagged, although "
                       "16,384 tokens per device would clear 11.5k with bf16 gathers"),
        })
    return out


# Roofline numbers the low-precision answers are checked with (../shared/reference/hardware.md, per device:
# TPU7x is two devices per chip, so half the chip's 2.307e15 FLOP/s and 7.38e12 B/s).
RIDGE = {"v6e": {"bf16_flops_per_s": 9.18e14, "hbm_bytes_per_s": 1.638e12, "low_precision_flops_per_s": 1.836e15},
         "tpu7x": {"bf16_flops_per_s": 2.307e15 / 2, "hbm_bytes_per_s": 7.38e12 / 2,
                   "low_precision_flops_per_s": 4.614e15 / 2}}


def _precision_answers(facts: dict, m: int, k: int, n: int) -> dict:
    """The dot as the compiled HLO holds it (XLA:CPU upcasts bf16 dots to f32) and its roofline per chip."""
    (dot,) = facts["dots"]
    elem = _BYTES[dot["dtype"]]
    hbm_bytes = (m * k + k * n + m * n) * elem
    per_chip = {}
    for chip, r in RIDGE.items():
        compute_s, memory_s = dot["flops"] / r["bf16_flops_per_s"], hbm_bytes / r["hbm_bytes_per_s"]
        ratio = r["low_precision_flops_per_s"] / r["bf16_flops_per_s"]
        per_chip[chip] = {"compute_s": compute_s, "memory_s": memory_s, "compute_bound": compute_s > memory_s,
                          "peak_ratio": ratio,
                          "low_precision_savings_s": compute_s * (1 - 1 / ratio) if compute_s > memory_s else 0.0}
    return {"hlo_dot_dtype": dot["dtype"], "dot_hbm_bytes": hbm_bytes, "roofline": per_chip,
            "expect_low_precision": {c: v["compute_bound"] for c, v in per_chip.items()}}


def compile_one(name: str, out: Path) -> None:
    """Child process: compile one fixture with its own dump folder, write its known answers."""
    spec = FIXTURES[name]
    out = rec.fresh_out(out)
    rec.set_xla_flags(spec.get("devices", 1), out / "hlo", NO_LIBRARY_FUSION)
    t0 = time.perf_counter()
    fn, args = build(spec)
    compiled = fn.lower(*args).compile()
    modules = rec.keep_text_dump(out / "hlo")
    if len(modules) != 1:
        raise SystemExit(f"{name}: expected one module in the dump, got {modules}")
    facts = hlo_facts((out / "hlo" / modules[0]["file"]).read_text())
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    memory = compiled.memory_analysis()
    rec.write_answers(out, {
        "command": "python sample_profiles/make_hlo_rule_fixtures.py",
        "xla_flags": os.environ["XLA_FLAGS"].replace(str(out), "OUT"),
        "fixture": name, "spec": spec, "dump_modules": modules,
        "xla_cost_analysis_flops_per_device": float(cost.get("flops", 0.0)),
        # jax's view of the same buffer assignment (argument + output + temp - alias = the report's total)
        "memory_analysis": {f: int(getattr(memory, f)) for f in (
            "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes")},
        **answers_for(name, spec, facts),
    }, t0)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        compile_one(argv[1], Path(argv[2]))
        return 0
    parent = Path(argv[0]) if argv else Path(__file__).resolve().parent
    for name in [n for n in FIXTURES if n in argv[1:]] or FIXTURES:  # names after OUT_PARENT: only those
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        subprocess.run([sys.executable, __file__, "--one", name, str(parent / name)], check=True, env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
