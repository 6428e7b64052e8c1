"""The process's dynamic pool: arenas of plans whose shapes are known only at run time.

A model with symbolic input dims (batch, sequence length) gets one plan per set of
input shapes it meets. Each such plan takes its activation arena from this pool, a
BuddyAllocator over one or more preallocated chunks, and gives it back when the plan
is dropped (the Runtime evicts the oldest plans past its memory limit or its shape
cache), so the same pages serve shape after shape instead of each plan mapping fresh
memory. Chunks are reserved lazily (``np.empty``: pages become resident when first
written). Free blocks coalesce with their buddies, and requests are placed in the
chunk whose best-fitting free block is smallest, so large blocks stay whole; the
fragmentation metric (1 - largest free block / free bytes) is in ``stats()``, in
``Runtime.memory_stats()`` and, once ``register_metrics`` ran, in the monitor
registry as ``edge_infer_dynamic_pool_fragmentation``.
"""
from __future__ import annotations

import threading
from typing import Callable, List, Optional, Tuple

import numpy as np

from .buddy import BuddyAllocator, OutOfMemory, _pow2_at_least

ALIGN = 64


class DynamicPool:
    """Buddy-allocated arenas from chunks of at least ``chunk_bytes`` (a power of two)."""

    def __init__(self, chunk_bytes: int = 64 << 20, min_block: int = 4096):
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
            if not freed:                     # at most once
                freed.append(True)
                alloc.free(off)
        return base[off:off + nbytes], release

    def trim(self) -> int:
        """Drop chunks with nothing allocated (all but the first); returns bytes released."""
        with self._lock:
            keep, dropped = [], 0
            for k, (alloc, mem) in enumerate(self.chunks):
                if k > 0 and alloc.used_bytes == 0:
                    dropped += alloc.capacity
                else:
                    keep.append((alloc, mem))
            self.chunks = keep
        return dropped

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
