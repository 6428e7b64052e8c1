"""The CUDA executable: buffers planned once, constants uploaded once, launches bound at prepare.

Prepare runs the launchers twice. A *sizing* pass with stand-in arrays (no device touched)
checks every launch's arguments against the kernel signatures and records how much scratch
each role needs; then the device pass allocates the activation arena (memory/arena.py), one
buffer per scratch role, and the graph inputs and outputs, and binds every launch. ``run``
only launches.

Inputs and outputs live outside the arena, in two *slots* so that frames can overlap:

* discrete GPU: a slot holds device input/output buffers plus pinned host staging; frame n+1's
  inputs upload on a second stream while frame n computes (an event orders the compute after
  its upload), outputs download on the compute stream into the slot's staging;
* integrated GPU (Jetson): a slot's inputs and outputs are mapped, pinned host memory bound
  straight into the kernels: the host writes the frame, the kernels read it, no copy at all.

``run_async(feeds)`` returns a handle whose ``result()`` waits and returns the outputs; at
most two frames are in flight (a third ``run_async`` first finishes the oldest).
"""
from __future__ import annotations

import os
import time
from typing import Dict, List, Optional

import numpy as np

from ...errors import GraphError, UnsupportedOpError
from ...ir import Graph, Node
from ...memory.arena import plan_arena
from ..base import Executable
from . import ops_int8, ops_nn  # noqa: F401  (register their launchers)
from .ops import UNARY_OPS, fake
from .registry import TABLE
from .signatures import check_args

#: ops whose kernels read element i before writing element i only (output may alias input 0)
INPLACE_OK = frozenset(set(UNARY_OPS) | {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Clip",
                                          "BatchNormalization"})


def find_launcher(node: Node, ctx):
    """The launcher of ``node``: the kernel table's int8 entry for an int8 node, else the fp32 one."""
    return TABLE.lookup(node, ctx).prepare


class LaunchContext:
    """What a launcher may see and ask for (the CUDA PrepareContext). ``dev`` None: the
    sizing pass, where arrays are stand-ins, launches are only checked, nothing is bound."""

    def __init__(self, graph: Graph, dev, bufs: Dict[str, object], uploads: Dict, scratch=None):
        self.graph, self.dev, self.bufs = graph, dev, bufs
        self.sizing = dev is None
        self.uploads = uploads                 # constant name / key -> device array (shared by slots)
        self.scratch_bufs = scratch or {}      # (role, dtype) -> flat device array
        self.scratch_need: Dict = {}
        self.notes: Dict[str, str] = {}
        self.keep: List = []                   # host arrays a launch binds (the emulator needs them alive)

    # graph
    def tensor(self, name: str):
        return self.graph.tensors[name]

    def const(self, name: str) -> Optional[np.ndarray]:
        if not name:
            return None
        t = self.graph.tensors[name]
        return t.data if t.is_const else None

    def buf(self, name: str):
        """The device array of a tensor: planned buffer, slot input/output, or uploaded constant."""
        if name in self.bufs:
            return self.bufs[name]
        t = self.graph.tensors[name]
        if not t.is_const:
            raise GraphError(f"tensor {name!r} has no buffer")
        key = ("const", name)
        if key not in self.uploads:
            self.uploads[key] = self.upload(np.ascontiguousarray(t.data))
        return self.uploads[key]

    value = buf

    # memory
    def upload(self, arr: np.ndarray):
        arr = np.ascontiguousarray(arr)
        if self.sizing:
            return arr
        return self.dev.upload(arr)

    def meta(self, ints) -> object:
        return self.upload(np.asarray(list(ints), np.int64).reshape(-1))

    def dummy(self, dtype):
        key = ("dummy", np.dtype(dtype).name)
        if key not in self.uploads:
            self.uploads[key] = self.upload(np.zeros(1, dtype))
        return self.uploads[key]

    def scratch(self, role: str, shape, dtype):
        """Scratch shared by every node of the plan per (role, dtype): steps run one at a time."""
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        key = (role, dt.name)
        self.scratch_need[key] = max(self.scratch_need.get(key, 0), n)
        if self.sizing:
            return fake(shape, dt)
        return self.scratch_bufs[key][:n].reshape(tuple(int(s) for s in shape))

    @staticmethod
    def flat(arr, offset: int, dtype):
        """``arr`` (contiguous) as a flat array of ``dtype`` (same item size) from element ``offset``."""
        return arr.reshape(-1).view(np.dtype(dtype))[int(offset):]

    @staticmethod
    def reshape(arr, shape):
        return arr.reshape(tuple(int(s) for s in shape))

    # launches
    def launch(self, kernel: str, grid, block, args):
        check_args(kernel, args)
        if any(int(g) < 1 for g in grid) or int(np.prod(block)) > 1024 or int(np.prod(block)) < 1:
            raise UnsupportedOpError(f"{kernel}: bad launch geometry grid {grid} block {block}")
        if self.sizing:
            return None
        self.keep.append(args)
        return self.dev.bind(kernel, grid, block, args)

    def matmul(self, a, b, out):
        want = np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])) + (a.shape[-2], b.shape[-1])
        if a.shape[-1] != b.shape[-2] or tuple(out.shape) != want:
            raise GraphError(f"matmul {a.shape} @ {b.shape} -> {out.shape}")
        if self.sizing:
            return None
        return self.dev.matmul(a, b, out)

    def note(self, node: Node, text: str) -> None:
        self.notes[node.name] = text


