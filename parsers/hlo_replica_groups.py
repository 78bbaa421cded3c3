"""Replica groups of collectives, in the forms XLA prints (``CollectiveDeviceList`` and friends).

``{{0,1},{2,3}}`` explicit lists (``{}``: one group of every device); ``[4,2]<=[2,4]T(1,0)`` iota
(4 groups of 2: iota over [2,4], transposed by (1,0), cut into rows); ``mesh['a'=4,'b'=2] {'b'}``
named mesh axes (``MeshAxesReplicaGroupList``: axis names quoted or bare, optional
``, device_ids=(…)``, sub-axes ``'a':(pre)size``). :func:`parse_replica_group_list` reads the
sizes without building the groups, and for the mesh form says which axes a group spans (the
collective cost model prices each axis on its own link); ``groups()`` builds them on demand.
Sizes are checked before any array is allocated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from .hlo_tokens import HloParseError, match_close, parse_int, parse_ints, split_top

__all__ = ["MeshAxis", "ReplicaGroupList", "parse_replica_group_list", "parse_replica_groups",
           "parse_mesh_axes", "parse_source_target_pairs", "MAX_DEVICES"]

# The largest jobs run on about 10^5 accelerators (multi-slice TPU pods, 100k-GPU clusters);
# 2^20 device ids leave ten times that and cost 8 MB as int64. Larger counts are damage.
MAX_DEVICES = 2**20

_IOTA = re.compile(r"\[([\d,\s]*)\]<=\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?")
_AXIS_REF = re.compile(r"""['"]?([^'":]+)['"]?(?::\((\d+)\)(\d+))?""")


@dataclass(frozen=True)
class MeshAxis:
    """A mesh axis one replica group spans: the whole axis, or the sub-axis ``name:(pre)size``
    (``size`` devices of the axis, after a major-side factor ``pre``, as XLA's SubAxis)."""

    name: str
    size: int  # devices along this axis within one group
    axis_size: int  # the mesh axis' full size
    pre_size: int = 1  # sub-axis: product of the axis' factors on its major side

    @property
    def is_sub_axis(self) -> bool:
        return self.size != self.axis_size


@dataclass(frozen=True)
class ReplicaGroupList:
    """What a ``replica_groups=`` value says, without the groups themselves.

    ``form``: explicit, iota, mesh or all (``{}``: every device in one group). ``group_size`` and
    ``num_groups`` are None only for ``all`` (the device count is the caller's)."""

    form: str
    group_size: int | None
    num_groups: int | None
    # Mesh form: every axis -> size in mesh order, and the axes one group spans as printed. Iota
    # form: the reshape dims as axes iota_0, iota_1 … and the ones a group spans, in group order.
    mesh_axes: dict = field(default_factory=dict)
    group_axes: tuple[MeshAxis, ...] = ()
    _build: object = field(default=None, repr=False, compare=False)

    def groups(self, num_devices: int | None = None) -> list[list[int]]:
        """The device ids of every group; ``all`` needs ``num_devices`` (else [])."""
        if self.form == "all":
            if not num_devices:
                return []
            _check_devices(num_devices, "device count")
            return [list(range(num_devices))]
        return self._build()


def _check_devices(count: int, what: str) -> None:
    if count > MAX_DEVICES:
        raise HloParseError(f"replica groups over {count} devices ({what}); the limit is {MAX_DEVICES}")


def _iota(dims: list[int], reshape: list[int], perm: list[int] | None, text: str):
    """Validated iota device list: returns a builder of the flat device ids in group order."""
    total = math.prod(reshape)
    _check_devices(total, "iota " + text[:40])
    if math.prod(dims) != total:
        raise HloParseError(f"iota list {text[:60]!r}: {dims} does not hold {total} devices")
    if perm is not None and sorted(perm) != list(range(len(reshape))):
        raise HloParseError(f"iota list {text[:60]!r}: T{tuple(perm)} is not a permutation")

    def flat() -> np.ndarray:
        arr = np.arange(total).reshape(reshape)
        return (arr.transpose(perm) if perm is not None else arr).reshape(-1)
    return flat


def _parse_iota(text: str) -> ReplicaGroupList:
    m = _IOTA.fullmatch(text.strip())
    if not m:
        raise HloParseError(f"not an iota replica group list: {text[:60]!r}")
    dims, reshape = parse_ints(m.group(1)), parse_ints(m.group(2))
    perm = parse_ints(m.group(3)) if m.group(3) is not None else None
    if len(dims) != 2 or not reshape or min(dims + reshape) < 1:
        raise HloParseError(f"iota list {text[:60]!r}: expected [groups,size]<=[positive dims]")
    flat = _iota(dims, reshape, perm, text)
    axes = {f"iota_{i}": size for i, size in enumerate(reshape)}
    return ReplicaGroupList("iota", dims[1], dims[0], axes, _iota_group_axes(reshape, perm, dims[1]),
                            _build=lambda: flat().reshape(dims).tolist())


def _iota_group_axes(reshape: list[int], perm: list[int] | None, group_size: int) -> tuple[MeshAxis, ...]:
    """The iota dims one group runs over: the trailing dims after the transpose whose sizes
    multiply to the group size (``[4,2]<=[2,4]T(1,0)`` spans iota_0 of size 2); () when a group
    cuts a dim in parts."""
    order = perm if perm is not None else list(range(len(reshape)))
    spanned, product = [], 1
    for d in reversed(order):
        if product == group_size:
            break
        product *= reshape[d]
        spanned.append(MeshAxis(f"iota_{d}", reshape[d], reshape[d]))
    return tuple(reversed(spanned)) if product == group_size else ()


def _mesh_devices(ids: str, count: int, text: str):
    """Builder of the mesh's device ids: iota by default, else ``device_ids=(…)``."""
    if not ids:
        return lambda: np.arange(count)
    ids = ids.strip()
    if "<=" in ids:
        m = _IOTA.fullmatch(ids)
        if not m:
            raise HloParseError(f"mesh device_ids {ids[:40]!r} in {text[:60]!r}")
        reshape = parse_ints(m.group(2))
        perm = parse_ints(m.group(3)) if m.group(3) is not None else None
        dims = parse_ints(m.group(1))
        if not reshape or min(reshape + dims) < 1 or math.prod(dims) != count:
            raise HloParseError(f"mesh device_ids {ids[:40]!r} do not match {count} devices")
        return _iota(dims, reshape, perm, text)
    values = parse_ints(ids)
    if len(values) != count:
        raise HloParseError(f"mesh of {count} devices lists {len(values)} device_ids: {text[:60]!r}")
    return lambda: np.array(values)


def _parse_mesh(text: str) -> ReplicaGroupList:
    start = text.find("mesh[")
    close = match_close(text, start + 4)
    if close < 0:
        raise HloParseError(f"unbalanced mesh: {text[:60]!r}")
    axes: dict[str, int] = {}
    for part in split_top(text[start + 5: close]):
        axis, eq, size = part.rpartition("=")
        name = axis.strip().strip("'\"")
        if not eq or not name or name in axes:
            raise HloParseError(f"mesh axis {part[:40]!r} in {text[:60]!r}")
        axes[name] = parse_int(size, "mesh axis size")
        if axes[name] < 1:
            raise HloParseError(f"mesh axis {name!r} has size {axes[name]}")
    rest = text[close + 1:].strip()
    ids = ""
    if rest.startswith(","):  # , device_ids=(…)
        key, _, value = rest[1:].partition("=")
        open_at = value.find("(")
        end = match_close(value, open_at) if key.strip() == "device_ids" and open_at >= 0 else -1
        if end < 0:
            raise HloParseError(f"mesh attribute {rest[:40]!r} in {text[:60]!r}")
        ids, rest = value[open_at + 1: end], value[end + 1:].strip()
    count = math.prod(axes.values()) if axes else 0
    if not axes:
        raise HloParseError(f"mesh without axes: {text[:60]!r}")
    _check_devices(count, "mesh " + text[:40])
    devices = _mesh_devices(ids, count, text)
    if not (rest.startswith("{") and rest.endswith("}")):
        raise HloParseError(f"mesh replica groups without {{axes}}: {text[:60]!r}")
    refs = []
    for ref in split_top(rest[1:-1]):
        m = _AXIS_REF.fullmatch(ref.strip())
        if not m or m.group(1).strip() not in axes:
            raise HloParseError(f"unknown mesh axis {ref[:40]!r} in {text[:60]!r}")
        name, full = m.group(1).strip(), axes[m.group(1).strip()]
        pre, size = ((parse_int(m.group(2)), parse_int(m.group(3))) if m.group(2) else (1, full))
        if pre < 1 or size < 1 or full % (pre * size):
            raise HloParseError(f"sub-axis {ref[:40]!r} does not divide axis {name}={full}")
        refs.append(MeshAxis(name, size, full, pre))
    group_size = math.prod(r.size for r in refs)
    return ReplicaGroupList("mesh", group_size, count // group_size, dict(axes), tuple(refs),
                            _build=lambda: _mesh_groups(axes, refs, devices(), group_size))


def _mesh_groups(axes: dict, refs: list[MeshAxis], devices: np.ndarray, group_size: int):
    # As XLA's MeshAxesReplicaGroupList: each mesh axis is split into its referenced sub-axes
    # (and the factors between them), the referenced pieces are moved last in the printed order,
    # and the flattened device array is cut into groups.
    reshape, piece_of = [], {}
    for name, full in axes.items():
        mine = sorted((r.pre_size, i) for i, r in enumerate(refs) if r.name == name)
        done = 1
        for pre, i in mine:
            if pre != done:
                reshape.append(pre // done)
                done = pre
            piece_of[i] = len(reshape)
            reshape.append(refs[i].size)
            done *= refs[i].size
        if done != full or not mine:
            reshape.append(full // done)
    grouped = [piece_of[i] for i in range(len(refs))]
    perm = [d for d in range(len(reshape)) if d not in grouped] + grouped
    return devices.reshape(reshape).transpose(perm).reshape(-1, group_size).tolist()


def _parse_explicit(text: str) -> ReplicaGroupList:
    if not re.fullmatch(r"[{}\d,\s]*", text):
        raise HloParseError(f"not a replica group list: {text[:60]!r}")
    inner = text[1:-1] if text.startswith("{{") else text
    groups = [parse_ints(g) for g in re.findall(r"\{([^{}]*)\}", inner)]
    groups = [g for g in groups if g]
    if not groups:
        return ReplicaGroupList("all", None, None)
    sizes = {len(g) for g in groups}
    return ReplicaGroupList("explicit", sizes.pop() if len(sizes) == 1 else None, len(groups),
                            _build=lambda: [list(g) for g in groups])


def parse_replica_group_list(attr_text: str) -> ReplicaGroupList:
    """Read a ``replica_groups=`` value (any form); HloParseError if it is malformed or names
    more than :data:`MAX_DEVICES` devices."""
    text = attr_text.strip()
    if "mesh[" in text:
        return _parse_mesh(text)
    if "<=" in text:
        return _parse_iota(text)
    return _parse_explicit(text)


def parse_replica_groups(attr_text: str, num_devices: int | None = None) -> list[list[int]]:
    """Device groups of a ``replica_groups=`` value, in any of XLA's printed forms.

    ``{}`` means one group of every device: it returns [] unless ``num_devices`` is given,
    then [[0 … num_devices-1]].
    """
    return parse_replica_group_list(attr_text).groups(num_devices)


def parse_mesh_axes(text: str) -> dict[str, int]:
    """Axis sizes of a ``mesh['axis_0'=4,'axis_1'=2] {...}`` replica-group attribute ({} otherwise)."""
    return parse_replica_group_list(text).mesh_axes if "mesh[" in text else {}


def parse_source_target_pairs(attr_text: str) -> list[tuple[int, int]]:
    """``{{0,1},{1,2}}`` of a collective-permute as (source, target) pairs."""
    return [tuple(parse_ints(p)) for p in re.findall(r"\{(-?\d+\s*,\s*-?\d+)\}", attr_text)]
