"""Where each transfer sits in a scheduled module, and the step the schedule implies without a trace.

A scheduled module runs each computation's instructions in the printed order, one at a time on the core;
an async transfer (``*-start`` ... ``*-done``) runs on its link from its start until its done waits for it.

* **Window** of a transfer: the positions from its producer (the last operand of its start, or of the op for a
  synchronous collective) to its first consumer (the first user of its done). An op strictly inside the window
  neither feeds the transfer (all its ancestors sit at or before the producer) nor consumes it (all its users
  sit at or after the first consumer): that is the work any schedule may place beside the transfer. Work
  between the start and the done already runs beside it; the rest of the window is what a better schedule
  (a scheduler flag) can add. With none, only a changed program hides the transfer.
* **Synchronous on purpose**: GPU async collectives whose ``backend_config`` says ``"is_sync":true`` (XLA made
  them synchronous: nothing to overlap, or asked for) run as synchronous collectives.
* **Static timeline** (:func:`static_waits`): one clock per computation for the core and one per link; a start
  issues its transfer when the core reaches it and the link is free, a done waits for the transfer's end, a
  synchronous transfer waits for the link and then runs on the core. A while / conditional / call takes its
  callees' spans. The step is the core's clock at the end: at least the compute path and at least the
  transfer path, with every transfer that nothing can overlap added.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ...parsers.hlo_text import Computation, HloModule, Instruction

_IS_SYNC = re.compile(r'\\?"is_sync\\?"\s*:\s*true')
CONTROL_OPCODES = ("while", "conditional", "call")


def is_sync(instr: Instruction) -> bool:
    """An async collective XLA runs synchronously: ``"is_sync":true`` in its backend_config (GPU; top level or
    in ``collective_backend_config``)."""
    return bool(_IS_SYNC.search(instr.attrs.get("backend_config", "")))


def _control_predecessors(instr: Instruction) -> list[str]:
    raw = instr.attrs.get("control-predecessors", "").strip("{} ")
    return [p.strip().lstrip("%") for p in raw.split(",") if p.strip()]


@dataclass(frozen=True)
class Window:
    """Positions in ``computation`` (its instruction order) of a transfer's producer, start, done (the op itself
    for a synchronous one) and first consumer (the computation's length when nothing there uses it)."""

    computation: str
    producer: int
    start: int
    done: int
    consumer: int
    is_sync: bool


class _Order:
    """One computation's positions and each instruction's first user."""

    def __init__(self, comp: Computation):
        self.comp = comp
        self.pos = {ins.name: i for i, ins in enumerate(comp.instructions)}
        self.first_user: dict[str, int] = {}
        for i, ins in enumerate(comp.instructions):
            for used in (*ins.operand_names, *_control_predecessors(ins)):
                self.first_user.setdefault(used, i)

    def producer(self, instr: Instruction) -> int:
        before = [self.pos[n] for n in (*instr.operand_names, *_control_predecessors(instr)) if n in self.pos]
        return max(before, default=-1)


def transfer_windows(module: HloModule, waits: Mapping[str, str | None]) -> dict[str, Window]:
    """Window of each waiting op (done op -> its start op name; a synchronous transfer -> None), by op name.
    Ops not found in the module are left out."""
    orders: dict[str, _Order] = {}
    out = {}
    for name, start_name in waits.items():
        try:
            done = module.instruction(name)
        except KeyError:
            continue
        comp = module.computations.get(done.computation)
        if comp is None:
            continue
        order = orders.setdefault(comp.name, _Order(comp))
        start = comp.by_name.get(start_name) if start_name else None
        start = start if start is not None else done
        out[name] = Window(comp.name, order.producer(start), order.pos[start.name], order.pos[done.name],
                           order.first_user.get(done.name, len(comp.instructions)), is_sync(start))
    return out


@dataclass(frozen=True)
class Transfer:
    """What the timeline needs of a waiting op: its start's name (None: synchronous), its transfer time per
    step, the link it uses, and whether XLA made it synchronous."""

    start: str | None
    seconds: float
    link: str
    sync: bool = False


@dataclass
class _Clock:
    core: float = 0.0
    links: dict | None = None

    def link(self, name: str) -> float:
        return (self.links or {}).get(name, 0.0)

    def use(self, name: str, until: float) -> None:
        self.links = {**(self.links or {}), name: until}


def static_waits(module: HloModule, computations, time: Mapping[str, float],
                 transfers: Mapping[str, Transfer]) -> tuple[dict[str, float], dict[str, float]]:
    """(wait per waiting op, span per computation), seconds per step, over ``computations`` (the top-level ones
    with ops). ``time``: each other op's own time per step (a start's issue cost; a control op's own time, its
    callees' spans added). A done's wait is what is left of its transfer when the core reaches it; a
    synchronous transfer's is its time plus the wait for its link."""
    wanted = [c for c in computations if c in module.computations]
    waits: dict[str, float] = {}
    spans: dict[str, float] = {}
    starts = {t.start: done for done, t in transfers.items() if t.start}

    def span(name: str, seen: frozenset) -> float:
        if name in spans:
            return spans[name]
        clock, ends, held = _Clock(), {}, {}
        for ins in module.computations[name].instructions:
            if ins.name in transfers:
                t = transfers[ins.name]
                waits[ins.name] = held.pop(t.start) if t.start in held else _wait(clock, t, ends.get(t.start))
                clock.core += 0.0 if t.sync and t.start in ends else waits[ins.name]
            elif ins.name in starts:
                t = transfers[starts[ins.name]]
                clock.core += time.get(ins.name, 0.0)
                begin = max(clock.core, clock.link(t.link))
                ends[ins.name] = begin + t.seconds
                clock.use(t.link, ends[ins.name])
                if t.sync:  # XLA runs it on the core: the core waits here; its done carries the wait
                    held[ins.name] = ends[ins.name] - clock.core
                    clock.core = ends[ins.name]
            else:
                clock.core += time.get(ins.name, 0.0)
                if ins.opcode in CONTROL_OPCODES:
                    clock.core += sum(span(c, seen | {name}) for c in ins.called_computations()
                                      if c in wanted and c not in seen and c != name)
        spans[name] = clock.core
        return clock.core

    for name in wanted:
        span(name, frozenset())
    return waits, spans


def _wait(clock: _Clock, t: Transfer, end: float | None) -> float:
    """The core's wait at a waiting op: until its async transfer ends, or a synchronous transfer's link wait
    plus its time (the link then busy until it ends)."""
    if t.start is not None and end is not None:
        return max(0.0, end - clock.core)
    link_wait = max(0.0, clock.link(t.link) - clock.core)
    clock.use(t.link, clock.core + link_wait + t.seconds)
    return link_wait + t.seconds
