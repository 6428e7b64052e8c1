"""Runs that read the caller's input array in place instead of copying it into the arena.

A plan's native steps hold the addresses of their buffers in their argument structs. When
every step that reads a graph input is native, only those steps' fields that hold the input
buffer's address are pointed at the caller's array for one run (and back afterwards), so the
copy of the input into the arena is skipped. The arena keeps the input's bytes (later tensors
reuse them once the input is dead; only the readers' fields are redirected, never a later
tensor at the same address), so this costs no memory.

Where it is not safe the plan keeps copying: a reader that is a numpy step (it holds a view
of the arena), an input that is a graph output, an in-place output or a view placed in the
input's bytes, a pointer field into the middle of the input. What the struct scan cannot see
(pointer tables a kernel keeps elsewhere) is caught by ``verify``: one run on the arena copy,
one on a misaligned outside copy with the arena's input bytes poisoned, which must agree, and
the outside copy must come back unchanged.
"""
from __future__ import annotations

import ctypes
from typing import Dict, List, Optional, Tuple

import numpy as np

#: (struct, field name) pairs holding one input's address
Fields = List[Tuple[ctypes.Structure, str]]


def _scan(struct: ctypes.Structure, lo: int, hi: int, found: Fields, depth: int = 0) -> bool:
    """Collect ``struct``'s pointer fields (nested structs too) equal to ``lo``; False where
    a field points inside ``(lo, hi)`` (a kernel's pointer into the middle of the input)."""
    for name, ftype, *_ in struct._fields_:
        value = getattr(struct, name)
        if isinstance(value, ctypes.Structure):
            if depth > 4 or not _scan(value, lo, hi, found, depth + 1):
                return False
        elif ftype is ctypes.c_void_p and value is not None:
            if value == lo:
                found.append((struct, name))
            elif lo < value < hi:
                return False
    return True


def input_fields(graph, nodes, steps, buffers, arena_plan) -> Optional[Dict[str, Fields]]:
    """{input name: fields of its readers' native steps holding its buffer's address} for
    the inputs whose readers may read the caller's array in place; None where no input may."""
    out: Dict[str, Fields] = {}
    for name in graph.inputs:
        buf = buffers.get(name)
        if buf is None or name in graph.outputs or not buf.flags.c_contiguous or buf.size == 0:
            continue
        if name in arena_plan.aliases.values() or name in arena_plan.aliases or name in arena_plan.views or \
                any(root == name for root, _ in arena_plan.views.values()):
            continue
        readers = [k for k, n in enumerate(nodes) if name in n.inputs]
        lo = buf.ctypes.data
        found: Fields = []
        ok = bool(readers)
        for k in readers:
            keep = getattr(steps[k], "native_keep", None)
            if getattr(steps[k], "native_step", None) is None or keep is None or \
                    not isinstance(keep[1], ctypes.Structure):
                ok = False                       # a numpy step reads the arena's view
                break
            before = len(found)
            if not _scan(keep[1], lo, lo + buf.nbytes, found) or len(found) == before:
                ok = False                       # a pointer into the middle, or none found
                break
        if ok:
            out[name] = found
    return out or None


_char_at = ctypes.c_char.from_buffer


def address(arr: np.ndarray) -> int:
    """The data address of the C-contiguous ``arr``: through the buffer protocol where it is
    writable (0.3 us; ``arr.ctypes.data`` builds a helper object per call, 1.1 us)."""
    return ctypes.addressof(_char_at(arr)) if arr.flags.writeable else arr.ctypes.data


def point(fields: Fields, address: int) -> None:
    """Set every field of ``fields`` to ``address``."""
    for struct, name in fields:
        setattr(struct, name, address)


def _misaligned_copy(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``arr`` starting 16 bytes past a 64-byte boundary (as numpy's
    own allocations often do), so that a kernel assuming the arena's alignment shows here."""
    raw = np.empty(arr.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + 16
    out = raw[start:start + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    out[...] = arr
    return out


def verify(direct: Dict[str, Fields], buffers, run_steps, outputs, seed: int = 0) -> bool:
    """Whether the plan computes the same outputs reading the inputs in place: a run on
    fixed values copied into the arena against a run on outside copies of them with the
    arena's input bytes poisoned (NaN / 0xFF); the outside copies must stay unchanged."""
    values = {}
    for name in direct:
        buf = buffers[name]
        if buf.dtype.kind != "f":
            return False                         # integer inputs may be indices: no random values
        # varied values in [-2, 2] without numpy.random (whose import pulls in hashlib)
        values[name] = (2 * np.sin(np.arange(buf.size) * 0.7 + seed)).astype(buf.dtype).reshape(buf.shape)
        buf[...] = values[name]
    for step in run_steps:
        step()
    want = [np.array(b) for _, b in outputs]
    if not all(np.isfinite(w).all() for w in want if w.dtype.kind == "f"):
        return False                             # NaN outputs would hide the poison
    outside = {name: _misaligned_copy(v) for name, v in values.items()}
    try:
        for name, fields in direct.items():
            buffers[name].reshape(-1).view(np.uint8)[...] = 0xFF
            point(fields, outside[name].ctypes.data)
        for step in run_steps:
            step()
    finally:
        for name, fields in direct.items():
            point(fields, buffers[name].ctypes.data)
    got = [np.array(b) for _, b in outputs]
    same = all(np.array_equal(outside[n], values[n]) for n in values)
    return same and all(a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
                        for a, b in zip(want, got))
