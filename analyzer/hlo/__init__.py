"""Facts from the HLO: dump discovery and matching, per-instruction kinds, layouts, FLOPs and bytes, control flow."""
