"""Splitting a graph across backends when one covers only part of it.

Every node that runs goes to the *primary* backend where ``primary.supports(node, graph)``,
else to the *fallback* (the CPU backend, which covers every op). The nodes are then
ordered topologically, keeping a backend's ready nodes together (fewer cuts than the
graph's own order), and split into contiguous *segments*, one backend each.

A cut costs ``bytes crossing it / transfer bandwidth`` of the accelerator side
(``throughput`` profile key ``transfer``); cpu <-> cpu cuts cost nothing. A primary
segment is kept on the primary backend only while it is worth it:

* ``ratio = seconds the segment takes on the fallback / seconds its cut tensors take
  to transfer >= min_ratio`` (5:1 by default): the work taken off the CPU pays for
  the copies many times over; and
* (``require_gain``, on for automatic picks) the segment on the primary plus its
  transfers is estimated faster than on the fallback.

Otherwise the least worthwhile segment is demoted to the fallback, and the split redone,
until every primary segment passes. ``PartitionedExecutable`` prepares each segment
with its backend on a subgraph (inputs: tensors produced outside it; outputs: tensors
consumed outside it or graph outputs) and runs them in order, passing tensors across.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Graph, Node, Tensor
from ..ops.cost import tensor_nbytes
from ..ops.dynamic import data_dependent_tensors
from .base import Backend, Executable
from .throughput import graph_seconds, node_work, running_nodes

DEFAULT_MIN_RATIO = 5.0


@dataclass
class Segment:
    """A contiguous run of nodes on one backend, with its cut tensors and costs."""
    backend: str
    nodes: List[Node]
    inputs: List[str] = field(default_factory=list)     #: non-constant tensors produced outside
    outputs: List[str] = field(default_factory=list)    #: consumed outside, or graph outputs
    flops: float = 0.0
    cut_bytes: int = 0
    est_s: float = 0.0          #: on its own backend
    fallback_s: float = 0.0     #: the same nodes on the fallback
    transfer_s: float = 0.0
    ratio: Optional[float] = None   #: fallback_s / transfer_s (None: no transfer)

    def summary(self) -> dict:
        ops: Dict[str, int] = {}
        for n in self.nodes:
            ops[n.op] = ops.get(n.op, 0) + 1
        return {"backend": self.backend, "nodes": len(self.nodes), "ops": ops,
                "first": self.nodes[0].name, "last": self.nodes[-1].name,
                "inputs": list(self.inputs), "outputs": list(self.outputs), "flops": int(self.flops),
                "cut_bytes": int(self.cut_bytes), "est_ms": self.est_s * 1e3,
                "fallback_ms": self.fallback_s * 1e3, "transfer_ms": self.transfer_s * 1e3,
                "ratio": self.ratio}


@dataclass
class PartitionPlan:
    primary: str
    fallback: str
    assignment: Dict[str, str]          #: node name -> backend name
    segments: List[Segment]
    min_ratio: float
    est_s: float                        #: whole plan: segments plus transfers
    demoted: List[str] = field(default_factory=list)   #: why segments went back to the fallback

    @property
    def name(self) -> str:
        """``primary+fallback`` (e.g. ``opencl+cpu``) when both run segments, else the one that does."""
        used = {s.backend for s in self.segments}
        if len(used) > 1:
            return f"{self.primary}+{self.fallback}"
        return next(iter(used)) if used else self.fallback

    @property
    def offloaded(self) -> bool:
        return any(s.backend == self.primary for s in self.segments)

    def summary(self) -> dict:
        return {"name": self.name, "primary": self.primary, "fallback": self.fallback,
                "min_ratio": self.min_ratio, "est_ms": self.est_s * 1e3,
                "segments": [s.summary() for s in self.segments], "demoted": list(self.demoted)}


def assign(graph: Graph, primary: Backend, fallback: Backend) -> Dict[str, str]:
    """node name -> backend name for every running node: the primary where it supports the node
    and touches no tensor whose shape is decided at run time (those plan on the CPU, in stages)."""
    out, missing = {}, {}
    dyn = data_dependent_tensors(graph)
    for n in running_nodes(graph):
        if not any(t in dyn for t in n.inputs + n.outputs if t) and primary.supports(n, graph):
            out[n.name] = primary.name
        elif fallback.supports(n, graph):
            out[n.name] = fallback.name
        else:
            missing[n.op] = missing.get(n.op, 0) + 1
    if missing:
        raise UnsupportedOpError(f"neither {primary.name} nor {fallback.name} runs op(s) "
                                 + ", ".join(f"{k} x{v}" for k, v in sorted(missing.items())))
    return out


def schedule(graph: Graph, assignment: Dict[str, str]) -> List[Node]:
    """Running nodes in a topological order that keeps each backend's ready nodes together."""
    nodes = [n for n in running_nodes(graph) if n.name in assignment]
    prod = {o: n for n in nodes for o in n.outputs if o}
    pos = {id(n): k for k, n in enumerate(nodes)}
    indeg = {id(n): 0 for n in nodes}
    users: Dict[int, List[Node]] = {id(n): [] for n in nodes}
    for n in nodes:
        for i in set(x for x in n.inputs if x):
            p = prod.get(i)
            if p is not None and p is not n:
                indeg[id(n)] += 1
                users[id(p)].append(n)
    ready: Dict[str, list] = {}

    def push(n):
        heapq.heappush(ready.setdefault(assignment[n.name], []), (pos[id(n)], id(n), n))
    for n in nodes:
        if indeg[id(n)] == 0:
            push(n)
    order: List[Node] = []
    current = None
    while any(ready.values()):
        if current not in ready or not ready[current]:
            # switch to the backend whose next ready node comes first in graph order
            current = min((h[0][0], b) for b, h in ready.items() if h)[1]
        _, _, n = heapq.heappop(ready[current])
        order.append(n)
        for u in users[id(n)]:
            indeg[id(u)] -= 1
            if indeg[id(u)] == 0:
                push(u)
    return order


