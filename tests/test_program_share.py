"""The step program among many: its share of the programs' device time, the others listed when it holds under
half, a program name several programs share refused as ambiguous, and devices counted by their events."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from builders.many_programs import RUNS, small_programs
from xladiag.api import diagnose
from xladiag.cli import main
from xladiag.errors import UsageError


@pytest.fixture(scope="module")
def eleven(tmp_path_factory):
    b, programs = small_programs()
    logdir = tmp_path_factory.mktemp("eleven")
    b.write(logdir)
    return logdir, programs


def test_a_small_step_program_says_its_share_and_lists_the_others(eleven):
    logdir, programs = eleven
    report = diagnose(logdir)
    data = report.to_dict()
    share = max(RUNS) / sum(RUNS)  # every execution lasts the same: executions are device time
    assert data["steps"]["program"] == "jit_small_0"
    assert data["steps"]["program_share"] == pytest.approx(share, rel=1e-9)
    listed = data["steps"]["other_programs"]
    got = {(p["name"], p["program_id"]): p["share"] for p in listed}
    assert got == pytest.approx({k: r / sum(RUNS) for k, r in programs.items() if k != ("jit_small_0", "100")})
    assert [p["share"] for p in listed] == sorted(got.values(), reverse=True)  # most first
    warning = next(w for w in data["warnings"] if "holds only" in w)
    assert "15%" in warning and "jit_small_1(101) 11%" in warning
    for fmt in ("text", "markdown", "html"):
        shown = report.render(fmt).replace("\\_", "_")  # markdown escapes _
        assert "jit_small_1(101)" in shown and "15% of the programs' device time" in shown.replace("&#39;", "'"), fmt
    assert "15% of the programs' device time" in data["steps"]["source"]


def test_devices_are_those_with_events(eleven):
    data = diagnose(eleven[0]).to_dict()
    assert data["devices"] == 1 and [d["device"] for d in data["device_list"]] == [0]
    assert any("7 of 8 device planes have no op event" in w for w in data["warnings"])


def test_a_dominant_program_lists_nobody(tmp_path):
    b, _ = small_programs((60, 10, 5), planes=1)
    b.write(tmp_path)
    data = diagnose(tmp_path).to_dict()
    assert data["steps"]["program_share"] == pytest.approx(60 / 75) and data["steps"]["other_programs"] == []
    assert not any("holds only" in w for w in data["warnings"]) and data["devices"] == 1


def test_a_shared_program_name_is_a_usage_error_listing_ids_and_shares(tmp_path):
    b, _ = small_programs(duplicate_name=True)
    b.write(tmp_path)
    with pytest.raises(UsageError) as err:
        diagnose(tmp_path, program="jit_small_0")
    message = str(err.value)
    assert "2 programs have this name" in message
    assert "jit_small_0(100) 15%" in message and "jit_small_0(101) 11%" in message
    assert "program=jit_small_0(100) or program=100" in message  # the API's keyword, not the flag
    # Picked by id, it is that program.
    assert diagnose(tmp_path, program="jit_small_0(101)").analysis.steps.program_id == "101"
    result = CliRunner().invoke(main, [str(tmp_path), "-o", str(tmp_path / "r.json"), "--program", "jit_small_0"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1


def test_devices_with_events_on_a_multi_host_run(tmp_path):
    """Two hosts of 8 planes, each running on one: the per-host reduce path counts 2 devices, as one host's does."""
    for host, runs in (("t1v-n-a", (6, 2)), ("t1v-n-b", (6, 3))):  # not byte-identical: copies count once
        b, _ = small_programs(runs)
        b.host = host
        b.write(tmp_path)
    data = diagnose(tmp_path, workers=1).to_dict()
    assert data["devices"] == 2 and sorted(d["host"] for d in data["device_list"]) == ["t1v-n-a", "t1v-n-b"]
    assert any("14 of 16 device planes have no op event" in w for w in data["warnings"])
