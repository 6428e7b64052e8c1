"""Scratch shared by role: the one facility kernels use for per-run temporaries.

A kernel's prepare asks ``ctx.scratch(role, shape, dtype)`` for memory that it fully rewrites
in every run before reading it (im2col columns, a padded copy of its input, int64
accumulators, ...). Steps run one at a time, so every kernel of a plan that names the same
role can use the same bytes: one buffer per role, sized for the largest request of the plan
(the max over the kernels that declare it, not their sum). Two buffers one kernel uses at
the same time need two roles. State kept between runs (a border filled once at prepare, a
lookup table, a border written once) is never scratch: that is ``ctx.workspace``.

The sizes are learned while the plan is prepared: a request larger than the role's buffer
replaces the buffer, and the kernels that were handed views of the old one are prepared
again (``stale``) once every node has been prepared, so each role ends at exactly its
largest request and every kernel holds a view of that buffer.

Before any of that, a request goes to the activation arena: bytes that no tensor uses during
the step of the asking kernel (``arena.ArenaHoles``; the arena plan is made before the
kernels are prepared). Scratch placed there costs nothing beyond the arena; a role's shared
buffer is sized by the requests no hole could take (often none: the arena is sized by its
busiest step, and most steps leave much of it free).
"""
from __future__ import annotations

from typing import Dict, Optional, Set, Tuple

import numpy as np


class Role:
    """One role's shared buffer (``None`` until first needed), its size and its users."""

    __slots__ = ("buf", "nbytes", "users", "tileable", "in_arena")

    def __init__(self):
        self.buf: Optional[np.ndarray] = None
        self.nbytes = 0
        #: indices of the nodes holding views of ``buf``
        self.users: Set[int] = set()
        self.tileable = False
        #: per node index: (offset, bytes) of the arena it uses for this role instead of ``buf``
        self.in_arena: Dict[int, Tuple[int, int]] = {}


class ScratchRoles:
    """The scratch of one plan. ``request`` is what ``PrepareContext.scratch`` calls.
    ``alloc(nbytes, tileable)`` makes a shared buffer (the context's budget decides whether
    it is a real one or a counted placeholder) and ``grown(extra, tileable)`` books its
    growth; ``holes`` (``arena.ArenaHoles``, None: no arena) gives arena bytes free during a
    step, ``arena`` the array they are in."""

    def __init__(self, alloc, grown, holes=None, arena: Optional[np.ndarray] = None):
        self.roles: Dict[str, Role] = {}
        self._alloc, self._grown = alloc, grown
        self.holes, self.arena = holes, arena
        #: nodes to prepare again: a buffer they hold views of was replaced by a larger one
        self.stale: Set[int] = set()
        #: how many node preparations were repeated for that (reported by the executor)
        self.repeats = 0

    def request(self, role: str, nbytes: int, node: Optional[int], tileable: bool = False) -> np.ndarray:
        """A uint8 buffer of at least ``nbytes`` for ``role`` (aligned to 64 bytes) for the
        kernel of ``node`` (an index into the plan's nodes; None: no plan): bytes of the
        arena that no tensor uses during that node's step when there are enough, else the
        role's shared buffer, grown to ``nbytes`` if smaller."""
        r = self.roles.get(role)
        if r is None:
            r = self.roles[role] = Role()
        if node is not None and self.holes is not None:
            off, size = r.in_arena.get(node, (0, -1))
            if size < nbytes:               # (a kernel asking again for more: another block)
                taken = self.holes.take(node, nbytes)
                if taken is not None:
                    off, size = r.in_arena[node] = (taken, nbytes)
            if size >= nbytes:
                return self.arena[off:off + max(size, 1)]
        if r.buf is None or nbytes > r.nbytes:
            self._grown(nbytes - r.nbytes, tileable or r.tileable)
            self.stale |= r.users
            r.buf, r.nbytes, r.users = self._alloc(max(nbytes, 1), tileable), nbytes, set()
            r.tileable = r.tileable or tileable
        if node is not None:
            r.users.add(node)
        return r.buf

    def fits(self, role: str, nbytes: int, node: Optional[int], budget: float) -> bool:
        """Whether a request of ``nbytes`` would cost at most ``budget`` more bytes."""
        if node is not None and self.holes is not None:
            r = self.roles.get(role)
            if (r is not None and r.in_arena.get(node, (0, -1))[1] >= nbytes) or \
                    self.holes.take(node, nbytes, keep=False) is not None:
                return True
        return nbytes - self.held(role) <= budget

    def held(self, role: str) -> int:
        """Bytes the role's shared buffer holds now (0: none yet)."""
        r = self.roles.get(role)
        return 0 if r is None else r.nbytes

    def sizes(self) -> Dict[str, int]:
        """{role: bytes of its shared buffer}, largest first."""
        return dict(sorted(((k, r.nbytes) for k, r in self.roles.items()), key=lambda kv: -kv[1]))

    def arena_blocks(self) -> Dict[Tuple[str, int], Tuple[int, int]]:
        """{(role, node): (offset, bytes)} of the scratch placed in the arena."""
        return {(k, n): v for k, r in self.roles.items() for n, v in r.in_arena.items()}

    def forget(self, node: int) -> None:
        """``node`` is prepared again: it holds nothing any more."""
        for r in self.roles.values():
            r.users.discard(node)
            r.in_arena.pop(node, None)
        if self.holes is not None:
            self.holes.release(node)


def typed_view(buf: np.ndarray, shape, dtype) -> np.ndarray:
    """``buf`` (uint8) as an array of ``shape`` and ``dtype``; a counted placeholder (all
    strides 0, over the memory budget) gives a placeholder of that shape."""
    dt = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    if buf.strides and buf.strides[0] == 0:
        from .budget import placeholder
        return placeholder(shape, dt)
    need = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return buf[:need].view(dt).reshape(shape)
