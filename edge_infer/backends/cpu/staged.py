"""Plans for graphs whose shapes depend on values, not only on the input shapes.

``specialize`` folds every shape it can from the input shapes and the constants. What is
left non-static comes from one of two places (``ops/dynamic.py``):

* a **data-dependent** op (NonZero, NonMaxSuppression, Compress): its output size is known
  only once it ran;
* a **value input** that is not a constant (a Reshape target, Pad pads, Range bounds, TopK's
  k, axes given as inputs), fed by a graph input or computed from one.

``prepare_plan`` makes a plain ``CpuExecutable`` where nothing is left. Otherwise it cuts
the node list before the first such node and makes a ``StagedExecutable``:

1. the **head** (every node before the cut: all static) is one ordinary plan, its arena
   from the caller (the run slot's block, or its own);
2. at the cut, a data-dependent node runs on the head's buffers and returns its outputs;
   for a value cut, the value inputs are read from the head's buffers;
3. the **rest** of the graph is specialized for what arrived: the actual shapes of the
   data-dependent outputs, the value inputs frozen into constants (so shape arithmetic
   folds and the kernels prepare as for constants), and planned by ``prepare_plan`` again
   (it may cut again further down). Its arena comes from the process's dynamic (buddy) pool,
   so the data-dependent outputs, fed into it, live in dynamic-pool memory, never in a
   static arena. Rest plans are cached by (sizes of the data-dependent outputs, frozen
   values): a value seen before re-uses its plan; a new one re-plans; at most ``max_plans``
   are kept, least recently used dropped first (their blocks go back to the pool).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...errors import GraphError, ShapeError
from ...ir import Graph, Node, Tensor
from ...ir.shape_inference import infer_shapes
from ...memory.pool import DYNAMIC_POOL
from ...ops.dynamic import DATA_DEPENDENT_OPS, data_dependent_tensors, value_inputs  # noqa: F401
from ..base import Executable, running_nodes
from .executor import CpuExecutable, PrepareContext, fold_node, prepare_node

#: rest plans one staged plan keeps (per cut), least recently used dropped first
MAX_PLANS = 16
#: most elements a frozen value input may have (they are shapes, pads, axes: a few numbers)
MAX_FROZEN_ELEMENTS = 4096


def find_cut(graph: Graph, nodes: List[Node]) -> Optional[Tuple[int, str, Tuple[str, ...]]]:
    """(index in ``nodes``, "data" or "values", value inputs) of the first node whose plan
    needs a value known only at run time; None when the whole graph plans ahead."""
    for k, n in enumerate(nodes):
        if n.op in DATA_DEPENDENT_OPS and not all(graph.tensors[o].is_static for o in n.outputs if o):
            return k, "data", ()
        vals = value_inputs(n, graph)
        if vals:
            return k, "values", vals
        bad = [o for o in n.outputs if o and not graph.tensors[o].is_static]
        if bad:
            raise GraphError(f"node {n.name!r} ({n.op}): output {bad[0]!r} has shape "
                             f"{graph.tensors[bad[0]].shape}, not known from the input shapes or values")
    return None


def prepare_plan(graph: Graph, threads: int = 1, memory_limit: Optional[int] = None, arena_alloc=None,
                 max_plans: Optional[int] = None) -> Executable:
    """A ``CpuExecutable`` for a graph whose shapes are all planned ahead, else a
    ``StagedExecutable`` (see the module doc)."""
    nodes = running_nodes(graph)
    cut = find_cut(graph, nodes)
    if cut is None:
        return CpuExecutable(graph, threads, memory_limit, arena_alloc)
    return StagedExecutable(graph, nodes, cut, threads, memory_limit, arena_alloc,
                            MAX_PLANS if max_plans is None else max_plans)


def _view_graph(graph: Graph, nodes: List[Node], inputs: List[str], outputs: List[str]) -> Graph:
    g = Graph(graph.name)
    g.tensors, g.nodes, g.inputs, g.outputs = graph.tensors, nodes, list(inputs), list(outputs)
    return g


class StagedExecutable(Executable):
    """A head plan, a cut, and rest plans made per value (see the module doc)."""

    def __init__(self, graph: Graph, nodes: List[Node], cut: Tuple[int, str, Tuple[str, ...]],
                 threads: int, memory_limit: Optional[int], arena_alloc, max_plans: int = MAX_PLANS):
        k, self.kind, self.frozen = cut
        self.graph, self.nodes, self.threads = graph, nodes, threads
        self.memory_limit, self.max_plans = memory_limit, max(1, max_plans)
        self.cut_node = nodes[k]
        rest = nodes[k + 1:] if self.kind == "data" else nodes[k:]
        self.rest_nodes = rest
        t = graph.tensors
        produced = {o for n in nodes[:k] for o in n.outputs if o}
        wanted = [i for n in ([self.cut_node] if self.kind == "data" else []) + rest for i in n.inputs if i]
        wanted += list(graph.outputs)
        live, seen = [], set()
        for name in wanted:
            if name not in seen and not t[name].is_const and (name in produced or name in graph.inputs):
                live.append(name)
                seen.add(name)
        self.head = CpuExecutable(_view_graph(graph, nodes[:k], graph.inputs, live), threads,
                                  memory_limit, arena_alloc)
        self.arena_plan = self.head.arena_plan
        self.step = None
        cut_outs: List[str] = []
        if self.kind == "data":
            ctx = PrepareContext(graph, self.head.buffers, threads)
            self.step = prepare_node(self.cut_node, ctx)
            cut_outs = [o for o in self.cut_node.outputs if o]
        #: the rest plan's inputs: live tensors it reads plus the cut's outputs
        needed = {i for n in rest for i in n.inputs if i} | set(graph.outputs)
        self.rest_inputs = [n for n in live if n in needed] + cut_outs
        self.cut_outputs = cut_outs
        self._plans: "OrderedDict[tuple, Executable]" = OrderedDict()
        #: how many rest plans were made (a cache miss each) and how many runs re-used one
        self.replans = 0
        self.reuses = 0

    # -- properties the runtime reads ------------------------------------------------------
    @property
    def workspace_bytes(self) -> int:
        return int(self.head.workspace_bytes) + sum(int(p.workspace_bytes) for p in self._plans.values())

    @property
    def notes(self) -> Dict[str, str]:
        out = dict(self.head.notes)
        out[self.cut_node.name] = (f"data-dependent output size: the rest is planned per size "
                                   f"({len(self._plans)} cached)" if self.kind == "data" else
                                   f"plan per value of {', '.join(self.frozen)} ({len(self._plans)} cached)")
        for p in self._plans.values():
            out.update(p.notes)
        return out

    @property
    def tiled(self) -> Dict[str, str]:
        out = dict(self.head.tiled)
        for p in self._plans.values():
            out.update(p.tiled)
        return out

    @property
    def winograd(self) -> Dict[str, Optional[str]]:
        out = dict(self.head.winograd)
        for p in self._plans.values():
            out.update(p.winograd)
        return out

    def stats(self) -> dict:
        """Re-plans, re-uses and the cached rest plans (keys: shapes and frozen values)."""
        return {"cut": self.cut_node.name, "kind": self.kind, "value_inputs": list(self.frozen),
                "replans": self.replans, "reuses": self.reuses, "cached": len(self._plans),
                "held_bytes": self.held_bytes(),
                "keys": [self._describe(k) for k in self._plans],
                "rest": [p.stats() for p in self._plans.values() if isinstance(p, StagedExecutable)]}

    def _describe(self, key) -> dict:
        shapes, values = key
        return {"shapes": {n: list(s) for n, s in shapes},
                "values": {n: np.frombuffer(b, dt).tolist() for n, dt, _, b in values}}

    # -- planning the rest ---------------------------------------------------------------------
    def _key(self, vals: Dict[str, np.ndarray]) -> tuple:
        shapes = tuple((n, tuple(vals[n].shape)) for n in self.cut_outputs)
        frozen = []
        for n in self.frozen:
            v = vals[n]
            if v.size > MAX_FROZEN_ELEMENTS:
                raise ShapeError(f"node {self.cut_node.name!r} ({self.cut_node.op}): value input {n!r} "
                                 f"has {v.size} elements; shape values over {MAX_FROZEN_ELEMENTS} are refused")
            frozen.append((n, v.dtype.str, tuple(v.shape), np.ascontiguousarray(v).tobytes()))
        return shapes, tuple(frozen)

    def _rest_plan(self, key, vals: Dict[str, np.ndarray]) -> Executable:
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            self.reuses += 1
            return plan
        g = self._rest_graph(vals)
        plan = prepare_plan(g, self.threads, self.memory_limit, DYNAMIC_POOL.arena, self.max_plans)
        self._plans[key] = plan
        self.replans += 1
        # the oldest go first (their arena blocks back to the pool) past the count, or while
        # the plans kept hold more than the memory limit
        while len(self._plans) > self.max_plans or (
                len(self._plans) > 1 and self.memory_limit is not None and self.held_bytes() > self.memory_limit):
            self._plans.popitem(last=False)
        return plan

    def held_bytes(self) -> int:
        """Arena and workspace bytes of the head and of every rest plan kept."""
        def held(p):
            return (p.arena_plan.size if p.arena_plan is not None else 0) + int(p.workspace_bytes)
        return held(self.head) + sum(p.held_bytes() if isinstance(p, StagedExecutable) else held(p)
                                     for p in self._plans.values())

    def _rest_graph(self, vals: Dict[str, np.ndarray]) -> Graph:
        src = self.graph
        names = set(self.rest_inputs) | set(src.outputs)
        for n in self.rest_nodes:
            names.update(i for i in n.inputs if i)
            names.update(o for o in n.outputs if o)
        g = Graph(src.name)
        for name in names:
            t = src.tensors[name]
            g.tensors[name] = Tensor(t.name, t.dtype, t.shape, t.data, t.quant)
        g.nodes = [Node(n.op, list(n.inputs), list(n.outputs), dict(n.attrs), n.name) for n in self.rest_nodes]
        g.outputs = list(src.outputs)
        for name in self.rest_inputs:
            t, v = g.tensors[name], vals[name]
            t.shape = tuple(v.shape)
            if name in self.frozen:
                t.data = np.array(v, dtype=t.dtype)      # a copy: the head's buffer changes
            else:
                g.inputs.append(name)
        # the frozen values are checked as a loaded graph's constants are: schemas, then sizes
        from ...ops import validate_node
        from ...ops.resources import check_graph, default_limit
        for n in g.nodes:
            validate_node(n, g)
        infer_shapes(g, fold=fold_node)
        check_graph(g, self.memory_limit or default_limit(), count_constants=False)
        return g

    # -- running ---------------------------------------------------------------------------------
    def _values(self, feeds) -> Dict[str, np.ndarray]:
        bufs = self.head.run_views(feeds)
        vals = {n: bufs[n] for n in self.rest_inputs if n in bufs}
        if self.step is not None:
            vals.update((o, a) for o, a in zip(self.cut_node.outputs, self.step()) if o)
        return vals

    def run(self, feeds):
        vals = self._values(feeds)
        plan = self._rest_plan(self._key(vals), vals)
        return plan.run({n: vals[n] for n in plan.graph.inputs})

    def run_profiled(self, feeds):
        clock = time.perf_counter
        self.head._feed(feeds)
        times = []
        for node, step in zip(self.head.nodes, self.head.steps):
            t0 = clock()
            step()
            times.append((node.name, node.op, clock() - t0))
        bufs = self.head.buffers
        vals = {n: bufs[n] for n in self.rest_inputs if n in bufs}
        if self.step is not None:
            t0 = clock()
            vals.update((o, a) for o, a in zip(self.cut_node.outputs, self.step()) if o)
            times.append((self.cut_node.name, self.cut_node.op, clock() - t0))
        t0 = clock()
        plan = self._rest_plan(self._key(vals), vals)
        times.append((f"{self.cut_node.name}:plan", "plan", clock() - t0))
        out, rest_times = plan.run_profiled({n: vals[n] for n in plan.graph.inputs})
        return out, times + rest_times