def split(graph: Graph, order: List[Node], assignment: Dict[str, str]) -> List[Segment]:
    """Contiguous segments of ``order`` per backend, with their cut tensors."""
    segs: List[Segment] = []
    for n in order:
        b = assignment[n.name]
        if not segs or segs[-1].backend != b:
            segs.append(Segment(b, []))
        segs[-1].nodes.append(n)
    seg_of = {n.name: k for k, s in enumerate(segs) for n in s.nodes}
    producer = {o: seg_of[n.name] for s in segs for n in s.nodes for o in n.outputs if o}
    consumed_in: Dict[str, set] = {}
    for k, s in enumerate(segs):
        for n in s.nodes:
            for i in n.inputs:
                if i:
                    consumed_in.setdefault(i, set()).add(k)
    graph_outputs = set(graph.outputs)
    for k, s in enumerate(segs):
        ins, outs = [], []
        for n in s.nodes:
            for i in n.inputs:
                if i and i not in ins and producer.get(i, -1) != k and not graph.tensors[i].is_const:
                    ins.append(i)
            for o in n.outputs:
                if o and (o in graph_outputs or consumed_in.get(o, set()) - {k}):
                    outs.append(o)
        s.inputs, s.outputs = ins, outs
    return segs


def cost_segments(graph: Graph, segs: List[Segment], profiles: Dict[str, dict], fallback: str) -> float:
    """Fill each segment's costs; returns the estimated seconds of the whole plan."""
    fb = profiles.get(fallback) or {}
    total = 0.0
    for s in segs:
        prof = profiles.get(s.backend) or fb
        s.flops = sum(node_work(n, graph)["flops"] for n in s.nodes)
        s.cut_bytes = sum(tensor_nbytes(graph, t) for t in s.inputs + s.outputs)
        s.est_s = graph_seconds(graph, prof, s.nodes, fallback=fb)
        s.fallback_s = graph_seconds(graph, fb, s.nodes) if s.backend != fallback else s.est_s
        bw = prof.get("transfer") if s.backend != fallback else None
        s.transfer_s = s.cut_bytes / bw if bw else 0.0
        s.ratio = s.fallback_s / s.transfer_s if s.transfer_s > 0 else None
        total += s.est_s + s.transfer_s
    return total


def plan_partition(graph: Graph, primary: Backend, fallback: Backend, profiles: Dict[str, dict],
                   min_ratio: float = DEFAULT_MIN_RATIO, require_gain: bool = True) -> PartitionPlan:
    """Segments of ``graph`` (concrete shapes) between ``primary`` and ``fallback`` (module doc)."""
    assignment = assign(graph, primary, fallback)
    demoted: List[str] = []
    while True:
        segs = split(graph, schedule(graph, assignment), assignment)
        total = cost_segments(graph, segs, profiles, fallback.name)
        bad = []
        for s in segs:
            if s.backend != primary.name:
                continue
            ratio_ok = s.ratio is None or s.ratio >= min_ratio
            gain_ok = not require_gain or s.est_s + s.transfer_s < s.fallback_s
            if not (ratio_ok and gain_ok):
                bad.append((s.ratio if s.ratio is not None else float("inf"), s, ratio_ok))
        if not bad:
            return PartitionPlan(primary.name, fallback.name, assignment, segs, min_ratio, total, demoted)
        _, worst, ratio_ok = min(bad, key=lambda b: (b[0], b[1].fallback_s))
        why = (f"estimated {worst.est_s * 1e3:.3f} ms + {worst.transfer_s * 1e3:.3f} ms transfer on "
               f"{primary.name} is not faster than {worst.fallback_s * 1e3:.3f} ms on {fallback.name}"
               if ratio_ok else
               f"compute-to-transfer ratio {worst.ratio:.1f} < {min_ratio:g} "
               f"({worst.fallback_s * 1e3:.3f} ms of work, {worst.cut_bytes:,} B cut)")
        demoted.append(f"{worst.nodes[0].name}..{worst.nodes[-1].name} ({len(worst.nodes)} nodes): {why}")
        for n in worst.nodes:
            assignment[n.name] = fallback.name


