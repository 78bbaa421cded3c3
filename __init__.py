"""xladiag: what is slow in an XLA program, why, and what to change."""

__version__ = "0.1.0"
