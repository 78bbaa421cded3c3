"""Record a real JAX CPU profile of a small sharded train step (8 host devices).

Writes, under --out (default: sample_profiles/cpu_jax_train_step, cleared first):
  plugins/profile/2000_01_01_00_00_00/cpu-host.xplane.pb   the xplane capture
  hlo/*after_optimizations*.txt                            scheduled HLO of every compiled module
  hlo/*train_step*{memory-usage-report,buffer-assignment}* kept only when small
  cost_analysis.json                                       XLA's own cost estimate for the train step

The run folder and host file are renamed to fixed names so tests can reference them.

Usage: python sample_profiles/make_cpu_sample.py [--out DIR] [--steps N]

Only jax is needed. The device count and the dump flags must be in XLA_FLAGS before jax is
imported, which is why the import happens inside main().
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

RUN_DIR_NAME = "2000_01_01_00_00_00"  # fixed so tests need no glob
HOST_FILE_NAME = "cpu-host.xplane.pb"
N_DEVICES = 8
MAX_AUX_REPORT_BYTES = 200_000  # buffer-assignment / memory report kept only below this

# Model shapes: small enough for a 2-core machine, large enough that dots dominate the ops.
BATCH, SEQ, D_MODEL, D_FF, VOCAB, N_LAYERS = 16, 64, 128, 512, 512, 2


def _set_xla_flags(out: Path) -> None:
    wanted = (
        f"--xla_force_host_platform_device_count={N_DEVICES} "
        f"--xla_dump_to={out / 'hlo_full'} --xla_dump_hlo_as_text"
    )
    prior = os.environ.get("XLA_FLAGS", "").strip()
    os.environ["XLA_FLAGS"] = f"{prior} {wanted}".strip()


def _build(jax, jnp, P, NamedSharding, Mesh, shard_map, shard_map_check_kw):
    """Return (train_step, params, batch) over a ('data', 2) x ('model', 4) mesh."""
    devices = jax.devices()
    if len(devices) < N_DEVICES:
        raise SystemExit(f"need {N_DEVICES} host devices, got {len(devices)}: XLA_FLAGS was set too late")
    import numpy as np

    mesh = Mesh(np.array(devices[:N_DEVICES]).reshape(2, 4), ("data", "model"))

    def sharded(spec):
        return NamedSharding(mesh, spec)

    # FSDP over 'data' x tensor-parallel over 'model': the weights are stored sharded on both
    # axes, so the forward pass must all-gather them over 'data' and the backward pass
    # reduce-scatters their gradients back; the row-parallel matmul needs a psum over 'model'.
    param_specs = {
        "embed": P(None, "model"),
        "blocks": [
            {
                "ln_scale": P(None),
                "w_in": P("data", "model"),
                "w_out": P("model", "data"),
            }
            for _ in range(N_LAYERS)
        ],
        "unembed": P("model", None),
    }

    # numpy init: jax.random would compile (and dump) a dozen small modules nobody needs.
    rng = np.random.default_rng(0)

    def normal(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    params = {
        "embed": normal(VOCAB, D_MODEL),
        "blocks": [
            {"ln_scale": np.ones((D_MODEL,), np.float32), "w_in": normal(D_MODEL, D_FF),
             "w_out": normal(D_FF, D_MODEL)}
            for _ in range(N_LAYERS)
        ],
        "unembed": normal(D_MODEL, VOCAB),
    }
    params = jax.tree_util.tree_map(
        lambda x, s: jax.device_put(x, sharded(s)), params, param_specs,
        is_leaf=lambda x: isinstance(x, P),
    )
    tokens = jax.device_put(rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int32), sharded(P("data", None)))

    def layer_norm(x, scale):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-6) * scale

    def mlp_shard(x, ln_scale, w_in, w_out):
        # Per-device view: x [B/2, S, D]; w_in [D/2, F/4]; w_out [F/4, D/2].
        w_in = jax.lax.all_gather(w_in, "data", axis=0, tiled=True)  # [D, F/4]
        w_out = jax.lax.all_gather(w_out, "data", axis=1, tiled=True)  # [F/4, D]
        h = layer_norm(x, ln_scale)
        h = jnp.einsum("bsd,df->bsf", h, w_in)
        h = jax.nn.gelu(h)
        y = jnp.einsum("bsf,fd->bsd", h, w_out)  # partial sum over the 'model' shards of F
        y = jax.lax.psum_scatter(y, "model", scatter_dimension=2, tiled=True)  # [B/2, S, D/4]
        y = jax.lax.all_gather(y, "model", axis=2, tiled=True)  # [B/2, S, D]
        return x + y

    mlp = shard_map(
        mlp_shard,
        mesh=mesh,
        in_specs=(P("data", None, None), P(None), P("data", "model"), P("model", "data")),
        out_specs=P("data", None, None),
        # The final all_gather makes y identical across 'model', which the replication checker
        # cannot prove; the out_spec is right, so skip the check.
        **{shard_map_check_kw: False},
    )
    # remat: the backward pass recomputes each block, so op_names carry `rematted_computation`.
    block = jax.checkpoint(mlp)

    def loss_fn(p, tok):
        x = jnp.take(p["embed"], tok, axis=0)  # [B, S, D]
        x = jax.lax.with_sharding_constraint(x, sharded(P("data", None, None)))
        for blk in p["blocks"]:
            x = block(x, blk["ln_scale"], blk["w_in"], blk["w_out"])
        logits = jnp.einsum("bsd,dv->bsv", x[:, :-1], p["unembed"])
        logp = jax.nn.log_softmax(logits, axis=-1)
        target = tok[:, 1:]
        nll = -jnp.take_along_axis(logp, target[..., None], axis=-1)
        return jnp.mean(nll)

    def train_step(p, tok):
        loss, grads = jax.value_and_grad(loss_fn)(p, tok)
        new_p = jax.tree_util.tree_map(lambda w, g: w - 0.1 * g, p, grads)
        return new_p, loss

    out_shardings = (jax.tree_util.tree_map(sharded, param_specs, is_leaf=lambda x: isinstance(x, P)),
                     sharded(P()))
    step = jax.jit(train_step, out_shardings=out_shardings, donate_argnums=(0,))
    return step, params, tokens


def _cost_analysis(compiled) -> dict:
    cost = compiled.cost_analysis()
    # Older jax returns a list with one dict per computation; newer returns the dict itself.
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return {str(k): float(v) for k, v in (cost or {}).items()}


_INSTR_RE = re.compile(r"^\s+(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(\w+)\[([\d,]*)\]")
_COMP_RE = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s")
_CALLS_RE = re.compile(r"^\s+(?:ROOT\s+)?%([\w.\-]+)\s*=.*\bcalls=%([\w.\-]+)")
_DOT_RE = re.compile(
    r"^\s+(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(\w+)\[([\d,]*)\]\S*\s+dot\(([^)]*)\).*?lhs_contracting_dims=\{([\d,]*)\}"
)


def _dims(text: str) -> list[int]:
    return [int(d) for d in text.split(",") if d]


def _dot_flops_from_hlo(text: str) -> list[dict]:
    """Per dot: 2 * prod(result dims) * prod(lhs contracting dims), plus the top-level op that runs it.

    On CPU most dots sit inside `ynn_fusion.N` (a kCustom fusion calling `fused_computation.N`);
    the profile names the fusion, not the dot, so `hlo_op` is the name to join on.
    """
    lines = text.splitlines()
    shapes: dict[str, list[int]] = {}
    caller_of: dict[str, str] = {}  # called computation -> instruction that calls it
    for line in lines:
        m = _INSTR_RE.match(line)
        if m:
            shapes[m.group(1)] = _dims(m.group(3))
        m = _CALLS_RE.match(line)
        if m:
            caller_of[m.group(2)] = m.group(1)
    dots, computation = [], None
    for line in lines:
        m = _COMP_RE.match(line)
        if m:
            computation = m.group(1)
            continue
        m = _DOT_RE.match(line)
        if not m:
            continue
        name, dtype, dims, operands, lhs_contract = m.groups()
        lhs_shape = shapes.get(re.findall(r"%([\w.\-]+)", operands)[0])
        if lhs_shape is None:
            continue
        k = 1
        for i in _dims(lhs_contract):
            k *= lhs_shape[i]
        n = 1
        for d in _dims(dims):
            n *= d
        dots.append({
            "name": name,
            "hlo_op": caller_of.get(computation, name),
            "dtype": dtype,
            "result_shape": _dims(dims),
            "contracting_size": k,
            "flops": 2 * n * k,
        })
    return dots


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=here / "cpu_jax_train_step")
    ap.add_argument("--steps", type=int, default=5, help="profiled steps (after 3 warm-up calls)")
    args = ap.parse_args(argv)
    out: Path = args.out.resolve()
    if out.exists():
        # Refuse to wipe a folder that is not a previous output of this script.
        if any(out.iterdir()) and not (out / "cost_analysis.json").exists() and not (out / "plugins").exists():
            raise SystemExit(f"{out} is not empty and does not look like a previous sample; not clearing it")
        shutil.rmtree(out)
    out.mkdir(parents=True)

    _set_xla_flags(out)
    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    try:
        from jax import shard_map

        check_kw = "check_vma"
    except ImportError:  # older jax: experimental module, and the flag was called check_rep
        from jax.experimental.shard_map import shard_map

        check_kw = "check_rep"

    step, params, tokens = _build(jax, jnp, P, NamedSharding, Mesh, shard_map, check_kw)
    lowered = step.lower(params, tokens)
    compiled = lowered.compile()

    for _ in range(3):  # warm-up: compilation and first-touch stay outside the capture
        params, loss = step(params, tokens)
    jax.block_until_ready((params, loss))

    with jax.profiler.trace(str(out)):
        for i in range(args.steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                params, loss = step(params, tokens)
                jax.block_until_ready((params, loss))
    print(f"final loss {float(loss):.4f}")

    # Fixed run-folder and host-file names.
    pbs = glob.glob(str(out / "plugins" / "profile" / "*" / "*.xplane.pb"))
    if len(pbs) != 1:
        raise SystemExit(f"expected one xplane.pb, found {pbs}")
    run_dir = out / "plugins" / "profile" / RUN_DIR_NAME
    src_run = Path(pbs[0]).parent
    if src_run != run_dir:
        src_run.rename(run_dir)
    for f in run_dir.iterdir():
        if f.name.endswith(".xplane.pb"):
            f.rename(run_dir / HOST_FILE_NAME)
        else:
            f.unlink()  # trace.json.gz etc.: the xplane is the source of truth

    # Keep only the scheduled HLO (and the train step's small memory reports).
    full, kept = out / "hlo_full", out / "hlo"
    kept.mkdir()
    train_module = None
    for f in sorted(full.iterdir()):
        name = f.name
        if name.endswith("after_optimizations.txt"):  # the scheduled module itself
            # Source paths in the dump are relative to the repository, not this machine.
            text = f.read_text().replace(str(REPO_ROOT) + "/", "")
            (kept / name).write_text(text)
            if "train_step" in name:
                train_module = name
    for f in sorted(full.iterdir()):
        if "train_step" in f.name and f.name.endswith(("-buffer-assignment.txt", "-memory-usage-report.txt")):
            if f.stat().st_size < MAX_AUX_REPORT_BYTES:
                shutil.copy2(f, kept / f.name)
    shutil.rmtree(full)

    hlo_text = (kept / train_module).read_text() if train_module else ""
    module_name = re.search(r"^HloModule\s+([\w.\-]+)", hlo_text, re.M)
    dots = _dot_flops_from_hlo(hlo_text)
    opcodes = re.findall(r"^\s+(?:ROOT\s+)?%[\w.\-]+\s*=.*?\s([a-z][a-z\-]*)\(", hlo_text, re.M)
    collectives = {op: opcodes.count(op) for op in ("all-gather", "reduce-scatter", "all-reduce")}
    # The sample exists to exercise these; fail loudly if a JAX upgrade compiles them away.
    missing = [op for op, n in collectives.items() if n == 0]
    if missing or "rematted_computation" not in hlo_text:
        raise SystemExit(f"train step lacks {missing or 'rematted_computation'}; adjust the model")
    cost = _cost_analysis(compiled)
    record = {
        "module_name": module_name.group(1) if module_name else None,
        "hlo_file": f"hlo/{train_module}" if train_module else None,
        "jax_version": jax.__version__,
        "jaxlib_version": getattr(__import__("jaxlib"), "__version__", None),
        "backend": jax.default_backend(),
        "n_devices": N_DEVICES,
        "mesh": {"data": 2, "model": 4},
        "shapes": {"batch": BATCH, "seq": SEQ, "d_model": D_MODEL, "d_ff": D_FF, "vocab": VOCAB,
                   "n_layers": N_LAYERS},
        "profiled_steps": args.steps,
        # cost_analysis is per device (the SPMD-partitioned program), not for the whole mesh.
        "flops_per_device": cost.get("flops"),
        "bytes_accessed_per_device": cost.get("bytes accessed"),
        "transcendentals_per_device": cost.get("transcendentals"),
        "cost_analysis": cost,
        "collective_counts": collectives,
        "dots_per_device": dots,
        "dot_flops_per_device_total": sum(d["flops"] for d in dots),
    }
    (out / "cost_analysis.json").write_text(json.dumps(record, indent=2) + "\n")

    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({size / 1e6:.2f} MB) in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