def run_time_shapes_crossing(graph: Graph, segments: List[Segment]) -> List[str]:
    """Tensors whose shape is decided at run time that a segment takes from another: such a
    split cannot be planned (a segment plans for the shapes of its inputs)."""
    return [t for s in segments for t in s.inputs if not graph.tensors[t].is_static]


def subgraph(graph: Graph, seg: Segment, index: int = 0) -> Graph:
    """A standalone graph of one segment: its nodes, the tensors they touch, cut inputs/outputs."""
    g = Graph(f"{graph.name}/segment{index}:{seg.backend}")
    names = {x for n in seg.nodes for x in list(n.inputs) + list(n.outputs) if x}
    for name in names:
        t = graph.tensors[name]
        g.tensors[name] = Tensor(t.name, t.dtype, t.shape, t.data, None if t.quant is None else dict(t.quant))
    g.nodes = [Node(n.op, list(n.inputs), list(n.outputs), dict(n.attrs), n.name) for n in seg.nodes]
    g.inputs, g.outputs = list(seg.inputs), list(seg.outputs)
    g.metadata = dict(graph.metadata)
    return g


class PartitionedExecutable(Executable):
    """Segments prepared by their backends, run in order; tensors pass across the cuts."""

    def __init__(self, graph: Graph, segments: List[Segment], backends: Dict[str, Backend],
                 threads: Optional[int] = None, **options):
        self.graph = graph
        self.segments = segments
        # each segment plans its own buffers: a shared run-slot arena is for one executable
        options.pop("arena_alloc", None)
        self.parts = [(s, backends[s.backend].prepare(subgraph(graph, s, k), threads=threads, **options))
                      for k, s in enumerate(segments)]
        self.nodes = [n for s in segments for n in s.nodes]
        self.workspace_bytes = sum(int(ex.workspace_bytes) for _, ex in self.parts)
        self.notes = {k: v for _, ex in self.parts for k, v in ex.notes.items()}
        self._const_out = {o: graph.tensors[o].data for o in graph.outputs if graph.tensors[o].is_const}

    def _collect(self, env, feeds):
        return {o: (np.array(self._const_out[o]) if o in self._const_out
                    else np.array(env[o]) if o in feeds else env[o]) for o in self.graph.outputs}

    def run(self, feeds):
        env = dict(feeds)
        for seg, ex in self.parts:
            env.update(ex.run({n: env[n] for n in seg.inputs}))
        return self._collect(env, feeds)

    def run_profiled(self, feeds):
        env, times = dict(feeds), []
        for seg, ex in self.parts:
            t0 = time.perf_counter()
            out, t = ex.run_profiled({n: env[n] for n in seg.inputs})
            env.update(out)
            inner = sum(x[2] for x in t)
            times.extend(t)
            # what the segment's run cost beyond its nodes: feeding, copies, transfers
            times.append((f"transfer:{seg.backend}:{seg.nodes[0].name}", "Transfer",
                          max(time.perf_counter() - t0 - inner, 0.0)))
        return self._collect(env, feeds), times


class PartitionedBackend(Backend):
    """Prepares a graph as the segments of a partition plan (by node name)."""

    def __init__(self, plan: PartitionPlan, backends: Dict[str, Backend]):
        self.plan = plan
        self.backends = backends
        self.name = plan.name

    def supported_ops(self):
        return sorted({op for b in self.backends.values() for op in b.supported_ops()})

    def supports(self, node: Node, graph: Graph) -> bool:
        return any(b.supports(node, graph) for b in self.backends.values())

    def prepare(self, graph: Graph, threads: Optional[int] = None, **options) -> PartitionedExecutable:
        segs = split(graph, schedule(graph, self.plan.assignment), self.plan.assignment)
        return PartitionedExecutable(graph, segs, self.backends, threads, **options)


def format_plan(plan: PartitionPlan) -> str:
    """The table ``inspect --partition`` prints."""
    lines = [f"partition {plan.name}: primary {plan.primary}, fallback {plan.fallback}, "
             f"min compute-to-transfer ratio {plan.min_ratio:g}, estimated {plan.est_s * 1e3:.3f} ms"]
    lines.append(f"  {'#':>2} {'backend':8} {'nodes':>5} {'MFLOP':>9} {'cut bytes':>11} {'est ms':>8} "
                 f"{'cpu ms':>8} {'xfer ms':>8} {'ratio':>7}  ops")
    for k, s in enumerate(plan.segments):
        ops: Dict[str, int] = {}
        for n in s.nodes:
            ops[n.op] = ops.get(n.op, 0) + 1
        text = ", ".join(f"{o} x{c}" for o, c in sorted(ops.items(), key=lambda kv: -kv[1]))
        ratio = "-" if s.ratio is None else f"{s.ratio:.1f}"
        lines.append(f"  {k:>2} {s.backend:8} {len(s.nodes):5d} {s.flops / 1e6:9.2f} {s.cut_bytes:11,d} "
                     f"{s.est_s * 1e3:8.3f} {s.fallback_s * 1e3:8.3f} {s.transfer_s * 1e3:8.3f} {ratio:>7}  "
                     f"{text[:70]}")
    for d in plan.demoted:
        lines.append(f"  kept on {plan.fallback}: {d}")
    return "\n".join(lines)
