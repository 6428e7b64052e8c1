"""Keep the artifact's weight pages out of the resident set when nothing needs them.

Weights are read-only views of the artifact's mmap (a shared file mapping). Pages
of it that the process touched count in its RSS until unmapped, although the kernel
could drop them at any time and read them back from the page cache. Two passes
touch every weight once and never again: the CRC check at load, and packing at
prepare (kernels that transpose weights keep their own packed copy). After each,
``drop_pages`` tells the kernel (madvise MADV_DONTNEED) that this process no longer
needs those pages: the RSS falls back, the data stays in the page cache, and a
kernel that reads a weight directly at run time simply maps its pages back on first
touch. Pages of a file map come in folios of up to 2 MB on current kernels (ext4's large
folios): one read of a 200-byte bias maps the whole folio around it, weights already
packed included, and dropping the bias's own page leaves the rest mapped. So a plan, once
prepared, drops its weight maps whole (``drop_maps``), and kernels that read a small
constant at run time read their own copy (``private_copy``) rather than the map. Only file-backed, read-only mappings are ever advised (on anonymous memory
DONTNEED would zero the data); elsewhere (no madvise) this does nothing.
"""
from __future__ import annotations

import mmap
from typing import Iterable, Optional, Tuple

import numpy as np

_PAGE = mmap.PAGESIZE
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


def _file_map(arr: np.ndarray) -> Optional[mmap.mmap]:
    """The open, read-only ``mmap.mmap`` at the end of ``arr``'s base chain, else None (a
    writable map is never advised: its pages may hold data the file does not)."""
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if not isinstance(base, mmap.mmap) or getattr(base, "closed", False):
        return None
    with memoryview(base) as view:
        return base if view.readonly else None


def mapped_range(arr: np.ndarray) -> Optional[Tuple[mmap.mmap, int, int]]:
    """(map, offset, length) of an array that is a view of a read-only ``mmap.mmap``, else None."""
    base = _file_map(arr)
    if base is None:
        return None
    try:
        start = np.frombuffer(base, np.uint8, count=1).ctypes.data
    except (ValueError, TypeError):
        return None
    return base, arr.ctypes.data - start, arr.nbytes


def drop_range(mm: mmap.mmap, offset: int, length: int) -> None:
    """Advise the kernel that ``mm[offset:offset + length]`` (widened to whole pages) is not needed."""
    if _DONTNEED is None or length <= 0:
        return
    start = offset - offset % _PAGE
    end = min(len(mm), offset + length)
    try:
        mm.madvise(_DONTNEED, start, end - start)
    except (OSError, ValueError):     # a map some platform will not advise: keep the pages
        pass


def drop_pages(arrays: Iterable[np.ndarray]) -> int:
    """Drop the resident pages of those ``arrays`` that are views of a read-only file map;
    returns the bytes advised."""
    total = 0
    for arr in arrays:
        if not isinstance(arr, np.ndarray) or arr.flags.writeable or arr.nbytes < _PAGE:
            continue
        r = mapped_range(arr)
        if r is not None:
            drop_range(*r)
            total += r[2]
    return total


def drop_maps(arrays: Iterable[np.ndarray]) -> int:
    """Drop every resident page of each read-only file map that one of ``arrays`` is a view
    of (the whole map: folio remainders that per-array drops leave); returns the bytes advised."""
    maps = {}
    for arr in arrays:
        if isinstance(arr, np.ndarray) and not arr.flags.writeable:
            mm = _file_map(arr)
            if mm is not None:
                maps[id(mm)] = mm
    for mm in maps.values():
        drop_range(mm, 0, len(mm))
    return sum(len(mm) for mm in maps.values())


def private_copy(arr: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``arr`` itself, or a copy in the process's own memory when it is a view of a file map:
    for small constants a kernel reads at every run (a bias), so that runs never fault a
    folio of the map back in."""
    if isinstance(arr, np.ndarray) and not arr.flags.writeable and _file_map(arr) is not None:
        return arr.copy()
    return arr
