"""xladiag: what is slow in an XLA program, why, and what to change."""

__version__ = "0.1.0"


def __getattr__(name):
    # The Python API loads pandas and the analyzer: import it on first use so `diagnose --help` stays instant.
    if name in ("diagnose", "compare", "profile", "Report"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'xladiag' has no attribute {name!r}")
