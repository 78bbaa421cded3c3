"""History across runs (``diagnose history``, ``diagnose --record``): many reports in, one series out."""
