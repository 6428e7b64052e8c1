"""The OpenCL executable: memory plan, constant upload, kernel binding (prepare) and runs.

Prepare (once per plan):

* view ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) are aliases: their
  output names the input's bytes, so they cost nothing at run time;
* an element-wise binary whose output only feeds an activation is fused with it (one
  kernel writes the activation's output; the binary's own output never exists);
* every remaining activation gets an offset in ONE device buffer planned by
  ``memory/arena.py`` ``plan_arena`` (greedy by size over lifetimes, in-place for the
  element-wise kernels that are safe for it). One buffer, not one per tensor: the planner
  already packs tensors with disjoint lifetimes into one block (ResNet-50: a few MB instead
  of the sum of all activations), and one allocation is what a small-memory GPU wants.
  Kernels take (buffer, element offset) pairs instead of sub-buffers, so offsets need not
  meet the device's base-address alignment;
* constants are uploaded once (read-only buffers), weights packed as the kernels want;
* scratch (im2col columns) is one buffer per role sized for the largest user (kernels run
  in order on one in-order queue, so users never overlap);
* every kernel gets its arguments now; a run only enqueues.

Run: inputs are written into the arena, the kernels enqueued, outputs read back: the
only host transfers.
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...errors import GraphError, UnsupportedOpError
from ...ir import Graph, Node
from ...memory.arena import plan_arena
from ..base import Executable
from . import build, ops_int8, ops_tensor  # noqa: F401  (register their kernels)
from .ops import find_fusions

#: ops whose output is a view of input 0 (same bytes, another shape)
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}


class Scratch:
    """Placeholder for a shared scratch buffer, bound once every node is prepared."""

    def __init__(self, role: str):
        self.role = role


class PrepareContext:
    """What an op's prepare function may see and ask for (see ops.py)."""

    def __init__(self, graph: Graph, cl_ctx, device, locate, dry: bool = False,
                 options: Optional[dict] = None, fused: Optional[dict] = None):
        self.graph = graph
        #: the plan's options (``conv_algorithm``, ``gemm``)
        self.options: dict = dict(options or {})
        #: binary -> activation pairs run as one kernel (``ops.find_fusions``)
        self.fused: dict = fused or {}
        self.cl_ctx = cl_ctx
        self.device = device
        self._locate = locate          # name -> (buffer, byte offset) for activations
        self.dry = dry                 # supports(): check only, no device work
        self.launches: List[tuple] = []
        self.scratch_bytes: Dict[str, int] = {}
        self.notes: Dict[str, str] = {}
        self._consts: Dict[str, object] = {}
        self.held: List[object] = []   # every uploaded buffer: kernels do not keep their args alive
        # constants shared by every plan of this graph on this context (weights exist once)
        self.shared: Dict[object, object] = {} if dry else \
            graph.__dict__.setdefault("_opencl_constants", {}).setdefault(id(cl_ctx), {})
        self.const_bytes = 0

    # -- graph ----------------------------------------------------------------------------
    def tensor(self, name: str):
        return self.graph.tensors[name]

    def shape(self, name: str) -> Tuple[int, ...]:
        t = self.graph.tensors[name]
        if not t.is_static:
            raise UnsupportedOpError(f"tensor {name!r} has no concrete shape")
        return tuple(int(d) for d in t.shape)

    def dtype(self, name: str) -> str:
        return self.graph.tensors[name].dtype

    def const(self, name: str) -> Optional[np.ndarray]:
        if not name:
            return None
        t = self.graph.tensors[name]
        return t.data if t.is_const else None

    # -- buffers ----------------------------------------------------------------------------
    def ref(self, name: str) -> Tuple[object, int]:
        """(buffer, element offset) of tensor ``name`` (constants: uploaded once)."""
        t = self.graph.tensors[name]
        if t.is_const:
            buf = self._consts.get(name)
            if buf is None:
                buf = self._consts[name] = self.upload(np.ascontiguousarray(t.data), key=("const", name))
            return buf, 0
        if self.dry:
            return None, 0
        buf, off = self._locate(name)
        return buf, off // np.dtype(t.dtype).itemsize

    def upload(self, arr: np.ndarray, key=None):
        """A read-only device buffer holding ``arr`` (at least 4 bytes, never empty).

        ``key`` names a constant (or a packing of one): plans of the same graph (the
        Runtime's pool of concurrent plans) then share one device copy of it."""
        if self.dry:
            return None
        if key is not None and key in self.shared:
            self.held.append(self.shared[key])
            return self.shared[key]
        arr = np.ascontiguousarray(arr)
        import pyopencl as cl
        self.const_bytes += arr.nbytes
        data = arr if arr.nbytes >= 4 else np.zeros(4, np.uint8)
        if arr.nbytes and arr.nbytes < 4:
            data[:arr.nbytes] = arr.view(np.uint8).reshape(-1)
        buf = cl.Buffer(self.cl_ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=data)
        self.held.append(buf)
        if key is not None:
            self.shared[key] = buf
        return buf

    def meta(self, values) -> object:
        """An int32 buffer of shape/stride metadata for a kernel."""
        return self.upload(np.asarray(list(values) or [0], np.int32))

    def scratch(self, role: str, nbytes: int) -> Scratch:
        self.scratch_bytes[role] = max(self.scratch_bytes.get(role, 0), int(nbytes))
        return Scratch(role)

    # -- kernels ----------------------------------------------------------------------------
    def launch(self, node: Node, program: str, kernel: str, gsize, args, lsize=None) -> None:
        """Bind ``kernel`` of ``program`` to ``args`` (ints -> int32, floats -> float32,
        buffers, Scratch placeholders) over ``gsize`` work items."""
        self.launches.append((node, program, kernel, tuple(int(g) for g in gsize),
                              None if lsize is None else tuple(lsize), list(args)))

    def note(self, node: Node, text: str) -> None:
        self.notes[node.name] = text


