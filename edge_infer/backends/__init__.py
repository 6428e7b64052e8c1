"""Backends and the registry of backends by name."""
from __future__ import annotations

from typing import Callable, Dict

from ..errors import BackendError
from .base import Backend, Executable


def _cpu() -> Backend:
    from .cpu import CpuBackend
    return CpuBackend()


#: name -> factory; later backends (native, opencl, cuda, litert) add themselves here
BACKENDS: Dict[str, Callable[[], Backend]] = {"cpu": _cpu}
BACKENDS["opencl"] = lambda: __import__(__name__ + ".opencl", fromlist=["OpenCLBackend"]).OpenCLBackend()
BACKENDS["litert"] = lambda: __import__(__name__ + ".litert", fromlist=["LiteRTBackend"]).LiteRTBackend()
BACKENDS["cuda"] = lambda: __import__(__name__ + ".cuda", fromlist=["CudaBackend"]).CudaBackend()


def get_backend(name: str) -> Backend:
    """The backend called ``name`` ("native": the CPU backend with its native kernels).
    ``"auto"`` here is the CPU backend: ``Runtime(backend="auto")`` chooses per model
    with ``backends.picker.pick``, which needs the graph."""
    if name == "auto":
        name = "cpu"
    name = {"native": "cpu"}.get(name, name)
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}")
    b = BACKENDS[name]()
    ok, why = b.available()
    if not ok:
        raise BackendError(f"backend {name!r} is not available here: {why}")
    return b


__all__ = ["Backend", "Executable", "BACKENDS", "get_backend"]
