"""The process's dynamic pool: arenas of plans whose shapes are known only at run time.

A model with symbolic input dims (batch, image size) gets one plan per set of input
shapes it meets. Their activation arenas come from this pool, a BuddyAllocator over
one or more chunks, through ``memory.slots``: one block per concurrent run, shared by
the plans of every shape, so the same pages serve shape after shape.

A chunk is the larger of ``chunk_bytes`` and the request rounded up to a power of two:
small arenas share chunks (split into buddies), a large one gets a chunk of its own
size. Requests go to the chunk whose best-fitting free block is smallest, so large
blocks stay whole; freed blocks coalesce with their buddies, and a chunk left entirely
free is returned at once. Measured (benchmarks/memory_bench.py): keeping one free chunk
for reuse, or 1-4 MB chunks, left 19-66% of the held free bytes fragmented under a mixed
workload; 256 KB chunks returned when empty, 0.2%. The fragmentation metric (1 - largest
free block / free bytes of the chunks held) is in ``stats()``, ``Runtime.memory_stats()``
and, once ``register_metrics`` ran, the monitor registry
(``edge_infer_dynamic_pool_fragmentation``).
"""
from __future__ import annotations

import threading
from typing import Callable, List, Optional, Tuple

import numpy as np

from .buddy import BuddyAllocator, OutOfMemory, _pow2_at_least

ALIGN = 64


class DynamicPool:
    """Buddy-allocated arenas from chunks of at least ``chunk_bytes`` (a power of two)."""

    def __init__(self, chunk_bytes: int = 256 << 10, min_block: int = 4096):
        self.chunk_bytes = _pow2_at_least(chunk_bytes)
        self.min_block = min_block
        self.chunks: List[Tuple[BuddyAllocator, np.ndarray]] = []
        self._lock = threading.Lock()
        self.allocations = 0

    def _best_chunk(self, size: int) -> Optional[BuddyAllocator]:
        # the chunk whose smallest free block that fits is smallest (best fit across chunks)
        best, best_size = None, None
        for alloc, _ in self.chunks:
            s = alloc.smallest_free_at_least(size)
            if s is not None and (best_size is None or s < best_size):
                best, best_size = alloc, s
        return best

    def arena(self, nbytes: int) -> Tuple[np.ndarray, Callable[[], None]]:
        """A ``nbytes`` uint8 array (64-byte aligned) and the function that gives it back."""
        nbytes = max(int(nbytes), 1)
        size = max(self.min_block, _pow2_at_least(nbytes))
        with self._lock:
            alloc = self._best_chunk(size)
            if alloc is None:
                alloc = BuddyAllocator(max(self.chunk_bytes, size), self.min_block)
                raw = np.empty(alloc.capacity + ALIGN, np.uint8)
                start = (-raw.ctypes.data) % ALIGN
                self.chunks.append((alloc, raw[start:start + alloc.capacity]))
            off = alloc.alloc(nbytes)
            base = next(mem for a, mem in self.chunks if a is alloc)
            self.allocations += 1
        freed = []

        def release() -> None:
            with self._lock:
                if freed:                     # at most once
                    return
                freed.append(True)
                alloc.free(off)
                self._drop_empty_chunks()
        return base[off:off + nbytes], release

    def _drop_empty_chunks(self) -> None:
        # an entirely free chunk goes back (its memory is freed with the last view of it)
        self.chunks = [c for c in self.chunks if c[0].used_bytes]

    def stats(self) -> dict:
        """capacity, used, free, largest free block, fragmentation, internal waste, chunks."""
        with self._lock:
            allocs = [a for a, _ in self.chunks]
        cap = sum(a.capacity for a in allocs)
        used = sum(a.used_bytes for a in allocs)
        requested = sum(sum(a._requested.values()) for a in allocs)
        free = cap - used
        largest = max((a.largest_free_block for a in allocs), default=0)
        return {"chunks": len(allocs), "capacity": cap, "used": used, "free": free,
                "largest_free_block": largest,
                "fragmentation": round(0.0 if free == 0 else 1.0 - largest / free, 4),
                "internal_waste": round(0.0 if used == 0 else 1.0 - requested / used, 4),
                "peak_used": max((a.peak_used for a in allocs), default=0), "allocations": self.allocations}


#: the one pool of this process (dynamically shaped plans of every Runtime)
DYNAMIC_POOL = DynamicPool()


def register_metrics(registry, pool: DynamicPool = DYNAMIC_POOL) -> None:
    """Gauges of the pool in a monitor ``Registry`` (read when metrics are exported)."""
    registry.gauge("edge_infer_dynamic_pool_fragmentation", "1 - largest free block / free bytes",
                   fn=lambda: pool.stats()["fragmentation"])
    registry.gauge("edge_infer_dynamic_pool_used_bytes", "bytes of the dynamic pool in use",
                   fn=lambda: pool.stats()["used"])
    registry.gauge("edge_infer_dynamic_pool_capacity_bytes", "bytes reserved by the dynamic pool",
                   fn=lambda: pool.stats()["capacity"])


__all__ = ["DYNAMIC_POOL", "DynamicPool", "OutOfMemory", "register_metrics"]