def _arg(a, scratch_bufs, dummy):
    if isinstance(a, bool):
        return np.int32(a)
    if isinstance(a, np.uint32):           # a raw 32-bit pattern (a pad value of any 4-byte dtype)
        return a
    if isinstance(a, (int, np.integer)):
        if not -(1 << 31) <= int(a) < (1 << 31):
            raise UnsupportedOpError(f"kernel argument {a} does not fit int32")
        return np.int32(a)
    if isinstance(a, (float, np.floating)):
        return np.float32(a)
    if isinstance(a, Scratch):
        return scratch_bufs[a.role]
    if a is None:
        return dummy
    return a


def is_view(node: Node, graph: Graph) -> bool:
    """A view op that can alias its input: not of a constant, no second output (Dropout's mask)."""
    return (node.op in VIEW_OPS and not graph.tensors[node.inputs[0]].is_const
            and not any(node.outputs[1:]))


def plan_names(graph: Graph, nodes: List[Node], fused: Dict[str, Node]):
    """Rename tensors for planning: view outputs -> their input, a fused binary's output ->
    its activation's output. Returns (alias map, nodes as the planner sees them)."""
    alias: Dict[str, str] = {}

    def root(n):
        while n in alias:
            n = alias[n]
        return n
    planned: List[Node] = []
    for node in nodes:
        if is_view(node, graph):
            alias[node.outputs[0]] = node.inputs[0]
            continue
        if node.name in fused:                     # the activation folded into its producer
            continue
        outs = list(node.outputs)
        act = fused.get(("producer", node.name))
        if act is not None:
            alias[node.outputs[0]] = act.outputs[0]
            outs = [act.outputs[0]] + outs[1:]
        planned.append(Node(node.op, [root(i) if i else i for i in node.inputs], outs, node.attrs, node.name))
    # aliases to a fused activation's output point forward: resolve every name fully
    return {k: root(k) for k in alias}, planned


