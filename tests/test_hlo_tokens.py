"""The bracket scanner's regex fast paths (match_close, split_top) answer exactly as the character walk does:
on random bracket/quote/escape soup, past the fast path's depth limit, and on an unterminated string."""

from __future__ import annotations

import random

import pytest

from xladiag.parsers.hlo_instruction import parse_instruction
from xladiag.parsers.hlo_tokens import Brackets, match_close, split_top


def _walk_close(text: str, start: int) -> int:
    for i, ch, level in Brackets().walk(text, start):
        if level == 0 and ch != ",":
            return i
    return -1


def _walk_split(text: str) -> list[str]:
    parts, last = [], 0
    for i, ch, level in Brackets().walk(text):
        if level == 0 and ch == ",":
            parts.append(text[last:i])
            last = i + 1
    parts.append(text[last:])
    return [p.strip() for p in parts if p.strip()]


def test_fast_paths_agree_with_the_walk_on_random_text():
    rng = random.Random(7)
    alphabet = "()[]{}((]},,,\"'\\ a\n"
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        assert split_top(text) == _walk_split(text), text
        for start in range(len(text)):
            assert match_close(text, start) == _walk_close(text, start), (text, start)


@pytest.mark.parametrize("text", [
    "(" * 12 + "x" + ")" * 12 + ", b",            # deeper than the regex's levels: the walk decides
    'a, "x\\", y", (b, c)]}, d',                  # escaped quote in a string, then stray closers
    "f(a, 'open string, b",                        # a string that never closes
    'k={"a": [1, {"b": (2, 3)}]}, m="},{", n=1',  # brackets and commas inside strings
])
def test_edge_cases_agree(text):
    assert split_top(text) == _walk_split(text)
    for start in range(len(text)):
        assert match_close(text, start) == _walk_close(text, start)


def test_instruction_with_nested_config_parses_the_same_attributes():
    line = ('%fusion.1 = (bf16[8,128]{1,0:T(8,128)(2,1)}, f32[]) fusion(bf16[8,128]{1,0} %p.0, f32[] %c), '
            'kind=kOutput, calls=%fc.1, backend_config={"a":[{"b":"x,y"}],"c":"}"}, '
            'metadata={op_name="jit(f)/dot" source_file="m.py" source_line=12}')
    ins = parse_instruction(line)
    assert ins.operand_names == ("p.0", "c")
    assert ins.attrs["backend_config"] == '{"a":[{"b":"x,y"}],"c":"}"}'
    assert (ins.op_name, ins.source_file, ins.source_line) == ("jit(f)/dot", "m.py", 12)
    assert ins.shape.is_tuple and len(ins.shape.elements) == 2
