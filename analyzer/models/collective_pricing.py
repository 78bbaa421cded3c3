"""Collectives priced on the chip's links: each collective op's place on the mesh and its ring-model time.

The HLO facts (``hlo/facts.py``) say what a collective is (kind, replica groups, payload); where its group
sits (torus axes, slices, GPU nodes) and how long it takes depend on the chip, the device count and the
topology, so they are added here, beside the roofline that prices every other op.
"""

from __future__ import annotations

import pandas as pd

from ..chips.catalog import Chip
from .collectives import predict_collective
from .topology import collective_placement, group_label

PRICED_COLUMNS = ("replica_group_size", "collective_bytes", "collective_axis", "collective_predicted_s",
                  "collective_bandwidth_s", "collective_latency_s", "collective_per_hop_bytes",
                  "collective_bound_by", "collective_model")


def price_collectives(ops: pd.DataFrame, chip: Chip, num_devices: int, topology: str | None = None) -> pd.DataFrame:
    """``ops`` (with the HLO facts) plus :data:`PRICED_COLUMNS`; NaN/None for ops that are no priced collective."""
    out = ops.copy()
    priced = [_price(kind, payload, groups, pairs, chip, num_devices, topology) if payload == payload else {}
              for kind, payload, groups, pairs in zip(out["collective_kind"], out["collective_payload"],
                                                      out["replica_groups"], out["source_target_pairs"])]
    frame = pd.DataFrame(priced, index=out.index, columns=list(PRICED_COLUMNS))
    for col in PRICED_COLUMNS:
        numeric = col not in ("collective_axis", "collective_bound_by", "collective_model")
        out[col] = frame[col].astype(float) if numeric else frame[col].where(frame[col].notna(), None)
    return out


def _price(kind: str, payload: float, groups, pairs, chip: Chip, num_devices: int, topology) -> dict:
    """One collective op (a synchronous op or a done op; a done op carries its start's groups)."""
    groups, pairs = (v if isinstance(v, str) else None for v in (groups, pairs))  # a frame's None reads as NaN
    place, model = collective_placement(groups, chip, num_devices, topology, pairs=pairs)
    group = place.group_size
    # Which mesh axis: its devices, whatever form the groups are printed in.
    facts = {"collective_axis": group_label(groups, max(num_devices, group))}
    if kind == "all-to-all":
        payload *= group  # the model is given the global array
    facts.update(replica_group_size=group, collective_bytes=payload)
    if payload > 0 and group > 0:
        try:
            pred = predict_collective(kind, payload, group, chip, placement=place)
        except ValueError:
            pred = None
        if pred is not None:
            facts.update(
                collective_predicted_s=pred.predicted_s,
                collective_bandwidth_s=pred.bandwidth_s,
                collective_latency_s=pred.latency_s,
                collective_per_hop_bytes=pred.per_hop_bytes,
                collective_bound_by=pred.bound_by,
                collective_model="; ".join(p for p in (model, pred.note) if p),
            )
    return facts


def network_assumption(chip: Chip, ops: pd.DataFrame) -> str:
    """'' unless the network across GPU nodes bounds one of ``ops``' collectives: then the per-GPU figure
    that priced it and where it came from, for the finding's own words (a DGX figure may not be your fabric)."""
    if not (ops["collective_bound_by"] == "network").any() or not chip.dcn_bytes_per_s:
        return ""
    source = chip.number_sources.get("dcn_bytes_per_s", "chip table")
    short = source.removeprefix("chip table (").split(";")[0].rstrip(")")
    return (f"assumes {chip.dcn_bytes_per_s / 1e9:.3g} GB/s per GPU across nodes ({short}); pass --chip-file "
            "with your fabric's dcn_bytes_per_s")


__all__ = ["PRICED_COLUMNS", "network_assumption", "price_collectives"]
