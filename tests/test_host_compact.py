"""What the main process holds of a many-host capture while the hosts arrive (analyzer/hosts/compact.py): per
host numbers only, its op keys and lines once in a book that does not grow with hosts running the same
program; the merge builds the run's step events from them as the analysis of every host's events would."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import xladiag.analyzer.hosts.map as host_map
from builders.large_capture import multi_host_capture
from xladiag.analyzer.hosts.reduce import reduce_host


def _held_bytes(part) -> int:
    """Bytes of the tables a coded host keeps (its representative events packed, its per-op tables)."""
    rep = sum(v[1].nbytes for v in part.rep_events.values() if isinstance(v, tuple) and v[1] is not None)
    frames = (part.step_ops, part.other_ops, part.span_ops, part.op_metadata, part.spans)
    return rep + sum(int(f.memory_usage(deep=True).sum()) for f in frames)


@pytest.fixture(scope="module")
def same_program_hosts(tmp_path_factory):
    """Eight TPU hosts of 2 devices running one program (every host its own seed)."""
    return multi_host_capture(tmp_path_factory.mktemp("h8"), hosts=8, events_per_host=3_000, num_devices=2,
                              ops_per_step=100)


def test_a_same_program_run_holds_numbers_per_host_and_its_keys_once(same_program_hosts):
    programs = host_map._Programs()
    raw, held, book_sizes = [], [], []
    for i, path in enumerate(same_program_hosts):
        part = reduce_host(str(path))
        raw.append(int(part.rep_events.memory_usage(deep=True).sum() + part.step_ops.memory_usage(deep=True).sum()
                       + part.other_ops.memory_usage(deep=True).sum() + part.op_metadata.memory_usage(deep=True).sum()))
        coded = programs.take(i, part)
        held.append(_held_bytes(coded))
        book_sizes.append((len(programs.book.keys), len(programs.book.lines)))
        for frame in (coded.step_ops, coded.other_ops, coded.span_ops):  # no text per host: key numbers
            assert all(pd.api.types.is_integer_dtype(t) for t in frame.dtypes), frame.dtypes
    # The same program on every host: its keys are numbered once, the book stops growing after the first host.
    assert len(set(book_sizes)) == 1 and book_sizes[0][0] > 0
    # The first host keeps the op metadata; the others hold a fraction of what they arrived with.
    assert max(held[1:]) < min(raw[1:]) / 4, (held, raw)
    assert max(held[1:]) <= 1.5 * min(held[1:])  # per host: about the same, not growing with arrivals


def test_the_merged_step_events_are_the_hosts_representative_events(same_program_hosts):
    from xladiag.analyzer.analysis import analyze

    run = same_program_hosts[0].parent
    reduced = analyze(run, workers=1)
    events = reduced.step_ops
    assert len(reduced.hosts) == 8 and events.groupby("device")["step"].nunique().eq(1).all()
    order = np.lexsort((events["event"].to_numpy(), events["device"].to_numpy(), events["start_ps"].to_numpy()))
    np.testing.assert_array_equal(order, np.arange(len(events)))  # (start, device, event) order
    for col in ("module", "program_id", "op_name", "line"):  # categories as astype('category') sorts them
        cats = events[col].cat.categories
        assert list(cats) == sorted(cats) and set(cats) == set(events[col].astype(str))
    known = events["op_id"].to_numpy() >= 0
    ops = reduced.ops.set_index("op_id").loc[events.loc[known, "op_id"]]
    assert (ops["op_name"].to_numpy() == events.loc[known, "op_name"].astype(str).to_numpy()).all()


def test_freed_heap_goes_back_where_the_c_library_can_and_is_left_alone_elsewhere(monkeypatch):
    import ctypes

    from xladiag.analyzer.hosts import heap

    calls = []
    libc = type("Libc", (), {"malloc_trim": lambda self, n: calls.append(n)})
    for found, trims in ((lambda name: libc(), [0]), (lambda name: object(), [])):  # glibc; one without malloc_trim
        monkeypatch.setattr(ctypes, "CDLL", found)
        heap._malloc_trim.cache_clear()
        heap.release_freed()
        assert calls == trims
        calls.clear()

    def missing(name):
        raise OSError(f"{name}: not found")

    monkeypatch.setattr(ctypes, "CDLL", missing)  # no glibc (macOS): nothing to do, no error
    heap._malloc_trim.cache_clear()
    heap.release_freed()
    heap._malloc_trim.cache_clear()
