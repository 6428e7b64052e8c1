"""The numpy CPU backend: binds kernels to preallocated buffers and runs them."""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ...errors import GraphError, UnsupportedOpError
from ...ir import Graph, Node, Tensor
from ..base import Backend, Executable
from ...memory.arena import ArenaPlan, arena_views, plan_arena
from .registry import KERNELS
from .kernels.elementwise import INPLACE_SAFE
from . import kernels as _kernels  # noqa: F401  (registers the kernels)


class PrepareContext:
    """What a kernel's prepare step may see and ask for."""

    def __init__(self, graph: Graph, buffers: Dict[str, np.ndarray], threads: int = 1):
        self.graph = graph
        self.buffers = buffers
        self.threads = threads
        self.workspace_bytes = 0
        self.notes: Dict[str, str] = {}

    def tensor(self, name: str) -> Tensor:
        return self.graph.tensors[name]

    def value(self, name: str) -> Optional[np.ndarray]:
        """The array behind ``name``: constant data or the planned buffer; None for ''."""
        if not name:
            return None
        t = self.graph.tensors[name]
        if t.is_const:
            return t.data
        return self.buffers[name]

    def const(self, name: str) -> Optional[np.ndarray]:
        """The constant value of ``name``, or None if it is not a constant."""
        if not name:
            return None
        t = self.graph.tensors[name]
        return t.data if t.is_const else None

    def workspace(self, shape, dtype="float32") -> np.ndarray:
        """Scratch memory owned by the plan, allocated now, reused every run."""
        buf = np.empty(shape, dtype)
        self.workspace_bytes += buf.nbytes
        return buf

    def note(self, node: Node, text: str) -> None:
        """Record the algorithm a kernel chose for ``node`` (shown by inspect)."""
        self.notes[node.name] = text


def aligned_empty(nbytes: int, align: int = 64) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose data starts on an ``align``-byte boundary."""
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


def allocate_buffers(graph: Graph, nodes: List[Node]) -> Tuple[Dict[str, np.ndarray], ArenaPlan]:
    """Views into one planned activation arena for every non-constant tensor."""
    names = []
    for name in list(graph.inputs) + [o for n in nodes for o in n.outputs if o]:
        t = graph.tensors[name]
        if t.is_const:
            continue
        if not t.is_static:
            raise GraphError(f"tensor {name!r} has no concrete shape ({t.shape}); pin input shapes")
        names.append(name)
    plan = plan_arena(graph, names, inplace_ops=INPLACE_SAFE)
    arena = aligned_empty(max(plan.size, 1))
    return arena_views(graph, plan, arena), plan


def prepare_node(node: Node, ctx: PrepareContext) -> Callable[[], None]:
    fn = KERNELS.get(node.op)
    if fn is None:
        raise UnsupportedOpError(f"CPU backend has no kernel for op {node.op!r} (node {node.name!r})")
    return fn(node, ctx)


def fold_node(node: Node, graph: Graph) -> None:
    """Evaluate a node whose inputs are all known, storing results as constants."""
    bufs = {o: np.empty(graph.tensors[o].shape, graph.tensors[o].dtype) for o in node.outputs if o}
    for o in bufs:  # a re-fold must write the fresh buffer, not the old constant
        graph.tensors[o].data = None
    ctx = PrepareContext(graph, bufs)
    prepare_node(node, ctx)()
    for o, arr in bufs.items():
        graph.tensors[o].data = arr


def _with_nodes(graph: Graph, nodes: List[Node]) -> Graph:
    g = Graph(graph.name)
    g.tensors, g.nodes, g.inputs, g.outputs = graph.tensors, nodes, graph.inputs, graph.outputs
    return g


class CpuExecutable(Executable):
    def __init__(self, graph: Graph, threads: int = 1):
        self.graph = graph
        self.nodes = [n for n in graph.nodes if not all(graph.tensors[o].is_const for o in n.outputs if o)]
        run_graph = graph if len(self.nodes) == len(graph.nodes) else _with_nodes(graph, self.nodes)
        self.buffers, self.arena_plan = allocate_buffers(run_graph, self.nodes)
        ctx = PrepareContext(graph, self.buffers, threads)
        self.steps: List[Callable[[], None]] = [prepare_node(n, ctx) for n in self.nodes]
        self.notes = ctx.notes
        self.workspace_bytes = ctx.workspace_bytes
        self._in = [(name, self.buffers[name]) for name in graph.inputs if name in self.buffers]
        self._out = [(name, self.buffers.get(name, graph.tensors[name].data)) for name in graph.outputs]

    def _feed(self, feeds):
        for name, buf in self._in:
            np.copyto(buf, feeds[name], casting="same_kind")

    def run(self, feeds):
        self._feed(feeds)
        for step in self.steps:
            step()
        return {name: np.array(buf) for name, buf in self._out}

    def run_profiled(self, feeds):
        self._feed(feeds)
        times = []
        clock = time.perf_counter
        for node, step in zip(self.nodes, self.steps):
            t0 = clock()
            step()
            times.append((node.name, node.op, clock() - t0))
        return {name: np.array(buf) for name, buf in self._out}, times


class CpuBackend(Backend):
    """numpy/BLAS kernels for every supported op."""

    name = "cpu"

    def supported_ops(self):
        return sorted(KERNELS)

    def prepare(self, graph: Graph, threads: Optional[int] = None, **options) -> CpuExecutable:
        return CpuExecutable(graph, threads or 1)
