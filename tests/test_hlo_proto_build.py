"""An HloProto's module built from its printed pieces equals the text parser's reading of the printed text:
instructions, attributes (and their order), tables, warnings. A piece the parser may read otherwise (names
with spaces, configs that are not JSON, line breaks in strings) sends the whole module through the text."""

from __future__ import annotations

import warnings

import pytest

from conftest import CPU_SAMPLE, GPU_SAMPLE, TPU_SAMPLE, only_xplane
from xladiag.parsers import hlo_proto
from xladiag.parsers.hlo_proto_build import build_module
from xladiag.parsers.hlo_proto_schema import HloProto
from xladiag.parsers.hlo_text import HloParseError, parse_hlo_module
from xladiag.parsers.xplane import read_xspace


def _carried():
    for sample in (CPU_SAMPLE, GPU_SAMPLE, TPU_SAMPLE):
        for pid, name, data in read_xspace(only_xplane(sample)).hlo_protos:
            yield f"{sample.name}:{name}({pid})", data


def _read(parse):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            module = parse()
        except HloParseError as exc:
            return None, str(exc), []
    return module, "", [str(w.message) for w in caught]


def _assert_same(built, parsed):
    (a, a_error, a_notes), (b, b_error, b_notes) = built, parsed
    assert (a_error, a_notes) == (b_error, b_notes)
    if b is None:
        return
    assert a == b and a._by_name == b._by_name and a.call_cycles == b.call_cycles
    for ca, cb in zip(a.computations.values(), b.computations.values(), strict=True):
        assert ca.execution_thread == cb.execution_thread
        for ia, ib in zip(ca.instructions, cb.instructions, strict=True):
            assert ia == ib and list(ia.attrs.items()) == list(ib.attrs.items()), ib.name


def _both(data: bytes, source: str):
    built = _read(lambda: hlo_proto.parse_hlo_proto(data, source))
    parsed = _read(lambda: parse_hlo_module(hlo_proto.hlo_proto_to_text(data, source), source=source))
    return built, parsed


def test_every_carried_module_is_built_without_the_text_and_equals_its_reading():
    seen = 0
    for source, data in _carried():
        assert build_module(hlo_proto._printed(data, source), source) is not None, source
        _assert_same(*_both(data, source))
        seen += 1
    assert seen >= 10


def _cpu_proto() -> HloProto:
    _, _, data = read_xspace(only_xplane(CPU_SAMPLE)).hlo_protos[0]
    proto = HloProto()
    proto.ParseFromString(data)
    return proto


def _first(proto: HloProto, opcode: bytes):
    for comp in proto.hlo_module.computations:
        for ins in comp.instructions:
            if ins.opcode == opcode:
                return comp, ins
    raise AssertionError(opcode)


def _name_with_space(p):
    _first(p, b"fusion")[1].name = b"fusion one"


def _config_not_json(p):
    _first(p, b"fusion")[1].backend_config = b'{"a": [1, 2}, "b": "x'


def _config_with_spaces(p):
    _first(p, b"fusion")[1].backend_config = b'  {"a": 1}  '


def _kind_with_comma(p):
    _first(p, b"fusion")[1].fusion_kind = b"kLoop, calls=%other"


def _line_break_in_op_name(p):
    _first(p, b"fusion")[1].metadata.op_name = "jit(f)/a\u2028b".encode()


def _carriage_return_in_config(p):
    _first(p, b"fusion")[1].backend_config = b'{"a":\r1}'


def _computation_name_with_paren(p):
    p.hlo_module.computations[0].name = b"body(x"


def _negative_parameter(p):
    _first(p, b"parameter")[1].parameter_number = -3


def _unknown_element_type(p):
    _first(p, b"fusion")[1].shape.element_type = 99


def _no_entry(p):
    p.hlo_module.entry_computation_id = 987654


@pytest.mark.parametrize("damage", [
    _name_with_space, _config_not_json, _config_with_spaces, _kind_with_comma, _line_break_in_op_name,
    _carriage_return_in_config, _computation_name_with_paren, _negative_parameter, _unknown_element_type,
    _no_entry,
])
def test_a_piece_the_text_reads_otherwise_goes_through_the_text(damage):
    proto = _cpu_proto()
    damage(proto)
    data = proto.SerializeToString()
    assert build_module(hlo_proto._printed(data, "d.pb"), "d.pb") is None
    _assert_same(*_both(data, "d.pb"))


def test_plain_json_config_and_quoted_strings_are_built():
    proto = _cpu_proto()
    _, fusion = _first(proto, b"fusion")
    fusion.backend_config = b'{"outer": {"x": [1, "a,b}"], "y": "q\\"uote\'s"}}'
    fusion.metadata.op_name = b'jit(f)/x "quoted", {brace'
    data = proto.SerializeToString()
    module = build_module(hlo_proto._printed(data, "p.pb"), "p.pb")
    assert module is not None
    built = module.instruction(fusion.name.decode())
    assert built.attrs["backend_config"] == fusion.backend_config.decode()
    assert built.op_name == 'jit(f)/x "quoted", {brace'
    _assert_same(*_both(data, "p.pb"))
