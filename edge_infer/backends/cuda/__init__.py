"""CUDA backend: CuPy RawModule kernels from kernels/*.cu, cuBLAS (cupy.matmul) for fp32 GEMMs.

Importing this package never imports CuPy; ``available()`` says why the backend cannot run
("cupy not installed", "no CUDA device: ..."). ``CudaBackend(device=EmulatedDevice())`` runs
the same kernels compiled for the CPU (emulator.py): that is how they are tested without a GPU.
See docs/cuda.md for what has and has not been verified.
"""
from __future__ import annotations

from typing import Optional

from ...errors import EdgeInferError
from ...ir import Graph, Node
from ..base import Backend
from .device import cupy_status, is_jetson
from .executor import CudaExecutable, LaunchContext, find_launcher, prepare_steps
from .registry import TABLE

_default_device = None


def default_device():
    """The process-wide CuPy device 0 (kernels compiled once per device, then cached)."""
    global _default_device
    if _default_device is None:
        from .device import CupyDevice
        _default_device = CupyDevice(0)
    return _default_device


class CudaBackend(Backend):
    """GPU kernels through CuPy (or the CPU emulator of them, when given as ``device``)."""

    name = "cuda"
    plans_memory = True

    def __init__(self, device=None):
        self._device = device
        #: the picker's microbenchmark of a real GPU runs in a child process (probe_guard)
        self.isolate_probe = device is None

    def available(self):
        if self._device is not None:
            return True, ""
        return cupy_status()

    def kernel_table(self):
        return TABLE

    def supports(self, node: Node, graph: Graph) -> bool:
        """Whether a launcher exists for the node's op and dtype and accepts its attributes and
        shapes (a sizing-only prepare of this node: no device needed)."""
        if node.op not in TABLE:
            return False
        names = [n for n in list(node.inputs) + list(node.outputs) if n]
        if not all(graph.tensors[n].is_static for n in names):
            return True                                 # decided at prepare, once shapes are known
        from .executor import sizing_pass
        try:
            sizing_pass(graph, [node])
        except EdgeInferError:
            return False
        return True

    def prepare(self, graph: Graph, threads: Optional[int] = None, **options) -> CudaExecutable:
        device = options.get("device") or self._device or default_device()
        return CudaExecutable(graph, device, slots=int(options.get("slots", 2)))


__all__ = ["CudaBackend", "CudaExecutable", "LaunchContext", "find_launcher", "prepare_steps", "is_jetson",
           "cupy_status", "TABLE"]
