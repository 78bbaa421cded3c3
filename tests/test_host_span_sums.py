"""A TPU host's async spans reduced to sums where it is read (analyzer/hosts/span_sums.py): the merge adds
them up, and a span whose done op only another host ran in its steps sends the capture the all-events way."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import xladiag.analyzer.hosts.map as host_map
from builders.large_capture import multi_host_capture
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.hosts.merge import SpansNotSummable, _span_totals
from xladiag.analyzer.hosts.span_sums import KEY, SpanSums

IDS = pd.DataFrame({"program_id": ["7", "7"], "op_name": ["all-gather-done.1", "fusion.2"], "op_id": [0, 1]})


BOOK = ["all-gather-done.1", "fusion.2", "copy-done.9"]  # the main process's key numbers (compact.KeyBook)
OP_OF_KEY = np.array([0, 1, -1])


def _sums(done: list[str], kind_ps: dict, orphans: list[str] = ()) -> SpanSums:
    flight = pd.DataFrame({"key": [BOOK.index(d) for d in done], "in_flight_ps": [5] * len(done)})
    return SpanSums(flight, kind_ps, (0, 1), pd.DataFrame({"program_id": ["7"] * len(orphans),
                                                           "op_name": list(orphans)}, columns=KEY))


def test_the_hosts_span_sums_add_up_by_op_id_and_kind():
    hosts = [SimpleNamespace(span_sums=_sums(["all-gather-done.1"], {"all-gather": 5})),
             SimpleNamespace(span_sums=_sums(["all-gather-done.1", "copy-done.9"], {"all-gather": 7, "copy": 2},
                                             ["copy-done.9"]))]
    totals = _span_totals(hosts, [0, 2], IDS, OP_OF_KEY)
    assert totals["in_flight_ps"].to_dict() == {0: 10}  # copy-done.9 is no step op of the run: no op id
    assert totals["span_kind_ps"] == {"all-gather": 12, "copy": 2}
    np.testing.assert_array_equal(totals["span_devices"], [0, 1, 2, 3])


def test_a_span_waiting_for_an_op_only_another_host_ran_is_not_summed():
    hosts = [SimpleNamespace(span_sums=_sums(["all-gather-done.1"], {"all-gather": 5})),
             SimpleNamespace(span_sums=_sums(["fusion.2"], {}, ["fusion.2"]))]  # host 1 did not run fusion.2
    with pytest.raises(SpansNotSummable):
        _span_totals(hosts, [0, 2], IDS, OP_OF_KEY)


def test_spans_that_cannot_be_summed_read_the_capture_in_full(tmp_path, monkeypatch):
    paths = multi_host_capture(tmp_path, hosts=2, events_per_host=4_000, ops_per_step=100)
    reduced = analyze(paths[0].parent, workers=1)
    messages: list[str] = []

    def refuse(*args, **kwargs):
        raise SpansNotSummable

    monkeypatch.setattr(host_map, "merge_hosts", refuse)
    full = analyze(paths[0].parent, workers=1, progress=messages.append)
    assert any("read in full: a host's async spans wait for an op only other hosts ran" in m for m in messages)
    assert len(full.step_ops) > len(reduced.step_ops)  # every step's events: the all-events path
    assert full.transfers.busy_s_per_step == pytest.approx(reduced.transfers.busy_s_per_step, rel=1e-12)
    cols = ["op_id", "in_flight_s_per_step", "exposed_s_per_step"]
    pd.testing.assert_frame_equal(full.ops[cols], reduced.ops[cols])


def test_a_worker_classifies_a_runs_done_ops_once(tmp_path, monkeypatch):
    from xladiag.analyzer.hosts import span_sums
    from xladiag.analyzer.hosts.reduce import reduce_host

    paths = multi_host_capture(tmp_path, hosts=2, events_per_host=4_000, ops_per_step=100)
    calls = []
    facts = span_sums.attach_hlo_facts
    monkeypatch.setattr(span_sums, "attach_hlo_facts", lambda ops, *a: calls.append(len(ops)) or facts(ops, *a))
    monkeypatch.setattr(span_sums, "_KINDS", {})
    first, second = (reduce_host(str(p)).span_sums for p in paths)
    assert len(calls) == 1 and calls[0] > 0  # the second host's done ops: the same, already classified
    assert first.kind_ps.keys() == second.kind_ps.keys() == {"all-gather"}
    monkeypatch.setattr(span_sums, "_KINDS", {})  # classified afresh: the same sums
    assert reduce_host(str(paths[1])).span_sums.kind_ps == second.kind_ps and len(calls) == 2
