"""The GPU side through CuPy: device detection, kernels, memory, streams and events.

Nothing here imports CuPy at module import: ``import_cupy`` does, on first use, and every
failure becomes a reason string for ``available()``.

Jetson-class devices (an integrated GPU sharing DRAM with the CPU) get graph inputs and outputs
in mapped, pinned host memory (``cudaHostAlloc(..., cudaHostAllocMapped)``): kernels read and
write it directly through its device pointer, so nothing is copied. A device counts as
integrated when CUDA says so (the ``Integrated`` attribute), or the board is a Jetson
(``/etc/nv_tegra_release``, or ``/proc/device-tree/model`` naming one).
"""
from __future__ import annotations

import ctypes
import os
from typing import Optional, Tuple

import numpy as np

from ...errors import BackendError
from .signatures import KERNEL_DIR, check_args, kernels

_cupy = None
_cupy_error: Optional[str] = None


def import_cupy():
    """The cupy module, or None (the reason is in ``cupy_status``)."""
    global _cupy, _cupy_error
    if _cupy is None and _cupy_error is None:
        try:
            import cupy
            _cupy = cupy
        except ImportError:
            _cupy_error = "cupy not installed (pip install 'edge-infer[cuda]', or cupy-cuda12x / cupy-cuda13x)"
        except Exception as e:                     # a broken install: wrong CUDA version, missing libs
            _cupy_error = f"cupy does not import: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return _cupy


def cupy_status() -> Tuple[bool, str]:
    """(usable?, why not): CuPy imports and sees at least one CUDA device (first asked in a
    child process, ``probe_guard``, so that a driver that aborts cannot take this one down)."""
    import importlib.util
    if importlib.util.find_spec("cupy") is not None:
        from ...probe_guard import guarded_probe
        first = guarded_probe("cuda")
        if not first.get("available"):
            return False, str(first.get("reason", "no CUDA device"))
    cp = import_cupy()
    if cp is None:
        return False, _cupy_error
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        return False, f"no CUDA device ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'driver error'})"
    if count < 1:
        return False, "no CUDA device"
    return True, ""


def is_jetson(root: str = "/") -> bool:
    """Whether the board under ``root`` is an NVIDIA Jetson (tests pass a fake root)."""
    if os.path.exists(os.path.join(root, "etc", "nv_tegra_release")):
        return True
    try:
        with open(os.path.join(root, "proc", "device-tree", "model"), "rb") as f:
            model = f.read().replace(b"\x00", b"").decode("utf-8", "replace")
    except OSError:
        return False
    return "jetson" in model.lower()


def module_source(source: str) -> str:
    """The text CuPy compiles for one .cu file: the file with common.cuh inlined, so that
    CuPy's on-disk kernel cache (keyed by the source text) is invalidated by any change to
    either file, and NVRTC needs no include path."""
    with open(os.path.join(KERNEL_DIR, source)) as f:
        code = f.read()
    with open(os.path.join(KERNEL_DIR, "common.cuh")) as f:
        header = f.read().replace("#pragma once", "")
    with open(os.path.join(KERNEL_DIR, "activations.cuh")) as f:
        header = header.replace('#include "activations.cuh"', f.read(), 1)
    if '#include "common.cuh"' not in code:
        raise BackendError(f"{source} does not include common.cuh")
    return code.replace('#include "common.cuh"', header, 1)


#: NVRTC options of every module (no fast math: fp32 results stay IEEE as the CPU's)
NVRTC_OPTIONS = ("--std=c++14",)


