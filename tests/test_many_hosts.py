"""Many hosts, bounded memory (analyzer/hosts/map.py, analyzer/hosts/dask_relay.py): a 64-host capture runs on a
Dask LocalCluster of two worker processes and writes the report the local pool writes; the Dask client runs in a
relay process, so the analysing process never imports dask.distributed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from builders.large_capture import multi_host_capture
from xladiag.api import diagnose
from xladiag.cli import main as cli_main


@pytest.fixture(scope="module")
def run_64(tmp_path_factory):
    """64 TPU hosts of 2 devices, ~1,000 op events each (every host its own seed)."""
    paths = multi_host_capture(tmp_path_factory.mktemp("h64"), hosts=64, events_per_host=1_000, num_devices=2,
                               ops_per_step=100)
    return paths[0].parent


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        yield cluster


def test_64_hosts_on_a_local_cluster_of_two_processes_give_the_local_report(run_64, cluster):
    import distributed

    messages: list[str] = []
    on_dask = diagnose(run_64, scheduler=cluster.scheduler_address, progress=messages.append)
    with distributed.Client(cluster) as client:
        sampled = _profiled_files(client.profile())
    assert any("read 64/64 hosts (Dask at" in m for m in messages), messages
    # The workers' statistical profiler saw the tasks wait (dask_relay.run_unsampled), never the reduction itself:
    # its call trees of our stacks would stay in the workers' memory (Dask keeps the last 1000 seconds of them).
    assert ("dask_relay.py", "run_unsampled") in sampled, sorted(sampled)[:20]
    assert not {f for f, _ in sampled if f in ("reduce.py", "xplane.py", "build.py")}, sorted(sampled)
    assert len(on_dask.analysis.hosts) == 64 and len(on_dask.analysis.devices) == 128
    assert on_dask.render("json") == diagnose(run_64, workers=2).render("json")


def test_the_analysing_process_never_imports_dask_distributed(run_64, cluster, tmp_path):
    # A fresh interpreter: this one has dask loaded for the cluster.
    code = ("import sys, json; from xladiag.api import diagnose; "
            f"r = diagnose({str(run_64)!r}, scheduler={cluster.scheduler_address!r}); "
            "print(json.dumps(['distributed' in sys.modules, 'dask' in sys.modules, len(r.analysis.hosts)]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, False, 64]


def test_a_host_that_fails_on_a_worker_is_one_line_naming_it(run_64, cluster, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_64, copy)
    bad = sorted(copy.glob("*.xplane.pb"))[3]
    bad.write_bytes(bad.read_bytes()[:5000])
    result = CliRunner().invoke(cli_main, [str(copy), "--scheduler", cluster.scheduler_address, "-o", "-",
                                           "--format", "json"])
    assert result.exit_code == 1 and bad.name in result.output and "Traceback" not in result.output, result.output


def test_an_unreachable_scheduler_is_a_usage_error_of_one_line(run_64):
    result = CliRunner().invoke(cli_main, [str(run_64), "--scheduler", "tcp://127.0.0.1:9", "-o", "-"])
    assert result.exit_code == 2 and "cannot reach the Dask scheduler" in result.output, result.output
    assert "Traceback" not in result.output


def _profiled_files(tree: dict) -> set[tuple[str, str]]:
    """(file name, function) of every frame in a Dask profile tree (distributed.profile's nested dicts)."""
    out, todo = set(), [tree]
    while todo:
        node = todo.pop()
        where = node.get("description") or {}
        if where.get("filename"):
            out.add((where["filename"].replace("\\", "/").rsplit("/", 1)[-1], where.get("name", "")))
        todo.extend(node.get("children", {}).values())
    return out


def test_a_relay_that_dies_fails_every_call_at_once_never_hangs(cluster):
    import time

    from xladiag.analyzer.hosts.dask_relay import RelayExecutor
    from xladiag.errors import InputError

    relay = RelayExecutor(cluster.scheduler_address)
    try:
        assert relay.submit(divmod, 7, 2).result(timeout=60) == (3, 1)  # a call and its result through the relay
        with pytest.raises(ZeroDivisionError):  # what the call raised on the worker, raised here
            relay.submit(divmod, 1, 0).result(timeout=60)
        waiting = relay.submit(time.sleep, 60)
        relay._proc.kill()
        with pytest.raises(InputError, match="Dask client process ended"):
            waiting.result(timeout=30)
        with pytest.raises(InputError, match="Dask client process ended"):
            relay.submit(divmod, 7, 2).result(timeout=5)
    finally:
        relay.shutdown()
