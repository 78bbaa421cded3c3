"""Find the files of a capture: which run, which hosts, which HLO dump.

``jax.profiler.trace(logdir)`` writes ``logdir/plugins/profile/<run>/<host>.xplane.pb``;
``--xla_dump_to`` writes, per compiled module, ``[<timestamp>.]module_<id>[.<name>].<pass>.txt``
(XLA's ``FilenameFor``; the id is the module's unique id, which the trace calls ``program_id``) and,
beside the after-optimizations text, ``<same>-memory-usage-report.txt`` and
``<same>-buffer-assignment.txt``. Users point us at the log dir, a run folder, one ``.xplane.pb``
file, or only an HLO dump.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import InputError, UsageError
from ..text_safety import clean_text
from .hlo_text import find_hlo_dumps
from .input_files import checked_size
from .storage import as_path

XPLANE_SUFFIX = ".xplane.pb"
MEMORY_REPORT_SUFFIX = "-memory-usage-report.txt"
BUFFER_ASSIGNMENT_SUFFIX = "-buffer-assignment.txt"
# XLA's FilenameFor: an optional timestamp (--xla_dump_include_timestamp), then module_%04d.
_DUMP_MODULE_ID = re.compile(r"^(?:\d+\.)?module_(\d+)\.")
_NO_CAPTURE = "no '*.xplane.pb' capture found (expected plugins/profile/<run>/<host>.xplane.pb)"


class DiscoveryError(InputError):
    """The path holds no capture we can read; the message is one line for the user."""


@dataclass(frozen=True)
class CaptureFiles:
    xplane_files: tuple[Path, ...]
    hlo_files: tuple[Path, ...]
    run_name: str | None = None
    run_dir: Path | None = None
    other_runs: tuple[str, ...] = field(default_factory=tuple)
    picked: bool = False  # the newest of several runs, taken without --run
    memory_reports: tuple[Path, ...] = field(default_factory=tuple)  # beside hlo_files, same stem
    buffer_assignments: tuple[Path, ...] = field(default_factory=tuple)
    # ``<module>(<program id>).hlo_proto.pb`` files xprof/TensorBoard tooling leaves beside the xplanes.
    hlo_proto_files: tuple[Path, ...] = field(default_factory=tuple)

    def __repr__(self) -> str:
        return (f"<CaptureFiles run {self.run_name!r}: {len(self.xplane_files)} xplane, {len(self.hlo_files)} HLO, "
                f"{len(self.memory_reports)} memory-report files>")

    def memory_report_of(self, hlo_file: Path) -> Path | None:
        """The memory-usage report XLA wrote for this HLO file (same name + suffix), if found."""
        return _companion(hlo_file, MEMORY_REPORT_SUFFIX, self.memory_reports)

    def buffer_assignment_of(self, hlo_file: Path) -> Path | None:
        return _companion(hlo_file, BUFFER_ASSIGNMENT_SUFFIX, self.buffer_assignments)

    @property
    def runs_note(self) -> str | None:
        """One line when the run was picked among several: which, and how to pick another."""
        if not self.picked or not self.other_runs:
            return None
        return f"{len(self.other_runs) + 1} runs: using {self.run_name}; --run to pick"

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(clean_text(p.name[: -len(XPLANE_SUFFIX)]) for p in self.xplane_files)


def _companion(hlo_file: Path, suffix: str, found: tuple[Path, ...]) -> Path | None:
    hlo_file = as_path(hlo_file)
    want = hlo_file.with_name(hlo_file.name.removesuffix(".txt") + suffix)
    return want if want in found else None


def dump_module_id(hlo_file: Path | str) -> int | None:
    """The module id in an XLA dump file name (``module_0042.jit_step...`` -> 42); None if not named so."""
    m = _DUMP_MODULE_ID.match(as_path(hlo_file).name)
    return int(m.group(1)) if m else None


def _reports_beside(hlo_files: tuple[Path, ...]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """Memory-usage reports and buffer assignments written next to the given HLO files."""
    def existing(suffix: str) -> tuple[Path, ...]:
        paths = (p.with_name(p.name.removesuffix(".txt") + suffix) for p in hlo_files)
        return tuple(p for p in paths if p.is_file())
    return existing(MEMORY_REPORT_SUFFIX), existing(BUFFER_ASSIGNMENT_SUFFIX)


def find_hlo_files(root: Path) -> tuple[Path, ...]:
    """The after-optimizations HLO programs below ``root`` (sorted); a file is taken as given."""
    return (root,) if root.is_file() else tuple(find_hlo_dumps(root))


def _runs_under(profile_root: Path) -> list[Path]:
    return sorted(
        (d for d in profile_root.iterdir() if d.is_dir() and any(d.glob("*" + XPLANE_SUFFIX))),
        key=lambda d: d.name,
    )


def discover(path: Path | str | None, run: str | None = None, hlo_dir: Path | str | None = None) -> CaptureFiles:
    """Resolve what the user pointed at into xplane files (one per host) and HLO files. A folder deleted or
    moved between its listing and its reading (a capture still being written or cleaned up) is one line."""
    try:
        return _discover(path, run, hlo_dir)
    except (FileNotFoundError, NotADirectoryError) as exc:
        gone = exc.filename if exc.filename is not None else (path if path is not None else hlo_dir)
        raise DiscoveryError(f"{gone}: vanished while the capture was being listed (deleted or moved); "
                             "run again once it is complete") from None


def _discover(path, run, hlo_dir) -> CaptureFiles:
    hlo_files: tuple[Path, ...] = ()
    if hlo_dir is not None:
        hlo_dir = as_path(hlo_dir)
        if not hlo_dir.exists():
            raise DiscoveryError(f"{hlo_dir}: no such file or directory (--hlo-dir)")
        hlo_files = find_hlo_files(hlo_dir)
        if not hlo_files:
            raise DiscoveryError(f"{hlo_dir}: no '*after_optimizations*.txt' HLO files in this directory (--hlo-dir)")

    if path is None:
        if run is not None:
            raise DiscoveryError("--run picks a run of a profile directory; give the directory too")
        if not hlo_files:
            raise DiscoveryError("give a profile directory, an .xplane.pb file, or --hlo-dir DIR")
        return _with_reports(CaptureFiles(xplane_files=(), hlo_files=hlo_files))

    path = as_path(path)
    if not path.exists():
        raise DiscoveryError(f"{path}: no such file or directory")
    if isinstance(path, Path) and not path.is_file() and not path.is_dir():  # a device, FIFO: never opened
        try:
            checked_size(path)
        except OSError as exc:
            raise DiscoveryError(f"{path}: {exc.strerror}") from None
    if path.is_file():
        if run is not None:
            raise DiscoveryError(f"{path}: --run needs a profile directory, not a file")
        return _with_reports(CaptureFiles(xplane_files=(path,), hlo_files=hlo_files,
                                          run_name=clean_text(path.parent.name), run_dir=path.parent))

    run_dirs: list[Path]
    profile_root = path / "plugins" / "profile"
    if profile_root.is_dir():
        run_dirs = _runs_under(profile_root)
    elif any(path.glob("*" + XPLANE_SUFFIX)):
        run_dirs = [path]  # a run folder itself
    else:
        # A parent of log dirs (TensorBoard's tb/train, tb/eval), or a custom layout: any folder holding xplanes.
        run_dirs = list({p.parent for p in path.rglob("*" + XPLANE_SUFFIX)})

    if not run_dirs:
        return _without_runs(path, hlo_files)

    # Run folders are named by timestamp: sorted by it (then by their sub-logdir), the last is the newest.
    labelled = sorted(((_run_label(path, d), d) for d in run_dirs), key=lambda ld: (ld[1].name, ld[0]))
    label, chosen = _pick_run(path, labelled, run)
    xplanes = tuple(sorted(chosen.glob("*" + XPLANE_SUFFIX)))
    if not xplanes:  # listed with xplanes a moment ago: a local glob of a deleted folder finds nothing, silently
        raise FileNotFoundError(2, "no such directory", str(chosen))
    if not hlo_files:
        hlo_files = find_hlo_files(path)
    return _with_reports(CaptureFiles(  # names of unknown encoding: shown, never opened
        xplane_files=xplanes, hlo_files=hlo_files, run_name=clean_text(label), run_dir=chosen,
        other_runs=tuple(clean_text(name) for name, _ in labelled if name != label),
        picked=run is None and len(labelled) > 1,
    ))


def _without_runs(path, hlo_files) -> CaptureFiles:
    """A folder without xplane files: a dump alone, else an error that names what the folder holds instead."""
    if hlo_files or find_hlo_files(path):
        return _with_reports(CaptureFiles(xplane_files=(), hlo_files=hlo_files or find_hlo_files(path)))
    trace = next(iter(path.rglob("*.trace.json.gz")), None)
    if trace is not None:  # TensorBoard's Chrome trace, written beside an xplane that is missing here
        raise DiscoveryError(f"{path}: holds only a Chrome trace ({trace.name}: a timeline without the "
                             "XSpace's op metadata), not an XSpace; point at the folder with the .xplane.pb "
                             "files jax.profiler.trace writes (plugins/profile/<run>/<host>.xplane.pb)")
    raise DiscoveryError(f"{path}: {_NO_CAPTURE}")


def _run_label(root: Path, run_dir: Path) -> str:
    """TensorBoard's name for a run: ``train/2026_01_01_...`` for ``root/train/plugins/profile/2026_01_01_...``
    (the sub-logdir, then the run), the run folder's own name directly under ``root/plugins/profile``."""
    if run_dir == root:
        return run_dir.name
    parent = run_dir.parent
    if parent.name == "profile" and parent.parent.name == "plugins":
        sub = parent.parent.parent
        return run_dir.name if sub == root else f"{_relative(sub, root)}/{run_dir.name}"
    return _relative(run_dir, root)