def prepare_steps(node: Node, ctx: LaunchContext) -> list:
    return [s for s in find_launcher(node, ctx)(node, ctx) if s is not None]


def _with_nodes(graph: Graph, nodes: List[Node]) -> Graph:
    g = Graph(graph.name)
    g.tensors, g.nodes, g.inputs, g.outputs = graph.tensors, nodes, graph.inputs, graph.outputs
    return g


def sizing_pass(graph: Graph, nodes: List[Node]) -> LaunchContext:
    """Run every launcher on stand-ins: checks every launch, returns the scratch needs."""
    bufs = {}
    for n in nodes:
        for name in list(n.inputs) + list(n.outputs):
            if name and not graph.tensors[name].is_const:
                t = graph.tensors[name]
                if not t.is_static:
                    raise GraphError(f"tensor {name!r} has no concrete shape ({t.shape}); pin input shapes")
                bufs[name] = fake(t.shape, t.dtype)
    ctx = LaunchContext(graph, None, bufs, {})
    for n in nodes:
        prepare_steps(n, ctx)
    return ctx


class _Slot:
    def __init__(self):
        self.inputs = []       # (name, host view, device view)
        self.outputs = []      # (name, host view, device view)
        self.steps: List = []
        self.pending = None
        self.uploaded = self.done = None
        self.runs = 0
        self.graph = None      # the CUDA graph of the slot's launches, captured at its second run


class Pending:
    """A frame in flight; ``result()`` waits for it and returns its outputs (fresh arrays)."""

    def __init__(self, exe: "CudaExecutable", slot: _Slot, feeds):
        self.exe, self.slot, self.feeds = exe, slot, feeds
        self._out = None

    def done(self) -> bool:
        return self._out is not None

    def result(self) -> Dict[str, np.ndarray]:
        if self._out is None:
            self.slot.done.synchronize()
            got = {name: np.array(host) for name, host, _ in self.slot.outputs}
            out = {}
            for name in self.exe.graph.outputs:
                if name in got:
                    out[name] = got[name]
                elif name in self.feeds:
                    out[name] = np.array(self.feeds[name])
                else:
                    out[name] = np.array(self.exe.graph.tensors[name].data)
            self._out = out
            if self.slot.pending is self:
                self.slot.pending = None
            self.feeds = None
        return self._out


