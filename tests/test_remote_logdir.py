"""Log dirs in cloud storage, through fsspec: the bundled samples copied into fsspec's in-memory filesystem
are diagnosed exactly as their local copies, with the same discovery, reading only the files it picks."""

from __future__ import annotations

import importlib
import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

fsspec = pytest.importorskip("fsspec")

from conftest import HLO_PROGRAM, HLO_SAMPLE, SAMPLES, TPU_SAMPLE, only_xplane  # noqa: E402
from xladiag.api import diagnose  # noqa: E402
from xladiag.cli import main  # noqa: E402
from xladiag.parsers.discovery import discover  # noqa: E402
from xladiag.parsers.storage import RemotePath  # noqa: E402

CAPTURES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and any(p.glob("plugins/profile/*/*.xplane.pb")))


@pytest.fixture
def bucket():
    """A fresh ``memory://`` folder, removed afterwards (the in-memory store is shared by the process)."""
    fs = fsspec.filesystem("memory")
    root = f"/xladiag-test-{uuid.uuid4().hex[:8]}"
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


def _upload(fs, local: Path, remote: str) -> str:
    for p in sorted(local.rglob("*")):
        if p.is_file():
            fs.pipe_file(f"{remote}/{p.relative_to(local).as_posix()}", p.read_bytes())
    return f"memory://{remote}"


def _relative(report: dict, root) -> dict:
    """The report with its folder's location (a URL or a local path) taken out of every text in it: where the
    files were is the only thing allowed to differ."""
    return json.loads(json.dumps(report).replace(json.dumps(str(root))[1:-1], "<root>"))


@pytest.mark.parametrize("name", CAPTURES)
def test_a_memory_log_dir_is_diagnosed_as_its_local_copy(bucket, name):
    fs, root = bucket
    url = _upload(fs, SAMPLES / name, f"{root}/{name}")
    remote, local = diagnose(url).to_dict(), diagnose(SAMPLES / name).to_dict()
    assert remote["run"]["xplane_files"] and all(p.startswith(url) for p in remote["run"]["xplane_files"])
    assert _relative(remote, url) == _relative(local, SAMPLES / name)


def test_an_hlo_dump_in_storage_is_read_with_its_program(bucket):
    fs, root = bucket
    url = _upload(fs, HLO_SAMPLE, f"{root}/dump")
    remote = diagnose(hlo_dir=url, chip="v6e", program=HLO_PROGRAM).to_dict()
    local = diagnose(hlo_dir=HLO_SAMPLE, chip="v6e", program=HLO_PROGRAM).to_dict()
    assert remote["ops"] and _relative(remote, url) == _relative(local, HLO_SAMPLE)


def test_discovery_takes_the_newest_run_all_hosts_and_reads_nothing_else(bucket, monkeypatch, tmp_path):
    fs, root = bucket
    xplane = only_xplane(TPU_SAMPLE).read_bytes()
    for run, hosts in (("2025_01_01_00_00_00", ("h0",)), ("2025_06_01_00_00_00", ("h0", "h1"))):
        for host in hosts:
            fs.pipe_file(f"{root}/plugins/profile/{run}/{host}.xplane.pb", xplane)
    found = discover(f"memory://{root}")
    assert found.run_name == "2025_06_01_00_00_00" and found.hosts == ("h0", "h1")
    assert found.other_runs == ("2025_01_01_00_00_00",)
    assert all(isinstance(p, RemotePath) for p in found.xplane_files)
    assert discover(f"memory://{root}", run="2025_01_01_00_00_00").hosts == ("h0",)

    read = []
    original = type(fs).cat_file
    monkeypatch.setattr(type(fs), "cat_file",
                        lambda self, path, *a, **k: read.append(path) or original(self, path, *a, **k))
    report = diagnose(f"memory://{root}", workers=1)  # read here, where the reads are counted
    assert sorted(Path(p).name for p in read) == ["h0.xplane.pb", "h1.xplane.pb"]
    assert all("2025_06_01" in p for p in read)
    fs.get(root, str(tmp_path / "copy"), recursive=True)
    local = _relative(diagnose(tmp_path / "copy").to_dict(), tmp_path / "copy")
    assert _relative(report.to_dict(), f"memory://{root}") == local
    # Two worker processes read the hosts by their URL (forked: they see the same in-memory files).
    assert _relative(diagnose(f"memory://{root}", workers=2).to_dict(), f"memory://{root}") == local


def test_the_command_reads_a_url_and_writes_the_report_here(bucket, tmp_path, monkeypatch):
    fs, root = bucket
    url = _upload(fs, SAMPLES / "cpu_jax_train_step", f"{root}/cpu")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [url, "--format", "json", "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    data = json.loads((tmp_path / "xladiag_report.json").read_text())
    assert data["run"]["name"] == "2000_01_01_00_00_00" and data["findings"]


def _one_line(result, code, *needles):
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diagnose: error:"), lines
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_missing_protocol_package_names_the_extra(monkeypatch, tmp_path):
    # fsspec's own path for a known protocol whose package is absent (as gcsfs is without xladiag[gcs]).
    registry = importlib.import_module("fsspec.registry")  # the module: ``fsspec.registry`` is its mapping
    monkeypatch.delitem(registry._registry, "gs", raising=False)
    monkeypatch.setitem(registry.known_implementations, "gs", {
        "class": "xladiag_no_such_package.GCSFileSystem", "err": "Please install gcsfs to access Google Storage"})
    result = CliRunner().invoke(main, ["gs://bucket/logdir", "-o", str(tmp_path / "r.html")])
    _one_line(result, 2, "pip install 'xladiag[gcs]'", "gcsfs")


def test_an_unknown_protocol_or_a_missing_folder_is_one_line(bucket, tmp_path):
    run = CliRunner().invoke
    _one_line(run(main, ["nosuchproto://bucket/x", "-o", str(tmp_path / "r.html")]), 2, "nosuchproto")
    fs, root = bucket
    _one_line(run(main, [f"memory://{root}/absent", "-o", str(tmp_path / "r.html")]), 1, "no such file or directory")
    _one_line(run(main, ["--hlo-dir", f"memory://{root}/absent", "--chip", "v6e", "-o", str(tmp_path / "r.html")]),
              1, "(--hlo-dir)")