def _relative(path: Path, root: Path) -> str:
    # By text: a RemotePath (a URL) has no relative_to.
    prefix = str(root).rstrip("/") + "/"
    return str(path)[len(prefix):] if str(path).startswith(prefix) else path.name


def _pick_run(path: Path, labelled: list[tuple[str, Path]], run: str | None) -> tuple[str, Path]:
    """``--run``: a run's full name (``train/2026_...``), its folder name when only one run has it, or a
    sub-logdir (``train``: its newest run); none given: the newest run."""
    if run is None:
        return labelled[-1]
    names = ", ".join(name for name, _ in labelled)
    exact = [ld for ld in labelled if ld[0] == run]
    if exact:
        return exact[0]
    same_folder = [ld for ld in labelled if ld[1].name == run]
    if len(same_folder) > 1:
        raise DiscoveryError(f"{path}: --run {run!r} names {len(same_folder)} runs: "
                             f"{', '.join(name for name, _ in same_folder)}; give one of them")
    if same_folder:
        return same_folder[0]
    in_sub = [ld for ld in labelled if ld[0].startswith(run.rstrip("/") + "/")]
    if in_sub:
        return in_sub[-1]
    raise DiscoveryError(f"{path}: no run named {run!r}; runs here: {names}")


HLO_PROTO_SUFFIX = ".hlo_proto.pb"
_HLO_PROTO_NAME = re.compile(r"^(?P<name>.+)\((?P<id>\d+)\)\.hlo_proto\.pb$")


