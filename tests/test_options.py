"""One Options object: every option has one name in the command, the API and the layers below."""

from __future__ import annotations

import pytest

from xladiag import api
from xladiag.cli import compare_main, main
from xladiag.options import NAMES, Options


def test_every_command_argument_is_an_option_by_the_same_name():
    for command, positional in ((main, set()), (compare_main, {"base", "new"})):
        names = {p.name for p in command.params} - positional - {"version"}
        assert names <= set(NAMES), names - set(NAMES)
    assert set(api.DIAGNOSE_KEYWORDS) <= set(NAMES) and set(api.COMPARE_KEYWORDS) <= set(NAMES)


def test_flat_names_reach_their_group_and_unknown_ones_are_refused():
    options = Options.of(steps="2:5", chip="v6e", format="json", min_mfu=0.3, select="a,b")
    assert (options.capture.steps, options.hardware.chip, options.output.format) == ("2:5", "v6e", "json")
    assert options.gates.of_report()["min_mfu"] == 0.3 and options.rules.select == "a,b"
    assert options.replace(chip=None).hardware.chip is None and options.hardware.chip == "v6e"  # frozen
    assert options.get("steps") == "2:5"
    with pytest.raises(TypeError, match="step_range"):
        Options.of(step_range="2:5")


@pytest.mark.parametrize("call", [lambda: api.diagnose("x", step_range="1:2"), lambda: api.compare("a", "b", fmt="x")])
def test_the_api_refuses_an_unknown_keyword_before_any_work(call):
    with pytest.raises(TypeError, match=r"\(\) got an unexpected keyword argument"):
        call()
