"""Activation arena: one block of memory, each tensor at a planned offset.

Lifetimes come from the execution order: a tensor is live from the step that
produces it to the last step that reads it (graph outputs: to the end). Offsets
are assigned greedily, each tensor at the lowest offset that overlaps no tensor live
at the same time, in several orders (by size, as TFLite's arena planner does; by
size x lifetime; by lifetime; by first use), keeping the smallest arena.
Element-wise ops may write their output over an input whose life ends at that
op (in-place), when the kernel is known to be safe for it: input 0 of the backend's
``inplace_ops``, and any input its ``inplace_inputs(node, graph)`` names (a conv whose fused
epilogue adds a residual reads each residual element before it writes that element, so it
may write over the residual).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..ir import Graph, Node

ALIGN = 64

#: default set of ops whose output may alias input 0; a backend passes its own
#: (the kernels that are safe for it) to ``plan_arena``
INPLACE_OPS: Set[str] = {"Relu", "Add", "Sub", "Mul", "Div", "Sigmoid", "Tanh", "Exp", "Neg", "Abs",
                         "Sqrt", "Reciprocal", "Floor", "Ceil"}


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class ArenaPlan:
    """Offsets of every planned tensor inside one arena of ``size`` bytes."""
    size: int
    offsets: Dict[str, int]
    nbytes: Dict[str, int]
    lifetimes: Dict[str, Tuple[int, int]]
    aliases: Dict[str, str] = field(default_factory=dict)
    naive: int = 0
    lower_bound: int = 0
    #: gives the arena's memory back (set when it came from the dynamic pool)
    release: Optional[Callable[[], None]] = None
    #: the uint8 array the plan was laid out in (set by the backend that allocates it)
    arena: Optional[np.ndarray] = None
    #: scratch placed inside the arena, {"role@node": offset} (``ArenaHoles``)
    scratch_offsets: Dict[str, int] = field(default_factory=dict)
    #: tensors placed inside another's bytes (``views``): name -> (group root, byte offset)
    views: Dict[str, Tuple[str, int]] = field(default_factory=dict)
    #: tensors placed as strided views (a channel slice of a channels-last concat): name ->
    #: (byte strides, extent: bytes from its offset past its last element); the others are
    #: C-contiguous, their extent their size
    strided: Dict[str, Tuple[Tuple[int, ...], int]] = field(default_factory=dict)
    #: {step: bytes} reserved for that step's scratch (``plan_arena(reserve=...)``)
    reserved: Dict[int, int] = field(default_factory=dict)

    def extent(self, name: str) -> int:
        """Bytes from a tensor's offset to the end of its last element."""
        st = self.strided.get(name)
        return self.nbytes[name] if st is None else st[1]

    def summary(self) -> dict:
        return {"arena_bytes": self.size, "naive_bytes": self.naive, "lower_bound_bytes": self.lower_bound,
                "tensors": len(self.offsets), "in_place": len(self.aliases), "views": len(self.views),
                "scratch_in_arena": dict(self.scratch_offsets),
                "vs_lower_bound": round(self.size / self.lower_bound, 3) if self.lower_bound else 1.0}


def tensor_lifetimes(graph: Graph, names: Sequence[str]) -> Dict[str, Tuple[int, int]]:
    """(first step, last step) for each name; inputs start at -1, outputs end at len(nodes)."""
    end_step = len(graph.nodes)
    first: Dict[str, int] = {n: -1 for n in graph.inputs}
    last: Dict[str, int] = {}
    for k, node in enumerate(graph.nodes):
        for o in node.outputs:
            if o:
                first.setdefault(o, k)
                last.setdefault(o, k)
        for i in node.inputs:
            if i:
                last[i] = k
    for o in graph.outputs:
        last[o] = end_step
    return {n: (first.get(n, -1), max(last.get(n, first.get(n, -1)), first.get(n, -1))) for n in names}


