"""Run the CUDA backend's kernels on the CPU: the .cu sources compiled as host C++.

This is how the kernels are checked on machines without a GPU (every test here): the very
same kernel source, with ``kernels/host_shim.h`` standing in for the CUDA built-ins, is built
with the host C++ compiler into a shared library; ``emu_launch`` runs the grid block by block.
Kernels without ``__syncthreads`` run their threads one after another; those with it run each
block's threads as fibers (ucontext) switching at every barrier, and a barrier that not every
thread of the block reaches is reported as an error (on a GPU it would hang or corrupt memory).

``EmulatedDevice`` implements the device interface of ``device.py`` with numpy arrays as
device memory and numpy's matmul in place of cuBLAS, so whole models run through the
backend's prepare/run code, launch for launch. What it cannot show: timing, warp-level
behaviour, memory coalescing, and races between blocks (blocks run one at a time).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from typing import Optional, Sequence

import numpy as np

from ...errors import BackendError
from .signatures import KERNEL_DIR, check_args, cu_sources, kernels

_RUNTIME = r"""
#include <ucontext.h>
#include <vector>
thread_local EmuDim3 threadIdx, blockIdx;
EmuDim3 blockDim, gridDim;

// Kernels with __syncthreads: the threads of a block run as fibers (ucontext) on one host
// thread, round-robin from barrier to barrier. A round in which some fibers stop at a barrier
// while others end the kernel means a barrier not every thread reaches (a hang or a race on a
// GPU): reported as an error.
static ucontext_t emu_main;
static std::vector<ucontext_t> emu_fibers;
static std::vector<int> emu_state;           // 0 running, 1 at a barrier, 2 done
static int emu_cur = -1;
static void (*emu_fn)(void**);
static void** emu_args;

void __syncthreads() {
    if (emu_cur < 0) return;                 // a kernel run serially never reaches here
    emu_state[emu_cur] = 1;
    swapcontext(&emu_fibers[emu_cur], &emu_main);
}

static void emu_fiber_entry() {
    emu_fn(emu_args);
    emu_state[emu_cur] = 2;
    swapcontext(&emu_fibers[emu_cur], &emu_main);
}

extern "C" int emu_launch(void (*fn)(void**), void** args, unsigned gx, unsigned gy, unsigned gz,
                          unsigned bx, unsigned by, unsigned bz, int threaded) {
    gridDim = {gx, gy, gz};
    blockDim = {bx, by, bz};
    unsigned nt = bx * by * bz;
    if (!threaded) {
        emu_cur = -1;
        for (unsigned z = 0; z < gz; ++z)
            for (unsigned y = 0; y < gy; ++y)
                for (unsigned x = 0; x < gx; ++x) {
                    blockIdx = {x, y, z};
                    for (unsigned t = 0; t < nt; ++t) {
                        threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
                        fn(args);
                    }
                }
        return 0;
    }
    const size_t stack = 128 * 1024;              // kernels need little; ASan builds more
    static char* stacks = nullptr;                // kept between launches, never zeroed
    static size_t stacks_size = 0;
    if (stacks_size < stack * nt) {
        delete[] stacks;
        stacks = new char[stack * nt];
        stacks_size = stack * nt;
    }
    emu_fibers.assign(nt, ucontext_t());
    emu_state.assign(nt, 0);
    emu_fn = fn;
    emu_args = args;
    int err = 0;
    for (unsigned z = 0; z < gz && !err; ++z)
        for (unsigned y = 0; y < gy && !err; ++y)
            for (unsigned x = 0; x < gx && !err; ++x) {
                blockIdx = {x, y, z};
                for (unsigned t = 0; t < nt; ++t) {
                    getcontext(&emu_fibers[t]);
                    emu_fibers[t].uc_stack.ss_sp = &stacks[t * stack];
                    emu_fibers[t].uc_stack.ss_size = stack;
                    emu_fibers[t].uc_link = nullptr;
                    makecontext(&emu_fibers[t], emu_fiber_entry, 0);
                    emu_state[t] = 0;
                }
                for (;;) {
                    int at_barrier = 0, done = 0;
                    for (unsigned t = 0; t < nt; ++t) {
                        if (emu_state[t] == 2) { ++done; continue; }
                        emu_state[t] = 0;
                        emu_cur = (int)t;
                        threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
                        swapcontext(&emu_main, &emu_fibers[t]);
                        if (emu_state[t] == 1) ++at_barrier; else ++done;
                    }
                    emu_cur = -1;
                    if (done == (int)nt) break;
                    if (at_barrier != (int)nt) { err = 1; break; }
                }
            }
    emu_cur = -1;
    return err ? -1 : 0;
}
"""

_SCALAR_C = {"int": ctypes.c_int32, "i64": ctypes.c_int64, "float": ctypes.c_float}
_lib = None
_lib_lock = threading.Lock()


def _source_text() -> str:
    parts = ['#include "host_shim.h"']
    parts += [f'#include "{os.path.basename(p)}"' for p in cu_sources()]
    parts.append(_RUNTIME)
    for k in kernels().values():
        casts = ", ".join(f"*({p.ctype}**)a[{i}]" if p.pointer else f"*({p.ctype}*)a[{i}]"
                          for i, p in enumerate(k.params))
        parts.append(f'extern "C" void emu__{k.name}(void** a) {{ {k.name}({casts}); }}')
    return "\n".join(parts) + "\n"


def compiler() -> Optional[str]:
    """The host C++ compiler used for the emulator (``$CXX``, g++ or clang++), or None."""
    for c in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if c and shutil.which(c):
            return shutil.which(c)
    return None


def build_library() -> str:
    """Compile (once, cached by content hash) and return the path of the emulator library."""
    cxx = compiler()
    if cxx is None:
        raise BackendError("the CUDA kernel emulator needs a host C++ compiler (g++ or clang++)")
    text = _source_text()
    extra = os.environ.get("EDGE_INFER_EMU_CFLAGS", "").split()     # e.g. -fsanitize=address
    h = hashlib.sha256((text + " ".join(extra)).encode())
    for p in cu_sources() + [os.path.join(KERNEL_DIR, f) for f in ("common.cuh", "activations.cuh", "host_shim.h")]:
        h.update(open(p, "rb").read())
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "edge_infer", "cuda_emulator")
    os.makedirs(cache, exist_ok=True)
    lib = os.path.join(cache, f"kernels_{h.hexdigest()[:16]}.so")
    if os.path.exists(lib):
        return lib
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "emu.cpp")
        with open(src, "w") as f:
            f.write(text)
        out = os.path.join(tmp, "emu.so")
        cmd = [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-w", "-I", KERNEL_DIR, *extra, src, "-o", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise BackendError("emulator build failed:\n" + r.stderr[-4000:])
        os.replace(out, lib)
    return lib


def library():
    global _lib
    with _lib_lock:
        if _lib is None:
            lib = ctypes.CDLL(build_library())
            lib.emu_launch.restype = ctypes.c_int
            lib.emu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_uint] * 6 + [ctypes.c_int]
            _lib = lib
    return _lib


class EmulatedKernel:
    """A kernel of the emulator library, called as CuPy's RawKernel is: ``k(grid, block, args)``."""

    def __init__(self, name: str):
        self.name = name
        self.info = kernels()[name]
        lib = library()
        self.fn = ctypes.cast(getattr(lib, "emu__" + name), ctypes.c_void_p)
        self.launch = lib.emu_launch

    def bind(self, grid: Sequence[int], block: Sequence[int], args: Sequence):
        """The launch as a closure over prebuilt ctypes arguments (the arrays must stay alive)."""
        check_args(self.name, args)
        vals = []
        for p, a in zip(self.info.params, args):
            if p.pointer:
                vals.append(ctypes.c_void_p(a.ctypes.data))
            else:
                vals.append(_SCALAR_C[p.ctype](a.item()))
        argv = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.addressof(v) for v in vals])
        g = tuple(int(v) for v in grid) + (1,) * (3 - len(grid))
        b = tuple(int(v) for v in block) + (1,) * (3 - len(block))
        threaded = int(self.info.syncs)
        keep = (vals, argv, args)
        fn, launch, name = self.fn, self.launch, self.name

        def run():
            if launch(fn, argv, *g, *b, threaded) != 0:
                raise BackendError(f"emulated kernel {name}: a __syncthreads barrier was not reached by "
                                   "every thread of a block")
            return keep
        return run

    def __call__(self, grid, block, args):
        self.bind(grid, block, args)()


