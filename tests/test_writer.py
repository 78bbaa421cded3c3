"""The report writer never harms what is at the target path (issue: /dev/null replaced as root)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xladiag.errors import UsageError
from xladiag.writer import check_output_path, write_report

ROOT = Path(__file__).resolve().parent.parent


def _char_device(tmp_path: Path) -> Path:
    """A character device under tmp (a copy of /dev/null's numbers) where mknod is allowed, else skip."""
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.stat("/dev/null").st_rdev)
    except (PermissionError, OSError) as exc:
        pytest.skip(f"mknod not allowed here: {exc}")
    return node


def test_character_device_is_written_in_place_not_replaced(tmp_path):
    node = _char_device(tmp_path)
    write_report(node, "report\n")
    assert stat.S_ISCHR(node.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]  # no temp file left


def test_dev_null_stays_a_device():
    before = os.stat("/dev/null")
    write_report("/dev/null", "x" * 10_000)
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino


def test_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    write_report(fifo, "through the pipe\n")
    assert reader.communicate(timeout=10)[0] == b"through the pipe\n"
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_symlink_is_written_through(tmp_path):
    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real.name)  # relative link, as users make them
    write_report(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_existing_file_keeps_its_mode_and_new_files_follow_umask(tmp_path):
    old = tmp_path / "old.json"
    old.write_text("{}")
    old.chmod(0o644)
    write_report(old, "{\"a\": 1}")
    assert stat.S_IMODE(old.stat().st_mode) == 0o644 and old.read_text() == "{\"a\": 1}"
    previous = os.umask(0o027)
    try:
        write_report(tmp_path / "new.json", "{}")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640


@pytest.mark.parametrize("target", ["missing_dir/", "missing_dir/report.html", "."])
def test_bad_targets_are_usage_errors(tmp_path, monkeypatch, target):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError):
        check_output_path(target)
    assert list(tmp_path.iterdir()) == []


def test_full_disk_is_a_one_line_usage_error():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with pytest.raises(UsageError, match="no space left on device") as info:
        write_report("/dev/full", "x" * 100_000)
    assert info.value.exit_code == 2 and "\n" not in str(info.value)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_write_leaves_no_temp_file_and_the_old_report(tmp_path, signum):
    target = tmp_path / "report.html"
    target.write_text("previous report")
    # The signal arrives while the temp file is complete but not yet renamed (at fsync).
    code = textwrap.dedent(f"""
        import os, signal
        import xladiag.writer as w
        real_fsync = os.fsync
        def fsync(fd):
            real_fsync(fd)
            os.kill(os.getpid(), {int(signum)})
        w.os.fsync = fsync
        w.write_report({str(target)!r}, "x" * 1_000_000)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent)
    assert proc.returncode != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    assert target.read_text() == "previous report"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_ignored_signal_mid_write_stays_ignored(tmp_path, signum):
    """nohup / CI: the signal is SIG_IGN at start; one arriving mid-write changes nothing, the report is written."""
    target = tmp_path / "report.html"
    target.write_text("previous report")
    code = textwrap.dedent(f"""
        import os, signal
        import xladiag.writer as w
        signal.signal({int(signum)}, signal.SIG_IGN)
        real_fsync = os.fsync
        def fsync(fd):
            real_fsync(fd)
            os.kill(os.getpid(), {int(signum)})
        w.os.fsync = fsync
        w.write_report({str(target)!r}, "new report")
        assert signal.getsignal({int(signum)}) is signal.SIG_IGN
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    assert target.read_text() == "new report"


@pytest.mark.slow
def test_cli_output_onto_a_device_and_a_missing_dir(tmp_path, cpu_xplane):
    node = _char_device(tmp_path)
    cli = [sys.executable, "-m", "xladiag.cli", str(cpu_xplane)]
    ok = subprocess.run([*cli, "--format", "json", "-o", str(node), "-q"], capture_output=True, text=True,
                        cwd=ROOT.parent)
    assert ok.returncode == 0, ok.stderr
    assert stat.S_ISCHR(node.stat().st_mode)
    bad = subprocess.run([*cli, "-o", str(tmp_path / "nowhere") + "/", "-q"], capture_output=True, text=True,
                         cwd=ROOT.parent)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "diagnose: error:" in bad.stderr
    assert not (tmp_path / "nowhere").exists()


def test_pieces_are_written_as_they_come_and_a_failure_among_them_leaves_the_target(tmp_path):
    target = tmp_path / "report.html"
    write_report(target, iter(["<p>", "é" * 3, "</p>\n"]))
    assert target.read_text(encoding="utf-8") == "<p>ééé</p>\n"

    def broken():
        yield "<p>half"
        raise RuntimeError("the renderer failed")

    with pytest.raises(RuntimeError):
        write_report(target, broken())
    assert target.read_text(encoding="utf-8") == "<p>ééé</p>\n" and [p.name for p in tmp_path.iterdir()] == [
        "report.html"]
