"""Reading the machine's memory from /proc: the lowest layer, so that the memory budget
(``memory/budget.py``) and the op layer's resource limits (``ops/resources.py``) ask it without
importing the hardware probe (``probe.py``, which re-exports ``read_meminfo``)."""
from __future__ import annotations

import os
import re
from typing import Any, Dict, Optional

__all__ = ["read_meminfo", "read_text"]


def read_text(path: str) -> Optional[str]:
    """The text of the file at ``path`` (NULs dropped, stripped), or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace").replace("\x00", "").strip()
    except OSError:
        return None


def read_meminfo(root: str = "/") -> Dict[str, Any]:
    """Total and available memory from ``root``/proc/meminfo (bytes and MB), or why not."""
    text = read_text(os.path.join(root, "proc/meminfo"))
    if text is None:
        return {"unavailable": "unavailable because /proc/meminfo is not readable"}
    vals = {}
    for line in text.splitlines():
        m = re.match(r"(\w+):\s+(\d+)\s*kB", line)
        if m:
            vals[m.group(1)] = int(m.group(2)) * 1024
    return {"total_bytes": vals.get("MemTotal"), "available_bytes": vals.get("MemAvailable"),
            "total_mb": round(vals.get("MemTotal", 0) / 2**20), "available_mb": round(vals.get("MemAvailable", 0) / 2**20)}
