"""Replica groups in every form XLA prints (explicit, iota, mesh with quoted/bare axes, device_ids
and sub-axes), the axes a mesh group spans, and limits checked before anything is allocated."""

import tracemalloc

import pytest

from xladiag.parsers.hlo_replica_groups import (
    MAX_DEVICES,
    parse_replica_group_list,
    parse_replica_groups,
    parse_source_target_pairs,
)
from xladiag.parsers.hlo_tokens import HloParseError


def test_replica_groups_forms():
    assert parse_replica_groups("{{0,1,2,3},{4,5,6,7}}") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # iota(8) as [2,4] = [[0,1,2,3],[4,5,6,7]], transposed -> [[0,4],[1,5],[2,6],[3,7]].
    assert parse_replica_groups("[4,2]<=[2,4]T(1,0)") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_replica_groups("[2,4]<=[8]") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_replica_groups("[1,8]<=[8]") == [list(range(8))]
    assert parse_replica_groups("{}") == []
    assert parse_replica_groups("{}", num_devices=4) == [[0, 1, 2, 3]]
    # Mesh [a=2, b=4] over devices 0..7 row-major: b varies fastest.
    assert parse_replica_groups("mesh['a'=2,'b'=4] {'b'}") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_replica_groups("mesh['a'=2,'b'=4] {'a'}") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_replica_groups("mesh['a'=2,'b'=4] {'a','b'}") == [list(range(8))]
    # Sub-axis a:(1)2 is the major half of a=8: devices 4 apart.
    assert parse_replica_groups("mesh['a'=8] {'a':(1)2}") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_replica_groups("mesh['a'=8] {'a':(4)2}") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert parse_source_target_pairs("{{0,1},{1,2},{2,0}}") == [(0, 1), (1, 2), (2, 0)]


def test_mesh_form_exposes_axes_and_spanned_axes():
    # The MaxText DeepSeek-3 form: a group over axis_0 of an 8x1 mesh.
    rg = parse_replica_group_list("mesh['axis_0'=8,'axis_1'=1] {'axis_0'}")
    assert (rg.form, rg.group_size, rg.num_groups) == ("mesh", 8, 1)
    assert rg.mesh_axes == {"axis_0": 8, "axis_1": 1}
    assert [(a.name, a.size, a.axis_size, a.is_sub_axis) for a in rg.group_axes] == [("axis_0", 8, 8, False)]
    assert rg.groups() == [list(range(8))]
    # Two axes spanned: the group is their product; a sub-axis says its own size.
    two = parse_replica_group_list("mesh['data'=2,'fsdp'=4,'tensor'=2] {'fsdp','tensor'}")
    assert (two.group_size, two.num_groups) == (8, 2)
    assert [a.name for a in two.group_axes] == ["fsdp", "tensor"]
    sub = parse_replica_group_list("mesh['a'=8,'b'=2] {'a':(2)2}")
    assert (sub.group_size, sub.num_groups) == (2, 8)
    assert sub.group_axes[0].is_sub_axis and sub.group_axes[0].pre_size == 2


def test_mesh_form_variants_xla_prints():
    # Bare axis names (Mesh::ToString), explicit device ids, iota device ids with a transpose.
    assert parse_replica_groups("mesh[a=2,b=2] {b}") == [[0, 1], [2, 3]]
    assert parse_replica_groups("mesh['a'=2,'b'=2], device_ids=(3,2,1,0) {'b'}") == [[3, 2], [1, 0]]
    # device ids iota [2,2]<=[2,2]T(1,0) = 0,2,1,3 laid out as a=2 x b=2.
    assert parse_replica_groups("mesh['a'=2,'b'=2], device_ids=([2,2]<=[2,2]T(1,0)) {'b'}") == [[0, 2], [1, 3]]
    # Axes listed out of mesh order: the group runs over them in the printed order (XLA moves
    # the grouped axes last in that order), so {'b','a'} enumerates a fastest.
    assert parse_replica_groups("mesh['a'=2,'b'=2] {'b','a'}") == [[0, 2, 1, 3]]
    assert parse_replica_groups("mesh['a'=2,'b'=2] {'a','b'}") == [[0, 1, 2, 3]]
    # No axes: every device alone (a no-op reduction XLA allows).
    assert parse_replica_groups("mesh['a'=4] {}") == [[0], [1], [2], [3]]


def test_iota_and_explicit_sizes_without_building_groups():
    iota = parse_replica_group_list("[4,2]<=[2,4]T(1,0)")
    assert (iota.form, iota.group_size, iota.num_groups) == ("iota", 2, 4)
    # Groups [[0,4],[1,5],…] step over the major iota dim (size 2): that is the axis they span.
    assert iota.mesh_axes == {"iota_0": 2, "iota_1": 4}
    assert [(a.name, a.size) for a in iota.group_axes] == [("iota_0", 2)]
    two = parse_replica_group_list("[2,8]<=[2,2,4]T(1,0,2)")  # groups over iota_0 then iota_2
    assert [a.name for a in two.group_axes] == ["iota_0", "iota_2"]
    assert two.groups()[0] == [0, 1, 2, 3, 8, 9, 10, 11]
    assert parse_replica_group_list("[4,2]<=[8]").group_axes == ()  # a group cuts the one dim
    explicit = parse_replica_group_list("{{0,1,2},{3,4,5}}")
    assert (explicit.form, explicit.group_size, explicit.num_groups) == ("explicit", 3, 2)
    everyone = parse_replica_group_list("{}")
    assert everyone.form == "all" and everyone.group_size is None


@pytest.mark.parametrize("text, why", [
    ("[50000000,2]<=[100000000]", "100000000 devices"),
    ("[4,2]<=[99999999999]", "99999999999 devices"),
    ("mesh['a'=99999999999] {'a'}", "99999999999 devices"),
    ("mesh['a'=1048576,'b'=2] {'a'}", "2097152 devices"),
    ("[4,2]<=[9]", "does not hold 9 devices"),
    ("[4,2]<=[2,4]T(0,0)", "not a permutation"),
    ("mesh['a'=4] {'c'}", "unknown mesh axis"),
    ("mesh['a'=4] {'a':(3)2}", "does not divide"),
    ("mesh['a'=4], device_ids=(0,1) {'a'}", "lists 2 device_ids"),
    ("mesh['a'=0] {'a'}", "size 0"),
    ("{{0,1},{2,x}}", "not a replica group list"),
    ("{{0,1},{123456789012345678901}}", "21 digits"),
])
def test_hostile_groups_fail_before_allocating(text, why):
    tracemalloc.start()
    try:
        with pytest.raises(HloParseError, match=why) as info:
            parse_replica_groups(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(info.value)
    assert peak < 1_000_000  # refused from the printed sizes: nothing was built


def test_limit_admits_the_largest_real_jobs():
    rg = parse_replica_group_list("[128,1024]<=[131072]")  # 131,072 devices: above any job today
    assert rg.group_size == 1024 and len(rg.groups()) == 128
    assert MAX_DEVICES >= 131072
    with pytest.raises(HloParseError):
        parse_replica_group_list("{}").groups(num_devices=MAX_DEVICES + 1)
