"""HLO shapes: padded sizes on tiled layouts, tuple/dynamic/sub-byte kinds, and the limits that
refuse damaged shapes with one HloParseError before any work is done."""

import pytest

from xladiag.parsers.hlo_shapes import parse_shape, shape_end
from xladiag.parsers.hlo_tokens import HloParseError


def test_padded_bytes_tpu_tiles():
    # 3x100 bf16 pads to one 8x128 tile: 1024 elements x 2 bytes.
    s = parse_shape("bf16[3,100]{1,0:T(8,128)(2,1)}")
    assert (s.logical_bytes, s.padded_bytes) == (600, 2048)
    assert s.tiles == ((8, 128), (2, 1)) and s.layout == (1, 0)
    # The (2,1) packing re-tiles the 128 tile, it must not double a rank-1 buffer.
    assert parse_shape("bf16[4096]{0:T(1024)(128)(2,1)}").padded_bytes == 8192
    assert parse_shape("bf16[100]{0:T(1024)(128)(2,1)}").padded_bytes == 2048
    # Layout order matters: {0,1} makes dim 0 minor, so [4096,4] is stored as 4 rows of 4096.
    assert parse_shape("f32[4096,4]{0,1:T(4,128)}").padded_bytes == 4096 * 4 * 4
    assert parse_shape("f32[4,4096]{1,0:T(8,128)}").padded_bytes == 8 * 4096 * 4
    assert parse_shape("f32[5,3]{0,1:T(8,128)}").padded_bytes == 8 * 128 * 4
    # Scalars: a T(128) scalar occupies a 128-element tile; SMEM S(2) has no tiles.
    scalar = parse_shape("f32[]{:T(128)}")
    assert scalar.dims == () and scalar.padded_bytes == 512
    smem = parse_shape("s32[]{:T(128)S(2)}")
    assert smem.memory_space == 2 and smem.padded_bytes == 512
    assert parse_shape("u32[]{:S(2)}").padded_bytes == 4


def test_shape_kinds():
    t = parse_shape("(f32[8]{0}, s32[]{:S(2)}, /*index=2*/bf16[2,3])")
    assert t.is_tuple and len(t.elements) == 3
    assert t.padded_bytes == 32 + 4 + 12 and t.num_elements == 8 + 1 + 6
    nested = parse_shape("((s8[64]{0}), s8[16]{0:S(1)}, s32[]{:S(2)})")
    assert nested.elements[0].is_tuple and nested.elements[1].memory_space == 1
    dyn = parse_shape("f32[<=8,4]{1,0}")
    assert dyn.dims == (8, 4) and dyn.dynamic_dims == (True, False)
    assert parse_shape("s4[1024]{0}").logical_bytes == 512
    assert parse_shape("s4[1024]").element_bytes == 0.5
    assert parse_shape("f8e4m3fn[16,16]").logical_bytes == 256
    assert parse_shape("pred[10]").element_bytes == 1
    assert parse_shape("c64[2]").logical_bytes == 16
    assert parse_shape("token[]").padded_bytes == 0
    assert parse_shape("f32[2,3]").layout is None
    host = parse_shape("f32[1024]{0:T(1024)S(5)}")
    assert host.memory_space == 5 and host.layout_str == "{0:T(1024)S(5)}"
    assert parse_shape("bf16[3,100]{1,0:T(8,128)(2,1)S(1)}").layout_str == "{1,0:T(8,128)(2,1)S(1)}"


def test_layouts_xla_prints_beyond_tiles():
    # E(4): 4-bit elements stored packed; the physical shape P(...) nests its own tiles, which
    # must not be taken for this layout's.
    packed = parse_shape("s8[256]{0:T(1024)E(4)}")
    assert packed.element_size_bits == 4 and packed.padded_bytes == 512
    nested = parse_shape("f32[8,128]{1,0:T(8,128)S(1)P(s32[4]{0:T(256)})}")
    assert nested.tiles == ((8, 128),) and nested.memory_space == 1
    assert shape_end("f32[8,128]{1,0:P(s32[4]{0:T(256)})} add(") == len("f32[8,128]{1,0:P(s32[4]{0:T(256)})}")
    assert parse_shape("f32[?,4]{1,0}").dims == (-1, 4)


@pytest.mark.parametrize("text, why", [
    ("f32[4]{1,0:T(8,128)}", "does not order the 1 dims"),  # layout names more dims than the shape
    ("f32[4,4]{0,0}", "does not order the 2 dims"),
    ("f32[4]{0:T(0)}", "below 1"),
    ("f32[99999999999999999999]", "20 digits"),
    ("f32[-4]", "negative"),
    ("f32[4294967296,4294967296]", r"2\^63"),
    ("f32[4,4]{1,0:T(4294967296,4294967296)}", r"2\^63"),  # padding, not the logical size, overflows
    ("q7[3]", "unknown element type"),
    ("(" * 1000 + "f32[]" + ")" * 1000, r"nested 100\d deep \(limit 64\)"),
    ("(f32[], s32[]", "unbalanced"),
], ids=lambda v: v[:30] if isinstance(v, str) else v)
def test_damaged_shapes_are_one_line_errors(text, why):
    with pytest.raises(HloParseError, match=why) as info:
        parse_shape(text)
    assert "\n" not in str(info.value)


def test_nesting_within_the_limit_parses():
    deep = "(" * 60 + "f32[2]{0}" + ")" * 60
    shape = parse_shape(deep)
    assert shape.is_tuple and shape.padded_bytes == 8
