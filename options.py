"""What the user asked for, once: every option of ``diagnose`` and ``diagnose compare`` in one frozen object.

The command builds an :class:`Options` from its arguments, the Python API from its keywords; it is handed
down whole (api -> analyzer, api -> compare) so that an option has one name in every layer: ``steps`` is
``--steps`` is ``steps=``. The groups follow what reads them: the capture reader, the chip model, the rule
selection, the CI gates, the output.

A leaf: it imports nothing of the package, so every layer may take an ``Options``. Values are kept as given
(``select`` may be a ready ``rules.selection.Selection``, ``config`` a ``config.ProjectConfig``): the layer
that reads an option checks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Capture:
    """Which files are read and which of their steps measured (``--run``, ``--steps``, ``--host``...)."""

    path: Path | str | None = None  # a log dir, run folder or .xplane.pb (a URL stays text)
    run: str | None = None
    hlo_dir: Path | str | None = None
    program: str | None = None  # the step program (with a trace) or the dump module (without)
    steps: str | None = None  # 'A:B'
    host: str | None = None
    workers: int | None = None
    scheduler: str | None = None  # a Dask scheduler address


@dataclass(frozen=True)
class Hardware:
    """The chip the roofline prices with: ``--chip``, ``--chip-file``, ``--topology``."""

    chip: str | None = None
    chip_file: Path | str | None = None
    topology: str | None = None  # 'AxBxC'


@dataclass(frozen=True)
class RuleChoice:
    """``--select``/``--ignore``/``--baseline`` and the ``[tool.xladiag]`` table they fall back on."""

    select: Any = None  # 'a,b', a list of ids, or a ready Selection
    ignore: Any = None
    baseline: Any = None  # a file, or an iterable of finding keys
    config: Any = None  # config.ProjectConfig


@dataclass(frozen=True)
class Gates:
    """Thresholds that exit 3: shares as fractions (0.10 is 10 %)."""

    fail_on: str | None = None  # 'high' | 'medium' | 'low'
    max_exposed_collective: float | None = None
    max_exposed_host_transfer: float | None = None
    min_mfu: float | None = None
    fail_on_regression: float | None = None  # diagnose compare

    def of_report(self) -> dict:
        """The gates a single report is held to (``Report.with_gates`` keywords)."""
        return {"fail_on": self.fail_on, "max_exposed_collective": self.max_exposed_collective,
                "max_exposed_host_transfer": self.max_exposed_host_transfer, "min_mfu": self.min_mfu}


@dataclass(frozen=True)
class Output:
    """Where the report goes and what the command says on the way."""

    format: str = "html"
    output: str | None = None  # a file, '-' for stdout, None for the default place
    quiet: bool = False
    step_summary: bool = False
    write_baseline: str | None = None
    trace_out: str | None = None  # also write the representative step as Chrome Trace Event JSON
    record: str | None = None  # also append the run to this run store (history/store.py)
    debug: bool = False


@dataclass(frozen=True)
class Options:
    capture: Capture = field(default_factory=Capture)
    hardware: Hardware = field(default_factory=Hardware)
    rules: RuleChoice = field(default_factory=RuleChoice)
    gates: Gates = field(default_factory=Gates)
    output: Output = field(default_factory=Output)

    @classmethod
    def of(cls, **flat) -> Options:
        """From the options by their flat names (``chip=``, ``steps=``, ``format=``...): the keywords and the
        command's arguments are named alike."""
        return cls().replace(**flat)

    def replace(self, **flat) -> Options:
        """This with the options named (flat names) changed; a name that is no option is a TypeError."""
        unknown = sorted(set(flat) - set(NAMES))
        if unknown:
            raise TypeError(f"no option named {unknown[0]!r}")
        groups = {}
        for group, names in _GROUP_FIELDS.items():
            given = {name: flat[name] for name in names if name in flat}
            if given:
                groups[group] = replace(getattr(self, group), **given)
        return replace(self, **groups)

    def get(self, name: str):
        """One option by its flat name (``options.get("steps")`` is ``options.capture.steps``)."""
        group = next((g for g, names in _GROUP_FIELDS.items() if name in names), None)
        if group is None:
            raise TypeError(f"no option named {name!r}")
        return getattr(getattr(self, group), name)


_GROUP_FIELDS = {group: tuple(f.name for f in fields(kind)) for group, kind in (
    ("capture", Capture), ("hardware", Hardware), ("rules", RuleChoice), ("gates", Gates), ("output", Output))}
# Every option's flat name, in group order; no two groups share one.
NAMES = tuple(name for names in _GROUP_FIELDS.values() for name in names)
assert len(set(NAMES)) == len(NAMES)


def from_keywords(caller: str, keywords: dict, allowed, base: Options | None = None) -> Options:
    """``base`` (default: no option given) with a public function's keywords, refused as Python refuses an
    unknown keyword (``diagnose() got an unexpected keyword argument 'x'``): its keywords are ``allowed``."""
    for name in keywords:
        if name not in allowed:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")
    return (base or Options()).replace(**keywords)
