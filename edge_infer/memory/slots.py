"""Run slots of a dynamically shaped model: one arena block per concurrent run, reused
by the plans of every input shape.

A model with symbolic input dims gets a plan per set of input shapes. Plans of
different shapes never run at the same time *on one slot* (a slot is held by one run
at a time), so all of a slot's plans put their activation arena at the start of the
same block, taken from the process's buddy pool (``pool.DYNAMIC_POOL``) and sized to a
power of two >= the largest arena seen. A larger shape grows the block: the slot's
other plans (views into the old block) are dropped, rebuilt when next needed, and the
old block goes back to the pool, where it coalesces. Memory for activations is then
(concurrent runs) x (largest arena), not the sum over every shape met.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Callable, Dict, Hashable, List, Optional

import numpy as np

from .buddy import _pow2_at_least
from .pool import DYNAMIC_POOL, DynamicPool


class Slot:
    """One concurrent run's arena block and the plans (by input-shape key) living in it."""

    def __init__(self, pool: DynamicPool):
        self.pool = pool
        self.block = None
        self.plans: "OrderedDict[Hashable, object]" = OrderedDict()
        self.grows = 0
        self._release: List[Optional[Callable[[], None]]] = [None]
        weakref.finalize(self, _release_block, self._release)

    def arena(self, nbytes: int):
        """``arena_alloc`` for the executor: the first ``nbytes`` of this slot's block."""
        if self.block is None or nbytes > self.block.size:
            self.plans.clear()                     # their buffers are views of the old block
            _release_block(self._release)
            self.block, self._release[0] = self.pool.arena(_pow2_at_least(max(nbytes, 1)))
            self.grows += 1
        return self.block[:nbytes], None

    def held_bytes(self) -> int:
        """The block plus the workspaces of the plans kept."""
        return (0 if self.block is None else self.block.size) + sum(
            int(ex.workspace_bytes) for ex in self.plans.values())


def _release_block(holder: List[Optional[Callable[[], None]]]) -> None:
    if holder[0] is not None:
        holder[0]()
        holder[0] = None


def _first_in_block(slot: Slot) -> Callable:
    """``arena_alloc`` for one build: the first arena asked for goes in the slot's block; any
    further one (the CPU parts of a partitioned plan each plan an arena) gets memory of its
    own, as the parts' buffers are all live at once."""
    calls = []

    def alloc(nbytes: int):
        if calls:
            raw = np.empty(nbytes + 64, np.uint8)
            start = (-raw.ctypes.data) % 64
            return raw[start:start + nbytes], None
        calls.append(nbytes)
        return slot.arena(nbytes)
    return alloc


class SlotSet:
    """At most ``max_slots`` slots; each keeps at most ``max_shapes`` plans, oldest dropped first."""

    def __init__(self, build: Callable, max_slots: int, max_shapes: int = 16, pool: DynamicPool = DYNAMIC_POOL):
        self._build = build                 # (graph, arena_alloc) -> Executable
        self.max_slots = max(1, max_slots)
        self.max_shapes = max(1, max_shapes)
        self.pool = pool
        self.slots: List[Slot] = []
        self._idle: List[Slot] = []
        self._cond = threading.Condition()

    def acquire(self) -> Slot:
        with self._cond:
            while not self._idle and len(self.slots) >= self.max_slots:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            slot = Slot(self.pool)
            self.slots.append(slot)
            return slot

    def release(self, slot: Slot) -> None:
        with self._cond:
            self._idle.append(slot)
            self._cond.notify()

    def executable(self, slot: Slot, key: Hashable, graph, build: Optional[Callable] = None):
        """The slot's plan for ``key`` (built into the slot's block on first use)."""
        ex = slot.plans.get(key)
        if ex is None:
            ex = (build or self._build)(graph, _first_in_block(slot))
            slot.plans[key] = ex
            while len(slot.plans) > self.max_shapes:
                slot.plans.popitem(last=False)
        else:
            slot.plans.move_to_end(key)
        return ex

    def trim_to(self, limit: int) -> None:
        """Drop the oldest plans while all slots together hold more than ``limit`` bytes."""
        for slot in list(self.slots):
            while len(slot.plans) > 1 and self.held_bytes() > limit:
                slot.plans.popitem(last=False)

    def held_bytes(self) -> int:
        return sum(s.held_bytes() for s in list(self.slots))

    def stats(self) -> List[Dict]:
        return [{"block_bytes": 0 if s.block is None else int(s.block.size), "plans": len(s.plans),
                 "grows": s.grows, "workspace_bytes": s.held_bytes() - (0 if s.block is None else s.block.size)}
                for s in list(self.slots)]


class ShapePool:
    """The PlanPool interface (``acquire`` / ``release``) for one input shape of a dynamic
    model: a run takes a slot and that slot's plan for this shape."""

    def __init__(self, slots: SlotSet, key: Hashable, graph, build: Callable):
        self.slots, self.key, self.graph, self._build = slots, key, graph, build
        self._held: Dict[int, Slot] = {}
        self._lock = threading.Lock()
        self.max_size = slots.max_slots

    def acquire(self):
        slot = self.slots.acquire()
        try:
            ex = self.slots.executable(slot, self.key, self.graph, self._build)
        except BaseException:
            self.slots.release(slot)
            raise
        with self._lock:
            self._held[id(ex)] = slot
        return ex

    def release(self, ex) -> None:
        with self._lock:
            slot = self._held.pop(id(ex))
        self.slots.release(slot)

    @property
    def size(self) -> int:
        """Slots holding a plan for this shape."""
        return sum(1 for s in list(self.slots.slots) if self.key in s.plans)