def find_inplace(graph: Graph, planned: Set[str], lifetimes, inplace_ops=INPLACE_OPS,
                 places: Optional["Places"] = None,
                 inplace_inputs: Optional[Callable[[Node, Graph], Sequence[int]]] = None) -> Dict[str, str]:
    """output -> input for nodes that may write their output over an input whose life ends
    there: input 0 of ``inplace_ops``, else the inputs ``inplace_inputs(node, graph)`` names
    (in order of preference). ``places``: tensors already placed inside others (views); an
    output is then written over its input only when neither is part of a view, so no view
    sees the write."""
    aliases = {}
    protected = set(graph.inputs) | set(graph.outputs)
    for k, node in enumerate(graph.nodes):
        if not node.inputs or not node.outputs or not node.outputs[0]:
            continue
        which = [0] if node.op in inplace_ops else list(inplace_inputs(node, graph) if inplace_inputs else ())
        dst = node.outputs[0]
        for i in which:
            src = node.inputs[i] if i < len(node.inputs) else ""
            if src and _may_alias(graph, node, k, src, dst, planned, protected, lifetimes, aliases, places):
                aliases[dst] = src
                break
    return aliases


def _may_alias(graph: Graph, node: Node, k: int, src: str, dst: str, planned, protected, lifetimes, aliases,
               places) -> bool:
    """Whether ``dst`` may take ``src``'s bytes at step ``k``: both planned, same shape and
    dtype, src read by this node once and by no later one, neither a graph input/output, in
    a view, or already taken over."""
    if src not in planned or dst not in planned or src in protected or dst in protected:
        return False
    ts, td = graph.tensors[src], graph.tensors[dst]
    if ts.shape != td.shape or ts.dtype != td.dtype or lifetimes[src][1] != k:
        return False
    if node.inputs.count(src) > 1 or src in aliases.values():
        return False
    return places is None or not (places.grouped(src) or places.grouped(dst))


class Places:
    """Tensors placed inside other tensors' bytes (``memory/views.py``): a union-find whose
    links carry byte offsets, addr(t) = addr(root) + offset. A tensor goes inside its base
    only when it spans everything already placed with it (so a group always has one member,
    its container, whose bytes hold every other member's, and two members never overlap
    with different contents), both have one dtype, and neither is a graph input."""

    def __init__(self, graph: Graph, planned: Set[str]):
        self.graph, self.planned = graph, planned
        self.parent: Dict[str, Tuple[str, int]] = {}
        self.container: Dict[str, str] = {}
        self.inputs = set(graph.inputs)
        #: strided members: name -> (byte strides, extent); nothing goes inside them
        self.strided: Dict[str, Tuple[Tuple[int, ...], int]] = {}

    def find(self, n: str) -> Tuple[str, int]:
        off = 0
        while n in self.parent:
            n, o = self.parent[n]
            off += o
        return n, off

    def grouped(self, n: str) -> bool:
        return n in self.parent or n in self.container

    def place(self, t: str, base: str, off: int, strides: Optional[Tuple[int, ...]] = None) -> bool:
        """Put ``t`` at byte ``off`` of ``base``; ``strides``: t is the strided box of base's
        elements that starts there (t must then be alone: nothing placed with or inside it)."""
        g = self.graph.tensors
        if t not in self.planned or base not in self.planned or t in self.inputs:
            return False
        if t in self.strided or base in self.strided:
            return False
        extent = g[t].nbytes
        if strides is not None:
            if self.grouped(t) or g[t].nbytes == 0:
                return False
            extent = int(sum((d - 1) * st for d, st in zip(g[t].shape, strides))) + np.dtype(g[t].dtype).itemsize
        if g[t].dtype != g[base].dtype or off < 0 or off + extent > g[base].nbytes:
            return False
        (rt, ot), (rb, ob) = self.find(t), self.find(base)
        if rt == rb:
            return False
        ct = self.container.get(rt, rt)
        if self.find(ct)[1] != ot or g[ct].nbytes != g[t].nbytes:
            return False                 # t does not span its group: its bytes would hold two contents
        self.parent[rt] = (rb, ob + off - ot)
        self.container.pop(rt, None)
        self.container.setdefault(rb, rb)
        if strides is not None:
            self.strided[t] = (tuple(int(v) for v in strides), extent)
        return True

    def placed(self) -> Dict[str, Tuple[str, int]]:
        """tensor -> (root, byte offset) of every tensor placed inside another."""
        return {n: self.find(n) for n in self.parent}


