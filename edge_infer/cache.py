"""Where edge_infer keeps what it measured or probed on this device (throughput profiles,
timings, probe answers): below the picker (which re-exports ``cache_dir``) and the probe guard,
so that neither imports the other for it."""
from __future__ import annotations

import os

__all__ = ["cache_dir"]


def cache_dir() -> str:
    """Where the picker keeps throughput profiles and measured timings."""
    d = os.environ.get("EDGE_INFER_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "edge_infer")
    return d
