"""Where a collective's devices sit: the physical mesh a replica group spans, for the collective model.

The ring model prices each physical axis on its own links (``collectives.predict_collective``); this module
says which axes a group spans, how long each is, whether it is a full ring (wraparound), how many TPU slices
(DCN) or GPU NVLink domains (NIC) it crosses.

Topology, in order of trust: device coordinates from the capture (``coords``), ``--topology AxBxC``, the slice
name (``--chip v6e-256``), else a shape assumed from the device count (TPU slices are powers of two laid out
as in the Cloud TPU topology tables: 8 chips = 2x4, 16 = 4x4, 64 = 4x4x4, 256 = 16x16). A device id maps to
its chip's coordinates in row-major order of the slice shape (JAX's ``mesh_utils`` lays mesh axes along the
torus axes), and ids beyond one slice belong to the next slice. GPUs: a node (NVLink domain) holds the
catalog's ``scale_up_domain`` GPUs (default 8), ids fill nodes in order.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import numpy as np

from ...errors import UsageError
from ...parsers.hlo_replica_groups import HloParseError, parse_replica_group_list, parse_source_target_pairs
from ..chips.catalog import Chip, ChipCatalogError, load_catalog
from ..chips.names import find_chip

DEFAULT_GPUS_PER_NODE = 8
# DGX-1 V100 hybrid cube-mesh (NVIDIA's DGX-1 with V100 whitepaper, figure of the NVLink topology): NVLinks
# between each pair of a node's 8 GPUs; every GPU has 6. GPUs 0-3 and 4-7 are two fully joined quads (a
# cube's faces with their diagonals), GPU i joined to i+4; pairs absent here share no NVLink (PCIe only).
_CUBE_MESH_LINKS = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2,
                    (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}
_TOPOLOGY = re.compile(r"^\s*\d+(\s*x\s*\d+){0,2}\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Topology:
    """The physical layout collectives run on. TPU: ``shape`` of one slice in chips; GPU: ``per_node`` GPUs
    per NVLink domain. ``coords``: per-device chip coordinates (and slice) from the capture, when it has them."""

    kind: str  # 'torus' | 'switch' | 'none'
    source: str  # where the shape came from, said in every collective's note
    shape: tuple[int, ...] = ()
    per_node: int = DEFAULT_GPUS_PER_NODE
    coords: np.ndarray | None = None  # int array [device, len(shape) + 1]: coordinates, then slice index

    @property
    def slice_chips(self) -> int:
        return math.prod(self.shape) if self.shape else 0

    def describe(self) -> str:
        if self.kind == "torus" and self.shape:
            return f"{'x'.join(map(str, self.shape))} ({self.source})"
        if self.kind == "switch":
            return f"{self.per_node} GPUs per node ({self.source})"
        return self.source


@dataclass(frozen=True)
class Placement:
    """What one replica group spans. ``axes``: (devices along the axis, the axis' full length, wraparound)
    per physical torus axis the group spans; ``slices``: TPU slices it spans (>1: DCN); ``nodes`` and
    ``per_node``: GPU nodes it spans and its members per node (nodes > 1: the NIC)."""

    group_size: int
    axes: tuple[tuple[int, int, bool], ...] = ()
    slices: int = 1
    nodes: int = 1
    per_node: int = 0
    mesh_axes: str = ""  # the HLO's own mesh axes of the group ('a=4,b=2'), for the note
    note: str = ""
    # GPUs without an all-to-all switch (DGX-1 V100): the fewest NVLinks a member has to the group's other
    # members in its node, what each GPU's ring traffic gets; None: every pair at the GPU's whole bandwidth.
    links: int | None = None


def parse_topology(text: str) -> tuple[int, ...]:
    """'16x16' / '4x4x4' / '8' -> dims; ValueError with a one-line message otherwise."""
    if not isinstance(text, str) or not _TOPOLOGY.match(text):
        raise ValueError(f"--topology {text!r}: expected AxB or AxBxC (chips per torus axis, e.g. 16x16 or 4x4x4)")
    dims = tuple(int(d) for d in text.lower().replace(" ", "").split("x"))
    if min(dims) < 1 or math.prod(dims) > 2**20:
        raise ValueError(f"--topology {text!r}: every axis must be >= 1 and the slice at most 2^20 chips")
    return dims


def check_topology(topology: str, chip_name: str | None = None, chip_file=None) -> tuple[int, ...]:
    """``--topology`` parsed; ``UsageError`` when malformed or when it counts other chips than the slice a
    ``--chip`` slice name gives (``v6e-8`` with ``4x4``: 16 chips against 8). Before the capture is read."""
    try:
        shape = parse_topology(topology)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        named = find_chip(chip_name, load_catalog(chip_file)) if chip_name else None
    except ChipCatalogError:
        return shape  # said where the chip is chosen
    chips = math.prod(shape)
    if named is not None and named.slice_chips and chips != named.slice_chips:
        raise UsageError(f"--topology {topology!r} is {chips} chips, but --chip {chip_name!r} is a slice of "
                         f"{named.slice_chips}: give a topology of {named.slice_chips} chips, or leave one out")
    return shape


def default_slice_shape(chips: int, dims: int) -> tuple[int, ...]:
    """The shape Cloud TPU gives a slice of ``chips`` chips on a ``dims``-D torus: powers of two split as
    evenly as possible, longer axes last (8 -> 2x4, 256 -> 16x16, 32 -> 2x4x4, 64 -> 4x4x4); other counts
    one axis."""
    dims = max(int(dims or 1), 1)
    if chips < 1:
        return ()
    k = chips.bit_length() - 1
    if chips != 1 << k:
        return (1,) * (dims - 1) + (chips,)
    exps = [k // dims + (1 if i >= dims - k % dims else 0) for i in range(dims)]
    return tuple(1 << e for e in exps)


def resolve_topology(chip: Chip, *, topology: str | tuple[int, ...] | None = None, num_devices: int = 0,
                     coords: np.ndarray | None = None) -> Topology:
    """The topology collectives of this run are priced on (precedence: capture coordinates, --topology,
    slice name, assumed from the device count). ValueError for a malformed --topology."""
    if chip.interconnect == "switch":
        per_node = chip.scale_up_domain or chip.devices_per_node
        source = "chip table" if per_node else f"default {DEFAULT_GPUS_PER_NODE} GPUs per node"
        return Topology("switch", source, per_node=per_node or DEFAULT_GPUS_PER_NODE)
    if chip.interconnect != "torus":
        return Topology("none", "no interconnect")
    if coords is not None and len(coords):
        coords = np.asarray(coords, dtype=np.int64)
        shape = tuple(int(d) for d in coords[:, :-1].max(axis=0) + 1)
        return Topology("torus", "capture coordinates", shape, coords=coords)
    if topology is not None:
        shape = parse_topology(topology) if isinstance(topology, str) else tuple(int(d) for d in topology)
        return Topology("torus", "--topology", shape)
    if chip.slice_shape:
        return Topology("torus", "slice name", tuple(chip.slice_shape))
    if chip.slice_chips:
        return Topology("torus", "slice name", default_slice_shape(chip.slice_chips, chip.torus_dims or 2))
    chips = max(int(num_devices) // max(chip.devices_per_chip or 1, 1), 1)
    largest = chip.scale_up_domain or chips
    shape = default_slice_shape(min(chips, largest), chip.torus_dims or 2)
    what = f"assumed from {chips} chips" + (f", slices of {largest}" if chips > largest else "")
    return Topology("torus", what, shape)


def _chip_coords(ids: np.ndarray, topo: Topology, devices_per_chip: int) -> np.ndarray:
    """[len(ids), len(shape) + 1]: each device's chip coordinates and slice index."""
    if topo.coords is not None:
        ids = np.clip(ids, 0, len(topo.coords) - 1)
        return topo.coords[ids]
    chip = ids // max(devices_per_chip, 1)
    per_slice = max(topo.slice_chips, 1)
    within = np.stack(np.unravel_index(chip % per_slice, topo.shape), axis=1) if topo.shape else \
        np.zeros((len(ids), 0), dtype=np.int64)
    return np.concatenate([within, (chip // per_slice)[:, None]], axis=1)


def place_group(group: list[int] | np.ndarray, topo: Topology, chip: Chip) -> Placement:
    """Which axes / slices / nodes one group of device ids spans on ``topo``."""
    ids = np.asarray(group, dtype=np.int64)
    n = len(ids)
    if topo.kind == "switch":
        node = ids // max(topo.per_node, 1)
        nodes, counts = np.unique(node, return_counts=True)
        links = group_links(ids, topo.per_node) if chip.link_topology == "hybrid_cube_mesh" else None
        return Placement(n, nodes=len(nodes), per_node=int(counts.max()) if n else 0, links=links)
    if topo.kind != "torus" or not topo.shape:
        return Placement(n)
    at = _chip_coords(ids, topo, chip.devices_per_chip or 1)
    extents = [len(np.unique(at[:, d])) for d in range(at.shape[1])]
    slices = extents[-1]
    axes = []
    for extent, full in zip(extents[:-1], topo.shape):
        if extent > 1:
            # A full ring only when the group covers the whole axis and the chip has wraparound there.
            wrap = extent == full and chip.has_wraparound(full, topo.shape)
            axes.append((extent, full, bool(wrap)))
    note = ""
    spanned = math.prod(e for e, _, _ in axes) * slices
    chips_in_group = len(np.unique(ids // max(chip.devices_per_chip or 1, 1)))
    if spanned != chips_in_group:
        note = "group is not a sub-grid of the topology: priced on every axis it touches"
    return Placement(n, tuple(axes), slices=slices, note=note)


def group_links(ids: np.ndarray, per_node: int) -> int | None:
    """On a DGX-1 hybrid cube-mesh: the fewest NVLinks any member has to the other members of its node
    (the per-direction links a ring through the group can give each GPU: 6 for all 8, 4 for a quad, 1 or 2
    for a pair, 0 for a pair with no NVLink); None when the node is not the 8-GPU mesh."""
    if per_node != 8:
        return None
    by_node: dict[int, list[int]] = {}
    for d in np.unique(np.asarray(ids, dtype=np.int64)):
        by_node.setdefault(int(d) // 8, []).append(int(d) % 8)
    fewest = None
    for members in by_node.values():
        if len(members) < 2:
            continue
        for a in members:
            have = sum(_CUBE_MESH_LINKS.get((min(a, b), max(a, b)), 0) for b in members if b != a)
            fewest = have if fewest is None else min(fewest, have)
    return fewest


def group_placement(replica_groups: str | None, topo: Topology, chip: Chip, num_devices: int) -> Placement:
    """The placement of the first replica group of a ``replica_groups=`` attribute (all groups of a
    collective have the same shape in SPMD programs); no attribute or ``{}``: every device."""
    mesh_axes = ""
    try:
        listed = parse_replica_group_list(replica_groups) if replica_groups else None
    except HloParseError:
        listed = None
    if listed is None or listed.form == "all":
        group = np.arange(max(int(num_devices), 1))
    else:
        # The HLO's own axes (mesh form names, iota form iota_<dim>): said in the note.
        mesh_axes = ",".join(f"{a.name}={a.size}" for a in listed.group_axes)
        try:
            groups = listed.groups(num_devices)
        except (HloParseError, ValueError):
            groups = []
        group = np.asarray(groups[0] if groups and groups[0] else np.arange(max(int(num_devices), 1)))
    place = place_group(group, topo, chip)
    return dataclasses.replace(place, mesh_axes=mesh_axes)



def collective_placement(replica_groups: str | None, chip: Chip, num_devices: int, topology=None,
                         coords: np.ndarray | None = None, pairs: str | None = None) -> tuple[Placement, str]:
    """(placement, 'topology ...; mesh axes ...' note) of one collective. The device count is the larger
    of the capture's and the replica groups' own (a one-host capture sees only its devices). ``pairs``: a
    collective-permute's source_target_pairs, which cross a slice or node when any pair does."""
    total = num_devices
    try:
        listed = parse_replica_group_list(replica_groups) if replica_groups else None
        if listed is not None and listed.group_size and listed.num_groups:
            total = max(total, listed.group_size * listed.num_groups)
    except HloParseError:
        pass
    topo = resolve_topology(chip, topology=topology, num_devices=total, coords=coords)
    place = group_placement(replica_groups, topo, chip, total)
    if pairs:
        crossing = _crossing_pair(pairs, topo, chip)
        if crossing is not None:
            hop = place_group(crossing, topo, chip)
            place = Placement(place.group_size, hop.axes, hop.slices, hop.nodes, hop.per_node, links=hop.links)
    model = f"topology {topo.describe()}"
    if place.mesh_axes:
        model += f"; group spans mesh axes {place.mesh_axes}"
    return place, model


def _crossing_pair(text: str, topo: Topology, chip: Chip) -> list[int] | None:
    try:
        pairs = parse_source_target_pairs(text)
    except (HloParseError, ValueError):
        return None
    if not pairs:
        return None
    for pair in pairs:
        hop = place_group(list(pair), topo, chip)
        if hop.slices > 1 or hop.nodes > 1:
            return list(pair)
    return list(pairs[0])


def group_label(replica_groups: str | None, num_devices: int) -> str:
    """Which devices a collective's groups are, as one label: collectives over the same mesh axis share it
    whatever form their ``replica_groups`` are printed in ('8 devices (0-7)', '2 groups of 4 (0,2,4,6)'); no ':' in
    it, so it can be a finding's kind."""
    try:
        listed = parse_replica_group_list(replica_groups) if replica_groups else None
        groups = listed.groups(max(int(num_devices), 1)) if listed is not None else []
    except (HloParseError, ValueError):
        return str(replica_groups or "all devices").replace(":", "")
    if not groups:
        groups = [list(range(max(int(num_devices), 1)))]
    first = sorted(int(d) for d in groups[0])
    ids = (f"{first[0]}-{first[-1]}" if first == list(range(first[0], first[-1] + 1)) and len(first) > 2
           else ",".join(map(str, first[:8])) + (" ..." if len(first) > 8 else ""))
    what = f"{len(first)} devices" if len(groups) == 1 else f"{len(groups)} groups of {len(first)}"
    return f"{what} ({ids})"