def _place(order: List[str], block_size: Dict[str, int], block_life: Dict[str, Tuple[int, int]]
           ) -> Dict[str, int]:
    """Offsets for blocks placed in ``order``, each at the lowest offset overlapping no
    placed block whose lifetime meets its own."""
    placed: List[Tuple[int, int, int, int]] = []  # (offset, size, first, last)
    offsets: Dict[str, int] = {}
    for r in order:
        size, (f, l) = block_size[r], block_life[r]
        busy = sorted((o, s) for o, s, pf, pl in placed if not (pl < f or pf > l))
        off = 0
        for o, s in busy:
            if off + size <= o:
                break
            off = max(off, o + s)
        offsets[r] = off
        placed.append((off, size, f, l))
    return offsets


def plan_arena(graph: Graph, names: Optional[Sequence[str]] = None, inplace: bool = True,
               inplace_ops: Optional[Set[str]] = None, views: Optional[Callable] = None,
               inplace_inputs: Optional[Callable[[Node, Graph], Sequence[int]]] = None,
               reserve: Optional[Dict[int, int]] = None) -> ArenaPlan:
    """Plan offsets for ``names`` (default: every non-constant tensor) of a graph with
    static shapes, in the graph's node order. ``views(node, graph) -> [(tensor, base, byte
    offset)]``: tensors the backend lets live inside another's bytes (its copy between them
    then copies nothing; ``memory/views.py``), placed there where it is safe (``Places``).
    ``inplace_ops`` / ``inplace_inputs``: which node outputs may take over which input's
    bytes (``find_inplace``). ``reserve``: {step: bytes} of scratch that step's kernel will
    ask for, placed like a tensor live during that step only, so that ``ArenaHoles`` finds that
    many free bytes there (the arena grows only where the step's tensors leave too few)."""
    if names is None:
        names = [n for n in list(graph.inputs) + [o for nd in graph.nodes for o in nd.outputs if o]
                 if not graph.tensors[n].is_const]
    names = list(dict.fromkeys(names))
    nbytes = {n: graph.tensors[n].nbytes for n in names}
    life = tensor_lifetimes(graph, names)
    places = Places(graph, set(names))
    for node in graph.nodes if views is not None else ():
        for view in views(node, graph):
            places.place(*view)
    aliases = (find_inplace(graph, set(names), life, inplace_ops or INPLACE_OPS, places, inplace_inputs)
               if inplace else {})
    for dst, src in aliases.items():
        places.place(dst, src, 0)

    # Each group (an in-place chain, views inside their container) is one block spanning its
    # members, live for the union of their lifetimes.
    where = {n: places.find(n) for n in names}
    blocks: Dict[str, List[str]] = {}
    for n in names:
        blocks.setdefault(where[n][0], []).append(n)
    low = {r: min(where[m][1] for m in ms) for r, ms in blocks.items()}
    block_life = {r: (min(life[m][0] for m in ms), max(life[m][1] for m in ms)) for r, ms in blocks.items()}
    block_size = {r: _align(max(where[m][1] - low[r] + nbytes[m] for m in ms)) for r, ms in blocks.items()}
    reserve = {int(k): int(n) for k, n in (reserve or {}).items() if n > 0}
    for step, n in reserve.items():
        r = f"\0scratch@{step}"            # (no tensor is named with a NUL)
        blocks[r], block_life[r], block_size[r] = [], (step, step), _align(n)

    # Greedy placement in several orders, keeping the smallest arena: greedy-by-size
    # (TFLite's) first; the others win on graphs with many long-lived small tensors
    # (DenseNet's concatenations), where size order leaves holes a lifetime order fills.
    # Equal sizes latest first: where a network repeats one shape, the blocks of its later
    # layers then sit under those of the earlier ones (DB-640 fp32: 16.4 -> 15.6 MB, its
    # lower bound; the first-use tie-break left a 0.7 MB gap at its busiest step). Last, so
    # that it is kept only where it is smaller; and not with reservations: there a smaller
    # layout lowers the arena growth winograd_choice prices the reserved scratch at, and the
    # allowance spends what it saves on another conv's transformed weights (YOLOv8n-640 fp32:
    # an 11th Winograd conv, +0.55 MB peak RSS, where the RSS target has no room).
    def dur(r):
        return block_life[r][1] - block_life[r][0]
    orders = [lambda r: (-block_size[r], block_life[r][0]),
              lambda r: (-block_size[r] * (dur(r) + 1), -block_size[r]),
              lambda r: (-dur(r), -block_size[r]),
              lambda r: (block_life[r][0], -block_size[r])]
    if not reserve:
        orders.append(lambda r: (-block_size[r], -block_life[r][0]))
    best = None
    for order in orders:
        offs = _place(sorted(blocks, key=order), block_size, block_life)
        total = max((offs[r] + block_size[r] for r in offs), default=0)
        if best is None or total < best[0]:
            best = (total, offs)
    size, block_off = best

    # lower bound: the most bytes live at any one step (aliases counted once)
    steps = len(graph.nodes) + 2
    live = np.zeros(steps + 1, np.int64)
    for r in blocks:
        f, l = block_life[r]
        live[f + 1] += block_size[r]
        live[l + 2] -= block_size[r]
    lower = int(np.cumsum(live).max()) if blocks else 0
    offsets = {n: block_off[where[n][0]] + where[n][1] - low[where[n][0]] for n in names}
    return ArenaPlan(size=size, offsets=offsets, nbytes=nbytes, lifetimes=life, aliases=aliases,
                     naive=sum(_align(b) for b in nbytes.values()) + sum(_align(n) for n in reserve.values()),
                     lower_bound=lower,
                     views={n: r for n, r in places.placed().items() if n not in aliases},
                     strided=dict(places.strided), reserved=reserve)


