"""A buddy allocator over one preallocated pool, for tensors whose size is known
only at run time (symbolic shapes) and for kernel workspaces.

Blocks are powers of two from ``min_block`` up to the pool size. Allocation
splits the smallest free block that fits; freeing coalesces a block with its
buddy (the block at ``offset ^ size``) while the buddy is free too, so that when
everything is freed the pool is one block again.
"""
from __future__ import annotations

import threading
from typing import Dict, List, Set

import numpy as np

from ..errors import EdgeInferError


class OutOfMemory(EdgeInferError, MemoryError):
    """The pool has no free block large enough."""


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class BuddyAllocator:
    """Power-of-two blocks carved from a pool of ``capacity`` bytes (rounded up to a power of two)."""

    def __init__(self, capacity: int, min_block: int = 64):
        self.min_block = _pow2_at_least(min_block)
        self.capacity = max(_pow2_at_least(capacity), self.min_block)
        self._levels = (self.capacity // self.min_block).bit_length()
        # free[size] = set of offsets of free blocks of that size
        self._free: Dict[int, Set[int]] = {self.min_block << k: set() for k in range(self._levels)}
        self._free[self.capacity].add(0)
        self._used: Dict[int, int] = {}   # offset -> block size
        self._requested: Dict[int, int] = {}
        self._lock = threading.Lock()
        self.pool: np.ndarray = None  # created lazily by ``array``
        self.peak_used = 0

    def alloc(self, nbytes: int) -> int:
        """Reserve at least ``nbytes``; returns the block's offset in the pool."""
        if nbytes <= 0:
            nbytes = 1
        size = max(self.min_block, _pow2_at_least(nbytes))
        with self._lock:
            if size > self.capacity:
                raise OutOfMemory(f"buddy pool: {nbytes} bytes requested, pool is {self.capacity}")
            s = size
            while s <= self.capacity and not self._free[s]:
                s <<= 1
            if s > self.capacity:
                raise OutOfMemory(f"buddy pool: no free block of {size} bytes "
                                  f"({self.free_bytes} free, largest {self.largest_free_block})")
            off = min(self._free[s])
            self._free[s].remove(off)
            while s > size:  # split, keeping the lower half
                s >>= 1
                self._free[s].add(off + s)
            self._used[off] = size
            self._requested[off] = nbytes
            self.peak_used = max(self.peak_used, self.used_bytes)
            return off

    def free(self, offset: int) -> None:
        """Return a block; it merges with its buddy while the buddy is free."""
        with self._lock:
            size = self._used.pop(offset, None)
            if size is None:
                raise ValueError(f"buddy pool: offset {offset} is not allocated")
            self._requested.pop(offset, None)
            while size < self.capacity:
                buddy = offset ^ size
                if buddy not in self._free[size]:
                    break
                self._free[size].remove(buddy)
                offset = min(offset, buddy)
                size <<= 1
            self._free[size].add(offset)

    def array(self, offset: int, shape, dtype) -> np.ndarray:
        """A typed view of an allocated block."""
        if self.pool is None:
            self.pool = np.empty(self.capacity, np.uint8)
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if offset not in self._used or n > self._used[offset]:
            raise ValueError("buddy pool: view larger than its block")
        return self.pool[offset:offset + n].view(dtype).reshape(shape)

    # metrics ------------------------------------------------------------
    @property
    def used_bytes(self) -> int:
        return sum(self._used.values())

    @property
    def free_bytes(self) -> int:
        return self.capacity - self.used_bytes

    def smallest_free_at_least(self, size: int):
        """Size of the smallest free block of at least ``size`` bytes (None: none fits)."""
        s = max(self.min_block, _pow2_at_least(size))
        while s <= self.capacity:
            if self._free[s]:
                return s
            s <<= 1
        return None

    @property
    def largest_free_block(self) -> int:
        return max((s for s, offs in self._free.items() if offs), default=0)

    @property
    def fragmentation(self) -> float:
        """1 - largest free block / free bytes (0 when free space is one block)."""
        free = self.free_bytes
        return 0.0 if free == 0 else 1.0 - self.largest_free_block / free

    @property
    def internal_waste(self) -> float:
        """Share of allocated bytes lost to power-of-two rounding."""
        used = self.used_bytes
        return 0.0 if used == 0 else 1.0 - sum(self._requested.values()) / used

    def blocks(self) -> List[tuple]:
        """(offset, size) of every allocated block."""
        return sorted(self._used.items())

    def stats(self) -> dict:
        return {"capacity": self.capacity, "used": self.used_bytes, "free": self.free_bytes,
                "largest_free_block": self.largest_free_block, "fragmentation": round(self.fragmentation, 4),
                "internal_waste": round(self.internal_waste, 4), "peak_used": self.peak_used}
