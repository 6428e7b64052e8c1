"""OpenCL programs: the .cl sources in ``kernels/``, built once per device and cached on disk.

Each program is ``common.cl`` + one kernel file, built with the options below. A built
program's binary is stored as ``<cache>/opencl/<sha256>.bin``, the hash covering the device
name, its driver and platform versions, the program source and the build options, so a
changed kernel source (or a driver update) misses the cache and is rebuilt; later processes
load the binary (``cl.Program(ctx, devices, binaries)``) instead of compiling (cache root:
``cache_dir``). Programs are also kept per
(context, hash) in memory, so plans of one process share them.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Dict, Tuple

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
PROGRAMS = ("elementwise", "gemm", "conv", "pool", "tensor", "nn", "int8")

_built: Dict[Tuple[int, str], object] = {}
#: how the last ``program`` call got its program: "memory", "disk" or "source" (for tests)
last_origin: Dict[str, str] = {}


def cache_dir() -> str:
    """``$EDGE_INFER_CACHE_DIR``, else ``$XDG_CACHE_HOME/edge_infer``, else ``~/.cache/edge_infer``
    (the picker's cache root), + ``/opencl``."""
    root = os.environ.get("EDGE_INFER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "edge_infer")
    return os.path.join(root, "opencl")


def source(name: str) -> str:
    """The full source of program ``name``: the activation codes, the shared header and the
    kernel file."""
    with open(os.path.join(KERNEL_DIR, "activations.cl")) as f:       # the one activation table
        common = f.read()
    with open(os.path.join(KERNEL_DIR, "common.cl")) as f:
        common += f.read()
    with open(os.path.join(KERNEL_DIR, name + ".cl")) as f:
        return common + "\n" + f.read()


def build_options(device) -> str:
    """No fast-math: float results must track the CPU backend; divisions correctly rounded
    where the device can (QuantizeLinear's x / scale must round as numpy's does)."""
    import pyopencl as cl
    opts = []                         # OpenCL C 1.2 (every compiler's default): 1.1 devices build too
    if device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
        opts.append("-cl-fp32-correctly-rounded-divide-sqrt")
    return " ".join(opts)


def cache_key(device, src: str, options: str) -> str:
    h = hashlib.sha256()
    for part in (device.name, device.driver_version, device.platform.name, device.platform.version,
                 device.version, options, src):
        h.update(part.encode("utf-8", "replace"))
        h.update(b"\0")
    return h.hexdigest()


def program(ctx, device, name: str, src: str = None):
    """The built program ``name`` for ``device`` (memory cache, then disk cache, then source)."""
    import pyopencl as cl
    src = source(name) if src is None else src
    options = build_options(device)
    key = cache_key(device, src, options)
    mem_key = (id(ctx), key)
    prg = _built.get(mem_key)
    if prg is not None:
        last_origin[name] = "memory"
        return prg
    path = os.path.join(cache_dir(), key + ".bin")
    prg = None
    if os.path.isfile(path):
        try:
            with open(path, "rb") as f:
                binary = f.read()
            prg = cl.Program(ctx, [device], [binary]).build(options=options)
            last_origin[name] = "disk"
        except (cl.Error, OSError):
            prg = None                    # stale or corrupt binary: rebuild from source below
    if prg is None:
        prg = cl.Program(ctx, src).build(options=options, devices=[device])
        last_origin[name] = "source"
        _store(path, prg, device)
    _built[mem_key] = prg
    return prg


def _store(path: str, prg, device) -> None:
    import pyopencl as cl
    try:
        devs = prg.get_info(cl.program_info.DEVICES)
        bins = prg.get_info(cl.program_info.BINARIES)
        binary = bins[[d.int_ptr for d in devs].index(device.int_ptr)] if len(bins) > 1 else bins[0]
        if not binary:
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(binary)
        os.replace(tmp, path)             # atomic: concurrent builders never see half a file
    except (OSError, cl.Error, ValueError):
        pass                              # a cache we cannot write only costs a rebuild