class CupyDevice:
    """One CUDA device through CuPy; the interface the executor uses (emulator.EmulatedDevice
    implements the same one on the CPU)."""

    name = "cuda"

    def __init__(self, device_id: int = 0, root: str = "/", zero_copy: Optional[bool] = None):
        """``zero_copy``: graph I/O in mapped host memory (None: on integrated devices only;
        True also works on a discrete GPU, where kernels then read host memory over the bus)."""
        ok, why = cupy_status()
        if not ok:
            raise BackendError(f"CUDA backend: {why}")
        cp = self.cp = import_cupy()
        self.device = cp.cuda.Device(device_id)
        self.device.use()
        attrs = self.device.attributes
        self.props = cp.cuda.runtime.getDeviceProperties(device_id)
        integrated = bool(attrs.get("Integrated", 0)) or is_jetson(root)
        #: zero-copy inputs/outputs need the device to map host memory
        can_map = bool(attrs.get("CanMapHostMemory", 1))
        self.integrated = (integrated if zero_copy is None else bool(zero_copy)) and can_map
        self._modules = {}
        self._functions = {}
        self._host_blocks = []

    def describe(self) -> str:
        name = self.props.get("name", b"")
        name = name.decode() if isinstance(name, bytes) else str(name)
        cc = f"{self.props.get('major', '?')}.{self.props.get('minor', '?')}"
        return f"{name} (compute {cc}, {'integrated, zero-copy I/O' if self.integrated else 'discrete'})"

    # -- kernels -------------------------------------------------------------------------
    def _module(self, source: str):
        mod = self._modules.get(source)
        if mod is None:
            # NVRTC compiles for this device's arch; CuPy caches the binary on disk per source
            mod = self._modules[source] = self.cp.RawModule(code=module_source(source), options=NVRTC_OPTIONS)
        return mod

    def kernel(self, name: str):
        fn = self._functions.get(name)
        if fn is None:
            info = kernels().get(name)
            if info is None:
                raise BackendError(f"no CUDA kernel named {name!r}")
            fn = self._functions[name] = self._module(info.source).get_function(name)
        return fn

    def bind(self, name: str, grid, block, args):
        """The launch, checked now, as a closure: run only launches (on the current stream)."""
        check_args(name, args)
        fn = self.kernel(name)
        grid, block, args = tuple(int(g) for g in grid), tuple(int(b) for b in block), tuple(args)
        return lambda: fn(grid, block, args)

    def matmul(self, a, b, out):
        matmul = self.cp.matmul
        return lambda: matmul(a, b, out=out)

    # -- memory --------------------------------------------------------------------------
    def empty(self, nbytes: int):
        return self.cp.empty((max(int(nbytes), 1),), self.cp.uint8)

    def view(self, base, offset: int, shape, dtype):
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        return base[offset:offset + n].view(dt).reshape(tuple(int(s) for s in shape))

    def upload(self, arr: np.ndarray):
        return self.cp.asarray(np.ascontiguousarray(arr))

    def pinned_host(self, nbytes: int) -> np.ndarray:
        """Page-locked host memory (fast, asynchronous copies), as a uint8 numpy array."""
        mem = self.cp.cuda.alloc_pinned_memory(max(int(nbytes), 1))
        self._host_blocks.append(mem)
        return np.frombuffer(mem, np.uint8, int(nbytes))

    def mapped_host(self, nbytes: int):
        """(host uint8 numpy array, device uint8 CuPy array) over one block of mapped, pinned
        host memory: what the host writes, the kernels read, with no copy."""
        rt = self.cp.cuda.runtime
        nbytes = max(int(nbytes), 1)
        ptr = rt.hostAlloc(nbytes, getattr(rt, "hostAllocMapped", 2))
        if hasattr(rt, "hostGetDevicePointer"):
            dptr = rt.hostGetDevicePointer(ptr, 0)
        else:
            dptr = rt.pointerGetAttributes(ptr).devicePointer
        self._host_blocks.append(_HostAlloc(rt, ptr))
        host = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))
        mem = self.cp.cuda.UnownedMemory(dptr, nbytes, owner=self._host_blocks[-1])
        dev = self.cp.ndarray((nbytes,), self.cp.uint8, self.cp.cuda.MemoryPointer(mem, 0))
        return host, dev

    # -- streams and copies ----------------------------------------------------------------
    def stream(self):
        return self.cp.cuda.Stream(non_blocking=True)

    def event(self):
        return self.cp.cuda.Event(disable_timing=False)

    # copies enqueue on ``stream`` and return at once (the host buffers are pinned or mapped);
    # the stream's order and the executor's events keep them apart from the kernels
    def h2d_async(self, dst, src: np.ndarray, stream) -> None:
        dst.data.copy_from_host_async(ctypes.c_void_p(src.ctypes.data), src.nbytes, stream)

    def d2h_async(self, dst: np.ndarray, src, stream) -> None:
        # not ndarray.get: by default it waits for the copy, which would stall the host until
        # the frame is computed and defeat the pipelining
        src.data.copy_to_host_async(ctypes.c_void_p(dst.ctypes.data), dst.nbytes, stream)

    def synchronize(self) -> None:
        self.device.synchronize()

    def capture(self, stream, steps):
        """(CUDA graph of ``steps`` as launched on ``stream``, "") or (None, why not). A step that
        allocates (CuPy's pool; cuBLAS through cupy.matmul could) would bake a pointer the pool
        hands out again into the graph, so any allocation during capture drops the graph."""
        allocations = []
        try:
            class _Count(self.cp.cuda.memory_hook.MemoryHook):
                name = "edge_infer_capture"

                def malloc_preprocess(self, **kwargs):
                    allocations.append(kwargs.get("size"))

            with _Count():
                stream.begin_capture()
                try:
                    for step in steps:
                        step()
                finally:
                    graph = stream.end_capture()
        except Exception as e:                     # a launch or library call refused capture
            return None, f"capture failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if allocations:
            return None, f"{len(allocations)} allocations during capture"
        return graph, ""


class _HostAlloc:
    """Owns one cudaHostAlloc block; freed with its last reference."""

    def __init__(self, rt, ptr: int):
        self.rt, self.ptr = rt, ptr

    def __del__(self):
        try:
            self.rt.freeHost(self.ptr)
        except Exception:
            pass
