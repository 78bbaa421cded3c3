"""``python -m xladiag ...`` is the ``diagnose`` command (``python -m xladiag compare BASE NEW`` too)."""

from .cli import main

if __name__ == "__main__":  # pragma: no cover - run as a module only
    main(prog_name="diagnose")