def hlo_proto_program(path: Path | str) -> tuple[str, str] | None:
    """(program id, module name) of ``jit_train_step(42).hlo_proto.pb``; None if not named so."""
    m = _HLO_PROTO_NAME.match(as_path(path).name)
    return (m.group("id"), m.group("name")) if m else None


def _with_reports(files: CaptureFiles) -> CaptureFiles:
    memory, buffers = _reports_beside(files.hlo_files)
    folders = sorted({p.parent for p in files.xplane_files})
    protos = tuple(p for folder in folders for p in sorted(folder.glob("*" + HLO_PROTO_SUFFIX))
                   if hlo_proto_program(p) is not None)
    return replace(files, memory_reports=memory, buffer_assignments=buffers, hlo_proto_files=protos)


def only_host(files: CaptureFiles, host: str | None) -> CaptureFiles:
    """``files`` with one host's capture (``--host``: its name, or its file's name); UsageError listing the hosts."""
    if host is None:
        return files
    keep = tuple(p for p, name in zip(files.xplane_files, files.hosts) if host in (name, p.name))
    if not keep:
        raise UsageError(f"--host {host}: no such host in run {files.run_name}; "
                         f"hosts: {', '.join(files.hosts) or 'none'}")
    return replace(files, xplane_files=keep)
