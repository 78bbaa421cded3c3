"""The Python API: diagnose a capture in-process, or profile a block of JAX code and diagnose it.

    import xladiag
    report = xladiag.diagnose("/tmp/logdir")            # or diagnose(hlo_dir=..., chip="v6e")
    report.findings[0].fix, report.ops.head(), report.to_html("report.html")

    with xladiag.profile("/tmp/logdir", steps=5, output="report.html") as session:
        for i in range(5):
            with session.step(i):
                train_step(state, batch).block_until_ready()
    print(session.report.headline)

JAX is imported only inside :func:`profile`, so ``import xladiag`` works without it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from .analyzer.analysis import Analysis, analyze
from .errors import InputError, UsageError, XladiagError
from .options import Options, from_keywords
from .report.model import Report, mfu_words
from .rules.base import Finding
from .rules.claims import recoverable_s_per_step
from .rules.registry import run_selected
from .rules.selection import Selection
from .units import count, format_percent, format_seconds

__all__ = ["Report", "ProfileSession", "build_report", "compare", "diagnose", "history", "profile"]


# The public keywords (README "Python API"): the command's options by the same names.
DIAGNOSE_KEYWORDS = ("chip", "hlo_dir", "run", "chip_file", "topology", "program", "select", "ignore", "baseline",
                     "config", "workers", "scheduler", "steps", "host")
PROFILE_KEYWORDS = tuple(k for k in DIAGNOSE_KEYWORDS if k not in ("run", "steps"))
COMPARE_KEYWORDS = ("fail_on_regression", "chip", "chip_file", "select", "ignore", "baseline", "config", "program",
                    "steps", "host")


def diagnose(path: str | Path | None = None, *, progress: Callable[[str], None] | None = None,
             options: Options | None = None, **keywords) -> Report:
    """Analyse a capture (log dir, run folder or .xplane.pb) and/or an HLO dump; run every rule.

    Keywords (each also a field of ``options``, an :class:`xladiag.options.Options`, which the command builds
    from its arguments; keywords given win over it): ``chip``, ``hlo_dir``, ``run``, ``chip_file``,
    ``topology`` as the options of the same name.
    ``program``: without a capture, which dump module to analyse (name, ``name(id)`` or ``module_NNNN``);
    default: the one with the most FLOPs. With a capture, the program whose executions are the steps.
    ``steps``: 'A:B', the step numbers to measure (A to B-1); ``host``: the one host to read. Each shows in
    the report as given rather than inferred (``analysis.choices``).
    ``select`` / ``ignore``: rule ids (a list or 'a,b') to report only / to leave out (or ``select`` a ready
    :class:`~xladiag.rules.selection.Selection`, which ignore/baseline/config then do not change);
    ``baseline``: a baseline file or an iterable of accepted finding keys (``rule:kind:main_op``);
    left-out findings are in ``report.dropped``. ``config``: a ``config.ProjectConfig`` (``[tool.xladiag]``,
    which the command reads) that these three fall back on.
    ``workers``: processes decoding a multi-host capture's host files (default: the cores this process may
    use); ``scheduler``: the address of a Dask scheduler whose workers read them instead (``xladiag[dask]``).

    The one pipeline (discover, analyze, rules, report) behind the ``diagnose`` command too.
    Raises :class:`xladiag.errors.InputError` (an ``XladiagError``, one line) when the arguments name
    nothing to read or the capture, dump or chip file cannot be used.
    """
    from .config import chosen_rules

    with keyword_names(bool(keywords)):
        given = from_keywords("diagnose", keywords, DIAGNOSE_KEYWORDS, options)
        if path is not None:
            given = given.replace(path=path)
        chosen = chosen_rules(given.rules)  # bad ids fail before the work
        analysis = analyze(given, progress=progress)
        if progress:
            progress("running rules")
        return build_report(analysis, chosen)


# The command's flags in an error, as the API's keywords: '--select' -> 'select='.
_FLAG = re.compile(r"--(select|ignore|baseline|steps|host|program|chip-file|chip|topology|run|hlo-dir|workers"
                   r"|scheduler)\b( (?=\S*[^a-z\s]))?")  # its value joined: a token not a plain word


def _as_keyword(match: re.Match) -> str:
    name = match.group(1).replace("-", "_")
    joined = match.group(2) or match.string[match.end():match.end() + 1] in (":", "=")
    return f"{name}=" if joined else f"{name}=…"


@contextmanager
def keyword_names(apply: bool = True):
    """Errors raised inside name the API's keyword arguments (``select=``), not the command's flags: the
    caller of ``xladiag.diagnose(select=...)`` never typed ``--select``."""
    try:
        yield
    except XladiagError as exc:
        if apply and exc.args and isinstance(exc.args[0], str):
            exc.args = (_FLAG.sub(_as_keyword, exc.args[0]), *exc.args[1:])
        raise


def compare(base: str | Path, new: str | Path, *, progress: Callable[[str], None] | None = None,
            options: Options | None = None, **keywords):
    """Before/after of two captures (log dir, run folder, .xplane.pb) or ``--format json`` reports, in any mix,
    local or URLs (``gs://...``, ``memory://...``: fsspec, as :func:`diagnose` reads them).

    Returns a :class:`xladiag.report.compare_model.Comparison` (``headline``, ``verdict``, ``regressed``,
    ``ops``/``findings`` DataFrames of deltas, ``to_html``/``to_markdown``/``to_json``). ``fail_on_regression``
    is a share (0.05 = 5 %): ``regressed`` is true when the mean step is slower beyond noise and by more.
    ``select``/``ignore``/``baseline``/``config`` as in :func:`diagnose`, applied to both sides; what a JSON side's
    own selection left out is left out of the other side too (``selection`` in the result). ``chip``,
    ``chip_file``, ``program``, ``steps``, ``host``: as in :func:`diagnose`, for each side that is a capture (a JSON
    report is read as written, and a warning says so). ``options``: these as an :class:`xladiag.options.Options`.
    """
    from .compare.sides import check_threshold, compare_sides
    from .config import chosen_rules
    from .parsers.storage import as_path
    from .report.compare_model import Comparison

    with keyword_names(bool(keywords)):
        given = from_keywords("compare", keywords, COMPARE_KEYWORDS, options)
        check_threshold(given.gates.fail_on_regression)
        data = compare_sides({"base": as_path(base), "new": as_path(new)}, given, chosen_rules(given.rules),
                             diagnose=lambda side: diagnose(options=side, progress=progress).to_dict(),
                             read_json=_report_json, progress=progress)
    return Comparison(data)


def _report_json(path: Path) -> dict:
    """One JSON side of a comparison: a report of this schema version that conforms to its schema (one line
    naming the file and the bad field's JSON path, else), so that no field is trusted unchecked."""
    from .parsers.report_json import read_report_json
    from .report.json_out import SCHEMA_VERSION
    from .report.json_schema import load_schema
    from .report.schema_check import check

    data = read_report_json(path, SCHEMA_VERSION)
    check(data, load_schema("report"), str(path), "xladiag JSON report")
    return data


def build_report(analysis: Analysis, selection: Selection | None = None) -> Report:
    """Every registered rule over ``analysis`` (keeping what ``selection`` keeps), ranked, and the headline:
    the :class:`Report` to render."""
    selection = selection or Selection()
    kept, dropped = run_selected(analysis, selection)
    findings = tuple(kept)
    if selection.notes:  # e.g. a baseline without size bands: said with the capture's warnings
        analysis = dataclasses.replace(analysis, warnings=(*analysis.warnings, *selection.notes))
    accepted = sum(d.by == "baseline" for d in dropped)
    return Report(analysis=analysis, findings=findings, headline=_headline(analysis, findings, accepted),
                  dropped=tuple(dropped), selection=selection)


def _devices_text(analysis: Analysis) -> str:
    """'4 devices'; for a dump without a trace the slice named by --chip ('slice of 4 chips'), else what it is."""
    if analysis.num_devices:
        return count(analysis.num_devices, "device")
    chips = getattr(analysis.chip, "slice_chips", None)
    return f"slice of {count(chips, 'chip')}" if chips else "HLO dump only"


def _headline(analysis: Analysis, findings: tuple[Finding, ...], accepted: int = 0) -> str:
    """The one-line verdict; ``accepted``: findings a baseline accepted (counted, so none is silently gone)."""
    step = analysis.step_s
    what = "predicted step" if not analysis.measured else "step"
    head = f"{analysis.chip.name}, {_devices_text(analysis)}: {what} {format_seconds(step)}"
    if analysis.mfu is not None and math.isfinite(analysis.mfu):
        head += f", MFU {mfu_words(analysis.mfu, analysis.mfu_is_lower_bound)}"
        if analysis.unknown_flops_share and analysis.unknown_flops_share >= 0.005:  # MFU leaves these out
            head += f" ({format_percent(analysis.unknown_flops_share)} of the step in ops of unknown FLOPs)"
    fixes = [f for f in findings if f.severity != "info"]  # a note saves nothing here: never "the biggest fix"
    notes = len(findings) - len(fixes)
    if fixes:
        top = fixes[0]
        lever = f" by {top.lever}" if top.lever and top.est_savings_s_per_step > 0 else ""
        if top.est_savings_s_per_step > 0 and top.benefit == "throughput":  # more work per step, not a faster one
            head += (f"; biggest fix (a throughput lever): {top.title} (frees ~"
                     f"{format_seconds(top.est_savings_s_per_step)} per step of today's work{lever})")
        elif top.est_savings_s_per_step > 0:
            head += f"; biggest fix: {top.title} (saves ~{format_seconds(top.est_savings_s_per_step)} per step{lever})"
        else:  # nothing priced (a warning, an unpriced throughput lever): not a "fix that saves 0 s"
            head += f"; top finding: {top.title} (no step time priced)"
        total = recoverable_s_per_step(findings, step)
        share = f", {format_percent(total / step)} of the step" if step and step > 0 else ""
        head += f"; recoverable ~{format_seconds(total)} per step{share}, each op counted once"
        if accepted:
            head += f"; {accepted} more accepted by baseline"
    elif accepted:
        head += f"; no new findings; {accepted} accepted by baseline"
    else:
        head += "; no findings" if not notes else "; no fix that saves step time here"
    if notes:
        head += f" ({count(notes, 'note')} below)"
    return head + "."


def _run_dirs(logdir: Path) -> dict[str, float]:
    root = logdir / "plugins" / "profile"
    if not root.is_dir():
        return {}
    return {p.name: p.stat().st_mtime for p in root.iterdir() if p.is_dir()}


def _written_run(logdir: Path, before: dict[str, float], after: dict[str, float]) -> str:
    """The run folder this trace wrote: new, or an old one whose mtime changed (newest first).

    Never falls back to an untouched old run: diagnosing yesterday's capture as this block's would be
    silently wrong.
    """
    written = [name for name, mtime in after.items() if before.get(name) != mtime]
    if not written:
        raise InputError(
            f"{logdir}: the profiler wrote no new run folder under plugins/profile/ "
            f"({len(after)} older run(s) left untouched); nothing from this block to diagnose"
        )
    return max(written, key=lambda name: (after[name], name))


class ProfileSession:
    """A ``jax.profiler.trace`` over the ``with`` block, diagnosed when the block ends.

    After the block: ``report`` (a :class:`Report`), ``run`` (the run folder the trace wrote),
    ``warnings``. Inside: ``with session.step(i):`` marks one training step for the trace.
    If the block raises, the trace is stopped and nothing is diagnosed.
    """

    def __init__(self, logdir, *, steps: int | str | None = None, output: str | Path | None = None,
                 format: str | None = None, **keywords):
        from .report.render import FORMATS, format_for
        from .writer import check_output_path

        from_keywords("profile", keywords, PROFILE_KEYWORDS)  # an unknown keyword fails before the training
        self.logdir = Path(logdir)
        self.steps = steps  # an int: executions of the step the caller runs, checked; 'A:B': diagnose's steps
        self.keywords = keywords
        self.output, self.format = output, format or (format_for(output) if output is not None else None) or "html"
        if self.format not in FORMATS:
            raise UsageError(f"format={format!r}: one of {', '.join(FORMATS)}")
        if output is not None:
            check_output_path(output)  # not after the training run
        self.report: Report | None = None
        self.run: str | None = None
        self.warnings: list[str] = []
        self._trace = None
        self._runs_before: dict[str, float] = {}

    def __enter__(self) -> ProfileSession:
        try:
            import jax
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("xladiag.profile needs JAX (pip install 'xladiag[jax]')") from exc
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._runs_before = _run_dirs(self.logdir)
        self._trace = jax.profiler.trace(str(self.logdir))
        self._trace.__enter__()
        return self

    def step(self, number: int, name: str = "train"):
        """Context manager marking step ``number`` (a ``jax.profiler.StepTraceAnnotation``)."""
        import jax

        return jax.profiler.StepTraceAnnotation(name, step_num=number)

    def __exit__(self, exc_type, exc, tb) -> bool:
        trace, self._trace = self._trace, None
        suppressed = bool(trace.__exit__(exc_type, exc, tb)) if trace is not None else False
        if exc_type is not None:
            return suppressed
        self.run = _written_run(self.logdir, self._runs_before, _run_dirs(self.logdir))
        step_range = {"steps": self.steps} if isinstance(self.steps, str) else {}
        self.report = diagnose(self.logdir, run=self.run, **self.keywords, **step_range)
        if self.output is not None:
            self.report.render(self.format, self.output)
        steps = self.report.analysis.steps
        if isinstance(self.steps, int) and steps is not None:
            # The first execution is counted as warm-up when there is more than one.
            expected = self.steps - 1 if self.steps > 1 and steps.warmup_excluded else self.steps
            if steps.count != expected:
                self.warnings.append(
                    f"expected {self.steps} step executions, the trace shows {steps.count} measured "
                    f"({steps.source}); per-step numbers average over what was found"
                )
        return False


def profile(logdir, *, steps: int | str | None = None, output: str | Path | None = None, format: str | None = None,
            **keywords) -> ProfileSession:
    """``with xladiag.profile(logdir) as session: ...`` (``with session.step(i):`` around each step) then
    ``session.report``.

    ``steps``: how many step executions the block runs (an int, optional; a mismatch with what the trace
    shows lands in ``session.warnings``), or 'A:B', the step numbers to measure as in :func:`diagnose`.
    ``output``: also write the report there, in ``format`` (default: the file's extension, else html).
    The other keywords are :func:`diagnose`'s (``chip``, ``hlo_dir``, ``select``, ``baseline``, ``topology``...;
    not ``run``: the run is the one this block wrote). ``hlo_dir``: the ``--xla_dump_to`` folder, for FLOPs and
    bytes from the HLO (XLA_FLAGS must be set before JAX starts, so this wrapper cannot set it).

    Entering raises ``ImportError`` without JAX. Leaving the block raises what :func:`diagnose` raises,
    and :class:`xladiag.errors.InputError` when the profiler wrote no new run folder.
    """
    return ProfileSession(logdir, steps=steps, output=output, format=format, **keywords)


def history(paths, *, given_order: bool = False, fail_on_regression: float | None = None,
            progress: Callable[[str], None] | None = None, options: Options | None = None):
    """Step time, MFU, top ops and findings across a series of runs, with noise-aware change points
    (docs: README "History across runs"). ``paths``: JSON reports, captures (diagnosed here with ``options``)
    and run stores (``diagnose --record DB``: every run in them), ordered by run time unless ``given_order``.
    ``fail_on_regression``: a share; ``regressed`` when the last change point is slower by more. Returns a
    :class:`xladiag.report.history_model.History`."""
    from .history.build import history_data
    from .history.series import ordered, point_of
    from .history.store import is_store, load
    from .parsers.report_json import looks_like_json
    from .report.history_model import History

    points = []
    for path in map(Path, paths):
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
        if is_store(path):
            recorded = load(path)
            if not recorded:
                raise InputError(f"{path}: runs: no run recorded in this store")
            points += recorded
        elif looks_like_json(path):
            points.append(point_of(_report_json(path), str(path), "json report"))
        else:
            if progress:
                progress(f"diagnosing {path}")
            report = diagnose(options=(options or Options()).replace(path=path), progress=progress)
            points.append(point_of(report.to_dict(), str(path), "capture"))
    data = history_data(ordered(points, given_order), fail_on_regression=fail_on_regression)
    return History({**data, "inputs": [str(p) for p in paths]})