class ArenaHoles:
    """Bytes of a planned arena that no tensor uses during a step: where the scratch of the
    kernel running at that step goes first (``memory/scratch.py``), so per-step scratch
    shares the bytes of dead activations and costs nothing beyond the arena."""

    def __init__(self, plan: ArenaPlan):
        self.plan = plan
        self._live: Dict[int, List[Tuple[int, int]]] = {}
        #: per step: the (offset, size) blocks handed out for it
        self.taken: Dict[int, List[Tuple[int, int]]] = {}

    def _busy(self, step: int) -> List[Tuple[int, int]]:
        if step not in self._live:
            p = self.plan
            self._live[step] = [(p.offsets[n], _align(p.extent(n))) for n, (f, l) in p.lifetimes.items()
                                if f <= step <= l and n in p.offsets]
        return self._live[step]

    def take(self, step: int, nbytes: int, keep: bool = True) -> Optional[int]:
        """The lowest offset of ``nbytes`` free during ``step`` (then taken, unless not
        ``keep``), or None."""
        size = _align(max(nbytes, 1))
        off = 0
        for o, s in sorted(self._busy(step) + self.taken.get(step, [])):
            if off + size <= o:
                break
            off = max(off, o + s)
        if off + size > self.plan.size:
            return None
        if keep:
            self.taken.setdefault(step, []).append((off, size))
        return off

    def release(self, step: int) -> None:
        """Give back what ``step`` took (its kernel is prepared again)."""
        self.taken.pop(step, None)


def arena_views(graph: Graph, plan: ArenaPlan, arena: np.ndarray) -> Dict[str, np.ndarray]:
    """Typed, shaped views into ``arena`` (a uint8 array of at least ``plan.size`` bytes)."""
    views = {}
    for name, off in plan.offsets.items():
        t = graph.tensors[name]
        if name in plan.strided:
            strides, extent = plan.strided[name]
            views[name] = np.ndarray(t.shape, t.dtype, buffer=arena[off:off + extent], strides=strides)
        else:
            views[name] = arena[off:off + plan.nbytes[name]].view(t.dtype).reshape(t.shape)
    return views
