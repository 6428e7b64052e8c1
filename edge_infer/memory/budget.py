"""The memory budget of a plan: activation arena plus kernel workspaces.

A budget comes from, in order: the ``memory_limit`` a Runtime is given, the one
``convert(memory_limit=...)`` recorded in the artifact (``meta["memory_limit"]``),
the target profile's ``memory_budget_mb``, else the memory psutil reports
available now. The CPU executor plans the arena first; what is left is the
workspace budget kernels read from ``ctx.workspace_budget`` to pick an algorithm
or tile size (im2col in bands of output rows). A plan that cannot fit even with
the smallest choices is refused before it runs, naming the least it needs.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np

from ..errors import EdgeInferError, InputError
from ..meminfo import read_meminfo


class MemoryBudgetError(EdgeInferError, MemoryError):
    """A plan does not fit the memory limit."""


_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30}


def parse_size(size: Union[int, str, None]) -> Optional[int]:
    """``"256MB"`` / ``"1.5G"`` / ``268435456`` -> bytes (binary units); None stays None."""
    if size is None or isinstance(size, (int, np.integer)):
        if size is not None and size <= 0:
            raise InputError(f"memory limit {size!r}: must be positive")
        return None if size is None else int(size)
    text = str(size).strip().upper().replace(" ", "")
    num = text.rstrip("KMGIB")
    unit = text[len(num):]
    try:
        if unit not in _UNITS:
            raise ValueError
        value = int(float(num) * _UNITS[unit])
    except ValueError:
        raise InputError(f"memory limit {size!r}: expected bytes or a size like '256MB'") from None
    if value <= 0:
        raise InputError(f"memory limit {size!r}: must be positive")
    return value


def mib(nbytes: float) -> str:
    """``12.3 MiB`` / ``48.0 KiB`` / ``512 B``: how budgets and needs are printed."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} B"


def default_memory_limit(meta: dict) -> Tuple[Optional[int], str]:
    """(bytes, where it came from) for a Runtime given no explicit limit."""
    recorded = meta.get("memory_limit")
    if recorded:
        return int(recorded), "artifact (convert --memory-limit)"
    target = meta.get("target") or {}
    if target.get("memory_budget_mb"):
        return int(float(target["memory_budget_mb"]) * 2**20), f"target {target.get('name', '?')}"
    avail = read_meminfo().get("available_bytes")    # Linux: /proc directly (psutil costs ~1 MB of RSS)
    if avail is not None:
        return avail, "available memory (/proc/meminfo, as psutil reports it)"
    try:
        import psutil
        return int(psutil.virtual_memory().available), "available memory (psutil)"
    except (ImportError, OSError):   # no psutil, or no /proc: unbounded
        return None, "unbounded"


def placeholder(shape, dtype) -> np.ndarray:
    """An array of ``shape`` backed by one element (all strides 0): what a workspace
    over the budget gets, so that prepare can go on counting what the plan would need
    without allocating it. The plan built on it is never run."""
    dt = np.dtype(dtype)
    shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    return np.lib.stride_tricks.as_strided(np.zeros(1, dt), shape, (0,) * len(shape), writeable=True)


def refusal(need: int, limit: int, arena: int, shapes=None, exact: bool = True) -> MemoryBudgetError:
    """The one-line error of a plan that does not fit."""
    where = f" with input shapes {dict(shapes)}" if shapes else ""
    if need == arena and not exact:
        return MemoryBudgetError(f"model needs at least {mib(need)} ({need:,} B){where}: its activation arena alone "
                                 f"(nothing to tile) is over the memory limit of {mib(limit)}")
    least = "at least " if not exact else ""
    return MemoryBudgetError(
        f"model needs {least}{mib(need)} ({need:,} B) for activations and workspace{where} (arena {mib(arena)}, "
        f"workspace {mib(max(0, need - arena))} with the smallest tiles); memory limit is {mib(limit)}")
