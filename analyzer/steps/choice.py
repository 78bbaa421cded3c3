"""What the user says instead of what is inferred: the step program (``--program``) and the steps (``--steps A:B``).

Inferred, the steps are the user's annotations, a ``Steps`` line, or the executions of the program with the
most device time, the first one dropped as warm-up (``steps.find_steps``). Given:

- ``--program NAME`` (``jit_train_step``, ``jit_train_step(103)`` or ``103``): that program's executions are the
  steps, whatever else the capture has; a name several programs share is a usage error listing them with their
  ids and shares of device time (pick one by ``NAME(ID)`` or ``ID``).
- ``--steps A:B``: only the steps numbered A to B-1 are measured (Python's slice: ``A:`` and ``:B`` too, ``A``
  alone is one step), warm-up or not. Step numbers are the annotations' ``step_num``, else the executions' order
  from 0 (the first execution is step 0).

A value that names nothing in the capture is a one-line :class:`UsageError` listing what it could name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from ...errors import UsageError
from ..capture.build import Capture
from .windows import Steps, find_steps, program_steps, program_times

_RANGE = re.compile(r"^\s*(-?\d+)?\s*(?:(:)\s*(-?\d+)?)?\s*$")  # an end only after a colon
MAX_LISTED = 12  # programs named in an error
MIN_PROGRAM_SHARE = 0.5  # below it, the report lists the programs the step program leaves out


@dataclass(frozen=True)
class StepChoice:
    program: str | None = None
    first: int | None = None  # step numbers first <= n < stop; None: open
    stop: int | None = None
    range_text: str | None = None  # as the user gave it, for the report

    @property
    def given(self) -> bool:
        return self.program is not None or self.range_text is not None


def parse_step_range(text: str | None) -> tuple[int | None, int | None]:
    """``'2:5'`` -> (2, 5); ``'3'`` -> (3, 4); ``':4'``, ``'1:'``. UsageError when malformed or empty."""
    m = _RANGE.match(text or "")
    if not text or not m or (m.group(1) is None and m.group(3) is None):
        raise UsageError(f"--steps {text!r}: expected A:B (step numbers A to B-1), A:, :B or A")
    first = int(m.group(1)) if m.group(1) is not None else None
    stop = int(m.group(3)) if m.group(3) is not None else None
    if m.group(2) is None:
        stop = first + 1
    if first is not None and stop is not None and stop <= first:
        raise UsageError(f"--steps {text}: no step from {first} to {stop - 1}; the end comes after the start")
    return first, stop


def step_choice(program: str | None = None, steps: str | None = None) -> StepChoice:
    first, stop = parse_step_range(steps) if steps is not None else (None, None)
    return StepChoice(program=program, first=first, stop=stop, range_text=steps.strip() if steps else None)


def program_list(programs, limit: int = MAX_LISTED) -> str:
    """``name(id) 15%, ...`` of (name, id, share) rows, at most ``limit`` (and how many more)."""
    rows = list(programs)
    shown = ", ".join(f"{f'{n}({i})' if i else n} {s:.0%}" for n, i, s in rows[:limit])
    return shown + (f" (+{len(rows) - limit} more)" if len(rows) > limit else "")


def _named_program(capture: Capture, wanted: str) -> tuple[str, str]:
    time = program_times(capture)
    labels = [f"{name}({pid})" if pid else name for name, pid in time.index]
    exact = [key for key, label in zip(time.index, labels) if wanted in (label, key[1])]
    by_name = [key for key in time.index if key[0] == wanted]
    if exact or len(by_name) == 1:
        return (exact or by_name)[0]
    if by_name:  # one name, several programs (shapes, recompiles): which one is the user's to say
        total = float(time.sum()) or 1.0
        listed = program_list((n, i, float(time[(n, i)]) / total) for n, i in by_name)
        raise UsageError(f"--program {wanted}: {len(by_name)} programs have this name ({listed} of the device "
                         f"time); pick one by id: --program {wanted}({by_name[0][1]}) or --program {by_name[0][1]}")
    more = f" (+{len(labels) - MAX_LISTED} more)" if len(labels) > MAX_LISTED else ""
    shown = ", ".join(labels[:MAX_LISTED]) + more
    raise UsageError(f"--program {wanted}: no such program in the capture; programs: {shown or 'none'}")


def program_share_note(steps: Steps | None) -> str | None:
    """A warning when the step program holds under half the programs' device time: the others, by share."""
    if steps is None or steps.program_share is None or steps.program_share >= MIN_PROGRAM_SHARE \
            or not steps.other_programs:
        return None
    named = f"{steps.program}({steps.program_id})" if steps.program_id else steps.program
    return (f"the step program {named} holds only {steps.program_share:.0%} of the programs' device time; "
            f"other programs: {program_list(steps.other_programs)}; per-step numbers describe {named} alone "
            f"(pick another with --program NAME(ID))")


def _only(steps: Steps, choice: StepChoice) -> Steps:
    """``steps`` measuring only the step numbers in the range (the others marked like a warm-up: not measured)."""
    numbers = steps.table["step_num"].to_numpy(np.int64)
    keep = np.ones(len(numbers), bool)
    if choice.first is not None:
        keep &= numbers >= choice.first
    if choice.stop is not None:
        keep &= numbers < choice.stop
    if not keep.any():
        raise UsageError(f"--steps {choice.range_text}: no such step; steps in this capture: {_numbers(numbers)} "
                         f"({steps.source})")
    table = steps.table.assign(is_warmup=~keep)
    return replace(steps, table=table, warmup_excluded=False, busy_ps=None, busy_any_ps=None,
                   source=f"{steps.source}; steps {choice.range_text} given")


def choose_steps(capture: Capture, choice: StepChoice | None) -> Steps:
    """``find_steps``, or what ``choice`` says instead."""
    if choice is None or not choice.given:
        return find_steps(capture)
    steps = program_steps(capture, *_named_program(capture, choice.program)) if choice.program else find_steps(capture)
    return _only(steps, choice) if choice.range_text is not None else steps


def _numbers(values) -> str:
    """Step numbers as 'A:B' when contiguous, else listed."""
    have = np.unique(np.asarray(values, np.int64))
    if not len(have):
        return ""
    return f"{have.min()}:{have.max() + 1}" if (np.diff(have) == 1).all() else ", ".join(map(str, have))


def choices(*, program_given: bool, range_text: str | None, host: str | None, steps: Steps | None, hosts,
            hlo_program: str | None = None) -> dict:
    """What the analysis ran on, each ``{"value", "source": "given" | "inferred"}``: the step program, the
    step numbers measured and the hosts read, by their file names as ``--host`` takes them (a dump alone: the
    program only)."""
    def item(value, given: bool) -> dict:
        return {"value": value, "source": "given" if given else "inferred"}

    if steps is None:
        return {"program": item(hlo_program, program_given)}
    program = f"{steps.program}({steps.program_id})" if steps.program_id else (steps.program or None)
    return {"program": item(program, program_given),
            "steps": item(_numbers(steps.after_warmup["step_num"]) or None, range_text is not None),
            "hosts": item(list(hosts), host is not None)}