class _Stream:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass

    def wait_event(self, event):
        pass


class _Event:
    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


class EmulatedDevice:
    """The device interface over host memory and the emulated kernels (see device.CupyDevice)."""

    name = "emulator"

    def __init__(self, integrated: bool = False, separate: Optional[bool] = None):
        #: pretend to be a Jetson-class device (mapped inputs/outputs) or a discrete GPU
        self.integrated = integrated
        #: every tensor in its own allocation instead of a view into the arena (still correct:
        #: sharing is only a saving), so that AddressSanitizer (EDGE_INFER_EMU_CFLAGS) sees a
        #: kernel running past one tensor into the next; default from EDGE_INFER_EMU_SEPARATE
        self.separate = bool(int(os.environ.get("EDGE_INFER_EMU_SEPARATE", "0"))) if separate is None else separate
        self._kernels = {}
        self._mapped = {}

    def describe(self) -> str:
        return f"CPU emulator of the CUDA kernels ({'integrated' if self.integrated else 'discrete'} mode)"

    def empty(self, nbytes: int) -> np.ndarray:
        raw = np.zeros(int(nbytes) + 256, np.uint8)
        start = (-raw.ctypes.data) % 256
        return raw[start:start + int(nbytes)]

    def view(self, base: np.ndarray, offset: int, shape, dtype) -> np.ndarray:
        dt = np.dtype(dtype)
        if self.separate and id(base) not in self._mapped:
            return np.zeros(tuple(int(s) for s in shape), dt)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        return base[offset:offset + n].view(dt).reshape(tuple(int(s) for s in shape))

    def upload(self, arr: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(arr).copy()

    def kernel(self, name: str) -> EmulatedKernel:
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = EmulatedKernel(name)
        return k

    def bind(self, name: str, grid, block, args):
        return self.kernel(name).bind(grid, block, args)

    def matmul(self, a, b, out):
        return lambda: np.matmul(a, b, out=out)

    def mapped_host(self, nbytes: int):
        """(host uint8 view, device uint8 array) of one block of mapped, pinned host memory."""
        buf = self.empty(nbytes)
        self._mapped[id(buf)] = buf              # views of it must alias: the host writes, kernels read
        return buf, buf

    def pinned_host(self, nbytes: int) -> np.ndarray:
        return self.empty(nbytes)

    def stream(self):
        return _Stream()

    def event(self):
        return _Event()

    def h2d_async(self, dst, src, stream):
        np.copyto(dst, src)

    def d2h_async(self, dst, src, stream):
        np.copyto(dst, src)

    def synchronize(self):
        pass

    def capture(self, stream, steps):
        return None, "the emulator runs launches one by one"