class OpenCLExecutable(Executable):
    """A graph prepared for one OpenCL device: one arena, constants resident, kernels bound."""

    def __init__(self, graph: Graph, device, cl_ctx, queue, table, inplace_ops, options=None):
        import pyopencl as cl
        self.graph = graph
        self.device = device
        self.queue = queue
        options = dict(options or {})
        self.nodes = [n for n in graph.nodes if not all(graph.tensors[o].is_const for o in n.outputs if o)]
        for name in list(graph.inputs) + [o for n in self.nodes for o in n.outputs if o]:
            t = graph.tensors[name]
            if not t.is_const and not t.is_static:
                raise GraphError(f"tensor {name!r} has no concrete shape ({t.shape}); pin input shapes")
        fused = find_fusions(graph, self.nodes)
        alias, planned = plan_names(graph, self.nodes, fused)
        pg = Graph(graph.name)
        pg.tensors, pg.nodes, pg.inputs = graph.tensors, planned, list(graph.inputs)
        pg.outputs = [alias.get(o, o) for o in graph.outputs]
        names = list(dict.fromkeys(n for n in list(graph.inputs) + [o for nd in planned for o in nd.outputs if o]
                                   if not graph.tensors[n].is_const))
        self.arena_plan = plan_arena(pg, names, inplace_ops=set(inplace_ops))
        self.arena = cl.Buffer(cl_ctx, cl.mem_flags.READ_WRITE, max(self.arena_plan.size, 64))
        offsets = self.arena_plan.offsets

        def locate(name):
            return self.arena, offsets[alias.get(name, name)]
        pc = PrepareContext(graph, cl_ctx, device, locate, options=options, fused=fused)
        for node in self.nodes:
            if node.op in VIEW_OPS and node.outputs[0] in alias:
                pc.note(node, "view (aliases its input; no kernel)")
                continue
            if node.name in fused:
                pc.note(node, "fused into the producing element-wise kernel")
                continue
            table.prepare(node, pc)      # the entry for the node's op, dtype, sparsity, layout
        self.notes = pc.notes
        self.workspace_bytes = sum(pc.scratch_bytes.values())
        self.constant_bytes = pc.const_bytes
        scratch_bufs = {r: cl.Buffer(cl_ctx, cl.mem_flags.READ_WRITE, max(b, 64)) for r, b in pc.scratch_bytes.items()}
        dummy = cl.Buffer(cl_ctx, cl.mem_flags.READ_WRITE, 64)
        self._keep = [pc.held, scratch_bufs, dummy]
        #: (node, kernel, global size, local size) in order: a run only enqueues these
        self.steps = []
        for node, prog, kname, gsize, lsize, args in pc.launches:
            k = cl.Kernel(build.program(cl_ctx, device, prog), kname)
            k.set_args(*[_arg(a, scratch_bufs, dummy) for a in args])
            self.steps.append((node, k, gsize, lsize))
        self._in = []
        for name in graph.inputs:
            t = graph.tensors[name]
            if t.is_const:
                continue
            self._in.append((name, offsets[alias.get(name, name)], np.dtype(t.dtype), tuple(t.shape)))
        self._out = []
        for name in graph.outputs:
            t = graph.tensors[name]
            if t.is_const:
                self._out.append((name, None, np.dtype(t.dtype), t.data))
            else:
                self._out.append((name, offsets[alias.get(name, name)], np.dtype(t.dtype), tuple(t.shape)))

    def _feed(self, feeds):
        import pyopencl as cl
        held = []
        for name, off, dt, shape in self._in:
            a = np.ascontiguousarray(feeds[name], dtype=dt)
            if a.shape != shape:
                a = a.reshape(shape)
            held.append(a)
            if a.nbytes:
                cl.enqueue_copy(self.queue, self.arena, a, dst_offset=off, is_blocking=False)
        return held

    def _fetch(self):
        import pyopencl as cl
        outs, events = {}, []
        for name, off, dt, shape in self._out:
            if off is None:
                outs[name] = np.array(shape)
                continue
            a = np.empty(shape, dt)
            if a.nbytes:
                events.append(cl.enqueue_copy(self.queue, a, self.arena, src_offset=off, is_blocking=False))
            outs[name] = a
        cl.wait_for_events(events) if events else self.queue.finish()
        return outs

    def run(self, feeds):
        import pyopencl as cl
        held = self._feed(feeds)
        q, enqueue = self.queue, cl.enqueue_nd_range_kernel
        for _, k, g, l in self.steps:
            enqueue(q, k, g, l)
        out = self._fetch()
        del held
        return out

    def run_profiled(self, feeds):
        import pyopencl as cl
        held = self._feed(feeds)
        self.queue.finish()
        per_node: Dict[str, float] = {}
        clock = time.perf_counter
        for node, k, g, l in self.steps:
            t0 = clock()
            cl.enqueue_nd_range_kernel(self.queue, k, g, l)
            self.queue.finish()
            per_node[node.name] = per_node.get(node.name, 0.0) + clock() - t0
        out = self._fetch()
        del held
        return out, [(n.name, n.op, per_node.get(n.name, 0.0)) for n in self.nodes]