class CudaExecutable(Executable):
    def __init__(self, graph: Graph, device, slots: int = 2):
        self.graph, self.dev = graph, device
        self.nodes = [n for n in graph.nodes if not all(graph.tensors[o].is_const for o in n.outputs if o)]
        run_graph = graph if len(self.nodes) == len(graph.nodes) else _with_nodes(graph, self.nodes)
        io = set(graph.inputs) | set(graph.outputs)
        inter = [o for n in self.nodes for o in n.outputs if o and o not in io and not graph.tensors[o].is_const]
        sized = sizing_pass(graph, self.nodes)
        self.arena_plan = plan_arena(run_graph, inter, inplace_ops=set(INPLACE_OK))
        self.arena = device.empty(self.arena_plan.size)
        arena_bufs = {name: device.view(self.arena, off, graph.tensors[name].shape, graph.tensors[name].dtype)
                      for name, off in self.arena_plan.offsets.items()}
        scratch = {key: device.view(device.empty(n * np.dtype(key[1]).itemsize), 0, (n,), key[1])
                   for key, n in sized.scratch_need.items()}
        #: device scratch (im2col columns and other per-role buffers), as the CPU's workspace
        self.workspace_bytes = sum(n * np.dtype(k[1]).itemsize for k, n in sized.scratch_need.items())
        self.integrated = bool(getattr(device, "integrated", False))
        uploads: Dict = {}
        self.slots = [_Slot() for _ in range(max(1, slots))]
        io_nodes = {k for k, n in enumerate(self.nodes) if io & set(n.inputs) | io & set(n.outputs)}
        self.notes = {}
        for si, slot in enumerate(self.slots):
            bufs = dict(arena_bufs)
            for kind, names in (("in", [i for i in graph.inputs if not graph.tensors[i].is_const]),
                                ("out", [o for o in graph.outputs if o not in graph.inputs
                                         and not graph.tensors[o].is_const])):
                for name in names:
                    t = graph.tensors[name]
                    nbytes = max(int(t.nbytes), 1)
                    if self.integrated:
                        host, dev = device.mapped_host(nbytes)
                    else:
                        host, dev = device.pinned_host(nbytes), device.empty(nbytes)
                    hv = host[:int(t.nbytes)].view(np.dtype(t.dtype)).reshape(t.shape)
                    dv = device.view(dev, 0, t.shape, t.dtype)
                    (slot.inputs if kind == "in" else slot.outputs).append((name, hv, dv))
                    bufs[name] = dv
            ctx = LaunchContext(graph, device, bufs, uploads, scratch)
            steps = []
            for k, n in enumerate(self.nodes):
                if si == 0 or k in io_nodes:
                    steps.append(prepare_steps(n, ctx))
                else:
                    steps.append(self.slots[0].steps[k])        # no graph I/O: the same bound launches
            slot.steps = steps
            slot.flat = [s for node_steps in steps for s in node_steps]
            slot.keep = ctx.keep
            slot.uploaded, slot.done = device.event(), device.event()
            if si == 0:
                self.notes = ctx.notes
        self.uploads = uploads
        self.compute_stream = device.stream()
        self.upload_stream = device.stream()
        self._next = 0
        #: a frame's launches replayed as one CUDA graph (launch overhead of one call instead of
        #: one per kernel); EDGE_INFER_CUDA_GRAPHS=0 keeps them one by one
        self.use_graphs = os.environ.get("EDGE_INFER_CUDA_GRAPHS", "1") != "0"
        self.launch_mode = f"{len(self.slots[0].flat)} launches one by one" + ("" if self.use_graphs else
                                                                               " (EDGE_INFER_CUDA_GRAPHS=0)")

    # -- running ---------------------------------------------------------------------------------
    def run_async(self, feeds: Dict[str, np.ndarray]) -> Pending:
        """Start one frame; returns at once (after copying the feeds into the slot's host buffers)."""
        slot = self.slots[self._next]
        self._next = (self._next + 1) % len(self.slots)
        if slot.pending is not None:
            slot.pending.result()                       # the slot's previous frame must be done
        dev = self.dev
        for name, host, _ in slot.inputs:
            np.copyto(host, feeds[name], casting="same_kind")
        if not self.integrated and slot.inputs:
            with self.upload_stream:
                for _, host, dv in slot.inputs:
                    dev.h2d_async(dv, host, self.upload_stream)
                slot.uploaded.record(self.upload_stream)
            self.compute_stream.wait_event(slot.uploaded)
        with self.compute_stream:
            slot.runs += 1
            if slot.runs == 2 and self.use_graphs:     # first run warmed modules, cuBLAS, caches
                slot.graph, why = dev.capture(self.compute_stream, slot.flat)
                self.launch_mode = (f"one CUDA graph per frame ({len(slot.flat)} launches)" if slot.graph
                                    is not None else f"{len(slot.flat)} launches one by one: {why}")
            if slot.graph is not None:
                slot.graph.launch(self.compute_stream)
            else:
                for step in slot.flat:
                    step()
            if not self.integrated:
                for _, host, dv in slot.outputs:
                    dev.d2h_async(host, dv, self.compute_stream)
            slot.done.record(self.compute_stream)
        slot.pending = Pending(self, slot, {k: v for k, v in feeds.items() if k in self.graph.outputs})
        return slot.pending

    def run(self, feeds):
        return self.run_async(feeds).result()

    def run_profiled(self, feeds):
        """Outputs and (node, op, seconds) per node, each node timed alone (synchronised)."""
        slot = self.slots[0]
        self._next = 1 % len(self.slots)
        for s in self.slots:
            if s.pending is not None:
                s.pending.result()
        for name, host, dv in slot.inputs:
            np.copyto(host, feeds[name], casting="same_kind")
            if not self.integrated:
                self.dev.h2d_async(dv, host, self.compute_stream)
        self.compute_stream.synchronize()
        times = []
        with self.compute_stream:
            for node, steps in zip(self.nodes, slot.steps):
                t0 = time.perf_counter()
                for s in steps:
                    s()
                self.compute_stream.synchronize()
                times.append((node.name, node.op, time.perf_counter() - t0))
            if not self.integrated:
                for _, host, dv in slot.outputs:
                    self.dev.d2h_async(host, dv, self.compute_stream)
            slot.done.record(self.compute_stream)
        slot.pending = Pending(self, slot, {k: v for k, v in feeds.items() if k in self.graph.outputs})
        return slot.pending.result(), times

    def timed_run(self, feeds) -> Dict[str, float]:
        """One synchronous frame in phases, for the transfer-share measurement: seconds spent
        writing the host buffers, uploading, computing and downloading."""
        slot = self.slots[0]
        for s in self.slots:
            if s.pending is not None:
                s.pending.result()
        clock = time.perf_counter
        t0 = clock()
        for name, host, _ in slot.inputs:
            np.copyto(host, feeds[name], casting="same_kind")
        t1 = clock()
        if not self.integrated:
            for _, host, dv in slot.inputs:
                self.dev.h2d_async(dv, host, self.compute_stream)
        self.compute_stream.synchronize()
        t2 = clock()
        with self.compute_stream:
            for s in slot.flat:
                s()
        self.compute_stream.synchronize()
        t3 = clock()
        if not self.integrated:
            for _, host, dv in slot.outputs:
                self.dev.d2h_async(host, dv, self.compute_stream)
        self.compute_stream.synchronize()
        outs = {name: np.array(host) for name, host, _ in slot.outputs}
        t4 = clock()
        return {"host_write": t1 - t0, "h2d": t2 - t1, "compute": t3 - t2, "d2h": t4 - t3, "outputs": outs}
