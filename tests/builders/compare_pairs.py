"""Pairs of captures (base, new) that differ by one known change, for ``diagnose compare``.

Each function returns ``(base_builder, new_builder, expected)``; ``expected`` holds the injected change in
seconds per step (per device), computed from the op durations the builders lay down, never from xladiag.
Steady steps may carry multiplicative jitter (``jitter``: the relative standard deviation, drawn from a
seeded generator), so noise is part of the pair when asked for.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .scenarios import (
    PS_PER_S,
    all_gather_pair,
    build_train_steps,
    loop_fusion,
    matmul_fusion,
    remat_template,
)

STEPS = 8


def _scales(jitter: float, seed: int, steps: int) -> list[float] | None:
    if not jitter:
        return None
    return list(1.0 + np.random.default_rng(seed).normal(0.0, jitter, steps))


def _build(template, *, jitter: float = 0.0, seed: int = 0, steps: int = STEPS):
    b, _ = build_train_steps(template, steps=steps, step_scales=_scales(jitter, seed, steps))
    return b


def _s(op) -> float:
    return op.duration_ps / PS_PER_S


def base_template():
    """A small step: two matmul fusions around a hidden all-gather, a loop fusion, a third matmul."""
    ag_s, ag_d = all_gather_pair("all-gather-start", "all-gather-done", [512, 4096], 4, done_ps=2_500,
                                 operand="fusion.1")
    return [matmul_fusion("fusion.1", 2048, 4096, 4096),
            ag_s,
            matmul_fusion("fusion.2", 2048, 4096, 14336),
            ag_d,
            loop_fusion("add_fusion", [2048, 4096]),
            matmul_fusion("fusion.3", 2048, 14336, 4096, lhs="add_fusion")]


def step_s(template) -> float:
    return sum(_s(op) for op in template)


def one_op_slower(factor: float = 2.0, *, jitter: float = 0.0, seeds=(1, 2)):
    """``fusion.2`` takes ``factor`` times as long in NEW; nothing else changes."""
    base = base_template()
    new = [replace(op, duration_ps=round(op.duration_ps * factor)) if op.name == "fusion.2" else op for op in base]
    op = next(o for o in base if o.name == "fusion.2")
    delta = _s(op) * (factor - 1.0)
    return (_build(base, jitter=jitter, seed=seeds[0]), _build(new, jitter=jitter, seed=seeds[1]),
            {"op": "fusion.2", "op_base_s": _s(op), "op_delta_s": delta, "base_step_s": step_s(base),
             "new_step_s": step_s(new), "step_delta_s": delta})


def only_noise(jitter: float = 0.02, *, seeds=(11, 12), steps: int = STEPS):
    """The same program twice; every step scaled by 1 + N(0, jitter), different draws on each side."""
    base = base_template()
    return (_build(base, jitter=jitter, seed=seeds[0], steps=steps),
            _build(base, jitter=jitter, seed=seeds[1], steps=steps),
            {"base_scales": _scales(jitter, seeds[0], steps), "new_scales": _scales(jitter, seeds[1], steps),
             "template_step_s": step_s(base)})


def collective_exposed(wait_us: float = 300.0):
    """NEW schedules the all-gather-done right after its start (before fusion.2), waiting ``wait_us``:
    the all-gather that fusion.2 hid in BASE is exposed."""
    base = base_template()
    done = next(o for o in base if o.name == "all-gather-done")
    exposed = replace(done, duration_ps=round(wait_us * 1e6))
    order = ["fusion.1", "all-gather-start", "all-gather-done", "fusion.2", "add_fusion", "fusion.3"]
    by_name = {o.name: o for o in base} | {"all-gather-done": exposed}
    new = [by_name[n] for n in order]
    return (_build(base), _build(new),
            {"op": "all-gather-done", "op_delta_s": _s(exposed) - _s(done), "step_delta_s": _s(exposed) - _s(done),
             "exposed_new_s": _s(exposed), "finding_key": "exposed-collective:all-gather:"})


def remat_removed(x_pct: float = 40.0):
    """BASE recomputes three ops (``*.remat``, ``x_pct`` % of its step); NEW drops them: the rest is identical.

    A remat clone is the same instruction as its original (XLA's HloRematerialization: ``Clone("remat")``), so
    it cannot run faster than the chip's peak allows: below ~35 % the two matmul clones would (the analyzer then
    drops their FLOPs as impossible and their time class is "other")."""
    template, remats, _, remat_ps = remat_template(x_pct)
    names = {op.name for op in remats}
    return (_build(template), _build([op for op in template if op.name not in names]),
            {"removed_ops": sorted(names), "remat_s": remat_ps / PS_PER_S, "step_delta_s": -remat_ps / PS_PER_S,
             "finding_key": "remat-overhead::"})


def renamed_ops():
    """NEW is the same program recompiled: every fusion renumbered (``fusion.1`` -> ``fusion.101``), op for op
    the same time, framework ops and source lines unchanged."""
    base = base_template()

    def renamed(op):
        if not op.name.startswith("fusion."):
            return op
        new_name = "fusion.1" + op.name.split(".", 1)[1].rjust(2, "0")
        return replace(op, name=new_name, text=op.text.replace(f"%{op.name} =", f"%{new_name} ="))

    return _build(base), _build([renamed(o) for o in base]), {"renamed": {o.name: renamed(o).name for o in base
                                                                         if o.name.startswith("fusion.")}}
