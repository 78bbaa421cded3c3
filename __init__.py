"""xladiag: what is slow in an XLA program, why, and what to change."""

# The `compare` subpackage shares its name with the API function `xladiag.compare`: the import machinery
# binds a subpackage to this name when it is first imported, so it is imported first (it is light) and the
# function is defined after it. Its modules are still found through sys.modules (`xladiag.compare.ops`).
from . import compare as _compare_package  # noqa: F401

__version__ = "0.1.0"


def __getattr__(name):
    # The Python API loads pandas and the analyzer: import it on first use so `diagnose --help` stays instant.
    if name in ("diagnose", "profile", "Report"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'xladiag' has no attribute {name!r}")


def compare(base, new, **options):
    """Before/after of two captures or JSON reports: :func:`xladiag.api.compare` (same arguments)."""
    from .api import compare as run

    return run(base, new, **options)
