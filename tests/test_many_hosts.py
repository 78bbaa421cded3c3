"""Many hosts, bounded memory (analyzer/hosts/map.py): a 64-host capture runs on a Dask LocalCluster of two worker
processes and writes the report the local pool writes."""

from __future__ import annotations

import pytest

from builders.large_capture import multi_host_capture
from xladiag.api import diagnose


@pytest.fixture(scope="module")
def run_64(tmp_path_factory):
    """64 TPU hosts of 2 devices, ~1,000 op events each (every host its own seed)."""
    paths = multi_host_capture(tmp_path_factory.mktemp("h64"), hosts=64, events_per_host=1_000, num_devices=2,
                               ops_per_step=100)
    return paths[0].parent


def test_64_hosts_on_a_local_cluster_of_two_processes_give_the_local_report(run_64):
    distributed = pytest.importorskip("distributed")
    messages: list[str] = []
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        on_dask = diagnose(run_64, scheduler=cluster.scheduler_address, progress=messages.append)
        with distributed.Client(cluster) as client:
            sampled = _profiled_files(client.profile())
    assert any("read 64/64 hosts (Dask at" in m for m in messages), messages
    # The workers' statistical profiler saw the tasks wait (map.run_unsampled), never the reduction itself: its
    # call trees of our stacks would stay in the workers' memory (Dask keeps the last 1000 seconds of them).
    assert ("map.py", "run_unsampled") in sampled, sorted(sampled)[:20]
    assert not {f for f, _ in sampled if f in ("reduce.py", "xplane.py", "build.py")}, sorted(sampled)
    assert len(on_dask.analysis.hosts) == 64 and len(on_dask.analysis.devices) == 128
    assert on_dask.render("json") == diagnose(run_64, workers=2).render("json")


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
