"""The kernels' signatures, read from the .cu sources, and the check of a launch's arguments.

Every kernel is ``extern "C" __global__ void name(...)`` with parameters of the types below
(kernels/common.cuh states the convention). CuPy passes a numpy scalar with its own width, so
a Python int or a float64 bound to an ``int`` / ``float`` parameter would be read as garbage on
the GPU; ``check_args`` refuses it on the host, at prepare, for CuPy and the emulator alike.
"""
from __future__ import annotations

import functools
import os
import re
from typing import Dict, List, NamedTuple, Sequence

import numpy as np

from ...errors import BackendError

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")

#: C scalar type -> numpy dtype of the value passed
SCALARS = {"int": np.dtype(np.int32), "i64": np.dtype(np.int64), "float": np.dtype(np.float32)}
#: C pointee type -> numpy dtype(s) of an array that may be passed
POINTEES = {"float": ("float32",), "int": ("int32",), "i64": ("int64",), "i8": ("int8",),
            "u8": ("uint8", "int8", "bool")}

_KERNEL_RE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)')
_MACRO_RE = re.compile(r"^(\w+)\((\w+),\s*(\w+)[,)]", re.M)
_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


class Param(NamedTuple):
    name: str
    ctype: str          # "float", "int", "i64" or the pointee type
    pointer: bool


class Kernel(NamedTuple):
    name: str
    source: str         # file name under kernels/
    params: List[Param]
    syncs: bool         # uses __syncthreads (the emulator runs its blocks' threads concurrently)


def cu_sources() -> List[str]:
    """The .cu files (full paths), sorted."""
    return sorted(os.path.join(KERNEL_DIR, f) for f in os.listdir(KERNEL_DIR) if f.endswith(".cu"))


def _parse_params(text: str, where: str) -> List[Param]:
    params = []
    for raw in (p.strip() for p in text.replace("\\", " ").split(",")):
        if not raw:
            continue
        m = re.fullmatch(r"(const\s+)?(\w+)\s*(\*)?\s*(\w+)", raw)
        if m is None:
            raise BackendError(f"{where}: cannot read kernel parameter {raw!r}")
        ctype, ptr, name = m.group(2), bool(m.group(3)), m.group(4)
        if (ptr and ctype not in POINTEES) or (not ptr and ctype not in SCALARS):
            raise BackendError(f"{where}: parameter {raw!r} has a type outside the convention")
        params.append(Param(name, ctype, ptr))
    return params


@functools.lru_cache(maxsize=None)
def kernels() -> Dict[str, Kernel]:
    """name -> Kernel for every kernel of every .cu file (macro-generated ones included)."""
    out: Dict[str, Kernel] = {}
    for path in cu_sources():
        src = _COMMENT_RE.sub("", open(path).read())
        fname = os.path.basename(path)
        found = [(m.start(), m.group(1), m.group(2)) for m in _KERNEL_RE.finditer(src)]
        bodies = {}
        for k, (start, name, params) in enumerate(found):
            end = found[k + 1][0] if k + 1 < len(found) else len(src)
            bodies[name] = (params, src[start:end])
        for name, (params, body) in list(bodies.items()):
            if name.isupper() or name == "NAME":              # a macro template: instantiate below
                del bodies[name]
                for mm in _MACRO_RE.finditer(src):
                    macro, inst, targs = mm.group(1), mm.group(2), mm.group(3)
                    if f"#define {macro}(NAME, T" not in src:
                        continue
                    ptext = re.sub(r"\bT\b", targs, params)
                    bodies[inst] = (ptext, body)
        for name, (params, body) in bodies.items():
            if name in out:
                raise BackendError(f"kernel {name!r} defined twice ({out[name].source}, {fname})")
            out[name] = Kernel(name, fname, _parse_params(params, f"{fname}:{name}"),
                               "__syncthreads" in body)
    return out


def check_args(kernel: str, args: Sequence) -> None:
    """Raise unless ``args`` match ``kernel``'s parameters one for one: numpy scalars of the
    exact width for scalars, arrays (numpy or CuPy) of the pointee's dtype for pointers."""
    k = kernels().get(kernel)
    if k is None:
        raise BackendError(f"no CUDA kernel named {kernel!r} in {KERNEL_DIR}")
    if len(args) != len(k.params):
        raise BackendError(f"{kernel}: {len(args)} arguments for {len(k.params)} parameters")
    for p, a in zip(k.params, args):
        if p.pointer:
            dt = getattr(a, "dtype", None)
            if dt is None or not hasattr(a, "shape") or np.dtype(dt).name not in POINTEES[p.ctype]:
                raise BackendError(f"{kernel}: parameter {p.name} wants a {p.ctype} array, got "
                                   f"{type(a).__name__} {getattr(a, 'dtype', '')}")
        else:
            if not isinstance(a, np.generic) or a.dtype != SCALARS[p.ctype]:
                raise BackendError(f"{kernel}: parameter {p.name} wants a numpy {SCALARS[p.ctype]}, "
                                   f"got {type(a).__name__} {getattr(a, 'dtype', '')}")
