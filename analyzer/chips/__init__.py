"""Chips: the catalog of peak numbers with their sources (chips.toml), slice names, and which chip a capture ran on."""
