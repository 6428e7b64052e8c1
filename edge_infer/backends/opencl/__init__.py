"""OpenCL backend (pyopencl): kernels from ``kernels/*.cl``, built once per device and cached
on disk (build.py); one planned activation buffer per plan, constants resident on the
device, kernels bound at prepare; a run writes the inputs, enqueues, reads the outputs.

Device: ``$EDGE_INFER_OPENCL_DEVICE`` (an index into the flattened platform/device list,
or a case-insensitive substring of "platform name device name"), else the first GPU,
else the first device.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

from ...errors import BackendError, EdgeInferError
from ...ir import Graph, Node
from ..base import Backend
from ..kernel_table import KernelTable
from .executable import VIEW_OPS, OpenCLExecutable, PrepareContext
from .registry import TABLE

_state = {}


def list_devices():
    """Every OpenCL device here as (platform, device); [] when pyopencl or drivers are missing."""
    import pyopencl as cl
    out = []
    for p in cl.get_platforms():
        try:
            out.extend((p, d) for d in p.get_devices())
        except cl.Error:
            continue
    return out


def choose_device():
    """The device to use (see the module docstring); raises BackendError when there is none."""
    try:
        import pyopencl  # noqa: F401
    except ImportError as e:
        raise BackendError(f"pyopencl is not installed ({e}); pip install pyopencl") from None
    try:
        devs = list_devices()
    except Exception as e:                    # no ICD loader / platform: pyopencl raises cl.LogicError
        raise BackendError(f"no OpenCL platform: {e}") from None
    if not devs:
        raise BackendError("no OpenCL device found (no platform or no device)")
    want = os.environ.get("EDGE_INFER_OPENCL_DEVICE", "").strip()
    if want:
        if want.isdigit():
            if int(want) >= len(devs):
                raise BackendError(f"EDGE_INFER_OPENCL_DEVICE={want}: only {len(devs)} device(s)")
            return devs[int(want)][1]
        for p, d in devs:
            if want.lower() in f"{p.name} {d.name}".lower():
                return d
        raise BackendError(f"EDGE_INFER_OPENCL_DEVICE={want!r} matches no device of: "
                           + "; ".join(f"{p.name} {d.name}" for p, d in devs))
    import pyopencl as cl
    for _, d in devs:
        if d.type & cl.device_type.GPU:
            return d
    return devs[0][1]


def _runtime():
    """(device, context, queue), made once per process for the chosen device."""
    import pyopencl as cl
    dev = choose_device()
    key = dev.int_ptr
    if key not in _state:
        ctx = cl.Context([dev])
        _state[key] = (dev, ctx, cl.CommandQueue(ctx, dev))
    return _state[key]


def _pinned(graph: Graph, names):
    """A graph of just ``names`` with symbolic dims set to 1 (a batch of one), so a node of an
    unspecialised graph can still be checked; None when some shape is not known at all."""
    from ...ir import Tensor
    g = Graph(graph.name)
    for n in names:
        t = graph.tensors[n]
        if t.shape is None:
            return None
        shape = tuple(d if isinstance(d, int) else 1 for d in t.shape)
        g.tensors[n] = Tensor(t.name, t.dtype, shape, t.data, t.quant)
    return g


class OpenCLBackend(Backend):
    """float32 and int8 kernels on one OpenCL device."""

    name = "opencl"
    plans_memory = True
    #: the picker's microbenchmark runs in a child process (probe_guard): the driver may crash
    isolate_probe = True

    def available(self) -> Tuple[bool, str]:
        from ...probe_guard import guarded_probe
        first = guarded_probe("opencl")       # a driver that aborts does so in a child process
        if not first.get("available"):
            return False, str(first.get("reason", "no OpenCL device"))
        try:
            dev = choose_device()
        except BackendError as e:
            return False, str(e)
        return True, f"{dev.platform.name.strip()}: {dev.name.strip()}"

    def device_name(self) -> str:
        dev = choose_device()
        return f"{dev.platform.name.strip()}: {dev.name.strip()}"

    def kernel_table(self) -> KernelTable:
        return TABLE

    def supports(self, node: Node, graph: Graph) -> bool:
        """True when this backend has a kernel for ``node`` as it is in ``graph``: a dry
        prepare (no device work) when the shapes are concrete, else the op name alone."""
        if node.op not in TABLE:
            return False
        names = [n for n in list(node.inputs) + list(node.outputs) if n]
        if node.op in VIEW_OPS:
            return node.op != "Dropout" or len(node.outputs) < 2 or not node.outputs[1]
        if not all(graph.tensors[n].is_static for n in names):
            graph = _pinned(graph, names)
            if graph is None:
                return True              # shapes unknown: the op is covered; prepare decides the rest
        pc = PrepareContext(graph, None, None, lambda name: (None, 0), dry=True)
        try:
            TABLE.prepare(node, pc)
        except (EdgeInferError, ValueError, KeyError, TypeError, IndexError):
            return False
        return True

    def prepare(self, graph: Graph, threads: Optional[int] = None, **options) -> OpenCLExecutable:
        from .ops import INPLACE
        dev, ctx, queue = _runtime()
        return OpenCLExecutable(graph, dev, ctx, queue, TABLE, INPLACE, options)


__all__ = ["OpenCLBackend", "OpenCLExecutable", "choose_device", "list_devices"]
