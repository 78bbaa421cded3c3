"""Replica groups of collectives, in the three forms XLA prints.

``{{0,1},{2,3}}`` explicit lists; ``[4,2]<=[2,4]T(1,0)`` iota (compact: reshape, transpose, cut
into rows); ``mesh['a'=4,'b'=2] {'b'}`` named mesh axes. Also the source/target pairs of a
collective-permute.
"""

from __future__ import annotations

import math
import re

import numpy as np

from .hlo_tokens import parse_ints, split_top

__all__ = ["parse_replica_groups", "parse_mesh_axes", "parse_source_target_pairs"]

_IOTA = re.compile(r"\[([\d,\s]+)\]<=\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?")
_MESH = re.compile(r"mesh\[(?P<axes>[^\]]*)\](?:\s*,\s*device_ids=\((?P<ids>[^)]*)\))?"
                   r"\s*(?:\{(?P<groups>[^}]*)\})?")


def _iota_array(text: str) -> np.ndarray:
    """``[4,2]<=[2,4]T(1,0)``: iota over the reshape dims, transposed, reshaped to the dims."""
    m = _IOTA.search(text)
    if not m:
        raise ValueError(f"not an iota list: {text!r}")
    dims, reshape = parse_ints(m.group(1)), parse_ints(m.group(2))
    arr = np.arange(math.prod(reshape)).reshape(reshape)
    if m.group(3):
        arr = arr.transpose(parse_ints(m.group(3)))
    return arr.reshape(dims)


def parse_mesh_axes(text: str) -> dict[str, int]:
    """Axis sizes of a ``mesh['axis_0'=4,'axis_1'=2] {...}`` replica-group attribute."""
    m = _MESH.search(text)
    if not m:
        return {}
    out = {}
    for part in m.group("axes").split(","):
        axis, _, size = part.rpartition("=")
        out[axis.strip().strip("'\"")] = int(size)
    return out


def _mesh_groups(text: str) -> list[list[int]]:
    # Devices laid out over the mesh axes; each named axis (or sub-axis 'a':(pre)size) is moved
    # last and the flattened array is cut into groups, as XLA's MeshAxesReplicaGroupList does.
    m = _MESH.search(text)
    axes = parse_mesh_axes(text)
    names, sizes = list(axes), list(axes.values())
    ids = m.group("ids")
    if ids and "<=" in ids:
        devices = _iota_array(ids).reshape(-1)
    elif ids:
        devices = np.array(parse_ints(ids))
    else:
        devices = np.arange(math.prod(sizes))
    refs: dict[int, list[tuple[int, int]]] = {}
    for ref in split_top(m.group("groups") or ""):
        sub = re.fullmatch(r"['\"]?([^'\":]+)['\"]?(?::\((\d+)\)(\d+))?", ref.strip())
        if not sub or sub.group(1) not in axes:
            raise ValueError(f"unknown mesh axis {ref!r} in {text!r}")
        idx = names.index(sub.group(1))
        pre, size = (int(sub.group(2)), int(sub.group(3))) if sub.group(2) else (1, sizes[idx])
        refs.setdefault(idx, []).append((pre, size))
    reshape, grouped = [], []
    for idx, full in enumerate(sizes):
        parts = sorted(refs.get(idx, []))
        if not parts:
            reshape.append(full)
            continue
        done = 1
        for pre, size in parts:
            if pre != done:
                reshape.append(pre // done)
                done = pre
            grouped.append(len(reshape))
            reshape.append(size)
            done *= size
        if done != full:
            reshape.append(full // done)
    group_size = math.prod(reshape[g] for g in grouped)
    perm = [i for i in range(len(reshape)) if i not in grouped] + grouped
    return devices.reshape(reshape).transpose(perm).reshape(-1, group_size).tolist()


def parse_replica_groups(attr_text: str, num_devices: int | None = None) -> list[list[int]]:
    """Device groups of a ``replica_groups=`` value, in any of XLA's three printed forms.

    ``{{0,1},{2,3}}`` explicit; ``[4,2]<=[2,4]T(1,0)`` iota (groups are the rows of iota over
    [2,4] transposed by (1,0) and reshaped to [4,2]); ``mesh['a'=4,'b'=2] {'b'}`` named mesh.
    ``{}`` means one group of every device: it returns [] unless ``num_devices`` is given,
    then [[0 … num_devices-1]].
    """
    text = attr_text.strip()
    if "mesh[" in text:
        return _mesh_groups(text)
    if "<=" in text:
        return _iota_array(text).reshape(parse_ints(_IOTA.search(text).group(1))[0], -1).tolist()
    groups = [parse_ints(g) for g in re.findall(r"\{([^{}]*)\}", text[1:-1] if text.startswith("{{")
                                                  else text)]
    groups = [g for g in groups if g]
    if not groups:
        return [list(range(num_devices))] if num_devices else []
    return groups


def parse_source_target_pairs(attr_text: str) -> list[tuple[int, int]]:
    """``{{0,1},{1,2}}`` of a collective-permute as (source, target) pairs."""
    return [tuple(parse_ints(p)) for p in re.findall(r"\{(-?\d+\s*,\s*-?\d+)\}", attr_text)]
